//! The errors' messages: each reads as the failing call, or as the file,
//! line and value it is about.

use super::*;

#[test]
fn io_error_reads_like_the_call() {
    let e = Error::io2(
        Op::CopyFileRange,
        "/a/b",
        "/x/b",
        io::Error::from_raw_os_error(libc::ENOSPC),
    );
    let s = e.to_string();
    assert!(
        s.starts_with("copy_file_range /a/b -> /x/b: No space left"),
        "{s}"
    );
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    let back: io::Error = e.into();
    assert_eq!(back.kind(), io::ErrorKind::StorageFull);
}

#[test]
fn defaults_error_names_file_line_and_value() {
    let e = Error::Defaults {
        file: "/etc/default/zinstall".into(),
        line: 7,
        key: "COPY_THREADS".into(),
        value: "0".into(),
        problem: DefaultsProblem::OutOfRange { min: 1, max: 1024 },
    };
    assert_eq!(
        e.to_string(),
        "/etc/default/zinstall:7: COPY_THREADS=0: out of range \
         (must be 1 to 1024)"
    );
}

#[test]
fn syntax_errors_show_the_line_and_a_caret() {
    let text = "a = 1\nlog = [1,\n\tb = \u{1b}x\n";
    let at = text.find("b =").unwrap();
    let e = Syntax::at("p.toml", text, Some(at..at + 1), "bad key\n");
    assert_eq!(
        e.to_string(),
        "p.toml:3:2: bad key\n  |\n3 |  b = ?x\n  |  ^"
    );
    assert_eq!(
        Syntax::at_line("p.toml", text, 2, 7, "x"),
        Syntax {
            file: "p.toml".into(),
            line: 2,
            column: 7,
            text: "log = [1,".into(),
            width: 1,
            message: "x".into(),
        }
    );
    // Past the end, or with no position: still a message.
    let end = Syntax::at("p", "x", Some(5..9), "eof");
    assert_eq!(end.to_string(), "p:1:2: eof\n  |\n1 | x\n  |  ^");
    assert_eq!(Syntax::at("p", "", None, "empty").to_string(), "p: empty");
    // A long line is shown around the column.
    let long = format!("{}X{}", "a".repeat(500), "b".repeat(500));
    let e = Syntax::at("p", &long, Some(500..501), "here");
    assert!(e.text.chars().count() <= Syntax::MAX_SHOWN + 6);
    assert_eq!(e.text.chars().nth(e.column - 1), Some('X'));
}
