//! `bench daemon`: N concurrent jobs through one zinstalld against N
//! zinstall processes, interleaved: the seed zone install, and provisions
//! of one image (each round from an empty cache, so each includes one
//! build). Wall time, peak threads and peak RSS, sampled from /proc.
//! Then what a granted copy's own process costs: the seed's `/usr`
//! copied by an unprivileged caller through its grant (a job process of
//! its own) against root's copy of it (in the daemon), interleaved.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zinstall_daemon::client::Client;
use zinstall_daemon::protocol::{
    Call, CleanPath, ImageArg, InstallArgs, ProvisionArgs, Request,
};
use zinstall_tune::peers;

/// One batch of N jobs: wall time, and the peaks sampled meanwhile.
#[derive(Clone, Copy, Default)]
struct Batch {
    wall: Duration,
    threads: u64,
    rss_kib: u64,
    workers: u64,
}

/// `Threads` and `VmRSS` (KiB) of a process, and its threads named
/// `copy-*`.
fn sample(pid: u32) -> (u64, u64, u64) {
    let status =
        fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let workers = fs::read_dir(format!("/proc/{pid}/task"))
        .map(|ts| {
            ts.filter_map(|t| {
                fs::read_to_string(t.ok()?.path().join("comm")).ok()
            })
            .filter(|n| n.starts_with("copy-"))
            .count() as u64
        })
        .unwrap_or(0);
    (field("Threads:"), field("VmRSS:"), workers)
}

/// Runs `work` while sampling the processes `pids()` names every 5 ms;
/// their threads and RSS are summed per sample.
fn measured(
    pids: &(dyn Fn() -> Vec<u32> + Sync),
    work: impl FnOnce() -> Result<(), String>,
) -> Result<Batch, String> {
    let done = AtomicBool::new(false);
    let peak = Mutex::new(Batch::default());
    let t0 = Instant::now();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let (mut th, mut rss, mut w) = (0, 0, 0);
                for p in pids() {
                    let (a, b, c) = sample(p);
                    th += a;
                    rss += b;
                    w += c;
                }
                let mut pk = peak.lock().unwrap();
                pk.threads = pk.threads.max(th);
                pk.rss_kib = pk.rss_kib.max(rss);
                pk.workers = pk.workers.max(w);
                drop(pk);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let r = work();
        done.store(true, Ordering::Relaxed);
        r
    });
    let mut b = *peak.lock().unwrap();
    b.wall = t0.elapsed();
    r.map(|()| b)
}

struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        zinstall_sys::process::signal(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
    }
}

fn start(
    bin: &Path,
    dir: &Path,
    cache: &Path,
    budget: usize,
    extra: &str,
) -> Result<Daemon, String> {
    let config = dir.join("zinstalld.toml");
    let socket = dir.join("zinstalld.sock");
    fs::write(
        &config,
        format!(
            "copy_threads = {budget}\ndefaults = \"/dev/null\"\ncache = \"{}\"\n\
             socket_mode = \"0666\"\n{extra}",
            cache.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let log = fs::File::create(dir.join("zinstalld.log"))
        .map_err(|e| e.to_string())?;
    let child = Command::new(bin.join("zinstalld"))
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.join("zinstalld").display()))?;
    let t0 = Instant::now();
    while Client::connect(&socket).is_err() {
        if t0.elapsed() > Duration::from_secs(20) {
            return Err("zinstalld did not listen".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Daemon { child, socket })
}

/// N requests at once through the daemon.
fn through_daemon(d: &Daemon, calls: Vec<Call>) -> Result<(), String> {
    std::thread::scope(|s| {
        let hs: Vec<_> = calls
            .into_iter()
            .map(|call| {
                s.spawn(move || {
                    let mut c = Client::connect(&d.socket)
                        .map_err(|e| e.to_string())?;
                    c.call(
                        &Request {
                            call,
                            detach: false,
                        },
                        &mut |_| {},
                        &mut |_| {},
                    )
                    .map(drop)
                    .map_err(|e| e.to_string())
                })
            })
            .collect();
        hs.into_iter().try_for_each(|h| {
            h.join().map_err(|_| "client panicked".to_string())?
        })
    })
}

/// N processes at once; their pids go to `pids` while they run.
fn processes(cmds: Vec<Command>, pids: &Mutex<Vec<u32>>) -> Result<(), String> {
    let mut children = Vec::new();
    for mut c in cmds {
        let child =
            c.stdout(Stdio::null()).spawn().map_err(|e| e.to_string())?;
        pids.lock().unwrap().push(child.id());
        children.push(child);
    }
    let mut failed = None;
    for c in children {
        let o = c.wait_with_output().map_err(|e| e.to_string())?;
        if !o.status.success() {
            failed = Some(String::from_utf8_lossy(&o.stderr).into_owned());
        }
    }
    pids.lock().unwrap().clear();
    failed.map_or(Ok(()), Err)
}

/// Removes a tree, cache entries (immutable) included.
fn clear(p: &Path) {
    if p.exists() {
        let _ = Command::new("chattr")
            .arg("-R")
            .arg("-i")
            .arg(p)
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(p);
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn table(
    title: &str,
    clients: usize,
    budget: usize,
    daemon: &[Batch],
    procs: &[Batch],
) -> String {
    let col = |bs: &[Batch], f: fn(&Batch) -> f64| {
        median(&mut bs.iter().map(f).collect::<Vec<_>>())
    };
    // (row, value, decimals shown)
    type Row = (&'static str, fn(&Batch) -> f64, usize);
    let rows: [Row; 3] = [
        ("wall (s)", |b| b.wall.as_secs_f64(), 2),
        ("peak threads", |b| b.threads as f64, 0),
        ("peak RSS (MiB)", |b| b.rss_kib as f64 / 1024.0, 0),
    ];
    let mut out = format!(
        "{title}\n\n| median of {} | zinstalld | {} processes | zinstalld / processes |\n|---|---|---|---|\n",
        daemon.len(),
        clients,
    );
    for (name, f, decimals) in rows {
        let (a, b) = (col(daemon, f), col(procs, f));
        let show = |x: f64| format!("{x:.decimals$}");
        out += &format!(
            "| {name} | {} | {} | {:.2}× |\n",
            show(a),
            show(b),
            a / b
        );
    }
    let most = daemon.iter().map(|b| b.workers).max().unwrap_or(0);
    out += &format!(
        "| copy workers, most seen | {most} (budget {budget}) | | |\n"
    );
    out
}

/// The unprivileged caller of the granted series.
const CALLER: u32 = 65534;

/// The seed's `/usr` copied through the daemon by root (in the daemon,
/// with its pool) and by [`CALLER`] through a grant (in a job process of
/// its own, as that user), interleaved: the median wall time of each
/// from the client's start to its end, and their ratio.
fn granted_copies(
    runs: usize,
    bin: &Path,
    d: &Daemon,
    seed: &Path,
    granted: &Path,
) -> Result<String, String> {
    fs::create_dir_all(granted).map_err(|e| e.to_string())?;
    std::os::unix::fs::chown(granted, Some(CALLER), Some(CALLER))
        .map_err(|e| format!("{}: {e}", granted.display()))?;
    let mut walls: [Vec<f64>; 2] = Default::default();
    for run in 0..runs {
        for k in 0..2 {
            let who = (k + run) % 2;
            let dst = granted.join("copy");
            clear(&dst);
            peers::sync();
            peers::warm(seed).map_err(|e| e.to_string())?;
            let mut cmd = if who == 0 {
                Command::new(bin.join("zinstall"))
            } else {
                let mut c = Command::new("setpriv");
                c.args([
                    format!("--reuid={CALLER}"),
                    format!("--regid={CALLER}"),
                    "--clear-groups".into(),
                    "--".into(),
                ])
                .arg(bin.join("zinstall"));
                c
            };
            cmd.arg(format!("--daemon={}", d.socket.display()))
                .arg("copy")
                .arg(seed.join("usr"))
                .arg(&dst)
                .stdout(Stdio::null());
            let t0 = Instant::now();
            let o = cmd.output().map_err(|e| e.to_string())?;
            let wall = t0.elapsed().as_secs_f64();
            if !o.status.success() {
                return Err(format!(
                    "granted series, {}: {}",
                    ["root", "granted"][who],
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
            eprintln!(
                "  run {run} copy of the seed /usr, {:<8} {wall:>7.3} s",
                ["root", "granted"][who]
            );
            walls[who].push(wall);
        }
    }
    clear(&granted.join("copy"));
    let (root, mine) = (median(&mut walls[0]), median(&mut walls[1]));
    Ok(format!(
        "the seed /usr copied through zinstalld ({})\n\n\
         | median of {runs} | root's copy (in the daemon) | a granted copy (its own process, uid {CALLER}) | granted / root |\n\
         |---|---|---|---|\n\
         | wall (s) | {root:.3} | {mine:.3} | {:.2}× |\n",
        seed.join("usr").display(),
        mine / root
    ))
}

/// The series `bench daemon` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Series {
    /// N installs and N provisions through the daemon against N
    /// processes.
    Jobs,
    /// A granted copy (its own process) against root's (in the daemon).
    Granted,
}

/// `bench daemon`.
pub fn run(
    runs: usize,
    clients: usize,
    budget: usize,
    scratch: &Path,
    bin: &Path,
    series: &[Series],
) -> Result<(), String> {
    for b in ["zinstall", "zinstalld"] {
        if !bin.join(b).is_file() {
            return Err(format!(
                "{}: build it first: cargo build --release -p zinstall",
                bin.join(b).display()
            ));
        }
    }
    fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let (seed, profile) = crate::install::seed_install(scratch)?;
    let image = scratch.join("seed-usr.tar");
    if !image.exists() {
        let ok = Command::new("tar")
            .arg("-C")
            .arg(&seed)
            .args(["-cf"])
            .arg(&image)
            .arg("usr")
            .status()
            .map_err(|e| e.to_string())?
            .success();
        if !ok {
            return Err("tar of the seed /usr failed".into());
        }
    }
    let work = scratch.join("daemon-bench");
    clear(&work);
    fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let dcache = work.join("dcache");
    // The granted series' caller: nobody, with a grant over the seed and
    // its own directory.
    let granted = work.join("granted");
    let grant = format!(
        "[[grant]]\nusers = [{CALLER}]\noperations = [\"copy\"]\n\
         prefixes = [\"{}\", \"{}\"]\n",
        seed.display(),
        granted.display()
    );
    let d = start(bin, &work, &dcache, budget, &grant)?;
    let dpid = d.child.id();
    let zp = |who: &str, i: usize| work.join(format!("{who}-z{i}"));
    let out = |who: &str, i: usize| work.join(format!("{who}-g{i}"));
    let pids = Mutex::new(Vec::new());
    let mut results: [Vec<Batch>; 4] = Default::default();
    let names = [
        "installs, zinstalld",
        "installs, processes",
        "provisions, zinstalld",
        "provisions, processes",
    ];
    let job_runs = if series.contains(&Series::Jobs) {
        runs
    } else {
        0
    };
    for run in 0..job_runs {
        for k in 0..4 {
            let i = (k + run) % 4;
            for c in 0..clients {
                clear(&zp("d", c));
                clear(&zp("p", c));
                clear(&out("d", c));
                clear(&out("p", c));
            }
            clear(&dcache);
            clear(&work.join("pcache"));
            peers::sync();
            peers::warm(&seed).map_err(|e| e.to_string())?;
            // The daemon takes clean absolute paths only.
            let clean =
                |p: PathBuf| CleanPath::new(p).map_err(|e| e.to_string());
            let zonepaths = (0..clients)
                .map(|c| clean(zp("d", c)))
                .collect::<Result<Vec<_>, _>>()?;
            let outs = (0..clients)
                .map(|c| clean(out("d", c)))
                .collect::<Result<Vec<_>, _>>()?;
            let daemon_profile = clean(profile.clone())?;
            let daemon_image = ImageArg::File(clean(image.clone())?);
            let daemon_pids = || vec![dpid];
            let proc_pids = || pids.lock().unwrap().clone();
            let b = match i {
                0 => measured(&daemon_pids, || {
                    through_daemon(
                        &d,
                        (0..clients)
                            .map(|c| {
                                Call::Install(InstallArgs {
                                    zonepath: zonepaths[c].clone(),
                                    zone: None,
                                    profile: Some(daemon_profile.clone()),
                                    images: vec![],
                                    source_root: None,
                                    log: None,
                                    platform: None,
                                    format: Default::default(),
                                })
                            })
                            .collect(),
                    )
                })?,
                1 => measured(&proc_pids, || {
                    let cmds = (0..clients)
                        .map(|c| {
                            let mut cmd = Command::new(bin.join("zinstall"));
                            cmd.env(
                                zinstall_core::paths::DEFAULTS_ENV,
                                "/dev/null",
                            )
                            .env_remove("ZINSTALL_DAEMON")
                            .arg("install")
                            .arg("--profile")
                            .arg(&profile)
                            .arg("--zonepath")
                            .arg(zp("p", c));
                            cmd
                        })
                        .collect();
                    processes(cmds, &pids)
                })?,
                2 => measured(&daemon_pids, || {
                    through_daemon(
                        &d,
                        (0..clients)
                            .map(|c| {
                                Call::Provision(ProvisionArgs {
                                    image: daemon_image.clone(),
                                    out: outs[c].clone(),
                                    count: 1,
                                    name: "guest".into(),
                                    size: None,
                                    sha256: None,
                                    keep_identity: false,
                                    hostname: None,
                                    machine_id: None,
                                    ssh_host_keys: None,
                                    force: false,
                                    platform: None,
                                    max_archive_size: None,
                                    allow_devices: false,
                                    customize: None,
                                    seed: None,
                                    format: Default::default(),
                                    mount: false,
                                })
                            })
                            .collect(),
                    )
                })?,
                _ => measured(&proc_pids, || {
                    let cmds = (0..clients)
                        .map(|c| {
                            let mut cmd = Command::new(bin.join("zinstall"));
                            cmd.env(
                                zinstall_core::paths::DEFAULTS_ENV,
                                "/dev/null",
                            )
                            .env_remove("ZINSTALL_DAEMON")
                            .arg("provision")
                            .arg(&image)
                            .arg("--out")
                            .arg(out("p", c))
                            .arg("--cache")
                            .arg(work.join("pcache"));
                            cmd
                        })
                        .collect();
                    processes(cmds, &pids)
                })?,
            };
            eprintln!(
                "  run {run} {:<22} {:>7.3} s  {:>4} threads  {:>6} MiB  {} copy workers",
                names[i],
                b.wall.as_secs_f64(),
                b.threads,
                b.rss_kib / 1024,
                b.workers
            );
            results[i].push(b);
        }
    }
    let copies = if series.contains(&Series::Granted) {
        granted_copies(runs, bin, &d, &seed, &granted)?
    } else {
        String::new()
    };
    drop(d);
    clear(&work);
    println!("\n{copies}");
    if job_runs == 0 {
        return Ok(());
    }
    println!(
        "\n{}\n{}",
        table(
            &format!("{clients} concurrent seed installs ({})", seed.display()),
            clients,
            budget,
            &results[0],
            &results[1]
        ),
        table(
            &format!(
                "{clients} concurrent provisions of one image (seed /usr as a tar, empty cache each round)"
            ),
            clients,
            budget,
            &results[2],
            &results[3]
        ),
    );
    Ok(())
}
