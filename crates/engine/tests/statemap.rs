//! Statemaps from a real copy: the recorder's JSON, the parser, the
//! summary and the SVG.

use std::collections::HashMap;
use std::fs;

use zinstall_engine::{Plan, Tunables};
use zinstall_statemap::{
    self as statemap, ParseProblem, RenderOptions, Summary,
};

fn record_copy(
    threads: usize,
    walkers: usize,
) -> (Vec<u8>, zinstall_engine::Report) {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    for i in 0..400 {
        let p = src.join(format!("d{}/f{i}", i % 9));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, vec![i as u8; 1000 + i * 37]).unwrap();
    }
    let report = Plan::new(&src, d.path().join("dst"))
        .tunables(Tunables {
            copy_threads: threads,
            copy_walkers: walkers,
            copy_batch: 16,
            ..Tunables::default()
        })
        .record_states(true)
        .run()
        .unwrap();
    let rec = report.recording.as_ref().unwrap();
    let mut json = Vec::new();
    statemap::write_json(rec, "test copy", Some("host1"), "Thread", &mut json)
        .unwrap();
    (json, report)
}

#[test]
fn recorder_json_is_a_valid_statemap_of_every_thread() {
    let (json, report) = record_copy(3, 2);
    let text = String::from_utf8(json.clone()).unwrap();
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["title"], "test copy");
    assert_eq!(first["host"], "host1");
    assert!(first["start"].as_array().unwrap().len() == 2);
    let map = statemap::parse(&json[..]).unwrap();
    let names: Vec<&str> =
        map.meta.states.iter().map(|s| s.name.as_str()).collect();
    let engine: Vec<&str> = zinstall_engine::ThreadState::ALL
        .iter()
        .map(|s| s.name())
        .collect();
    assert_eq!(names, engine, "states as declared, in value order");
    assert_eq!(
        map.entities(),
        ["walker-0", "walker-1", "worker-0", "worker-1", "worker-2"],
        "every thread present, walkers first"
    );
    // Times are monotonic per entity (the parser also refuses otherwise).
    let mut last: HashMap<&str, u64> = HashMap::new();
    for d in &map.data {
        let prev = last.insert(&d.entity, d.time).unwrap_or(0);
        assert!(d.time >= prev);
        // Every datum is a string time on its own line.
    }
    for line in text.lines().skip(1) {
        assert!(line.starts_with("{\"time\":\""), "{line}");
    }
    // Workers spent time writing; the walkers walked.
    let s = Summary::of(&map);
    let idx = |n: &str| names.iter().position(|x| *x == n).unwrap();
    let walked: u64 = s.entities[..2]
        .iter()
        .map(|e| e.time_in[idx("walking")])
        .sum();
    assert!(walked > 0);
    let written: u64 = s.entities[2..]
        .iter()
        .map(|e| e.time_in[idx("writing")])
        .sum();
    assert!(written > 0);
    for e in s.entities.iter().chain([&s.all]) {
        let total: f64 = (0..names.len()).map(|i| e.share(i)).sum();
        assert!((total - 1.0).abs() < 1e-9, "{}: {total}", e.name);
    }
    assert!(s.utilization > 0.0 && s.utilization <= 1.0);
    assert_eq!(report.stats.workers.len(), 3);
    assert_eq!(report.stats.walkers.len(), 2);
}

/// Each walker is one entity of the recorder's statemap, named by its
/// number, whatever it found to do; and one line of the run's stats.
#[test]
fn the_statemap_has_one_entity_per_walker() {
    for walkers in [1, 2, 4, 16] {
        let (json, report) = record_copy(2, walkers);
        let map = statemap::parse(&json[..]).unwrap();
        let got: Vec<String> = map
            .entities()
            .into_iter()
            .filter(|e| e.starts_with("walker-"))
            .collect();
        let want: Vec<String> =
            (0..walkers).map(|i| format!("walker-{i}")).collect();
        assert_eq!(got, want, "{walkers} walkers");
        assert_eq!(report.stats.walkers.len(), walkers);
        let dirs: u64 = report.stats.walkers.iter().map(|w| w.dirs).sum();
        assert_eq!(dirs, report.stats.dirs, "every directory read once");
    }
}

#[test]
fn summary_matches_hand_computed_shares() {
    let text = r##"{"start":[1,0],"title":"t","states":{"idle":{"value":0},"busy":{"value":1,"color":"#ff0000"}}}
{"time":"0","entity":"worker-1","state":1}
{"time":"0","entity":"worker-0","state":0}
{"time":"250","entity":"worker-0","state":1}
{"time":"750","entity":"worker-1","state":0}
{"time":"1000","entity":"worker-0","state":0}
"##;
    let map = statemap::parse(text.as_bytes()).unwrap();
    let s = Summary::of(&map);
    assert_eq!(s.entities[0].name, "worker-0");
    assert_eq!(s.entities[0].time_in, vec![250, 750]);
    assert_eq!(s.entities[1].time_in, vec![250, 750]);
    assert_eq!(s.all.time_in, vec![500, 1500]);
    assert!((s.utilization - 0.75).abs() < 1e-12);
    let table = s.to_string();
    assert!(table.contains("75.0%"), "{table}");
    assert!(table.contains("pool utilization: 75.0%"), "{table}");
}

#[test]
fn parser_errors_name_the_line() {
    let meta = r#"{"start":[1,0],"title":"t","states":{"a":{"value":0},"b":{"value":1}}}"#;
    let cases = [
        (
            format!(
                "{meta}\n{{\"time\":\"1\",\"entity\":\"x\",\"state\":0}}\n\n\nnot json\n"
            ),
            5,
        ),
        (
            format!(
                "{meta}\n{{\"time\":\"5\",\"entity\":\"x\",\"state\":0}}\n{{\"time\":\"4\",\"entity\":\"x\",\"state\":1}}\n"
            ),
            3,
        ),
        (
            format!(
                "{meta}\n\n{{\"time\":\"5\",\"entity\":\"x\",\"state\":7}}\n"
            ),
            3,
        ),
        (format!("{meta}\n{{\"what\":1}}\n"), 2),
        ("{\"title\":\"no start\",\"states\":{}}\n".to_string(), 1),
    ];
    for (text, line) in cases {
        let e = statemap::parse(text.as_bytes()).unwrap_err();
        assert_eq!(e.line, line, "{e} in:\n{text}");
        assert!(e.to_string().starts_with(&format!("line {line}: ")));
    }
    let e = statemap::parse(
        format!("{meta}\n{{\"time\":\"5\",\"entity\":\"x\",\"state\":7}}\n")
            .as_bytes(),
    )
    .unwrap_err();
    assert_eq!(e.problem, ParseProblem::UnknownState(7));
    assert_eq!(
        statemap::parse(&b"  \n"[..]).unwrap_err().problem,
        ParseProblem::Empty
    );
}

/// Each entity's rectangles add up to its span times the scale.
#[test]
fn svg_rectangles_add_up_to_each_entity_time() {
    let (json, _) = record_copy(8, 1);
    let map = statemap::parse(&json[..]).unwrap();
    let opts = RenderOptions::default();
    let mut svg = Vec::new();
    statemap::render_svg(&map, &opts, &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let summary = Summary::of(&map);
    let t_min = map.data.iter().map(|d| d.time).min().unwrap();
    let scale =
        (opts.width - opts.label_width - 20.0) / (map.end() - t_min) as f64;
    let groups: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("entity"))
        .collect();
    assert_eq!(groups.len(), 9, "a walker and 8 workers");
    for g in groups {
        let name = g.attribute("data-entity").unwrap();
        let width: f64 = g
            .children()
            .filter(|n| n.has_tag_name("rect"))
            .map(|r| r.attribute("width").unwrap().parse::<f64>().unwrap())
            .sum();
        let e = summary.entities.iter().find(|e| e.name == name).unwrap();
        let want = e.span as f64 * scale;
        assert!(
            (width - want).abs() <= want * 0.001 + 0.01,
            "{name}: rects {width} px, span {want} px"
        );
    }
    let text: String = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(text.contains("test copy on host1"));
    for st in zinstall_engine::ThreadState::ALL {
        assert!(text.contains(st.name()), "legend lacks {}", st.name());
    }
}

/// Times at the edge of u64: past the limit is an error naming the line;
/// up to it, summing and drawing saturate instead of wrapping.
#[test]
fn extreme_times_are_refused_or_summed_without_overflow() {
    let meta = r#"{"start":[18446744073709551615,18446744073709551615],"title":"t","states":{"busy":{"value":0},"idle":{"value":1}}}"#;
    for (bad, line) in [
        ("\"18446744073709551615\"", 3),
        ("18446744073709551615", 3),
        ("\"9223372036854775808\"", 3),
        ("\"99999999999999999999999\"", 3),
    ] {
        let text = format!(
            "{meta}\n{{\"time\":\"0\",\"entity\":\"a\",\"state\":0}}\n\
             {{\"time\":{bad},\"entity\":\"a\",\"state\":1}}\n"
        );
        let e = statemap::parse(text.as_bytes()).unwrap_err();
        assert_eq!(e.line, line, "{bad}: {e}");
        assert!(e.to_string().starts_with("line 3: "), "{e}");
    }
    // Three entities each spanning the whole of the largest time: their
    // total passes u64::MAX.
    let max = statemap::MAX_TIME;
    let mut text = format!("{meta}\n");
    for name in ["walker", "worker-1", "worker-99999999999999999999999999"] {
        text.push_str(&format!(
            "{{\"time\":\"0\",\"entity\":\"{name}\",\"state\":0}}\n\
             {{\"time\":\"{max}\",\"entity\":\"{name}\",\"state\":1}}\n\
             {{\"time\":\"{max}\",\"event\":\"end\",\"entity\":\"{name}\"}}\n"
        ));
    }
    let map = statemap::parse(text.as_bytes()).unwrap();
    let summary = Summary::of(&map);
    assert_eq!(summary.all.span, u64::MAX);
    assert_eq!(summary.entities.len(), 3);
    assert_eq!(summary.entities[0].span, max);
    assert!((summary.utilization - 1.0).abs() < 1e-9, "{summary}");
    let mut svg = Vec::new();
    statemap::render_svg(&map, &RenderOptions::default(), &mut svg).unwrap();
    roxmltree::Document::parse(std::str::from_utf8(&svg).unwrap()).unwrap();
    // Built by hand, past what a file may hold: still no overflow.
    let mut map = map;
    for d in &mut map.data {
        d.time = d.time.saturating_mul(2).saturating_add(1);
    }
    let _ = Summary::of(&map).to_string();
    let mut svg = Vec::new();
    statemap::render_svg(&map, &RenderOptions::default(), &mut svg).unwrap();
    map.data.iter_mut().for_each(|d| d.time = u64::MAX);
    map.events.clear();
    let _ = Summary::of(&map).to_string();
    statemap::render_svg(&map, &RenderOptions::default(), &mut svg).unwrap();
}

/// Every rectangle says on hover what it stands for, and the time axis
/// counts in one unit, not in nanoseconds.
#[test]
fn svg_has_hover_titles_and_a_time_axis_in_one_unit() {
    let text = r##"{"start":[1,0],"title":"t","states":{"idle":{"value":0},"busy":{"value":1}}}
{"time":"0","entity":"worker-0","state":1}
{"time":"1500000","entity":"worker-0","state":0}
{"time":"2000000","entity":"worker-1","state":1}
{"time":"45000000","entity":"worker-0","state":1}
{"time":"60000000","entity":"worker-1","state":0}
"##;
    let map = statemap::parse(text.as_bytes()).unwrap();
    let mut svg = Vec::new();
    statemap::render_svg(&map, &RenderOptions::default(), &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let rects: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("entity"))
        .flat_map(|g| g.children().filter(|n| n.has_tag_name("rect")))
        .collect();
    assert!(!rects.is_empty());
    for r in &rects {
        let title = r
            .children()
            .find(|n| n.has_tag_name("title"))
            .and_then(|t| t.text())
            .unwrap_or_else(|| panic!("a rect without a title"));
        assert!(title.starts_with("worker-"), "{title}");
    }
    let titles: Vec<&str> = rects
        .iter()
        .filter_map(|r| r.children().find(|n| n.has_tag_name("title")))
        .filter_map(|t| t.text())
        .collect();
    assert!(
        titles.contains(&"worker-0: busy at 0 ms, 1.5 ms"),
        "{titles:?}"
    );
    assert!(
        titles.contains(&"worker-0: idle at 1.5 ms, 43.5 ms"),
        "{titles:?}"
    );
    let axis = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("axis"))
        .unwrap();
    let ticks: Vec<&str> = axis
        .descendants()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    assert!(ticks.len() >= 4, "{ticks:?}");
    assert!(ticks.iter().all(|t| t.ends_with(" ms")), "{ticks:?}");
    assert_eq!(ticks[0], "0 ms");
    // Zooming is a script the drawing carries.
    assert!(doc.descendants().any(|n| n.has_tag_name("script")));
}

/// Colours: distinct within the recorder's states and within the
/// scheduler scripts' states; a state meaning the same in both has the
/// same colour; a file that names no colour gets zinstall's.
#[test]
fn state_colours_are_distinct_and_shared() {
    use zinstall_engine::trace::{SCHED_STATES, known_color};
    let rec: Vec<&str> = zinstall_engine::ThreadState::ALL
        .iter()
        .map(|s| s.color())
        .collect();
    let sched: Vec<&str> = SCHED_STATES.iter().map(|(_, c)| *c).collect();
    for set in [&rec, &sched] {
        let mut u = set.to_vec();
        u.sort();
        u.dedup();
        assert_eq!(u.len(), set.len(), "{set:?}");
    }
    for (recorded, scheduled) in [
        ("waiting", "off-cpu-waiting"),
        ("queue-blocked", "off-cpu-blocked"),
        ("reading", "off-cpu-io-read"),
        ("writing", "off-cpu-io-write"),
    ] {
        assert_eq!(known_color(recorded), known_color(scheduled));
    }
    let map = statemap::parse(
        &br#"{"start":[1,0],"title":"t","states":{"on-cpu":{"value":0},"x":{"value":1}}}"#[..],
    )
    .unwrap();
    assert_eq!(map.meta.states[0].color, SCHED_STATES[0].1);
}
