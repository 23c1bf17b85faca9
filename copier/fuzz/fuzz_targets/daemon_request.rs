//! zinstalld's request lines: a parse never panics; a parsed request
//! prints back to a line that parses to the same request, and every path
//! it names is either refused by the path check or absolute without `.`
//! or `..`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use zinstall_daemon::protocol::{Request, normalized};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = Request::parse(data) else { return };
    let again = Request::parse(r.to_line().as_bytes())
        .expect("a request's own line parses");
    assert_eq!(again, r);
    if r.call.unclean_path().is_none() {
        for p in r.call.paths() {
            assert!(normalized(p).is_some(), "{} passed the check", p.display());
        }
    }
});
