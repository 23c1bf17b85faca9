//! Who may do what: root everything; anyone else what a grant gives its
//! uid or one of its groups, on paths under that grant's prefixes.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::protocol::{Call, CleanPath};
use crate::sys::Peer;

/// The grants that give `peer` the operation `op`.
fn grants_for<'c>(
    config: &'c Config,
    peer: &Peer,
    op: &str,
) -> Vec<&'c crate::config::Grant> {
    config
        .grants
        .iter()
        .filter(|g| {
            g.operations.contains(op)
                && (g.users.contains(&peer.uid)
                    || g.groups.contains(&peer.gid)
                    || peer.groups.iter().any(|x| g.groups.contains(x)))
        })
        .collect()
}

/// Whether any grant names `peer`'s uid or one of its groups: a caller
/// without one may ask for nothing but `version`. Root needs none.
pub fn has_grant(config: &Config, peer: &Peer) -> bool {
    peer.uid == 0
        || config.grants.iter().any(|g| {
            g.users.contains(&peer.uid)
                || g.groups.contains(&peer.gid)
                || peer.groups.iter().any(|x| g.groups.contains(x))
        })
}

/// What a call was allowed on: for each path it names, the longest prefix
/// granted to the caller for the operation that the path is under. That
/// prefix is the directory the path is then resolved beneath, without
/// following a symlink, so that a link inside the prefix cannot take the
/// job outside it. Root's calls need no grant and carry no prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Granted {
    prefixes: Vec<(CleanPath, PathBuf)>,
}

impl Granted {
    /// The prefix `path` was allowed under; `None` if the call named no
    /// such path or was root's.
    pub fn prefix(&self, path: &CleanPath) -> Option<&Path> {
        self.prefixes
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, prefix)| prefix.as_path())
    }
}

/// Why a call is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No grant gives the caller this operation.
    #[error("uid {uid} is not granted {op}")]
    NotGranted {
        /// The caller.
        uid: u32,
        /// The operation asked for.
        op: &'static str,
    },
    /// The caller has the operation, but not on this path.
    #[error("{}: not under a prefix granted to uid {uid} for {op}", path.display())]
    OutsideGrant {
        /// The path named.
        path: PathBuf,
        /// The caller.
        uid: u32,
        /// The operation asked for.
        op: &'static str,
    },
}

impl Refusal {
    /// The refusal with its path cut for a reply or the log
    /// ([`crate::protocol::clip_path`]).
    pub fn clipped(self) -> Refusal {
        use crate::protocol::clip_path;
        match self {
            Refusal::OutsideGrant { path, uid, op } => Refusal::OutsideGrant {
                path: clip_path(&path),
                uid,
                op,
            },
            r @ Refusal::NotGranted { .. } => r,
        }
    }
}

/// Allows `call` for `peer`, with the prefix each of its paths was
/// granted under, or says why not. The paths were made clean as the
/// request was read ([`CleanPath`]); nothing here or after looks at their
/// text again.
pub fn authorize(
    config: &Config,
    peer: &Peer,
    call: &Call,
) -> Result<Granted, Refusal> {
    // `version` is everyone's; jobs, status and cancel show a caller only
    // its own jobs.
    if peer.uid == 0 || matches!(call, Call::Version) {
        return Ok(Granted::default());
    }
    let op = call.name();
    let grants = grants_for(config, peer, op);
    if grants.is_empty() {
        return Err(Refusal::NotGranted { uid: peer.uid, op });
    }
    let mut prefixes = Vec::new();
    for p in call.paths() {
        let deepest = grants
            .iter()
            .flat_map(|g| g.prefixes.iter())
            .filter(|prefix| p.starts_with(prefix))
            .max_by_key(|prefix| prefix.components().count());
        match deepest {
            Some(prefix) => prefixes.push((p.clone(), prefix.clone())),
            None => {
                return Err(Refusal::OutsideGrant {
                    path: p.to_path_buf(),
                    uid: peer.uid,
                    op,
                });
            }
        }
    }
    Ok(Granted { prefixes })
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::protocol::CopyArgs;

    fn peer(uid: u32, groups: &[u32]) -> Peer {
        Peer {
            uid,
            gid: uid,
            groups: groups.to_vec(),
            pid: 1,
        }
    }

    fn copy(src: &str, dst: &str) -> Call {
        Call::Copy(CopyArgs {
            src: CleanPath::new(src).unwrap(),
            dst: CleanPath::new(dst).unwrap(),
            merge: false,
            sync: false,
            exclude: vec![],
            skip_special: false,
        })
    }

    #[test]
    fn grants_decide_and_paths_are_checked() {
        let c = Config::parse(
            "[[grant]]\ngroups=[50]\noperations=[\"copy\"]\nprefixes=[\"/srv/b\"]\n",
        )
        .unwrap();
        assert!(authorize(&c, &peer(0, &[]), &copy("/etc", "/x")).is_ok());
        assert!(
            authorize(&c, &peer(7, &[50]), &copy("/srv/b/a", "/srv/b/c"))
                .is_ok()
        );
        let e = authorize(&c, &peer(7, &[50]), &copy("/srv/b/a", "/srv/bad"))
            .unwrap_err();
        assert_eq!(
            e,
            Refusal::OutsideGrant {
                path: "/srv/bad".into(),
                uid: 7,
                op: "copy"
            }
        );
        assert!(
            e.to_string().contains("/srv/bad: not under a prefix"),
            "{e}"
        );
        let e = authorize(&c, &peer(7, &[]), &copy("/srv/b/a", "/srv/b/c"))
            .unwrap_err();
        assert_eq!(e, Refusal::NotGranted { uid: 7, op: "copy" });
        assert_eq!(e.to_string(), "uid 7 is not granted copy");
        assert!(authorize(&c, &peer(7, &[]), &Call::Version).is_ok());
        assert!(authorize(&c, &peer(7, &[50]), &Call::Jobs).is_err());
        // The deepest prefix decides where a path is resolved from.
        let c = Config::parse(
            "[[grant]]\nusers=[7]\noperations=[\"copy\"]\nprefixes=[\"/srv\"]\n\
             [[grant]]\nusers=[7]\noperations=[\"copy\"]\nprefixes=[\"/srv/b\"]\n",
        )
        .unwrap();
        let call = copy("/srv/b/x", "/srv/bx");
        let granted = authorize(&c, &peer(7, &[]), &call).unwrap();
        let p = |path: &str| granted.prefix(&CleanPath::new(path).unwrap());
        assert_eq!(p("/srv/b/x"), Some(Path::new("/srv/b")));
        assert_eq!(p("/srv/bx"), Some(Path::new("/srv")));
        assert_eq!(p("/etc/x"), None, "not a path of the call");
        let e = authorize(&c, &peer(7, &[]), &copy("/srv/b/x", "/etc/x"))
            .unwrap_err();
        assert!(matches!(e, Refusal::OutsideGrant { .. }), "{e}");
        // Root's calls carry no prefix: they need none.
        let root = authorize(&c, &peer(0, &[]), &call).unwrap();
        assert_eq!(root.prefix(&CleanPath::new("/srv/b/x").unwrap()), None);
    }
}
