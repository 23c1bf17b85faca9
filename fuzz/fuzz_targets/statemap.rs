//! Statemap streams: parse, then summarize and draw what parses.

#![no_main]

use zinstall_statemap::{self as statemap, RenderOptions, Summary};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(map) = statemap::parse(data) else {
        return;
    };
    let _ = map.entities();
    let summary = Summary::of(&map);
    let _ = summary.to_string();
    statemap::render_svg(&map, &RenderOptions::default(), std::io::sink())
        .expect("rendering to a sink");
});
