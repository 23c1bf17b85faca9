//! `install --format composefs` stages the install through the same
//! sealed unpacker as a plain install, so what that refuses stays
//! refused: a symlink one layer plants, aimed out of the root, is never
//! written through by the next, whether the install is built through a
//! staging tree or in memory, and a refused install leaves no record,
//! no ref, no staging tree and no zonepath it made.

use std::fs;
use std::path::Path;

use zinstall_testkit::fsops::Cases;
use zinstall_testkit::sentinel::Sentinel;

use super::support::{Layer, ProfileSpec, Zone, run};
use super::{Aim, plant};

/// Entries under `dir`, or none if it is not there.
fn entries(dir: &Path) -> usize {
    fs::read_dir(dir).map_or(0, |r| r.count())
}

#[test]
fn a_composefs_install_never_writes_through_a_planted_link() {
    let mut cases = Cases::default();
    // Aims that name the sentinel from anywhere: the staging root is not
    // where `plant` reckons relative links from.
    // With a tree of the host the build goes through staging; with the
    // archives alone (as root) it is built in memory.
    for (trees, build) in [(&["usr"][..], "staging"), (&[][..], "memory")] {
        for aim in [Aim::Absolute, Aim::Climbing] {
            for second in ["file", "dir", "symlink"] {
                let what = format!(
                    "composefs ({build}): a layer's symlink ({aim:?}) to the \
                 sentinel, then a {second} through it"
                );
                cases.run(&what.clone(), || {
                    let z = Zone::new();
                    z.write_profile(&ProfileSpec {
                        trees,
                        ..ProfileSpec::default()
                    });
                    let sdir = Sentinel::dir(&z.outside("sentinel"));
                    let mut a = Layer::new("layer");
                    plant(&mut a, &z.root, Path::new("a"), &sdir.path, aim);
                    let first = a.write(&z.outside("first.tar"));
                    let mut b = Layer::new("layer");
                    match second {
                        "file" => b.file("a/planted", b"through the link\n"),
                        "dir" => b.dir("a/planted"),
                        _ => b.symlink("a/planted", Path::new("/etc/shadow")),
                    };
                    let next = b.write(&z.outside("second.tar"));
                    let cache = z.outside("cache");
                    let o = run(&mut z.install_cmd(
                        &[
                            "--format",
                            "composefs",
                            "--cache",
                            cache.to_str().unwrap(),
                        ],
                        &[&first, &next],
                    ));
                    eprintln!("{what}: {}", o.brief());
                    sdir.assert_unchanged(&format!("{what}\n{}", o.all()));
                    let store = cache.join("composefs");
                    assert_eq!(
                        entries(&store.join("staging")),
                        0,
                        "{what}: a staging tree was left\n{}",
                        o.all()
                    );
                    if o.ok() {
                        // Harmless: the image has the link, and nothing was
                        // written through it (the sentinel is unchanged).
                        assert!(z.zonepath.join("composefs.json").is_file());
                        return;
                    }
                    assert!(
                        o.stderr.contains("planted") || o.stderr.contains("/a"),
                        "{what}: refused without naming the entry\n{}",
                        o.all()
                    );
                    assert_eq!(
                        entries(&store.join("images/refs")),
                        0,
                        "{what}: a ref was left\n{}",
                        o.all()
                    );
                    assert!(
                        !z.zonepath.exists(),
                        "{what}: the zonepath the install made was left\n{}",
                        o.all()
                    );
                });
            }
        }
    }
    cases.finish();
}
