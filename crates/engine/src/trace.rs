//! The built-in state recorder.
//!
//! When a plan asks for it, every engine thread (the walker and each
//! worker) records its state transitions into its own buffer: a monotonic
//! nanosecond offset and a state number, pushed onto a `Vec` owned by the
//! thread. No lock and no shared cache line is touched on a transition;
//! the buffers are gathered when the threads finish, into a
//! [`Recording`] that `zinstall_statemap::write_json` writes as statemap
//! JSON.
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
        ENGINE_STATES[self as usize].0
    }

    /// The state's colour. Idle is pale grey; busy states take the
    /// Okabe-Ito palette, which readers with any colour vision tell
    /// apart; a state meaning what a scheduler state of
    /// [`SCHED_STATES`] means has its colour (waiting, blocked, reading,
    /// writing, and metadata calls as time in system calls).
    pub fn color(self) -> &'static str {
        ENGINE_STATES[self as usize].1
    }
}

pub use zinstall_statemap::palette;
pub use zinstall_statemap::{
    ENGINE_STATES, EntityTrace, Recording, SCHED_STATES, StateDef, Transition,
    known_color,
};

/// The state definitions of the engine's threads, in [`ThreadState`]
/// order.
pub fn engine_states() -> Vec<StateDef> {
    ThreadState::ALL
        .iter()
        .map(|s| StateDef {
            name: s.name().to_string(),
            color: s.color().to_string(),
        })
        .collect()
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
            let t = Transition {
                time_ns: self.clock.now_ns(),
                state: state as u32,
            };
            // Two states of one thread at one nanosecond (a coarse clock,
            // or a state held for less than its tick): the later one is
            // the state from then on. Statemap renderers take a second
            // state at the same time as an error (oxidecomputer/statemap
            // panics on it).
            match buf.last_mut() {
                Some(last) if last.time_ns == t.time_ns => *last = t,
                _ => buf.push(t),
            }
        }
    }

    pub(crate) fn finish(self) -> Option<EntityTrace> {
        self.buf.map(|transitions| EntityTrace {
            name: self.name,
            transitions,
        })
    }
}
