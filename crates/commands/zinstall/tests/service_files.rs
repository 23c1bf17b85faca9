//! zinstalld's service files: the SMF manifest etc/smf/zinstalld.xml
//! against illumos's service_bundle DTD, and the systemd units
//! etc/systemd/zinstalld.{service,socket} as systemd reads them.
//!
//! The DTD is only on illumos, so its content models are carried here
//! (`decl`) and checked element by element; where the real DTD and
//! xmllint are both present, xmllint validates too. systemd-analyze
//! verifies the units where it is installed.

use zinstall_testkit::tools;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const DAEMON: &str = "/usr/sbin/zinstalld";
const SOCKET: &str = "/run/zinstall/zinstalld.sock";
const DTD_PATH: &str = "/usr/share/lib/xml/dtd/service_bundle.dtd.1";

fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("the crate is in the workspace")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    fs::read_to_string(top().join(rel))
        .unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

// ---------------------------------------------------------------------
// The service_bundle DTD, as read from illumos-gate
// usr/src/cmd/svc/dtd/service_bundle.dtd.1 at commit
// 5e6220ea06d0c4480253c3af21b600fa301dca93, in its manifest form (the
// %manifest; sections: property, propval and property_group require a
// type). Every element it declares is here, with its content model and
// its attributes; enumerated attributes carry their allowed values.
// ---------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Occurs {
    One,
    Opt,
    Star,
    Plus,
}

/// One term of a sequence: any one of `names`, `occurs` times.
#[derive(Debug)]
struct Term {
    names: &'static [&'static str],
    occurs: Occurs,
}

enum Content {
    /// EMPTY: no content at all, not even white space or comments.
    Empty,
    /// (#PCDATA)
    Text,
    /// ANY
    Any,
    /// `( a, b?, (c | d)* ... )`
    Seq(&'static [Term]),
    /// `( a* | b* | c* )`: every child has one and the same of these
    /// names.
    AllOneOf(&'static [&'static str]),
}

struct Attr {
    name: &'static str,
    required: bool,
    /// The enumeration, for enumerated attributes.
    values: Option<&'static [&'static str]>,
}

struct Decl {
    content: Content,
    attrs: &'static [Attr],
}

// Macros rather than functions: they expand to literals, which Rust
// promotes to statics, so `decl` can hand out `&'static` tables.
macro_rules! term {
    ($occurs:ident, $names:expr) => {
        Term {
            names: $names,
            occurs: Occurs::$occurs,
        }
    };
}
macro_rules! one {
    ($names:expr) => {
        term!(One, $names)
    };
}
macro_rules! opt {
    ($names:expr) => {
        term!(Opt, $names)
    };
}
macro_rules! star {
    ($names:expr) => {
        term!(Star, $names)
    };
}
macro_rules! plus {
    ($names:expr) => {
        term!(Plus, $names)
    };
}
/// A #REQUIRED attribute, with its enumeration if it has one.
macro_rules! req {
    ($name:literal) => {
        Attr {
            name: $name,
            required: true,
            values: None,
        }
    };
    ($name:literal, $values:expr $(,)?) => {
        Attr {
            name: $name,
            required: true,
            values: Some($values),
        }
    };
}
/// An #IMPLIED (or defaulted) attribute.
macro_rules! imp {
    ($name:literal) => {
        Attr {
            name: $name,
            required: false,
            values: None,
        }
    };
    ($name:literal, $values:expr $(,)?) => {
        Attr {
            name: $name,
            required: false,
            values: Some($values),
        }
    };
}

const BOOL: &[&str] = &["true", "false"];
const PROP_TYPES: &[&str] = &[
    "count",
    "integer",
    "opaque",
    "host",
    "hostname",
    "net_address",
    "net_address_v4",
    "net_address_v6",
    "time",
    "astring",
    "ustring",
    "boolean",
    "fmri",
    "uri",
];
const GROUPING: &[&str] =
    &["require_all", "require_any", "exclude_all", "optional_all"];
const RESTART_ON: &[&str] = &["error", "restart", "refresh", "none"];
const LISTS: &[&str] = &[
    "count_list",
    "integer_list",
    "opaque_list",
    "host_list",
    "hostname_list",
    "net_address_list",
    "net_address_v4_list",
    "net_address_v6_list",
    "time_list",
    "astring_list",
    "ustring_list",
    "boolean_list",
    "fmri_list",
    "uri_list",
];
const PROPS: &[&str] = &["propval", "property"];

/// The declaration of `name`, if the DTD has one.
fn decl(name: &str) -> Option<Decl> {
    use Content::*;
    let d = |content, attrs| Some(Decl { content, attrs });
    match name {
        "xi:include" => d(
            Seq(&[one!(&["xi:fallback"])]),
            &[
                req!("href"),
                imp!("parse", &["xml", "text"]),
                imp!("encoding"),
                imp!("xmlns:xi"),
            ],
        ),
        "xi:fallback" => d(Any, &[imp!("xmlns:xi")]),
        "stability" => d(
            Empty,
            &[req!(
                "value",
                &[
                    "Standard", "Stable", "Evolving", "Unstable", "External",
                    "Obsolete",
                ],
            )],
        ),
        "value_node" => d(Empty, &[req!("value")]),
        n if LISTS.contains(&n) => d(Seq(&[plus!(&["value_node"])]), &[]),
        "property" => d(
            Seq(&[opt!(LISTS)]),
            &[
                req!("name"),
                req!("type", PROP_TYPES),
                imp!("override", BOOL),
            ],
        ),
        "propval" => d(
            Empty,
            &[
                req!("name"),
                req!("type", PROP_TYPES),
                req!("value"),
                imp!("override", BOOL),
            ],
        ),
        "property_group" => d(
            Seq(&[opt!(&["stability"]), star!(PROPS)]),
            &[req!("name"), req!("type"), imp!("delete", BOOL)],
        ),
        "service_fmri" => d(Empty, &[req!("value")]),
        "dependency" => d(
            Seq(&[
                star!(&["service_fmri"]),
                opt!(&["stability"]),
                star!(PROPS),
            ]),
            &[
                req!("name"),
                req!("grouping", GROUPING),
                req!("restart_on", RESTART_ON),
                req!("type"),
                imp!("delete", BOOL),
            ],
        ),
        "dependent" => d(
            Seq(&[one!(&["service_fmri"]), opt!(&["stability"]), star!(PROPS)]),
            &[
                req!("name"),
                req!("grouping", GROUPING),
                req!("restart_on", RESTART_ON),
                imp!("delete", BOOL),
                imp!("override", BOOL),
            ],
        ),
        "envvar" => d(Empty, &[req!("name"), req!("value")]),
        "method_environment" => d(Seq(&[plus!(&["envvar"])]), &[]),
        "method_profile" => d(Empty, &[req!("name")]),
        "method_credential" => d(
            Empty,
            &[
                req!("user"),
                imp!("group"),
                imp!("supp_groups"),
                imp!("privileges"),
                imp!("limit_privileges"),
            ],
        ),
        "method_context" => d(
            Seq(&[
                opt!(&["method_profile", "method_credential"]),
                opt!(&["method_environment"]),
            ]),
            &[
                imp!("security_flags"),
                imp!("working_directory"),
                imp!("project"),
                imp!("resource_pool"),
            ],
        ),
        "exec_method" => d(
            Seq(&[
                opt!(&["method_context"]),
                opt!(&["stability"]),
                star!(PROPS),
            ]),
            &[
                req!("type", &["method", "monitor"]),
                req!("name"),
                req!("exec"),
                req!("timeout_seconds"),
                imp!("delete", BOOL),
            ],
        ),
        "restarter" => d(Seq(&[one!(&["service_fmri"])]), &[]),
        "doc_link" => d(Empty, &[req!("name"), req!("uri")]),
        "manpage" => {
            d(Empty, &[req!("title"), req!("section"), imp!("manpath")])
        }
        "documentation" => d(Seq(&[star!(&["doc_link", "manpage"])]), &[]),
        "loctext" => d(Text, &[req!("xml:lang")]),
        "description" | "common_name" | "units" => {
            d(Seq(&[plus!(&["loctext"])]), &[])
        }
        "visibility" => d(
            Empty,
            &[req!("value", &["hidden", "readonly", "readwrite"])],
        ),
        "value" => d(
            Seq(&[opt!(&["common_name"]), opt!(&["description"])]),
            &[req!("name")],
        ),
        "values" => d(Seq(&[plus!(&["value"])]), &[]),
        "cardinality" => d(Empty, &[imp!("min"), imp!("max")]),
        "internal_separators" => d(Text, &[]),
        "range" => d(Empty, &[req!("min"), req!("max")]),
        "constraints" => d(Seq(&[star!(&["value"]), star!(&["range"])]), &[]),
        "include_values" => {
            d(Empty, &[req!("type", &["constraints", "values"])])
        }
        "choices" => d(
            Seq(&[
                star!(&["value"]),
                star!(&["range"]),
                star!(&["include_values"]),
            ]),
            &[],
        ),
        "prop_pattern" => d(
            Seq(&[
                opt!(&["common_name"]),
                opt!(&["description"]),
                opt!(&["units"]),
                opt!(&["visibility"]),
                opt!(&["cardinality"]),
                opt!(&["internal_separators"]),
                opt!(&["values"]),
                opt!(&["constraints"]),
                opt!(&["choices"]),
            ]),
            &[
                req!("name"),
                imp!("type", PROP_TYPES),
                imp!("required", BOOL),
            ],
        ),
        "pg_pattern" => d(
            Seq(&[
                opt!(&["common_name"]),
                opt!(&["description"]),
                star!(&["prop_pattern"]),
            ]),
            &[
                imp!("name"),
                imp!("type"),
                imp!("required", BOOL),
                imp!("target", &["this", "instance", "delegate", "all"]),
            ],
        ),
        "template" => d(
            Seq(&[
                one!(&["common_name"]),
                opt!(&["description"]),
                opt!(&["documentation"]),
                star!(&["pg_pattern"]),
            ]),
            &[],
        ),
        "paramval" => d(Empty, &[req!("name"), req!("value")]),
        "parameter" => d(Seq(&[star!(&["value_node"])]), &[req!("name")]),
        "event" => d(Empty, &[req!("value")]),
        "type" => d(
            Seq(&[star!(&["parameter", "paramval"])]),
            &[req!("name"), imp!("active", BOOL)],
        ),
        "notification_parameters" => {
            d(Seq(&[one!(&["event"]), plus!(&["type"])]), &[])
        }
        "create_default_instance" => d(Empty, &[req!("enabled", BOOL)]),
        "single_instance" => d(Empty, &[]),
        "instance" => d(
            Seq(&[
                opt!(&["restarter"]),
                star!(&["dependency"]),
                star!(&["dependent"]),
                opt!(&["method_context"]),
                star!(&["exec_method"]),
                star!(&["notification_parameters"]),
                star!(&["property_group"]),
                opt!(&["template"]),
            ]),
            &[req!("name"), req!("enabled", BOOL)],
        ),
        "service" => d(
            Seq(&[
                opt!(&["create_default_instance"]),
                opt!(&["single_instance"]),
                opt!(&["restarter"]),
                star!(&["dependency"]),
                star!(&["dependent"]),
                opt!(&["method_context"]),
                star!(&["exec_method"]),
                star!(&["notification_parameters"]),
                star!(&["property_group"]),
                star!(&["instance"]),
                opt!(&["stability"]),
                opt!(&["template"]),
            ]),
            &[
                req!("name"),
                req!("version"),
                req!("type", &["service", "restarter", "milestone"]),
            ],
        ),
        "service_bundle" => d(
            AllOneOf(&["service_bundle", "service", "xi:include"]),
            &[req!("type"), req!("name")],
        ),
        _ => None,
    }
}

const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";

/// The name as the DTD spells it: prefix and local name (the DTD knows
/// nothing of namespaces, so `xi:include` is a name like any other).
fn qname(node: roxmltree::Node<'_, '_>) -> String {
    let tag = node.tag_name();
    match tag.namespace() {
        None => tag.name().to_string(),
        Some(ns) => match node.lookup_prefix(ns) {
            Some(p) => format!("{p}:{}", tag.name()),
            None => tag.name().to_string(),
        },
    }
}

fn attr_qname(
    node: roxmltree::Node<'_, '_>,
    a: &roxmltree::Attribute<'_, '_>,
) -> String {
    match a.namespace() {
        None => a.name().to_string(),
        Some(XML_NS) => format!("xml:{}", a.name()),
        Some(ns) => match node.lookup_prefix(ns) {
            Some(p) => format!("{p}:{}", a.name()),
            None => a.name().to_string(),
        },
    }
}

/// Matches `kids` against a sequence. The DTD's models are
/// deterministic (XML requires it), so taking each term greedily decides.
fn match_seq(terms: &[Term], kids: &[String]) -> Result<(), String> {
    let mut i = 0;
    for term in terms {
        let (min, max) = match term.occurs {
            Occurs::One => (1, 1),
            Occurs::Opt => (0, 1),
            Occurs::Star => (0, usize::MAX),
            Occurs::Plus => (1, usize::MAX),
        };
        let mut n = 0;
        while i < kids.len()
            && n < max
            && term.names.contains(&kids[i].as_str())
        {
            i += 1;
            n += 1;
        }
        if n < min {
            return Err(format!(
                "needs {:?} ({:?}) where it has {}",
                term.names,
                term.occurs,
                kids.get(i).map_or("nothing more", String::as_str)
            ));
        }
    }
    match kids.get(i) {
        None => Ok(()),
        Some(k) => Err(format!(
            "<{k}> (child {}) is out of place or not allowed; children: \
             {kids:?}",
            i + 1
        )),
    }
}

/// Checks `node` (at `path`) and everything under it against the
/// declarations, adding one line to `errors` per fault.
fn validate(
    node: roxmltree::Node<'_, '_>,
    path: &str,
    errors: &mut Vec<String>,
) {
    let name = qname(node);
    let Some(decl) = decl(&name) else {
        errors.push(format!("{path}: <{name}> is not declared in the DTD"));
        return;
    };
    for a in node.attributes() {
        let an = attr_qname(node, &a);
        match decl.attrs.iter().find(|d| d.name == an) {
            None => errors.push(format!("{path}: undeclared attribute {an}")),
            Some(d) => {
                if let Some(values) = d.values
                    && !values.contains(&a.value())
                {
                    errors.push(format!(
                        "{path}: {an}=\"{}\" is not one of {values:?}",
                        a.value()
                    ));
                }
            }
        }
    }
    for d in decl.attrs.iter().filter(|d| d.required) {
        if !node.attributes().any(|a| attr_qname(node, &a) == d.name) {
            errors.push(format!("{path}: lacks required attribute {}", d.name));
        }
    }
    let elements: Vec<_> = node.children().filter(|n| n.is_element()).collect();
    let kids: Vec<String> = elements.iter().map(|&n| qname(n)).collect();
    let text = node
        .children()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .any(|t| !t.trim().is_empty());
    match decl.content {
        Content::Empty => {
            if node.has_children() {
                errors.push(format!("{path}: EMPTY, yet it has content"));
            }
        }
        Content::Text => {
            if !kids.is_empty() {
                errors.push(format!("{path}: text only, yet has {kids:?}"));
            }
        }
        Content::Any => {}
        Content::Seq(terms) => {
            if text {
                errors.push(format!("{path}: element content, yet has text"));
            }
            if let Err(e) = match_seq(terms, &kids) {
                errors.push(format!("{path}: {e}"));
            }
        }
        Content::AllOneOf(names) => {
            if text {
                errors.push(format!("{path}: element content, yet has text"));
            }
            let distinct: BTreeSet<&String> = kids.iter().collect();
            if distinct.len() > 1
                || kids.iter().any(|k| !names.contains(&k.as_str()))
            {
                errors.push(format!(
                    "{path}: children must all be one of {names:?}, has \
                     {kids:?}"
                ));
            }
        }
    }
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for (child, kid) in elements.iter().zip(&kids) {
        let n = seen.entry(kid.clone()).or_default();
        *n += 1;
        validate(*child, &format!("{path}/{kid}[{n}]"), errors);
    }
}

/// The DOCTYPE declaration's words: root name, SYSTEM or PUBLIC, ids
/// (quotes kept off).
fn doctype(text: &str) -> Vec<String> {
    let start = text.find("<!DOCTYPE").expect("a DOCTYPE declaration");
    let rest = &text[start + "<!DOCTYPE".len()..];
    let end = rest.find('>').expect("the DOCTYPE ends");
    let decl = &rest[..end];
    // An internal subset could redefine what the DTD declares.
    assert!(!decl.contains('['), "internal DTD subset: {decl}");
    let mut words = Vec::new();
    let mut it = decl.trim().chars().peekable();
    while let Some(&c) = it.peek() {
        if c.is_whitespace() {
            it.next();
        } else if c == '"' || c == '\'' {
            it.next();
            words.push(it.by_ref().take_while(|&x| x != c).collect());
        } else {
            let mut w = String::new();
            while let Some(&x) = it.peek() {
                if x.is_whitespace() {
                    break;
                }
                w.push(x);
                it.next();
            }
            words.push(w);
        }
    }
    words
}

fn parse(text: &str) -> roxmltree::Document<'_> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(text, opts)
        .unwrap_or_else(|e| panic!("not well-formed XML: {e}"))
}

#[test]
fn the_checker_refuses_what_the_dtd_refuses() {
    // Each of these breaks one rule of the DTD; the checker must say so,
    // and say which.
    let bad = [
        (
            r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"><template><common_name><loctext xml:lang="C">s</loctext></common_name></template><stability value="Unstable"/></service></service_bundle>"#,
            "<stability> (child 2) is out of place",
        ),
        (
            r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"><dependency name="d" grouping="require_all" restart_on="always" type="service"><service_fmri value="svc:/a"/></dependency></service></service_bundle>"#,
            "restart_on=\"always\" is not one of",
        ),
        (
            r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"><exec_method type="method" name="start" exec="/x"/></service></service_bundle>"#,
            "lacks required attribute timeout_seconds",
        ),
        (
            r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"><template><description><loctext xml:lang="C">s</loctext></description></template></service></service_bundle>"#,
            "needs [\"common_name\"]",
        ),
        (
            r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"><single_instance>x</single_instance></service></service_bundle>"#,
            "EMPTY, yet it has content",
        ),
        (
            // The manifest form of the DTD requires a property group's type.
            r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"><property_group name="startd"/></service></service_bundle>"#,
            "lacks required attribute type",
        ),
        (
            r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"/><service_bundle type="manifest" name="y"/></service_bundle>"#,
            "children must all be one of",
        ),
        (
            r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"><exec_method type="method" name="start" exec="/x" timeout_seconds="1" user="root"/></service></service_bundle>"#,
            "undeclared attribute user",
        ),
    ];
    for (text, fault) in bad {
        let doc = parse(text);
        let mut errors = Vec::new();
        validate(doc.root_element(), "/service_bundle", &mut errors);
        assert!(
            errors.iter().any(|e| e.contains(fault)),
            "{fault:?} not found in {errors:?} for {text}"
        );
    }
    let good = r#"<service_bundle type="manifest" name="x"><service name="s" type="service" version="1"><create_default_instance enabled="false"/><exec_method type="method" name="start" exec="/x" timeout_seconds="1"/><stability value="Unstable"/><template><common_name><loctext xml:lang="C">s</loctext></common_name></template></service></service_bundle>"#;
    let doc = parse(good);
    let mut errors = Vec::new();
    validate(doc.root_element(), "/service_bundle", &mut errors);
    assert_eq!(errors, Vec::<String>::new());
}

#[test]
fn smf_manifest_follows_the_dtd() {
    let text = read("etc/smf/zinstalld.xml");
    assert_eq!(
        doctype(&text),
        ["service_bundle", "SYSTEM", DTD_PATH],
        "svccfg finds the DTD by this system id"
    );
    let doc = parse(&text);
    assert_eq!(qname(doc.root_element()), "service_bundle");
    let mut errors = Vec::new();
    validate(doc.root_element(), "/service_bundle", &mut errors);
    assert!(errors.is_empty(), "not valid:\n{}", errors.join("\n"));

    if tools::have("xmllint") && Path::new(DTD_PATH).exists() {
        let out = tools::tool("xmllint")
            .args(["--noout", "--valid"])
            .arg(top().join("etc/smf/zinstalld.xml"))
            .output()
            .expect("run xmllint");
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "xmllint --valid: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!(
            "the real DTD was not available (xmllint and {DTD_PATH}, as on \
             illumos): the structural check stood in"
        );
    }
}

/// The exec_method named `name`.
fn method<'a, 'i>(
    service: roxmltree::Node<'a, 'i>,
    name: &str,
) -> roxmltree::Node<'a, 'i> {
    let found: Vec<_> = service
        .children()
        .filter(|n| {
            n.has_tag_name("exec_method") && n.attribute("name") == Some(name)
        })
        .collect();
    assert_eq!(found.len(), 1, "one {name} method");
    found[0]
}

/// A method's timeout_seconds; the DTD calls it an integer, 0 or -1
/// meaning none.
fn timeout(m: roxmltree::Node<'_, '_>) -> i64 {
    let t = m.attribute("timeout_seconds").unwrap();
    t.parse()
        .unwrap_or_else(|_| panic!("timeout_seconds {t:?} is not an integer"))
}

#[test]
fn smf_manifest_runs_the_daemon_in_the_foreground() {
    let text = read("etc/smf/zinstalld.xml");
    let doc = parse(&text);
    let bundle = doc.root_element();
    assert_eq!(bundle.attribute("type"), Some("manifest"));
    let service = bundle
        .children()
        .find(|n| n.has_tag_name("service"))
        .expect("a service");
    // svc:/system/zinstalld:default
    assert_eq!(service.attribute("name"), Some("system/zinstalld"));
    assert_eq!(service.attribute("type"), Some("service"));
    let version = service.attribute("version").unwrap();
    assert!(version.parse::<u32>().is_ok(), "version {version:?}");
    assert!(
        service
            .children()
            .any(|n| n.has_tag_name("create_default_instance")),
        "no default instance"
    );

    let start = method(service, "start");
    assert_eq!(start.attribute("type"), Some("method"));
    let exec = start.attribute("exec").unwrap();
    assert_eq!(exec.split_whitespace().next(), Some(DAEMON), "{exec}");
    assert!(timeout(start) > 0, "a start that hangs must time out");
    let stop = method(service, "stop");
    // SIGTERM: zinstalld cancels its jobs and exits 0.
    assert_eq!(stop.attribute("exec"), Some(":kill"));
    assert!(timeout(stop) > 0);
    let refresh = method(service, "refresh");
    // SIGHUP: zinstalld reloads its configuration.
    assert_eq!(refresh.attribute("exec"), Some(":kill -HUP"));
    assert!(timeout(refresh) > 0);

    // The daemon does not fork: the service is its process ("child").
    let startd = service
        .children()
        .find(|n| {
            n.has_tag_name("property_group")
                && n.attribute("name") == Some("startd")
        })
        .expect("a startd property group");
    assert_eq!(startd.attribute("type"), Some("framework"));
    let duration = startd
        .children()
        .find(|n| {
            n.has_tag_name("propval") && n.attribute("name") == Some("duration")
        })
        .expect("startd/duration");
    assert_eq!(duration.attribute("type"), Some("astring"));
    assert_eq!(duration.attribute("value"), Some("child"));

    // Zone roots and the cache are on local file systems.
    let deps: Vec<_> = service
        .children()
        .filter(|n| n.has_tag_name("dependency"))
        .collect();
    let fmris: Vec<&str> = deps
        .iter()
        .flat_map(|d| d.children())
        .filter(|n| n.has_tag_name("service_fmri"))
        .filter_map(|n| n.attribute("value"))
        .collect();
    assert!(
        fmris
            .iter()
            .any(|f| f.starts_with("svc:/system/filesystem/local")),
        "{fmris:?}"
    );
    for d in &deps {
        let scheme = match d.attribute("type") {
            Some("service") => "svc:/",
            Some("path") => "file://",
            other => panic!("dependency type {other:?}"),
        };
        for f in d.children().filter(|n| n.has_tag_name("service_fmri")) {
            assert!(f.attribute("value").unwrap().starts_with(scheme));
        }
    }

    let template = service
        .children()
        .find(|n| n.has_tag_name("template"))
        .expect("a template");
    let common_name = template
        .descendants()
        .find(|n| n.has_tag_name("loctext"))
        .and_then(|n| n.text())
        .unwrap_or("");
    assert!(!common_name.trim().is_empty(), "no common name");
    let pages: Vec<(Option<&str>, Option<&str>)> = template
        .descendants()
        .filter(|n| n.has_tag_name("manpage"))
        .map(|n| (n.attribute("title"), n.attribute("section")))
        .collect();
    assert!(
        pages.contains(&(Some("zinstalld"), Some("8"))),
        "no zinstalld(8): {pages:?}"
    );
}

// ---------------------------------------------------------------------
// The systemd units.
// ---------------------------------------------------------------------

/// A unit file as systemd reads it: `[Section]` headers and `Key=Value`
/// lines; `#` and `;` start comment lines; a trailing backslash joins
/// the next line.
struct Unit {
    entries: Vec<(String, String, String)>,
}

impl Unit {
    fn parse(name: &str, text: &str) -> Unit {
        let mut entries = Vec::new();
        let mut section = String::new();
        let mut pending = String::new();
        for (no, raw) in text.lines().enumerate() {
            let line = raw.trim();
            // Comment lines are skipped, inside a continued line too.
            if line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if line.is_empty() && pending.is_empty() {
                continue;
            }
            if let Some(head) = line.strip_suffix('\\') {
                pending.push_str(head);
                pending.push(' ');
                continue;
            }
            let line = std::mem::take(&mut pending) + line;
            if let Some(s) =
                line.strip_prefix('[').and_then(|l| l.strip_suffix(']'))
            {
                section = s.to_string();
                continue;
            }
            let (k, v) = line.split_once('=').unwrap_or_else(|| {
                panic!("{name}:{}: not Key=Value: {raw}", no + 1)
            });
            assert!(
                !section.is_empty(),
                "{name}:{}: before any section",
                no + 1
            );
            entries.push((
                section.clone(),
                k.trim().to_string(),
                v.trim().to_string(),
            ));
        }
        Unit { entries }
    }

    /// Every assignment of `key` in `section`, in order; an empty one
    /// resets the list, as systemd does.
    fn all(&self, section: &str, key: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for (s, k, v) in &self.entries {
            if s == section && k == key {
                if v.is_empty() {
                    out.clear();
                } else {
                    out.push(v.as_str());
                }
            }
        }
        out
    }

    /// The value in force: the last assignment.
    fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.all(section, key).last().copied()
    }

    /// The words of every assignment, for list settings.
    fn words(&self, section: &str, key: &str) -> BTreeSet<&str> {
        self.all(section, key)
            .iter()
            .flat_map(|v| v.split_whitespace())
            .collect()
    }
}

fn is_true(v: Option<&str>) -> bool {
    matches!(v, Some("yes" | "true" | "on" | "1"))
}

fn service() -> Unit {
    Unit::parse("zinstalld.service", &read("etc/systemd/zinstalld.service"))
}

fn socket() -> Unit {
    Unit::parse("zinstalld.socket", &read("etc/systemd/zinstalld.socket"))
}

/// A time span in seconds, as the units spell them here (`90`, `90s`,
/// `2min`).
fn seconds(v: &str) -> u64 {
    let (num, mult) = if let Some(n) = v.strip_suffix("min") {
        (n, 60)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1)
    } else {
        (v, 1)
    };
    num.trim()
        .parse::<u64>()
        .unwrap_or_else(|_| panic!("time span {v:?}"))
        * mult
}

#[test]
fn socket_unit_listens_where_the_daemon_expects() {
    let s = socket();
    assert_eq!(
        s.all("Socket", "ListenStream"),
        [SOCKET],
        "one stream socket"
    );
    assert_eq!(s.get("Socket", "SocketMode"), Some("0660"));
    assert_eq!(s.get("Socket", "DirectoryMode"), Some("0755"));
    assert_eq!(s.get("Socket", "Accept"), Some("no"));
    assert_eq!(
        s.words("Install", "WantedBy"),
        BTreeSet::from(["sockets.target"])
    );
    for key in ["ListenDatagram", "ListenSequentialPacket", "ListenFIFO"] {
        assert!(
            s.get("Socket", key).is_none(),
            "zinstalld takes one stream socket: {key}"
        );
    }
}

#[test]
fn service_unit_starts_the_daemon_with_the_socket() {
    let u = service();
    assert!(u.words("Unit", "Requires").contains("zinstalld.socket"));
    assert!(u.words("Unit", "After").contains("zinstalld.socket"));
    assert_eq!(u.get("Service", "Type"), Some("notify"));
    // No --socket or --config: the daemon's defaults are the socket
    // unit's path and /etc/zinstall/zinstalld.toml.
    assert_eq!(u.all("Service", "ExecStart"), [DAEMON]);
    assert_eq!(
        u.get("Service", "ExecReload"),
        Some("/bin/kill -HUP $MAINPID")
    );
    // SIGTERM to the daemon alone (it cancels its jobs), SIGKILL to what
    // is left once it has gone.
    assert_eq!(u.get("Service", "KillMode"), Some("mixed"));
    assert_eq!(
        u.get("Service", "KillSignal").unwrap_or("SIGTERM"),
        "SIGTERM"
    );
    assert_eq!(u.get("Service", "Restart"), Some("on-failure"));
    assert_eq!(
        u.words("Install", "WantedBy"),
        BTreeSet::from(["multi-user.target"])
    );
    assert_eq!(
        u.words("Install", "Also"),
        BTreeSet::from(["zinstalld.socket"])
    );
    // Runs as root.
    assert!(matches!(
        u.get("Service", "User"),
        None | Some("root" | "0")
    ));
    assert!(!is_true(u.get("Service", "DynamicUser")));
}

#[test]
fn both_service_managers_give_the_jobs_the_same_time_to_cancel() {
    let text = read("etc/smf/zinstalld.xml");
    let doc = parse(&text);
    let svc = doc
        .root_element()
        .children()
        .find(|n| n.has_tag_name("service"))
        .unwrap();
    let smf = timeout(method(svc, "stop"));
    let u = service();
    let systemd =
        seconds(u.get("Service", "TimeoutStopSec").expect("TimeoutStopSec"));
    assert!(systemd >= 30, "cancelling a large copy takes a while");
    assert_eq!(u64::try_from(smf).ok(), Some(systemd));
}

#[test]
fn socket_directory_outlives_the_service() {
    let s = socket();
    let u = service();
    // The socket unit makes the directory (DirectoryMode=).
    let listen = s.get("Socket", "ListenStream").expect("ListenStream");
    let dir = Path::new(listen).parent().unwrap();
    assert_eq!(dir, Path::new("/run/zinstall"));
    // Without RuntimeDirectoryPreserve=yes, a RuntimeDirectory= of the
    // service is removed when it stops, socket and all, while the socket
    // unit still listens on it.
    if let Some(rd) = u.get("Service", "RuntimeDirectory") {
        assert_eq!(Path::new("/run").join(rd), dir);
        assert_eq!(u.get("Service", "RuntimeDirectoryPreserve"), Some("yes"));
        assert_eq!(u.get("Service", "RuntimeDirectoryMode"), Some("0755"));
    }
    assert_eq!(s.get("Socket", "RemoveOnStop").unwrap_or("no"), "no");
}

/// The capabilities zinstalld needs, and only those.
const CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_MKNOD",
    // security.capability
    "CAP_SETFCAP",
    // trusted.* and security.* other than capabilities
    "CAP_SYS_ADMIN",
    // chattr +i on cache entries
    "CAP_LINUX_IMMUTABLE",
    // fsuid, fsgid and groups of an unprivileged client
    "CAP_SETUID",
    "CAP_SETGID",
];

#[test]
fn service_unit_is_hardened_but_can_lay_out_any_root() {
    let u = service();
    let caps = u.words("Service", "CapabilityBoundingSet");
    assert_eq!(caps, CAPS.iter().copied().collect::<BTreeSet<_>>());
    for key in [
        "NoNewPrivileges",
        "ProtectKernelTunables",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "ProtectHostname",
        "RestrictRealtime",
        "LockPersonality",
        "MemoryDenyWriteExecute",
    ] {
        assert!(is_true(u.get("Service", key)), "{key}=yes");
    }
    assert_eq!(u.get("Service", "ProtectSystem"), Some("full"));
    assert_eq!(u.get("Service", "SystemCallArchitectures"), Some("native"));
    // What the daemon needs, no more: its socket and sd_notify (AF_UNIX),
    // and registry pulls over TCP on IPv4 and IPv6
    // (crates/commands/zinstall/tests/boundary.rs traces a real pull
    // against this list).
    assert_eq!(
        u.words("Service", "RestrictAddressFamilies"),
        BTreeSet::from(["AF_UNIX", "AF_INET", "AF_INET6"])
    );
    // The namespaces a provision's --run makes (mount, PID, network,
    // UTS, IPC), and none other.
    assert_eq!(
        u.words("Service", "RestrictNamespaces"),
        BTreeSet::from(["~user", "cgroup", "time"])
    );
    // The filters that stand in for ProtectClock= and
    // ProtectKernelModules=. Not @mount: composefs guests are mounted (in
    // the daemon's own mount namespace) to set their identity, and --run
    // pivots into the guest.
    let filter = u.all("Service", "SystemCallFilter");
    assert_eq!(filter.len(), 1, "{filter:?}");
    let denied: BTreeSet<&str> = filter[0]
        .strip_prefix('~')
        .expect("a deny list")
        .split_whitespace()
        .collect();
    for group in ["@clock", "@module", "@reboot", "@swap", "@raw-io"] {
        assert!(denied.contains(group), "{group} not denied: {denied:?}");
    }
    assert!(!denied.contains("@mount"), "@mount denied: {denied:?}");
    // ProtectSystem= gives the daemon a mount namespace of its own, so a
    // guest's mount never leaks to the host; it is why --mount is refused
    // through zinstalld there
    // (crates/commands/zinstall/tests/composefs_guests.rs).
    assert_eq!(u.get("Service", "MountFlags"), None);

    // Each of these would refuse a place an administrator keeps roots
    // in, or lay a root out unfaithfully.
    let off = |key: &str, why: &str| {
        assert!(!is_true(u.get("Service", key)), "{key}: {why}");
    };
    off(
        "PrivateTmp",
        "a root under /tmp or /var/tmp would be hidden",
    );
    off("PrivateDevices", "drops CAP_MKNOD and refuses device nodes");
    off("ProtectClock", "its device allow-list refuses mknod");
    off(
        "ProtectKernelModules",
        "a copy of /usr would lose lib/modules",
    );
    off("RestrictSUIDSGID", "roots hold setuid and setgid programs");
    assert!(
        matches!(u.get("Service", "ProtectHome"), None | Some("no" | "false")),
        "clients' guest roots live in their homes"
    );
    assert!(
        u.get("Service", "DeviceAllow").is_none()
            && matches!(u.get("Service", "DevicePolicy"), None | Some("auto")),
        "a device allow-list refuses mknod"
    );
    for key in ["ReadOnlyPaths", "InaccessiblePaths", "TemporaryFileSystem"] {
        assert!(u.get("Service", key).is_none(), "{key} would hide roots");
    }
}

/// The systemd version, from `systemd-analyze --version`.
fn systemd_version() -> u32 {
    let out = tools::tool("systemd-analyze")
        .arg("--version")
        .output()
        .expect("run systemd-analyze --version");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("systemd-analyze --version: {text}"))
}

#[test]
fn systemd_analyze_verifies_the_units() {
    tools::need("systemd-analyze");
    let dir = tempfile::tempdir().unwrap();
    let src = top().join("etc/systemd");
    fs::copy(
        src.join("zinstalld.socket"),
        dir.path().join("zinstalld.socket"),
    )
    .unwrap();
    let mut service = read("etc/systemd/zinstalld.service");
    if !Path::new(DAEMON).exists() {
        // verify fails on an ExecStart= binary that does not exist. Where
        // zinstalld is not installed, the copy verified here starts an
        // existing program instead; the line is otherwise the same, and
        // the test above checks the real ExecStart.
        let stand_in = ["/bin/true", "/usr/bin/true"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("a true(1)");
        let from = format!("ExecStart={DAEMON}\n");
        assert_eq!(service.matches(&from).count(), 1, "one ExecStart line");
        service = service.replace(&from, &format!("ExecStart={stand_in}\n"));
    }
    fs::write(dir.path().join("zinstalld.service"), service).unwrap();

    let mut cmd = tools::tool("systemd-analyze");
    cmd.args(["verify", "--man=no"]);
    // Since systemd 250: fail on faults of these units, not of the host's
    // units they pull in.
    if systemd_version() >= 250 {
        cmd.arg("--recursive-errors=no");
    }
    let out = cmd
        .arg(dir.path().join("zinstalld.socket"))
        .arg(dir.path().join("zinstalld.service"))
        .output()
        .expect("run systemd-analyze verify");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tmp = dir.path().to_string_lossy();
    // Harmless: complaints about the host's own units, which verify loads
    // as dependencies (sockets.target, multi-user.target and theirs).
    // Anything naming these units or their files is a fault.
    let (ours, host): (Vec<&str>, Vec<&str>) = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .partition(|l| l.contains("zinstalld") || l.contains(tmp.as_ref()));
    for l in &host {
        eprintln!("ignored, about the host's units: {l}");
    }
    assert!(
        ours.is_empty(),
        "systemd-analyze verify:\n{}",
        ours.join("\n")
    );
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
}
