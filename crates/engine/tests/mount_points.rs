//! A filesystem mounted inside the source: not crossed by default, and
//! named in a notice (copy and dry run alike); crossed when asked.

use std::fs;
use std::path::{Path, PathBuf};

use zinstall_engine::{NoticeKind, Plan};
use zinstall_testkit::Tmp;

/// A tmpfs mounted at a path, unmounted on drop.
struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(at: &Path) -> Mounted {
        fs::create_dir_all(at).unwrap();
        let o = zinstall_testkit::tool("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(o.status.success(), "mount: {o:?}");
        Mounted(at.to_path_buf())
    }

    /// `from` bind-mounted at `at`: the same filesystem, the same device
    /// number, only another mount.
    fn bind(from: &Path, at: &Path) -> Mounted {
        fs::create_dir_all(at).unwrap();
        let o = zinstall_testkit::tool("mount")
            .arg("--bind")
            .arg(from)
            .arg(at)
            .output()
            .unwrap();
        assert!(o.status.success(), "mount --bind: {o:?}");
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

fn mount_notices(notices: &[zinstall_engine::Notice]) -> Vec<PathBuf> {
    notices
        .iter()
        .filter_map(|n| match &n.kind {
            NoticeKind::MountPoint(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn each_mount_point_is_named_and_copied_empty_unless_crossing() {
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("data")).unwrap();
    fs::write(src.join("data/kept"), "kept").unwrap();
    let m1 = Mounted::tmpfs(&src.join("mnt"));
    let m2 = Mounted::tmpfs(&src.join("data/deep/mnt"));
    fs::write(m1.0.join("inside"), "on tmpfs").unwrap();
    fs::write(m2.0.join("inside"), "on tmpfs").unwrap();

    // Several walkers: whichever meets a mount point names it.
    let walkers = zinstall_engine::Tunables {
        copy_walkers: 4,
        ..zinstall_engine::Tunables::default()
    };
    let r = Plan::new(&src, d.path().join("one"))
        .tunables(walkers)
        .run()
        .unwrap();
    let mut named = mount_notices(&r.notices);
    named.sort();
    assert_eq!(named, [m2.0.clone(), m1.0.clone()]);
    assert!(d.path().join("one/mnt").is_dir());
    assert!(!d.path().join("one/mnt/inside").exists());
    assert!(!d.path().join("one/data/deep/mnt/inside").exists());
    assert!(d.path().join("one/data/kept").exists());
    let shown = r.notices.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert!(
        shown.contains(&format!(
            "{}: another filesystem is mounted here; copied as an empty \
             directory (not crossing filesystems)",
            m1.0.display()
        )),
        "{shown:?}"
    );

    let r = Plan::new(&src, d.path().join("dry"))
        .tunables(walkers)
        .dry_run(true)
        .run()
        .unwrap();
    assert_eq!(mount_notices(&r.notices).len(), 2, "{:?}", r.notices);

    let r = Plan::new(&src, d.path().join("cross"))
        .tunables(walkers)
        .cross_fs(true)
        .run()
        .unwrap();
    assert!(mount_notices(&r.notices).is_empty(), "{:?}", r.notices);
    assert_eq!(
        fs::read_to_string(d.path().join("cross/data/deep/mnt/inside"))
            .unwrap(),
        "on tmpfs"
    );
    drop((m1, m2));
}

/// A directory of the same filesystem bind-mounted inside the source
/// (`cp -x` and `rsync -x` cross it: the device is the same): a mount
/// point all the same, copied empty and named, dry run included; crossed
/// when asked; and `verify` compares it as a directory without entering
/// it.
#[test]
fn a_bind_mount_of_the_same_filesystem_is_a_mount_point() {
    use std::os::unix::fs::MetadataExt;
    if !zinstall_testkit::require_root() {
        return;
    }
    let d = Tmp::new();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("data")).unwrap();
    fs::write(src.join("data/kept"), "kept").unwrap();
    let other = d.path().join("elsewhere");
    fs::create_dir_all(other.join("deep")).unwrap();
    fs::write(other.join("deep/secret"), "not part of the source").unwrap();
    let m = Mounted::bind(&other, &src.join("data/bound"));
    assert_eq!(
        fs::metadata(&m.0).unwrap().dev(),
        fs::metadata(&src).unwrap().dev(),
        "a bind mount of the same filesystem"
    );
    for walkers in [1, 4] {
        let t = zinstall_engine::Tunables {
            copy_walkers: walkers,
            ..zinstall_engine::Tunables::default()
        };
        let one = d.path().join(format!("one-{walkers}"));
        let r = Plan::new(&src, &one).tunables(t).run().unwrap();
        assert_eq!(
            mount_notices(&r.notices),
            std::slice::from_ref(&m.0),
            "{walkers}"
        );
        assert!(one.join("data/bound").is_dir());
        assert!(!one.join("data/bound/deep").exists());
        assert!(one.join("data/kept").exists());
        let r = Plan::new(&src, d.path().join(format!("dry-{walkers}")))
            .tunables(t)
            .dry_run(true)
            .run()
            .unwrap();
        assert_eq!(mount_notices(&r.notices), std::slice::from_ref(&m.0));
    }
    let cross = d.path().join("cross");
    let r = Plan::new(&src, &cross).cross_fs(true).run().unwrap();
    assert!(mount_notices(&r.notices).is_empty(), "{:?}", r.notices);
    assert!(cross.join("data/bound/deep/secret").exists());
    // verify: the copy made without crossing is the source, as far as
    // the source's own mount goes.
    let c = zinstall_verify::compare(
        &src,
        &d.path().join("one-1"),
        &zinstall_verify::CompareOptions::default(),
    )
    .unwrap();
    assert!(c.is_identical(), "{c}");
    drop(m);
}
