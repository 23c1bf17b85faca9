//! The install plan: what one install is ([`Install`]), and what it
//! checks and decides before the root is touched: the zonepath's state,
//! the trees, each archive and image, how each step copies or unpacks.
//! Shared by the steps and the dry run, which runs the same steps.

use std::fs;
use std::path::{Path, PathBuf};

use slog::Logger;
use zinstall_archive::ArchiveKind;
use zinstall_engine::unpack::{self, UnpackOptions};
use zinstall_engine::{Plan, Tunables};

use crate::error::{Cause, InstallError};
use crate::event::Event;
use crate::profile::Profile;
use crate::state::State;
use crate::zonepath::read_marker;

/// One install.
pub struct Install<'a> {
    /// The zone's name (or the zonepath's, on Linux).
    pub zone: String,
    /// The zonepath; the root is `zonepath/root`.
    pub zonepath: PathBuf,
    /// What to install.
    pub profile: Profile,
    /// Image layers, applied in order after the baseline: tarballs, or
    /// OCI images (a layout directory or oci-archive, `IMAGE:REF` to name
    /// one in its index), whose layers are applied in order with their
    /// whiteouts.
    pub images: Vec<PathBuf>,
    /// The engine's knobs.
    pub tunables: Tunables,
    /// The structured log.
    pub log: Logger,
    /// Hears of each step as it happens.
    pub events: &'a mut dyn FnMut(&Event),
    /// Stops the install at its next entry when raised; the partial root
    /// is removed as after any failure.
    pub cancel: Option<zinstall_engine::Cancel>,
    /// Do the copy and unpack jobs on this shared pool (a service's worker
    /// budget) instead of `tunables.copy_threads` workers of the
    /// install's own.
    pub pool: Option<zinstall_engine::Pool>,
    /// Hears of each entry written into the root (`-v`), or in a
    /// [`dry_run`](Install::dry_run) of each that would be.
    pub listener: Option<std::sync::Arc<dyn zinstall_engine::Listener>>,
    /// The platform an OCI image must be for (and the one chosen from a
    /// multi-platform index); `None`: the host's.
    pub platform: Option<zinstall_engine::oci::Platform>,
    /// Where images named by registry reference (`REGISTRY/REPO:TAG`,
    /// `REGISTRY/REPO@sha256:...`) are pulled to: an OCI layout, shared
    /// with provision (`CACHE/oci`); `None`: such images are refused.
    pub store: Option<PathBuf>,
    /// How they are pulled.
    pub pull: zinstall_registry::PullOptions,
    /// Hears how far each step is: a tree's entries and bytes as they
    /// are copied (its size is not known beforehand), how far through
    /// each archive or layer blob an unpack is (its length is).
    pub progress: Option<std::sync::Arc<dyn zinstall_engine::Progress>>,
    /// Flush the root's filesystem to the disk (`syncfs(2)`) before the
    /// install is marked complete, so that a power cut never leaves an
    /// installed zone with files whose data was never written. Off only
    /// for roots nobody needs after a crash (scratch and CI roots).
    pub sync: bool,
    /// For a root written only to be stored elsewhere (a composefs
    /// install's staging tree): each unpacked file is hashed by this too,
    /// as it is written, and [`Summary::contents`] hands the hashes over;
    /// no manifest is recorded and no archive's SHA-256 taken, as the
    /// root is not kept to be updated.
    ///
    /// [`Summary::contents`]: crate::Summary::contents
    pub objects: Option<zinstall_engine::contents::ObjectHasher>,
}

impl Install<'_> {
    /// Given images, keeps or drops what the profile makes of the host
    /// ([`Profile::images_over_host`]), and says which.
    pub(crate) fn choose_host_parts(&mut self) {
        if self.images.is_empty() || !self.profile.has_host_parts() {
            return;
        }
        let profile = self.profile.path.clone();
        if self.profile.lays_images_over_host() {
            let trees = self
                .profile
                .trees
                .iter()
                .map(|t| format!("/{}", t.display()))
                .collect();
            (self.events)(&Event::ImagesOverHost { trees, profile });
        } else {
            self.profile = self.profile.for_images();
            (self.events)(&Event::ImagesAlone { profile });
        }
    }

    /// What the zonepath's marker and root allow: refuses an installed
    /// zone and a root zinstall did not start; returns the marker.
    pub(crate) fn check_state(
        &self,
        root: &Path,
    ) -> Result<Option<State>, InstallError> {
        // An unreadable marker is not ours to judge: keep everything.
        let st = read_marker(&self.zonepath).map_err(InstallError::refused)?;
        match st {
            Some(State::Installed) => {
                Err(InstallError::refused(Cause::AlreadyInstalled {
                    zonepath: self.zonepath.clone(),
                }))
            }
            Some(State::Installing) => Ok(st),
            None => {
                if fs::symlink_metadata(root).is_ok_and(|m| !m.is_dir()) {
                    return Err(InstallError::refused(
                        Cause::RootNotDirectory {
                            root: root.to_path_buf(),
                        },
                    ));
                }
                if fs::read_dir(root).is_ok_and(|mut d| d.next().is_some()) {
                    return Err(InstallError::refused(Cause::ForeignRoot {
                        root: root.to_path_buf(),
                        removing: false,
                    }));
                }
                Ok(None)
            }
        }
    }

    /// Everything checked before the root is touched. Returns the
    /// archives to unpack in order: the baseline, then the images, each
    /// with what its first member must say (`None`: a plain tarball).
    pub(crate) fn preflight(&mut self) -> Result<Vec<Archive>, InstallError> {
        let p = &self.profile;
        for t in &p.trees {
            let src = p.source_root.join(t);
            if !src.is_dir() {
                return Err(InstallError::before(Cause::TreeMissing {
                    tree: src,
                    profile: p.path.clone(),
                }));
            }
        }
        let mut archives = Vec::new();
        if let Some(b) = &p.baseline {
            match b.find() {
                Some(path) => {
                    let expect = check_kind(&path, ArchiveKind::Baseline)
                        .map_err(InstallError::before)?;
                    archives.push(Archive {
                        path,
                        kind: ArchiveKind::Baseline,
                        expect,
                        oci: None,
                    });
                }
                None if b.required => {
                    return Err(InstallError::before(Cause::BaselineMissing {
                        file: b.file.clone(),
                        search: b.search.clone(),
                        profile: p.path.clone(),
                    }));
                }
                None => {}
            }
        }
        for img in &self.images {
            // A pulled blob is bounded as an archive is, and stops with
            // the install.
            let pull = zinstall_registry::PullOptions {
                cancel: self
                    .pull
                    .cancel
                    .clone()
                    .or_else(|| self.cancel.clone()),
                max_blob_size: Some(self.profile.max_archive_bytes),
                ..self.pull.clone()
            };
            if let Some(image) = oci_image(
                img,
                self.platform.as_ref(),
                self.store.as_deref(),
                &pull,
            )
            .map_err(InstallError::before)?
            {
                if image.docker_archive
                    && zinstall_engine::oci::transport_name(img).is_none()
                {
                    (self.events)(&Event::Notice(docker_save_notice(&image)));
                }
                archives.push(Archive {
                    path: image.path.clone(),
                    kind: ArchiveKind::Layer,
                    expect: None,
                    oci: Some(Box::new(image)),
                });
                continue;
            }
            let expect = check_kind(img, ArchiveKind::Layer)
                .map_err(InstallError::before)?;
            archives.push(Archive {
                path: img.clone(),
                kind: ArchiveKind::Layer,
                expect,
                oci: None,
            });
        }
        Ok(archives)
    }

    /// How an archive (or each layer of an OCI image) is unpacked, or
    /// read through by a dry run: the profile's bounds, this install's pool,
    /// cancel and listener.
    fn unpack_options_base(&self) -> UnpackOptions {
        UnpackOptions {
            tunables: self.tunables,
            expect: None,
            allow_devices: self.profile.allow_devices,
            max_bytes: self.profile.max_archive_bytes,
            preserve_owner: None,
            cancel: self.cancel.clone(),
            pool: self.pool.clone(),
            listener: self.listener.clone(),
            whiteouts: Default::default(),
            progress: self.progress.clone(),
            durable: self.flushed_later(),
            contents: None,
            digest: false,
        }
    }

    /// [`Self::unpack_options_base`] for archive `a`: an OCI image's
    /// layers apply their whiteouts, a zinstall layer is checked for what
    /// it must be.
    pub(crate) fn unpack_options(&self, a: &Archive) -> UnpackOptions {
        match a.oci {
            Some(_) => self.oci_unpack_options(),
            None => UnpackOptions {
                expect: a.expect,
                ..self.unpack_options_base()
            },
        }
    }

    /// For each layer of an OCI image: whiteouts applied onto the layers
    /// below.
    pub(crate) fn oci_unpack_options(&self) -> UnpackOptions {
        UnpackOptions {
            whiteouts: unpack::Whiteouts::Apply,
            ..self.unpack_options_base()
        }
    }

    pub(crate) fn plan(&self, src: &Path, dst: &Path) -> Plan {
        let mut p = Plan::new(src, dst);
        if let Some(progress) = &self.progress {
            // A tree: its size is not known before it is walked.
            progress.begin(None);
            p = p.progress(std::sync::Arc::clone(progress));
        }
        if let Some(l) = &self.listener {
            p = p.listener(std::sync::Arc::clone(l));
        }
        if let Some(c) = &self.cancel {
            p = p.cancel(c.clone());
        }
        if let Some(pool) = &self.pool {
            p = p.pool(pool.clone());
        }
        p.durable(self.flushed_later())
    }

    /// Whether the root's data is flushed once written: by the install
    /// (`sync`), or by the store a staging root's files go to
    /// (`objects`). Its writeback then starts while the run goes on.
    fn flushed_later(&self) -> bool {
        self.sync || self.objects.is_some()
    }
}

/// Whether the install's steps write the root or, in a
/// [`dry run`](Install::dry_run), record what they would write: the same
/// steps in the same order either way, each deciding at its write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Writes {
    /// The root is made and written; log and probe records are kept.
    Make,
    /// Nothing is written: each step reads its source through and counts
    /// what it would write. `as_if_empty`: the root is taken as empty, as
    /// the real run finds it once it has removed an interrupted
    /// install's partial root.
    Record {
        /// Take the root as empty.
        as_if_empty: bool,
    },
}

impl Writes {
    /// Whether the steps write.
    pub(crate) fn makes(self) -> bool {
        self == Writes::Make
    }
}

/// One archive to unpack.
pub(crate) struct Archive {
    pub(crate) path: PathBuf,
    /// Its place in the install.
    pub(crate) kind: ArchiveKind,
    /// What its `zinstall.json` says; `None` for a plain tarball.
    pub(crate) expect: Option<ArchiveKind>,
    /// An OCI image (`path` is its layout or archive), opened and checked.
    pub(crate) oci: Option<Box<zinstall_engine::oci::Image>>,
}

/// The OCI image `arg` names (`IMAGE` or `IMAGE:REF`), told by content,
/// opened and checked (index, manifest, config, platform, layer types;
/// each layer's bytes are checked as it is unpacked); `None` if it is not
/// one. A registry reference is pulled into `store`: its manifest and
/// config now, each layer as it is unpacked.
pub fn oci_image(
    arg: &Path,
    platform: Option<&zinstall_engine::oci::Platform>,
    store: Option<&Path>,
    pull: &zinstall_registry::PullOptions,
) -> Result<Option<zinstall_engine::oci::Image>, Cause> {
    use zinstall_engine::oci::{Form, Select};
    if let Some(r) = zinstall_registry::reference_of(arg) {
        let r = r.map_err(Cause::Pull)?;
        let Some(store) = store else {
            return Err(Cause::NoStore {
                reference: r.to_string(),
            });
        };
        let select = Select {
            reference: None,
            platform: platform
                .cloned()
                .unwrap_or_else(zinstall_engine::oci::Platform::host),
        };
        return zinstall_registry::Registry::new(store)
            .with(pull)
            .open(&r, &select)
            .map(Some)
            .map_err(|e| match e {
                zinstall_registry::RegistryError::Image(e) => Cause::Step {
                    step: "check OCI image".into(),
                    source: Box::new(zinstall_engine::Error::Oci(e)),
                },
                e => Cause::Pull(e),
            });
    }
    let (path, reference) = zinstall_engine::oci::split_reference(arg);
    let refused = |source: zinstall_engine::Error| Cause::Step {
        step: "check OCI image".into(),
        source: Box::new(source),
    };
    // A transport says what the path is: the open says why it is not.
    let named = zinstall_engine::oci::transport_name(arg).is_some();
    match zinstall_engine::oci::sniff(&path) {
        // A compressed oci-archive is refused by the open, saying so.
        Ok(Some(
            Form::Layout
            | Form::Archive
            | Form::DockerArchive
            | Form::CompressedArchive(_),
        )) => {}
        _ if named => {}
        // Not an image (or unreadable): the tarball checks say why.
        Ok(None) | Err(_) => return Ok(None),
    }
    let select = Select {
        reference,
        platform: platform
            .cloned()
            .unwrap_or_else(zinstall_engine::oci::Platform::host),
    };
    zinstall_engine::oci::Image::open(&path, &select)
        .map(Some)
        .map_err(|e| refused(zinstall_engine::Error::Oci(e)))
}

/// What is said of a path that turned out to be a `docker save` archive:
/// its image is installed, not its files.
fn docker_save_notice(
    image: &zinstall_engine::oci::Image,
) -> zinstall_engine::Notice {
    zinstall_engine::Notice {
        kind: zinstall_engine::NoticeKind::ArchiveQuirk(format!(
            "{} is a docker-archive (as docker save writes it): installing \
             the image it holds, not the archive's files (name it \
             docker-archive:FILE to say so)",
            image.path.display()
        )),
        count: 1,
        example: image.path.clone(),
    }
}

/// Tells a zinstall archive from a plain rootfs tarball by its first
/// member, without unpacking anything: `Some(kind)` for a zinstall
/// archive of `kind` (`zinstall.json` first, then `root/`), `None` for a
/// plain tar archive (tar, tar.gz, tar.zst, tar.xz of a root, as Debian,
/// Alpine and most rootfs tarballs come). A zinstall archive of the other
/// kind, or a file that is not a readable tar archive, is refused.
pub fn check_kind(
    path: &Path,
    kind: ArchiveKind,
) -> Result<Option<ArchiveKind>, Cause> {
    let found = unpack::peek_kind(path).map_err(|source| Cause::Step {
        step: "check archive".into(),
        source: Box::new(source),
    })?;
    match found {
        Some(k) if k == kind => Ok(Some(k)),
        Some(k) => Err(Cause::WrongArchive {
            path: path.to_path_buf(),
            found: k,
            expected: kind,
        }),
        None => Ok(None),
    }
}
