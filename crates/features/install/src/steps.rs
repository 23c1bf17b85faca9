//! The install's steps, under the zonepath's lock: the root made, the
//! trees replicated, the archives unpacked, the host files copied, the
//! root flushed and recorded ([`crate::manifest`]), the marker moved
//! along; and a failure's partial root removed. The dry run goes
//! through the same steps, recording instead of writing ([`Writes`]).

use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use slog::{error, info};
use zinstall_archive::ArchiveKind;
use zinstall_engine::beneath::Root;
use zinstall_engine::unpack::{self, UnpackOptions};
use zinstall_engine::{Plan, Stats};

use crate::error::{Aftermath, Cause, InstallError, Stage};
use crate::event::Event;
use crate::manifest::{self, ArchiveRecord, MANIFEST, Pending, Recipe};
use crate::plan::{Archive, Install, Writes};
use crate::profile::Profile;
use crate::recipe::{image_record, recipe_of, text};
use crate::state::{self, State, ZoneLock};
use crate::summary::{Summary, add, merge_notices};
use crate::zonepath::{open_zonepath, settle, write_marker};

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

    fn run_locked(&mut self) -> Result<Summary, InstallError> {
        let root = self.zonepath.join("root");
        let (archives, _) = self.begin(&root, Writes::Make)?;
        // The manifest is recorded from the page cache while the flush
        // waits on the disk.
        let mut recorded = None;
        // The archives' file contents, hashed as they are written: the
        // manifest does not read them again.
        let contents = std::sync::Arc::new(match &self.objects {
            Some(h) => {
                zinstall_engine::contents::Contents::with_objects(h.clone())
            }
            None => zinstall_engine::contents::Contents::new(),
        });
        let mut digests = std::collections::HashMap::new();
        let laid = self.lay_out(
            &root,
            &archives,
            &contents,
            &mut digests,
            Writes::Make,
        );
        if self.objects.is_some() {
            return self.finish_unrecorded(&root, &archives, laid, contents);
        }
        let r = laid.and_then(|s| {
            let recipe = self.recipe(&archives, &digests);
            // What the unpack recorded stands only where nothing else
            // wrote after it: a root of images alone.
            let recorded_by = recipe.images_only().then_some(&*contents);
            let (flushed, pending) = std::thread::scope(|scope| {
                let pending = std::thread::Builder::new()
                    .name("manifest".into())
                    .spawn_scoped(scope, || {
                        manifest::pending(&root, recipe.clone(), recorded_by)
                    });
                let flushed =
                    if self.sync { self.flush(&root) } else { Ok(()) };
                (flushed, pending.map(|h| h.join()))
            });
            recorded = Some(match pending {
                Ok(Ok(p)) => p,
                // No thread to spare: recorded here.
                Err(_) => manifest::pending(&root, recipe, Some(&contents)),
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
            Err(cause) => Err(self.undo(&root, cause)),
        }
    }

    /// Steps 1 to 3 between the lock and the root: the zonepath's state
    /// checked, an interrupted install's root cleaned, everything checked
    /// before writing, the zonepath marked `installing`. Returns the
    /// archives to unpack and how the steps write: a dry run over an
    /// interrupted install takes the root as empty, as the real run
    /// leaves it.
    pub(crate) fn begin(
        &mut self,
        root: &Path,
        writes: Writes,
    ) -> Result<(Vec<Archive>, Writes), InstallError> {
        let interrupted = self.check_state(root)? == Some(State::Installing);
        if interrupted {
            (self.events)(&Event::CleaningInterrupted);
            if writes.makes() {
                info!(self.log, "cleaning interrupted install");
                zinstall_engine::fsutil::remove_tree(root).map_err(
                    |source| {
                        InstallError::partial(Cause::Step {
                            step: "cleaning up after an interrupted install"
                                .into(),
                            source: Box::new(source),
                        })
                    },
                )?;
            }
        }
        let archives = self.preflight()?;
        let writes = match writes {
            Writes::Make => {
                write_marker(&self.zonepath, State::Installing)
                    .map_err(InstallError::before)?;
                Writes::Make
            }
            Writes::Record { as_if_empty } => Writes::Record {
                as_if_empty: as_if_empty || interrupted,
            },
        };
        Ok((archives, writes))
    }

    /// The end of an install whose root is stored elsewhere
    /// ([`Install::objects`]): no manifest; the contents handed over
    /// when they describe the whole root.
    fn finish_unrecorded(
        &mut self,
        root: &Path,
        archives: &[Archive],
        laid: Result<Summary, Cause>,
        contents: std::sync::Arc<zinstall_engine::contents::Contents>,
    ) -> Result<Summary, InstallError> {
        let r = laid.and_then(|s| {
            if self.sync { self.flush(root) } else { Ok(()) }.map(|()| s)
        });
        match r {
            Ok(mut s) => {
                let recipe = self.recipe(archives, &Default::default());
                s.contents = recipe.images_only().then_some(contents);
                write_marker(&self.zonepath, State::Installed)
                    .map_err(InstallError::partial)?;
                Ok(s)
            }
            Err(cause) => Err(self.undo(root, cause)),
        }
    }

    /// After a failure: what was written is removed, so nothing is left
    /// half-done; the error says whether that worked.
    fn undo(&self, root: &Path, cause: Cause) -> InstallError {
        let cleaned =
            zinstall_engine::fsutil::remove_tree(root).and_then(|()| {
                state::clear(&self.zonepath).map_err(|e| {
                    zinstall_engine::Error::io(
                        zinstall_engine::Op::Remove,
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
        InstallError::new(stage, cause)
    }

    /// Steps 3 to 6, writing or (a dry run) recording what they would
    /// write ([`Writes`]).
    pub(crate) fn lay_out(
        &mut self,
        root: &Path,
        archives: &[Archive],
        contents: &std::sync::Arc<zinstall_engine::contents::Contents>,
        digests: &mut std::collections::HashMap<PathBuf, String>,
        writes: Writes,
    ) -> Result<Summary, Cause> {
        let mut sum = Summary::default();
        // A dry run leaves the root as it is: it may not exist yet.
        let top = match writes {
            Writes::Make => Some(make_root(root)?),
            Writes::Record { .. } => None,
        };
        if !self.profile.links.is_empty() || !self.profile.dirs.is_empty() {
            (self.events)(&Event::LayingOut);
            let t0 = self.step_start("layout", writes);
            let r = layout(&self.profile, root, self.pool.as_ref(), writes);
            self.step_done("layout", t0, r.is_err(), writes);
            add(&mut sum.stats, &r?);
        }
        let trees = self.profile.trees.clone();
        for t in &trees {
            self.replicate(root, t, &mut sum, writes)?;
        }
        for a in archives {
            self.unpack_archive(a, root, contents, digests, &mut sum, writes)?;
        }
        let host_files = self.profile.host_files.clone();
        for f in &host_files {
            self.copy_host_file(f, root, top.as_ref(), &mut sum, writes)?;
        }
        if writes.makes() {
            for n in &sum.notices {
                (self.events)(&Event::Notice(n.clone()));
            }
        } else {
            // Most notices tell of what writing met (an owner not kept,
            // xattrs refused): a dry run says none.
            sum.notices.clear();
        }
        Ok(sum)
    }

    /// Replicates the host's tree `t` (relative to the source root) into
    /// the root.
    fn replicate(
        &mut self,
        root: &Path,
        t: &Path,
        sum: &mut Summary,
        writes: Writes,
    ) -> Result<(), Cause> {
        let name = format!("/{}", t.display());
        let src = self.profile.source_root.join(t);
        let dst = root.join(t);
        (self.events)(&Event::Replicating { tree: name.clone() });
        let step = format!("replicate {name}");
        let t0 = self.step_start(&step, writes);
        let r = recording(self.plan(&src, &dst), writes)
            .within(root)
            .tunables(self.tunables)
            .rules(std::sync::Arc::clone(&self.profile.rules), t)
            .skip_special(true)
            .run();
        self.step_done(&step, t0, r.is_err(), writes);
        let report = r.map_err(|source| Cause::Copy {
            step: step.clone(),
            source,
        })?;
        let s = &report.stats;
        (self.events)(&Event::Replicated {
            tree: name.clone(),
            stats: s.clone(),
        });
        if writes.makes() {
            info!(self.log, "replicated"; "tree" => &name, "files" => s.files, "symlinks" => s.symlinks,
                  "linked" => s.redirects, "skipped" => s.skipped, "bytes" => s.bytes,
                  "ms" => s.elapsed.as_millis() as u64);
        }
        merge_notices(&mut sum.notices, &report.notices);
        add(&mut sum.stats, s);
        Ok(())
    }

    /// Unpacks archive `a` (or applies its OCI image) into the root,
    /// noting its digest in `digests`; in a dry run, reads it through.
    fn unpack_archive(
        &mut self,
        a: &Archive,
        root: &Path,
        contents: &std::sync::Arc<zinstall_engine::contents::Contents>,
        digests: &mut std::collections::HashMap<PathBuf, String>,
        sum: &mut Summary,
        writes: Writes,
    ) -> Result<(), Cause> {
        if let Some(image) = &a.oci {
            return self.apply_oci(image, root, sum, contents, writes);
        }
        let (path, kind) = (a.path.clone(), a.kind);
        (self.events)(&Event::Unpacking {
            path: path.clone(),
            kind,
        });
        let step = format!("unpack {}", path.display());
        let t0 = self.step_start(&step, writes);
        let r = match writes {
            Writes::Make => unpack::unpack(
                &path,
                root,
                &UnpackOptions {
                    // Its SHA-256, the recipe's name for it, taken as it
                    // is read.
                    contents: Some(std::sync::Arc::clone(contents)),
                    // Not for a root stored elsewhere: it records no
                    // recipe.
                    digest: self.objects.is_none(),
                    ..self.unpack_options(a)
                },
            ),
            Writes::Record { .. } => {
                unpack::dry_run(&path, root, &self.unpack_options(a))
            }
        };
        self.step_done(&step, t0, r.is_err(), writes);
        // The engine's error names the archive and the member.
        let r = r.map_err(|source| Cause::Step {
            step: "unpack".into(),
            source: Box::new(source),
        })?;
        if let Some(d) = &r.sha256 {
            digests.insert(path.clone(), d.clone());
        }
        let s = &r.stats;
        let took = t0.elapsed();
        (self.events)(&Event::Unpacked {
            path: path.clone(),
            stats: s.clone(),
            took,
        });
        if writes.makes() {
            info!(self.log, "unpacked"; "archive" => %path.display(), "files" => s.files,
                  "bytes" => s.bytes, "ms" => took.as_millis() as u64);
        }
        merge_notices(&mut sum.notices, &r.notices);
        add(&mut sum.stats, s);
        Ok(())
    }

    /// Copies the host file `f` into the root, beneath `top` (none in a
    /// dry run, which has not made the root).
    fn copy_host_file(
        &mut self,
        f: &Path,
        root: &Path,
        top: Option<&Root>,
        sum: &mut Summary,
        writes: Writes,
    ) -> Result<(), Cause> {
        (self.events)(&Event::CopyingHostFile {
            path: f.to_path_buf(),
        });
        let rel = f.strip_prefix("/").unwrap_or(f);
        let dst = root.join(rel);
        let step = format!("host file {}", f.display());
        let t0 = self.step_start(&step, writes);
        // Whether a link is copied by content depends on what the root
        // holds, which a dry run has not made: it copies the host file as
        // it is.
        let by_content = writes.makes().then(|| host_source(f, root)).flatten();
        let src = match by_content {
            Some(real) => {
                (self.events)(&Event::HostFileByContent {
                    path: f.to_path_buf(),
                    real: real.clone(),
                });
                real
            }
            None => f.to_path_buf(),
        };
        // Beneath the root: a symlink an image planted on the way
        // (etc -> /host/dir) is refused and named; one at the file's
        // own name is replaced, never written through. The directory
        // it goes into keeps its times, as the tree gave them.
        let plan = || {
            recording(self.plan(&src, &dst), writes)
                .within(root)
                .merge(true)
                .run()
        };
        let parent = rel.parent().filter(|p| !p.as_os_str().is_empty());
        let dir = top.zip(parent).and_then(|(top, p)| top.dir(p, None).ok());
        let r = match &dir {
            Some(d) => d.keeping_times(plan),
            None => plan(),
        };
        self.step_done(&step, t0, r.is_err(), writes);
        let r = r.map_err(|source| Cause::Copy {
            step: step.clone(),
            source,
        })?;
        merge_notices(&mut sum.notices, &r.notices);
        add(&mut sum.stats, &r.stats);
        Ok(())
    }

    /// Flushes the root's filesystem: each file's writeback started as
    /// it was written (`COPY_WRITEBACK`), so this waits for the tail.
    fn flush(&mut self, root: &Path) -> Result<(), Cause> {
        (self.events)(&Event::Flushing);
        let t0 = self.step_start("flush", Writes::Make);
        // The root this install made, opened only to flush its
        // filesystem.
        #[allow(clippy::disallowed_methods)]
        let r = std::fs::File::open(root)
            .and_then(|f| zinstall_engine::fsutil::sync_fs(&f))
            .map_err(|e| Cause::Step {
                step: "flush".into(),
                source: Box::new(zinstall_engine::Error::io(
                    zinstall_engine::Op::Sync,
                    root,
                    e,
                )),
            });
        self.step_done("flush", t0, r.is_err(), Writes::Make);
        r
    }

    /// Applies an OCI image's layers in order, whiteouts and all; each
    /// layer is one unpack step, checked against its digest and diff_id.
    fn apply_oci(
        &mut self,
        image: &zinstall_engine::oci::Image,
        root: &Path,
        sum: &mut Summary,
        contents: &std::sync::Arc<zinstall_engine::contents::Contents>,
        writes: Writes,
    ) -> Result<(), Cause> {
        if !writes.makes()
            && self.store.as_deref() == Some(image.location.as_path())
        {
            // Pulled in a dry run: its layers are not downloaded to be
            // looked at; the manifest and config were checked.
            return Ok(());
        }
        for i in 0..image.layers.len() {
            let path = image.layer_path(i);
            (self.events)(&Event::Unpacking {
                path: path.clone(),
                kind: ArchiveKind::Layer,
            });
            let step = format!("unpack {}", path.display());
            let t0 = self.step_start(&step, writes);
            let r = match writes {
                Writes::Make => {
                    let opts = UnpackOptions {
                        contents: Some(std::sync::Arc::clone(contents)),
                        ..self.oci_unpack_options()
                    };
                    zinstall_engine::oci::unpack_layer(image, i, root, &opts)
                }
                Writes::Record { .. } => zinstall_engine::oci::dry_run_layer(
                    image,
                    i,
                    root,
                    &self.oci_unpack_options(),
                ),
            };
            self.step_done(&step, t0, r.is_err(), writes);
            // A dry run's layer fails as its check: read through against
            // its digest and diff_id, before anything would be written.
            let r = r.map_err(|source| Cause::Step {
                step: match writes {
                    Writes::Make => "unpack",
                    Writes::Record { .. } => "check OCI image",
                }
                .into(),
                source: Box::new(source),
            })?;
            let took = t0.elapsed();
            (self.events)(&Event::Unpacked {
                path: path.clone(),
                stats: r.stats.clone(),
                took,
            });
            if writes.makes() {
                info!(self.log, "unpacked"; "archive" => %path.display(), "files" => r.stats.files,
                      "bytes" => r.stats.bytes, "ms" => took.as_millis() as u64);
            }
            merge_notices(&mut sum.notices, &r.notices);
            add(&mut sum.stats, &r.stats);
        }
        Ok(())
    }

    /// What this install made the root from, as its manifest records it
    /// (a tarball's digest is filled in as the manifest is recorded).
    fn recipe(
        &self,
        archives: &[Archive],
        digests: &std::collections::HashMap<PathBuf, String>,
    ) -> Recipe {
        let mut images = Vec::new();
        let mut baseline = None;
        for (a, arg) in archives
            .iter()
            .filter(|a| a.kind == ArchiveKind::Baseline)
            .map(|a| (a, None))
            .chain(
                archives
                    .iter()
                    .filter(|a| a.kind != ArchiveKind::Baseline)
                    .zip(self.images.iter().map(Some)),
            )
        {
            let digest = digests.get(&a.path).cloned().unwrap_or_default();
            let Some(arg) = arg else {
                baseline = Some(ArchiveRecord {
                    path: text(&a.path),
                    digest,
                });
                continue;
            };
            let mut record = image_record(arg, a);
            if record.digest.is_empty() && !digest.is_empty() {
                record.layers = vec![digest.clone()];
                record.digest = digest;
            }
            images.push(record);
        }
        recipe_of(&self.profile, &self.profile.source_root, images, baseline)
    }

    /// A step's start: fired as a probe when it writes (a dry run
    /// leaves no record of itself).
    fn step_start(&self, step: &str, writes: Writes) -> Instant {
        if writes.makes() {
            zinstall_engine::probes::step_start(&self.zone, step);
        }
        Instant::now()
    }

    fn step_done(&self, step: &str, t0: Instant, failed: bool, writes: Writes) {
        if !writes.makes() {
            return;
        }
        let ns = t0.elapsed().as_nanos() as u64;
        zinstall_engine::probes::step_done(&self.zone, step, ns, failed);
        info!(self.log, "step"; "step" => step, "ms" => ns / 1_000_000, "failed" => failed);
    }

    /// Writes what the install laid out, before it is marked complete.
    /// A failure is logged and the install goes on: the zone works, and
    /// an update of it says that it needs `--force`.
    fn save_manifest(&mut self, p: Pending) {
        let t0 = std::time::Instant::now();
        match p.recorded.and_then(|m| {
            manifest::write(&self.zonepath, MANIFEST, &m)
                .map(|()| m.entries.len())
        }) {
            Ok(n) => slog::info!(self.log, "manifest recorded"; "entries" => n,
                                 "ms" => (p.took + t0.elapsed()).as_millis() as u64),
            Err(e) => {
                slog::error!(self.log, "manifest not recorded; an update of this root needs --force";
                                   "error" => %e)
            }
        }
    }
}

/// The images as a list of strings: a JSON array in the log.
fn images_list(images: &[PathBuf]) -> Vec<String> {
    images.iter().map(|p| p.display().to_string()).collect()
}

/// The profile's links and mount points: made in a private directory
/// with their exact modes, then merged into the root by the same writer
/// as everything else (never through a symlink in the root).
fn layout(
    p: &Profile,
    root: &Path,
    pool: Option<&zinstall_engine::Pool>,
    writes: Writes,
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
        let mut plan = recording(Plan::new(&top, root), writes)
            .within(root)
            .merge(true);
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

/// Makes the root (0755), or opens it, without following a symlink at
/// ZONEPATH/root; everything below goes through Plan::within / unpack,
/// which open every directory beneath it the same way. On btrfs, a
/// subvolume: an update then snapshots it whole.
fn make_root(root: &Path) -> Result<Root, Cause> {
    let failed = |source| Cause::Step {
        step: "make root".into(),
        source: Box::new(source),
    };
    if let (Some(zp), false) = (root.parent(), root.exists()) {
        Root::open(zp)
            .and_then(|z| {
                crate::update::platform::make_subvolume(z.as_fd(), c"root")
                    .map_err(|e| {
                        zinstall_engine::Error::io(
                            zinstall_engine::Op::Mkdir,
                            root,
                            e,
                        )
                    })
            })
            .map_err(failed)?;
    }
    let top = Root::create(root, 0o755).map_err(failed)?;
    top.set_mode(0o755).map_err(failed)?;
    Ok(top)
}

/// `plan` as `writes` says: in a dry run, recording instead of writing,
/// the destination taken as empty where the real run will have emptied
/// it.
fn recording(plan: Plan, writes: Writes) -> Plan {
    match writes {
        Writes::Make => plan,
        Writes::Record { as_if_empty } => {
            plan.dry_run(true).dry_run_as_if_empty(as_if_empty)
        }
    }
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
pub(crate) fn host_source(f: &Path, root: &Path) -> Option<PathBuf> {
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
