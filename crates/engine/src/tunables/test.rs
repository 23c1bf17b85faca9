//! The knobs' tests: each read from a defaults file's text, as a run
//! reads them, so they also exercise the file's reading.

use super::*;
use crate::defaults::DefaultsFile;

fn parsed(text: &str) -> Result<Tunables> {
    Tunables::from_defaults(&DefaultsFile::parse(
        Path::new("/etc/default/zinstall"),
        text.as_bytes(),
    )?)
}

#[test]
fn an_unknown_key_names_its_line_and_the_key_meant() {
    let e = parsed("COPY_BATCH=64\nCOPY_THREAD=4\n").unwrap_err();
    let s = e.to_string();
    assert!(s.starts_with("/etc/default/zinstall:2:"), "{s}");
    assert!(s.contains("unknown key COPY_THREAD"), "{s}");
    assert!(s.contains("did you mean COPY_THREADS?"), "{s}");
    let e = parsed("FOO=1\n").unwrap_err();
    assert!(e.to_string().ends_with("unknown key FOO"), "{e}");
}

#[test]
fn buffer_sizes_take_binary_units() {
    for (text, n) in [
        ("64K", 64 << 10),
        ("1M", 1 << 20),
        ("2MiB", 2 << 20),
        ("8192", 8192),
        ("1m", 1 << 20),
    ] {
        let t = parsed(&format!("COPY_BUFSIZE={text}\n")).unwrap();
        assert_eq!(t.copy_bufsize, n, "{text}");
    }
    assert!(parsed("COPY_BUFSIZE=1G\n").is_err(), "over 64 MiB");
    assert!(parsed("COPY_BUFSIZE=18446744073709551615K\n").is_err());
    assert!(parsed("COPY_THREADS=4K\n").is_err(), "not a size");
}

fn file(s: &str) -> Result<Tunables> {
    let f = DefaultsFile::parse(Path::new("/d"), s.as_bytes())?;
    Tunables::from_defaults(&f)
}

#[test]
fn defaults_then_file_then_env() {
    let mut t = file("COPY_THREADS=3\n").unwrap();
    assert_eq!(t.copy_threads, 3);
    assert_eq!(t.copy_batch, DEFAULT_COPY_BATCH);
    t.apply_env(|k| (k == "ZINSTALL_COPY_BATCH").then(|| "9".into()))
        .unwrap();
    assert_eq!((t.copy_threads, t.copy_batch), (3, 9));
}

#[test]
fn walkers_default_to_one_per_four_workers_and_four_cores() {
    let t = |threads, walkers| Tunables {
        copy_threads: threads,
        copy_walkers: walkers,
        ..Tunables::default()
    };
    let d = Tunables::default();
    assert_eq!(
        (d.walkers_on(2), d.walkers_on(8), d.walkers_on(64)),
        (1, 2, 2)
    );
    assert_eq!(t(1, 0).walkers_on(64), 1);
    assert_eq!(t(9, 0).walkers_on(64), 3);
    assert_eq!(t(32, 0).walkers_on(32), 8);
    assert_eq!(t(32, 0).walkers_on(16), 4);
    assert_eq!(t(128, 0).walkers_on(128), 32);
    assert_eq!(t(128, 3).walkers_on(2), 3, "set, it is as set");
    let f = file("COPY_WALKERS=6\n").unwrap();
    assert_eq!((f.copy_walkers, f.walkers()), (6, 6));
    for bad in [
        "COPY_WALKERS=257\n",
        "COPY_WALKERS=-1\n",
        "COPY_WALKERS=two\n",
    ] {
        let e = file(bad).unwrap_err().to_string();
        assert!(e.starts_with("/d:1: COPY_WALKERS="), "{bad}: {e}");
    }
    let mut t = Tunables::default();
    let e = t
        .apply_env(|k| (k == "ZINSTALL_COPY_WALKERS").then(|| "300".into()))
        .unwrap_err();
    assert!(e.to_string().contains("ZINSTALL_COPY_WALKERS"), "{e}");
    assert!(e.to_string().contains("0 to 256"), "{e}");
    t.apply_env(|k| (k == "ZINSTALL_COPY_WALKERS").then(|| "4".into()))
        .unwrap();
    assert_eq!(t.walkers(), 4);
}

#[test]
fn out_of_range_and_non_numbers_are_errors() {
    for bad in [
        "COPY_THREADS=0\n",
        "COPY_BATCH=0\n",
        "COPY_BUFSIZE=4095\n",
        "COPY_THREADS=eight\n",
        "COPY_THREADS=-1\n",
        "COPY_THREADS=1025\n",
        "COPY_BATCH=65537\n",
        "COPY_BUFSIZE=67108865\n",
        "COPY_BUFSIZE=1073741824\n",
        "COPY_BUFSIZE=18446744073709551615\n",
        "COPY_BUFSIZE=99999999999999999999999999\n",
        "COPY_THREADS=\n",
        "COPY_THREADS=1e3\n",
    ] {
        let e = file(bad).unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("/d:1: COPY_"), "{bad}: {s}");
    }
    let mut t = Tunables::default();
    let e = t
        .apply_env(|k| (k == "ZINSTALL_COPY_THREADS").then(|| "x".into()))
        .unwrap_err();
    assert!(e.to_string().contains("ZINSTALL_COPY_THREADS"), "{e}");
}

#[test]
fn errors_name_file_line_key_and_value() {
    let e = file("# c\nCOPY_BATCH=2\nCOPY_BUFSIZE=99999999999999999999\n")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "/d:3: COPY_BUFSIZE=99999999999999999999: out of range (must be \
         4096 to 67108864)"
    );
    let t =
        file("COPY_THREADS=1024\nCOPY_BATCH=65536\nCOPY_BUFSIZE=67108864\n")
            .unwrap();
    assert_eq!(
        (t.copy_threads, t.copy_batch, t.copy_bufsize),
        (1024, 65536, 64 << 20)
    );
    t.validate().unwrap();
}
