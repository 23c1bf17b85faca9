//! Early writeback (`COPY_WRITEBACK`): in a run that will be flushed,
//! each file's data has started back to the disk by the time the run
//! ends, so the flush waits only for the tail; in one that will not, the
//! kernel chooses. Seen on ext4 through delayed allocation: data that
//! has not started back still has no blocks (FIEMAP says "delalloc"),
//! and the kernel's own writeback leaves a fresh file so for 30 s.
#![cfg(target_os = "linux")]

use std::fs;
use std::io::Write;
use std::path::Path;

use copier::unpack::{self, UnpackOptions};
use copier::{Plan, Tunables, Writeback};
use zinstall_testkit::{Kind, LoopFs, delayed_extents};

/// A file several writeback chunks long, one well under one, and one
/// streamed from a compressed archive body.
const BIG: usize = 20 << 20;
const SMALL: usize = 300 << 10;

fn data(len: usize, seed: u8) -> Vec<u8> {
    // Not zeros: a block of zeros read from an archive is left a hole.
    (0..len).map(|i| (i as u8).wrapping_mul(seed) | 1).collect()
}

fn tunables(w: Writeback) -> Tunables {
    Tunables {
        copy_threads: 2,
        copy_writeback: w,
        ..Tunables::default()
    }
}

/// Whether every named data file under `root` has started back to the
/// disk (`Ok`), or which has not (`Err`, with its count of extents still
/// in the page cache only).
fn started(root: &Path, names: &[&str]) -> Result<(), String> {
    for n in names {
        let p = root.join(n);
        let (delayed, all) = delayed_extents(&p);
        assert!(all > 0, "{} has no extents at all", p.display());
        if delayed > 0 {
            return Err(format!(
                "{} has {delayed} of {all} extents in the page cache only",
                p.display()
            ));
        }
    }
    Ok(())
}

/// Runs `case` (into a fresh directory each time) and checks that its
/// files did (`expect` true) or did not start back to the disk. The
/// kernel's own writeback may start a file early when other processes
/// fill the page cache past its background limit: a run expected not to
/// have started that finds its files started is inconclusive and is run
/// again, up to a few times.
fn check(
    what: &str,
    expect: bool,
    mut case: impl FnMut(usize) -> std::path::PathBuf,
) {
    const TRIES: usize = 4;
    for attempt in 0..TRIES {
        let root = case(attempt);
        match (started(&root, NAMES), expect) {
            (Ok(()), true) | (Err(_), false) => return,
            (Err(e), true) => panic!("{what}: {e}"),
            (Ok(()), false) => eprintln!(
                "{what}: written back by the kernel on its own (attempt {})",
                attempt + 1
            ),
        }
    }
    panic!(
        "{what}: every file was on its way to the disk in {TRIES} runs: \
         either the run started writeback it should not have, or the \
         machine's page cache is under constant pressure"
    );
}

/// The data files every case writes.
const NAMES: &[&str] = &["big", "d/small"];

fn source(at: &Path) {
    fs::create_dir_all(at.join("d")).unwrap();
    fs::write(at.join("big"), data(BIG, 3)).unwrap();
    fs::write(at.join("d/small"), data(SMALL, 5)).unwrap();
}

#[test]
fn a_copy_that_will_be_flushed_starts_writeback_file_by_file() {
    let Some(fs) = LoopFs::require(Kind::Ext4, 256 << 20) else {
        return;
    };
    let src = fs.path().join("src");
    source(&src);
    let cases = [
        // (name, writeback, durable, started)
        ("never, durable", Writeback::Never, true, false),
        ("sync, not flushed", Writeback::Sync, false, false),
        ("sync, durable", Writeback::Sync, true, true),
        ("always, not flushed", Writeback::Always, false, true),
    ];
    for (i, (what, w, durable, expect)) in cases.into_iter().enumerate() {
        check(what, expect, |attempt| {
            let dst = fs.path().join(format!("dst{i}-{attempt}"));
            Plan::new(&src, &dst)
                .tunables(tunables(w))
                .durable(durable)
                .run()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(fs::read(dst.join("big")).unwrap(), data(BIG, 3));
            dst
        });
    }
}

/// A tar of the source tree, plain and zstd-compressed.
fn archives(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut b = tar::Builder::new(Vec::new());
    for (name, d) in [("big", data(BIG, 7)), ("d/small", data(SMALL, 9))] {
        let mut h = tar::Header::new_ustar();
        h.set_size(d.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, &d[..]).unwrap();
    }
    let bytes = b.into_inner().unwrap();
    let plain = dir.join("t.tar");
    fs::write(&plain, &bytes).unwrap();
    let zst = dir.join("t.tar.zst");
    let mut e = zstd::Encoder::new(fs::File::create(&zst).unwrap(), 3).unwrap();
    e.write_all(&bytes).unwrap();
    e.finish().unwrap();
    (plain, zst)
}

#[test]
fn an_unpack_that_will_be_flushed_starts_writeback_file_by_file() {
    let Some(fs) = LoopFs::require(Kind::Ext4, 256 << 20) else {
        return;
    };
    let (plain, zst) = archives(fs.path());
    let mut i = 0;
    for archive in [&plain, &zst] {
        for (w, durable, expect) in [
            (Writeback::Sync, false, false),
            (Writeback::Sync, true, true),
            (Writeback::Never, true, false),
        ] {
            let what = format!(
                "{} with {w:?}, durable {durable}",
                archive.file_name().unwrap().to_string_lossy()
            );
            check(&what, expect, |_| {
                let root = fs.path().join(format!("root{i}"));
                i += 1;
                fs::create_dir(&root).unwrap();
                let opts = UnpackOptions {
                    tunables: tunables(w),
                    durable,
                    ..UnpackOptions::default()
                };
                unpack::unpack(archive, &root, &opts)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(fs::read(root.join("big")).unwrap(), data(BIG, 7));
                root
            });
        }
    }
}
