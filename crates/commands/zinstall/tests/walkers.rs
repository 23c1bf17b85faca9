//! Descriptors stay bounded with 16 walkers, however wide a directory and
//! however deep a chain: `zinstall copy` run under a low RLIMIT_NOFILE
//! copies a directory of 100,000 entries and a chain 5,000 deep.
//!
//! What may be open at once (crates/engine/src/engine/mod.rs): the run's
//! descriptor budget, derived from the limit less a reserve for what each
//! thread opens for a moment (crates/engine/src/descriptors.rs), and the
//! reserve. Opening each queued directory when it is queued would take
//! 10,000 for the wide tree, and keeping each directory open until its
//! metadata is applied 10,000 for the chain.

use std::fs;
use std::path::Path;
use std::process::Command;

use zinstall_testkit::fsops;

const LIMIT: u64 = 256;

/// `zinstall copy` with 16 walkers, 2 workers, batches of 4, under a
/// descriptor limit of `LIMIT`.
fn copy_limited(src: &Path, dst: &Path) {
    copy_under(
        LIMIT,
        &["--walkers", "16", "--threads", "2", "--batch", "4"],
        src,
        dst,
    );
}

/// `zinstall copy` with `args`, under a descriptor limit of `limit`.
fn copy_under(limit: u64, args: &[&str], src: &Path, dst: &Path) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zinstall"));
    c.env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["copy", "-q"])
        .args(args)
        .arg(src)
        .arg(dst);
    zinstall_sys::support::limit_nofile_on_exec(&mut c, limit, limit);
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "copy under RLIMIT_NOFILE={limit}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_directory_of_100k_entries_is_copied_within_the_descriptor_limit() {
    // A journaled ext4 of its own (inodes for two trees of 105,000):
    // creating 100,000 files where many were just removed is slow on
    // the root filesystem here.
    let Some(fs) = zinstall_testkit::LoopFs::require(
        zinstall_testkit::Kind::Ext4,
        4 << 30,
    ) else {
        return;
    };
    let src = fs.path().join("src");
    let wide = src.join("wide");
    fs::create_dir_all(&wide).unwrap();
    for i in 0..95_000 {
        fs::write(wide.join(format!("f{i}")), b"").unwrap();
    }
    for i in 0..5_000 {
        let d = wide.join(format!("d{i}"));
        fs::create_dir(&d).unwrap();
        fs::write(d.join("inside"), format!("{i}")).unwrap();
    }
    let dst = fs.path().join("dst");
    copy_limited(&src, &dst);
    let c = zinstall_verify::compare(
        &src,
        &dst,
        &zinstall_verify::CompareOptions::default(),
    )
    .unwrap();
    assert!(c.is_identical(), "{c}");
    assert_eq!(c.entries_compared, 1 + 1 + 100_000 + 5_000);
}

#[test]
fn a_chain_5000_deep_is_copied_within_the_descriptor_limit() {
    let d = zinstall_testkit::Tmp::new();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fsops::mkdir_deep(&src, 5_000, "d");
    let dst = d.path().join("dst");
    copy_limited(&src, &dst);
    let (a, b) = (
        zinstall_testkit::listing(&src),
        zinstall_testkit::listing(&dst),
    );
    assert_eq!(a.len(), 5_002, "the chain, its bottom file, the top");
    assert!(a == b, "the copy of the chain differs");
}

/// A file in every directory of a deep chain: each job holds its
/// directory's two descriptors until done, so default batches of 128
/// filled along the chain held 256 descriptors each, and the batches
/// queued for the workers thousands (the build before failed this even
/// under a limit of 1,024). A batch now spans at most 16 directories.
#[test]
fn a_chain_with_a_file_at_every_level_stays_within_the_descriptor_limit() {
    let d = zinstall_testkit::Tmp::new();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fsops::mkdir_deep_files(&src, 3_000, "d", true);
    let dst = d.path().join("dst");
    copy_under(LIMIT, &["--walkers", "1", "--threads", "2"], &src, &dst);
    let (a, b) = (
        zinstall_testkit::listing(&src),
        zinstall_testkit::listing(&dst),
    );
    assert_eq!(
        a.len(),
        6_002,
        "the chain, its files, its bottom file, the top"
    );
    assert!(a == b, "the copy of the chain differs");
}
