//! Installing and uninstalling a zone root (illumos) or rootfs (Linux).
//!
//! One code path for both: the zoneadm hook (`brand install`) and
//! `zinstall install` build an [`Install`] and call [`Install::run`].
//!
//! Steps, each printed as an `INFO: zinstall:` line, logged, and fired as
//! a `step-start`/`step-done` probe pair:
//!
//! 1. lock the zonepath; check the profile's trees, the baseline and
//!    every image (first member and kind) before writing anything;
//! 2. clean the root of an install that was interrupted;
//! 3. mark the zonepath `installing`; make `root` (0755);
//! 4. replicate each tree with the profile's link and prune rules;
//! 5. unpack the baseline, then each image layer in order;
//! 6. copy the host files;
//! 7. mark the zonepath `installed`.
//!
//! # Failures and zoneadm's exit codes
//!
//! zoneadm reads 254 (`ZONE_SUBPROC_NOTCOMPLETE`) as "did not complete,
//! nothing to recover": it cleans the zonepath and returns the zone to
//! *configured*, so the install can simply be retried. 255
//! (`ZONE_SUBPROC_FATAL`) leaves the zone *incomplete* until `zoneadm
//! uninstall`. So: a failure found before the root is touched (bad
//! profile, missing baseline, an image of the wrong kind, the zonepath
//! locked) is 254. A failure after (a refused archive entry, a full disk)
//! removes the partial root itself, and is 254 if that worked; only if
//! the root could not be removed is it 255, since then there is something
//! to recover. A killed install leaves `installing`, which zoneadm sees
//! as incomplete (a killed hook is fatal); the next install, or
//! uninstall, cleans it.

pub mod log;
pub mod profile;
pub mod state;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use copier::archive::{self, ArchiveKind, UnpackOptions};
use copier::beneath::Root;
use copier::{Plan, Stats, Tunables};
use slog::{Logger, error, info, o};

pub use profile::Profile;
use state::{State, ZoneLock};

/// Where in the install a failure happened, which decides what zoneadm
/// is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Nothing was written into the root.
    BeforeRoot,
    /// The root was written, then removed again.
    Cleaned,
    /// The root was written and could not be removed.
    Partial,
}

/// A failed install or uninstall.
#[derive(Debug)]
pub struct InstallError {
    /// How far it got.
    pub stage: Stage,
    /// What went wrong, with the path and operation.
    pub message: String,
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        match self.stage {
            Stage::BeforeRoot => Ok(()),
            Stage::Cleaned => f.write_str(" (the partial root was removed)"),
            Stage::Partial => {
                f.write_str(" (the partial root remains; uninstall the zone)")
            }
        }
    }
}

impl std::error::Error for InstallError {}

impl InstallError {
    fn before(e: impl std::fmt::Display) -> Self {
        InstallError {
            stage: Stage::BeforeRoot,
            message: e.to_string(),
        }
    }

    /// The exit status zoneadm understands (see the module docs).
    pub fn zoneadm_status(&self) -> u8 {
        match self.stage {
            Stage::BeforeRoot | Stage::Cleaned => 254,
            Stage::Partial => 255,
        }
    }
}

/// One install.
pub struct Install<'a> {
    /// The zone's name (or the zonepath's, on Linux).
    pub zone: String,
    /// The zonepath; the root is `zonepath/root`.
    pub zonepath: PathBuf,
    /// What to install.
    pub profile: Profile,
    /// Image layers, applied in order after the baseline.
    pub images: Vec<PathBuf>,
    /// The engine's knobs.
    pub tunables: Tunables,
    /// The structured log.
    pub log: Logger,
    /// Prints a line for the user (zoneadm shows stdout).
    pub say: &'a mut dyn FnMut(&str),
}

/// What an install did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Everything copied, linked and unpacked.
    pub stats: Stats,
    /// Notices from the engine, one per kind for the whole install.
    pub notices: Vec<copier::Notice>,
}

fn info_line(say: &mut dyn FnMut(&str), msg: &str) {
    say(&format!("INFO: zinstall: {msg}"));
}

impl Install<'_> {
    /// Runs the install; see the module docs for the steps and failures.
    pub fn run(&mut self) -> Result<Summary, InstallError> {
        let started = Instant::now();
        let zonepath = self.zonepath.clone();
        info_line(
            self.say,
            &format!("installing zone {} @ {:?}...", self.zone, zonepath),
        );
        info!(self.log, "install"; "zone" => &self.zone, "zonepath" => %zonepath.display(),
              "profile" => %self.profile.path.display(), "images" => ?self.images);
        let lock = ZoneLock::take(&zonepath).map_err(InstallError::before)?;
        let r = self.run_locked();
        lock.release();
        match &r {
            Ok(s) => {
                info_line(
                    self.say,
                    &format!(
                        "install of zone {} complete: {}",
                        self.zone,
                        summary_line(&s.stats, started)
                    ),
                );
                info!(self.log, "install complete"; "ms" => started.elapsed().as_millis() as u64);
            }
            Err(e) => error!(self.log, "install failed"; "error" => %e),
        }
        r
    }

    fn run_locked(&mut self) -> Result<Summary, InstallError> {
        let root = self.zonepath.join("root");
        let (baseline, images) = self.preflight()?;
        match state::read(&self.zonepath).map_err(InstallError::before)? {
            Some(State::Installing) => {
                info_line(self.say, "cleaning up an interrupted install...");
                info!(self.log, "cleaning interrupted install");
                copier::fsutil::remove_tree(&root).map_err(|e| {
                    InstallError {
                        stage: Stage::Partial,
                        message: format!(
                            "cleaning up after an interrupted install: {e}"
                        ),
                    }
                })?;
            }
            Some(State::Installed) => {
                return Err(InstallError::before(format!(
                    "{} is already installed; uninstall it first",
                    self.zonepath.display()
                )));
            }
            None => {
                if fs::symlink_metadata(&root).is_ok_and(|m| !m.is_dir()) {
                    return Err(InstallError::before(format!(
                        "{} is not a directory (a symlink is never followed); \
                         remove it first",
                        root.display()
                    )));
                }
                if fs::read_dir(&root).is_ok_and(|mut d| d.next().is_some()) {
                    return Err(InstallError::before(format!(
                        "{} is not empty and was not made by zinstall",
                        root.display()
                    )));
                }
            }
        }
        state::write(&self.zonepath, State::Installing).map_err(|e| {
            InstallError::before(format!(
                "mark {} installing: {e}",
                self.zonepath.display()
            ))
        })?;
        let r = self.lay_out(&root, baseline.as_deref(), &images);
        match r {
            Ok(s) => {
                state::write(&self.zonepath, State::Installed).map_err(
                    |e| InstallError {
                        stage: Stage::Partial,
                        message: format!(
                            "mark {} installed: {e}",
                            self.zonepath.display()
                        ),
                    },
                )?;
                Ok(s)
            }
            Err(message) => {
                // Leave nothing half-done behind: remove what was written.
                let cleaned =
                    copier::fsutil::remove_tree(&root).and_then(|()| {
                        state::clear(&self.zonepath).map_err(|e| {
                            copier::Error::io(
                                copier::Op::Remove,
                                &self.zonepath,
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
                Err(InstallError { stage, message })
            }
        }
    }

    /// Everything checked before the root is touched.
    fn preflight(
        &mut self,
    ) -> Result<(Option<PathBuf>, Vec<PathBuf>), InstallError> {
        let p = &self.profile;
        for t in &p.trees {
            let src = p.source_root.join(t);
            if !src.is_dir() {
                return Err(InstallError::before(format!(
                    "tree {} (profile {}): not a directory",
                    src.display(),
                    p.path.display()
                )));
            }
        }
        let baseline = match &p.baseline {
            Some(b) => match b.find() {
                Some(path) => {
                    check_kind(&path, ArchiveKind::Baseline)
                        .map_err(InstallError::before)?;
                    Some(path)
                }
                None if b.required => {
                    return Err(InstallError::before(format!(
                        "baseline {} not found in {:?} (profile {})",
                        b.file,
                        b.search,
                        p.path.display()
                    )));
                }
                None => None,
            },
            None => None,
        };
        for img in &self.images {
            check_kind(img, ArchiveKind::Layer)
                .map_err(InstallError::before)?;
        }
        Ok((baseline, self.images.clone()))
    }

    /// Steps 3 to 6; an error message names the path and operation.
    fn lay_out(
        &mut self,
        root: &Path,
        baseline: Option<&Path>,
        images: &[PathBuf],
    ) -> Result<Summary, String> {
        let mut sum = Summary::default();
        // Made or opened without following a symlink at ZONEPATH/root;
        // everything below goes through Plan::within / unpack, which open
        // every directory beneath it the same way.
        let top = Root::create(root, 0o755).map_err(|e| e.to_string())?;
        top.set_mode(0o755).map_err(|e| e.to_string())?;
        let trees = self.profile.trees.clone();
        for t in &trees {
            let name = format!("/{}", t.display());
            let src = self.profile.source_root.join(t);
            let dst = root.join(t);
            info_line(self.say, &format!("replicating {name} tree..."));
            let step = format!("replicate {name}");
            let t0 = self.step_start(&step);
            let r = Plan::new(&src, &dst)
                .within(root)
                .tunables(self.tunables)
                .rules(std::sync::Arc::clone(&self.profile.rules), t)
                .skip_special(true)
                .run();
            self.step_done(&step, t0, r.is_err());
            let report = r.map_err(|f| f.to_string())?;
            let s = &report.stats;
            info_line(
                self.say,
                &format!(
                    "replicated {name}: {} files, {} linked, {} bytes, {} ms",
                    s.files + s.symlinks + s.hardlinks,
                    s.redirects,
                    s.bytes,
                    s.elapsed.as_millis()
                ),
            );
            info!(self.log, "replicated"; "tree" => &name, "files" => s.files, "symlinks" => s.symlinks,
                  "linked" => s.redirects, "skipped" => s.skipped, "bytes" => s.bytes,
                  "ms" => s.elapsed.as_millis() as u64);
            merge_notices(&mut sum.notices, &report.notices);
            add(&mut sum.stats, s);
        }
        let mut archives: Vec<(PathBuf, ArchiveKind)> = Vec::new();
        if let Some(b) = baseline {
            archives.push((b.to_path_buf(), ArchiveKind::Baseline));
        }
        archives.extend(images.iter().map(|i| (i.clone(), ArchiveKind::Layer)));
        for (path, kind) in archives {
            let what = match kind {
                ArchiveKind::Baseline => "baseline archive".to_string(),
                ArchiveKind::Layer => {
                    format!("image {:?}", path.display().to_string())
                }
            };
            info_line(self.say, &format!("unpacking {what}..."));
            let step = format!("unpack {}", path.display());
            let t0 = self.step_start(&step);
            let opts = UnpackOptions {
                tunables: self.tunables,
                expect: Some(kind),
                allow_devices: self.profile.allow_devices,
                max_bytes: self.profile.max_archive_bytes,
                preserve_owner: None,
            };
            let r = archive::unpack(&path, root, &opts);
            self.step_done(&step, t0, r.is_err());
            let r = r.map_err(|e| e.to_string())?;
            let s = &r.stats;
            info_line(
                self.say,
                &format!(
                    "unpacked {}: {} files, {} bytes, {} ms",
                    path.display(),
                    s.files + s.symlinks + s.hardlinks + s.specials,
                    s.bytes,
                    t0.elapsed().as_millis()
                ),
            );
            info!(self.log, "unpacked"; "archive" => %path.display(), "files" => s.files,
                  "bytes" => s.bytes, "ms" => t0.elapsed().as_millis() as u64);
            merge_notices(&mut sum.notices, &r.notices);
            add(&mut sum.stats, s);
        }
        let host_files = self.profile.host_files.clone();
        for f in &host_files {
            info_line(self.say, &format!("copying {}...", f.display()));
            let rel = f.strip_prefix("/").unwrap_or(f);
            let dst = root.join(rel);
            let step = format!("host file {}", f.display());
            let t0 = self.step_start(&step);
            // Beneath the root: a symlink an image planted on the way
            // (etc -> /host/dir) is refused and named; one at the file's
            // own name is replaced, never written through.
            let r = Plan::new(f, &dst).within(root).merge(true).run();
            self.step_done(&step, t0, r.is_err());
            let r = r.map_err(|e| format!("host file {}: {e}", f.display()))?;
            merge_notices(&mut sum.notices, &r.notices);
            add(&mut sum.stats, &r.stats);
        }
        for n in &sum.notices {
            info_line(self.say, &format!("note: {n}"));
        }
        Ok(sum)
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
}

fn summary_line(s: &Stats, started: Instant) -> String {
    format!(
        "{} files, {} dirs, {} linked, {} bytes, {} ms",
        s.files + s.symlinks + s.hardlinks + s.specials,
        s.dirs,
        s.redirects,
        s.bytes,
        started.elapsed().as_millis()
    )
}

/// Checks that `path` is a zinstall archive of `kind` by its first member,
/// without unpacking anything.
pub fn check_kind(path: &Path, kind: ArchiveKind) -> Result<(), String> {
    let found = archive::peek_kind(path).map_err(|e| e.to_string())?;
    match found {
        Some(k) if k == kind => Ok(()),
        Some(k) => Err(format!(
            "{}: archive is a {}, not a {}",
            path.display(),
            k.as_str(),
            kind.as_str()
        )),
        None => Err(format!(
            "{}: first member is not zinstall.json; not a zinstall {}",
            path.display(),
            kind.as_str()
        )),
    }
}

/// Removes an installed (or partly installed) zone root.
pub fn uninstall(
    zonepath: &Path,
    force: bool,
    log: &Logger,
    say: &mut dyn FnMut(&str),
) -> Result<(), InstallError> {
    let log = log.new(o!("zonepath" => zonepath.display().to_string()));
    info!(log, "uninstall"; "force" => force);
    let lock = ZoneLock::take(zonepath).map_err(InstallError::before)?;
    let r = (|| {
        let st = state::read(zonepath).map_err(InstallError::before)?;
        if st.is_none() && !force {
            return Err(InstallError::before(format!(
                "{} has no zinstall state marker: not installed by zinstall \
                 (use -F to remove its root anyway)",
                zonepath.display()
            )));
        }
        info_line(say, &format!("uninstalling {}...", zonepath.display()));
        // Never follows a symlink: a hostile root cannot point the
        // removal at host files.
        copier::fsutil::remove_tree(&zonepath.join("root")).map_err(|e| {
            InstallError {
                stage: Stage::Partial,
                message: format!(
                    "remove {}: {e}",
                    zonepath.join("root").display()
                ),
            }
        })?;
        state::clear(zonepath).map_err(|e| InstallError {
            stage: Stage::Partial,
            message: e.to_string(),
        })?;
        info_line(say, &format!("uninstalled {}", zonepath.display()));
        Ok(())
    })();
    // The lock file stays: removing it would let two processes lock two
    // different files of the same name.
    lock.release();
    match &r {
        Ok(()) => info!(log, "uninstall complete"),
        Err(e) => error!(log, "uninstall failed"; "error" => %e),
    }
    r
}
