use super::*;

#[test]
fn requests_round_trip_and_bad_ones_say_why() {
    let r = Request {
        call: Call::Copy(CopyArgs {
            src: CleanPath::new("/a").unwrap(),
            dst: CleanPath::new("/b").unwrap(),
            merge: true,
            sync: false,
            exclude: vec!["*.o".into()],
            skip_special: false,
        }),
        detach: true,
    };
    assert_eq!(Request::parse(r.to_line().as_bytes()).unwrap(), r);
    // As the protocol's documentation shows it; `args` always there.
    let version = Request {
        call: Call::Version,
        detach: false,
    };
    assert_eq!(
        version.to_line(),
        r#"{"v":1,"op":"version","args":{},"detach":false}"#
    );
    assert_eq!(
        Request::parse(version.to_line().as_bytes()).unwrap(),
        version
    );
    let status = Request {
        call: Call::Status(JobRef { job: 4 }),
        detach: false,
    };
    assert_eq!(Request::parse(status.to_line().as_bytes()).unwrap(), status);
    let bad = |s: &str| Request::parse(s.as_bytes()).unwrap_err();
    assert!(matches!(bad("{"), BadRequest::Malformed(_)));
    assert_eq!(
        bad(r#"{"v":2,"op":"version"}"#),
        BadRequest::Version { got: 2 }
    );
    assert!(matches!(
        bad(r#"{"v":1,"op":"format-disk"}"#),
        BadRequest::UnknownOp(o) if o == "format-disk"
    ));
    let e = bad(r#"{"v":1,"op":"copy","args":{"src":"/a","dts":"/b"}}"#);
    assert!(e.to_string().contains("unknown field `dts`"), "{e}");
    let e = bad(r#"{"v":1,"op":"jobs","args":{"all":true}}"#);
    assert!(e.to_string().contains("takes no arguments"), "{e}");
    assert!(matches!(
        bad(r#"{"v":1,"op":"version","extra":1}"#),
        BadRequest::Malformed(_)
    ));
    let long = vec![b' '; MAX_LINE];
    assert_eq!(Request::parse(&long).unwrap_err(), BadRequest::TooLong);
}

#[test]
fn hostile_lines_are_refused_early_and_echoed_short() {
    let bad = |s: &[u8]| Request::parse(s).unwrap_err();
    // A name of 100,000 bytes is quoted by its first 200 and its
    // length.
    let name = "é".repeat(50_000);
    let line = format!(r#"{{"v":1,"op":"{name}"}}"#);
    let e = bad(line.as_bytes()).to_string();
    assert!(e.len() < 400, "{}", e.len());
    assert!(e.contains("…(100000 bytes)"), "{e}");
    // An unknown field of any size, in the envelope or the arguments.
    let key = "k".repeat(100_000);
    for line in [
        format!(r#"{{"v":1,"{key}":0}}"#),
        format!(r#"{{"v":1,"op":"copy","args":{{"{key}":0}}}}"#),
    ] {
        let e = bad(line.as_bytes()).to_string();
        assert!(e.contains("unknown field"), "{e}");
        assert!(e.len() < 700, "{}", e.len());
    }
    // Objects by the thousand: refused at the first, whichever way
    // they come.
    let objects = r#"{"a":0},"#.repeat(20_000);
    let objects = objects.trim_end_matches(',');
    for line in [
        format!("{{{}}}", objects.replace(['{', '}'], "")),
        format!(r#"{{"v":1,"op":"copy","args":[{objects}]}}"#),
        format!(
            r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":[{objects}]}}}}"#
        ),
        format!(r#"{{"args":[{objects}],"v":1,"op":"jobs"}}"#),
    ] {
        assert!(line.len() < MAX_LINE);
        let e = bad(line.as_bytes());
        assert!(
            matches!(e, BadRequest::Malformed(_) | BadRequest::Args { .. }),
            "{e}"
        );
    }
    // Patterns by the thousand: refused past MAX_EXCLUDES, as they
    // come, not after a string was made of each.
    let patterns = r#""a","#.repeat(MAX_EXCLUDES + 1);
    let line = format!(
        r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":[{}]}}}}"#,
        patterns.trim_end_matches(',')
    );
    let e = bad(line.as_bytes());
    assert!(
        e.to_string().contains(&format!("more than {MAX_EXCLUDES}")),
        "{e}"
    );
    let fine = r#""a","#.repeat(MAX_EXCLUDES);
    let line = format!(
        r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":[{}]}}}}"#,
        fine.trim_end_matches(',')
    );
    assert!(Request::parse(line.as_bytes()).is_ok());
    // Nesting.
    let deep = format!(
        r#"{{"v":1,"op":"copy","args":{{"src":"/a","dst":"/b","exclude":{}"x"{}}}}}"#,
        "[".repeat(40),
        "]".repeat(40)
    );
    assert_eq!(bad(deep.as_bytes()), BadRequest::TooDeep);
    // Brackets inside strings are text.
    let r = Request::parse(
        br#"{"v":1,"op":"copy","args":{"src":"/[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"{","dst":"/b"}}"#,
    )
    .unwrap();
    assert!(matches!(r.call, Call::Copy(_)));
    // Arguments before the operation, as a map's order may put them.
    let r = Request::parse(
        br#"{"args":{"job":3},"detach":true,"op":"status","v":1}"#,
    )
    .unwrap();
    assert_eq!(r.call, Call::Status(JobRef { job: 3 }));
    assert!(r.detach);
    for (line, says) in [
        (
            r#"{"v":"1","op":"version"}"#,
            "must be a protocol version number",
        ),
        (
            r#"{"v":-1,"op":"version"}"#,
            "must be a protocol version number",
        ),
        (r#"{"op":"version"}"#, "missing field `v`"),
        (
            r#"{"v":1,"op":"version","args":{"x":1}}"#,
            "takes no arguments",
        ),
        (r#"{"v":1,"op":"copy"}"#, "missing field `src`"),
    ] {
        let e = bad(line.as_bytes()).to_string();
        assert!(e.contains(says), "{line}: {e}");
    }
    assert!(Request::parse(br#"{"v":1,"op":"version","args":null}"#).is_ok());
    assert_eq!(clip("abc", 2), "ab…(3 bytes)");
    assert_eq!(clip("aé", 2), "a…(3 bytes)");
    assert_eq!(clip("abc", 3), "abc");
}

#[test]
fn error_kinds_cross_the_wire_by_name() {
    let all = [
        ErrorKind::Request,
        ErrorKind::Denied,
        ErrorKind::Busy,
        ErrorKind::Io,
        ErrorKind::Refused,
        ErrorKind::Cancelled,
        ErrorKind::Install,
        ErrorKind::Provision,
        ErrorKind::NotFound,
        ErrorKind::Internal,
    ];
    for k in all {
        let v = serde_json::to_value(k).unwrap();
        assert_eq!(v, k.as_str());
        assert_eq!(serde_json::from_value::<ErrorKind>(v).unwrap(), k);
    }
    assert_eq!(ErrorKind::NotFound.as_str(), "not-found");
    // A newer daemon's kind is read, not refused.
    let w: WireError =
        serde_json::from_str(r#"{"kind":"quota","message":"over quota"}"#)
            .unwrap();
    assert_eq!(w.kind, ErrorKind::Unknown);
    assert_eq!(w.message, "over quota");
}

#[test]
fn stats_survive_the_wire() {
    use std::time::Duration;
    // Every field set, each to a different value, so that a field
    // dropped or crossed on the wire fails the comparison.
    let s = zinstall_engine::Stats {
        files: 1,
        dirs: 2,
        symlinks: 3,
        hardlinks: 4,
        redirects: 5,
        specials: 6,
        skipped: 7,
        unchanged: 8,
        bytes: 9,
        reflinked: 10,
        kernel_copied: 11,
        buffered: 12,
        elapsed: Duration::from_millis(13),
        walker_blocked: Duration::from_millis(14),
        fd_limit: 27,
        fd_budget: 28,
        fd_peak: 29,
        workers: vec![
            zinstall_engine::WorkerStats {
                jobs: 15,
                batches: 16,
                bytes: 17,
                busy: Duration::from_millis(18),
            },
            zinstall_engine::WorkerStats::default(),
        ],
        walkers: vec![zinstall_engine::WalkerStats {
            dirs: 19,
            entries: 20,
            batches: 21,
            steals: 22,
            busy: Duration::from_millis(23),
            blocked: Duration::from_millis(24),
            fd_wait: Duration::from_millis(30),
            idle: Duration::from_millis(25),
            cpu: Duration::from_millis(26),
        }],
    };
    // Through the text, as a client reads it.
    let line = serde_json::to_string(&s).unwrap();
    let back: zinstall_engine::Stats = serde_json::from_str(&line).unwrap();
    assert_eq!(back, s);
    // The names scripts read.
    for field in [
        r#""linked":5"#,
        r#""ms":13"#,
        r#""walker_blocked_ms":14"#,
        r#""workers":[{"jobs":15,"batches":16,"bytes":17,"busy_ms":18}"#,
        r#""cpu_ms":26"#,
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
    // Missing fields are zero; a wrong type is refused, not zero.
    let some: zinstall_engine::Stats =
        serde_json::from_str(r#"{"files":3}"#).unwrap();
    assert_eq!(some.files, 3);
    assert_eq!(some.dirs, 0);
    let e =
        serde_json::from_str::<zinstall_engine::Stats>(r#"{"files":"three"}"#)
            .unwrap_err();
    assert!(e.to_string().contains("invalid type"), "{e}");
}

/// The typed replies read back what the daemon sends; a field the
/// other side lacks or renamed is an error naming it, never a zero or
/// an empty string.
#[test]
fn typed_replies_round_trip_and_a_missing_field_is_an_error() {
    let job = JobInfo {
        job: 7,
        op: "copy".into(),
        what: "/srv/a".into(),
        uid: 1000,
        pid: 4242,
        state: "running".into(),
        phase: "copy".into(),
        entries: 10,
        bytes: 20,
        started: 1_700_000_000,
        elapsed_ms: 30,
        detached: false,
        process: Some(99),
        result: None,
        error: None,
    };
    let line = serde_json::to_string(&vec![job.clone()]).unwrap();
    let back: Vec<JobInfo> = serde_json::from_str(&line).unwrap();
    assert_eq!(back, vec![job.clone()]);
    let mut v = serde_json::to_value(&job).unwrap();
    // Optional fields are left out when empty, as before.
    assert!(v.get("result").is_none() && v.get("error").is_none());
    let state = v.as_object_mut().unwrap().remove("state").unwrap();
    v["status"] = state;
    let e = serde_json::from_value::<JobInfo>(v).unwrap_err();
    assert!(e.to_string().contains("missing field `state`"), "{e}");

    let copy = CopyReply {
        src: "/a".into(),
        dst: "/b".into(),
        stats: zinstall_engine::Stats {
            files: 3,
            ..Default::default()
        },
        notices: vec![NoticeInfo {
            kind: "xattr".into(),
            notice: "1 xattr not kept".into(),
            count: 1,
            example: "/a/x".into(),
        }],
    };
    let v = serde_json::to_value(&copy).unwrap();
    assert_eq!(v["stats"]["files"], 3);
    assert_eq!(v["notices"][0]["notice"], "1 xattr not kept");
    let back: CopyReply = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(back, copy);
    let mut v = v;
    v.as_object_mut().unwrap().remove("notices");
    let e = serde_json::from_value::<CopyReply>(v).unwrap_err();
    assert!(e.to_string().contains("missing field `notices`"), "{e}");

    let rb = ZonepathReply {
        zonepath: "/zones/z".into(),
        recovered: Some("root.new".into()),
        message: Some("the installed root is in place".into()),
    };
    let back: ZonepathReply =
        serde_json::from_value(serde_json::to_value(&rb).unwrap()).unwrap();
    assert_eq!(back, rb);
}

/// A job's result is on the wire the reply it holds, untagged, and is
/// read back by the operation that made it: a `done` line by the call,
/// a job's `result` by its `op`.
#[test]
fn job_results_are_read_back_by_the_operation_that_made_them() {
    let copy = CopyReply {
        src: "/a".into(),
        dst: "/b".into(),
        stats: zinstall_engine::Stats {
            files: 3,
            ..Default::default()
        },
        notices: vec![],
    };
    let zonepath = ZonepathReply {
        zonepath: "/zones/z".into(),
        recovered: None,
        message: None,
    };
    assert_eq!(
        serde_json::to_string(&JobResult::Copy(copy.clone())).unwrap(),
        serde_json::to_string(&copy).unwrap(),
        "no tag of its own"
    );
    let line = Reply::Done::<Answer, JobResult> {
        v: VERSION,
        job: 3,
        result: JobResult::Copy(copy.clone()),
    }
    .to_line();
    assert!(
        line.contains(r#""result":{"src":"/a","dst":"/b","#),
        "{line}"
    );

    /// A result read from one line, as the client reads a reply's.
    struct Line<'a>(&'a str);
    impl ReadResult for Line<'_> {
        type Error = serde_json::Error;
        fn read<T: serde::de::DeserializeOwned>(
            &mut self,
        ) -> Result<T, serde_json::Error> {
            serde_json::from_str(self.0)
        }
    }
    let text = serde_json::to_string(&copy).unwrap();
    let copy_call = Call::Copy(CopyArgs {
        src: CleanPath::new("/a").unwrap(),
        dst: CleanPath::new("/b").unwrap(),
        merge: false,
        sync: false,
        exclude: vec![],
        skip_special: false,
    });
    let read = Outcome::read(&copy_call, &mut Line(&text)).unwrap();
    assert_eq!(read, Outcome::Job(Box::new(JobResult::Copy(copy.clone()))));
    // The same text is no install's: the field it lacks is named.
    let install = Call::Install(InstallArgs {
        zonepath: CleanPath::new("/zones/z").unwrap(),
        zone: None,
        profile: None,
        images: vec![],
        source_root: None,
        log: None,
        platform: None,
        format: Default::default(),
    });
    let e = Outcome::read(&install, &mut Line(&text)).unwrap_err();
    assert!(e.to_string().contains("missing field `zonepath`"), "{e}");

    // A job's result by its `op`, for look-alikes too: an uninstall's
    // and a rollback's replies are the same type.
    let mut job = JobInfo {
        job: 7,
        op: String::new(),
        what: "/srv/a".into(),
        uid: 0,
        pid: 1,
        state: "done".into(),
        phase: "copy".into(),
        entries: 1,
        bytes: 2,
        started: 3,
        elapsed_ms: 4,
        detached: false,
        process: None,
        result: None,
        error: None,
    };
    for (op, result) in [
        ("copy", JobResult::Copy(copy.clone())),
        ("uninstall", JobResult::Uninstall(zonepath.clone())),
        ("rollback", JobResult::Rollback(zonepath.clone())),
    ] {
        job.op = op.into();
        job.result = Some(result);
        let line = serde_json::to_string(&job).unwrap();
        let back: JobInfo = serde_json::from_str(&line).unwrap();
        assert_eq!(back, job, "{line}");
    }
    // Each job's op name is one its result is read by.
    for op in Call::NAMES {
        job.op = (*op).into();
        job.result = None;
        let line = serde_json::to_string(&job).unwrap();
        let back = serde_json::from_str::<JobInfo>(&line);
        let is_job = !matches!(
            *op,
            "version" | "cache-list" | "jobs" | "status" | "cancel"
        );
        assert_eq!(back.is_ok(), is_job, "{op}: {back:?}");
    }
    // A result of another operation's shape is refused, naming what is
    // missing.
    job.op = "install".into();
    job.result = Some(JobResult::Copy(copy));
    let line = serde_json::to_string(&job).unwrap();
    let e = serde_json::from_str::<JobInfo>(&line).unwrap_err();
    assert!(e.to_string().contains("missing field `zonepath`"), "{e}");
}

#[test]
fn a_path_is_made_clean_once_as_the_request_is_read() {
    let parse = |args: &str| {
        Request::parse(
            format!(r#"{{"v":1,"op":"copy","args":{args}}}"#).as_bytes(),
        )
    };
    let r = parse(r#"{"src":"/a//b/","dst":"/c"}"#).unwrap();
    let Call::Copy(a) = r.call else {
        panic!("{r:?}")
    };
    assert_eq!(a.src.as_path(), std::path::Path::new("/a/b"));
    for (src, shown) in [
        ("a/b", "a/b"),
        ("/a/../etc", "/a/../etc"),
        ("/a/./b", "/a/./b"),
        ("/a/b/..", "/a/b/.."),
        ("", ""),
    ] {
        let e = parse(&format!(r#"{{"src":"{src}","dst":"/c"}}"#)).unwrap_err();
        let said = e.to_string();
        assert!(
            matches!(e, BadRequest::Args { .. })
                && said.contains(&format!("{shown}: paths must be absolute")),
            "{src}: {said}"
        );
    }
    // An image is a clean file path or a registry reference; a grant is
    // checked on the first only.
    let install = |images: &str| {
        Request::parse(
            format!(r#"{{"v":1,"op":"install","args":{{"zonepath":"/z","images":{images}}}}}"#)
                .as_bytes(),
        )
    };
    let r = install(r#"["/srv/i.tar","docker.io/library/alpine:3"]"#).unwrap();
    let Call::Install(a) = &r.call else {
        panic!("{r:?}")
    };
    assert_eq!(
        a.images,
        [
            ImageArg::File(CleanPath::new("/srv/i.tar").unwrap()),
            ImageArg::Reference("docker.io/library/alpine:3".into()),
        ]
    );
    let paths: Vec<_> =
        r.call.paths().iter().map(|p| p.to_path_buf()).collect();
    assert_eq!(paths, [std::path::PathBuf::from("/z"), "/srv/i.tar".into()]);
    let e = install(r#"["images/i.tar"]"#).unwrap_err();
    assert!(e.to_string().contains("paths must be absolute"), "{e}");
    // A long unclean path is quoted cut.
    let long = format!("/{}/../x", "a".repeat(5000));
    let e = parse(&format!(r#"{{"src":"{long}","dst":"/c"}}"#)).unwrap_err();
    assert!(e.to_string().len() < 1200, "{}", e.to_string().len());
}
