//! zinstalld's request lines: a parse never panics; a parsed request
//! prints back to a line that parses to the same request, and every path
//! it names is absolute, without `.` or `..` (a request naming another is
//! refused as it is read).

#![no_main]

use libfuzzer_sys::fuzz_target;
use zinstall_daemon::protocol::{CleanPath, Request};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = Request::parse(data) else { return };
    let again = Request::parse(r.to_line().as_bytes())
        .expect("a request's own line parses");
    assert_eq!(again, r);
    for p in r.call.paths() {
        assert_eq!(
            CleanPath::new(p.to_path_buf()).as_ref(),
            Ok(p),
            "{} was read as clean",
            p.display()
        );
    }
});
