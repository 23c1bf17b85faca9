//! Names for images: `images/<hex>` is a symlink to the image's object
//! (`../objects/XX/<62 hex>`), and `images/refs/<name>` a symlink to
//! `../<hex>`, as composefs-rs's repository lays them out. An image is
//! kept by `cache gc` while a ref names it; each install and each cache
//! entry made in composefs form holds one ref. A ref is replaced by a
//! rename, so it always names a whole image; it is written only after the
//! image and its objects are durable (see [`Store::sync`]).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use zinstall_sys::fs::at;

use crate::digest::{self, ObjectId};
use crate::error::{Error, Op, Problem};
use crate::store::Store;

/// The longest ref name.
pub const REF_NAME_MAX: usize = 200;

/// True if `name` may name a ref: 1 to [`REF_NAME_MAX`] bytes of ASCII
/// letters, digits and `. _ - + @ :`, not starting with `.`.
pub fn valid_ref_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= REF_NAME_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+@:".contains(&b))
}

/// The ref an install at `zonepath` (absolute) holds: `install-` and the
/// first 32 hex digits of the SHA-256 of the path's bytes, so that each
/// zonepath has its own and the name stays short.
pub fn install_ref(zonepath: &std::path::Path) -> String {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let d = sha2::Sha256::digest(zonepath.as_os_str().as_bytes());
    let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
    format!("install-{}", &hex[..32])
}

impl Store {
    fn images_dir(&self) -> Result<OwnedFd, Error> {
        self.subdir(&["images"])
    }

    fn refs_dir(&self) -> Result<OwnedFd, Error> {
        self.subdir(&["images", "refs"])
    }

    fn ref_path(&self, name: &str) -> PathBuf {
        self.path().join("images/refs").join(name)
    }

    fn ref_cname(&self, name: &str) -> Result<CString, Error> {
        if !valid_ref_name(name) {
            return Err(Error::new(
                &self.ref_path(name),
                Op::Create,
                Problem::BadName,
            ));
        }
        CString::new(name).map_err(|_| {
            Error::new(&self.ref_path(name), Op::Create, Problem::BadName)
        })
    }

    /// Points the ref `name` at the image `id` (which must be in the
    /// store), replacing what it named before. The image's own
    /// `images/<hex>` link is made first, and both directories synced.
    pub fn add_ref(&self, name: &str, id: &ObjectId) -> Result<(), Error> {
        self.ref_cname(name)?;
        if !self.contains(id)? {
            return Err(Error::io(
                &self.object_path(id),
                Op::Open,
                io::Error::from(io::ErrorKind::NotFound),
            ));
        }
        let hex = digest::hex(id);
        let images = self.images_dir()?;
        let target = format!("../objects/{}", digest::object_path(id));
        self.replace_link(&images, &hex, &target)?;
        let refs = self.refs_dir()?;
        self.replace_link(&refs, name, &format!("../{hex}"))?;
        Ok(())
    }

    /// Removes the ref `name`; false if there was none. The image and its
    /// objects stay until `cache gc` finds nothing naming them.
    pub fn remove_ref(&self, name: &str) -> Result<bool, Error> {
        let leaf = self.ref_cname(name)?;
        let refs = self.refs_dir()?;
        match at::unlink(refs.as_raw_fd(), &leaf, false) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => {
                return Err(Error::io(&self.ref_path(name), Op::Remove, e));
            }
        }
        self.sync_dir(refs, &self.path().join("images/refs"))?;
        Ok(true)
    }

    /// The image the ref `name` names, if there is such a ref.
    pub fn read_ref(&self, name: &str) -> Result<Option<ObjectId>, Error> {
        let leaf = self.ref_cname(name)?;
        let refs = self.refs_dir()?;
        let shown = self.ref_path(name);
        match at::readlink(refs.as_raw_fd(), &leaf) {
            Ok(t) => parse_ref_target(&t).map(Some).ok_or_else(|| {
                Error::new(&shown, Op::ReadLink, Problem::BadName)
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&shown, Op::ReadLink, e)),
        }
    }

    /// Every ref and the image it names, by name. A ref whose target is
    /// not `../<64 hex>` is an error naming it.
    pub fn refs(&self) -> Result<Vec<(String, ObjectId)>, Error> {
        let refs = self.refs_dir()?;
        let names = at::read_names(&refs).map_err(|e| {
            Error::io(&self.path().join("images/refs"), Op::ReadDir, e)
        })?;
        let mut out = Vec::new();
        for n in names {
            let name = n.to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let shown = self.ref_path(&name);
            let t = at::readlink(refs.as_raw_fd(), &n)
                .map_err(|e| Error::io(&shown, Op::ReadLink, e))?;
            let id = parse_ref_target(&t).ok_or_else(|| {
                Error::new(&shown, Op::ReadLink, Problem::BadName)
            })?;
            out.push((name, id));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Makes `name` in `dir` a symlink to `target`, through a temporary
    /// name and a rename, then syncs `dir`.
    fn replace_link(
        &self,
        dir: &OwnedFd,
        name: &str,
        target: &str,
    ) -> Result<(), Error> {
        let shown = self.path().join("images").join(name);
        let c = |s: &str| {
            CString::new(s)
                .map_err(|_| Error::new(&shown, Op::Create, Problem::BadName))
        };
        let leaf = c(name)?;
        let tmp =
            c(&format!(".tmp-{}-{}", std::process::id(), self.next_seq()))?;
        at::symlink(&c(target)?, dir.as_raw_fd(), &tmp)
            .map_err(|e| Error::io(&shown, Op::Create, e))?;
        if let Err(e) = at::rename(dir.as_raw_fd(), &tmp, &leaf) {
            let _ = at::unlink(dir.as_raw_fd(), &tmp, false);
            return Err(Error::io(&shown, Op::Rename, e));
        }
        let dir = at::open_dir(dir.as_raw_fd(), c".")
            .map_err(|e| Error::io(&shown, Op::Open, e))?;
        self.sync_dir(dir, shown.parent().unwrap_or(&shown))
    }
}

/// The image a ref's target `../<64 hex>` names.
fn parse_ref_target(t: &[u8]) -> Option<ObjectId> {
    let s = std::str::from_utf8(t).ok()?;
    digest::parse_hex(s.strip_prefix("../")?)
}
