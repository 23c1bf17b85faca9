//! Setup shared by the hostile-input tests: zonepaths with their own
//! profiles, zinstall layers built entry by entry (links included), the
//! commands' outcomes, mounts that are always undone, deep trees made
//! with `mkdirat`, and racing threads.

#![allow(dead_code)]

use std::ffi::CString;
use std::fs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// True if the test may run; else says why not.
pub fn needs_root(test: &str) -> bool {
    if !is_root() {
        eprintln!("skipped: {test}: needs root");
    }
    is_root()
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

/// A command's outcome, with the output kept apart: `INFO:` lines go to
/// stdout, errors to stderr.
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// Everything, for a failure message; lines longer than 600
    /// characters (paths thousands of levels deep) are cut.
    pub fn all(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code,
            cut(&self.stdout),
            cut(&self.stderr)
        )
    }

    /// One line saying how it ended, for the log of a case.
    pub fn brief(&self) -> String {
        if self.ok() {
            "succeeded".to_string()
        } else {
            let first = self.stderr.lines().next().unwrap_or("");
            format!("exit {:?}: {}", self.code, &first[..first.len().min(300)])
        }
    }
}

fn cut(text: &str) -> String {
    let mut out = String::new();
    for l in text.lines() {
        if l.len() > 600 {
            let mut end = 600;
            while !l.is_char_boundary(end) {
                end -= 1;
            }
            out.push_str(&format!(
                "{}... ({} characters)\n",
                &l[..end],
                l.len()
            ));
        } else {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
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

impl From<Output> for Out {
    fn from(o: Output) -> Out {
        Out {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// `zinstall` with no defaults file (built-in tunables).
pub fn zinstall() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    c.env("ZINSTALL_DEFAULTS", "/nonexistent");
    c
}

pub fn run(c: &mut Command) -> Out {
    c.output().unwrap_or_else(|e| panic!("{c:?}: {e}")).into()
}

/// What a hostile case may end in: a refusal whose error output names
/// one of `names`, or a success that `harmless` accepts.
pub fn refused_or_harmless(
    what: &str,
    out: &Out,
    names: &[String],
    harmless: impl FnOnce() -> Result<(), String>,
) {
    if out.ok() {
        if let Err(why) = harmless() {
            panic!(
                "{what}: succeeded, but not harmlessly: {why}\n{}",
                out.all()
            );
        }
        return;
    }
    assert!(
        names.iter().any(|n| out.stderr.contains(n.as_str())),
        "{what}: failed without naming the offending path (any of {names:?})\n{}",
        out.all()
    );
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

// ---------------------------------------------------------------- layers

/// A zinstall archive built entry by entry. Names and link targets of any
/// length (GNU long-name and long-link entries), and link targets tar-rs's
/// builder would refuse.
pub struct Layer {
    b: tar::Builder<Vec<u8>>,
}

impl Layer {
    /// Starts a layer (`kind` "layer") or a baseline ("baseline").
    pub fn new(kind: &str) -> Layer {
        let mut l = Layer {
            b: tar::Builder::new(Vec::new()),
        };
        l.entry(
            "zinstall.json",
            tar::EntryType::Regular,
            None,
            format!("{{\"v\":\"1\",\"t\":\"{kind}\"}}\n").as_bytes(),
            0o444,
        );
        l
    }

    fn long(&mut self, kind: tar::EntryType, value: &[u8]) {
        let mut body = value.to_vec();
        body.push(0);
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_entry_type(kind);
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        self.b.append(&h, &body[..]).unwrap();
    }

    fn entry(
        &mut self,
        name: &str,
        kind: tar::EntryType,
        target: Option<&[u8]>,
        data: &[u8],
        mode: u32,
    ) -> &mut Layer {
        let mut h = tar::Header::new_gnu();
        let n = name.as_bytes();
        if n.len() > 100 {
            self.long(tar::EntryType::GNULongName, n);
        } else {
            h.as_old_mut().name[..n.len()].copy_from_slice(n);
        }
        if let Some(t) = target {
            if t.len() > 100 {
                self.long(tar::EntryType::GNULongLink, t);
            } else {
                h.as_old_mut().linkname[..t.len()].copy_from_slice(t);
            }
        }
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_mtime(1_600_000_000);
        h.set_uid(0);
        h.set_gid(0);
        h.set_cksum();
        self.b.append(&h, data).unwrap();
        self
    }

    /// `root/NAME`, a regular file.
    pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Layer {
        self.entry(
            &format!("root/{name}"),
            tar::EntryType::Regular,
            None,
            data,
            0o644,
        )
    }

    /// `root/NAME/`, a directory.
    pub fn dir(&mut self, name: &str) -> &mut Layer {
        self.entry(
            &format!("root/{name}/"),
            tar::EntryType::Directory,
            None,
            &[],
            0o755,
        )
    }

    /// `root/NAME`, a symlink to `target` (written as given).
    pub fn symlink(&mut self, name: &str, target: &Path) -> &mut Layer {
        self.entry(
            &format!("root/{name}"),
            tar::EntryType::Symlink,
            Some(target.as_os_str().as_bytes()),
            &[],
            0o777,
        )
    }

    /// `root/NAME`, a hard link to the member `root/TARGET`.
    pub fn hardlink(&mut self, name: &str, target: &str) -> &mut Layer {
        self.entry(
            &format!("root/{name}"),
            tar::EntryType::Link,
            Some(format!("root/{target}").as_bytes()),
            &[],
            0o644,
        )
    }

    /// Writes the archive to `path`.
    pub fn write(&mut self, path: &Path) -> PathBuf {
        let b = std::mem::replace(&mut self.b, tar::Builder::new(Vec::new()));
        fs::write(path, b.into_inner().unwrap()).unwrap();
        path.to_path_buf()
    }
}

// ----------------------------------------------------------------- zones

/// A scratch directory holding a source root, zonepaths, a profile and,
/// beside them, whatever sentinels a test makes.
pub struct Zone {
    pub d: tempfile::TempDir,
    /// The source root the profile's trees come from.
    pub src: PathBuf,
    pub zonepath: PathBuf,
    pub root: PathBuf,
    pub profile: PathBuf,
}

/// What a test profile holds beyond its source root.
#[derive(Default)]
pub struct ProfileSpec<'a> {
    pub trees: &'a [&'a str],
    pub host_files: &'a [&'a Path],
    /// A directory holding `baseline.tar`, required if given.
    pub baseline_dir: Option<&'a Path>,
}

impl Zone {
    /// A scratch directory with a small `usr` tree, and a profile with
    /// that tree and nothing else.
    pub fn new() -> Zone {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        fs::create_dir_all(src.join("usr/lib")).unwrap();
        fs::write(src.join("usr/lib/libc.so.1"), b"libc").unwrap();
        let zonepath = d.path().join("zones/z1");
        let z = Zone {
            root: zonepath.join("root"),
            profile: d.path().join("profile.toml"),
            zonepath,
            src,
            d,
        };
        z.write_profile(&ProfileSpec {
            trees: &["usr"],
            ..ProfileSpec::default()
        });
        z
    }

    /// A path in the scratch directory, outside every zonepath.
    pub fn outside(&self, name: &str) -> PathBuf {
        self.d.path().join(name)
    }

    /// Rewrites the profile.
    pub fn write_profile(&self, spec: &ProfileSpec) {
        let list = |v: Vec<String>| {
            v.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut text = format!(
            "source_root = {:?}\ntrees = [{}]\nlog = {:?}\n",
            self.src.display().to_string(),
            list(spec.trees.iter().map(|s| s.to_string()).collect()),
            self.d.path().join("install.log").display().to_string(),
        );
        if let Some(b) = spec.baseline_dir {
            text.push_str(&format!(
                "\n[baseline]\nfile = \"baseline.tar\"\nsearch = [{:?}]\nrequired = true\n",
                b.display().to_string()
            ));
        }
        text.push_str(&format!(
            "\n[host_files]\npaths = [{}]\n",
            list(
                spec.host_files
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect()
            )
        ));
        fs::write(&self.profile, text).unwrap();
    }

    /// Points the zone at another zonepath in the scratch directory.
    pub fn use_zonepath(&mut self, name: &str) {
        self.zonepath = self.d.path().join("zones").join(name);
        self.root = self.zonepath.join("root");
    }

    pub fn install_cmd(&self, extra: &[&str], images: &[&Path]) -> Command {
        let mut c = zinstall();
        c.arg("install")
            .arg("--profile")
            .arg(&self.profile)
            .arg("--zonepath")
            .arg(&self.zonepath)
            .args(extra)
            .args(images);
        c
    }

    pub fn install(&self, images: &[&Path]) -> Out {
        run(&mut self.install_cmd(&[], images))
    }

    pub fn uninstall_cmd(&self, force: bool) -> Command {
        let mut c = zinstall();
        c.arg("uninstall")
            .arg("--log")
            .arg(self.d.path().join("uninstall.log"))
            .arg("--zonepath")
            .arg(&self.zonepath);
        if force {
            c.arg("-F");
        }
        c
    }

    pub fn uninstall(&self, force: bool) -> Out {
        run(&mut self.uninstall_cmd(force))
    }

    /// Installs with the current profile and no image; panics if that
    /// fails.
    pub fn install_ok(&self) {
        let o = self.install(&[]);
        assert!(o.ok(), "a plain install failed:\n{}", o.all());
    }

    /// Asserts the root is gone after an uninstall.
    pub fn assert_root_removed(&self, what: &str, out: &Out) {
        assert!(
            fs::symlink_metadata(&self.root).is_err(),
            "{what}: {} is still there\n{}",
            self.root.display(),
            out.all()
        );
    }

    /// Fills the source root's `usr` with `dirs` directories of `files`
    /// small files each: `usr/dNN/fMM`.
    pub fn big_usr(&self, dirs: usize, files: usize) {
        for d in 0..dirs {
            let dir = self.src.join(format!("usr/d{d:02}"));
            fs::create_dir_all(&dir).unwrap();
            for f in 0..files {
                fs::write(dir.join(format!("f{f:03}")), b"tree file").unwrap();
            }
        }
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
    fn with_args(args: &[&str], src: &Path, at: &Path) -> Mount {
        require_tool("mount", "mount");
        let o = run(Command::new("mount").args(args).arg(src).arg(at));
        assert!(o.ok(), "mount {args:?} {}: {}", at.display(), o.all());
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

fn check(rc: libc::c_int, what: &str) {
    assert!(rc >= 0, "{what}: {}", std::io::Error::last_os_error());
}

/// Makes `depth` nested directories named `name` under `base` with
/// `mkdirat` and `openat` (never a path longer than one name), and a file
/// `bottom` in the deepest.
pub fn mkdir_deep(base: &Path, depth: usize, name: &str) {
    let n = CString::new(name).unwrap();
    let flags =
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(cstr(base).as_ptr(), flags) };
    check(fd, "open base");
    // SAFETY: fd was just opened and is owned here only.
    let mut cur = unsafe { OwnedFd::from_raw_fd(fd) };
    for _ in 0..depth {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor and C string.
        check(
            unsafe { libc::mkdirat(cur.as_raw_fd(), n.as_ptr(), 0o755) },
            "mkdirat",
        );
        // SAFETY: as above.
        let next = unsafe { libc::openat(cur.as_raw_fd(), n.as_ptr(), flags) };
        check(next, "openat");
        // SAFETY: just opened, owned here only.
        cur = unsafe { OwnedFd::from_raw_fd(next) };
    }
    use std::os::fd::AsRawFd;
    let bottom = CString::new("bottom").unwrap();
    // SAFETY: a valid descriptor and C string.
    let f = unsafe {
        libc::openat(
            cur.as_raw_fd(),
            bottom.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o644,
        )
    };
    check(f, "create bottom");
    // SAFETY: just opened, owned here only.
    drop(unsafe { OwnedFd::from_raw_fd(f) });
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

/// Waits for a child with a time limit; kills it past the limit.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Out {
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap().into();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let o: Out = child.wait_with_output().unwrap().into();
            panic!("still running after {limit:?}; killed\n{}", o.all());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The inode of what `p` names (without following it), for "was it
/// replaced" checks.
pub fn ino(p: &Path) -> Option<u64> {
    fs::symlink_metadata(p).ok().map(|m| m.ino())
}
