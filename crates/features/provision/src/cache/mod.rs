//! A content-addressed cache of extracted images.
//!
//! Many guests are made from one image. Extracting or decompressing it
//! once per guest is the slow part, so each image is extracted once into
//! an *entry* keyed by the SHA-256 of the image's bytes and the entry's
//! kind (a directory tree, or a raw disk), and guests get thin copies of
//! the entry.
//!
//! ```text
//! ROOT/                                0700 unless configured
//!   entries/raw-<sha256>/base.raw      a raw disk, sparse, immutable
//!   entries/tree-<sha256>/tree/        an extracted root, immutable
//!                                      (of an OCI image: <sha256> is its
//!                                      manifest's)
//!   entries/layer-<sha256>/layer/      an OCI layer alone, by diff_id:
//!                                      tree/ and its changes (whiteouts,
//!                                      links to lower layers' files)
//!   entries/<kind>-<sha256>.<n>/       generation n, when an earlier
//!                                      one was found altered
//!   entries/<name>/meta.json           what it was made from, when, its
//!                                      stamp
//!   entries/<name>.lock                flock: shared while guests are made
//!                                      from it, exclusive to remove it
//!   entries/<kind>-<sha256>.build.lock flock: exclusive to publish or remove
//!   entries/<name>.users               guests made from it, one JSON line
//!                                      each: path, device, inode
//!   entries/<name>.altered             why the entry no longer counts
//!   index/<identity>                   file identity -> entry name
//!   index/<identity>.lock              flock: one builder per image file
//!   index/key-<kind>-<sha256>.lock     flock: one builder per OCI layer
//!                                      or image
//!   scratch/<identity>.<pid>.<thread>  a build in progress
//!   builds.log                         one line per completed build:
//!                                      time, pid, entry, build ms,
//!                                      flush ms (immutable flag, syncfs,
//!                                      directory fsync), source
//! ```
//!
//! **One build per image.** A builder first locks the image's *identity*
//! (device, inode, size, modification and change times, kind): two
//! processes given the same file serialize there, and the second finds the
//! first one's entry through the index without reading the image at all.
//! A builder reads the image exactly once, hashing it as it extracts into
//! a scratch directory unique to it (pid and thread in the name), then
//! locks the content key and renames the scratch into place, unless an
//! entry with the same content already exists (the same bytes under
//! another file). The rename is atomic and comes after one `syncfs`, so an
//! entry is whole or absent, even after a crash. An image that changes
//! while it is read is refused.
//!
//! **A base never changes under its guests.** Overlays read their base on
//! every access, so a changed base silently changes every guest made from
//! it: `qemu-img commit` of one guest, run as root, writes the guest's
//! data into the base, and the 0444 mode does not stop root. Two
//! measures, decided so:
//!
//! - *Protection.* The payload (`base.raw`, or every file and directory
//!   of `tree/`) gets the immutable flag (`chattr +i`) before the entry is
//!   published, where the filesystem has it (ext4, XFS, btrfs, tmpfs) and
//!   the process may set it (root). Not even root can then open the base
//!   for writing: `qemu-img commit` fails instead of changing the
//!   siblings. It costs one `ioctl` per file at build time and nothing at
//!   run time. fs-verity was not chosen: it needs a filesystem feature
//!   enabled at mkfs time and makes the file read-only by a Merkle tree
//!   the kernel checks on every read, a cost on every guest's I/O, where
//!   the immutable flag costs none.
//! - *Check.* Where the flag cannot be set (a filesystem without it, or
//!   not root), or someone clears it, the entry's *stamp* (inode, size,
//!   mtime and ctime of the payload, nanoseconds; for a tree, a digest of
//!   those of every file in it), recorded in `meta.json` when built, is
//!   compared with the payload before every reuse. ctime cannot be set
//!   from user space, so no write, truncation, chmod or `chattr -i` goes
//!   unnoticed. A stat (a walk for a tree) is all it costs, where
//!   re-hashing the payload would read the whole base on every
//!   provision. An entry whose stamp differs is marked altered (the
//!   reason in `<name>.altered`), left in place for the guests that
//!   already use it (one of them may now depend on what was committed
//!   into it), and a new generation is built beside it; the caller hears
//!   of it through [`Lease::replaced`].
//!
//! **A cache entry is never more readable than its source.** The entry's
//! directory and payload take the source file's read permissions (and,
//! when run as root, its owner and group): an image readable only by
//! root gives an entry readable only by root. The cache's root is made
//! 0700 unless a mode is configured ([`crate::provision_in`]'s
//! `cache_mode`), for example 0711 so that an unprivileged hypervisor can
//! open bases by path.
//!
//! **Crashes.** A builder that dies leaves scratch behind and no entry;
//! the kernel drops its locks. The next builder of the same image, which
//! holds the identity lock, knows any scratch of that identity is stale
//! and removes it; [`Cache::gc`] removes stale scratch of any identity
//! whose lock it can take.
//!
//! **Paths never change, and gc never takes a disk guest's base.**
//! Overlays name their base by absolute path, so an entry is never moved
//! or renamed once made. Each guest is recorded with its path, device and
//! inode. [`Cache::gc`] keeps an entry if any of these holds:
//!
//! - a recorded guest is still at its path (for a disk entry: a qcow2
//!   file there whose backing file is this entry's base);
//! - a file with a recorded guest's device and inode, or any qcow2 file
//!   whose backing file is this entry's base, is found under the
//!   directories that held its guests or under the directories the
//!   caller names ([`GcOptions::search`]): a guest moved or copied there
//!   keeps its base, since an overlay's header names the base it reads;
//! - a process has the base open (a running VM, on Linux);
//! - a provision is making guests from it (its lock is held);
//! - it is a disk entry with a guest record at all: a guest moved or
//!   copied outside every searched directory cannot be seen, and would
//!   lose its base. Such a record ends only when zinstall removes that
//!   very guest (`--force`, a failed provision) or when the caller says
//!   the guests not found are deleted
//!   ([`GcOptions::release_missing`]). A tree guest is a copy that needs
//!   nothing of its entry, so tree entries are not held this way.
//!
//! `--dry-run` shows each entry's fate and why. gc removes an entry's
//! lock, user and marker files with it.
//!
//! Locks are `flock(2)` locks on files opened by this process; they are
//! released explicitly (not by dropping the file), because a child forked
//! by another thread between fork and exec would otherwise keep them.
//! Whoever takes a lock checks that the path still names the file it
//! locked, so gc may remove lock files without two holders ever locking
//! different files of one name.
//!
//! **OCI images: layers stored once.** An OCI image's layers are cached
//! each on its own, keyed by its diff_id (the SHA-256 of the uncompressed
//! layer): `layer-<diff_id>/layer/` holds the layer's `tree/`, unpacked
//! alone, and its `changes`, what the layer removes from the layers below
//! (whiteouts) and the directories it holds no entry for. Two images
//! sharing a base layer share its entry, whatever their compression. The
//! image's own entry, `tree-<manifest sha256>`, is built by copying the
//! layer trees onto each other in order (reflink where the filesystem
//! can), applying each layer's changes before its copy; guests are copies
//! of it as of any tree. Whiteouts are kept as a list beside the tree,
//! not as overlayfs' 0/0 character devices in it: a list needs no
//! privilege to make (`mknod` does), is never mistaken for an image's own
//! device node, leaves the tree exactly the layer's entries, and lives in
//! the payload, so the stamp and the immutable flag cover it. Layers are
//! built and published as any entry (one builder per key under its
//! flock, scratch, stamp, immutable flag); an image entry records the
//! layer entries it was made from, and gc removes a layer once no image
//! entry it keeps names it.
//!
//! Where each part is:
//!
//! - `layout`: the directories, names and records of a cache (entry
//!   kinds and names, `meta.json`, guest records, the pulled images'
//!   store), and its locks;
//! - `obtain`: finding an entry (an image file's identity key, the
//!   index) or building and publishing one (one build per image, the
//!   hashing reader, scratch, the atomic rename, `builds.log`);
//! - `protect`: what keeps a published entry as built (its permissions,
//!   the immutable flag, the stamp checked before every reuse);
//! - `users`: which guests an entry has (their records, and finding
//!   them where they moved: paths, inodes, qcow2 backing files, open
//!   files);
//! - `gc`: listing the entries and collecting those nobody uses.

mod composefs_gc;
mod gc;
mod layout;
mod obtain;
mod protect;
mod users;

pub use composefs_gc::{ComposefsSweep, sweep_store};
pub use gc::{EntryInfo, GcDecision, GcOptions, GcReport};
pub use layout::{Cache, Entry, EntryKind};
pub(crate) use layout::{composefs_store_of, store_of};
pub use obtain::{HashingReader, Lease, Obtained, Replaced, WouldObtain};

#[cfg(test)]
// Tests make and read their own fixtures by path.
#[allow(clippy::disallowed_methods)]
mod test {
    use std::fs;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};

    use sha2::{Digest, Sha256};

    use super::gc::disk_usage;
    use super::layout::{Entry, EntryKind, Meta, UserRecord};
    use super::obtain::identity_key;
    use super::protect::{protect, remove_entry_tree, stamp, stamp_walk};
    use crate::immutable;

    /// What the cache writes, byte for byte: `meta.json`, a guest
    /// record and a release, an image file's identity key, an entry's
    /// name and a raw payload's stamp. A cache written by one version is
    /// read by the next; a change here orphans every entry there is.
    #[test]
    fn records_keep_their_format() {
        let sha = "0123456789abcdef".repeat(4);
        let mut meta = Meta {
            kind: "tree".into(),
            sha256: sha.clone(),
            source: "/images/debian.tar.zst".into(),
            image_bytes: 4096,
            created: 1_700_000_000,
            build_ms: 12,
            stamp: Some("tree:ab".into()),
            immutable: true,
            layers: Vec::new(),
            devices: false,
        };
        let json = |m: &Meta| {
            String::from_utf8(serde_json::to_vec_pretty(m).unwrap()).unwrap()
        };
        assert_eq!(
            json(&meta),
            format!(
                "{{\n  \"kind\": \"tree\",\n  \"sha256\": \"{sha}\",\n  \
                 \"source\": \"/images/debian.tar.zst\",\n  \
                 \"image_bytes\": 4096,\n  \"created\": 1700000000,\n  \
                 \"build_ms\": 12,\n  \"stamp\": \"tree:ab\",\n  \
                 \"immutable\": true\n}}"
            )
        );
        meta.layers = vec!["layer-a".into(), "layer-b".into()];
        meta.devices = true;
        meta.stamp = None;
        assert!(
            json(&meta).ends_with(
                "\"stamp\": null,\n  \"immutable\": true,\n  \"layers\": [\n    \
                 \"layer-a\",\n    \"layer-b\"\n  ],\n  \"devices\": true\n}"
            ),
            "{}",
            json(&meta)
        );
        let mut rec = UserRecord {
            path: "/guests/g-0.qcow2".into(),
            dev: 2049,
            ino: 77,
            released: false,
        };
        assert_eq!(
            serde_json::to_string(&rec).unwrap(),
            r#"{"path":"/guests/g-0.qcow2","dev":2049,"ino":77}"#
        );
        rec.released = true;
        assert_eq!(
            serde_json::to_string(&rec).unwrap(),
            r#"{"path":"/guests/g-0.qcow2","dev":2049,"ino":77,"released":true}"#
        );
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("image");
        fs::write(&f, b"image").unwrap();
        let md = fs::metadata(&f).unwrap();
        let id = format!(
            "{}:{}:{}:{}.{}:{}.{}:raw",
            md.dev(),
            md.ino(),
            md.size(),
            md.mtime(),
            md.mtime_nsec(),
            md.ctime(),
            md.ctime_nsec()
        );
        let want: String = Sha256::digest(id.as_bytes())[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(identity_key(&md, EntryKind::Raw), want);
        assert_eq!(
            stamp(&f, EntryKind::Raw).unwrap(),
            format!(
                "raw:{}:5:{}.{:09}:{}.{:09}:{:o}:{}:{}",
                md.ino(),
                md.mtime(),
                md.mtime_nsec(),
                md.ctime(),
                md.ctime_nsec(),
                md.mode(),
                md.uid(),
                md.gid()
            )
        );
        let entry = Entry {
            dir: PathBuf::new(),
            kind: EntryKind::Layer,
            sha256: sha.clone(),
            generation: 2,
        };
        assert_eq!(entry.name(), format!("layer-{sha}.2"));
        assert_eq!(entry.content_name(), format!("layer-{sha}"));
    }

    /// A tree 3,000 levels deep (paths past PATH_MAX): stamped, its
    /// device nodes seen, measured, protected and removed, each through
    /// directory descriptors.
    #[test]
    fn deep_trees_are_stamped_protected_measured_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("tree");
        fs::create_dir(&t).unwrap();
        // Made one component at a time beneath the top's descriptor, as
        // the engine makes an archive's directories.
        let deep = ["d"; 3000].join("/");
        let deepest = zinstall_engine::beneath::Root::open(&t)
            .unwrap()
            .dir(Path::new(&deep), Some(0o755))
            .unwrap();
        deepest.replace_file("deepest", b"", 0o644, None).unwrap();
        assert_eq!(deepest.names().unwrap(), ["deepest"]);
        drop(deepest);
        let (s1, devices) = stamp_walk(&t, EntryKind::Tree).unwrap();
        assert!(!devices);
        assert_eq!(stamp(&t, EntryKind::Tree).unwrap(), s1);
        assert!(disk_usage(&t).unwrap() >= 3000 * 512);
        // Not root, or no flag on this filesystem: protect says so.
        let protected = protect(&t, EntryKind::Tree).unwrap();
        if protected {
            assert!(immutable::is_set(&t));
        }
        remove_entry_tree(&t).unwrap();
        assert!(!t.exists());
    }
}
