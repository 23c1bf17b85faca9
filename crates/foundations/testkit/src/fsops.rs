//! Filesystem setup for hostile-input tests: privilege and tool checks,
//! walking beneath a root without following symlinks, symlink targets
//! aimed out of a root, a collector of many cases, mounts that are always
//! undone, deep trees made with `mkdirat`, and racing threads.

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

pub use crate::is_root;

/// True if the test may run; else see `crate::unmet`.
pub fn needs_root() -> bool {
    crate::require_root()
}

/// Fails, naming the Debian package, if `tool` cannot be run.
pub fn require_tool(tool: &str, package: &str) {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "this test needs `{tool}`: install the Debian package {package} \
         (apt-get install {package})"
    );
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Walks `rel` beneath `root` one component at a time without following
/// a symlink; the metadata of what is there, or why it cannot be reached.
pub fn lstat_beneath(root: &Path, rel: &Path) -> Result<fs::Metadata, String> {
    let mut p = root.to_path_buf();
    let comps: Vec<_> = rel.components().collect();
    for (i, c) in comps.iter().enumerate() {
        let Component::Normal(n) = c else {
            return Err(format!(
                "{}: not a plain relative path",
                rel.display()
            ));
        };
        p.push(n);
        let md = fs::symlink_metadata(&p)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if md.file_type().is_symlink() {
            return Err(format!("{} is still a symlink", p.display()));
        }
        if i + 1 < comps.len() && !md.is_dir() {
            return Err(format!("{} is not a directory", p.display()));
        }
        if i + 1 == comps.len() {
            return Ok(md);
        }
    }
    fs::symlink_metadata(root).map_err(|e| e.to_string())
}

/// Checks that `rel` is, beneath `root` and through no symlink, a
/// regular file holding `want`.
pub fn file_beneath(
    root: &Path,
    rel: &Path,
    want: &[u8],
) -> Result<(), String> {
    let md = lstat_beneath(root, rel)?;
    if !md.is_file() {
        return Err(format!("{} is not a regular file", rel.display()));
    }
    let got = fs::read(root.join(rel)).map_err(|e| e.to_string())?;
    if got != want {
        return Err(format!(
            "{} holds {:?}, not {:?}",
            rel.display(),
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want)
        ));
    }
    Ok(())
}

/// A relative symlink target from directory `from` to `to`, both
/// absolute: `../../x/y`.
pub fn relative(from: &Path, to: &Path) -> PathBuf {
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut r = PathBuf::new();
    for _ in common..f.len() {
        r.push("..");
    }
    for c in &t[common..] {
        r.push(c);
    }
    r
}

/// A target that climbs to `/` with far more `..` than needed, then goes
/// down to `to` (absolute).
pub fn climbing(to: &Path) -> PathBuf {
    let mut r = PathBuf::new();
    for _ in 0..40 {
        r.push("..");
    }
    r.push(to.strip_prefix("/").unwrap());
    r
}

/// Runs many cases of one test, each to its end, and fails at the end
/// listing every case that failed: the whole picture, not the first
/// problem only.
#[derive(Default)]
pub struct Cases {
    failed: Vec<String>,
    ran: usize,
}

impl Cases {
    /// Runs one case; a panic in it is recorded, not propagated.
    pub fn run(&mut self, what: &str, case: impl FnOnce()) {
        self.ran += 1;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case));
        if let Err(e) = r {
            let text = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            self.failed.push(format!("[{what}]\n{text}"));
        }
    }

    /// Panics listing the failed cases, if any.
    pub fn finish(self) {
        assert!(
            self.failed.is_empty(),
            "{} of {} cases failed:\n\n{}",
            self.failed.len(),
            self.ran,
            self.failed.join("\n\n")
        );
    }
}

// ---------------------------------------------------------------- mounts

/// A mount, undone on drop (lazily if it is busy), also when the test
/// fails. Declare it after the scratch directory it lives in, so that it
/// is dropped first.
pub struct Mount {
    at: PathBuf,
}

impl Mount {
    /// `mount ARGS SRC AT`: any filesystem, by `mount`'s own options.
    pub fn with_args(args: &[&str], src: &Path, at: &Path) -> Mount {
        require_tool("mount", "mount");
        let o = Command::new("mount")
            .args(args)
            .arg(src)
            .arg(at)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "mount {args:?} {}: {}",
            at.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        Mount {
            at: at.to_path_buf(),
        }
    }

    /// `mount --bind SRC AT`.
    pub fn bind(src: &Path, at: &Path) -> Mount {
        Self::with_args(&["--bind"], src, at)
    }

    /// A fresh tmpfs at `at`.
    pub fn tmpfs(at: &Path) -> Mount {
        Self::with_args(
            &["-t", "tmpfs", "-o", "size=4m"],
            Path::new("tmpfs"),
            at,
        )
    }

    /// True while something is mounted there.
    pub fn is_mounted(&self) -> bool {
        let want = fs::canonicalize(&self.at).unwrap_or(self.at.clone());
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.at)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.at)
                .stderr(Stdio::null())
                .status();
        }
    }
}

// ------------------------------------------------------------ deep trees

/// Makes `depth` nested directories named `name` under `base` with
/// `mkdirat` and `openat` (never a path longer than one name), and a file
/// `bottom` in the deepest.
pub fn mkdir_deep(base: &Path, depth: usize, name: &str) {
    mkdir_deep_files(base, depth, name, false);
}

/// [`mkdir_deep`], with a file `f` in every directory of the chain too
/// when `files`.
pub fn mkdir_deep_files(base: &Path, depth: usize, name: &str, files: bool) {
    use zinstall_sys::fs::at;
    let n = CString::new(name).unwrap();
    // A new file: 0644, whatever the umask.
    let create = |dir: &OwnedFd, leaf: &std::ffi::CStr, what: &str| {
        let f = at::create_file(dir.as_raw_fd(), leaf)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        at::fchmod(&f, 0o644).unwrap_or_else(|e| panic!("{what}: {e}"));
    };
    let mut cur = at::open_dir(libc::AT_FDCWD, &cstr(base))
        .unwrap_or_else(|e| panic!("open base: {e}"));
    for _ in 0..depth {
        at::mkdir(cur.as_raw_fd(), &n, 0o755)
            .unwrap_or_else(|e| panic!("mkdirat: {e}"));
        cur = at::open_dir(cur.as_raw_fd(), &n)
            .unwrap_or_else(|e| panic!("openat: {e}"));
        if files {
            create(&cur, c"f", "create f");
        }
    }
    create(&cur, c"bottom", "create bottom");
}

// --------------------------------------------------------------- racing

/// A thread run until stopped; stopped and joined on drop too.
pub struct Racer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<u64>>,
}

impl Racer {
    /// Runs `step` over and over until stopped; `step` returns how many
    /// swaps it did. Their total is returned by `stop`.
    pub fn start(mut step: impl FnMut() -> u64 + Send + 'static) -> Racer {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut n = 0;
            while !s.load(Ordering::Relaxed) {
                n += step();
            }
            n
        });
        Racer {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the racing thread and returns how many swaps it did.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One swap: if `dir` is a real directory, renames it aside (to a name
/// beside it) and puts a symlink to `target` in its place.
pub fn swap_for_symlink(dir: &Path, target: &Path, n: u64) -> bool {
    let is_dir = fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
    if !is_dir {
        return false;
    }
    let aside = dir.with_file_name(format!(
        ".swapped-{}-{n}",
        dir.file_name().unwrap().to_string_lossy()
    ));
    fs::rename(dir, &aside).is_ok() && symlink(target, dir).is_ok()
}

/// The inode of what `p` names (without following it), for "was it
/// replaced" checks.
pub fn ino(p: &Path) -> Option<u64> {
    fs::symlink_metadata(p).ok().map(|m| m.ino())
}
