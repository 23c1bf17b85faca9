//! CPU time: this thread's, this process's and its children's, the
//! whole machine's.

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec to fill.
    let rc =
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The CPU time of the whole machine and of this process and its children at
/// one moment: taken before and after a sweep, the share of the CPUs
/// that processes other than the sweep's used meanwhile.
pub struct CpuLoad {
    at: std::time::Instant,
    busy_ticks: u64,
    children: std::time::Duration,
}

impl CpuLoad {
    /// Now; `None` where `/proc/stat` cannot be read (not Linux).
    pub fn now() -> Option<CpuLoad> {
        Some(CpuLoad {
            at: std::time::Instant::now(),
            busy_ticks: busy_ticks()?,
            children: children_cpu(),
        })
    }

    /// The share of all CPUs (0 to 1) used since `self` by processes
    /// other than this one's children, if it can be told.
    pub fn others_share(&self) -> Option<f64> {
        let now = CpuLoad::now()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        // SAFETY: as above.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if hz <= 0 || cpus <= 0 {
            return None;
        }
        let wall = now.at.duration_since(self.at).as_secs_f64();
        if wall <= 0.0 {
            return None;
        }
        let busy =
            now.busy_ticks.saturating_sub(self.busy_ticks) as f64 / hz as f64;
        let ours = now.children.saturating_sub(self.children).as_secs_f64();
        Some(((busy - ours) / (wall * cpus as f64)).clamp(0.0, 1.0))
    }
}

/// Busy ticks of all CPUs (everything but idle and iowait), from the
/// first line of `/proc/stat`.
// The kernel's own file in /proc, not one anyone could plant.
#[allow(clippy::disallowed_methods)]
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some(total.saturating_sub(idle))
}

/// User and system time of this process and its waited-for children.
fn children_cpu() -> std::time::Duration {
    let (ours, children) = cpu_times();
    ours + children
}

/// CPU time used so far, each user plus system: this process's (every
/// thread) and its waited-for children's (`getrusage`; zero where it
/// fails).
pub fn cpu_times() -> (std::time::Duration, std::time::Duration) {
    let used = |who| {
        // SAFETY: an all-zero rusage is a valid value to be overwritten.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes the struct it is given.
        if unsafe { libc::getrusage(who, &mut u) } != 0 {
            return std::time::Duration::ZERO;
        }
        let tv = |t: libc::timeval| {
            std::time::Duration::new(
                t.tv_sec as u64,
                (t.tv_usec as u32).saturating_mul(1000),
            )
        };
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    (used(libc::RUSAGE_SELF), used(libc::RUSAGE_CHILDREN))
}

/// The CPU time another process has used so far (all its threads, user
/// and system), in clock ticks: a service watching a child it started
/// tells a working one from one that stopped. Linux: `/proc/PID/stat`;
/// elsewhere `None`, and the caller goes by what the child says alone.
#[cfg(target_os = "linux")]
// The kernel's own file in /proc, not one anyone could plant.
#[allow(clippy::disallowed_methods)]
pub fn process_cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the parenthesised name: state is the first,
    // utime and stime the 12th and 13th.
    let rest = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// See the Linux version: illumos's `/proc/PID/usage` is a binary
/// `prusage_t`, not read here, so a child's own reports are all there is.
#[cfg(not(target_os = "linux"))]
pub fn process_cpu_ticks(_pid: u32) -> Option<u64> {
    None
}
