//! Reading a directory tree into composefs's tree: every entry opened
//! relative to its parent's descriptor, never through a symlink; each
//! regular file's contents stored as an object (or kept inline when
//! small), its metadata and extended attributes kept for the image.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, Sender};

use composefs::generic_tree::LeafId;
use composefs::tree::{
    Directory, FileSystem, Inode, Leaf, LeafContent, RegularFile, Stat,
};
use zinstall_core::foreign::{self, Follow};
use zinstall_sys::fs::{XattrTarget, at, get_xattr, list_xattrs};

use crate::digest::{INLINE_MAX, ObjectId};
use crate::error::{Error, Op, Problem};
use crate::store::{Put, Store};

/// What a scan found and stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Entries below the top directory.
    pub entries: u64,
    /// Regular files kept inline in the image.
    pub inline: u64,
    /// Regular files stored as objects (each inode once).
    pub objects: u64,
    /// Of those, objects written (the rest were in the store already).
    pub written: u64,
    /// Bytes of the objects written.
    pub bytes_written: u64,
    /// Of those written, objects whose name was present with contents
    /// that did not match it (checked on first use), written afresh.
    pub replaced: u64,
    /// Objects named by the digest the tree's writer took as it wrote
    /// them ([`ScanOptions::known`]): not read again.
    pub named_by_writer: u64,
}

/// What the writer of a tree knows of its files' contents: for a path
/// relative to the top (`/`-separated bytes), the size it wrote there
/// and the contents' object name, taken as it wrote them.
pub type Known = Arc<dyn Fn(&[u8]) -> Option<(u64, ObjectId)> + Send + Sync>;

/// How a scan runs.
#[derive(Clone, Default)]
pub struct ScanOptions {
    /// Threads that hash and store regular files' contents while the
    /// walk goes on; 0 for one per CPU.
    pub workers: usize,
    /// Move each file too large to be inline into the store (a rename,
    /// [`Store::adopt_file`]) instead of copying it: for a tree written
    /// only to be stored, on the store's filesystem.
    pub adopt: bool,
    /// With `adopt`: the names of the files the tree's writer hashed as
    /// it wrote them. A file found at the size given is adopted under
    /// that name without being read; any other is read and hashed.
    pub known: Option<Known>,
}

impl std::fmt::Debug for ScanOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanOptions")
            .field("workers", &self.workers)
            .field("adopt", &self.adopt)
            .field("known", &self.known.is_some())
            .finish()
    }
}

/// A tree read from a directory, ready for the image writer.
pub struct Scanned {
    /// composefs's tree.
    pub fs: FileSystem<ObjectId>,
    /// What was found and stored.
    pub counts: Counts,
}

/// Files queued for the workers, at most, per worker: enough to keep
/// them busy while the walk lists a directory, few enough that the
/// descriptors held (each queued file's directory) stay bounded.
const QUEUED_PER_WORKER: usize = 64;

/// A regular file for a worker to store: its directory's descriptor
/// (shared by its siblings' jobs), its name, the walk's `lstat` of it
/// and its leaf's place in the tree.
struct Job {
    dir: Arc<OwnedFd>,
    name: CString,
    shown: PathBuf,
    st: libc::stat,
    leaf: usize,
}

/// A worker's answer: the leaf for `Job::leaf` and what was stored.
struct Done {
    leaf: usize,
    stored: Result<(Leaf<ObjectId>, Put, bool), Error>,
}

struct Scan<'a> {
    store: &'a Store,
    leaves: Vec<Leaf<ObjectId>>,
    /// Inodes with more than one link, by (device, inode): their leaf.
    links: HashMap<(u64, u64), LeafId>,
    counts: Counts,
    jobs: Sender<Job>,
    /// Set by the first failure, the walk's or a worker's: the walk
    /// stops and the workers drop what is queued.
    failed: &'a AtomicBool,
}

type Xattrs = BTreeMap<Box<OsStr>, Box<[u8]>>;

/// Reads the tree at `src` (its last component not followed), storing
/// regular files' contents in `store`, with one worker per CPU.
pub fn scan(src: &Path, store: &Store) -> Result<Scanned, Error> {
    scan_with(src, store, &ScanOptions::default())
}

/// [`scan`] with `opts`. The walk builds the tree on this thread, in
/// the order of its directories' listings; regular files too large to be
/// inline go to `opts.workers` threads, which open each beneath its
/// directory's descriptor and store it. The tree, and so the image, is
/// the same whatever the number of workers.
pub fn scan_with(
    src: &Path,
    store: &Store,
    opts: &ScanOptions,
) -> Result<Scanned, Error> {
    let c = zinstall_sys::cstr(src).map_err(|e| Error::io(src, Op::Open, e))?;
    let top = at::open_dir(libc::AT_FDCWD, &c)
        .map_err(|e| Error::io(src, Op::Open, e))?;
    let st = at::fstat(&top).map_err(|e| Error::io(src, Op::Stat, e))?;
    let xattrs = read_xattrs(&XattrTarget::Fd(top.as_fd()), src)?;
    let workers = match opts.workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let failed = AtomicBool::new(false);
    let (jobs, queue) = crossbeam_channel::bounded(workers * QUEUED_PER_WORKER);
    let (answers, done) = crossbeam_channel::unbounded();
    let mut s = Scan {
        store,
        leaves: Vec::new(),
        links: HashMap::new(),
        counts: Counts::default(),
        jobs,
        failed: &failed,
    };
    let walked = std::thread::scope(|sc| {
        for _ in 0..workers {
            let (queue, answers) = (queue.clone(), answers.clone());
            let failed = &failed;
            sc.spawn(move || work(&queue, &answers, store, src, opts, failed));
        }
        drop((queue, answers));
        let walked = s.directory(&Arc::new(top), src, stat_of(&st, xattrs));
        if walked.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        // Closing the queue lets the workers finish and exit.
        let (sender, _) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut s.jobs, sender));
        walked
    });
    let first_failure = s.take_answers(&done);
    let root = walked?;
    if let Some((_, e)) = first_failure {
        return Err(e);
    }
    Ok(Scanned {
        fs: FileSystem {
            root,
            leaves: s.leaves,
        },
        counts: s.counts,
    })
}

/// A worker: stores each file queued and answers with its leaf; after
/// the first failure (`failed`), drops what is queued.
fn work(
    queue: &Receiver<Job>,
    answers: &Sender<Done>,
    store: &Store,
    top: &Path,
    opts: &ScanOptions,
    failed: &AtomicBool,
) {
    for job in queue {
        if failed.load(Ordering::Relaxed) {
            continue;
        }
        let stored = store_file(store, &job, top, opts);
        if stored.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        let _ = answers.send(Done {
            leaf: job.leaf,
            stored,
        });
    }
}

impl Scan<'_> {
    /// Puts the workers' answers in the tree and the counts; the failure
    /// of the earliest file, if any failed.
    fn take_answers(
        &mut self,
        done: &Receiver<Done>,
    ) -> Option<(usize, Error)> {
        let mut first_failure: Option<(usize, Error)> = None;
        for d in done.try_iter() {
            match d.stored {
                Ok((leaf, put, named)) => {
                    self.counts.objects += 1;
                    self.counts.named_by_writer += u64::from(named);
                    if put.written {
                        self.counts.written += 1;
                        self.counts.bytes_written += put.size;
                    }
                    if put.replaced {
                        self.counts.replaced += 1;
                    }
                    self.leaves[d.leaf] = leaf;
                }
                // The earliest file's, whichever worker saw it first.
                Err(e) => {
                    if first_failure.as_ref().is_none_or(|(l, _)| d.leaf < *l) {
                        first_failure = Some((d.leaf, e));
                    }
                }
            }
        }
        first_failure
    }
}

/// A worker's part: opens the file `job` names through the foreign-file
/// seam, checks it is the inode the walk saw, and stores its contents.
fn store_file(
    store: &Store,
    job: &Job,
    top: &Path,
    opts: &ScanOptions,
) -> Result<(Leaf<ObjectId>, Put, bool), Error> {
    let shown = &job.shown;
    let f = if opts.adopt {
        // A tree written to be stored is the project's own (a staging
        // root, 0700): opened plainly, never through a symlink, and
        // checked below to be the inode the walk saw.
        at::open_read(job.dir.as_raw_fd(), &job.name)
            .map_err(|e| Error::io(shown, Op::Open, e))?
    } else {
        let rel = Path::new(OsStr::from_bytes(job.name.to_bytes()));
        foreign::open_at(job.dir.as_fd(), rel, shown, Follow::No)
            .map_err(|e| Error::new(shown, Op::Open, Problem::Foreign(e)))?
    };
    let now = at::fstat(&f).map_err(|e| Error::io(shown, Op::Stat, e))?;
    same(&job.st, &now, shown)?;
    let size = now.st_size as u64;
    if size != job.st.st_size as u64 {
        return Err(Error::new(shown, Op::Read, Problem::Changed("size")));
    }
    let xattrs = read_xattrs(&XattrTarget::Fd(f.as_fd()), shown)?;
    let mut named = false;
    let put = if opts.adopt {
        let names: Vec<&[u8]> = xattrs.keys().map(|k| k.as_bytes()).collect();
        let known = opts
            .known
            .as_ref()
            .zip(shown.strip_prefix(top).ok())
            .and_then(|(k, rel)| k(rel.as_os_str().as_bytes()))
            .filter(|&(n, _)| n == size)
            .map(|(n, id)| (id, n));
        named = known.is_some();
        store.adopt_file(&job.dir, &job.name, &f, shown, &now, &names, known)?
    } else {
        store.put_file(&f, shown)?
    };
    if put.size != size {
        return Err(Error::new(shown, Op::Read, Problem::Changed("size")));
    }
    let leaf = Leaf {
        stat: stat_of(&now, xattrs),
        content: LeafContent::Regular(RegularFile::External(
            put.id.clone(),
            size,
        )),
    };
    Ok((leaf, put, named))
}

fn stat_of(st: &libc::stat, xattrs: Xattrs) -> Stat {
    Stat {
        st_mode: st.st_mode & 0o7777,
        st_uid: st.st_uid,
        st_gid: st.st_gid,
        st_mtim_sec: st.st_mtime,
        st_mtim_nsec: st.st_mtime_nsec as u32,
        xattrs,
    }
}

/// Every extended attribute of `t`, by name.
fn read_xattrs(t: &XattrTarget<'_>, shown: &Path) -> Result<Xattrs, Error> {
    let names = list_xattrs(t).map_err(|e| Error::io(shown, Op::Xattrs, e))?;
    let mut out = BTreeMap::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = std::ffi::CString::new(name)
            .map_err(|_| Error::new(shown, Op::Xattrs, Problem::BadName))?;
        // One removed since it was listed is simply not there.
        if let Some(v) =
            get_xattr(t, &cn).map_err(|e| Error::io(shown, Op::Xattrs, e))?
        {
            out.insert(Box::from(OsStr::from_bytes(name)), v.into());
        }
    }
    Ok(out)
}

/// Fails unless `now` is the inode `was` described.
fn same(was: &libc::stat, now: &libc::stat, shown: &Path) -> Result<(), Error> {
    if was.st_dev != now.st_dev
        || was.st_ino != now.st_ino
        || was.st_mode & libc::S_IFMT != now.st_mode & libc::S_IFMT
    {
        return Err(Error::new(shown, Op::Open, Problem::Changed("replaced")));
    }
    Ok(())
}

impl Scan<'_> {
    fn directory(
        &mut self,
        dir: &Arc<OwnedFd>,
        shown: &Path,
        stat: Stat,
    ) -> Result<Directory<ObjectId>, Error> {
        let mut out = Directory::new(stat);
        let names = at::read_names(dir.as_ref())
            .map_err(|e| Error::io(shown, Op::ReadDir, e))?;
        for name in names {
            // A worker failed: its error is the scan's.
            if self.failed.load(Ordering::Relaxed) {
                break;
            }
            let os = OsStr::from_bytes(name.to_bytes());
            let p = shown.join(os);
            let inode = self.entry(dir, &name, &p)?;
            out.insert(os, inode);
            self.counts.entries += 1;
        }
        Ok(out)
    }

    fn entry(
        &mut self,
        dir: &Arc<OwnedFd>,
        name: &CStr,
        shown: &Path,
    ) -> Result<Inode<ObjectId>, Error> {
        let st = at::lstat(dir.as_raw_fd(), name)
            .map_err(|e| Error::io(shown, Op::Stat, e))?
            .ok_or_else(|| {
                Error::new(shown, Op::Stat, Problem::Changed("removed"))
            })?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFDIR {
            let sub = at::open_dir(dir.as_raw_fd(), name)
                .map_err(|e| Error::io(shown, Op::Open, e))?;
            let now =
                at::fstat(&sub).map_err(|e| Error::io(shown, Op::Stat, e))?;
            same(&st, &now, shown)?;
            let x = read_xattrs(&XattrTarget::Fd(sub.as_fd()), shown)?;
            let d = self.directory(&Arc::new(sub), shown, stat_of(&now, x))?;
            return Ok(Inode::Directory(Box::new(d)));
        }
        let key = (st.st_dev, st.st_ino);
        if st.st_nlink > 1
            && let Some(id) = self.links.get(&key)
        {
            return Ok(Inode::leaf(*id));
        }
        let leaf = if kind == libc::S_IFREG && st.st_size as u64 > INLINE_MAX {
            // A worker stores it; this stands in until its leaf comes.
            self.jobs
                .send(Job {
                    dir: Arc::clone(dir),
                    name: name.to_owned(),
                    shown: shown.to_path_buf(),
                    st,
                    leaf: self.leaves.len(),
                })
                .map_err(|_| {
                    Error::io(
                        shown,
                        Op::Read,
                        std::io::Error::other("the scan's workers stopped"),
                    )
                })?;
            Leaf {
                stat: stat_of(&st, Xattrs::new()),
                content: LeafContent::Fifo,
            }
        } else if kind == libc::S_IFREG {
            self.regular(dir, name, shown, &st)?
        } else {
            let content = match kind {
                libc::S_IFLNK => {
                    let t = at::readlink(dir.as_raw_fd(), name)
                        .map_err(|e| Error::io(shown, Op::ReadLink, e))?;
                    LeafContent::Symlink(OsStr::from_bytes(&t).into())
                }
                libc::S_IFCHR => LeafContent::CharacterDevice(st.st_rdev),
                libc::S_IFBLK => LeafContent::BlockDevice(st.st_rdev),
                libc::S_IFIFO => LeafContent::Fifo,
                _ => LeafContent::Socket,
            };
            let t = XattrTarget::At(dir.as_raw_fd(), name);
            Leaf {
                stat: stat_of(&st, read_xattrs(&t, shown)?),
                content,
            }
        };
        let id = LeafId(self.leaves.len());
        self.leaves.push(leaf);
        if st.st_nlink > 1 {
            self.links.insert(key, id);
        }
        Ok(Inode::leaf(id))
    }

    /// A small regular file: opened through the foreign-file seam,
    /// checked to be the inode listed, its contents inline (or stored, if
    /// it grew since it was listed).
    fn regular(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        shown: &Path,
        st: &libc::stat,
    ) -> Result<Leaf<ObjectId>, Error> {
        let rel = Path::new(OsStr::from_bytes(name.to_bytes()));
        let f = foreign::open_at(dir.as_fd(), rel, shown, Follow::No)
            .map_err(|e| Error::new(shown, Op::Open, Problem::Foreign(e)))?;
        let now = at::fstat(&f).map_err(|e| Error::io(shown, Op::Stat, e))?;
        same(st, &now, shown)?;
        let xattrs = read_xattrs(&XattrTarget::Fd(f.as_fd()), shown)?;
        let size = now.st_size as u64;
        let file = if size <= INLINE_MAX {
            self.counts.inline += 1;
            RegularFile::Inline(read_small(&f, size, shown)?.into())
        } else {
            let put = self.store.put_file(&f, shown)?;
            if put.size != size {
                return Err(Error::new(
                    shown,
                    Op::Read,
                    Problem::Changed("size"),
                ));
            }
            self.counts.objects += 1;
            if put.written {
                self.counts.written += 1;
                self.counts.bytes_written += size;
            }
            if put.replaced {
                self.counts.replaced += 1;
            }
            RegularFile::External(put.id, size)
        };
        Ok(Leaf {
            stat: stat_of(&now, xattrs),
            content: LeafContent::Regular(file),
        })
    }
}

/// The whole of a small file, which must be `size` bytes.
fn read_small(mut f: &File, size: u64, shown: &Path) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::with_capacity(size as usize);
    f.by_ref()
        .take(size + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(shown, Op::Read, e))?;
    if buf.len() as u64 != size {
        return Err(Error::new(shown, Op::Read, Problem::Changed("size")));
    }
    Ok(buf)
}
