//! The cache's composefs store in `zinstall cache gc` (swept after the
//! entries: what no ref keeps goes) and `zinstall cache verify` (every
//! object re-hashed; exit 1 naming each bad one). composefs is Linux's:
//! elsewhere there is no store, and both say nothing of it.

use std::path::Path;

use serde_json::Value;

use crate::exit::Exit;

/// `cache gc` of a cache with a composefs store and no entries (only
/// composefs installs used it): the store swept alone; `None` when there
/// is no store either.
pub fn sweep_alone(cache: &Path, dry_run: bool, json: bool) -> Option<Exit> {
    let path = zinstall_provision::composefs_store_of(cache);
    let c = match zinstall_provision::cache::sweep_store(&path, dry_run) {
        Ok(c) => c?,
        Err(e) => {
            crate::json::fail(json, &e, Value::Null);
            return Some(Exit::Failed);
        }
    };
    if json {
        crate::json::result(serde_json::json!({
            "composefs": crate::json::typed(&c)
        }));
    } else {
        super::cache_print::print_composefs_sweep(&c);
    }
    Some(Exit::Ok)
}

/// `zinstall cache verify`: every object of the cache's store re-hashed
/// against its name; exit 1 naming each that does not match.
#[cfg(target_os = "linux")]
pub fn verify(cache: &Path, json: bool) -> Exit {
    use crate::output;
    let path = zinstall_provision::composefs_store_of(cache);
    let r = if path.symlink_metadata().is_err() {
        zinstall_composefs::VerifyReport::default()
    } else {
        match zinstall_composefs::Store::open(&path)
            .and_then(|s| s.verify_all())
        {
            Ok(r) => r,
            Err(e) => {
                crate::json::fail(json, &e, Value::Null);
                return Exit::Failed;
            }
        }
    };
    let ok = r.bad.is_empty();
    if json {
        let bad: Vec<Value> = r
            .bad
            .iter()
            .map(|e| {
                serde_json::json!({
                    "path": crate::json::path(&e.path),
                    "mismatch": e.is_mismatch(),
                    "message": e.to_string(),
                })
            })
            .collect();
        crate::json::outcome(
            ok,
            Some(serde_json::json!({
                "store": crate::json::path(&path),
                "objects": r.objects,
                "bytes": r.bytes,
                "bad": bad,
            })),
            None,
        );
    } else {
        for e in &r.bad {
            output::error(e);
        }
        output::out(format_args!(
            "composefs store {}: {} objects ({}) checked, {} bad{}",
            output::show(&path),
            r.objects,
            output::human_bytes(r.bytes),
            r.bad.len(),
            if ok {
                ""
            } else {
                ": the next install or provision of the same contents \
                 finds each and writes it afresh; until then no image using \
                 it should be mounted"
            }
        ));
    }
    if ok { Exit::Ok } else { Exit::Failed }
}

/// No store where composefs is not: nothing to verify.
#[cfg(not(target_os = "linux"))]
pub fn verify(_: &Path, json: bool) -> Exit {
    crate::json::fail(
        json,
        "composefs is Linux's: there is no composefs store to verify on \
         this system",
        Value::Null,
    );
    Exit::Usage
}
