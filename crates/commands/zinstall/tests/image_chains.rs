//! qcow2 chains as an attacker sets them up for root to provision: the
//! image's directory swapped for a link elsewhere while it is opened,
//! and a secret backing file under an image anyone may read. The chain
//! is opened beneath the image's own directory, and a cache entry is no
//! more readable than the least readable file it was made from.

// renameat2(RENAME_EXCHANGE) for the swap.
#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use zinstall_testkit::run::{s, text};
use zinstall_testkit::tmp::Tmp;
use zinstall_testkit::tools;

fn zinstall(args: &[&str]) -> Output {
    zinstall_testkit::run::output(env!("CARGO_BIN_EXE_zinstall"), args)
}

/// `qemu-img create -q ARGS` in `dir` (so that backing names are
/// relative).
fn create_in(dir: &Path, args: &[&str]) {
    let o = tools::tool("qemu-img")
        .current_dir(dir)
        .arg("create")
        .arg("-q")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "qemu-img create {args:?}: {}", text(&o));
}

/// `len` bytes of `word` over and over.
fn filled(word: &[u8], len: usize) -> Vec<u8> {
    word.iter().copied().cycle().take(len).collect()
}

/// Every cache entry's `base.raw`.
fn bases(cache: &Path) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(cache.join("entries")) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| e.path().join("base.raw"))
        .filter(|p| p.is_file())
        .collect()
}

/// An image readable by everyone over a raw backing file only its owner
/// may read: the cache entry made of them is no more readable than the
/// backing file, even in a cache opened to all (`--cache-mode 0711`, as
/// for a hypervisor).
#[test]
fn a_secret_backing_file_keeps_its_cache_entry_secret() {
    let d = Tmp::new();
    let dir = d.path().join("img");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let secret = dir.join("secret.raw");
    fs::write(&secret, filled(b"SECRET-BYTES ", 1 << 20)).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    create_in(
        &dir,
        &["-f", "qcow2", "-b", "secret.raw", "-F", "raw", "top.qcow2"],
    );
    let top = dir.join("top.qcow2");
    fs::set_permissions(&top, fs::Permissions::from_mode(0o644)).unwrap();
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let o = zinstall(&[
        "provision",
        s(&top),
        "--out",
        s(&out),
        "--cache",
        s(&cache),
        "--cache-mode",
        "0711",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let found = bases(&cache);
    assert_eq!(found.len(), 1, "{found:?}");
    let base = &found[0];
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
    let (bm, em) = (mode(base), mode(base.parent().unwrap()));
    eprintln!("MEASURE secret backing: base {bm:o}, entry directory {em:o}");
    assert_eq!(bm & 0o077, 0, "the base is {bm:o}: readable by others");
    assert_eq!(em & 0o077, 0, "the entry is {em:o}: open to others");
    assert_eq!(bm & 0o7000, 0, "{bm:o}");
    let owner = fs::metadata(&secret).unwrap().uid();
    assert_eq!(fs::metadata(base).unwrap().uid(), owner);
}

/// The image's directory swapped, over and over, with a link to another
/// directory holding a file of the backing file's name (as /etc holds
/// `shadow`) while root provisions the image: the backing file is only
/// ever the one beside the image, never the other directory's. Some
/// provisions fail (they met the link); none reads the secret.
#[test]
fn a_swapped_image_directory_never_yields_anothers_files() {
    const TRIES: usize = 300;
    let d = Tmp::new();
    let user = d.path().join("user");
    fs::create_dir(&user).unwrap();
    let img = user.join("img");
    fs::create_dir(&img).unwrap();
    fs::write(img.join("shadow"), filled(b"USER-DATA ", 1 << 20)).unwrap();
    create_in(
        &img,
        &["-f", "qcow2", "-b", "shadow", "-F", "raw", "top.qcow2"],
    );
    // The other directory: the same names, the secret, and an image of
    // its own is not needed (the attacker's image is read from img).
    let etc = d.path().join("etc");
    fs::create_dir(&etc).unwrap();
    fs::write(etc.join("shadow"), filled(b"ROOT-SECRET ", 1 << 20)).unwrap();
    fs::set_permissions(etc.join("shadow"), fs::Permissions::from_mode(0o600))
        .unwrap();
    let link = user.join("img.link");
    symlink(&etc, &link).unwrap();
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
        let (img, link) = (img.clone(), link.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // img becomes the link, then the directory again.
                if zinstall_testkit::exchange(&img, &link) {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Left as it began: img the directory.
            if fs::symlink_metadata(&img).unwrap().file_type().is_symlink() {
                zinstall_testkit::exchange(&img, &link);
            }
        })
    };
    let mut failed = 0;
    for i in 0..TRIES {
        let name = format!("g{i}");
        let o = zinstall(&[
            "provision",
            s(&img.join("top.qcow2")),
            "--out",
            s(&out),
            "--cache",
            s(&cache),
            "--name",
            &name,
        ]);
        if !o.status.success() {
            failed += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let secret = b"ROOT-SECRET ";
    let wins = bases(&cache)
        .iter()
        .filter(|b| {
            fs::read(b)
                .unwrap()
                .windows(secret.len())
                .any(|w| w == secret)
        })
        .count();
    eprintln!(
        "MEASURE directory swap: {TRIES} provisions, {} swaps, {failed} \
         failed, {wins} entries with the secret",
        swaps.load(Ordering::Relaxed)
    );
    assert!(swaps.load(Ordering::Relaxed) > TRIES, "the swap hardly ran");
    assert!(failed < TRIES, "every provision failed");
    assert_eq!(wins, 0, "a cache entry holds the other directory's file");
}
