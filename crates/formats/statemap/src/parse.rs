//! Reading a statemap stream.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read};

use serde_json::{Map, Value};

use crate::StateDef;

/// The metadata object.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata {
    /// `[seconds, nanoseconds]` since the epoch of time zero.
    pub start: (u64, u64),
    /// The title.
    pub title: String,
    /// The host, if given.
    pub host: Option<String>,
    /// What an entity is (`entityKind`), default `Entity`.
    pub entity_kind: String,
    /// States, indexed by value.
    pub states: Vec<StateDef>,
}

/// One state change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datum {
    /// Nanoseconds since start.
    pub time: u64,
    /// The entity.
    pub entity: String,
    /// Index into [`Metadata::states`].
    pub state: u32,
}

/// An event (drawn by no renderer yet, but kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since start.
    pub time: u64,
    /// The entity it happened to.
    pub entity: String,
    /// Its name, e.g. `wakeup`.
    pub event: String,
    /// The other entity involved, if any.
    pub target: Option<String>,
}

/// A whole statemap.
#[derive(Clone, Debug, PartialEq)]
pub struct Statemap {
    /// The metadata.
    pub meta: Metadata,
    /// State changes, in stream order (per entity, in time order).
    pub data: Vec<Datum>,
    /// Events.
    pub events: Vec<Event>,
    /// Entity descriptions.
    pub descriptions: HashMap<String, String>,
    /// Tag definitions, as given.
    pub tags: Vec<Value>,
}

impl Statemap {
    /// The time of the last datum or event: where the map ends.
    pub fn end(&self) -> u64 {
        let d = self.data.iter().map(|d| d.time).max().unwrap_or(0);
        let e = self.events.iter().map(|e| e.time).max().unwrap_or(0);
        d.max(e)
    }

    /// Entity names in display order: `walker` first, then by name with
    /// numbers compared as numbers (`worker-2` before `worker-10`).
    pub fn entities(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for d in &self.data {
            if seen.insert(d.entity.as_str()) {
                names.push(d.entity.clone());
            }
        }
        names.sort_by_key(|a| natural_key(a));
        names
    }
}

/// Sort key: the walker first, then text and numbers in turn.
fn natural_key(s: &str) -> (bool, Vec<(String, u64)>) {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut num: Option<u64> = None;
    for c in s.chars() {
        if let Some(d) = c.to_digit(10) {
            // Names come from the file: a long run of digits saturates.
            num = Some(
                num.unwrap_or(0)
                    .saturating_mul(10)
                    .saturating_add(u64::from(d)),
            );
        } else {
            if let Some(n) = num.take() {
                parts.push((std::mem::take(&mut text), n));
            }
            text.push(c);
        }
    }
    parts.push((text, num.unwrap_or(0)));
    (s != "walker", parts)
}

/// The latest time a statemap may hold, in nanoseconds after its start:
/// DTrace's `hrtime_t` is signed 64-bit, so no tracer writes later ones,
/// and the headroom keeps sums of spans and axis ticks from wrapping.
pub const MAX_TIME: u64 = i64::MAX as u64;

/// What is wrong with a statemap stream.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseProblem {
    /// Not JSON.
    Json(String),
    /// The stream is empty.
    Empty,
    /// The first object is not valid metadata.
    BadMetadata(String),
    /// An object that is none of the known payloads.
    Unrecognized(String),
    /// A datum's state is not a declared state value.
    UnknownState(u64),
    /// A time past [`MAX_TIME`].
    TimeTooLarge(u64),
    /// A datum's time is earlier than the entity's previous one.
    TimeBackwards {
        /// The entity.
        entity: String,
        /// Its previous time.
        previous: u64,
        /// This time.
        time: u64,
    },
}

/// An error reading a statemap, with the line it was found on.
#[derive(Debug)]
pub struct ParseError {
    /// 1-based line of the offending object (0 when reading failed).
    pub line: usize,
    /// 1-based column of a JSON syntax error in that line; 0 for errors
    /// about a whole object.
    pub column: usize,
    /// What is wrong.
    pub problem: ParseProblem,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: ", self.line)?;
        match &self.problem {
            ParseProblem::Json(e) => write!(f, "not JSON: {e}"),
            ParseProblem::Empty => write!(f, "empty: no metadata object"),
            ParseProblem::BadMetadata(e) => write!(f, "bad metadata: {e}"),
            ParseProblem::Unrecognized(e) => {
                write!(f, "unrecognized object: {e}")
            }
            ParseProblem::TimeTooLarge(t) => write!(
                f,
                "time {t} is past {MAX_TIME} ns (292 years after the start)"
            ),
            ParseProblem::UnknownState(s) => {
                write!(f, "state {s} is not declared in the metadata")
            }
            ParseProblem::TimeBackwards {
                entity,
                previous,
                time,
            } => write!(
                f,
                "time {time} of {entity:?} is before its previous time \
                 {previous}"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// Reads a whole statemap stream.
pub fn parse(mut input: impl Read) -> Result<Statemap, ParseError> {
    let mut bytes = Vec::new();
    input.read_to_end(&mut bytes).map_err(|e| ParseError {
        line: 0,
        column: 0,
        problem: ParseProblem::Json(e.to_string()),
    })?;
    // Line numbers: each object's line is found from its start offset.
    let newlines: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i)
        .collect();
    let line_of = |offset: usize| newlines.partition_point(|&n| n < offset) + 1;
    let mut stream =
        serde_json::Deserializer::from_slice(&bytes).into_iter::<Value>();
    let mut meta: Option<Metadata> = None;
    let mut map = empty();
    let mut last: HashMap<String, u64> = HashMap::new();
    loop {
        let before = stream.byte_offset();
        let value = match stream.next() {
            None => break,
            Some(Ok(v)) => v,
            Some(Err(e)) => return Err(json_error(&e)),
        };
        // Skip the whitespace the deserializer consumed before the object.
        let start = before
            + bytes[before..]
                .iter()
                .take_while(|b| b.is_ascii_whitespace())
                .count();
        let line = line_of(start);
        let err = |problem| ParseError {
            line,
            column: 0,
            problem,
        };
        let Value::Object(obj) = value else {
            return Err(err(ParseProblem::Unrecognized(
                "not an object".into(),
            )));
        };
        let Some(m) = &meta else {
            meta = Some(metadata(&obj).map_err(err)?);
            continue;
        };
        add(&mut map, m, &mut last, obj).map_err(err)?;
    }
    map.meta = meta.ok_or(ParseError {
        line: 1,
        column: 0,
        problem: ParseProblem::Empty,
    })?;
    Ok(map)
}

/// A JSON syntax error at its line and column; the position is in the
/// fields, not repeated in the text.
fn json_error(e: &serde_json::Error) -> ParseError {
    let why = e.to_string();
    let why = why
        .rsplit_once(" at line ")
        .map_or(why.as_str(), |w| w.0)
        .to_string();
    ParseError {
        line: e.line(),
        column: e.column(),
        problem: ParseProblem::Json(why),
    }
}

/// A statemap with nothing in it yet, its metadata to come.
fn empty() -> Statemap {
    Statemap {
        meta: Metadata {
            start: (0, 0),
            title: String::new(),
            host: None,
            entity_kind: String::new(),
            states: Vec::new(),
        },
        data: Vec::new(),
        events: Vec::new(),
        descriptions: HashMap::new(),
        tags: Vec::new(),
    }
}

/// Adds one object after the metadata `m` to `map`: a datum (its time
/// after its entity's `last`), an event, a description or a tag.
fn add(
    map: &mut Statemap,
    m: &Metadata,
    last: &mut HashMap<String, u64>,
    obj: Map<String, Value>,
) -> Result<(), ParseProblem> {
    if obj.contains_key("state") && obj.contains_key("entity") {
        let entity = string(&obj, "entity")?;
        let time = time(&obj)?;
        let state =
            obj.get("state").and_then(Value::as_u64).ok_or_else(|| {
                ParseProblem::Unrecognized("state is not a number".into())
            })?;
        if state >= m.states.len() as u64 {
            return Err(ParseProblem::UnknownState(state));
        }
        if let Some(&prev) = last.get(&entity)
            && time < prev
        {
            return Err(ParseProblem::TimeBackwards {
                entity,
                previous: prev,
                time,
            });
        }
        last.insert(entity.clone(), time);
        map.data.push(Datum {
            time,
            entity,
            state: state as u32,
        });
    } else if obj.contains_key("event") {
        map.events.push(Event {
            time: time(&obj)?,
            entity: string(&obj, "entity")?,
            event: string(&obj, "event")?,
            target: obj.get("target").map(|t| match t {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
        });
    } else if obj.contains_key("description") {
        map.descriptions
            .insert(string(&obj, "entity")?, string(&obj, "description")?);
    } else if obj.contains_key("tag") {
        map.tags.push(Value::Object(obj));
    } else {
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        return Err(ParseProblem::Unrecognized(format!("keys {keys:?}")));
    }
    Ok(())
}

fn string(obj: &Map<String, Value>, key: &str) -> Result<String, ParseProblem> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        _ => Err(ParseProblem::Unrecognized(format!(
            "{key} missing or not a string"
        ))),
    }
}

fn time(obj: &Map<String, Value>) -> Result<u64, ParseProblem> {
    let bad = |why: String| Err(ParseProblem::Unrecognized(why));
    let t = match obj.get("time") {
        Some(Value::String(s)) => match s.parse() {
            Ok(t) => t,
            Err(_) => return bad(format!("time {s:?} is not a number")),
        },
        Some(Value::Number(n)) => match n.as_u64() {
            Some(t) => t,
            None => return bad(format!("time {n} is not a whole number")),
        },
        _ => return bad("time missing".into()),
    };
    if t > MAX_TIME {
        return Err(ParseProblem::TimeTooLarge(t));
    }
    Ok(t)
}

/// The metadata object; its problems are [`ParseProblem::BadMetadata`].
fn metadata(obj: &Map<String, Value>) -> Result<Metadata, ParseProblem> {
    let bad = |why: String| ParseProblem::BadMetadata(why);
    let start = match obj.get("start") {
        Some(Value::Array(a)) if a.len() == 2 => {
            match (a[0].as_u64(), a[1].as_u64()) {
                (Some(s), Some(ns)) => (s, ns),
                _ => {
                    return Err(bad(
                        "start must be [seconds, nanoseconds]".into()
                    ));
                }
            }
        }
        _ => return Err(bad("start must be [seconds, nanoseconds]".into())),
    };
    let title = match obj.get("title") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(bad("title missing".into())),
    };
    let host = obj.get("host").and_then(Value::as_str).map(str::to_string);
    let entity_kind = obj
        .get("entityKind")
        .and_then(Value::as_str)
        .unwrap_or("Entity")
        .to_string();
    let Some(Value::Object(states)) = obj.get("states") else {
        return Err(bad("states missing".into()));
    };
    let mut defs: Vec<Option<StateDef>> = vec![None; states.len()];
    for (name, def) in states {
        let value = def
            .get("value")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad(format!("state {name:?} has no value")))?;
        let slot = defs.get_mut(value as usize).ok_or_else(|| {
            bad(format!("state values must be 0..{}", states.len()))
        })?;
        if slot.is_some() {
            return Err(bad(format!("state value {value} used twice")));
        }
        let color = def
            .get("color")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| default_color(name, value));
        *slot = Some(StateDef {
            name: name.clone(),
            color,
        });
    }
    let states = defs
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("state values must be 0..N-1".into()))?;
    Ok(Metadata {
        start,
        title,
        host,
        entity_kind,
        states,
    })
}

/// A colour for a state that names none (the reference renderer picks one
/// at random; a fixed palette keeps our drawings reproducible): the one
/// zinstall gives a state of that name, or else one of the Okabe-Ito
/// palette by value.
fn default_color(name: &str, value: u64) -> String {
    use crate::palette::*;
    const PALETTE: [&str; 8] = [
        ORANGE,
        SKY_BLUE,
        BLUISH_GREEN,
        YELLOW,
        BLUE,
        VERMILLION,
        REDDISH_PURPLE,
        BLACK,
    ];
    crate::known_color(name)
        .unwrap_or(PALETTE[value as usize % PALETTE.len()])
        .to_string()
}

impl From<ParseError> for io::Error {
    fn from(e: ParseError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}
