//! The brand's config.xml and platform.xml as libbrand reads them: the
//! DTD's element order (libbrand validates against it), the required
//! elements, and hooks that name the brand program.

use std::path::Path;

const DTD_ORDER: &[&str] = &[
    "modname",
    "initname",
    "restartinit",
    "login_cmd",
    "forcedlogin_cmd",
    "user_cmd",
    "install",
    "installopts",
    "boot",
    "sysboot",
    "halt",
    "shutdown",
    "verify_cfg",
    "verify_adm",
    "postattach",
    "postclone",
    "postinstall",
    "predetach",
    "attach",
    "detach",
    "clone",
    "presnap",
    "postsnap",
    "validatesnap",
    "preuninstall",
    "uninstall",
    "prestatechange",
    "poststatechange",
    "query",
    "privilege",
];

fn read(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../etc/brand/zinstall")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn parse(text: &str) -> roxmltree::Document<'_> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(text, opts).unwrap()
}

#[test]
fn config_xml_follows_the_dtd_and_points_at_the_hook() {
    let text = read("config.xml");
    assert!(text.contains("\"-//Sun Microsystems Inc//DTD Brands//EN\""));
    let doc = parse(&text);
    let brand = doc.root_element();
    assert_eq!(brand.attribute("name"), Some("zinstall"));
    let names: Vec<&str> = brand
        .children()
        .filter(|n| n.is_element())
        .map(|n| n.tag_name().name())
        .collect();
    // Each element's position in the DTD sequence never goes back.
    let pos: Vec<usize> = names
        .iter()
        .map(|n| {
            DTD_ORDER
                .iter()
                .position(|d| d == n)
                .unwrap_or_else(|| panic!("<{n}> is not in the DTD"))
        })
        .collect();
    assert!(
        pos.windows(2).all(|w| w[0] <= w[1]),
        "out of order: {names:?}"
    );
    for required in [
        "initname",
        "login_cmd",
        "forcedlogin_cmd",
        "user_cmd",
        "install",
        "privilege",
    ] {
        assert!(names.contains(&required), "missing <{required}>");
    }
    let text_of = |tag: &str| -> String {
        brand
            .children()
            .find(|n| n.has_tag_name(tag))
            .and_then(|n| n.text())
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(
        text_of("install"),
        "/usr/lib/brand/zinstall/brand -z %z -R %R install"
    );
    assert!(
        text_of("verify_adm").ends_with("verify_adm "),
        "zoneadm glues the subcommand on"
    );
    for hook in [
        "uninstall",
        "attach",
        "query",
        "prestatechange",
        "poststatechange",
        "sysboot",
        "verify_cfg",
    ] {
        assert!(
            text_of(hook).starts_with("/usr/lib/brand/zinstall/brand"),
            "{hook}"
        );
    }
    // zoneadm falls back to its built-ins only when these are empty.
    for builtin in ["detach", "clone"] {
        assert_eq!(text_of(builtin), "", "<{builtin}> must be empty");
    }
    let sets: Vec<&str> = brand
        .children()
        .filter(|n| n.has_tag_name("privilege"))
        .filter_map(|n| n.attribute("set"))
        .collect();
    assert!(sets.contains(&"required") && sets.contains(&"prohibited"));
}

#[test]
fn platform_xml_mounts_the_system_trees_read_only() {
    let text = read("platform.xml");
    assert!(text.contains("\"-//Sun Microsystems Inc//Zones Platform//EN\""));
    let doc = parse(&text);
    let p = doc.root_element();
    assert_eq!(p.attribute("name"), Some("zinstall"));
    assert_eq!(p.attribute("allow-exclusive-ip"), Some("true"));
    for tree in ["usr", "lib", "sbin"] {
        let m = p
            .children()
            .find(|n| {
                n.has_tag_name("global_mount")
                    && n.attribute("special") == Some(&format!("/{tree}"))
            })
            .unwrap_or_else(|| panic!("no global mount of /{tree}"));
        assert_eq!(
            m.attribute("directory"),
            Some(format!("/system/{tree}").as_str())
        );
        assert_eq!(m.attribute("type"), Some("lofs"));
        assert!(m.attribute("opt").unwrap().split(',').any(|o| o == "ro"));
    }
    for n in p.children().filter(|n| n.is_element()) {
        assert!(
            ["global_mount", "mount", "device", "symlink"]
                .contains(&n.tag_name().name())
        );
    }
}
