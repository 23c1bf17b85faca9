//! The granted jobs' worker budget, shared fairly: each job whose process
//! copies is a member, and the budget is divided among the members that
//! have a turn, recomputed as jobs come and go, so that none holds more
//! than its fair part while others wait, and a job that stops using its
//! share (stopped, hung) loses it to the others at once in the
//! accounting, and for good when it is failed for making no progress.
//!
//! * At most `total` members have a turn at once (each needs a worker);
//!   the others are paused. A new member takes a free place at once; with
//!   none free, the member whose turn is oldest gives its place up once
//!   its turn has lasted [`QUANTUM`], so that no job waits longer than a
//!   quantum (and the batch its predecessor is doing) however long the
//!   others' copies are.
//! * A place goes first to the uid with the fewest turns running, then
//!   to the uid given one longest ago (a uid new to the daemon before any
//!   other), then to that uid's job given one longest ago (or never),
//!   then to the job that came first: a new uid's job is served before
//!   another uid's fifth.
//! * The budget is divided among the members with a turn as water fills
//!   vessels: a job wanting fewer workers than an equal part takes what
//!   it wants, the rest share what is left; a paused job has none.
//! * A job's process is told its share as it changes and runs only that
//!   many of its workers (`zinstall_engine::WorkerLimit`, none while paused); a
//!   share taken back is counted as free at once, and the process gives
//!   up the workers at their next batch.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a turn lasts when others wait for one.
pub(crate) const QUANTUM: Duration = Duration::from_millis(250);

/// The granted jobs' workers, and who holds which part.
pub(crate) struct Shares {
    total: usize,
    quantum: Duration,
    ledger: Mutex<Ledger>,
}

#[derive(Default)]
struct Ledger {
    /// Jobs sharing the budget, by job id (ids grow: the first come
    /// first).
    members: BTreeMap<u64, Member>,
    /// When each uid with a member was last given a turn (a count of
    /// turns given), so that the uid served longest ago goes first.
    served_at: HashMap<u32, u64>,
    turns: u64,
}

struct Member {
    uid: u32,
    want: usize,
    share: usize,
    /// Since when it has had its turn; `None`: paused.
    turn: Option<Instant>,
    /// When it was last given a turn (a count of turns given; 0: never),
    /// so that a uid's jobs take turns too.
    last: u64,
}

/// A job's membership, given up when dropped.
pub(crate) struct Share<'s> {
    shares: &'s Shares,
    job: u64,
}

impl Shares {
    /// `total` workers (at least one) to share.
    pub(crate) fn new(total: usize) -> Shares {
        Shares::with_quantum(total, QUANTUM)
    }

    fn with_quantum(total: usize, quantum: Duration) -> Shares {
        Shares {
            total: total.max(1),
            quantum,
            ledger: Mutex::new(Ledger::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes job `job` of `uid`, wanting `want` workers, a member: it has
    /// a share at once if a place is free, else when a turn comes.
    pub(crate) fn join(&self, job: u64, uid: u32, want: usize) -> Share<'_> {
        let mut g = self.lock();
        g.members.insert(
            job,
            Member {
                uid,
                want: want.max(1),
                share: 0,
                turn: None,
                last: 0,
            },
        );
        g.rebalance(self.total, self.quantum, Instant::now());
        Share { shares: self, job }
    }
}

impl Share<'_> {
    /// The workers this job may run now (none while paused); turns that
    /// have lasted their quantum are passed on first.
    pub(crate) fn workers(&self) -> usize {
        let mut g = self.shares.lock();
        g.rebalance(self.shares.total, self.shares.quantum, Instant::now());
        g.members.get(&self.job).map_or(0, |m| m.share)
    }
}

impl Drop for Share<'_> {
    fn drop(&mut self) {
        let mut g = self.shares.lock();
        g.members.remove(&self.job);
        g.rebalance(self.shares.total, self.shares.quantum, Instant::now());
    }
}

impl Ledger {
    /// Gives free places, passes on turns that have lasted `quantum`
    /// while others wait, then divides the budget among those with a
    /// turn.
    fn rebalance(&mut self, total: usize, quantum: Duration, now: Instant) {
        let active = self.members.values().filter(|m| m.turn.is_some());
        let mut free = total.saturating_sub(active.count());
        while free > 0 && self.give_turn(now, None) {
            free -= 1;
        }
        // Turns past their quantum, oldest first, each passed on while
        // someone waits.
        let mut expired: Vec<(Instant, u64)> = self
            .members
            .iter()
            .filter_map(|(j, m)| Some((m.turn?, *j)))
            .filter(|(t, _)| now.saturating_duration_since(*t) >= quantum)
            .collect();
        expired.sort();
        for (_, job) in expired {
            if !self.members.values().any(|m| m.turn.is_none()) {
                break;
            }
            if let Some(m) = self.members.get_mut(&job) {
                m.turn = None;
            }
            self.give_turn(now, Some(job));
        }
        self.forget_idle_uids();
        self.divide(total);
    }

    /// Gives a turn to the paused member that comes first (not `except`,
    /// whose turn just ended); false if none waits.
    fn give_turn(&mut self, now: Instant, except: Option<u64>) -> bool {
        let running = |uid: u32| {
            self.members
                .values()
                .filter(|m| m.uid == uid && m.turn.is_some())
                .count()
        };
        let next = self
            .members
            .iter()
            .filter(|(j, m)| m.turn.is_none() && Some(**j) != except)
            .min_by_key(|(j, m)| {
                (
                    running(m.uid),
                    self.served_at.get(&m.uid).copied().unwrap_or(0),
                    m.last,
                    **j,
                )
            })
            .map(|(j, _)| *j);
        let Some(job) = next else {
            // Nobody else: the one whose turn ended goes on.
            if let Some(m) = except.and_then(|j| self.members.get_mut(&j)) {
                m.turn = Some(now);
            }
            return false;
        };
        self.turns += 1;
        let m = self.members.get_mut(&job).expect("a member listed");
        m.turn = Some(now);
        m.last = self.turns;
        self.served_at.insert(m.uid, self.turns);
        true
    }

    /// Water-filling among the members with a turn, the smallest wants
    /// first; paused members have none.
    fn divide(&mut self, total: usize) {
        let mut order: Vec<u64> = self
            .members
            .iter()
            .filter(|(_, m)| m.turn.is_some())
            .map(|(j, _)| *j)
            .collect();
        order.sort_by_key(|j| (self.members[j].want, *j));
        let mut left = total;
        let n = order.len();
        for m in self.members.values_mut() {
            m.share = 0;
        }
        for (i, j) in order.iter().enumerate() {
            let m = self.members.get_mut(j).expect("a member listed");
            let part = (left / (n - i)).max(1);
            m.share = m.want.min(part);
            left = left.saturating_sub(m.share);
        }
    }

    /// A uid with no member any more is forgotten: it comes back as a
    /// new one.
    fn forget_idle_uids(&mut self) {
        let members = &self.members;
        self.served_at
            .retain(|uid, _| members.values().any(|m| m.uid == *uid));
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_newcomer_takes_its_part_from_a_holder_at_once() {
        let s = Shares::new(8);
        let a = s.join(1, 7, 8);
        assert_eq!(a.workers(), 8);
        let b = s.join(2, 8, 8);
        assert_eq!((a.workers(), b.workers()), (4, 4));
        let c = s.join(3, 9, 1);
        // One wants one; the other two share the seven left.
        assert_eq!(c.workers(), 1);
        assert_eq!(a.workers() + b.workers(), 7);
        drop(b);
        assert_eq!((a.workers(), c.workers()), (7, 1));
    }

    #[test]
    fn past_one_worker_each_turns_pass_on_and_a_new_uid_goes_first() {
        let q = Duration::from_millis(30);
        let s = Shares::with_quantum(1, q);
        // Uid 7's four jobs: the first has the one worker.
        let a: Vec<Share<'_>> = (1..=4).map(|j| s.join(j, 7, 2)).collect();
        assert_eq!(a[0].workers(), 1);
        assert!(a[1..].iter().all(|m| m.workers() == 0));
        // Its fifth, then another uid's first.
        let fifth = s.join(5, 7, 2);
        let other = s.join(6, 9, 2);
        std::thread::sleep(q);
        // The turn passes on: to uid 9, whose uid was never served, not
        // to uid 7's next.
        assert_eq!(other.workers(), 1);
        assert_eq!(a[0].workers(), 0);
        assert_eq!(fifth.workers(), 0);
        // Then back to uid 7, its jobs in the order they came.
        std::thread::sleep(q);
        assert_eq!(a[1].workers(), 1);
        assert_eq!(other.workers(), 0);
    }

    #[test]
    fn a_turn_goes_on_while_nobody_waits() {
        let s = Shares::with_quantum(2, Duration::from_millis(1));
        let a = s.join(1, 7, 2);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(a.workers(), 2);
        drop(a);
        assert!(s.lock().members.is_empty());
        assert!(s.lock().served_at.is_empty());
    }
}
