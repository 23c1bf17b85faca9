//! Statemaps: writing, reading, summarizing and drawing them.
//!
//! A statemap shows, for each entity (here: each thread), which state it
//! was in at every moment. The input format is the one the
//! `oxidecomputer/statemap` renderer reads: a stream of JSON objects, the
//! first being metadata, then one object per state change:
//!
//! ```text
//! {"start":[1763820000,0],"title":"zinstall copy","host":"h",
//!  "entityKind":"Thread","states":{"waiting":{"value":0,"color":"#e0e0e0"},...}}
//! {"time":"1200","entity":"worker-0","state":5}
//! ```
//!
//! `time` is a decimal string of nanoseconds since `start`; the reference
//! renderer rejects a bare number (this reader accepts both). Other
//! objects in the stream are descriptions (`{"entity","description"}`),
//! events (`{"time","entity","event","target"?}`) and tag definitions
//! (`{"state","tag",...}`); they are read and kept.
//!
//! [`write_json`] turns a [`Recording`] (what zinstall's own recorder
//! makes)
//! into this format, [`parse`] reads any such stream (ours, the DTrace and
//! bpftrace scripts', or another program's), [`Summary`] gives each
//! entity's share of time per state, [`render_svg`] draws it, and
//! [`tidy`] makes a statemap of a tracer's raw output. The states and
//! colours zinstall knows are [`ENGINE_STATES`], [`SCHED_STATES`] and
//! [`palette`].
//!
//! ```
//! let text = br#"{"start":[0,0],"title":"t","states":{"idle":{"value":0},"busy":{"value":1}}}
//! {"time":"0","entity":"worker-0","state":1}
//! {"time":"750","entity":"worker-0","state":0}
//! {"time":"1000","entity":"worker-0","state":1}
//! "#;
//! let map = zinstall_statemap::parse(&text[..])?;
//! let summary = zinstall_statemap::Summary::of(&map);
//! assert_eq!(summary.entities.len(), 1);
//! let mut svg = Vec::new();
//! zinstall_statemap::render_svg(&map, &Default::default(), &mut svg)?;
//! assert!(svg.starts_with(b"<svg") || svg.starts_with(b"<?xml"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod parse;
mod recording;
mod render;
mod summary;
mod tidy;
mod write;

pub use parse::{
    Datum, Event, MAX_TIME, Metadata, ParseError, ParseProblem, Statemap, parse,
};
pub use recording::{
    ENGINE_STATES, EntityTrace, Recording, SCHED_STATES, StateDef, Transition,
    known_color, palette,
};
pub use render::{RenderOptions, render_svg};
pub use summary::{EntitySummary, Summary};
pub use tidy::{TidyReport, tidy};
pub use write::write_json;
