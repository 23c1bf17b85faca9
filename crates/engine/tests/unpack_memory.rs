//! The unpack into memory ([`unpack::unpack_to_memory`]) with a store of
//! its own making: what one name written many times holds, and hard links
//! keeping the node they name when the name they share is written again.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use zinstall_engine::contents::{ObjectDigest, ObjectHash, ObjectHasher};
use zinstall_engine::unpack::{
    self, FileBody, MemTree, NodeKind, ObjectSink, UnpackOptions,
};
use zinstall_testkit::require_root;

/// A digest for the test's store: the bytes' FNV-1a hashes, four ways.
struct Fnv([u64; 4], u64);

impl ObjectHash for Fnv {
    fn write(&mut self, b: &[u8]) {
        for &x in b {
            for (i, h) in self.0.iter_mut().enumerate() {
                *h = (*h ^ u64::from(x) ^ i as u64)
                    .wrapping_mul(0x100_0000_01b3);
            }
        }
        self.1 += b.len() as u64;
    }

    fn finish(self: Box<Self>) -> ObjectDigest {
        let mut d = [0u8; 32];
        for (i, h) in self.0.iter().enumerate() {
            d[i * 8..i * 8 + 8].copy_from_slice(&(h ^ self.1).to_le_bytes());
        }
        d
    }
}

/// Bodies kept in memory by digest.
#[derive(Default)]
struct Store {
    bodies: Mutex<HashMap<ObjectDigest, Vec<u8>>>,
    dir: Option<tempfile::TempDir>,
}

impl ObjectSink for Store {
    fn create(&self) -> std::io::Result<File> {
        tempfile::tempfile_in(
            self.dir.as_ref().map_or(Path::new("/tmp"), |d| d.path()),
        )
    }

    fn commit(
        &self,
        mut f: File,
        digest: &ObjectDigest,
        _size: u64,
    ) -> std::io::Result<()> {
        use std::io::{Read, Seek};
        let mut b = Vec::new();
        f.seek(std::io::SeekFrom::Start(0))?;
        f.read_to_end(&mut b)?;
        self.bodies.lock().unwrap().insert(*digest, b);
        Ok(())
    }

    fn put(&self, data: &[u8], digest: &ObjectDigest) -> std::io::Result<()> {
        self.bodies.lock().unwrap().insert(*digest, data.to_vec());
        Ok(())
    }

    fn hasher(&self) -> ObjectHasher {
        std::sync::Arc::new(|| Box::new(Fnv([0xcbf2_9ce4_8422_2325; 4], 0)))
    }

    fn inline_max(&self) -> u64 {
        64
    }

    fn scratch(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        let d = self.dir.as_ref().map_or(Path::new("/tmp"), |d| d.path());
        Ok(File::open(d)?.into())
    }

    fn filesystem(&self) -> Option<File> {
        None
    }
}

fn file(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_ustar();
    h.set_path(name).unwrap();
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

fn link(b: &mut tar::Builder<Vec<u8>>, name: &str, target: &str) {
    let mut h = tar::Header::new_ustar();
    h.set_path(name).unwrap();
    h.set_entry_type(tar::EntryType::Link);
    h.set_link_name(target).unwrap();
    h.set_mode(0o644);
    h.set_size(0);
    h.set_cksum();
    b.append(&h, &[][..]).unwrap();
}

fn unpack_into(tar: Vec<u8>) -> (MemTree, Store) {
    let d = tempfile::tempdir().unwrap();
    let archive = d.path().join("a.tar");
    std::fs::write(&archive, tar).unwrap();
    let store = Store {
        dir: Some(tempfile::tempdir().unwrap()),
        ..Store::default()
    };
    let mut tree = MemTree::new(0o022);
    unpack::unpack_to_memory(
        &archive,
        &d.path().join("root"),
        &mut tree,
        &store,
        &UnpackOptions::default(),
    )
    .unwrap();
    (tree, store)
}

/// The contents of `name` in the root of `tree`.
fn contents(tree: &MemTree, store: &Store, name: &str) -> Vec<u8> {
    let NodeKind::Dir(top) = &tree.node(tree.root()).kind else {
        panic!("the root is not a directory");
    };
    let id = top[name.as_bytes()];
    match &tree.node(id).kind {
        NodeKind::File {
            body: FileBody::Inline(d),
            ..
        } => d.clone(),
        NodeKind::File {
            body: FileBody::Object(slot),
            ..
        } => store.bodies.lock().unwrap()[&tree.object(*slot).unwrap()].clone(),
        k => panic!("{name}: {k:?}"),
    }
}

#[test]
fn one_name_written_many_times_holds_one_node() {
    if !require_root() {
        return;
    }
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..20_000u32 {
        // Inline and stored bodies in turn.
        let body = if i % 2 == 0 {
            vec![i as u8; 10]
        } else {
            vec![i as u8; 500]
        };
        file(&mut b, "f", &body);
    }
    file(&mut b, "f", b"the last");
    let (tree, store) = unpack_into(b.into_inner().unwrap());
    assert!(tree.nodes_held() <= 4, "{} nodes held", tree.nodes_held());
    assert_eq!(contents(&tree, &store, "f"), b"the last");
}

#[test]
fn a_hard_link_keeps_its_node_when_the_name_it_shared_is_written_again() {
    if !require_root() {
        return;
    }
    let mut b = tar::Builder::new(Vec::new());
    file(&mut b, "f", &[1u8; 300]);
    link(&mut b, "h", "f");
    for i in 0..1000u32 {
        file(&mut b, "f", &[i as u8; 200]);
    }
    file(&mut b, "g", &[7u8; 100]);
    let (tree, store) = unpack_into(b.into_inner().unwrap());
    assert_eq!(contents(&tree, &store, "h"), vec![1u8; 300]);
    assert_eq!(contents(&tree, &store, "f"), vec![231u8; 200]);
    assert_eq!(contents(&tree, &store, "g"), vec![7u8; 100]);
    assert!(tree.nodes_held() <= 5, "{} nodes held", tree.nodes_held());
}
