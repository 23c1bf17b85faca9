//! Installing and uninstalling a zone root (illumos) or rootfs (Linux).
//!
//! One code path for both: the zoneadm hook (`brand install`) and
//! `zinstall install` build an [`Install`] and call [`Install::run`]; a
//! daemon does the same. The library prints nothing: every step is an
//! [`Event`] handed to the caller (the hook prints it as an
//! `INFO: zinstall:` line), recorded in the slog [`Logger`] the caller
//! passes, and fired as a `step-start`/`step-done` probe pair. Every
//! failure is an [`InstallError`]: its [`Cause`] with the path and
//! operation, and the [`Stage`] that decides zoneadm's exit code.
//!
//! ```no_run
//! use zinstall_install::{Install, Profile};
//!
//! let profile = Profile::load(std::path::Path::new("/etc/zinstall/profile.toml"))?;
//! let mut show = |e: &zinstall_install::Event| println!("INFO: zinstall: {e}");
//! let summary = Install {
//!     zone: "web1".into(),
//!     zonepath: "/zones/web1".into(),
//!     profile,
//!     images: vec!["/var/tmp/app.tar.zst".into()],
//!     tunables: copier::Tunables::default(),
//!     log: slog::Logger::root(slog::Discard, slog::o!()),
//!     events: &mut show,
//!     cancel: None,
//!     pool: None,
//!     listener: None,
//!     platform: None,
//!     store: None,
//!     pull: Default::default(),
//!     progress: None,
//!     sync: true,
//! }
//! .run()?;
//! println!("{} bytes", summary.stats.bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The API: [`Install`] and [`Summary`]; [`uninstall`], [`attach`],
//! [`disposable`] and [`check_kind`]; [`profile::Profile`];
//! [`state::ZoneLock`] and the marker in [`state`]; [`log::open`], a
//! JSON-lines logger that never stops an install.
//!
//! Steps:
//!
//! 1. lock the zonepath; check the profile's trees, the baseline and
//!    every image (first member and kind) before writing anything;
//! 2. clean the root of an install that was interrupted;
//! 3. mark the zonepath `installing`; make `root` (0755);
//! 4. replicate each tree with the profile's link and prune rules;
//! 5. unpack the baseline, then each image layer in order;
//! 6. copy the host files;
//! 7. flush the root's filesystem to the disk ([`Install::sync`]);
//! 8. record what was laid out ([`manifest`]), for [`update`];
//!    mark the zonepath `installed`.
//!
//! # Failures and zoneadm's exit codes
//!
//! What zoneadm does with the hook's status decides what a failure must
//! return (see zinstall(7) for the whole table). 254
//! (`ZONE_SUBPROC_NOTCOMPLETE`) makes `zoneadm install` run
//! `cleanup_zonepath()`, which removes `ZONEPATH/root` (or destroys the
//! zonepath's dataset) and returns the zone to *configured*. Every other
//! failure (253, 255, a signal) leaves the zone *incomplete* and removes
//! nothing. So 254 is returned only when the zonepath holds nothing worth
//! keeping: no root, or an empty one, and none of zinstall's own files
//! (the marker is removed first, the lock on release). Whatever the
//! failure, [`Install::run`] checks that before it says 254, and says 255
//! otherwise: a root that is installed, that zinstall did not make, or
//! that another process is installing now is never handed to
//! `cleanup_zonepath()`. A failure after the root was started removes the
//! partial root itself, and is 254 if that worked. A killed install
//! leaves `installing`, which zoneadm sees as incomplete (a killed hook is
//! fatal); the next uninstall, or install, cleans it.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
mod event;
pub mod log;
pub mod manifest;
pub mod profile;
pub mod state;
pub mod update;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use copier::beneath::Root;
use copier::unpack::{self, UnpackOptions};
use copier::{Plan, Stats, Tunables};
use slog::{Logger, error, info, o};
use zinstall_archive::ArchiveKind;

pub use error::{Aftermath, Cause, InstallError, Keep, Stage};
pub use event::Event;
pub use profile::Profile;

/// The system-wide defaults file (defopen(3C) format) that the CLI, the
/// brand hook and the daemon read the engine's tunables from. The engine
/// takes every path from its caller; the system's place for this one is
/// kept here, below all three.
pub const DEFAULTS_FILE: &str = "/etc/default/zinstall";
use state::{State, ZoneLock};

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
    pub cancel: Option<copier::Cancel>,
    /// Do the copy and unpack jobs on this shared pool (a service's worker
    /// budget) instead of `tunables.copy_threads` workers of the
    /// install's own.
    pub pool: Option<copier::Pool>,
    /// Hears of each entry written into the root (`-v`), or in a
    /// [`preview`](Install::preview) of each that would be.
    pub listener: Option<std::sync::Arc<dyn copier::Listener>>,
    /// The platform an OCI image must be for (and the one chosen from a
    /// multi-platform index); `None`: the host's.
    pub platform: Option<copier::oci::Platform>,
    /// Where images named by registry reference (`REGISTRY/REPO:TAG`,
    /// `REGISTRY/REPO@sha256:...`) are pulled to: an OCI layout, shared
    /// with provision (`CACHE/oci`); `None`: such images are refused.
    pub store: Option<PathBuf>,
    /// How they are pulled.
    pub pull: zinstall_registry::PullOptions,
    /// Hears how far each step is: a tree's entries and bytes as they
    /// are copied (its size is not known beforehand), how far through
    /// each archive or layer blob an unpack is (its length is).
    pub progress: Option<std::sync::Arc<dyn copier::Progress>>,
    /// Flush the root's filesystem to the disk (`syncfs(2)`) before the
    /// install is marked complete, so that a power cut never leaves an
    /// installed zone with files whose data was never written. Off only
    /// for roots nobody needs after a crash (scratch and CI roots).
    pub sync: bool,
}

/// What an install did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Everything copied, linked and unpacked.
    pub stats: Stats,
    /// Notices from the engine, one per kind for the whole install.
    pub notices: Vec<copier::Notice>,
}

impl Install<'_> {
    /// Runs the install; see the crate docs for the steps and failures.
    pub fn run(&mut self) -> Result<Summary, InstallError> {
        let started = Instant::now();
        let zonepath = self.zonepath.clone();
        (self.events)(&Event::Installing {
            zone: self.zone.clone(),
            zonepath: zonepath.clone(),
        });
        self.choose_host_parts();
        info!(self.log, "install"; "zone" => &self.zone, "zonepath" => %zonepath.display(),
              "profile" => %self.profile.path.display(),
              "images" => slog::Serde(images_list(&self.images)));
        // Held to the end: the zonepath checked is the one worked in.
        let r = open_zonepath(&zonepath).and_then(|held| {
            let r = match ZoneLock::take(&zonepath) {
                Ok(lock) => {
                    let r = self.run_locked();
                    // Nothing of ours may stay where zoneadm will clean.
                    let r = match r {
                        Err(mut e) if e.zoneadm_status() == 254 => {
                            if let Err(source) = state::clear(&zonepath) {
                                e.stage = Stage::Partial;
                                e.aftermath =
                                    Some(Box::new(Aftermath::MarkerKept {
                                        path: zonepath.join(state::STATE),
                                        source,
                                    }));
                            }
                            Err(e)
                        }
                        other => other,
                    };
                    lock.release();
                    r
                }
                Err(e @ state::LockError::Held { .. }) => {
                    Err(InstallError::refused(Cause::Lock(e)))
                }
                Err(e) => Err(InstallError::before(Cause::Lock(e))),
            };
            drop(held);
            r.map_err(|e| settle(&zonepath, e))
        });
        match &r {
            Ok(s) => {
                let took = started.elapsed();
                (self.events)(&Event::Complete {
                    zone: self.zone.clone(),
                    stats: s.stats.clone(),
                    took,
                });
                let t = &s.stats;
                info!(self.log, "install complete"; "ms" => took.as_millis() as u64,
                      "files" => t.files + t.symlinks + t.hardlinks + t.specials,
                      "dirs" => t.dirs, "linked" => t.redirects, "bytes" => t.bytes);
            }
            Err(e) => error!(self.log, "install failed"; "error" => %e),
        }
        r
    }

    /// A dry run: every check [`run`](Install::run) makes before writing
    /// (the zonepath's state, the profile's trees, the baseline and each
    /// image's kind), then each step walked or read through without
    /// writing anything: the trees as their copies would walk them, each
    /// archive read to its end ([`unpack::survey`]), the host files.
    /// Events and the listener report what would be done; the summary
    /// counts it. Takes no lock and writes no log record: a dry run
    /// leaves the zonepath as it found it.
    pub fn preview(&mut self) -> Result<Summary, InstallError> {
        self.choose_host_parts();
        // A registry image's manifest and config are fetched into a store
        // of the preview's own, removed after: a dry run writes nothing
        // into the cache, and downloads no layer.
        let pulls = self
            .images
            .iter()
            .any(|i| zinstall_registry::reference_of(i).is_some());
        if !pulls {
            return self.preview_with();
        }
        let scratch = std::env::temp_dir().join(format!(
            "zinstall-preview.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let kept = self.store.replace(scratch.clone());
        let r = self.preview_with();
        self.store = kept;
        let _best_effort = std::fs::remove_dir_all(&scratch);
        r
    }

    /// Given images, keeps or drops what the profile makes of the host
    /// ([`Profile::images_over_host`]), and says which.
    fn choose_host_parts(&mut self) {
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

    fn preview_with(&mut self) -> Result<Summary, InstallError> {
        let root = self.zonepath.join("root");
        // An interrupted install's partial root is removed before the
        // real run writes: the preview takes the root as empty, as that
        // run will find it.
        let interrupted = self.check_state(&root)? == Some(State::Installing);
        if interrupted {
            (self.events)(&Event::CleaningInterrupted);
        }
        let archives = self.preflight()?;
        let mut sum = Summary::default();
        let copy_err =
            |step: String| move |source| Cause::Copy { step, source };
        // The layout step copies a staging tree: its top, every
        // directory named and every parent a directory or link needs.
        let p = &self.profile;
        if !p.links.is_empty() || !p.dirs.is_empty() {
            let mut dirs = std::collections::BTreeSet::new();
            let parents = p.links.iter().filter_map(|(l, _)| l.parent());
            for d in p.dirs.iter().map(|(d, _)| d.as_path()).chain(parents) {
                dirs.extend(
                    d.ancestors().filter(|a| !a.as_os_str().is_empty()),
                );
            }
            sum.stats.dirs += 1 + dirs.len() as u64;
            sum.stats.symlinks += p.links.len() as u64;
            if let Some(l) = &self.listener {
                for d in &dirs {
                    l.entry(d, &root.join(d), copier::EntryKind::Dir);
                }
                for (path, target) in &p.links {
                    l.entry(
                        target,
                        &root.join(path),
                        copier::EntryKind::Symlink,
                    );
                }
            }
        }
        for t in &self.profile.trees.clone() {
            let name = format!("/{}", t.display());
            (self.events)(&Event::Replicating { tree: name.clone() });
            let src = self.profile.source_root.join(t);
            let r = self
                .plan(&src, &root.join(t))
                .tunables(self.tunables)
                .rules(std::sync::Arc::clone(&self.profile.rules), t)
                .skip_special(true)
                .dry_run(true)
                .dry_run_as_if_empty(interrupted)
                .run()
                .map_err(copy_err(format!("replicate {name}")))
                .map_err(InstallError::before)?;
            (self.events)(&Event::Replicated {
                tree: name,
                stats: r.stats.clone(),
            });
            add(&mut sum.stats, &r.stats);
        }
        for a in &archives {
            if let Some(image) = &a.oci {
                if self.store.as_deref() == Some(image.location.as_path()) {
                    // Pulled: its layers are not downloaded to be looked
                    // at; the manifest and config were checked.
                    continue;
                }
                // Each layer read through as its unpack reads it: checked
                // against its digest and diff_id, its members counted.
                for i in 0..image.layers.len() {
                    let path = image.layer_path(i);
                    (self.events)(&Event::Unpacking {
                        path: path.clone(),
                        kind: a.kind,
                    });
                    let r = copier::oci::survey_layer(
                        image,
                        i,
                        &root,
                        &self.unpack_options(a),
                    )
                    .map_err(|source| {
                        InstallError::before(Cause::Step {
                            step: "check OCI image".into(),
                            source: Box::new(source),
                        })
                    })?;
                    (self.events)(&Event::Unpacked {
                        path,
                        stats: r.stats.clone(),
                        took: r.stats.elapsed,
                    });
                    add(&mut sum.stats, &r.stats);
                }
                continue;
            }
            (self.events)(&Event::Unpacking {
                path: a.path.clone(),
                kind: a.kind,
            });
            let opts = self.unpack_options(a);
            let r =
                unpack::survey(&a.path, &root, &opts).map_err(|source| {
                    InstallError::before(Cause::Step {
                        step: "unpack".into(),
                        source: Box::new(source),
                    })
                })?;
            (self.events)(&Event::Unpacked {
                path: a.path.clone(),
                stats: r.stats.clone(),
                took: r.stats.elapsed,
            });
            add(&mut sum.stats, &r.stats);
        }
        for f in &self.profile.host_files.clone() {
            (self.events)(&Event::CopyingHostFile { path: f.clone() });
            let dst = root.join(f.strip_prefix("/").unwrap_or(f));
            let r = self
                .plan(f, &dst)
                .merge(true)
                .dry_run(true)
                .dry_run_as_if_empty(interrupted)
                .run()
                .map_err(copy_err(format!("host file {}", f.display())))
                .map_err(InstallError::before)?;
            add(&mut sum.stats, &r.stats);
        }
        Ok(sum)
    }

    /// What the zonepath's marker and root allow: refuses an installed
    /// zone and a root zinstall did not start; returns the marker.
    fn check_state(&self, root: &Path) -> Result<Option<State>, InstallError> {
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

    fn run_locked(&mut self) -> Result<Summary, InstallError> {
        let root = self.zonepath.join("root");
        let st = self.check_state(&root)?;
        match st {
            Some(State::Installed) | None => {}
            Some(State::Installing) => {
                (self.events)(&Event::CleaningInterrupted);
                info!(self.log, "cleaning interrupted install");
                copier::fsutil::remove_tree(&root).map_err(|source| {
                    InstallError::partial(Cause::Step {
                        step: "cleaning up after an interrupted install".into(),
                        source: Box::new(source),
                    })
                })?;
            }
        }
        let archives = self.preflight()?;
        write_marker(&self.zonepath, State::Installing)
            .map_err(InstallError::before)?;
        // The manifest is recorded from the page cache while the flush
        // waits on the disk.
        let mut recorded = None;
        let r = self.lay_out(&root, &archives).and_then(|s| {
            let (trees, images) =
                (self.profile.trees.clone(), self.images.clone());
            let (flushed, pending) = std::thread::scope(|scope| {
                let pending = std::thread::Builder::new()
                    .name("manifest".into())
                    .spawn_scoped(scope, || {
                        manifest::pending(&root, &trees, &images)
                    });
                let flushed =
                    if self.sync { self.flush(&root) } else { Ok(()) };
                (flushed, pending.map(|h| h.join()))
            });
            recorded = Some(match pending {
                Ok(Ok(p)) => p,
                // No thread to spare: recorded here.
                Err(_) => manifest::pending(&root, &trees, &images),
                Ok(Err(_)) => manifest::Pending::failed(
                    &root,
                    "the recording thread panicked",
                ),
            });
            flushed.map(|()| s)
        });
        match r {
            Ok(s) => {
                if let Some(p) = recorded {
                    self.save_manifest(p);
                }
                write_marker(&self.zonepath, State::Installed)
                    .map_err(InstallError::partial)?;
                Ok(s)
            }
            Err(cause) => {
                // Leave nothing half-done behind: remove what was written.
                let cleaned =
                    copier::fsutil::remove_tree(&root).and_then(|()| {
                        state::clear(&self.zonepath).map_err(|e| {
                            copier::Error::io(
                                copier::Op::Remove,
                                self.zonepath.join(state::STATE),
                                e,
                            )
                        })
                    });
                let stage = match &cleaned {
                    Ok(()) => Stage::Cleaned,
                    Err(e) => {
                        error!(self.log, "cleanup failed"; "error" => %e);
                        Stage::Partial
                    }
                };
                Err(InstallError::new(stage, cause))
            }
        }
    }

    /// Everything checked before the root is touched. Returns the
    /// archives to unpack in order: the baseline, then the images, each
    /// with what its first member must say (`None`: a plain tarball).
    fn preflight(&mut self) -> Result<Vec<Archive>, InstallError> {
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

    /// Steps 3 to 6.
    fn lay_out(
        &mut self,
        root: &Path,
        archives: &[Archive],
    ) -> Result<Summary, Cause> {
        let mut sum = Summary::default();
        let step_err = |step: &str| {
            let step = step.to_string();
            move |source| Cause::Step {
                step,
                source: Box::new(source),
            }
        };
        // Made or opened without following a symlink at ZONEPATH/root;
        // everything below goes through Plan::within / unpack, which open
        // every directory beneath it the same way.
        let top = Root::create(root, 0o755).map_err(step_err("make root"))?;
        top.set_mode(0o755).map_err(step_err("make root"))?;
        if !self.profile.links.is_empty() || !self.profile.dirs.is_empty() {
            (self.events)(&Event::LayingOut);
            let t0 = self.step_start("layout");
            let r = layout(&self.profile, root, self.pool.as_ref());
            self.step_done("layout", t0, r.is_err());
            add(&mut sum.stats, &r?);
        }
        let trees = self.profile.trees.clone();
        for t in &trees {
            let name = format!("/{}", t.display());
            let src = self.profile.source_root.join(t);
            let dst = root.join(t);
            (self.events)(&Event::Replicating { tree: name.clone() });
            let step = format!("replicate {name}");
            let t0 = self.step_start(&step);
            let r = self
                .plan(&src, &dst)
                .within(root)
                .tunables(self.tunables)
                .rules(std::sync::Arc::clone(&self.profile.rules), t)
                .skip_special(true)
                .run();
            self.step_done(&step, t0, r.is_err());
            let report = r.map_err(|source| Cause::Copy {
                step: step.clone(),
                source,
            })?;
            let s = &report.stats;
            (self.events)(&Event::Replicated {
                tree: name.clone(),
                stats: s.clone(),
            });
            info!(self.log, "replicated"; "tree" => &name, "files" => s.files, "symlinks" => s.symlinks,
                  "linked" => s.redirects, "skipped" => s.skipped, "bytes" => s.bytes,
                  "ms" => s.elapsed.as_millis() as u64);
            merge_notices(&mut sum.notices, &report.notices);
            add(&mut sum.stats, s);
        }
        for a in archives {
            if let Some(image) = &a.oci {
                self.apply_oci(image, root, &mut sum)?;
                continue;
            }
            let (path, kind) = (a.path.clone(), a.kind);
            (self.events)(&Event::Unpacking {
                path: path.clone(),
                kind,
            });
            let step = format!("unpack {}", path.display());
            let t0 = self.step_start(&step);
            let opts = self.unpack_options(a);
            let r = unpack::unpack(&path, root, &opts);
            self.step_done(&step, t0, r.is_err());
            // The engine's error names the archive and the member.
            let r = r.map_err(|source| Cause::Step {
                step: "unpack".into(),
                source: Box::new(source),
            })?;
            let s = &r.stats;
            let took = t0.elapsed();
            (self.events)(&Event::Unpacked {
                path: path.clone(),
                stats: s.clone(),
                took,
            });
            info!(self.log, "unpacked"; "archive" => %path.display(), "files" => s.files,
                  "bytes" => s.bytes, "ms" => took.as_millis() as u64);
            merge_notices(&mut sum.notices, &r.notices);
            add(&mut sum.stats, s);
        }
        let host_files = self.profile.host_files.clone();
        for f in &host_files {
            (self.events)(&Event::CopyingHostFile { path: f.clone() });
            let rel = f.strip_prefix("/").unwrap_or(f);
            let dst = root.join(rel);
            let step = format!("host file {}", f.display());
            let t0 = self.step_start(&step);
            let src = match host_source(f, root) {
                Some(real) => {
                    (self.events)(&Event::HostFileByContent {
                        path: f.clone(),
                        real: real.clone(),
                    });
                    real
                }
                None => f.clone(),
            };
            // Beneath the root: a symlink an image planted on the way
            // (etc -> /host/dir) is refused and named; one at the file's
            // own name is replaced, never written through.
            let r = self.plan(&src, &dst).within(root).merge(true).run();
            self.step_done(&step, t0, r.is_err());
            let r = r.map_err(|source| Cause::Copy {
                step: step.clone(),
                source,
            })?;
            merge_notices(&mut sum.notices, &r.notices);
            add(&mut sum.stats, &r.stats);
        }
        for n in &sum.notices {
            (self.events)(&Event::Notice(n.clone()));
        }
        Ok(sum)
    }

    /// Flushes the root's filesystem: each file's writeback started as
    /// it was written (`COPY_WRITEBACK`), so this waits for the tail.
    fn flush(&mut self, root: &Path) -> Result<(), Cause> {
        (self.events)(&Event::Flushing);
        let t0 = self.step_start("flush");
        let r = std::fs::File::open(root)
            .and_then(|f| copier::fsutil::sync_fs(&f))
            .map_err(|e| Cause::Step {
                step: "flush".into(),
                source: Box::new(copier::Error::io(copier::Op::Sync, root, e)),
            });
        self.step_done("flush", t0, r.is_err());
        r
    }

    /// How an archive (or each layer of an OCI image) is unpacked, or
    /// surveyed by a dry run: the profile's bounds, this install's pool,
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
            durable: self.sync,
        }
    }

    /// [`Self::unpack_options_base`] for archive `a`: an OCI image's
    /// layers apply their whiteouts, a zinstall layer is checked for what
    /// it must be.
    fn unpack_options(&self, a: &Archive) -> UnpackOptions {
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
    fn oci_unpack_options(&self) -> UnpackOptions {
        UnpackOptions {
            whiteouts: unpack::Whiteouts::Apply,
            ..self.unpack_options_base()
        }
    }

    /// Applies an OCI image's layers in order, whiteouts and all; each
    /// layer is one unpack step, checked against its digest and diff_id.
    fn apply_oci(
        &mut self,
        image: &copier::oci::Image,
        root: &Path,
        sum: &mut Summary,
    ) -> Result<(), Cause> {
        for i in 0..image.layers.len() {
            let path = image.layer_path(i);
            (self.events)(&Event::Unpacking {
                path: path.clone(),
                kind: ArchiveKind::Layer,
            });
            let step = format!("unpack {}", path.display());
            let t0 = self.step_start(&step);
            let opts = self.oci_unpack_options();
            let r = copier::oci::unpack_layer(image, i, root, &opts);
            self.step_done(&step, t0, r.is_err());
            let r = r.map_err(|source| Cause::Step {
                step: "unpack".into(),
                source: Box::new(source),
            })?;
            let took = t0.elapsed();
            (self.events)(&Event::Unpacked {
                path: path.clone(),
                stats: r.stats.clone(),
                took,
            });
            info!(self.log, "unpacked"; "archive" => %path.display(), "files" => r.stats.files,
                  "bytes" => r.stats.bytes, "ms" => took.as_millis() as u64);
            merge_notices(&mut sum.notices, &r.notices);
            add(&mut sum.stats, &r.stats);
        }
        Ok(())
    }

    fn plan(&self, src: &Path, dst: &Path) -> Plan {
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
        p.durable(self.sync)
    }

    fn step_start(&self, step: &str) -> Instant {
        copier::probes::step_start(&self.zone, step);
        Instant::now()
    }

    fn step_done(&self, step: &str, t0: Instant, failed: bool) {
        let ns = t0.elapsed().as_nanos() as u64;
        copier::probes::step_done(&self.zone, step, ns, failed);
        info!(self.log, "step"; "step" => step, "ms" => ns / 1_000_000, "failed" => failed);
    }
}

/// The images as a list of strings: a JSON array in the log.
fn images_list(images: &[PathBuf]) -> Vec<String> {
    images.iter().map(|p| p.display().to_string()).collect()
}

fn read_marker(zonepath: &Path) -> Result<Option<State>, Cause> {
    state::read(zonepath).map_err(|source| Cause::Marker {
        op: "read",
        path: zonepath.join(state::STATE),
        source,
    })
}

fn write_marker(zonepath: &Path, st: State) -> Result<(), Cause> {
    state::write(zonepath, st).map_err(|source| Cause::Marker {
        op: match st {
            State::Installing => "mark installing",
            State::Installed => "mark installed",
        },
        path: zonepath.join(state::STATE),
        source,
    })
}

fn clear_marker(zonepath: &Path) -> Result<(), Cause> {
    state::clear(zonepath).map_err(|source| Cause::Marker {
        op: "remove",
        path: zonepath.join(state::STATE),
        source,
    })
}

/// Adds `from` to `into`, one notice per kind: counts summed, the first
/// example kept.
fn merge_notices(into: &mut Vec<copier::Notice>, from: &[copier::Notice]) {
    for n in from {
        match into.iter_mut().find(|m| m.kind == n.kind) {
            Some(m) => m.count += n.count,
            None => into.push(n.clone()),
        }
    }
}

fn add(total: &mut Stats, s: &Stats) {
    total.files += s.files;
    total.dirs += s.dirs;
    total.symlinks += s.symlinks;
    total.hardlinks += s.hardlinks;
    total.redirects += s.redirects;
    total.specials += s.specials;
    total.skipped += s.skipped;
    total.bytes += s.bytes;
    // The steps run one after another: their largest descriptor counts.
    total.fd_limit = total.fd_limit.max(s.fd_limit);
    total.fd_budget = total.fd_budget.max(s.fd_budget);
    total.fd_peak = total.fd_peak.max(s.fd_peak);
}

/// One archive to unpack.
struct Archive {
    path: PathBuf,
    /// Its place in the install.
    kind: ArchiveKind,
    /// What its `zinstall.json` says; `None` for a plain tarball.
    expect: Option<ArchiveKind>,
    /// An OCI image (`path` is its layout or archive), opened and checked.
    oci: Option<Box<copier::oci::Image>>,
}

/// The OCI image `arg` names (`IMAGE` or `IMAGE:REF`), told by content,
/// opened and checked (index, manifest, config, platform, layer types;
/// each layer's bytes are checked as it is unpacked); `None` if it is not
/// one. A registry reference is pulled into `store`: its manifest and
/// config now, each layer as it is unpacked.
pub fn oci_image(
    arg: &Path,
    platform: Option<&copier::oci::Platform>,
    store: Option<&Path>,
    pull: &zinstall_registry::PullOptions,
) -> Result<Option<copier::oci::Image>, Cause> {
    use copier::oci::{Form, Select};
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
                .unwrap_or_else(copier::oci::Platform::host),
        };
        return zinstall_registry::Registry::new(store)
            .with(pull)
            .open(&r, &select)
            .map(Some)
            .map_err(|e| match e {
                zinstall_registry::RegistryError::Image(e) => Cause::Step {
                    step: "check OCI image".into(),
                    source: Box::new(copier::Error::Oci(e)),
                },
                e => Cause::Pull(e),
            });
    }
    let (path, reference) = copier::oci::split_reference(arg);
    let refused = |source: copier::Error| Cause::Step {
        step: "check OCI image".into(),
        source: Box::new(source),
    };
    match copier::oci::sniff(&path) {
        // A compressed oci-archive is refused by the open, saying so.
        Ok(Some(Form::Layout | Form::Archive | Form::CompressedArchive(_))) => {
        }
        // Not an image (or unreadable): the tarball checks say why.
        Ok(None) | Err(_) => return Ok(None),
    }
    let select = Select {
        reference,
        platform: platform
            .cloned()
            .unwrap_or_else(copier::oci::Platform::host),
    };
    copier::oci::Image::open(&path, &select)
        .map(Some)
        .map_err(|e| refused(copier::Error::Oci(e)))
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

/// What `cleanup_zonepath()` may destroy without loss: `ZONEPATH/root`
/// absent or an empty directory, and none of zinstall's files there.
pub fn disposable(zonepath: &Path) -> Result<(), Keep> {
    let root = zonepath.join("root");
    match fs::symlink_metadata(&root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(Keep::Unreadable { root, source }),
        Ok(m) if !m.is_dir() => return Err(Keep::NotDirectory { root }),
        Ok(_) => {
            let empty = fs::read_dir(&root)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
            if !empty {
                return Err(Keep::NotEmpty { root });
            }
        }
    }
    match state::own_entries(zonepath).into_iter().next() {
        Some(path) => Err(Keep::Own { path }),
        None => Ok(()),
    }
}

/// The last word on a failed install's status: a failure that would
/// let zoneadm clean the zonepath (254) becomes 255 when the zonepath
/// holds anything worth keeping.
fn settle(zonepath: &Path, mut e: InstallError) -> InstallError {
    if e.zoneadm_status() != 254 {
        return e;
    }
    if let Err(why) = disposable(zonepath) {
        e.stage = Stage::Refused;
        e.aftermath = Some(Box::new(Aftermath::Kept(why)));
    }
    e
}

/// The profile's links and mount points: made in a private directory
/// with their exact modes, then merged into the root by the same writer
/// as everything else (never through a symlink in the root).
fn layout(
    p: &Profile,
    root: &Path,
    pool: Option<&copier::Pool>,
) -> Result<Stats, Cause> {
    let staging = private_dir().map_err(|source| Cause::Layout {
        what: "staging directory".into(),
        source,
    })?;
    let made = (|| -> Result<Stats, Cause> {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let top = staging.join("root");
        let failed =
            |what: String| move |source| Cause::Layout { what, source };
        fs::create_dir(&top)
            .and_then(|()| {
                fs::set_permissions(&top, fs::Permissions::from_mode(0o755))
            })
            .map_err(failed(top.display().to_string()))?;
        for (path, mode) in &p.dirs {
            let d = top.join(path);
            fs::create_dir_all(&d)
                .and_then(|()| {
                    fs::set_permissions(&d, fs::Permissions::from_mode(*mode))
                })
                .map_err(failed(format!("dir {}", path.display())))?;
        }
        for (path, target) in &p.links {
            let l = top.join(path);
            let what = || format!("link {}", path.display());
            if let Some(parent) = l.parent() {
                fs::create_dir_all(parent).map_err(failed(what()))?;
            }
            symlink(target, &l).map_err(failed(what()))?;
        }
        let mut plan = Plan::new(&top, root).within(root).merge(true);
        if let Some(pool) = pool {
            plan = plan.pool(pool.clone());
        }
        let r = plan.run().map_err(|source| Cause::Copy {
            step: "layout".into(),
            source,
        })?;
        Ok(r.stats)
    })();
    let _gone = fs::remove_dir_all(&staging);
    made
}
/// A new directory only this process uses, under the temporary
/// directory (mode 0700, made with a name no one else has).
fn private_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for i in 0..100u32 {
        let d = base
            .join(format!("zinstall-layout.{}.{t}.{i}", std::process::id()));
        match fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(
        "no free name for a private directory",
    ))
}

/// A host file that is a symlink whose target the root lacks (such as
/// `/etc/os-release` → `../usr/lib/os-release` in a root without
/// `usr/lib`) is copied by content: the file it resolves to on the host.
/// `None`: copy the host file as it is (a file, or a link that works in
/// the root, or one dangling on the host too).
fn host_source(f: &Path, root: &Path) -> Option<PathBuf> {
    let md = fs::symlink_metadata(f).ok()?;
    if !md.file_type().is_symlink() {
        return None;
    }
    let target = fs::read_link(f).ok()?;
    let rel = f.strip_prefix("/").unwrap_or(f);
    let in_root = match target.strip_prefix("/") {
        Ok(abs) => root.join(abs),
        Err(_) => root
            .join(rel.parent().unwrap_or(Path::new("")))
            .join(&target),
    };
    // Only read: what the root holds decides between a link and a copy.
    if in_root.exists() {
        return None;
    }
    fs::canonicalize(f).ok()
}

/// Opens the zonepath only if nobody but root could have redirected it
/// ([`copier::trusted::open_dir`]): not a symlink, no directory on the
/// way that another user may write (a sticky one only for entries root
/// owns), owned by root. Refused without touching anything otherwise,
/// and zoneadm is not told to clean it (that would follow the path too).
/// The CLI and the daemon make a missing zonepath through
/// [`prepare_zonepath`] first; the brand hook is given one zoneadm made.
pub fn open_zonepath(
    zonepath: &Path,
) -> Result<copier::beneath::Root, InstallError> {
    copier::trusted::open_dir(zonepath, None).map_err(|source| {
        InstallError::refused(Cause::Step {
            step: "zonepath".into(),
            source: Box::new(source),
        })
    })
}

/// A zonepath [`prepare_zonepath`] opened.
pub struct Zonepath {
    /// Its directory, held while the install runs.
    pub dir: copier::beneath::Root,
    /// True if this call made it (it was missing): a failed install
    /// removes it again ([`discard_zonepath`]).
    pub made: bool,
}

/// Makes the zonepath (0700) if missing and sets it to 0700 through its
/// descriptor, so that nobody else walks into the root while it is being
/// filled: what `zinstall install` and zinstalld do before an install.
/// Checked as [`open_zonepath`] says; nothing is made or changed when the
/// path is refused (a symlink, an unsafe directory on the way), nor when
/// an existing zonepath holds anything but zinstall's own entries and
/// `root` with no marker (an unrelated directory given by mistake).
pub fn prepare_zonepath(zonepath: &Path) -> Result<Zonepath, InstallError> {
    let fail = |source: copier::Error| {
        InstallError::refused(Cause::Step {
            step: "zonepath".into(),
            source: Box::new(source),
        })
    };
    let existed = fs::symlink_metadata(zonepath).is_ok();
    let dir = copier::trusted::open_dir(zonepath, Some(0o700)).map_err(fail)?;
    if existed {
        check_unrelated(zonepath)?;
    }
    dir.set_mode(0o700).map_err(fail)?;
    Ok(Zonepath {
        dir,
        made: !existed,
    })
}

/// Refuses an existing zonepath that holds entries zinstall does not
/// make and no marker. Read by path: [`copier::trusted::open_dir`] has
/// just checked that only root could have redirected it.
fn check_unrelated(zonepath: &Path) -> Result<(), InstallError> {
    let marked = read_marker(zonepath).map_err(InstallError::refused)?;
    if marked.is_some() {
        return Ok(());
    }
    let entries = fs::read_dir(zonepath).map_err(|source| {
        InstallError::refused(Cause::RootUnreadable {
            root: zonepath.to_path_buf(),
            source,
        })
    })?;
    for e in entries {
        let e = e.map_err(|source| {
            InstallError::refused(Cause::RootUnreadable {
                root: zonepath.to_path_buf(),
                source,
            })
        })?;
        let name = e.file_name();
        // `root` is judged by the install itself (empty, or refused as
        // foreign); the lock and the marker's leftovers are zinstall's.
        let ours = name == "root"
            || name.to_str().is_some_and(|n| n.starts_with(".zinstall."));
        if !ours {
            return Err(InstallError::refused(Cause::ForeignZonepath {
                zonepath: zonepath.to_path_buf(),
                entry: name,
            }));
        }
    }
    Ok(())
}

/// After a failed install, removes the zonepath [`prepare_zonepath`]
/// made, if nothing is left in it. Returns whether it was removed; an
/// error says why it is left.
pub fn discard_zonepath(zonepath: &Path) -> std::io::Result<()> {
    fs::remove_dir(zonepath)
}

/// Checks that an existing root is one this profile makes: the state
/// marker says installed, or (no marker) the root has every tree, link
/// and mount point the profile lays out, in which case it is adopted
/// (marked installed). Used by the `attach` hook.
pub fn attach(
    zonepath: &Path,
    profile: &Profile,
    log: &Logger,
    events: &mut dyn FnMut(&Event),
) -> Result<(), InstallError> {
    let log = log.new(o!("zonepath" => zonepath.display().to_string()));
    info!(log, "attach");
    let _zonepath = open_zonepath(zonepath)?;
    let lock = ZoneLock::take(zonepath)
        .map_err(|e| InstallError::refused(Cause::Lock(e)))?;
    let root = zonepath.join("root");
    let r = (|| {
        let st = read_marker(zonepath).map_err(InstallError::refused)?;
        if st == Some(State::Installing) {
            return Err(InstallError::refused(Cause::Interrupted {
                zonepath: zonepath.to_path_buf(),
            }));
        }
        let md = fs::symlink_metadata(&root).map_err(|source| {
            InstallError::refused(Cause::NoRoot {
                root: root.clone(),
                source,
            })
        })?;
        if !md.is_dir() {
            return Err(InstallError::refused(Cause::RootNotDirectory {
                root: root.clone(),
            }));
        }
        let mut missing = Vec::new();
        for t in &profile.trees {
            if !fs::symlink_metadata(root.join(t)).is_ok_and(|m| m.is_dir()) {
                missing.push(format!("tree {}", t.display()));
            }
        }
        for (path, target) in &profile.links {
            if fs::read_link(root.join(path)).ok().as_deref() != Some(target) {
                missing.push(format!(
                    "link {} -> {}",
                    path.display(),
                    target.display()
                ));
            }
        }
        for (path, _) in &profile.dirs {
            if !fs::symlink_metadata(root.join(path)).is_ok_and(|m| m.is_dir())
            {
                missing.push(format!("directory {}", path.display()));
            }
        }
        if !missing.is_empty() {
            return Err(InstallError::refused(Cause::NotProfileRoot {
                root: root.clone(),
                profile: profile.path.clone(),
                missing,
            }));
        }
        if st.is_none() {
            events(&Event::Adopting { root: root.clone() });
            write_marker(zonepath, State::Installed)
                .map_err(InstallError::refused)?;
        }
        events(&Event::Attached { root: root.clone() });
        Ok(())
    })();
    lock.release();
    match &r {
        Ok(()) => info!(log, "attach complete"),
        Err(e) => error!(log, "attach refused"; "error" => %e),
    }
    r
}

/// Removes an installed (or partly installed) zone root, and zinstall's
/// files with it, so the zonepath is left empty of them.
///
/// Safe without any flag: a root is removed only when the zonepath's
/// marker says zinstall made it (installed, or installing: the partial
/// root of an interrupted install), or when there is nothing in it to
/// lose (no root, an empty one). A root with content and no marker is
/// kept unless `foreign` says to remove it anyway. zoneadm's `-F` only
/// skips its own question and never means `foreign`.
pub fn uninstall(
    zonepath: &Path,
    foreign: bool,
    log: &Logger,
    events: &mut dyn FnMut(&Event),
) -> Result<(), InstallError> {
    let log = log.new(o!("zonepath" => zonepath.display().to_string()));
    info!(log, "uninstall"; "foreign" => foreign);
    if !zonepath.exists() {
        events(&Event::NothingToRemove {
            zonepath: zonepath.to_path_buf(),
        });
        return Ok(());
    }
    let _zonepath = open_zonepath(zonepath)?;
    let lock = ZoneLock::take(zonepath)
        .map_err(|e| InstallError::refused(Cause::Lock(e)))?;
    let root = zonepath.join("root");
    let r = (|| {
        let st = read_marker(zonepath).map_err(InstallError::refused)?;
        let md = match fs::symlink_metadata(&root) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(InstallError::refused(Cause::RootUnreadable {
                    root: root.clone(),
                    source,
                }));
            }
        };
        let empty = md.as_ref().is_some_and(|m| m.is_dir())
            && fs::read_dir(&root).is_ok_and(|mut d| d.next().is_none());
        if md.is_some() && !empty && st.is_none() && !foreign {
            return Err(InstallError::refused(Cause::ForeignRoot {
                root: root.clone(),
                removing: true,
            }));
        }
        events(&Event::Uninstalling {
            zonepath: zonepath.to_path_buf(),
        });
        // Never follows a symlink: a hostile root cannot point the
        // removal at host files.
        copier::fsutil::remove_tree(&root).map_err(|source| {
            InstallError::partial(Cause::Step {
                step: format!("remove {}", root.display()),
                source: Box::new(source),
            })
        })?;
        update::clear(zonepath).map_err(|e| {
            InstallError::partial(Cause::Step {
                step: "remove the roots and manifests of updates".into(),
                source: Box::new(copier::Error::io(
                    copier::Op::Remove,
                    zonepath,
                    std::io::Error::other(e.to_string()),
                )),
            })
        })?;
        clear_marker(zonepath).map_err(InstallError::partial)?;
        events(&Event::Uninstalled {
            zonepath: zonepath.to_path_buf(),
        });
        Ok(())
    })();
    // Released: the lock file goes too.
    lock.release();
    match &r {
        Ok(()) => info!(log, "uninstall complete"),
        Err(e) => error!(log, "uninstall failed"; "error" => %e),
    }
    r
}
