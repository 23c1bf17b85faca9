//! Shares of time per state.

use std::collections::HashMap;
use std::fmt;

use super::Statemap;

/// One entity's time per state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntitySummary {
    /// The entity (or `all`).
    pub name: String,
    /// Nanoseconds from its first datum to the end of the map.
    pub span: u64,
    /// Nanoseconds in each state, indexed by state value.
    pub time_in: Vec<u64>,
}

impl EntitySummary {
    /// Share of the span spent in `state`, 0.0 to 1.0.
    pub fn share(&self, state: usize) -> f64 {
        if self.span == 0 {
            return 0.0;
        }
        self.time_in.get(state).copied().unwrap_or(0) as f64 / self.span as f64
    }
}

/// Time per state for every entity and for all together.
#[derive(Clone, Debug)]
pub struct Summary {
    /// State names, by value.
    pub states: Vec<String>,
    /// One row per entity, in display order.
    pub entities: Vec<EntitySummary>,
    /// The sum over all entities.
    pub all: EntitySummary,
    /// Share of time the pool (entities named `worker*`, or all entities
    /// if none is) spent in states that are not idle.
    pub utilization: f64,
}

/// A state counts as idle if its name says it waits.
pub fn is_idle_state(name: &str) -> bool {
    name == "idle"
        || name.starts_with("waiting")
        || name.starts_with("off-cpu-waiting")
}

/// `(start, end, state)`: an entity was in `state` from `start` to `end`.
pub(crate) type Interval = (u64, u64, u32);

/// Each entity's intervals, in display order; the last state of an
/// entity lasts until the end of the map.
pub(crate) fn intervals(map: &Statemap) -> Vec<(String, Vec<Interval>)> {
    let end = map.end();
    let mut by_entity: HashMap<&str, Vec<(u64, u32)>> = HashMap::new();
    for d in &map.data {
        by_entity
            .entry(&d.entity)
            .or_default()
            .push((d.time, d.state));
    }
    map.entities()
        .into_iter()
        .map(|name| {
            let points = by_entity.remove(name.as_str()).unwrap_or_default();
            let spans = points
                .iter()
                .enumerate()
                .map(|(i, &(t, s))| {
                    let next = points.get(i + 1).map_or(end, |p| p.0);
                    (t, next.max(t), s)
                })
                .collect();
            (name, spans)
        })
        .collect()
}

impl Summary {
    /// Summarizes `map`, with idle states told by [`is_idle_state`].
    pub fn of(map: &Statemap) -> Self {
        Self::with_idle(map, is_idle_state)
    }

    /// Summarizes `map`, with idle states told by `idle`.
    pub fn with_idle(map: &Statemap, idle: impl Fn(&str) -> bool) -> Self {
        let n = map.meta.states.len();
        let mut all = EntitySummary {
            name: "all".into(),
            span: 0,
            time_in: vec![0; n],
        };
        let mut entities = Vec::new();
        for (name, spans) in intervals(map) {
            let mut e = EntitySummary {
                name,
                span: 0,
                time_in: vec![0; n],
            };
            // Sums saturate: a map built by hand (not parsed) may hold
            // times up to u64::MAX, and the totals over entities can pass
            // it even for parsed ones.
            for (t0, t1, s) in spans {
                if let Some(slot) = e.time_in.get_mut(s as usize) {
                    *slot = slot.saturating_add(t1 - t0);
                }
                e.span = e.span.saturating_add(t1 - t0);
            }
            all.span = all.span.saturating_add(e.span);
            for (a, b) in all.time_in.iter_mut().zip(&e.time_in) {
                *a = a.saturating_add(*b);
            }
            entities.push(e);
        }
        let idle_states: Vec<bool> =
            map.meta.states.iter().map(|s| idle(&s.name)).collect();
        let any_worker = entities.iter().any(|e| e.name.starts_with("worker"));
        let (mut busy, mut span) = (0u64, 0u64);
        for e in &entities {
            if any_worker && !e.name.starts_with("worker") {
                continue;
            }
            span = span.saturating_add(e.span);
            busy = e
                .time_in
                .iter()
                .zip(&idle_states)
                .filter(|(_, idle)| !**idle)
                .fold(busy, |b, (t, _)| b.saturating_add(*t));
        }
        let utilization = if span == 0 {
            0.0
        } else {
            busy as f64 / span as f64
        };
        Summary {
            states: map.meta.states.iter().map(|s| s.name.clone()).collect(),
            entities,
            all,
            utilization,
        }
    }
}

impl fmt::Display for Summary {
    /// A table: one row per entity and one for all, a column per state
    /// with the share of time in percent, then the pool's utilization.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name_w = self
            .entities
            .iter()
            .map(|e| e.name.len())
            .chain(["entity".len(), 3])
            .max()
            .unwrap_or(6);
        let widths: Vec<usize> =
            self.states.iter().map(|s| s.len().max(6)).collect();
        write!(f, "{:<name_w$} {:>10}", "entity", "time ms")?;
        for (s, w) in self.states.iter().zip(&widths) {
            write!(f, " {s:>w$}")?;
        }
        writeln!(f)?;
        for e in self.entities.iter().chain([&self.all]) {
            write!(f, "{:<name_w$} {:>10.1}", e.name, e.span as f64 / 1e6)?;
            for (i, w) in widths.iter().enumerate() {
                write!(f, " {:>w$}", format!("{:.1}%", e.share(i) * 100.0))?;
            }
            writeln!(f)?;
        }
        write!(f, "pool utilization: {:.1}%", self.utilization * 100.0)
    }
}
