//! The image cache: one build per image across threads and processes,
//! atomic entries, crash leftovers, checksums, listing and collection.
//!
//! The multi-process cases re-run this test binary as the child process
//! (`CACHE_CHILD` in the environment selects what the child does).

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use zinstall_provision::cache::{
    Cache, EntryKind, GcOptions, HashingReader, Obtained,
};
use zinstall_provision::{ImageProblem, ProvisionError as Error};

use tmp::Tmp;
use zinstall_testkit::tmp;

/// Copies the image into the payload file, slowly if asked, counting
/// builds in `counter`.
fn copy_build(
    r: &mut HashingReader,
    payload: &Path,
    delay: Duration,
    counter: &AtomicUsize,
) -> Result<(), Error> {
    counter.fetch_add(1, Ordering::SeqCst);
    let mut out = File::create(payload).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).unwrap();
        std::thread::sleep(delay);
    }
    fs::set_permissions(payload, fs::Permissions::from_mode(0o444)).unwrap();
    Ok(())
}

fn image(dir: &Path, name: &str, len: usize, seed: u8) -> PathBuf {
    let p = dir.join(name);
    let data: Vec<u8> =
        (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect();
    fs::write(&p, data).unwrap();
    p
}

fn sha256_hex(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// The child side of the multi-process tests.
fn child_main() -> bool {
    let Ok(spec) = std::env::var("CACHE_CHILD") else {
        return false;
    };
    let mut parts = spec.splitn(3, '|');
    let root = parts.next().unwrap();
    let img = parts.next().unwrap();
    let delay_ms: u64 = parts.next().unwrap().parse().unwrap();
    let cache = Cache::new(root).unwrap();
    let builds = AtomicUsize::new(0);
    let (lease, how) = cache
        .obtain(Path::new(img), EntryKind::Raw, None, |r, p| {
            copy_build(r, p, Duration::from_millis(delay_ms), &builds)
        })
        .unwrap();
    println!(
        "\nCHILD {} {}",
        lease.entry.payload().display(),
        if matches!(how, Obtained::Built(_)) {
            "built"
        } else {
            "reused"
        }
    );
    lease.release();
    true
}

fn spawn_child(root: &Path, img: &Path, delay_ms: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cache::child_entry_point",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "CACHE_CHILD",
            format!("{}|{}|{delay_ms}", root.display(), img.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Not a test of its own: the entry point of child processes, run only
/// by the multi-process tests (`--ignored`) with `CACHE_CHILD` set.
#[test]
#[ignore = "the entry point of the multi-process tests' children"]
fn child_entry_point() {
    assert!(child_main(), "run only as a child, with CACHE_CHILD set");
}

#[test]
fn first_obtain_builds_and_second_reuses_without_reading() {
    let d = Tmp::new();
    let img = image(d.path(), "disk.img", 300_000, 7);
    let cache = Cache::new(d.path().join("cache")).unwrap();
    let n = AtomicUsize::new(0);
    let (lease, how) = cache
        .obtain(&img, EntryKind::Raw, None, |r, p| {
            copy_build(r, p, Duration::ZERO, &n)
        })
        .unwrap();
    assert!(matches!(how, Obtained::Built(_)));
    assert_eq!(lease.entry.sha256, sha256_hex(&img));
    assert_eq!(
        fs::read(lease.entry.payload()).unwrap(),
        fs::read(&img).unwrap()
    );
    let first = lease.entry.clone();
    lease.release();
    let (lease, how) = cache
        .obtain(&img, EntryKind::Raw, None, |_, _| -> Result<(), Error> {
            panic!("a second build of an unchanged image")
        })
        .unwrap();
    assert_eq!(how, Obtained::Reused);
    assert_eq!(lease.entry, first);
    assert_eq!(cache.builds().unwrap(), 1);
    // A copy of the same bytes under another name is the same entry.
    let twin = d.path().join("twin.img");
    fs::copy(&img, &twin).unwrap();
    let (lease2, how) = cache
        .obtain(&twin, EntryKind::Raw, None, |r, p| {
            copy_build(r, p, Duration::ZERO, &n)
        })
        .unwrap();
    assert_eq!(how, Obtained::Reused);
    assert_eq!(lease2.entry, first);
    // The kind is part of the key.
    let (lease3, how) = cache
        .obtain(&img, EntryKind::Tree, None, |r, p| {
            io::copy(r, &mut io::sink()).unwrap();
            fs::create_dir(p).unwrap();
            Ok::<_, Error>(())
        })
        .unwrap();
    assert!(matches!(how, Obtained::Built(_)));
    assert_ne!(lease3.entry, first);
    assert_eq!(cache.builds().unwrap(), 2);
}

#[test]
fn threads_racing_for_one_image_build_it_once() {
    let d = Tmp::new();
    let img = image(d.path(), "disk.img", 1 << 20, 3);
    let cache = Arc::new(Cache::new(d.path().join("cache")).unwrap());
    let builds = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (cache, img, builds) =
                (Arc::clone(&cache), img.clone(), Arc::clone(&builds));
            std::thread::spawn(move || {
                let (lease, _) = cache
                    .obtain(&img, EntryKind::Raw, None, |r, p| {
                        copy_build(r, p, Duration::from_millis(2), &builds)
                    })
                    .unwrap();
                let data = fs::read(lease.entry.payload()).unwrap();
                lease.release();
                data
            })
        })
        .collect();
    let want = fs::read(&img).unwrap();
    for h in handles {
        assert!(h.join().unwrap() == want);
    }
    assert_eq!(builds.load(Ordering::SeqCst), 1);
    assert_eq!(cache.builds().unwrap(), 1);
}

#[test]
fn processes_racing_for_one_image_build_it_once() {
    let d = Tmp::new();
    let img = image(d.path(), "disk.img", 1 << 20, 5);
    let root = d.path().join("cache");
    Cache::new(&root).unwrap();
    let children: Vec<_> =
        (0..4).map(|_| spawn_child(&root, &img, 1)).collect();
    let mut built = 0;
    let mut payloads = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("CHILD "))
            .unwrap_or_else(|| panic!("no result from child: {text}"))
            .to_string();
        built += usize::from(line.ends_with(" built"));
        payloads.push(line.split(' ').next().unwrap().to_string());
    }
    assert_eq!(built, 1, "exactly one process built");
    assert!(payloads.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(Cache::new(&root).unwrap().builds().unwrap(), 1);
    assert_eq!(fs::read(&payloads[0]).unwrap(), fs::read(&img).unwrap());
}

#[test]
fn killed_builder_leaves_no_entry_and_the_next_build_cleans_up() {
    let d = Tmp::new();
    // 4 MiB at 64 KiB per 20 ms: well over a second of build.
    let img = image(d.path(), "disk.img", 4 << 20, 9);
    let root = d.path().join("cache");
    let cache = Cache::new(&root).unwrap();
    let mut child = spawn_child(&root, &img, 20);
    // Wait until its scratch appears, then kill it mid-build.
    let t0 = Instant::now();
    while fs::read_dir(root.join("scratch")).unwrap().next().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "child never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        fs::read_dir(root.join("entries"))
            .unwrap()
            .filter(|e| { e.as_ref().unwrap().file_type().unwrap().is_dir() })
            .count(),
        0,
        "no entry after a killed build"
    );
    assert_eq!(
        fs::read_dir(root.join("scratch")).unwrap().count(),
        1,
        "its scratch is left"
    );
    // gc sees the builder's lock is free and removes the scratch.
    let report = cache.gc(None).unwrap();
    assert_eq!(report.scratch_removed, 1);
    let n = AtomicUsize::new(0);
    let mut child = spawn_child(&root, &img, 20);
    while fs::read_dir(root.join("scratch")).unwrap().next().is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The next builder of the same image removes the stale scratch itself.
    let (lease, how) = cache
        .obtain(&img, EntryKind::Raw, None, |r, p| {
            copy_build(r, p, Duration::ZERO, &n)
        })
        .unwrap();
    assert!(matches!(how, Obtained::Built(_)));
    assert_eq!(
        fs::read(lease.entry.payload()).unwrap(),
        fs::read(&img).unwrap()
    );
    assert_eq!(fs::read_dir(root.join("scratch")).unwrap().count(), 0);
}

#[test]
fn wrong_checksum_or_failed_build_leaves_nothing() {
    let d = Tmp::new();
    let img = image(d.path(), "disk.img", 10_000, 11);
    let cache = Cache::new(d.path().join("cache")).unwrap();
    let n = AtomicUsize::new(0);
    let wrong = "00".repeat(32);
    let e = cache
        .obtain(&img, EntryKind::Raw, Some(&wrong), |r, p| {
            copy_build(r, p, Duration::ZERO, &n)
        })
        .unwrap_err();
    match &e {
        Error::Image {
            path,
            problem: ImageProblem::ChecksumMismatch { expected, found },
        } => {
            assert_eq!(path, &img);
            assert_eq!(expected, &wrong);
            assert_eq!(found, &sha256_hex(&img));
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    let e = cache
        .obtain(&img, EntryKind::Raw, None, |_, p| {
            fs::write(p, b"partial").unwrap();
            Err(Error::Image {
                path: img.clone(),
                problem: ImageProblem::Truncated,
            })
        })
        .unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    for sub in ["entries", "scratch"] {
        let left: Vec<_> = fs::read_dir(cache.root().join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| !n.to_string_lossy().ends_with(".lock"))
            .collect();
        assert!(left.is_empty(), "{sub}: {left:?}");
    }
    // The right checksum is accepted.
    let sha = sha256_hex(&img);
    cache
        .obtain(&img, EntryKind::Raw, Some(&sha.to_uppercase()), |r, p| {
            copy_build(r, p, Duration::ZERO, &n)
        })
        .unwrap();
}

#[test]
fn list_and_gc_keep_entries_in_use() {
    let d = Tmp::new();
    let cache = Cache::new(d.path().join("cache")).unwrap();
    let n = AtomicUsize::new(0);
    let mut entries = Vec::new();
    for i in 0..3u8 {
        let img = image(
            d.path(),
            &format!("img{i}"),
            50_000 * (i as usize + 1),
            i + 2,
        );
        let (lease, _) = cache
            .obtain(&img, EntryKind::Raw, None, |r, p| {
                copy_build(r, p, Duration::ZERO, &n)
            })
            .unwrap();
        entries.push(lease.entry.clone());
        lease.release();
        // Distinct creation seconds give a defined oldest-first order.
        std::thread::sleep(Duration::from_millis(1100));
    }
    let guest = d.path().join("guest0.qcow2");
    zinstall_qcow2::create_overlay(
        &guest,
        &entries[0].payload(),
        "raw",
        1 << 20,
    )
    .unwrap();
    cache.add_user(&entries[0], &guest).unwrap();
    let gone_guest = d.path().join("gone.qcow2");
    zinstall_qcow2::create_overlay(
        &gone_guest,
        &entries[1].payload(),
        "raw",
        1 << 20,
    )
    .unwrap();
    cache.add_user(&entries[1], &gone_guest).unwrap();
    fs::remove_file(&gone_guest).unwrap();
    let list = cache.list().unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[0].entry, entries[0], "oldest first");
    assert_eq!(list[0].users, vec![guest.clone()]);
    assert!(list[1].users.is_empty(), "a vanished guest uses nothing");
    assert!(list.iter().all(|e| e.size > 0 && e.source.contains("img")));
    // A lease (guests being made) protects entry 2.
    let img2 = d.path().join("img2");
    let (held, _) = cache
        .obtain(&img2, EntryKind::Raw, None, |r, p| {
            copy_build(r, p, Duration::ZERO, &n)
        })
        .unwrap();
    // Entry 1's guest is gone: it may have been moved where gc does not
    // look, so its record holds the base until released.
    let report = cache.gc(None).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(report.kept_in_use, 3);
    let report = cache
        .gc_with(&GcOptions {
            release_missing: true,
            ..GcOptions::default()
        })
        .unwrap();
    assert_eq!(report.removed, vec![entries[1].clone()]);
    assert_eq!(report.kept_in_use, 2);
    assert!(entries[0].dir.exists() && entries[2].dir.exists());
    held.release();
    // With a size bound, collection stops once under it.
    let total: u64 = cache.list().unwrap().iter().map(|e| e.size).sum();
    let report = cache.gc(Some(total)).unwrap();
    assert!(report.removed.is_empty());
    let report = cache.gc(Some(0)).unwrap();
    assert_eq!(report.removed, vec![entries[2].clone()]);
    assert!(entries[0].dir.exists(), "still used by {}", guest.display());
}
