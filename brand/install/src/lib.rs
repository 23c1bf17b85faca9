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

pub mod log;
pub mod profile;
pub mod state;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use copier::beneath::Root;
use copier::unpack::{self, UnpackOptions};
use copier::{Plan, Stats, Tunables};
use slog::{Logger, error, info, o};
use zinstall_archive::ArchiveKind;

pub use profile::Profile;
use state::{State, ZoneLock};

/// Where in the install a failure happened, which decides what zoneadm
/// is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Nothing was written into the root, and nothing of value is there.
    BeforeRoot,
    /// Refused without touching anything, because the zonepath holds
    /// what must be kept: an installed root, a root zinstall did not
    /// make, or an install another process is running.
    Refused,
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
            Stage::Refused => f.write_str(" (nothing was changed)"),
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

    fn refused(e: impl std::fmt::Display) -> Self {
        InstallError {
            stage: Stage::Refused,
            message: e.to_string(),
        }
    }

    fn partial(e: impl std::fmt::Display) -> Self {
        InstallError {
            stage: Stage::Partial,
            message: e.to_string(),
        }
    }

    /// The exit status zoneadm understands (see the module docs): 254
    /// only when there is nothing in the zonepath to keep.
    pub fn zoneadm_status(&self) -> u8 {
        match self.stage {
            Stage::BeforeRoot | Stage::Cleaned => 254,
            Stage::Refused | Stage::Partial => 255,
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
        let r = match ZoneLock::take(&zonepath) {
            Ok(lock) => {
                let r = self.run_locked();
                // Nothing of ours may stay where zoneadm will clean.
                let r = match r {
                    Err(e) if e.zoneadm_status() == 254 => {
                        match state::clear(&zonepath) {
                            Ok(()) => Err(e),
                            Err(c) => Err(InstallError::partial(format!(
                                "{e}; then: remove {}: {c}",
                                zonepath.join(state::STATE).display()
                            ))),
                        }
                    }
                    other => other,
                };
                lock.release();
                r
            }
            Err(e @ state::LockError::Held { .. }) => {
                Err(InstallError::refused(e))
            }
            Err(e) => Err(InstallError::before(e)),
        };
        let r = r.map_err(|e| settle(&zonepath, e));
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
        // An unreadable marker is not ours to judge: keep everything.
        let st = state::read(&self.zonepath).map_err(InstallError::refused)?;
        match st {
            Some(State::Installed) => {
                return Err(InstallError::refused(format!(
                    "{} is already installed (its marker says so and its root \
                     is kept); to replace it, uninstall it first; to use it, \
                     attach it",
                    self.zonepath.display()
                )));
            }
            Some(State::Installing) => {
                info_line(self.say, "cleaning up an interrupted install...");
                info!(self.log, "cleaning interrupted install");
                copier::fsutil::remove_tree(&root).map_err(|e| {
                    InstallError::partial(format!(
                        "cleaning up after an interrupted install: {e}"
                    ))
                })?;
            }
            None => {
                if fs::symlink_metadata(&root).is_ok_and(|m| !m.is_dir()) {
                    return Err(InstallError::refused(format!(
                        "{} is not a directory (a symlink is never followed); \
                         remove it first",
                        root.display()
                    )));
                }
                if fs::read_dir(&root).is_ok_and(|mut d| d.next().is_some()) {
                    return Err(InstallError::refused(format!(
                        "{} is not empty and zinstall did not make it (no \
                         marker in the zonepath); it is kept as it is",
                        root.display()
                    )));
                }
            }
        }
        let (baseline, images) = self.preflight()?;
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
                    |e| {
                        InstallError::partial(format!(
                            "mark {} installed: {e}",
                            self.zonepath.display()
                        ))
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
        if !self.profile.links.is_empty() || !self.profile.dirs.is_empty() {
            info_line(self.say, "laying out links and mount points...");
            let t0 = self.step_start("layout");
            let r = layout(&self.profile, root);
            self.step_done("layout", t0, r.is_err());
            add(&mut sum.stats, &r?);
        }
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
            let r = unpack::unpack(&path, root, &opts);
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
            let src = match host_source(f, root) {
                Some(real) => {
                    info_line(
                        self.say,
                        &format!(
                            "{} links to what the root lacks: copying {} \
                             by content",
                            f.display(),
                            real.display()
                        ),
                    );
                    real
                }
                None => f.clone(),
            };
            // Beneath the root: a symlink an image planted on the way
            // (etc -> /host/dir) is refused and named; one at the file's
            // own name is replaced, never written through.
            let r = Plan::new(&src, &dst).within(root).merge(true).run();
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
    let found = unpack::peek_kind(path).map_err(|e| e.to_string())?;
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

/// What `cleanup_zonepath()` may destroy without loss: `ZONEPATH/root`
/// absent or an empty directory, and none of zinstall's files there.
pub fn disposable(zonepath: &Path) -> Result<(), String> {
    let root = zonepath.join("root");
    match fs::symlink_metadata(&root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", root.display())),
        Ok(m) if !m.is_dir() => {
            return Err(format!("{} is not a directory", root.display()));
        }
        Ok(_) => {
            let empty = fs::read_dir(&root)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
            if !empty {
                return Err(format!("{} is not empty", root.display()));
            }
        }
    }
    match state::own_entries(zonepath).first() {
        Some(p) => Err(format!("{} is there", p.display())),
        None => Ok(()),
    }
}

/// The last word on a failed install's status: a failure that would
/// let zoneadm clean the zonepath (254) becomes 255 when the zonepath
/// holds anything worth keeping.
fn settle(zonepath: &Path, e: InstallError) -> InstallError {
    if e.zoneadm_status() != 254 {
        return e;
    }
    match disposable(zonepath) {
        Ok(()) => e,
        Err(why) => InstallError::refused(format!(
            "{e}; and {why}, so zoneadm is not told to clean the zonepath"
        )),
    }
}

/// The profile's links and mount points: made in a private directory
/// with their exact modes, then merged into the root by the same writer
/// as everything else (never through a symlink in the root).
fn layout(p: &Profile, root: &Path) -> Result<Stats, String> {
    let staging = private_dir().map_err(|e| format!("layout: {e}"))?;
    let made = (|| -> Result<Stats, String> {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let top = staging.join("root");
        fs::create_dir(&top).map_err(|e| format!("{}: {e}", top.display()))?;
        fs::set_permissions(&top, fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", top.display()))?;
        for (path, mode) in &p.dirs {
            let d = top.join(path);
            fs::create_dir_all(&d)
                .and_then(|()| {
                    fs::set_permissions(&d, fs::Permissions::from_mode(*mode))
                })
                .map_err(|e| format!("dir {}: {e}", path.display()))?;
        }
        for (path, target) in &p.links {
            let l = top.join(path);
            if let Some(parent) = l.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| format!("link {}: {e}", path.display()))?;
            }
            symlink(target, &l)
                .map_err(|e| format!("link {}: {e}", path.display()))?;
        }
        let r = Plan::new(&top, root)
            .within(root)
            .merge(true)
            .run()
            .map_err(|f| format!("layout: {f}"))?;
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

/// Checks that an existing root is one this profile makes: the state
/// marker says installed, or (no marker) the root has every tree, link
/// and mount point the profile lays out, in which case it is adopted
/// (marked installed). Used by the `attach` hook.
pub fn attach(
    zonepath: &Path,
    profile: &Profile,
    log: &Logger,
    say: &mut dyn FnMut(&str),
) -> Result<(), InstallError> {
    let log = log.new(o!("zonepath" => zonepath.display().to_string()));
    info!(log, "attach");
    let lock = ZoneLock::take(zonepath).map_err(InstallError::refused)?;
    let root = zonepath.join("root");
    let r = (|| {
        let st = state::read(zonepath).map_err(InstallError::refused)?;
        if st == Some(State::Installing) {
            return Err(InstallError::refused(format!(
                "{} holds the partial root of an interrupted install; \
                 install the zone again, or uninstall it",
                zonepath.display()
            )));
        }
        let md = fs::symlink_metadata(&root).map_err(|e| {
            InstallError::refused(format!(
                "{}: {e}: nothing to attach; install the zone",
                root.display()
            ))
        })?;
        if !md.is_dir() {
            return Err(InstallError::refused(format!(
                "{} is not a directory (a symlink is never followed)",
                root.display()
            )));
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
            return Err(InstallError::refused(format!(
                "{} is not a root of profile {}: no {}; attach -F takes \
                 it as it is",
                root.display(),
                profile.path.display(),
                missing.join(", no ")
            )));
        }
        if st.is_none() {
            info_line(
                say,
                &format!(
                    "adopting {} (no marker; it has the profile's layout)",
                    root.display()
                ),
            );
            state::write(zonepath, State::Installed).map_err(|e| {
                InstallError::refused(format!("mark installed: {e}"))
            })?;
        }
        info_line(say, &format!("attached {}", root.display()));
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
    say: &mut dyn FnMut(&str),
) -> Result<(), InstallError> {
    let log = log.new(o!("zonepath" => zonepath.display().to_string()));
    info!(log, "uninstall"; "foreign" => foreign);
    if !zonepath.exists() {
        info_line(
            say,
            &format!(
                "{} does not exist: nothing to remove",
                zonepath.display()
            ),
        );
        return Ok(());
    }
    let lock = ZoneLock::take(zonepath).map_err(InstallError::refused)?;
    let root = zonepath.join("root");
    let r = (|| {
        let st = state::read(zonepath).map_err(InstallError::refused)?;
        let md = match fs::symlink_metadata(&root) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(InstallError::refused(format!(
                    "{}: {e}",
                    root.display()
                )));
            }
        };
        let empty = md.as_ref().is_some_and(|m| m.is_dir())
            && fs::read_dir(&root).is_ok_and(|mut d| d.next().is_none());
        if md.is_some() && !empty && st.is_none() && !foreign {
            return Err(InstallError::refused(format!(
                "{} has no zinstall marker: zinstall did not make {} (or its \
                 marker was lost), so it is kept; to remove it anyway: \
                 zoneadm uninstall -F -x foreign (zinstall uninstall -F)",
                zonepath.display(),
                root.display()
            )));
        }
        info_line(say, &format!("uninstalling {}...", zonepath.display()));
        // Never follows a symlink: a hostile root cannot point the
        // removal at host files.
        copier::fsutil::remove_tree(&root).map_err(|e| {
            InstallError::partial(format!("remove {}: {e}", root.display()))
        })?;
        state::clear(zonepath).map_err(|e| {
            InstallError::partial(format!(
                "remove {}: {e}",
                zonepath.join(state::STATE).display()
            ))
        })?;
        info_line(say, &format!("uninstalled {}", zonepath.display()));
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
