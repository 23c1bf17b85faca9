//! The customisation options as cloud-config, and a user's own
//! `#cloud-config` merged with them: lists appended, mappings merged
//! key by key, and a scalar both set differently refused naming its key.

use serde_norway::{Mapping, Value};

/// A guest's root password, as the seed sets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RootPassword {
    /// This password, in clear (cloud-init hashes it in the guest).
    Text(String),
    /// No password login: `*` in shadow.
    Disabled,
}

/// What one guest's cloud-config is made from.
#[derive(Debug, Default)]
pub(crate) struct Options<'a> {
    /// Authorized key lines, by user, in the order given.
    pub keys: &'a [(String, String)],
    /// Root's password, if set.
    pub password: Option<RootPassword>,
    /// Root's account locked too (`locked:`).
    pub locked: bool,
    /// `runcmd`, in order: first-boot commands, then run commands;
    /// this guest's (`{n}` expanded).
    pub runcmd: Vec<String>,
    /// `write_files`: path and content, this guest's.
    pub writes: Vec<(String, String)>,
    /// `hostname`, when asked for.
    pub hostname: Option<String>,
}

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

fn map<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(s(k), v);
    }
    Value::Mapping(m)
}

/// The cloud-config the options make, as a mapping (empty when none is
/// given).
pub(crate) fn generate(o: &Options<'_>) -> Mapping {
    let mut m = Mapping::new();
    authorized_keys(&mut m, o.keys);
    let mut runcmd: Vec<Value> = o.runcmd.iter().map(|c| s(c)).collect();
    root_password(&mut m, &mut runcmd, o.password.as_ref());
    if o.locked {
        runcmd.insert(0, argv(&["passwd", "-l", "root"]));
    }
    if !runcmd.is_empty() {
        m.insert(s("runcmd"), Value::Sequence(runcmd));
    }
    if !o.writes.is_empty() {
        let files = o
            .writes
            .iter()
            .map(|(p, c)| map([("path", s(p)), ("content", s(c))]))
            .collect();
        m.insert(s("write_files"), Value::Sequence(files));
    }
    if let Some(h) = &o.hostname {
        m.insert(s("hostname"), s(h));
    }
    m
}

/// Root's keys (`ssh_authorized_keys`) and each other user's, in the
/// order first named (`users`, after the image's default user).
fn authorized_keys(m: &mut Mapping, keys: &[(String, String)]) {
    let root: Vec<Value> = keys
        .iter()
        .filter(|(u, _)| u == "root")
        .map(|(_, k)| s(k))
        .collect();
    if !root.is_empty() {
        m.insert(s("ssh_authorized_keys"), Value::Sequence(root));
        // Cloud images refuse root's keys otherwise (a "log in as the
        // default user" command is put before each).
        m.insert(s("disable_root"), Value::Bool(false));
    }
    let mut users: Vec<Value> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for (u, _) in keys.iter().filter(|(u, _)| u != "root") {
        if !names.contains(&u.as_str()) {
            names.push(u);
        }
    }
    for u in names {
        let keys = keys
            .iter()
            .filter(|(n, _)| n == u)
            .map(|(_, k)| s(k))
            .collect();
        users.push(map([
            ("name", s(u)),
            ("ssh_authorized_keys", Value::Sequence(keys)),
        ]));
    }
    if !users.is_empty() {
        // The image's default user stays.
        users.insert(0, s("default"));
        m.insert(s("users"), Value::Sequence(users));
    }
}

/// Root's password: set by `chpasswd` (with password login), or
/// disabled by the first command the guest runs.
fn root_password(
    m: &mut Mapping,
    runcmd: &mut Vec<Value>,
    password: Option<&RootPassword>,
) {
    match password {
        Some(RootPassword::Text(p)) => {
            m.insert(
                s("chpasswd"),
                map([
                    ("expire", Value::Bool(false)),
                    (
                        "users",
                        Value::Sequence(vec![map([
                            ("name", s("root")),
                            ("password", s(p)),
                            ("type", s("text")),
                        ])]),
                    ),
                ]),
            );
            m.insert(s("ssh_pwauth"), Value::Bool(true));
        }
        Some(RootPassword::Disabled) => {
            // Before anything else the guest runs.
            runcmd.insert(0, argv(&["usermod", "-p", "*", "root"]));
        }
        None => {}
    }
}

/// A command as a list: run without a shell.
fn argv(words: &[&str]) -> Value {
    Value::Sequence(words.iter().map(|w| s(w)).collect())
}

/// `ours` merged into `theirs` (the user's): a key only one has is
/// kept; two lists are appended (theirs first); two mappings merged
/// key by key; two scalars must be equal. Returns the keys (dotted)
/// where they differ.
pub(crate) fn merge(theirs: &mut Mapping, ours: Mapping) -> Vec<String> {
    let mut conflicts = Vec::new();
    merge_at(theirs, ours, "", &mut conflicts);
    conflicts
}

fn merge_at(
    theirs: &mut Mapping,
    ours: Mapping,
    at: &str,
    conflicts: &mut Vec<String>,
) {
    for (k, v) in ours {
        let name = match &k {
            Value::String(n) if at.is_empty() => n.clone(),
            Value::String(n) => format!("{at}.{n}"),
            _ => format!("{at}.?"),
        };
        match (theirs.get_mut(&k), v) {
            (None, v) => {
                theirs.insert(k, v);
            }
            (Some(Value::Sequence(t)), Value::Sequence(o)) => {
                for item in o {
                    // One `default` user is enough.
                    if !(item == s("default") && t.contains(&item)) {
                        t.push(item);
                    }
                }
            }
            (Some(Value::Mapping(t)), Value::Mapping(o)) => {
                merge_at(t, o, &name, conflicts)
            }
            (Some(t), o) if *t == o => {}
            (Some(_), _) => conflicts.push(name),
        }
    }
}

/// `#cloud-config` and the mapping as YAML; an empty mapping is the
/// header alone.
pub(crate) fn render(m: &Mapping) -> Result<String, serde_norway::Error> {
    if m.is_empty() {
        return Ok("#cloud-config\n".into());
    }
    let body = serde_norway::to_string(m)?;
    Ok(format!("#cloud-config\n{body}"))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn lists_append_and_scalars_must_agree() {
        let mut theirs: Mapping =
            serde_norway::from_str("runcmd: [a]\nusers: [default]\nhostname: x\nchpasswd: {expire: true}\n")
                .unwrap();
        let keys = [("alice".to_string(), "ssh-ed25519 K".to_string())];
        let ours = generate(&Options {
            keys: &keys,
            runcmd: vec!["b".into()],
            hostname: Some("y".into()),
            password: Some(RootPassword::Text("p".into())),
            ..Default::default()
        });
        let c = merge(&mut theirs, ours);
        assert_eq!(c, ["chpasswd.expire", "hostname"]);
        assert_eq!(theirs[&s("runcmd")], argv(&["a", "b"]));
        let users = theirs[&s("users")].as_sequence().unwrap();
        assert_eq!(users.len(), 2, "{users:?}");
    }
}
