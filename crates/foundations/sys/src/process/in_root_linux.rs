//! Linux: a command run inside a directory tree, in namespaces of its
//! own: mounts, PIDs, network, host name and IPC.
//!
//! Why a raw `clone` and not `Command::pre_exec`: the command must be
//! PID 1 of a new PID namespace, and `unshare(CLONE_NEWPID)` only moves
//! the caller's later children; from `pre_exec` that takes a second fork
//! whose waiting parent holds std's exec-error pipe open until the
//! command ends, so `spawn` would not return and no timeout could be
//! kept. `clone(CLONE_NEWPID | ...)` makes the child the namespace's init
//! at once; this process keeps its pid, and `SIGKILL` to it ends every
//! process of the namespace. Why not a re-exec of zinstall as a helper:
//! the provisioning library runs in zinstalld and in tests too, whose
//! executables have no such entry.
//!
//! Between `clone` and `execve` the child runs [`child`], which makes
//! only system calls, on values all made before the clone: no
//! allocation, no lock, nothing another thread may have held.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use super::in_root::{InRoot, InRootError, RunEnd};
use super::linux::cloexec_from;

/// The steps the child reports by their index when one fails.
const STEPS: &[&str] = &[
    "place the command's descriptors",
    "make every mount private (mount --make-rprivate /)",
    "bind the root onto itself (mount --rbind)",
    "enter the root (chdir)",
    "check the root is the directory asked for",
    "pivot_root",
    "detach the host's root (umount2)",
    "mount /proc",
    "mount /sys read-only",
    "mount a tmpfs on /dev",
    "make /dev's nodes",
    "mount a tmpfs on /tmp",
    "exec the command",
    "reset the signal mask",
    "make /proc/sys read-only",
    "drop capabilities (PR_CAPBSET_DROP)",
];

const PLACE: u32 = 0;
const PRIVATE: u32 = 1;
const BIND: u32 = 2;
const CHDIR: u32 = 3;
const SAME: u32 = 4;
const PIVOT: u32 = 5;
const DETACH: u32 = 6;
const PROC: u32 = 7;
const SYS: u32 = 8;
const DEV: u32 = 9;
const NODES: u32 = 10;
const TMP: u32 = 11;
const EXEC: u32 = 12;
const SIGMASK: u32 = 13;
const PROC_RO: u32 = 14;
const CAPS: u32 = 15;

/// The capabilities the command keeps (what a container runtime's
/// default leaves root, without `CAP_MKNOD` and `CAP_NET_RAW`): enough to
/// own, chmod and write any file of the guest, set ids and bind low
/// ports, and nothing that reaches past the guest (mounts, devices,
/// modules, raw I/O, the clock, other processes' memory). The image's
/// own programs run with them, and an image may be hostile.
const KEPT_CAPS: [libc::c_int; 13] = [
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    2,  // CAP_DAC_READ_SEARCH
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    5,  // CAP_KILL
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    8,  // CAP_SETPCAP
    10, // CAP_NET_BIND_SERVICE
    18, // CAP_SYS_CHROOT
    29, // CAP_AUDIT_WRITE
    31, // CAP_SETFCAP
];

/// Past the last capability any kernel defines yet; dropping one the
/// kernel lacks fails with EINVAL, which ends the loop.
const CAP_SCAN_END: libc::c_int = 64;

/// The namespaces the command gets: its own mount table, PID 1 of its
/// own PIDs, a network of a loopback that is down, its own host name
/// and IPC objects.
const NAMESPACES: libc::c_int = libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC;

/// What the child needs, made before the clone.
struct Prepared {
    root: CString,
    dev: libc::dev_t,
    ino: libc::ino_t,
    argv: Vec<*const libc::c_char>,
    envp: [*const libc::c_char; 4],
    stdin: RawFd,
    output: RawFd,
    script: Option<RawFd>,
    report: RawFd,
    empty_mask: libc::sigset_t,
}

/// Runs `r.argv` inside `r.root` (see the module documentation) and
/// waits for it, at most `r.timeout`.
pub fn run_in_root(r: &InRoot<'_>) -> Result<RunEnd, InRootError> {
    let fail = |step: &'static str| {
        move |error: io::Error| InRootError { step, error }
    };
    let root = crate::cstr(r.root).map_err(fail("the root's path"))?;
    // SAFETY: stat is plain data; zeroed is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a C string and an out pointer.
    crate::check(unsafe { libc::lstat(root.as_ptr(), &mut st) })
        .map_err(fail("stat the root"))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(fail("stat the root")(io::Error::from_raw_os_error(
            libc::ENOTDIR,
        )));
    }
    let args: Vec<CString> = r
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| fail("the command's arguments")(e.into()))?;
    if args.is_empty() {
        return Err(fail("the command's arguments")(io::Error::from(
            io::ErrorKind::InvalidInput,
        )));
    }
    let mut argv: Vec<*const libc::c_char> =
        args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let stdin = open_null().map_err(fail("open /dev/null"))?;
    let script = match r.script {
        Some(s) => Some(memfd(s).map_err(fail("hold the script (memfd)"))?),
        None => None,
    };
    let (report_r, report_w) = pipe().map_err(fail("pipe"))?;
    // SAFETY: sigset_t is plain data; sigemptyset fills it.
    let mut empty_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: an out pointer to a sigset_t.
    unsafe { libc::sigemptyset(&mut empty_mask) };
    let p = Prepared {
        root,
        dev: st.st_dev,
        ino: st.st_ino,
        argv,
        envp: [
            c"PATH=/usr/sbin:/usr/bin:/sbin:/bin".as_ptr(),
            c"HOME=/root".as_ptr(),
            c"LANG=C".as_ptr(),
            std::ptr::null(),
        ],
        stdin: stdin.as_raw_fd(),
        output: r.output.as_raw_fd(),
        script: script.as_ref().map(|s| s.as_raw_fd()),
        report: report_w.as_raw_fd(),
        empty_mask,
    };
    // SAFETY: clone with no new stack acts as fork, the child in new
    // namespaces; the child runs only `child`, which makes system calls
    // on `p` (made above) and never returns.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (NAMESPACES | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid == 0 {
        child(&p);
    }
    if pid < 0 {
        return Err(fail("clone into new namespaces")(
            io::Error::last_os_error(),
        ));
    }
    let pid = pid as libc::pid_t;
    drop(report_w);
    if let Some((step, errno)) = read_report(&report_r) {
        reap(pid);
        return Err(InRootError {
            step: STEPS.get(step as usize).copied().unwrap_or("set up"),
            error: io::Error::from_raw_os_error(errno),
        });
    }
    Ok(wait(pid, r.timeout, r.cancelled))
}

/// `/dev/null` of this host, for the command's standard input.
fn open_null() -> io::Result<OwnedFd> {
    // SAFETY: a C string literal and flags.
    let fd = unsafe {
        libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just opened and is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A memory file holding `bytes`.
fn memfd(bytes: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: a C string literal and flags.
    let fd = unsafe {
        libc::memfd_create(c"zinstall-run".as_ptr(), libc::MFD_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just made and is ours alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(fd);
    io::Write::write_all(&mut f, bytes)?;
    Ok(f.into())
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: an out array of two descriptors.
    crate::check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both were just made and are ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What the child wrote before it failed: (step, errno); `None` when the
/// pipe closed empty, at the command's `execve`.
fn read_report(r: &OwnedFd) -> Option<(u32, i32)> {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reads into the rest of buf.
        let n = unsafe {
            libc::read(
                r.as_raw_fd(),
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
            )
        };
        if n < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    (got == buf.len()).then(|| {
        let step = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let errno = i32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
        (step, errno)
    })
}

/// Waits for `pid` to end, at most `timeout` and while `cancelled` says
/// no; past it, or once cancelled, kills it (and so its whole PID
/// namespace) and reaps it.
fn wait(
    pid: libc::pid_t,
    timeout: Duration,
    cancelled: Option<&(dyn Fn() -> bool + Sync)>,
) -> RunEnd {
    let deadline = Instant::now() + timeout;
    // SAFETY: a system call with integer arguments.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let pidfd = (pidfd >= 0).then(|| {
        // SAFETY: the descriptor was just made and is ours alone.
        unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) }
    });
    loop {
        if let Some(end) = try_reap(pid) {
            return end;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let end = if left.is_zero() {
            Some(RunEnd::TimedOut)
        } else if cancelled.is_some_and(|c| c()) {
            Some(RunEnd::Cancelled)
        } else {
            None
        };
        if let Some(end) = end {
            // SAFETY: kill takes no pointers; pid is our unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            reap(pid);
            return end;
        }
        // Cancellation is a flag, not a descriptor: look at it often.
        let left = match cancelled {
            Some(_) => left.min(Duration::from_millis(100)),
            None => left,
        };
        match &pidfd {
            Some(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.as_millis().clamp(1, 60_000) as libc::c_int;
                // SAFETY: one pollfd.
                unsafe { libc::poll(&mut pfd, 1, ms) };
            }
            // Kernels before 5.3: look again shortly.
            None => std::thread::sleep(left.min(Duration::from_millis(20))),
        }
    }
}

/// How `pid` ended, if it has.
fn try_reap(pid: libc::pid_t) -> Option<RunEnd> {
    let mut status = 0;
    // SAFETY: waits for our own child without blocking.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if r == pid {
        Some(if libc::WIFEXITED(status) {
            RunEnd::Exited(libc::WEXITSTATUS(status))
        } else {
            RunEnd::Signalled(libc::WTERMSIG(status))
        })
    } else if r < 0
        && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted
    {
        // Not our child any more (reaped elsewhere): nothing to wait for.
        Some(RunEnd::Signalled(0))
    } else {
        None
    }
}

/// Waits for `pid` to end.
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0
            || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted
        {
            return;
        }
    }
}

/// In the cloned child: reports `step` and errno to the parent, and ends.
fn report(p: &Prepared, step: u32) -> ! {
    // SAFETY: errno is this thread's; reading it is async-signal-safe.
    let errno = unsafe { *libc::__errno_location() };
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&step.to_ne_bytes());
    buf[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: write and _exit are async-signal-safe; buf is on our stack.
    unsafe {
        libc::write(p.report, buf.as_ptr() as *const libc::c_void, buf.len());
        libc::_exit(127)
    }
}

/// `mount(2)` with C strings.
///
/// SAFETY (for callers): every pointer is a C string or null.
unsafe fn mount(
    src: &CStr,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> bool {
    // SAFETY: C strings or null, as mount(2) takes them.
    unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), CStr::as_ptr),
            flags,
            data.map_or(std::ptr::null(), |d| {
                d.as_ptr() as *const libc::c_void
            }),
        ) == 0
    }
}

/// Whether the last call failed because its target is not in the root
/// (the root has no `/proc`, say): that mount is left out.
fn missing() -> bool {
    // SAFETY: reads this thread's errno.
    let e = unsafe { *libc::__errno_location() };
    e == libc::ENOENT || e == libc::ENOTDIR
}

/// The cloned child, from `clone` to `execve`: only system calls on
/// `p`'s values and static strings.
fn child(p: &Prepared) -> ! {
    const FS_FLAGS: libc::c_ulong =
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: every call below is a system call (async-signal-safe) on
    // descriptors and C strings made before the clone, or on literals.
    unsafe {
        // The namespace dies with the thread that waits for it.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::sigprocmask(
            libc::SIG_SETMASK,
            &p.empty_mask,
            std::ptr::null_mut(),
        ) != 0
        {
            report(p, SIGMASK);
        }
        // Rust ignores SIGPIPE; the command gets the default, as from
        // std's Command.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        place(p);
        if !mount(c"none", c"/", None, libc::MS_REC | libc::MS_PRIVATE, None) {
            report(p, PRIVATE);
        }
        let root = p.root.as_c_str();
        if !mount(root, root, None, libc::MS_BIND | libc::MS_REC, None) {
            report(p, BIND);
        }
        if libc::chdir(root.as_ptr()) != 0 {
            report(p, CHDIR);
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::stat(c".".as_ptr(), &mut st) != 0
            || st.st_dev != p.dev
            || st.st_ino != p.ino
        {
            *libc::__errno_location() = libc::EXDEV;
            report(p, SAME);
        }
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr())
            != 0
        {
            report(p, PIVOT);
        }
        if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 {
            report(p, DETACH);
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            report(p, CHDIR);
        }
        // From here paths resolve in the root: a symlink the tree holds
        // leads only within it.
        if !mount(c"proc", c"/proc", Some(c"proc"), FS_FLAGS, None)
            && !missing()
        {
            report(p, PROC);
        }
        // Sysctls check only that the writer is uid 0, which the command
        // is: kept read-only, with the kernel's trigger file.
        for f in [c"/proc/sys", c"/proc/sysrq-trigger"] {
            read_only(p, f);
        }
        if !mount(
            c"sysfs",
            c"/sys",
            Some(c"sysfs"),
            FS_FLAGS | libc::MS_RDONLY,
            None,
        ) && !missing()
        {
            report(p, SYS);
        }
        if mount(
            c"tmpfs",
            c"/dev",
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(c"mode=0755,size=64k"),
        ) {
            dev_nodes(p);
        } else if !missing() {
            report(p, DEV);
        }
        if !mount(
            c"tmpfs",
            c"/tmp",
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(c"mode=1777"),
        ) && !missing()
        {
            report(p, TMP);
        }
        drop_caps(p);
        libc::execve(p.argv[0], p.argv.as_ptr(), p.envp.as_ptr());
        report(p, EXEC)
    }
}

/// Binds `path` (of the new `/proc`) onto itself read-only; left out
/// where there is none.
fn read_only(p: &Prepared, path: &CStr) {
    const RO: libc::c_ulong = libc::MS_BIND
        | libc::MS_REMOUNT
        | libc::MS_RDONLY
        | libc::MS_NOSUID
        | libc::MS_NODEV
        | libc::MS_NOEXEC;
    // SAFETY: C string literals, as mount(2) takes them.
    unsafe {
        if !mount(path, path, None, libc::MS_BIND | libc::MS_REC, None) {
            if missing() {
                return;
            }
            report(p, PROC_RO);
        }
        if !mount(c"none", path, None, RO, None) {
            report(p, PROC_RO);
        }
    }
}

/// Drops every capability but [`KEPT_CAPS`] from the bounding set: root's
/// `execve` then gives the command those alone.
fn drop_caps(p: &Prepared) {
    for cap in 0..CAP_SCAN_END {
        if KEPT_CAPS.contains(&cap) {
            continue;
        }
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            // SAFETY: reads this thread's errno.
            if unsafe { *libc::__errno_location() } == libc::EINVAL {
                return;
            }
            report(p, CAPS);
        }
    }
}

/// Gives the command its descriptors: 0 `/dev/null`, 1 and 2 the output,
/// 3 the script; every other one is closed at exec.
fn place(p: &Prepared) {
    let wanted = [Some(p.stdin), Some(p.output), Some(p.output), p.script];
    // Above every target first: a source may be one of them.
    let mut high = [-1; 4];
    for (h, fd) in high.iter_mut().zip(wanted) {
        if let Some(fd) = fd {
            // SAFETY: fcntl on a descriptor made before the clone.
            *h = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
            if *h < 0 {
                report(p, PLACE);
            }
        }
    }
    for (to, h) in high.iter().enumerate() {
        // SAFETY: dup2 of a descriptor just made; the copy has no
        // close-on-exec flag.
        if *h >= 0 && unsafe { libc::dup2(*h, to as RawFd) } < 0 {
            report(p, PLACE);
        }
    }
    cloexec_from(if p.script.is_some() { 4 } else { 3 });
}

/// Fills the tmpfs on `/dev` with the nodes a command expects.
fn dev_nodes(p: &Prepared) {
    const NODES_MADE: [(&CStr, u32, u32); 6] = [
        (c"/dev/null", 1, 3),
        (c"/dev/zero", 1, 5),
        (c"/dev/full", 1, 7),
        (c"/dev/random", 1, 8),
        (c"/dev/urandom", 1, 9),
        (c"/dev/tty", 5, 0),
    ];
    const LINKS: [(&CStr, &CStr); 4] = [
        (c"/proc/self/fd", c"/dev/fd"),
        (c"/proc/self/fd/0", c"/dev/stdin"),
        (c"/proc/self/fd/1", c"/dev/stdout"),
        (c"/proc/self/fd/2", c"/dev/stderr"),
    ];
    // SAFETY: umask, mknod and symlink are system calls on literals.
    unsafe {
        let old = libc::umask(0);
        for (path, major, minor) in NODES_MADE {
            let dev = libc::makedev(major, minor);
            if libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, dev) != 0 {
                report(p, NODES);
            }
        }
        for (target, link) in LINKS {
            if libc::symlink(target.as_ptr(), link.as_ptr()) != 0 {
                report(p, NODES);
            }
        }
        libc::umask(old);
    }
}
