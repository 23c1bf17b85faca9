//! A tracer's raw output → a statemap file.
//!
//! `dtrace/statemap.bt` writes what bpftrace can: one JSON object per
//! line, each CPU's lines in turn (so out of time order), bpftrace's own
//! messages (`Lost 12 events`) mixed in, thread ids for entities and the
//! threads' names in `name` events. [`tidy`] makes a statemap of it: the
//! metadata first, every other object sorted by time (stably, so lines
//! one probe wrote in order stay in order), anything that is not a JSON
//! object moved out into the diagnostics, and each thread id replaced by
//! the thread's latest name (`NAME/TID` where threads share a name),
//! with the id kept as the entity's description.

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::{Map, Value};

/// What [`tidy`] found besides the data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TidyReport {
    /// Lines that were not statemap objects, as found (`Lost 12 events`).
    pub diagnostics: Vec<String>,
    /// Events bpftrace said it lost (the sum over `Lost N events`).
    pub lost: u64,
    /// State changes written.
    pub data: usize,
    /// Entities renamed from a thread id to a name: `(id, name)`.
    pub renamed: Vec<(String, String)>,
    /// State changes dropped because a later one of the same entity had
    /// the same time.
    pub collapsed: usize,
}

/// Reads raw tracer output and writes a statemap to `out`. Fails only if
/// writing fails or no metadata object is found.
pub fn tidy(raw: &[u8], mut out: impl Write) -> io::Result<TidyReport> {
    let mut report = TidyReport::default();
    let Lines {
        meta,
        mut timed,
        untimed,
        names,
    } = Lines::sort(raw, &mut report);
    let Some(meta) = meta else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no statemap metadata in the tracer's output",
        ));
    };
    timed.sort_by_key(|(t, n, _)| (*t, *n));
    let before = timed.len();
    let timed = one_state_a_time(timed);
    report.collapsed = before - timed.len();
    let rename = rename(&names, &mut report);
    let renamed = |v: &mut Value| {
        if let Value::String(s) = v
            && let Some(n) = rename.get(s.as_str())
        {
            *s = n.clone();
        }
    };
    serde_json::to_writer(&mut out, &meta)?;
    out.write_all(b"\n")?;
    for (id, name) in &report.renamed {
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({"entity": name, "description": format!("thread {id}")}),
        )?;
        out.write_all(b"\n")?;
    }
    for mut obj in untimed.into_iter().chain(timed.into_iter().map(|t| t.2)) {
        if obj.contains_key("state") {
            report.data += 1;
        }
        for key in ["entity", "target"] {
            if let Some(v) = obj.get_mut(key) {
                renamed(v);
            }
        }
        serde_json::to_writer(&mut out, &Value::Object(obj))?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(report)
}

/// The tracer's lines, sorted out.
struct Lines {
    meta: Option<Map<String, Value>>,
    /// (time, line order, object)
    timed: Vec<(u64, usize, Map<String, Value>)>,
    untimed: Vec<Map<String, Value>>,
    /// tid → (time, name) of its latest name event.
    names: HashMap<String, (u64, String)>,
}

impl Lines {
    /// Sorts `raw`'s lines: the metadata, objects with a time and
    /// without, thread names; what is not a statemap object is a
    /// diagnostic in `report`.
    fn sort(raw: &[u8], report: &mut TidyReport) -> Lines {
        let mut meta = None;
        let mut timed = Vec::new();
        let mut untimed = Vec::new();
        let mut names: HashMap<String, (u64, String)> = HashMap::new();
        let mut pending = String::new();
        for (n, line) in raw.split(|&b| b == b'\n').enumerate() {
            let line = String::from_utf8_lossy(line);
            let line = line.trim();
            if line.is_empty() && pending.is_empty() {
                continue;
            }
            let joined;
            let text = if pending.is_empty() {
                line
            } else {
                pending.push('\n');
                pending.push_str(line);
                joined = std::mem::take(&mut pending);
                joined.as_str()
            };
            let obj = match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(o)) => o,
                Err(e)
                    if e.classify() == serde_json::error::Category::Eof
                        && text.starts_with('{')
                        && text.len() < 1 << 16 =>
                {
                    pending = text.to_string();
                    continue;
                }
                _ => {
                    for l in text.lines() {
                        if let Some(k) = lost_count(l.trim()) {
                            report.lost = report.lost.saturating_add(k);
                        }
                        report.diagnostics.push(l.trim().to_string());
                    }
                    continue;
                }
            };
            if meta.is_none() {
                if obj.contains_key("states") {
                    meta = Some(obj);
                } else {
                    report.diagnostics.push(text.to_string());
                }
                continue;
            }
            let Some(time) = obj.get("time").and_then(time_of) else {
                untimed.push(obj);
                continue;
            };
            if obj.get("event").and_then(Value::as_str) == Some("name")
                && let (Some(Value::String(tid)), Some(Value::String(name))) =
                    (obj.get("entity"), obj.get("target"))
            {
                let e =
                    names.entry(tid.clone()).or_insert((time, name.clone()));
                if time >= e.0 {
                    *e = (time, name.clone());
                }
                continue;
            }
            timed.push((time, n, obj));
        }
        if !pending.is_empty() {
            report
                .diagnostics
                .extend(pending.lines().map(str::to_string));
        }
        Lines {
            meta,
            timed,
            untimed,
            names,
        }
    }
}

/// One state per entity per nanosecond: where a tracer wrote two
/// (probes on two CPUs at one clock reading), the later line wins, as it
/// would have an instant later. Renderers refuse two at one time
/// (oxidecomputer/statemap panics on it). `timed` is in time order.
fn one_state_a_time(
    timed: Vec<(u64, usize, Map<String, Value>)>,
) -> Vec<(u64, usize, Map<String, Value>)> {
    let mut last_state: HashMap<(String, u64), usize> = HashMap::new();
    for (i, (time, _, obj)) in timed.iter().enumerate() {
        if obj.contains_key("state")
            && let Some(Value::String(entity)) = obj.get("entity")
        {
            last_state.insert((entity.clone(), *time), i);
        }
    }
    timed
        .into_iter()
        .enumerate()
        .filter(|(i, (time, _, obj))| {
            !obj.contains_key("state")
                || match obj.get("entity") {
                    Some(Value::String(entity)) => {
                        last_state.get(&(entity.clone(), *time)) == Some(i)
                    }
                    _ => true,
                }
        })
        .map(|(_, t)| t)
        .collect()
}

/// Names: a name shared by several ids becomes NAME/ID for each. Each
/// renaming is listed in `report`; the map is id → new name.
fn rename(
    names: &HashMap<String, (u64, String)>,
    report: &mut TidyReport,
) -> HashMap<String, String> {
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for (_, name) in names.values() {
        *uses.entry(name.as_str()).or_default() += 1;
    }
    let mut rename: HashMap<String, String> = HashMap::new();
    let mut ids: Vec<&String> = names.keys().collect();
    ids.sort_by_key(|id| id.parse::<u64>().unwrap_or(u64::MAX));
    for id in ids {
        let name = &names[id].1;
        let new = if uses[name.as_str()] > 1 || name.is_empty() {
            format!("{name}/{id}")
        } else {
            name.clone()
        };
        report.renamed.push((id.clone(), new.clone()));
        rename.insert(id.clone(), new);
    }
    rename
}

/// A time as statemaps write it: a decimal string, or a number.
fn time_of(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// `N` from bpftrace's `Lost N events`.
fn lost_count(line: &str) -> Option<u64> {
    line.strip_prefix("Lost ")?
        .strip_suffix(" events")?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sorts_renames_and_moves_messages_out() {
        let raw = br##"{"start":[5,0],"title":"t","states":{"a":{"value":0},"b":{"value":1}}}
{"time":"30","entity":"11","state":1}
Lost 7 events
{"time":"10","entity":"11","state":0}
{"time":"12","entity":"12","state":0}
{"time":"12","entity":"12","state":1}
{"time":"5","entity":"11","event":"name","target":"zinstall"}
{"time":"40","entity":"11","event":"name","target":"copy-0"}
{"time":"40","entity":"12","event":"name","target":"copy-0"}
{"time":"20","entity":"12","event":"wakeup","target":"11"}
{"time":"2
Lost 3 events


"##;
        let mut out = Vec::new();
        let r = tidy(raw, &mut out).unwrap();
        assert_eq!(r.lost, 10);
        assert_eq!(r.diagnostics.len(), 3, "{:?}", r.diagnostics);
        assert_eq!(r.data, 3);
        assert_eq!(r.collapsed, 1);
        let text = String::from_utf8(out).unwrap();
        let map = crate::parse(text.as_bytes()).unwrap();
        assert_eq!(map.entities(), ["copy-0/11", "copy-0/12"]);
        let times: Vec<u64> = map.data.iter().map(|d| d.time).collect();
        assert_eq!(times, [10, 12, 30]);
        // Two states of one entity at one time: the later line wins.
        assert_eq!(map.data[1].state, 1);
        assert_eq!(map.events[0].target.as_deref(), Some("copy-0/11"));
        assert_eq!(map.descriptions["copy-0/12"], "thread 12");
        assert!(!text.contains("\"name\""), "{text}");
        assert!(tidy(b"Lost 1 events\n", Vec::new()).is_err());
        // DTrace's metadata spans lines; a broken object is a message.
        let raw = b"{\n\t\"start\": [ 1, 2 ],\n\t\"title\": \"t\",\n\t\"states\": {\n\t\t\"a\": {\"value\": 0 }\n\t}\n}\n{ \"time\": \"3\", \"entity\": \"1\", \"state\": 0 }\n{ \"time\": \"4\",\n";
        let mut out = Vec::new();
        let r = tidy(raw, &mut out).unwrap();
        assert_eq!(r.data, 1);
        assert_eq!(r.diagnostics, ["{ \"time\": \"4\","]);
        let map = crate::parse(&out[..]).unwrap();
        assert_eq!(map.meta.start, (1, 2));
    }
}
