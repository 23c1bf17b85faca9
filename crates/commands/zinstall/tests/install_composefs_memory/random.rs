//! Random archives, built in memory and through staging: the same image,
//! or the same refusal.

use zinstall_testkit::require_root;

use super::{Archive, bytes, install, outcome, through_staging, world};
use zinstall_testkit::run::text;

/// A small deterministic generator (xorshift64*): the same archives on
/// every run, so a failure can be run again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len() as u64) as usize]
    }
}

/// Names the random archives draw from: few, so members meet. `a`, `b`
/// and `a/b` are directories from the start: a non-directory is put
/// there only now and then, and refused.
const NAMES: &[&str] = &["a", "b", "a/b", "a/c", "b/a", "a/b/c", "c", "d"];
const LEAVES: &[&str] =
    &["a/c", "b/a", "a/b/c", "c", "a/x", "a/b/y", "b/z", "d"];

/// One random member at a random name: a directory, a file of a size
/// around the inline and chunk limits, a symlink, a hard link (to a name
/// that may hold anything or nothing) or a FIFO.
fn random_member(a: &mut Archive, r: &mut Rng) {
    let any = r.pick(NAMES);
    let name = if r.below(8) == 0 { any } else { r.pick(LEAVES) };
    let mode =
        [0o755, 0o700, 0o644, 0o4755, 0o2775, 0o1777][r.below(6) as usize];
    let owner = (r.below(3) * 500, r.below(3) * 700);
    match r.below(10) {
        0 | 1 => {
            a.entry(
                &format!("{any}/"),
                tar::EntryType::Directory,
                mode,
                owner,
                None,
                &[],
                &[],
            );
        }
        2..=5 => {
            let size = [0, 10, 64, 65, 4000, 70_000][r.below(6) as usize];
            let xattr: &[(&str, &[u8])] = if r.below(3) == 0 {
                &[("SCHILY.xattr.user.k", b"v")]
            } else {
                &[]
            };
            let data = bytes(size, r.below(250) as u8);
            a.entry(
                name,
                tar::EntryType::Regular,
                mode,
                owner,
                None,
                &data,
                xattr,
            );
        }
        6 => {
            let target = r.pick(&["a", "../c", "/etc", "b/a", "x"]);
            a.entry(
                name,
                tar::EntryType::Symlink,
                0o777,
                owner,
                Some(target),
                &[],
                &[],
            );
        }
        7 => {
            let target = r.pick(LEAVES);
            a.entry(
                name,
                tar::EntryType::Link,
                0o644,
                owner,
                Some(target),
                &[],
                &[],
            );
        }
        _ => {
            a.entry(
                name,
                tar::EntryType::Fifo,
                mode & 0o777,
                owner,
                None,
                &[],
                &[],
            );
        }
    }
}

#[test]
fn random_archives_build_in_memory_as_through_staging() {
    if !require_root() {
        return;
    }
    let w = world();
    let mut r = Rng(0x5EED_CAFE_F00D_0001);
    let (mut built, mut refused) = (0, 0);
    for case in 0..80 {
        // Every directory a member may be put in has an entry first, so
        // no directory is made with the time of the install.
        let mut a = Archive::new();
        a.dir("./", 0o755);
        for d in ["a/", "b/", "a/b/"] {
            a.dir(d, 0o755);
        }
        for _ in 0..(3 + r.below(10)) {
            random_member(&mut a, &mut r);
        }
        let tar = a.write(&w.dir.join(format!("random{case}.tar")));
        let (m, s) = (format!("mem-zp-{case}"), format!("staged-zp-{case}"));
        let mem = install(&w, &m, &tar, &[]);
        assert!(!through_staging(&mem), "case {case}: {}", text(&mem));
        let staged = install(&w, &s, &tar, &["--composefs-staging"]);
        match (outcome(&mem, &m), outcome(&staged, &s)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "case {case}: the images differ");
                built += 1;
            }
            (Err(a), Err(b)) => {
                if refused < 3 {
                    eprintln!("case {case}: refused alike: {a}");
                }
                assert!(
                    a == b && !a.is_empty(),
                    "case {case}: {a:?} against {b:?}"
                );
                refused += 1;
            }
            (a, b) => {
                panic!("case {case}: in memory {a:?}, through staging {b:?}")
            }
        }
    }
    eprintln!("{built} built alike, {refused} refused alike");
    // Both ends of the comparison were met.
    assert!(
        built >= 10 && refused >= 5,
        "{built} built, {refused} refused"
    );
}
