//! Who may do what: root everything; anyone else what a grant gives its
//! uid or one of its groups, on paths under that grant's prefixes.

use std::path::Path;

use crate::config::{Config, normalized};
use crate::protocol::Call;
use crate::sys::Peer;

/// Refuses a request naming a path that is relative or has `.` or `..`
/// components: whatever the caller, a path means one place.
pub fn check_paths(call: &Call) -> Result<(), String> {
    for p in call.paths() {
        if normalized(p).is_none() {
            return Err(format!(
                "{}: paths must be absolute, without . or .. components",
                p.display()
            ));
        }
    }
    Ok(())
}

/// Allows `call` for `peer`, or says why not.
pub fn authorize(
    config: &Config,
    peer: &Peer,
    call: &Call,
) -> Result<(), String> {
    check_paths(call)?;
    let paths = call.paths();
    if peer.uid == 0 {
        return Ok(());
    }
    let op = call.name();
    // `version` is everyone's; jobs, status and cancel show a caller only
    // its own jobs.
    if matches!(call, Call::Version) {
        return Ok(());
    }
    let grants: Vec<_> = config
        .grants
        .iter()
        .filter(|g| {
            g.operations.contains(op)
                && (g.users.contains(&peer.uid)
                    || g.groups.contains(&peer.gid)
                    || peer.groups.iter().any(|x| g.groups.contains(x)))
        })
        .collect();
    if grants.is_empty() {
        return Err(format!("uid {} is not granted {op}", peer.uid));
    }
    for p in paths {
        let under = |prefix: &Path| p.starts_with(prefix);
        if !grants.iter().any(|g| g.prefixes.iter().any(|x| under(x))) {
            return Err(format!(
                "{}: not under a prefix granted to uid {} for {op}",
                p.display(),
                peer.uid
            ));
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
        assert!(e.contains("/srv/bad: not under a prefix"), "{e}");
        let e = authorize(&c, &peer(7, &[]), &copy("/srv/b/a", "/srv/b/c"))
            .unwrap_err();
        assert!(e.contains("not granted copy"), "{e}");
        let e = authorize(&c, &peer(0, &[]), &copy("rel", "/x")).unwrap_err();
        assert!(e.contains("must be absolute"), "{e}");
        let e = authorize(
            &c,
            &peer(7, &[50]),
            &copy("/srv/b/../../etc", "/srv/b/c"),
        )
        .unwrap_err();
        assert!(e.contains("without . or .."), "{e}");
        assert!(authorize(&c, &peer(7, &[]), &Call::Version).is_ok());
        assert!(authorize(&c, &peer(7, &[50]), &Call::Jobs).is_err());
    }
}
