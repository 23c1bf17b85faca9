//! Cancelling a copy or an unpack from outside: it stops early, says it
//! was cancelled, and leaves nothing written after the flag was raised
//! beyond the entries already in flight.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use zinstall_engine::unpack::{UnpackOptions, unpack};
use zinstall_engine::{Cancel, Error, Plan, Progress, Tunables};

/// `dirs` × `files` small files.
fn tree(root: &Path, dirs: usize, files: usize) -> u64 {
    for d in 0..dirs {
        let dir = root.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..files {
            fs::write(dir.join(format!("f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
    (dirs * files + dirs) as u64
}

fn entries_under(root: &Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            n += 1;
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    n
}

/// Raises the flag once `after` entries are done.
#[derive(Debug)]
struct CancelAfter {
    done: AtomicU64,
    after: u64,
    cancel: Cancel,
}

impl Progress for CancelAfter {
    fn advance(&self, entries: u64, _bytes: u64) {
        if self.done.fetch_add(entries, Ordering::Relaxed) + entries
            >= self.after
        {
            self.cancel.cancel();
        }
    }
}

fn tunables(threads: usize) -> Tunables {
    Tunables {
        copy_threads: threads,
        copy_batch: 8,
        ..Tunables::default()
    }
}

#[test]
fn a_copy_cancelled_before_it_starts_copies_nothing() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 4, 10);
    let cancel = Cancel::new();
    cancel.cancel();
    let dst = d.path().join("dst");
    let f = Plan::new(&src, &dst)
        .cancel(cancel)
        .run()
        .expect_err("a cancelled copy must fail");
    assert!(
        matches!(f.first(), Some(Error::Cancelled { path }) if path == &dst),
        "{f}"
    );
    assert!(f.to_string().contains("cancelled"), "{f}");
    let made = if dst.exists() { entries_under(&dst) } else { 0 };
    assert_eq!(made, 0, "entries made after cancel");
}

#[test]
fn a_copy_cancelled_midway_stops_early_and_says_so() {
    for threads in [1, 4] {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        let total = tree(&src, 50, 40);
        let cancel = Cancel::new();
        let progress = Arc::new(CancelAfter {
            done: AtomicU64::new(0),
            after: 100,
            cancel: cancel.clone(),
        });
        let dst = d.path().join("dst");
        let f = Plan::new(&src, &dst)
            .tunables(tunables(threads))
            .progress(progress as Arc<dyn Progress>)
            .cancel(cancel)
            .run()
            .expect_err("a cancelled copy must fail");
        assert!(
            f.errors
                .iter()
                .any(|e| matches!(e, Error::Cancelled { .. })),
            "threads {threads}: {f}"
        );
        let made = entries_under(&dst);
        // Batches already taken finish; nothing near the whole tree.
        assert!(
            made < total / 2,
            "threads {threads}: {made} of {total} entries made after cancel"
        );
    }
}

/// A plain tar layer of `n` files.
fn layer(path: &Path, n: usize) {
    let mut b = tar::Builder::new(File::create(path).unwrap());
    for i in 0..n {
        let mut h = tar::Header::new_gnu();
        h.set_size(4);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, format!("d{}/f{i}", i / 100), &b"data"[..])
            .unwrap();
    }
    b.into_inner().unwrap().flush().unwrap();
}

#[test]
fn an_unpack_cancelled_before_it_starts_fails_naming_the_archive() {
    let d = tempfile::tempdir().unwrap();
    let archive = d.path().join("l.tar");
    layer(&archive, 500);
    let root = d.path().join("root");
    fs::create_dir(&root).unwrap();
    let cancel = Cancel::new();
    cancel.cancel();
    for threads in [1, 4] {
        let opts = UnpackOptions {
            tunables: tunables(threads),
            cancel: Some(cancel.clone()),
            ..UnpackOptions::default()
        };
        match unpack(&archive, &root, &opts) {
            Err(Error::Cancelled { path }) => assert_eq!(path, archive),
            Err(e) => panic!("threads {threads}: not cancelled: {e}"),
            Ok(r) => panic!("threads {threads}: unpacked {:?}", r.stats),
        }
        assert_eq!(
            entries_under(&root),
            0,
            "threads {threads}: members unpacked after cancel"
        );
    }
}
