//! What keeps one caller from spending the daemon on the others: the log
//! lines its refusals may cost, and who gives up a connection when every
//! place is taken.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Callers whose refusal windows are remembered at once; past that the
/// oldest windows are summed up and forgotten, so that a flood from many
/// uids cannot grow the table.
const MAX_TRACKED: usize = 4096;

/// Refusals (bad requests, denials, busy) logged per uid: the first
/// `burst` of each window, then only counted, with one summary line per
/// window that had more.
#[derive(Debug)]
pub(crate) struct RefusalLog {
    windows: HashMap<u32, Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    logged: usize,
    quiet: u64,
}

/// A window that ended with refusals left unlogged: one line says how
/// many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The caller.
    pub(crate) uid: u32,
    /// Refusals not logged.
    pub(crate) count: u64,
    /// The window's length.
    pub(crate) secs: u64,
}

impl RefusalLog {
    pub(crate) fn new() -> Self {
        RefusalLog {
            windows: HashMap::new(),
        }
    }

    /// Whether no window is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Counts a refusal of `uid` at `now`: whether to log it, and the
    /// summary of its previous window if that one ended with refusals
    /// unlogged.
    pub(crate) fn refused(
        &mut self,
        uid: u32,
        now: Instant,
        burst: usize,
        window: Duration,
    ) -> (bool, Option<Summary>) {
        let mut ended = None;
        if let Some(w) = self.windows.get(&uid)
            && now.saturating_duration_since(w.start) >= window
        {
            ended = summary(uid, w, window);
            self.windows.remove(&uid);
        }
        let mut evicted = None;
        if !self.windows.contains_key(&uid) && self.windows.len() >= MAX_TRACKED
        {
            // The oldest window goes: its refusals are summed up now
            // rather than later.
            if let Some((&old, w)) =
                self.windows.iter().min_by_key(|(_, w)| w.start)
            {
                evicted = summary(old, w, window);
                self.windows.remove(&old);
            }
        }
        let w = self.windows.entry(uid).or_insert(Window {
            start: now,
            logged: 0,
            quiet: 0,
        });
        let log = w.logged < burst;
        if log {
            w.logged += 1;
        } else {
            w.quiet += 1;
        }
        (log, ended.or(evicted))
    }

    /// The windows that ended by `now`, forgotten; those with refusals
    /// unlogged summed up.
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        window: Duration,
    ) -> Vec<Summary> {
        let mut out = Vec::new();
        self.windows.retain(|&uid, w| {
            if now.saturating_duration_since(w.start) < window {
                return true;
            }
            out.extend(summary(uid, w, window));
            false
        });
        out
    }
}

fn summary(uid: u32, w: &Window, window: Duration) -> Option<Summary> {
    (w.quiet > 0).then_some(Summary {
        uid,
        count: w.quiet,
        secs: window.as_secs(),
    })
}

/// One connection of a caller other than root.
#[derive(Debug)]
struct Slot {
    uid: u32,
    /// Waiting for its next request (not reading one, not running one,
    /// not following a job).
    idle: bool,
    /// To end it from the accept loop: its thread, blocked reading, sees
    /// the end of the stream.
    stream: UnixStream,
}

/// The connections of callers other than root, oldest first (by the
/// order they came in), with how many each uid holds.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    next: u64,
    open: BTreeMap<u64, Slot>,
    by_uid: HashMap<u32, usize>,
}

impl Slots {
    /// Connections held in all.
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Connections `uid` holds.
    pub(crate) fn held_by(&self, uid: u32) -> usize {
        self.by_uid.get(&uid).copied().unwrap_or(0)
    }

    /// Takes a place for `uid`'s connection; its id.
    pub(crate) fn add(&mut self, uid: u32, stream: UnixStream) -> u64 {
        let id = self.next;
        self.next += 1;
        self.open.insert(
            id,
            Slot {
                uid,
                idle: true,
                stream,
            },
        );
        *self.by_uid.entry(uid).or_default() += 1;
        id
    }

    /// Gives the place back (nothing if it was taken away already).
    pub(crate) fn remove(&mut self, id: u64) {
        if let Some(s) = self.open.remove(&id)
            && let Some(n) = self.by_uid.get_mut(&s.uid)
        {
            *n -= 1;
            if *n == 0 {
                self.by_uid.remove(&s.uid);
            }
        }
    }

    /// Marks the connection as waiting for a request, or not.
    pub(crate) fn set_idle(&mut self, id: u64, idle: bool) {
        if let Some(s) = self.open.get_mut(&id) {
            s.idle = idle;
        }
    }

    /// Makes room for a connection of `uid` when every place is taken:
    /// if `uid` holds fewer connections than the largest holder, that
    /// holder's oldest idle connection is told `busy` (if its socket
    /// takes the line at once), shut down and its place freed. Returns
    /// the uid that gave up a place.
    pub(crate) fn make_room(&mut self, uid: u32, busy: &str) -> Option<u32> {
        let mine = self.held_by(uid);
        let most = self.by_uid.values().copied().max()?;
        if mine >= most {
            return None;
        }
        let (&id, _) = self.open.iter().find(|(_, s)| {
            s.idle && s.uid != uid && self.held_by(s.uid) == most
        })?;
        let slot = self.open.get(&id)?;
        let victim = slot.uid;
        // Never waits on a client that does not read: the line is
        // dropped if its socket buffer is full.
        if slot.stream.set_nonblocking(true).is_ok() {
            let _told = writeln!(&slot.stream, "{busy}");
        }
        let _ended = slot.stream.shutdown(Shutdown::Both);
        self.remove(id);
        Some(victim)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn refusals_are_logged_in_bursts_and_summed_up() {
        let mut r = RefusalLog::new();
        let t0 = Instant::now();
        let w = Duration::from_secs(10);
        let logged = (0..1000).filter(|_| r.refused(7, t0, 5, w).0).count();
        assert_eq!(logged, 5);
        assert!(r.tick(t0 + Duration::from_secs(9), w).is_empty());
        // The next refusal after the window says what the last hid.
        let (log, s) = r.refused(7, t0 + w, 5, w);
        assert!(log);
        assert_eq!(
            s,
            Some(Summary {
                uid: 7,
                count: 995,
                secs: 10
            })
        );
        for _ in 0..10 {
            r.refused(7, t0 + w, 5, w);
        }
        assert_eq!(
            r.tick(t0 + 2 * w, w),
            [Summary {
                uid: 7,
                count: 6,
                secs: 10
            }]
        );
        assert!(r.windows.is_empty());
    }

    #[test]
    fn the_table_of_callers_is_bounded() {
        let mut r = RefusalLog::new();
        let t0 = Instant::now();
        let w = Duration::from_secs(10);
        let mut summed = 0;
        for uid in 0..(MAX_TRACKED as u32 * 2) {
            for _ in 0..7 {
                let (_, s) = r.refused(uid, t0, 5, w);
                summed += s.map_or(0, |s| s.count);
            }
        }
        assert_eq!(r.windows.len(), MAX_TRACKED);
        assert_eq!(summed, 2 * MAX_TRACKED as u64);
    }

    #[test]
    fn the_largest_holders_oldest_idle_connection_makes_room() {
        let mut s = Slots::default();
        let pair = || UnixStream::pair().unwrap();
        let (a1, a1_peer) = pair();
        let (a2, _a2_peer) = pair();
        let (b1, _b1_peer) = pair();
        let first = s.add(1, a1);
        let second = s.add(1, a2);
        s.add(2, b1);
        // uid 1 holds the most; its first connection is following a job.
        s.set_idle(first, false);
        assert_eq!(s.make_room(1, "busy"), None);
        assert_eq!(s.make_room(3, "busy"), Some(1));
        assert_eq!(s.held_by(1), 1);
        assert_eq!(s.len(), 2);
        // The second was the one closed; the first goes on.
        assert!(!s.open.contains_key(&second));
        drop(a1_peer);
        // Now every holder has one: nobody gives up a place to a uid
        // that has one too.
        s.add(3, pair().0);
        assert_eq!(s.make_room(3, "busy"), None);
        // One that holds none still gets in, if an idle one is there.
        s.set_idle(first, true);
        assert!(s.make_room(4, "busy").is_some());
    }
}
