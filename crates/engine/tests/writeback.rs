//! Early writeback (`COPY_WRITEBACK`): in a run that will be flushed,
//! the data written is flushed as the run goes, so that the final flush
//! waits only for the tail; in one that will not, the kernel chooses.
//! Seen on ext4 through delayed allocation: data that has not been
//! written back still has no blocks (FIEMAP says "delalloc"), and the
//! kernel's own writeback leaves a fresh file so for 30 s. The flusher
//! flushes every 64 MiB: of five 32 MiB files written one after another,
//! at least the first two are on the disk when the run returns.
#![cfg(target_os = "linux")]

use std::fs;
use std::io::Write;
use std::path::Path;

use zinstall_engine::unpack::{self, UnpackOptions};
use zinstall_engine::{Plan, Tunables, Writeback};
use zinstall_testkit::{Kind, LoopFs, delayed_extents};

/// Each data file's size: five of them make two and a half flush steps.
const BIG: usize = 32 << 20;

fn data(len: usize, seed: u8) -> Vec<u8> {
    // Not zeros: a block of zeros read from an archive is left a hole.
    let block: Vec<u8> = (0..65_536u32)
        .map(|i| (i as u8).wrapping_mul(seed) | 1)
        .collect();
    block.iter().copied().cycle().take(len).collect()
}

fn tunables(w: Writeback) -> Tunables {
    Tunables {
        copy_threads: 1,
        copy_writeback: w,
        ..Tunables::default()
    }
}

/// How many of the data files under `root` have been written back
/// (their blocks allocated), and the first that has not.
fn written_back(root: &Path) -> (usize, Option<String>) {
    let mut n = 0;
    let mut first = None;
    for name in NAMES {
        let p = root.join(name);
        let (delayed, all) = delayed_extents(&p);
        assert!(all > 0, "{} has no extents at all", p.display());
        if delayed == 0 {
            n += 1;
        } else if first.is_none() {
            first = Some(format!(
                "{} has {delayed} of {all} extents in the page cache only",
                p.display()
            ));
        }
    }
    (n, first)
}

/// Runs `case` (into a fresh directory each time) and checks that it
/// flushed as it went (`expect` true: at least the first two files are
/// on the disk) or did not (none is). The kernel's own writeback may
/// write files early when other processes fill the page cache past its
/// background limit: a run expected not to have flushed that finds files
/// written back is inconclusive and is run again, up to a few times.
fn check(
    what: &str,
    expect: bool,
    mut case: impl FnMut(usize) -> std::path::PathBuf,
) {
    const TRIES: usize = 4;
    for attempt in 0..TRIES {
        let root = case(attempt);
        let (n, first) = written_back(&root);
        let _ = fs::remove_dir_all(&root);
        match expect {
            true if n >= 2 => return,
            true => panic!(
                "{what}: only {n} of {} files written back by the end of \
                 the run: {}",
                NAMES.len(),
                first.unwrap_or_default()
            ),
            false if n == 0 => return,
            false => eprintln!(
                "{what}: {n} files written back by the kernel on its own \
                 (attempt {})",
                attempt + 1
            ),
        }
    }
    panic!(
        "{what}: files were on the disk in each of {TRIES} runs: either the \
         run flushed when it should not have, or the machine's page cache \
         is under constant pressure"
    );
}

/// The data files every case writes, in the order they are written
/// (one worker, one directory each, read in the archive's order).
const NAMES: &[&str] = &["a/1", "b/2", "c/3", "d/4", "e/5"];

fn source(at: &Path) {
    for (i, n) in NAMES.iter().enumerate() {
        let p = at.join(n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data(BIG, i as u8 + 3)).unwrap();
    }
}

#[test]
fn a_copy_that_will_be_flushed_is_flushed_as_it_goes() {
    let Some(fs) = LoopFs::require(Kind::Ext4, 1 << 30) else {
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
            assert_eq!(fs::read(dst.join("a/1")).unwrap(), data(BIG, 3));
            dst
        });
    }
}

/// A tar of the data files, plain and zstd-compressed.
fn archives(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut b = tar::Builder::new(Vec::new());
    for (i, name) in NAMES.iter().enumerate() {
        let d = data(BIG, i as u8 + 7);
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
fn an_unpack_that_will_be_flushed_is_flushed_as_it_goes() {
    let Some(fs) = LoopFs::require(Kind::Ext4, 1 << 30) else {
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
                assert_eq!(fs::read(root.join("a/1")).unwrap(), data(BIG, 7));
                root
            });
        }
    }
}
