//! Setup for the hostile-input tests of the binaries: zonepaths with
//! their own profiles, zinstall layers built entry by entry (links
//! included), and the commands' outcomes. Filesystem setup that needs
//! only std and libc is in `fsops.rs`.

#![allow(dead_code)]

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

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
    c.env("ZINSTALL_DEFAULTS", "/dev/null");
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
            "source_root = {:?}\ntrees = [{}]\nlog = {:?}\n\
             images_over_host = true\n",
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
