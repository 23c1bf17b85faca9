//! The host's parts of the source: the profile's links and mount points,
//! its trees as they are now (walked with the profile's rules, as the
//! install copies them), and the host files, taken as the install takes
//! them.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::fold::{Fold, From, Want};
use crate::manifest::{self, Entry, Recipe};
use crate::profile::Profile;
use crate::update::error::{UpdateError, io_at};

fn now() -> (i64, i64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, i64::from(d.subsec_nanos()))
}

fn made(rel: &[u8], k: char, m: u32) -> Entry {
    let mut e = super::fold::implicit_dir(rel).entry;
    e.k = k;
    e.m = m;
    e.u = zinstall_sys::ident::euid();
    e.g = zinstall_sys::ident::egid();
    e.t = now();
    e
}

/// The profile's links and mount points, as the recipe recorded them.
pub(crate) fn layout(recipe: &Recipe, fold: &mut Fold) {
    for (path, mode) in &recipe.dirs {
        let rel = path.trim_matches('/').as_bytes();
        let e = made(rel, 'd', *mode & 0o7777);
        fold.put(Want {
            rel: rel.to_vec(),
            atime: e.t,
            entry: e,
            from: From::Entry,
            group: None,
            redirect: false,
        });
    }
    for (path, target) in &recipe.links {
        let rel = path.trim_matches('/').as_bytes();
        let mut e = made(rel, 'l', 0o777);
        e.l = Some(manifest::hex(target.as_bytes()));
        fold.put(Want {
            rel: rel.to_vec(),
            atime: e.t,
            entry: e,
            from: From::Entry,
            group: None,
            redirect: false,
        });
    }
}

/// A path a tree lists: where it is, its path in the root, which tree
/// it is of, and the symlink a link rule makes of it.
type Listed = (PathBuf, PathBuf, usize, Option<PathBuf>);

/// Every entry the trees make now, with its attributes: the walk lists
/// names and applies the rules; the attributes are read in parallel.
pub(crate) fn trees(
    profile: &Profile,
    source_root: &Path,
    trees: &[String],
    fold: &mut Fold,
) -> Result<(), UpdateError> {
    use rayon::prelude::*;
    let mut listed: Vec<Listed> = Vec::new();
    let mut scratch = Vec::new();
    for (tree, t) in trees.iter().enumerate() {
        list_tree(profile, source_root, (tree, t), &mut listed, &mut scratch)?;
    }
    let wants = listed
        .into_par_iter()
        .map(|(src, rel, tree, link)| {
            let relb = rel.as_os_str().as_bytes().to_vec();
            let mut w = want_at(&relb, &src, Some(trees[tree].clone()))?;
            if let Some(target) = link {
                // A link rule makes a symlink of it.
                w.entry.k = 'l';
                w.entry.s = 0;
                w.entry.x = None;
                w.entry.l = Some(manifest::hex(target.as_os_str().as_bytes()));
                w.group = None;
                w.redirect = true;
            }
            Ok(w)
        })
        .collect::<Result<Vec<Want>, UpdateError>>()?;
    for w in wants {
        fold.put(w);
    }
    Ok(())
}

/// Lists into `listed` what tree number `tree` (named `t`) under
/// `source_root` makes, by the profile's rules (`scratch` is theirs).
fn list_tree(
    profile: &Profile,
    source_root: &Path,
    (tree, t): (usize, &str),
    listed: &mut Vec<Listed>,
    scratch: &mut Vec<usize>,
) -> Result<(), UpdateError> {
    let t = PathBuf::from(t);
    let top = source_root.join(&t);
    // A tree the profile names may be a link to its directory, as
    // the install copies it; only whether it is one is asked.
    #[allow(clippy::disallowed_methods)]
    let md = std::fs::metadata(&top)
        .map_err(|_| UpdateError::TreeMissing { tree: top.clone() })?;
    if !md.is_dir() {
        return Err(UpdateError::TreeMissing { tree: top });
    }
    // A mount point is listed, not entered: copied empty, as the
    // install does.
    let mut it = walkdir::WalkDir::new(&top)
        .follow_links(false)
        .same_file_system(true)
        .into_iter();
    while let Some(item) = it.next() {
        let item = item.map_err(|e| UpdateError::Io {
            op: "walk",
            path: e.path().unwrap_or(&top).to_path_buf(),
            error: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("loop")),
        })?;
        let ft = item.file_type();
        let inner = item.path().strip_prefix(&top).unwrap_or(Path::new(""));
        let rel = if inner.as_os_str().is_empty() {
            t.clone()
        } else {
            t.join(inner)
        };
        let action = if item.depth() == 0 {
            &zinstall_engine::Action::Copy
        } else {
            profile.rules.action(&rel, scratch)
        };
        if *action == zinstall_engine::Action::Skip {
            if ft.is_dir() {
                it.skip_current_dir();
            }
            continue;
        }
        if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
            // The install skips sockets, FIFOs and devices.
            continue;
        }
        let link = if ft.is_file() {
            zinstall_engine::rules::link_target(action, &rel)
        } else {
            None
        };
        listed.push((item.into_path(), rel, tree, link));
    }
    Ok(())
}

/// What `src` makes at `rel`: its attributes, read without following it.
fn want_at(
    rel: &[u8],
    src: &Path,
    origin: Option<String>,
) -> Result<Want, UpdateError> {
    let md = std::fs::symlink_metadata(src).map_err(io_at("stat", src))?;
    let entry = manifest::entry_of(rel, src, &md, origin)
        .map_err(io_at("read attributes of", src))?;
    Ok(Want {
        rel: rel.to_vec(),
        entry,
        from: From::Path(src.to_path_buf()),
        group: (md.is_file() && md.nlink() > 1).then(|| (md.dev(), md.ino())),
        atime: (md.atime(), md.atime_nsec()),
        redirect: false,
    })
}

/// The host files, as the install takes them: a link whose target the
/// root lacks by the content it leads to. One missing on the host now
/// is left as the root has it: returned, to be named.
pub(crate) fn host_files(
    recipe: &Recipe,
    old_root: &Path,
    fold: &mut Fold,
) -> Result<Vec<Vec<u8>>, UpdateError> {
    let mut missing = Vec::new();
    for f in &recipe.host_files {
        let f = Path::new(f);
        let rel = f
            .strip_prefix("/")
            .unwrap_or(f)
            .as_os_str()
            .as_bytes()
            .to_vec();
        if std::fs::symlink_metadata(f).is_err() {
            missing.push(rel);
            continue;
        }
        let src = crate::steps::host_source(f, old_root)
            .unwrap_or_else(|| f.to_path_buf());
        let mut w = want_at(&rel, &src, Some("@host".into()))?;
        w.group = None;
        fold.put(w);
    }
    Ok(missing)
}
