use std::fs;
use std::io::Write;

use super::*;

#[test]
fn round_trips_and_refuses_long_lines() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::write(root.join("usr/bin/a"), "a").unwrap();
    fs::hard_link(root.join("usr/bin/a"), root.join("usr/bin/b")).unwrap();
    std::os::unix::fs::symlink("a", root.join("usr/bin/c")).unwrap();
    let m = record(&root, &["usr".into()], Vec::new()).unwrap();
    assert_eq!(m.entries.len(), 5);
    write(d.path(), MANIFEST, &m).unwrap();
    let back = read(d.path(), MANIFEST).unwrap().unwrap();
    assert_eq!(back.entries, m.entries);
    assert_eq!(back.header, m.header);
    let a = &back.entries[2];
    assert_eq!(a.n, back.entries[3].n);
    assert!(a.n.is_some());
    assert_eq!(back.entries[4].target().unwrap(), b"a");
    // A line past the bound is refused, not read into memory.
    let mut z = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    z.write_all(&vec![b'x'; (MAX_LINE + 10) as usize]).unwrap();
    fs::write(d.path().join(MANIFEST), z.finish().unwrap()).unwrap();
    let e = read(d.path(), MANIFEST).unwrap_err();
    assert!(e.to_string().contains("longer than"), "{e}");
    clear(d.path()).unwrap();
    assert!(read(d.path(), MANIFEST).unwrap().is_none());
}

#[test]
fn a_root_not_yet_in_place_is_written_as_inode_0() {
    let header = |root_ino| Header {
        version: CURRENT_VERSION,
        root_ino,
        trees: Vec::new(),
        images: Vec::new(),
        entries: 0,
        recipe: None,
        made: None,
    };
    let none = serde_json::to_value(header(None)).unwrap();
    assert_eq!(none["root_ino"], 0);
    let some = serde_json::to_value(header(Some(7))).unwrap();
    assert_eq!(some["root_ino"], 7);
    let back: Header = serde_json::from_value(none).unwrap();
    assert_eq!(back.root_ino, None);
    let back: Header = serde_json::from_value(some).unwrap();
    assert_eq!(back.root_ino, Some(7));
}
