//! No copy fails for want of descriptors, and memory stays flat in depth.
//!
//! zoneadm starts the brand hook with illumos' default soft limit of 256
//! descriptors. Each binary raises its soft limit to the hard one first;
//! where the hard limit is that low too, every run takes the directories
//! it holds open out of a budget below the limit and waits for it rather
//! than failing with EMFILE (see copier's `descriptors` module). Each
//! case runs the built `zinstall` in a child process under its own
//! `RLIMIT_NOFILE`, never this harness's, and reads the run's descriptor
//! counts from `--json`: the limit the budget was derived from, the
//! budget, and the most of it held at once.

// Linux only: peak memory from wait4, scratch trees on loop-mounted ext4.
#![cfg(target_os = "linux")]

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use zinstall_testkit::{Kind, LoopFs, Tmp};

use zinstall_testkit::fsops;

use crate::oci::support;

/// zoneadm's default soft limit on illumos.
const ZONEADM_SOFT: u64 = 256;

/// A real tree: tens of thousands of entries, wide and a dozen levels
/// deep.
const SHARE: &str = "/usr/share";

/// A journaled ext4 of its own for generated trees: making and removing
/// tens of thousands of files on the root filesystem here takes minutes.
fn scratch() -> Option<LoopFs> {
    LoopFs::require(Kind::Ext4, 2 << 30)
}

/// What a child run gave: whether it succeeded, its output, and its
/// peak resident memory in KiB (the kernel's count, from `wait4`).
struct Run {
    ok: bool,
    out: String,
    max_rss_kib: u64,
}

/// This process's hard limit on descriptors: the children's, unless a
/// case lowers it.
fn hard_limit() -> u64 {
    zinstall_sys::process::nofile_limits().unwrap().1
}

/// Runs `zinstall ARGS` with descriptor limits `soft` and `hard`.
fn zinstall<S: AsRef<OsStr>>(
    dir: &Path,
    args: &[S],
    soft: u64,
    hard: u64,
) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    cmd.env("ZINSTALL_DEFAULTS", "/dev/null").args(args);
    let r = zinstall_testkit::run::limited(
        &mut cmd,
        Some((soft, hard)),
        &dir.join("zinstall.log"),
    );
    Run {
        ok: r.ok,
        out: r.out,
        max_rss_kib: r.max_rss_kib,
    }
}

/// The `stats` of the last `--json` line with them.
fn stats(out: &str) -> Value {
    out.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| {
            v.get("stats")
                .or_else(|| v.get("result")?.get("stats"))
                .cloned()
        })
        .unwrap_or_else(|| panic!("no stats in: {out}"))
}

/// The run's descriptor counts: limit, budget, most held; the most held
/// never past the budget, nor the budget past the limit.
fn descriptors(out: &str) -> (u64, u64, u64) {
    let s = stats(out);
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k}: {s}"));
    let (limit, budget, peak) = (n("fd_limit"), n("fd_budget"), n("fd_peak"));
    assert!(peak > 0 && peak <= budget, "{peak} held, budget {budget}");
    assert!(budget < limit, "budget {budget}, limit {limit}");
    (limit, budget, peak)
}

/// `zinstall verify A B` succeeds: the trees are equal.
fn verify(dir: &Path, a: &Path, b: &Path) {
    let o = zinstall(
        dir,
        &[OsStr::new("verify"), a.as_os_str(), b.as_os_str()],
        1024,
        hard_limit(),
    );
    assert!(
        o.ok,
        "{} and {} differ: {}",
        a.display(),
        b.display(),
        o.out
    );
}

/// A tree shaped like /usr/share, smaller in bytes: 20 top
/// directories of 15 of 10, each of those with 12 files and a symlink,
/// and a branch 12 levels deep: 3,300 directories and 42,000 entries in
/// all.
fn share_like(root: &Path) {
    for a in 0..20 {
        for b in 0..15 {
            for c in 0..10 {
                let dir = root.join(format!("a{a}/b{b}/c{c}"));
                fs::create_dir_all(&dir).unwrap();
                for f in 0..12 {
                    fs::write(
                        dir.join(format!("f{f}")),
                        format!("{a}{b}{c}{f}"),
                    )
                    .unwrap();
                }
                std::os::unix::fs::symlink("f0", dir.join("l")).unwrap();
            }
        }
    }
    let mut deep = root.join("deep");
    for i in 0..12 {
        deep.push(format!("l{i}"));
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("f"), b"x").unwrap();
    }
}

/// A wide and deep tree under zoneadm's soft limit, the hard one left as
/// it is: the limit is raised, and the copy is whole with 1, 4 and 16
/// walkers.
#[test]
fn a_large_tree_is_copied_whole_under_a_soft_limit_of_256() {
    let Some(d) = scratch() else { return };
    let src = d.path().join("src");
    share_like(&src);
    let hard = hard_limit();
    for walkers in ["1", "4", "16"] {
        let dst = d.path().join(format!("copy-{walkers}"));
        let o = zinstall(
            d.path(),
            &[
                OsStr::new("copy"),
                OsStr::new("--json"),
                OsStr::new("--walkers"),
                OsStr::new(walkers),
                src.as_os_str(),
                dst.as_os_str(),
            ],
            ZONEADM_SOFT,
            hard,
        );
        assert!(o.ok, "{walkers} walkers: {}", o.out);
        assert!(!o.out.contains("Too many open files"), "{}", o.out);
        let (limit, ..) = descriptors(&o.out);
        assert_eq!(limit, hard, "the soft limit raised to the hard one");
        verify(d.path(), &src, &dst);
        fs::remove_dir_all(&dst).unwrap();
    }
}

/// 10,000 directories of 3 files each, 16 walkers, soft and hard limit
/// both 256 (nothing to raise): the budget holds the walk below it.
#[test]
fn a_tree_10000_wide_is_copied_under_a_hard_limit_of_256() {
    let Some(d) = scratch() else { return };
    let src = d.path().join("src");
    for i in 0..10_000 {
        let dir = src.join(format!("d{i}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..3 {
            fs::write(dir.join(format!("f{f}")), format!("{i}/{f}")).unwrap();
        }
    }
    let dst = d.path().join("dst");
    let o = zinstall(
        d.path(),
        &[
            OsStr::new("copy"),
            OsStr::new("--json"),
            OsStr::new("--walkers"),
            OsStr::new("16"),
            src.as_os_str(),
            dst.as_os_str(),
        ],
        ZONEADM_SOFT,
        ZONEADM_SOFT,
    );
    assert!(o.ok, "{}", o.out);
    let (limit, budget, _) = descriptors(&o.out);
    assert_eq!(limit, ZONEADM_SOFT);
    assert!(budget < ZONEADM_SOFT);
    verify(d.path(), &src, &dst);
}

/// A chain 5,000 deep with a file at every level, within 64 descriptors
/// and 64 MiB: a directory node keeps a name and a parent link, not its
/// paths, so memory per level is constant (paths kept per level made it
/// grow with the square of the depth).
#[test]
fn a_chain_5000_deep_is_copied_within_64_descriptors_and_64_mib() {
    // Peak memory is measured: see zinstall_testkit::run::limited.
    if !zinstall_testkit::alone() {
        return;
    }
    let Some(d) = scratch() else { return };
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fsops::mkdir_deep_files(&src, 5_000, "d", true);
    let dst = d.path().join("dst");
    let o = zinstall(
        d.path(),
        &[
            OsStr::new("copy"),
            OsStr::new("--json"),
            src.as_os_str(),
            dst.as_os_str(),
        ],
        64,
        64,
    );
    assert!(o.ok, "{}", o.out);
    descriptors(&o.out);
    assert!(
        o.max_rss_kib < 64 * 1024,
        "peak resident memory {} KiB",
        o.max_rss_kib
    );
    let (a, b) = (
        zinstall_testkit::listing(&src),
        zinstall_testkit::listing(&dst),
    );
    assert_eq!(
        a.len(),
        10_002,
        "the chain, its files, the bottom file, the top"
    );
    assert!(a == b, "the copy of the chain differs");
}

/// `zinstall install` of a tarball of /usr/share under zoneadm's soft
/// limit: whole, with the limit raised.
#[test]
fn a_tarball_of_usr_share_installs_under_a_soft_limit_of_256() {
    let d = Tmp::new();
    let tarball = d.path().join("share.tar");
    let st = zinstall_testkit::tool("tar")
        .args(["--numeric-owner", "-C", SHARE, "-cf"])
        .arg(&tarball)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    let zp = d.path().join("zone");
    let o = zinstall(
        d.path(),
        &[
            OsStr::new("install"),
            OsStr::new("--json"),
            OsStr::new("--profile"),
            support::bare_profile(d.path()).as_os_str(),
            OsStr::new("--zonepath"),
            zp.as_os_str(),
            tarball.as_os_str(),
        ],
        ZONEADM_SOFT,
        hard_limit(),
    );
    assert!(o.ok, "{}", o.out);
    assert!(!o.out.contains("Too many open files"), "{}", o.out);
    let (limit, ..) = descriptors(&o.out);
    assert_eq!(limit, hard_limit(), "the soft limit raised to the hard one");
    let root = zp.join("root");
    for p in walkdir::WalkDir::new(SHARE)
        .min_depth(1)
        .into_iter()
        .step_by(97)
    {
        let p = p.unwrap();
        let rel = p.path().strip_prefix(SHARE).unwrap();
        assert!(
            fs::symlink_metadata(root.join(rel)).is_ok(),
            "{} not installed",
            rel.display()
        );
    }
}

/// Provisioning images 1,000 and 3,000 levels deep under zoneadm's soft
/// limit: whole, in memory that grows by a small constant per level (it
/// grew by about 11 KB a level while each directory being copied kept
/// its paths).
#[test]
fn a_3000_deep_image_provisions_under_a_soft_limit_of_256_in_flat_memory() {
    // Peak memory is measured: see zinstall_testkit::run::limited.
    if !zinstall_testkit::alone() {
        return;
    }
    let d = Tmp::new();
    let mut peaks = Vec::new();
    for depth in [1_000, 3_000] {
        let lay = support::deep_image(d.path(), depth);
        let out = d.path().join(format!("g-{depth}"));
        let o = zinstall(
            d.path(),
            &[
                OsStr::new("provision"),
                lay.as_os_str(),
                OsStr::new("--out"),
                out.as_os_str(),
                OsStr::new("--cache"),
                d.path().join("cache").as_os_str(),
                OsStr::new("--keep-identity"),
            ],
            ZONEADM_SOFT,
            hard_limit(),
        );
        assert!(o.ok, "provision {depth} deep: {}", o.out);
        let found = Command::new("find")
            .arg(out.join("guest-0"))
            .args(["-mindepth", &depth.to_string(), "-type", "d", "-name", "d"])
            .output()
            .unwrap();
        assert!(found.status.success(), "find {depth} deep");
        let lines = String::from_utf8_lossy(&found.stdout).lines().count();
        assert_eq!(lines, 1, "provision {depth} deep: the bottom directory");
        peaks.push(o.max_rss_kib);
    }
    let per_level = peaks[1].saturating_sub(peaks[0]) * 1024 / 2_000;
    assert!(
        per_level <= 2048,
        "peaks of {peaks:?} KiB at 1,000 and 3,000 levels: {per_level} bytes a level"
    );
}
