//! `zinstall --daemon provision`'s customisation and seed options made
//! into what the request carries: every file they name read here, with
//! the checks a local provision makes, and sent as contents, so that
//! zinstalld opens no path of the caller's.

use serde_json::Value;
use zinstall_daemon::protocol::{MAX_LINE, ProvisionReply};
use zinstall_provision::customize::sent;
use zinstall_provision::customize::wire::{CustomizeRequest, SeedSent};

use crate::cmd::provision::ProvisionArgs;
use crate::exit::Exit;
use crate::output;

/// The customisation of directory guests and the seed of disk guests
/// (`None` with `--no-seed`), files read into them.
pub(crate) fn contents(
    a: &ProvisionArgs,
) -> Result<(Option<CustomizeRequest>, Option<SeedSent>), Exit> {
    let fail = |e: &zinstall_provision::ProvisionError| {
        let fields = crate::json::provision_fields(e);
        crate::json::fail(a.json, e, fields);
        Exit::Usage
    };
    let options = a.customize.options().map_err(|e| fail(&e))?;
    let customize =
        sent::resolve(&options, a.count, &a.name).map_err(|e| fail(&e))?;
    let seed =
        a.seed
            .request(a.hostname.as_deref(), &options)
            .map_err(|e| {
                crate::json::fail(a.json, &e, Value::Null);
                Exit::Usage
            })?;
    let seed = seed
        .as_ref()
        .map(zinstall_provision::seed::sent::resolve)
        .transpose()
        .map_err(|e| fail(&e))?;
    Ok((customize, seed))
}

/// Refuses a request line longer than zinstalld reads, saying what
/// makes it long.
pub(crate) fn check_line(line: &str, json: bool) -> Result<(), Exit> {
    if line.len() < MAX_LINE {
        return Ok(());
    }
    crate::json::fail(
        json,
        format_args!(
            "the request is {} bytes with the files the options name, and \
             zinstalld reads requests of at most {} KiB: send fewer or \
             smaller files, or run without --daemon",
            line.len() + 1,
            MAX_LINE >> 10
        ),
        Value::Null,
    );
    Err(Exit::Usage)
}

/// The `random` passwords the reply tells, once each, as a local
/// provision prints them.
pub(crate) fn print_passwords(r: &ProvisionReply) {
    for g in &r.guests {
        for p in &g.passwords {
            output::out(format_args!(
                "password of {} on {}: {}",
                p.user, g.path, p.password
            ));
        }
    }
}
