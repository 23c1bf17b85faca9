//! Who may do what: root everything; anyone else what a grant gives its
//! uid or one of its groups, on paths under that grant's prefixes.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::protocol::Call;
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

/// The longest prefix granted to `peer` for `op` that `path` (normalized)
/// is under: the directory the path is then resolved beneath, without
/// following a symlink, so that a link inside the prefix cannot take the
/// job outside it. `None`: not granted there.
pub fn granted_prefix(
    config: &Config,
    peer: &Peer,
    op: &str,
    path: &Path,
) -> Option<PathBuf> {
    grants_for(config, peer, op)
        .into_iter()
        .flat_map(|g| g.prefixes.iter())
        .filter(|prefix| path.starts_with(prefix))
        .max_by_key(|prefix| prefix.components().count())
        .cloned()
}

/// Why a call is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A path is relative or has `.` or `..` components: whatever the
    /// caller, a path must mean one place.
    #[error("{}: paths must be absolute, without . or .. components", .0.display())]
    UncleanPath(PathBuf),
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
            Refusal::UncleanPath(p) => Refusal::UncleanPath(clip_path(&p)),
            Refusal::OutsideGrant { path, uid, op } => Refusal::OutsideGrant {
                path: clip_path(&path),
                uid,
                op,
            },
            r @ Refusal::NotGranted { .. } => r,
        }
    }
}

/// Allows `call` for `peer`, or says why not.
pub fn authorize(
    config: &Config,
    peer: &Peer,
    call: &Call,
) -> Result<(), Refusal> {
    if let Some(p) = call.unclean_path() {
        return Err(Refusal::UncleanPath(p.to_path_buf()));
    }
    if peer.uid == 0 {
        return Ok(());
    }
    let op = call.name();
    // `version` is everyone's; jobs, status and cancel show a caller only
    // its own jobs.
    if matches!(call, Call::Version) {
        return Ok(());
    }
    let grants = grants_for(config, peer, op);
    if grants.is_empty() {
        return Err(Refusal::NotGranted { uid: peer.uid, op });
    }
    for p in call.paths() {
        let under = |prefix: &Path| p.starts_with(prefix);
        if !grants.iter().any(|g| g.prefixes.iter().any(|x| under(x))) {
            return Err(Refusal::OutsideGrant {
                path: p.clone(),
                uid: peer.uid,
                op,
            });
        }
    }
    Ok(())
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
            src: src.into(),
            dst: dst.into(),
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
        let e = authorize(&c, &peer(0, &[]), &copy("rel", "/x")).unwrap_err();
        assert_eq!(e, Refusal::UncleanPath("rel".into()));
        assert!(e.to_string().contains("must be absolute"), "{e}");
        let e = authorize(
            &c,
            &peer(7, &[50]),
            &copy("/srv/b/../../etc", "/srv/b/c"),
        )
        .unwrap_err();
        assert_eq!(e, Refusal::UncleanPath("/srv/b/../../etc".into()));
        assert!(authorize(&c, &peer(7, &[]), &Call::Version).is_ok());
        assert!(authorize(&c, &peer(7, &[50]), &Call::Jobs).is_err());
        // The deepest prefix decides where a path is resolved from.
        let c = Config::parse(
            "[[grant]]\nusers=[7]\noperations=[\"copy\"]\nprefixes=[\"/srv\"]\n\
             [[grant]]\nusers=[7]\noperations=[\"copy\"]\nprefixes=[\"/srv/b\"]\n",
        )
        .unwrap();
        let p = |path: &str| {
            granted_prefix(&c, &peer(7, &[]), "copy", Path::new(path))
        };
        assert_eq!(p("/srv/b/x"), Some("/srv/b".into()));
        assert_eq!(p("/srv/bx"), Some("/srv".into()));
        assert_eq!(p("/etc/x"), None);
    }
}
