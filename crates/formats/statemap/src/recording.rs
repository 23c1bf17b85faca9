//! Statemaps as zinstall makes them: a recording of state transitions
//! per entity, and the states and colours zinstall knows.

use std::time::SystemTime;

/// The colours of every statemap zinstall writes or draws: the
/// Okabe-Ito palette (Okabe and Ito, "Color Universal Design", 2008),
/// whose eight colours stay distinct under every common colour-vision
/// deficiency, and two greys for idle and dead.
pub mod palette {
    /// Orange.
    pub const ORANGE: &str = "#E69F00";
    /// Sky blue.
    pub const SKY_BLUE: &str = "#56B4E9";
    /// Bluish green.
    pub const BLUISH_GREEN: &str = "#009E73";
    /// Yellow.
    pub const YELLOW: &str = "#F0E442";
    /// Blue.
    pub const BLUE: &str = "#0072B2";
    /// Vermillion.
    pub const VERMILLION: &str = "#D55E00";
    /// Reddish purple.
    pub const REDDISH_PURPLE: &str = "#CC79A7";
    /// Black.
    pub const BLACK: &str = "#000000";
    /// Idle: waiting for work.
    pub const IDLE: &str = "#EEEEEE";
    /// A thread that has exited.
    pub const DEAD: &str = "#999999";
}

/// The states of the scheduler statemaps written by `dtrace/statemap.bt`
/// (bpftrace) and `dtrace/statemap.d` (DTrace), in value order, with
/// their colours: both scripts declare exactly these.
pub const SCHED_STATES: [(&str, &str); 8] = [
    ("on-cpu", palette::ORANGE),
    ("on-cpu-syscall", palette::BLUE),
    ("off-cpu-runnable", palette::REDDISH_PURPLE),
    ("off-cpu-waiting", palette::IDLE),
    ("off-cpu-blocked", palette::VERMILLION),
    ("off-cpu-io-read", palette::SKY_BLUE),
    ("off-cpu-io-write", palette::BLUISH_GREEN),
    ("off-cpu-dead", palette::DEAD),
];

/// The states of the copy engine's recorder (`zinstall_engine::trace`),
/// in value order, with their colours. Idle is pale grey; busy states take the
/// Okabe-Ito palette; a state meaning what a scheduler state of
/// [`SCHED_STATES`] means has its colour (waiting, blocked, reading,
/// writing, and metadata calls as time in system calls).
pub const ENGINE_STATES: [(&str, &str); 8] = [
    ("waiting", palette::IDLE),
    ("walking", palette::YELLOW),
    ("queue-blocked", palette::VERMILLION),
    ("mkdir", palette::REDDISH_PURPLE),
    ("reading", palette::SKY_BLUE),
    ("writing", palette::BLUISH_GREEN),
    ("metadata", palette::BLUE),
    ("linking", palette::BLACK),
];

/// The colour zinstall gives a state of this name (of the engine's
/// recorder or of the scheduler scripts), if it knows the name.
pub fn known_color(name: &str) -> Option<&'static str> {
    ENGINE_STATES
        .iter()
        .chain(SCHED_STATES.iter())
        .find(|(n, _)| *n == name)
        .map(|(_, c)| *c)
}

/// One state change: nanoseconds since the recording's start, new state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Nanoseconds since [`Recording::start`].
    pub time_ns: u64,
    /// Index into [`Recording::states`].
    pub state: u32,
}

/// The transitions of one thread.
#[derive(Clone, Debug, Default)]
pub struct EntityTrace {
    /// The entity's name, e.g. `walker` or `worker-3`.
    pub name: String,
    /// Transitions, in time order.
    pub transitions: Vec<Transition>,
}

/// A state's name and colour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDef {
    /// The name shown in the legend.
    pub name: String,
    /// `#rrggbb`.
    pub color: String,
}

/// Everything recorded by one run.
#[derive(Clone, Debug)]
pub struct Recording {
    /// Wall-clock time of offset zero.
    pub start: SystemTime,
    /// Length of the run in nanoseconds (where the last states end).
    pub end_ns: u64,
    /// The states, indexed by [`Transition::state`].
    pub states: Vec<StateDef>,
    /// One trace per thread.
    pub entities: Vec<EntityTrace>,
}
