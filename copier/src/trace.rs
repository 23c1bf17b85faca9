//! The built-in state recorder.
//!
//! When a plan asks for it, every engine thread (the walker and each
//! worker) records its state transitions into its own buffer: a monotonic
//! nanosecond offset and a state number, pushed onto a `Vec` owned by the
//! thread. No lock and no shared cache line is touched on a transition;
//! the buffers are gathered when the threads finish, into a
//! [`Recording`] that the `statemap` module writes as statemap JSON.
//! When recording is off a transition is one branch on a `None`.

use std::time::{Instant, SystemTime};

/// What an engine thread is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ThreadState {
    /// A worker waiting for a batch; the walker waiting for workers.
    Waiting = 0,
    /// The walker reading directories.
    Walking = 1,
    /// The walker blocked on a full queue.
    Blocked = 2,
    /// Creating directories.
    Mkdir = 3,
    /// Opening and reading source data (read/write path).
    Reading = 4,
    /// Writing or copying data (write, copy_file_range, reflink).
    Writing = 5,
    /// Metadata calls: stat, chown, chmod, times, xattrs.
    Metadata = 6,
    /// Creating symlinks, hard links and redirects.
    Linking = 7,
}

impl ThreadState {
    /// Every state, in value order.
    pub const ALL: [ThreadState; 8] = [
        ThreadState::Waiting,
        ThreadState::Walking,
        ThreadState::Blocked,
        ThreadState::Mkdir,
        ThreadState::Reading,
        ThreadState::Writing,
        ThreadState::Metadata,
        ThreadState::Linking,
    ];

    /// The state's name in statemaps.
    pub fn name(self) -> &'static str {
        match self {
            ThreadState::Waiting => "waiting",
            ThreadState::Walking => "walking",
            ThreadState::Blocked => "queue-blocked",
            ThreadState::Mkdir => "mkdir",
            ThreadState::Reading => "reading",
            ThreadState::Writing => "writing",
            ThreadState::Metadata => "metadata",
            ThreadState::Linking => "linking",
        }
    }

    /// The state's colour. Idle is pale grey; busy states take the
    /// Okabe-Ito palette, which readers with any colour vision tell
    /// apart; a state meaning what a scheduler state of
    /// [`SCHED_STATES`] means has its colour (waiting, blocked, reading,
    /// writing, and metadata calls as time in system calls).
    pub fn color(self) -> &'static str {
        match self {
            ThreadState::Waiting => palette::IDLE,
            ThreadState::Walking => palette::YELLOW,
            ThreadState::Blocked => palette::VERMILLION,
            ThreadState::Mkdir => palette::REDDISH_PURPLE,
            ThreadState::Reading => palette::SKY_BLUE,
            ThreadState::Writing => palette::BLUISH_GREEN,
            ThreadState::Metadata => palette::BLUE,
            ThreadState::Linking => palette::BLACK,
        }
    }
}

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

/// The colour zinstall gives a state of this name (of the recorder or of
/// the scheduler scripts), if it knows the name.
pub fn known_color(name: &str) -> Option<&'static str> {
    ThreadState::ALL
        .iter()
        .find(|s| s.name() == name)
        .map(|s| s.color())
        .or_else(|| {
            SCHED_STATES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| *c)
        })
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

impl Recording {
    /// The state definitions of the engine's threads.
    pub fn engine_states() -> Vec<StateDef> {
        ThreadState::ALL
            .iter()
            .map(|s| StateDef {
                name: s.name().to_string(),
                color: s.color().to_string(),
            })
            .collect()
    }
}

/// The clock shared by the threads of one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    pub(crate) origin: Instant,
    pub(crate) wall: SystemTime,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            origin: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// One thread's recorder. Disabled recorders do nothing.
pub(crate) struct ThreadTrace {
    clock: Clock,
    name: String,
    buf: Option<Vec<Transition>>,
    current: Option<ThreadState>,
}

impl ThreadTrace {
    pub(crate) fn new(clock: Clock, name: String, enabled: bool) -> Self {
        ThreadTrace {
            clock,
            name,
            // Room for a few thousand transitions up front, so that a short
            // run never reallocates on the hot path.
            buf: enabled.then(|| Vec::with_capacity(4096)),
            current: None,
        }
    }

    /// Records entry into `state` (no-op if already there or disabled).
    #[inline]
    pub(crate) fn enter(&mut self, state: ThreadState) {
        if let Some(buf) = &mut self.buf
            && self.current != Some(state)
        {
            self.current = Some(state);
            buf.push(Transition {
                time_ns: self.clock.now_ns(),
                state: state as u32,
            });
        }
    }

    pub(crate) fn finish(self) -> Option<EntityTrace> {
        self.buf.map(|transitions| EntityTrace {
            name: self.name,
            transitions,
        })
    }
}
