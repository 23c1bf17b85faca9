//! Recording → statemap JSON.

use std::io::{self, Write};
use std::time::UNIX_EPOCH;

use serde_json::json;

use crate::Recording;

/// Writes `rec` as a statemap: the metadata object, then every transition
/// of every entity in global time order, one per line.
pub fn write_json(
    rec: &Recording,
    title: &str,
    host: Option<&str>,
    entity_kind: &str,
    mut out: impl Write,
) -> io::Result<()> {
    let start = rec.start.duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut states = serde_json::Map::new();
    for (i, s) in rec.states.iter().enumerate() {
        states.insert(s.name.clone(), json!({"value": i, "color": s.color}));
    }
    let mut meta = json!({
        "start": [start.as_secs(), start.subsec_nanos()],
        "title": title,
        "entityKind": entity_kind,
        "states": states,
    });
    if let Some(h) = host {
        meta["host"] = json!(h);
    }
    serde_json::to_writer(&mut out, &meta)?;
    out.write_all(b"\n")?;
    // Merge the per-entity streams by time; each is already in order.
    let mut cursors = vec![0usize; rec.entities.len()];
    loop {
        let mut best: Option<(u64, usize)> = None;
        for (e, ent) in rec.entities.iter().enumerate() {
            if let Some(t) = ent.transitions.get(cursors[e])
                && best.is_none_or(|(bt, _)| t.time_ns < bt)
            {
                best = Some((t.time_ns, e));
            }
        }
        let Some((_, e)) = best else { break };
        let ent = &rec.entities[e];
        let t = ent.transitions[cursors[e]];
        cursors[e] += 1;
        // One state per entity per nanosecond, the later one: renderers
        // refuse (or crash on) two at one time.
        if ent
            .transitions
            .get(cursors[e])
            .is_some_and(|next| next.time_ns == t.time_ns)
        {
            continue;
        }
        writeln!(
            out,
            "{{\"time\":\"{}\",\"entity\":{},\"state\":{}}}",
            t.time_ns,
            serde_json::to_string(&ent.name)?,
            t.state
        )?;
    }
    out.flush()
}
