//! Updating an installed root in place from what it was made from: only
//! what changed is written, into a new root beside the old one, switched
//! in with one rename; the previous root is kept for [`rollback`].
//!
//! ```text
//!   root (old) ──clone──▶ root.new ──changes──▶ root.new ──exchange──▶ root
//!                                                                      root.new (old) ──▶ root.prev
//! ```
//!
//! 1. Under the zonepath's lock, an interrupted update or rollback is
//!    finished or undone first ([`recover`]).
//! 2. **The recipe.** The manifest ([`crate::manifest`]) records what
//!    the root was made from ([`crate::manifest::Recipe`]): the
//!    profile's links and mount points, its trees and their root, a
//!    baseline, the images by content digest and layer, the host files.
//!    The update makes the root from that recipe again and from nothing
//!    else: a root made from images alone is never given the host's
//!    trees. Images given to the update are new versions of the
//!    recorded ones (one each, in order); none given, the recorded ones
//!    are opened again (a registry tag pulled again). What the update is
//!    given and the recipe disagree on is refused, naming both, before
//!    anything is written; so is a root a process uses (unless
//!    `live`).
//! 3. **The source** ([`source`]) is laid out as entries, part over part
//!    in the install's order, without writing a root: the trees walked,
//!    an image's layers unpacked alone into `ZONEPATH/.zinstall.stage`
//!    with their whiteouts recorded. When the new images' layers begin
//!    with all the recorded ones, the recorded entries stand for those
//!    and only the layers after them are read.
//! 4. **The decisions** ([`decide`]) compare, at each path, the source's
//!    entry, the recorded one and the zone's ([`zone`]), under the path's
//!    owner (`follow`, `merge`, `keep`: [`crate::owners`]).
//! 5. `ZONEPATH/.zinstall.update` is written, naming the old root's
//!    inode; then `root.new` is made ([`clone`]): directories anew, every
//!    other entry shared with the old root, copy-on-write where the
//!    filesystem clones (XFS, btrfs), else by hard link.
//! 6. The decisions are carried out beneath `root.new` ([`apply`]),
//!    never through a symlink; the new manifest is written as
//!    `.zinstall.manifest.new`; what was written is made durable by
//!    `fsync` of those files and directories (one `syncfs` when a whole
//!    image was written).
//! 7. `root` and `root.new` are exchanged (`renameat2(RENAME_EXCHANGE)`
//!    on Linux; elsewhere three renames through `.zinstall.swap`, which
//!    the journal lets a rerun finish or undo). The manifests follow,
//!    the previous `root.prev` is removed and the old root becomes
//!    `root.prev`, and the journal is removed. Then each recorded file's
//!    inode and change time are taken, so the next update reads only
//!    what the zone touched.
//!
//! A kill at any moment leaves `root` whole, old or new: before the
//! exchange the old root was never written; after it the new one is
//! complete. Which one the journal tells by the root's inode; the next
//! update, rollback, attach or uninstall finishes or cleans up.

// Reads and writes by path here are converted to zinstall_core::foreign
// and the engine's beneath writer with this module's rewrite.
// libc's `stat` field types differ between platforms: casts that are
// no-ops here are not everywhere.
#![allow(clippy::unnecessary_cast)]

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zinstall_engine::beneath::Root;

use crate::manifest::{self, Made, Manifest, Recipe};
use crate::profile::Profile;
use crate::state::ZoneLock;
use crate::zonepath::open_zonepath;

mod apply;
mod attrs;
pub mod clone;
mod decide;
mod durable;
mod error;
mod journal;
pub mod live;
mod names;
pub(crate) mod platform;
mod record;
mod report;
mod source;
mod switch;
mod zone;

use apply::{Roots, apply};
use clone::Clone;
use decide::{Decision, Inputs, decide, settle_hashes};
use durable::durable;
pub use error::UpdateError;
use error::io_at;
use journal::{Journal, finish_update, remove_if, write_journal};
pub use journal::{Rolled, clear, recover, rollback};
pub use names::{JOURNAL, ROOT_NEW, ROOT_PREV, STAGE};
pub use report::{Change, Kept, Report};
use source::{Fold, ImageOptions, OpenedImage, Staging, Want};
use switch::exchange;
use zone::Zone;

/// One update.
pub struct Update<'a> {
    /// The zonepath; the root is `zonepath/root`.
    pub zonepath: PathBuf,
    /// The profile: its `[update]` ownership rules, its bounds, and (a
    /// root made from the host's trees) its trees, which must be the
    /// recorded ones.
    pub profile: Profile,
    /// New versions of the images the root was made from, one for each,
    /// in order; none: the recorded images, opened again.
    pub images: Vec<PathBuf>,
    /// The trees' root, when it is not the recorded one (a newer tree of
    /// the same system elsewhere).
    pub source_root: Option<PathBuf>,
    /// The source wins in merged paths too: the zone's changes to what
    /// the source lays out are replaced (kept paths stay kept, the
    /// zone's own entries stay); and a root installed before zinstall
    /// recorded a manifest is updated, as if every entry were the
    /// source's.
    pub force: bool,
    /// Say what would change; write nothing into the root.
    pub dry_run: bool,
    /// Update even while a process uses the root (what it writes there
    /// between the clone and the switch is lost).
    pub live: bool,
    /// Where images named by registry reference are pulled to.
    pub store: Option<PathBuf>,
    /// How they are pulled.
    pub pull: zinstall_registry::PullOptions,
    /// The platform an OCI image must be for; `None`: the host's.
    pub platform: Option<zinstall_engine::oci::Platform>,
    /// The engine's knobs, for unpacking layers.
    pub tunables: zinstall_engine::Tunables,
    /// Hears the name of each stage as it is reached (`cloned`,
    /// `applied`, `recorded`, `switched`, `settled`).
    pub stage: &'a mut dyn FnMut(&str),
    /// Raised, the update stops before the switch and removes what it
    /// built (after the switch it finishes).
    pub cancel: Option<zinstall_engine::Cancel>,
}

fn text(p: &std::path::Path) -> String {
    String::from_utf8_lossy(p.as_os_str().as_bytes()).into_owned()
}

/// What the update will make the root from, checked against the record.
struct Target {
    recipe: Recipe,
    /// The image arguments to open (given or recorded).
    images: Vec<String>,
    /// Where the trees are read.
    source_root: PathBuf,
}

impl Update<'_> {
    /// Runs the update; see the module's documentation.
    pub fn run(&mut self) -> Result<Report, UpdateError> {
        let zonepath = self.zonepath.clone();
        // No zonepath at all: nothing was ever installed there, which
        // is what to say, not that it cannot be opened.
        if std::fs::symlink_metadata(&zonepath)
            .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
        {
            return Err(UpdateError::NotInstalled {
                zonepath,
                state: "it does not exist",
            });
        }
        let _held = open_zonepath(&zonepath).map_err(|e| UpdateError::Io {
            op: "open zonepath",
            path: zonepath.clone(),
            error: io::Error::other(e.to_string()),
        })?;
        let lock = ZoneLock::take(&zonepath)?;
        let mut report = Report {
            dry_run: self.dry_run,
            ..Report::default()
        };
        if !self.dry_run {
            report.recovered = recover(&zonepath)?;
        }
        let r = self.run_locked(&mut report);
        lock.release();
        r.map(|()| report)
    }

    /// The recipe the update follows: the recorded one, with the images
    /// given (new versions of the recorded ones) and the trees' root if
    /// it moved. Refused where what was given contradicts it.
    fn target(
        &self,
        old: &Manifest,
        have_manifest: bool,
    ) -> Result<Target, UpdateError> {
        let given_images = self.given_images();
        let mut recipe = if have_manifest {
            old.header.recipe()
        } else {
            // No record: what an install of the profile with these
            // images would make.
            self.install_recipe(&given_images)
        };
        self.refuse_mismatch(&recipe, &given_images, have_manifest)?;
        let images = if given_images.is_empty() {
            recipe.images.iter().map(|i| i.arg.clone()).collect()
        } else {
            given_images
        };
        let source_root = match (&self.source_root, &recipe.source_root) {
            (Some(s), _) => s.clone(),
            (None, Some(r)) => PathBuf::from(r),
            (None, None) => self.profile.source_root.clone(),
        };
        if !recipe.trees.is_empty() {
            recipe.source_root = Some(text(&source_root));
        }
        Ok(Target {
            recipe,
            images,
            source_root,
        })
    }

    /// The images given, as the record names them.
    fn given_images(&self) -> Vec<String> {
        self.images
            .iter()
            .map(|i| {
                // A file is recorded by its absolute path, so a later
                // update from elsewhere opens the same one.
                if zinstall_registry::reference_of(i).is_none() {
                    text(&zinstall_engine::oci::absolute_name(i))
                } else {
                    text(i)
                }
            })
            .collect()
    }

    /// What was given, in words, for a refusal: the images, the trees'
    /// root and the profile's trees where the recipe reads trees.
    fn given_words(&self, recipe: &Recipe, given_images: &[String]) -> String {
        let mut w = Vec::new();
        if !given_images.is_empty() {
            w.push(format!("the images {}", given_images.join(", ")));
        }
        if let Some(s) = &self.source_root {
            w.push(format!("--source-root {}", s.display()));
        }
        if recipe.images.is_empty() && !recipe.trees.is_empty() {
            w.push(format!(
                "the profile {} (trees {})",
                self.profile.path.display(),
                self.profile
                    .trees
                    .iter()
                    .map(|t| format!("/{}", t.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if w.is_empty() {
            "nothing".into()
        } else {
            w.join(" and ")
        }
    }

    /// Refuses an update whose images, trees or trees' root contradict
    /// `recipe`, saying what was recorded and what was given.
    fn refuse_mismatch(
        &self,
        recipe: &Recipe,
        given_images: &[String],
        have_manifest: bool,
    ) -> Result<(), UpdateError> {
        let zp = &self.zonepath;
        let mismatch = |why: &str| UpdateError::RecipeMismatch {
            zonepath: zp.clone(),
            recorded: recipe.describe(),
            given: self.given_words(recipe, given_images),
            why: why.into(),
        };
        if !given_images.is_empty() && have_manifest {
            if recipe.images.is_empty() {
                return Err(mismatch(
                    "a root made from the host's trees is updated from them, \
                     never from an image (reinstall to make it from one)",
                ));
            }
            if given_images.len() != recipe.images.len() {
                return Err(mismatch(&format!(
                    "give a new version of each of its {} image(s), in order, \
                     or none to update from the recorded ones",
                    recipe.images.len()
                )));
            }
        }
        if self.source_root.is_some() && recipe.trees.is_empty() {
            return Err(mismatch(
                "--source-root names where trees come from, and this root \
                 has none (it was made from images alone)",
            ));
        }
        if !recipe.trees.is_empty() {
            let profile_trees: Vec<String> =
                self.profile.trees.iter().map(|t| text(t)).collect();
            if profile_trees != recipe.trees {
                return Err(mismatch(
                    "update with the profile the root was installed with \
                     (its trees are recorded), or reinstall",
                ));
            }
        }
        // The trees' root the profile names now, if it is not the one they
        // were read from: said, not guessed (the system's profile names
        // the host's root, which a root made from another tree must
        // never be updated from).
        if let (Some(r), None) = (&recipe.source_root, &self.source_root)
            && !recipe.trees.is_empty()
            && text(&self.profile.source_root) != *r
        {
            return Err(mismatch(&format!(
                "the profile reads its trees from {}, the root's were read \
                 from {r}: give --source-root {} to update it from there",
                self.profile.source_root.display(),
                self.profile.source_root.display()
            )));
        }
        Ok(())
    }

    /// The recipe of an install of the profile with `images`.
    fn install_recipe(&self, images: &[String]) -> Recipe {
        let p = if images.is_empty() || self.profile.lays_images_over_host() {
            self.profile.clone()
        } else {
            self.profile.for_images()
        };
        let source = self.source_root.as_ref().unwrap_or(&p.source_root);
        let baseline = p.baseline.as_ref().and_then(|b| b.find()).map(|path| {
            manifest::ArchiveRecord {
                digest: manifest::file_digest(&path).unwrap_or_default(),
                path: text(&path),
            }
        });
        crate::recipe::recipe_of(&p, source, Vec::new(), baseline)
    }

    fn image_options(&self) -> ImageOptions<'_> {
        ImageOptions {
            platform: self.platform.as_ref(),
            store: self.store.as_deref(),
            pull: &self.pull,
            unpack: zinstall_engine::unpack::UnpackOptions {
                tunables: self.tunables,
                allow_devices: self.profile.allow_devices,
                max_bytes: self.profile.max_archive_bytes,
                cancel: self.cancel.clone(),
                ..Default::default()
            },
        }
    }

    /// The new source, laid out as entries; `reuse`: let the recorded
    /// entries stand for the image layers the root was made from.
    fn source(
        &self,
        plan: &Target,
        old: &Manifest,
        opened: &[OpenedImage],
        reuse: bool,
        staging: &mut Staging,
        report: &mut Report,
    ) -> Result<(Vec<Want>, HashSet<Vec<u8>>), UpdateError> {
        let r = &plan.recipe;
        let o = self.image_options();
        let mut fold = Fold::default();
        source::layout(r, &mut fold);
        if !r.trees.is_empty() {
            source::trees(
                &self.profile,
                &plan.source_root,
                &r.trees,
                &mut fold,
            )?;
        }
        if let Some(b) = &r.baseline {
            report.bytes += source::lay_archive(
                std::path::Path::new(&b.path),
                zinstall_archive::ArchiveKind::Baseline,
                "@baseline",
                &o,
                staging,
                &mut fold,
            )?;
        }
        let new_layers: Vec<String> = opened
            .iter()
            .flat_map(|i| i.record.layers.clone())
            .collect();
        // What the root was made from, not what it is to be made from.
        let was = old.header.recipe();
        let skip = match (reuse, source::recorded_layers(&was.images)) {
            (true, Some(old_layers))
                if was.images_only() && r.images_only() =>
            {
                source::reusable(&old_layers, &new_layers)
            }
            _ => 0,
        };
        if skip > 0 {
            source::lay_recorded(old, &mut fold);
        }
        report.layers_reused = skip;
        report.layers_read = new_layers.len() - skip;
        report.bytes +=
            source::lay_images(opened, skip, &o, staging, &mut fold)?;
        let root = self.zonepath.join("root");
        let missing = source::host_files(r, &root, &mut fold)?;
        for m in &missing {
            report.kept.push(Kept {
                path: decide::shown(m),
                why: "a host file missing on the host now; the root's is kept",
            });
        }
        let mut wants = fold.into_wants();
        settle_hashes(old, &mut wants)?;
        Ok((wants, missing.into_iter().collect()))
    }

    fn run_locked(&mut self, report: &mut Report) -> Result<(), UpdateError> {
        let zp = self.zonepath.clone();
        record::installed(&zp)?;
        let (old, have_manifest) = record::recorded(&zp, self.force)?;
        let mut plan = self.target(&old, have_manifest)?;
        let root_path = zp.join("root");
        if !self.dry_run
            && !self.live
            && let Some(u) = live::user_of(&root_path)
        {
            return Err(UpdateError::Live {
                root: root_path,
                pid: u.pid,
                comm: u.comm,
                what: u.what,
            });
        }
        let o = self.image_options();
        let opened = source::open_images(&plan.images, &o)?;
        plan.recipe.images = opened.iter().map(|i| i.record.clone()).collect();
        report.recipe = plan.recipe.describe();
        stop(&self.cancel)?;
        let old_root = Root::open(&root_path)?;
        let mut staging = Staging::new(&zp)?;
        let from = Sources {
            plan: &plan,
            old: &old,
            opened: &opened,
            have_manifest,
        };
        let decided = match self.decided(&from, &old_root, &mut staging, report)
        {
            Ok(d) => d,
            Err(e) => {
                let _already_failing = staging.remove();
                return Err(e);
            }
        };
        let nothing = !decided.plan.write.iter().any(|w| *w)
            && decided.plan.remove.is_empty();
        if self.dry_run || nothing {
            staging.remove()?;
            return Ok(());
        }
        // The journal first: whatever is made after it, a rerun finds.
        let old_ino = record::root_ino(&root_path)?;
        write_journal(&zp, &Journal::Update(old_ino))?;
        let new_path = zp.join(ROOT_NEW);
        let built = self.build_new_root(&from, &old_root, &decided, report);
        let (recorded, staged) = match built {
            Ok(m) => m,
            Err(e) => {
                // Not switched: the old root is in place; what was built
                // beside it goes (a rerun would remove it too).
                let _already_failing = remove_if(&new_path)
                    .and_then(|()| remove_if(&zp.join(manifest::MANIFEST_NEW)))
                    .and_then(|()| remove_if(&zp.join(JOURNAL)));
                let _also = staging.remove();
                return Err(e);
            }
        };
        let zdir = Root::open(&zp)?;
        exchange(zdir.as_fd(), "root", ROOT_NEW, &zp)?;
        (self.stage)("switched");
        finish_update(&zp, &mut *self.stage)?;
        staging.remove()?;
        // Hard links made and unlinked, and staged files whose staging
        // name is gone, moved the change times of what they share: the
        // stamps are taken now that nothing will move them again. A clone
        // or a snapshot recorded them already.
        if report.method == "hardlink" || staged {
            record::stamp(&zp, &self.profile.owners, recorded)?;
        }
        Ok(())
    }

    /// Lays the source out while the zone's root is walked (each is a
    /// walk of its own tree), then decides. A followed path the zone
    /// changed, which only the layers hold, has the source laid out again
    /// from them all.
    fn decided(
        &self,
        from: &Sources<'_>,
        old_root: &Root,
        staging: &mut Staging,
        report: &mut Report,
    ) -> Result<Decided, UpdateError> {
        let mut first_report = fresh(report);
        let (zone, first) =
            self.scan_and_lay_out(from, old_root, staging, &mut first_report);
        let zone = zone?;
        let mut reuse = from.have_manifest;
        let mut first = Some((first, first_report));
        loop {
            let (source, mut r) = match first.take() {
                Some(f) => f,
                None => {
                    let mut r = fresh(report);
                    let s = self.source(
                        from.plan,
                        from.old,
                        from.opened,
                        reuse,
                        staging,
                        &mut r,
                    );
                    (s, r)
                }
            };
            let (wants, pinned) = source?;
            stop(&self.cancel)?;
            let inputs = Inputs {
                old: from.old,
                wants: &wants,
                zone: &zone,
                owners: &self.profile.owners,
                force: self.force,
                pinned: &pinned,
            };
            match decide(&inputs, &mut r)? {
                Decision::Plan(plan) => {
                    *report = r;
                    return Ok(Decided {
                        wants,
                        pinned,
                        plan,
                        zone_entries: zone.len(),
                    });
                }
                // A followed path the zone changed, which only the
                // layers hold: read them all.
                Decision::Restage { path: _ } if reuse => reuse = false,
                Decision::Restage { path } => {
                    return Err(UpdateError::Io {
                        op: "restore",
                        path,
                        error: io::Error::other(
                            "the source's copy is not to be found",
                        ),
                    });
                }
            }
        }
    }

    /// The zone's root walked on a thread of its own (here, with none to
    /// spare) while the source is laid out with the recorded layers.
    fn scan_and_lay_out<'r>(
        &self,
        from: &Sources<'_>,
        old_root: &'r Root,
        staging: &mut Staging,
        first_report: &mut Report,
    ) -> (Result<Zone<'r>, UpdateError>, Laid) {
        let owners = Arc::clone(&self.profile.owners);
        std::thread::scope(|s| {
            let scan = std::thread::Builder::new()
                .name("zone-scan".into())
                .spawn_scoped(s, || Zone::scan(old_root, &owners));
            let first = self.source(
                from.plan,
                from.old,
                from.opened,
                from.have_manifest,
                staging,
                first_report,
            );
            let zone = match scan {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(UpdateError::Io {
                        op: "walk",
                        path: self.zonepath.join("root"),
                        error: io::Error::other("the walk's thread panicked"),
                    })
                }),
                // No thread to spare: walked here.
                Err(_) => Zone::scan(old_root, &owners),
            };
            (zone, first)
        })
    }

    /// Builds ZONEPATH/root.new beside the root: the old root cloned (or
    /// snapshot), the decided changes applied, its top directory as the
    /// old one's, its manifest written and all of it durable. The new
    /// manifest, and whether staged files were linked in.
    fn build_new_root(
        &mut self,
        from: &Sources<'_>,
        old_root: &Root,
        d: &Decided,
        report: &mut Report,
    ) -> Result<(Manifest, bool), UpdateError> {
        let zp = self.zonepath.clone();
        let (root_path, new_path) = (zp.join("root"), zp.join(ROOT_NEW));
        // A leftover the journal did not name is not built on.
        remove_if(&new_path)?;
        let (new_root, cloned) =
            self.clone_root(old_root, d.zone_entries, report)?;
        (self.stage)("cloned");
        let roots = Roots {
            old: old_root,
            new: &new_root,
        };
        let written = apply(&d.wants, &d.plan, &roots, report)?;
        same_top(&new_root, &root_path, &new_path)?;
        (self.stage)("applied");
        let old = from.old;
        let generation =
            old.header.made.as_ref().map_or(0, |m| m.generation) + 1;
        let mut m = record::new_manifest(
            old,
            &d.wants,
            &d.plan,
            &written,
            &record::Kept {
                pinned: &d.pinned,
                method: report.method,
                cloned: &cloned,
            },
            from.plan.recipe.clone(),
            Made {
                how: "update".into(),
                at: now_secs(),
                generation,
            },
        )?;
        m.header.root_ino = Some(record::root_ino(&new_path)?);
        manifest::write(&zp, manifest::MANIFEST_NEW, &m)?;
        durable(&new_root, &written)?;
        (self.stage)("recorded");
        stop(&self.cancel).map(|()| (m, written.staged))
    }

    /// ZONEPATH/root.new made from the old root: on btrfs a snapshot of
    /// the subvolume, the whole root shared copy-on-write in one call;
    /// else a clone, entry by entry, by the best method the filesystem
    /// has. The new root, and what was cloned by path.
    fn clone_root(
        &self,
        old_root: &Root,
        zone_entries: usize,
        report: &mut Report,
    ) -> Result<(Root, HashMap<Vec<u8>, clone::Stamp>), UpdateError> {
        let zp = &self.zonepath;
        let (root_path, new_path) = (zp.join("root"), zp.join(ROOT_NEW));
        let zdir = Root::open(zp)?;
        if platform::snapshot(old_root.as_fd(), zdir.as_fd(), c"root.new")
            .map_err(io_at("snapshot", &new_path))?
        {
            report.method = "snapshot";
            report.shared = zone_entries as u64;
            return Ok((Root::open(&new_path)?, HashMap::new()));
        }
        let new_root = Root::create(&new_path, 0o700)?;
        let top_x = attrs::xattrs_fd(old_root.as_fd(), &root_path)?;
        attrs::set_xattrs(new_root.as_fd(), &top_x, &new_path)?;
        let method = clone::probe(new_root.as_fd(), &new_path)?;
        report.method = method.as_str();
        let cloning = Clone::new(
            method,
            old_root.as_fd(),
            &new_path,
            self.cancel.as_ref(),
        )?;
        let walk = || cloning.tree(old_root.as_fd(), new_root.as_fd(), b"", 1);
        report.shared += match manifest::deep_pool() {
            Some(pool) => pool.install(walk)?,
            None => walk()?,
        };
        let cloned = cloning.finish(old_root, &new_root)?;
        Ok((new_root, cloned))
    }
}

/// What an update lays its source out from.
struct Sources<'a> {
    plan: &'a Target,
    old: &'a Manifest,
    opened: &'a [OpenedImage],
    have_manifest: bool,
}

/// The source laid out: what it wants, and the paths pinned to their
/// recorded entries.
type Laid = Result<(Vec<Want>, HashSet<Vec<u8>>), UpdateError>;

/// What was decided, and of what.
struct Decided {
    wants: Vec<Want>,
    pinned: HashSet<Vec<u8>>,
    plan: decide::Plan,
    /// Entries in the zone's root.
    zone_entries: usize,
}

/// `Cancelled` once `cancel` is raised.
fn stop(cancel: &Option<zinstall_engine::Cancel>) -> Result<(), UpdateError> {
    match cancel {
        Some(c) if c.is_cancelled() => Err(UpdateError::Cancelled),
        _ => Ok(()),
    }
}

/// An empty report of a new attempt at the source, keeping what was
/// said of the update so far.
fn fresh(r: &Report) -> Report {
    Report {
        dry_run: r.dry_run,
        recovered: r.recovered,
        recipe: r.recipe.clone(),
        ..Report::default()
    }
}

/// The new root's own directory owned, moded and timed as the old one.
fn same_top(
    new_root: &Root,
    root_path: &Path,
    new_path: &Path,
) -> Result<(), UpdateError> {
    // The root's own directory, as the old one was.
    let top = std::fs::symlink_metadata(root_path)
        .map_err(io_at("stat", root_path))?;
    attrs::set_owner(new_root.as_fd(), top.uid(), top.gid(), new_path)?;
    attrs::set_mode(new_root.as_fd(), top.mode() & 0o7777, new_path)?;
    attrs::set_times(
        new_root.as_fd(),
        (top.atime(), top.atime_nsec()),
        (top.mtime(), top.mtime_nsec()),
        new_path,
    )?;
    Ok(())
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
