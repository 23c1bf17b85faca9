//! `cargo run --release -p bench -- ...`: see bench/README.md.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use zinstall_tune::peers::{self, Tool};
use zinstall_tune::report::{self, Samples};
use zinstall_tune::trees::{self, Shape};

mod archives;
mod daemon;
mod model;
mod oci;
mod plot;
mod unpack;
mod update;

#[derive(Parser, Debug)]
#[command(name = "bench", about = "zinstall benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Time zinstall copy against cp -a, tar | tar, rsync -aH, xcp, fcp and a
    /// serial 8 KiB copy, interleaved, on one tree.
    Copy {
        /// A generated tree (usr, store, sparse) or a directory.
        #[arg(long, default_value = "usr")]
        tree: String,
        /// Scale of a generated tree.
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Timed runs per tool.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Tools, comma-separated: zinstall, zinstall-sync (with --sync),
        /// zinstall-always (--writeback always), zinstall1x1, zinstall-wN (N walkers, the rest default), before
        /// (--before's binary),
        /// recorded (with --statemap), bpftraced (under zinstall trace,
        /// root only), noprobes (built without USDT probes), cp, tar,
        /// rsync, xcp, fcp, serial8k (default: all but zinstall-wN,
        /// recorded, bpftraced and noprobes; before with --before).
        #[arg(long)]
        tools: Option<String>,
        /// Also time the tree with every file empty (the metadata floor).
        #[arg(long)]
        floor: bool,
        /// Where sources, copies and results go (same filesystem as the
        /// source for a fair comparison).
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
        /// Another zinstall binary (the build before a change) to time
        /// at its defaults beside this one, as `zinstall before`.
        #[arg(long, value_name = "BIN")]
        before: Option<PathBuf>,
    },
    /// How many workers the walkers can feed: their entries/s with the
    /// jobs discarded (walk-only, once per --walkers count) beside one
    /// worker's full copy (COPY_THREADS=1), interleaved, on one tree.
    Walk {
        /// A generated tree (usr, store, sparse) or a directory.
        #[arg(long, default_value = "usr")]
        tree: String,
        /// Scale of a generated tree.
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Timed runs of each.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Time only `walk` or only `copy` (to profile one of them).
        #[arg(long)]
        only: Option<String>,
        /// Walker counts of the walk-only runs (COPY_WALKERS), e.g. 1,2.
        #[arg(long, default_value = "1")]
        walkers: String,
        /// Drop the page cache before each run (root only) instead of
        /// warming the source.
        #[arg(long)]
        cold: bool,
        /// Where generated sources, the destinations and results go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
    },
    /// The walk's critical-path model of a tree: with a walker's cost per
    /// directory and per entry (from `bench walk`), the time one walker
    /// takes, the longest chain of directories that must be read one
    /// after another, and the bounds on W walkers' time and on how many
    /// workers they feed.
    Model {
        /// A generated tree (usr, store, sparse, huge) or a directory.
        #[arg(long, default_value = "usr")]
        tree: String,
        /// Scale of a generated tree.
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// A walker's CPU per directory, in microseconds.
        #[arg(long)]
        dir_us: f64,
        /// A walker's CPU per entry, in microseconds.
        #[arg(long)]
        entry_us: f64,
        /// One worker's copy rate on this tree, entries per second.
        #[arg(long)]
        worker_rate: f64,
        /// Where generated sources go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
    },
    /// Generate a tree.
    Gen {
        /// usr, store, sparse or huge.
        #[arg(long)]
        tree: Shape,
        /// Where (must not exist).
        #[arg(long)]
        out: PathBuf,
        /// Size factor.
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Every file empty.
        #[arg(long)]
        empty: bool,
    },
    /// Time unpacking a tar (a layer of FILES × SIZE bytes, or of --tree),
    /// plain and compressed: zinstall with its workers (and with one,
    /// --serial) against GNU tar -xf, each also to the end of a sync -f.
    Unpack {
        /// Tar this directory (e.g. /usr/share) instead of a generated
        /// layer.
        #[arg(long)]
        tree: Option<PathBuf>,
        /// Files in the layer.
        #[arg(long, default_value_t = 10_000)]
        files: usize,
        /// Bytes per file.
        #[arg(long, default_value_t = 200_000)]
        size: usize,
        /// Timed runs per contender.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Workers for the parallel runs.
        #[arg(long, default_value_t = 8)]
        threads: usize,
        /// Compressions, comma-separated, each timed in the same run:
        /// none, gz, zst.
        #[arg(long, default_value = "none")]
        compress: String,
        /// Also zinstall with one worker.
        #[arg(long)]
        serial: bool,
        /// zinstall's COPY_WRITEBACK values, comma-separated, each timed
        /// as a contender of its own (sync: flushed as it goes, as an
        /// install is).
        #[arg(long, default_value = "sync")]
        writeback: String,
        /// Where the layer and the roots go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
    },
    /// Time provisioning 8 guests: disks from a zstd sparse image (first
    /// time, cached, and the naive way), trees from a rootfs tar.zst, and
    /// native qcow2 reading against qemu-img convert.
    Provision {
        /// Guests per provisioning.
        #[arg(long, default_value_t = 8)]
        guests: usize,
        /// Timed runs of each.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Scale of the sparse disk (1.0 = 1.6 GiB apparent).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Also on an XFS loop filesystem mounted here (reflink).
        #[arg(long)]
        xfs: Option<PathBuf>,
        /// Where images, caches and guests go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
        /// Only the qcow2 comparison: skip the guest and tree runs.
        #[arg(long)]
        qcow2_only: bool,
        /// Virtual size of the qcow2 image, GiB.
        #[arg(long, default_value_t = 3)]
        qcow2_gib: u64,
        /// Share of the qcow2 image's virtual size holding data.
        #[arg(long, default_value_t = 0.3)]
        qcow2_data: f64,
        /// Another zinstall binary (an older build) timed in the same
        /// qcow2 runs, as `zinstall (other)`.
        #[arg(long)]
        other: Option<PathBuf>,
        /// Seconds to wait before each qcow2 run, once the previous
        /// output is removed and flushed and the image read: long enough
        /// for a VM that reports free memory to its host (virtio-balloon
        /// free page reporting, after 2 s) to have handed back what the
        /// removal freed, so that every run starts from the same state,
        /// whatever ran before it. 0: start at once.
        #[arg(long, default_value_t = 3.0)]
        settle: f64,
        /// Busy processes (`yes > /dev/null`) kept running through the
        /// qcow2 runs: the machine under load. 0: quiet.
        #[arg(long, default_value_t = 0)]
        load: usize,
    },
    /// Sweep COPY_THREADS x COPY_BATCH on a tree, with the peers in the
    /// same run; CSV, Markdown and charts (SVG, PNG).
    Sweep {
        /// A generated tree (usr, store, sparse) or a directory.
        #[arg(long, default_value = "usr")]
        tree: String,
        /// Scale of a generated tree.
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// COPY_THREADS values.
        #[arg(long, default_value = "1,2,4,8,16,32")]
        threads: String,
        /// COPY_BATCH values.
        #[arg(long, default_value = "1,8,32,128,512")]
        batch: String,
        /// Timed runs per point.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Peers in the same run: cp, tar, rsync, xcp, fcp, serial8k.
        #[arg(long, default_value = "cp,tar,rsync,xcp,fcp,serial8k")]
        peers: String,
        /// Also time the default point and cp -a on the tree with every
        /// file empty: the metadata floor.
        #[arg(long)]
        floor: bool,
        /// Drop the page cache before each run (root only) instead of
        /// warming the source.
        #[arg(long)]
        cold: bool,
        /// Where sources, copies and results go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// Copy the results (CSV, Markdown, charts) here too.
        #[arg(long)]
        keep: Option<PathBuf>,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
    },
    /// Time a seed-sized zone install (a /usr-like tree with the default
    /// link rules, plus a baseline) at the default tunables against one
    /// worker taking batches of one, and without the final flush
    /// (--no-sync).
    Install {
        /// Timed runs of each.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Where trees, archives and zonepaths go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
    },
    /// zinstall update after a percentage of a tree's files changed,
    /// against a fresh install and rsync -aH --delete --link-dest.
    Update {
        /// Timed runs of each.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// The tree (installed as usr/share).
        #[arg(long, default_value = "/usr/share")]
        tree: PathBuf,
        /// Percentage of its files changed, removed or added.
        #[arg(long, default_value_t = 1.0)]
        percent: f64,
        /// Where sources and zonepaths go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
    },
    /// Eight concurrent seed installs, and eight provisions of one image,
    /// through one zinstalld against eight zinstall processes: wall time,
    /// peak threads, peak RSS.
    Daemon {
        /// Timed runs of each.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Concurrent clients.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// The daemon's worker budget (its copy_threads); the processes
        /// run at the default COPY_THREADS.
        #[arg(long, default_value_t = copier::tunables::DEFAULT_COPY_THREADS)]
        budget: usize,
        /// Where trees, images and zonepaths go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The directory holding zinstall and zinstalld.
        #[arg(long)]
        bin: Option<PathBuf>,
        /// Which series to run: `jobs` (the installs and provisions) and
        /// `granted` (a granted copy's own process against root's copy).
        #[arg(long, value_delimiter = ',', default_value = "jobs,granted")]
        series: Vec<daemon::Series>,
    },
    /// An OCI image of a real tree in three layers (made with umoci, upper
    /// layers deleting some of the lower ones'), installed by zinstall
    /// against `umoci unpack`, interleaved; the roots are verified equal.
    Oci {
        /// Timed runs of each.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The tree split into the layers.
        #[arg(long, default_value = "/usr/share")]
        tree: PathBuf,
        /// Where the image, roots and bundles go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
    },
    /// The serial 8 KiB baseline copy (used by `copy`).
    SerialCopy { src: PathBuf, dst: PathBuf },
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> ExitCode {
    // The binaries measured raise theirs too: the same limits for both.
    let _kept = copier::descriptors::raise_limit();
    let cli = Cli::parse();
    let r = match cli.command {
        Cmd::Model {
            tree,
            scale,
            dir_us,
            entry_us,
            worker_rate,
            scratch,
        } => source(&tree, scale, false, &scratch)
            .and_then(|src| model::print(&src, dir_us, entry_us, worker_rate)),
        Cmd::Gen {
            tree,
            out,
            scale,
            empty,
        } => trees::generate(tree, &out, scale, empty)
            .map(|s| println!("{}: {s:?}", out.display()))
            .map_err(|e| format!("{}: {e}", out.display())),
        Cmd::Unpack {
            tree,
            files,
            size,
            runs,
            threads,
            compress,
            serial,
            writeback,
            scratch,
        } => unpack::UnpackBench {
            tree: tree.as_deref(),
            files,
            size,
            runs,
            threads,
            compress: &compress,
            serial,
            writeback: &writeback,
            scratch: &scratch,
        }
        .run(),
        Cmd::Provision {
            guests,
            runs,
            scale,
            xfs,
            scratch,
            zinstall,
            qcow2_only,
            qcow2_gib,
            qcow2_data,
            other,
            settle,
            load,
        } => {
            let z = zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall"));
            let q = Qcow2Bench {
                runs,
                gib: qcow2_gib,
                data: qcow2_data,
                other,
                settle: std::time::Duration::from_secs_f64(settle.max(0.0)),
                load,
            };
            if qcow2_only {
                qcow2_bench(&z, &q, &scratch)
            } else {
                provision_bench(
                    guests,
                    runs,
                    scale,
                    xfs.as_deref(),
                    &scratch,
                    z.clone(),
                )
                .and_then(|()| qcow2_bench(&z, &q, &scratch))
            }
        }
        Cmd::Install {
            runs,
            scratch,
            zinstall,
        } => install_bench(runs, &scratch, zinstall),
        Cmd::Update {
            runs,
            tree,
            percent,
            scratch,
            zinstall,
        } => update::bench(
            runs,
            &tree,
            percent,
            &scratch,
            &zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall")),
        ),
        Cmd::Oci {
            runs,
            tree,
            scratch,
            zinstall,
        } => oci::bench(
            runs,
            &tree,
            &scratch,
            &zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall")),
        ),
        Cmd::Daemon {
            runs,
            clients,
            budget,
            scratch,
            bin,
            series,
        } => daemon::run(
            runs,
            clients,
            budget,
            &scratch,
            &bin.unwrap_or_else(|| workspace().join("target/release")),
            &series,
        ),
        Cmd::Sweep {
            tree,
            scale,
            threads,
            batch,
            runs,
            peers,
            floor,
            cold,
            scratch,
            keep,
            zinstall,
        } => sweep_bench(
            &tree,
            scale,
            &threads,
            &batch,
            runs,
            &peers,
            floor,
            cold,
            &scratch,
            keep.as_deref(),
            zinstall,
        ),
        Cmd::Walk {
            tree,
            scale,
            runs,
            only,
            walkers,
            cold,
            scratch,
        } => zinstall_tune::sweep::list(&walkers).and_then(|w| {
            walk_bench(&tree, scale, runs, only.as_deref(), &w, cold, &scratch)
        }),
        Cmd::SerialCopy { src, dst } => {
            peers::serial_copy(&src, &dst).map_err(|e| {
                format!("{} -> {}: {e}", src.display(), dst.display())
            })
        }
        Cmd::Copy {
            tree,
            scale,
            runs,
            tools,
            floor,
            scratch,
            zinstall,
            before,
        } => copy_bench(
            &tree,
            scale,
            runs,
            tools.as_deref(),
            floor,
            &scratch,
            zinstall,
            before,
        ),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A generated tree under `scratch`, made once and reused.
fn source(
    tree: &str,
    scale: f64,
    empty: bool,
    scratch: &Path,
) -> Result<PathBuf, String> {
    let Ok(shape) = tree.parse::<Shape>() else {
        let p = PathBuf::from(tree);
        return if p.is_dir() {
            Ok(p)
        } else {
            Err(format!("{tree}: not a directory or a tree name"))
        };
    };
    let name =
        format!("src-{tree}-{scale}{}", if empty { "-empty" } else { "" });
    let dir = scratch.join(name);
    let done = scratch.join(format!(
        "{}.done",
        dir.file_name().unwrap_or_default().to_string_lossy()
    ));
    if !done.exists() {
        let _ = fs::remove_dir_all(&dir);
        let s = trees::generate(shape, &dir, scale, empty)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        eprintln!("generated {}: {s:?}", dir.display());
        fs::write(&done, b"").map_err(|e| e.to_string())?;
    }
    Ok(dir)
}

#[allow(clippy::too_many_arguments)]
fn copy_bench(
    tree: &str,
    scale: f64,
    runs: usize,
    tools: Option<&str>,
    floor: bool,
    scratch: &Path,
    zinstall: Option<PathBuf>,
    before: Option<PathBuf>,
) -> Result<(), String> {
    fs::create_dir_all(scratch)
        .map_err(|e| format!("{}: {e}", scratch.display()))?;
    let zinstall =
        zinstall.unwrap_or_else(|| workspace().join("target/release/zinstall"));
    if !zinstall.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p brand",
            zinstall.display()
        ));
    }
    let bench_bin = std::env::current_exe().map_err(|e| e.to_string())?;
    let all = if before.is_some() {
        "zinstall,zinstall-sync,before,zinstall1x1,cp,tar,rsync,xcp,fcp,serial8k"
    } else {
        "zinstall,zinstall-sync,zinstall1x1,cp,tar,rsync,xcp,fcp,serial8k"
    };
    let wanted: Vec<String> = tools
        .unwrap_or(all)
        .split(',')
        .map(str::to_string)
        .collect();
    let mut list = Vec::new();
    for t in &wanted {
        match t.as_str() {
            "zinstall" => list.push(Tool::zinstall(8, 128)),
            "zinstall1x1" => list.push(Tool::zinstall(1, 1)),
            "zinstall-sync" => list.push(Tool::ZinstallSync),
            "zinstall-always" => list.push(Tool::ZinstallAlways),
            "before" => {
                let bin = before.clone().ok_or("before: give --before BIN")?;
                if !bin.is_file() {
                    return Err(format!("{}: no such binary", bin.display()));
                }
                list.push(Tool::ZinstallAt {
                    bin,
                    label: "zinstall before 8x128".into(),
                });
            }
            w if w.starts_with("zinstall-w") => {
                let n = w["zinstall-w".len()..]
                    .parse()
                    .map_err(|_| format!("{w}: zinstall-wN, N a number"))?;
                list.push(Tool::Zinstall {
                    threads: 8,
                    batch: 128,
                    walkers: Some(n),
                });
            }
            "recorded" => list.push(Tool::ZinstallRecorded),
            "bpftraced" => list.push(Tool::ZinstallBpftraced),
            "noprobes" => {
                let bin = workspace().join("target/noprobes/release/zinstall");
                if !bin.is_file() {
                    return Err(format!(
                        "{}: build it first: cargo build --release -p brand \
                         --no-default-features --target-dir target/noprobes",
                        bin.display()
                    ));
                }
                list.push(Tool::ZinstallNoProbes(bin));
            }
            "cp" => list.push(Tool::Cp),
            "tar" => list.push(Tool::Tar),
            "rsync" => list.push(Tool::Rsync),
            "serial8k" => list.push(Tool::Serial8k),
            "xcp" | "fcp" => list.extend(optional_peer(t)),
            other => return Err(format!("unknown tool {other}")),
        }
    }
    let mut trees =
        vec![(tree.to_string(), source(tree, scale, false, scratch)?)];
    if floor {
        trees.push((
            format!("{tree} (empty files)"),
            source(tree, scale, true, scratch)?,
        ));
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = scratch.join(format!("results-{stamp}"));
    fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    for (label, src) in trees {
        let bytes =
            peers::warm(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        eprintln!(
            "{label}: {} ({bytes} bytes), {runs} runs of {} tools",
            src.display(),
            list.len()
        );
        let mut log = |l: &str| eprintln!("{l}");
        let mut b = zinstall_tune::sweep::Bench {
            src: &src,
            dst: scratch.join("dst"),
            zinstall: &zinstall,
            bench: &bench_bin,
            runs,
            cold: false,
            durable: true,
            log: &mut log,
        };
        let zinstall_tune::sweep::Measured {
            mut samples,
            wrong,
            mut durable,
        } = b.measure(&list)?;
        samples.retain(|s| !s.times.is_empty());
        durable.retain(|s| !s.times.is_empty());
        let reference = if samples.iter().any(|s| s.tool == "cp -a") {
            "cp -a"
        } else {
            "zinstall 8x128"
        };
        let mut table = report::markdown(&samples, reference);
        // The same runs, each to the end of a flush of its copy: what an
        // install that must survive a power cut waits for.
        table.push_str(&format!(
            "\nTo the disk (each run, then `sync -f` of its copy):\n\n{}",
            report::markdown(&durable, &peers::durable_name(reference))
        ));
        samples.extend(durable);
        for w in &wrong {
            table.push_str(&format!("\nNot counted, wrong copy: {w}\n"));
        }
        println!("\n{label} ({})\n\n{table}", src.display());
        let slug: String = label
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { '-' })
            .collect::<String>()
            .trim_matches('-')
            .to_string();
        fs::write(
            out.join(format!("{slug}.csv")),
            report::csv(&label, &samples),
        )
        .map_err(|e| e.to_string())?;
        fs::write(out.join(format!("{slug}.md")), &table)
            .map_err(|e| e.to_string())?;
    }
    eprintln!("results in {}", out.display());
    Ok(())
}

/// What one run of `walk_bench` did, besides its time.
#[derive(Clone, Copy, Default)]
struct WalkRun {
    entries: u64,
    bytes: u64,
    walker_blocked: std::time::Duration,
    utilization: f64,
    /// The walkers' CPU time, summed.
    walker_cpu: std::time::Duration,
    /// The busiest walker's share of the walkers' CPU time.
    top_share: f64,
    /// Time the walkers waited for a directory to read, summed.
    walker_idle: std::time::Duration,
}

fn walk_bench(
    tree: &str,
    scale: f64,
    runs: usize,
    only: Option<&str>,
    walkers: &[usize],
    cold: bool,
    scratch: &Path,
) -> Result<(), String> {
    use std::time::Instant;
    if walkers.is_empty() {
        return Err("--walkers: no walker count".into());
    }
    let copy = "copy, 1 worker";
    let walks: Vec<String> =
        walkers.iter().map(|w| format!("walk-only-w{w}")).collect();
    let mut names: Vec<&str> = Vec::new();
    let mut counts: Vec<Option<usize>> = Vec::new();
    if only != Some("copy") {
        names.extend(walks.iter().map(String::as_str));
        counts.extend(walkers.iter().copied().map(Some));
    }
    if only != Some("walk") {
        names.push(copy);
        counts.push(None);
    }
    if let Some(o) = only.filter(|o| !["walk", "copy"].contains(o)) {
        return Err(format!("--only {o}: walk or copy"));
    }
    fs::create_dir_all(scratch)
        .map_err(|e| format!("{}: {e}", scratch.display()))?;
    let src = source(tree, scale, false, scratch)?;
    let dst = scratch.join("walk-dst");
    eprintln!(
        "{}: {runs} runs of {}, {} page cache, destination {}",
        src.display(),
        names.join(", "),
        if cold { "cold" } else { "warm" },
        dst.display()
    );
    let mut done: Vec<Vec<WalkRun>> = vec![Vec::new(); names.len()];
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            let _ = fs::remove_dir_all(&dst);
            if cold {
                peers::drop_caches()?;
            } else {
                peers::sync();
                peers::warm(&src)
                    .map_err(|e| format!("{}: {e}", src.display()))?;
            }
            // One worker for the copy, and one walker: the copy as it
            // was timed before there were several. The walk-only runs
            // discard their batches in the walkers themselves.
            let tunables = copier::Tunables {
                copy_threads: 1,
                copy_walkers: counts[i].unwrap_or(1),
                ..copier::Tunables::default()
            };
            let plan = copier::Plan::new(&src, &dst)
                .tunables(tunables)
                .walk_only(counts[i].is_some());
            let t0 = Instant::now();
            let r = plan.run().map_err(|f| f.to_string())?;
            let took = t0.elapsed();
            if counts[i].is_none() {
                peers::verify_copy(&src, &dst)
                    .map_err(|e| format!("{copy} made a wrong copy: {e}"))?;
            }
            done[i].push(WalkRun {
                entries: r.stats.entries(),
                bytes: r.stats.bytes,
                walker_blocked: r.stats.walker_blocked,
                utilization: r.stats.utilization(),
                walker_cpu: r.stats.walkers.iter().map(|w| w.cpu).sum(),
                walker_idle: r.stats.walkers.iter().map(|w| w.idle).sum(),
                top_share: r
                    .stats
                    .walkers
                    .iter()
                    .map(|w| w.cpu.as_secs_f64())
                    .fold(0.0, f64::max)
                    / r.stats
                        .walkers
                        .iter()
                        .map(|w| w.cpu.as_secs_f64())
                        .sum::<f64>()
                        .max(1e-9),
            });
            Ok(took)
        },
        &mut |l| eprintln!("{l}"),
    )?;
    let _ = fs::remove_dir_all(&dst);
    let reference = if names.contains(&copy) {
        copy
    } else {
        names[0]
    };
    let mut md = format!(
        "### {} ({} page cache, destination on {})\n\n{}",
        src.display(),
        if cold { "cold" } else { "warm" },
        scratch.display(),
        report::markdown(&samples, reference)
    );
    let median = |v: &[WalkRun], f: fn(&WalkRun) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(f64::total_cmp);
        match x.len() {
            0 => 0.0,
            n if n % 2 == 1 => x[n / 2],
            n => (x[n / 2 - 1] + x[n / 2]) / 2.0,
        }
    };
    let rates: Vec<report::Rate> = samples
        .iter()
        .zip(&done)
        .map(|(s, d)| report::Rate {
            samples: s,
            entries: d.first().map_or(0, |r| r.entries),
            bytes: d.first().map_or(0, |r| r.bytes),
        })
        .collect();
    for (s, d) in samples.iter().zip(&done) {
        if d.iter().any(|r| r.entries != d[0].entries) {
            md.push_str(&format!(
                "\nThe source changed during the runs: {} counted {:?} \
                 entries.\n",
                s.tool,
                d.iter().map(|r| r.entries).collect::<Vec<_>>()
            ));
        }
        md.push_str(&format!(
            "\n{}: walkers' CPU {:.3} s (the busiest {:.0}% of it), idle \
             {:.3} s, blocked on the full queue {:.3} s; workers busy {:.0}% \
             of the wall time (medians).\n",
            s.tool,
            median(d, |r| r.walker_cpu.as_secs_f64()),
            100.0 * median(d, |r| r.top_share),
            median(d, |r| r.walker_idle.as_secs_f64()),
            median(d, |r| r.walker_blocked.as_secs_f64()),
            100.0 * median(d, |r| r.utilization),
        ));
    }
    let consumer = names.iter().position(|n| *n == copy).map(|i| &rates[i]);
    let first_walk = counts.iter().position(Option::is_some).map(|i| &rates[i]);
    if let Some(c) = consumer {
        for (r, w) in rates.iter().zip(&counts) {
            let Some(w) = w else { continue };
            let (table, ratio) = report::rates(r, c);
            md.push_str(&format!("\n{table}"));
            if let Some(x) = ratio {
                md.push_str(&format!(
                    "\n{w} walker(s) feed {x:.1} workers: walk-only \
                     entries/s over one worker's, at the medians.\n"
                ));
            }
        }
    }
    if let Some(base) = first_walk {
        let base_t = base.samples.median().as_secs_f64();
        md.push_str(&format!(
            "\n| walk-only | median s | × {} median | speed-up |\n\
             |---|---:|---:|---:|\n",
            base.samples.tool
        ));
        for (r, w) in rates.iter().zip(&counts) {
            if w.is_none() {
                continue;
            }
            let t = r.samples.median().as_secs_f64();
            md.push_str(&format!(
                "| {} | {t:.3} | {:.3} | {:.2}× |\n",
                r.samples.tool,
                t / base_t,
                base_t / t
            ));
        }
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = scratch.join(format!("results-{stamp}"));
    fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let label = src.display().to_string();
    fs::write(out.join("walk.csv"), report::csv(&label, &samples))
        .map_err(|e| e.to_string())?;
    fs::write(out.join("walk.md"), &md).map_err(|e| e.to_string())?;
    println!("\n{md}");
    eprintln!("results in {}", out.display());
    Ok(())
}

pub(crate) fn sh(cmd: &str) -> Result<std::time::Duration, String> {
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg(cmd);
    peers::time(c)
}

fn provision_bench(
    guests: usize,
    runs: usize,
    scale: f64,
    xfs: Option<&Path>,
    scratch: &Path,
    z: PathBuf,
) -> Result<(), String> {
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p brand",
            z.display()
        ));
    }
    let z = z.display().to_string();
    fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let disk_dir = source("sparse", scale, false, scratch)?;
    let raw = disk_dir.join("disk.img");
    let zst = scratch.join(format!("disk-{scale}.raw.zst"));
    if !zst.exists() {
        sh(&format!(
            "zstd -q -T0 -3 -f -o {} {}",
            zst.display(),
            raw.display()
        ))?;
    }
    let usr = source("usr", 1.0, false, scratch)?;
    let tzst = scratch.join("usr-1.tar.zst");
    if !tzst.exists() {
        sh(&format!(
            "tar --zstd --format=posix -cf {} -C {} .",
            tzst.display(),
            usr.display()
        ))?;
    }
    let n = guests;
    let mut samples: Vec<Samples> = Vec::new();
    let mut record = |name: &str, t: std::time::Duration| {
        eprintln!("  {name:<40} {:>8.3} s", t.as_secs_f64());
        match samples.iter_mut().find(|s| s.tool == name) {
            Some(s) => s.times.push(t),
            None => samples.push(Samples {
                tool: name.to_string(),
                times: vec![t],
            }),
        }
    };
    let work = scratch.join("prov");
    let mut places = vec![("ext4", work.clone())];
    if let Some(x) = xfs {
        places.push(("xfs", x.join("prov")));
    }
    for run in 0..runs {
        for (fsname, base) in &places {
            let _ = fs::remove_dir_all(base);
            fs::create_dir_all(base).map_err(|e| e.to_string())?;
            peers::sync();
            let cache = base.join("cache");
            let p = |image: &Path, out: &str| {
                format!(
                    "{z} provision {} --count {n} --out {} --cache {} > /dev/null",
                    image.display(),
                    base.join(out).display(),
                    cache.display()
                )
            };
            if *fsname == "ext4" {
                record(
                    &format!("disk: first provision ({n} guests)"),
                    sh(&p(&zst, "d1"))?,
                );
                // The first provision's writeback must not land in this one.
                peers::sync();
                record(
                    &format!("disk: cached provision ({n} guests)"),
                    sh(&p(&zst, "d2"))?,
                );
                let naive = format!(
                    "for i in $(seq 1 {n}); do zstd -q -d -f -o {}/naive-$i.raw {}; done",
                    base.display(),
                    zst.display()
                );
                peers::sync();
                record(
                    &format!("disk: naive, decompress per guest ({n})"),
                    sh(&naive)?,
                );
                // Eight full images would leave a small filesystem nearly
                // full, and slow every allocation in the rounds after.
                sh(&format!("rm -f {}/naive-*.raw", base.display()))?;
            }
            peers::sync();
            record(
                &format!("tree on {fsname}: first provision ({n} guests)"),
                sh(&p(&tzst, "t1"))?,
            );
            peers::sync();
            record(
                &format!("tree on {fsname}: cached provision ({n} guests)"),
                sh(&p(&tzst, "t2"))?,
            );
            let _ = run;
        }
    }
    let _ = fs::remove_dir_all(&work);
    if let Some(x) = xfs {
        let _ = fs::remove_dir_all(x.join("prov"));
    }
    println!(
        "\nprovision: {} ({}), {}\n\n{}",
        zst.display(),
        raw.display(),
        tzst.display(),
        report::markdown(&samples, "")
    );
    Ok(())
}

/// The qcow2 comparison's settings.
struct Qcow2Bench {
    runs: usize,
    gib: u64,
    data: f64,
    other: Option<PathBuf>,
    settle: std::time::Duration,
    load: usize,
}

/// A qcow2 image of `gib` GiB with `data` of it written by qemu-io in
/// 1 MiB extents spread evenly, from a deterministic pattern that is half
/// text and half noise (compresses about as a system disk does); then
/// its zlib- and zstd-compressed copies made by qemu-img convert -c; and
/// a chain: an overlay over the plain image (its backing file named
/// beside it, format qcow2) where another 5% of the disk is written,
/// spread over it, and 2% zeroed.
fn qcow2_images(
    q: &Qcow2Bench,
    scratch: &Path,
) -> Result<Vec<(String, PathBuf)>, String> {
    let stem = format!("q-{}g-{}", q.gib, (q.data * 100.0).round() as u64);
    let plain = scratch.join(format!("{stem}.qcow2"));
    if !plain.exists() {
        let pat = scratch.join("q-pattern.bin");
        let mut bytes = Vec::with_capacity(1 << 20);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let text = b"zinstall provisions guests from one cached image; ";
        while bytes.len() < 1 << 20 {
            for _ in 0..512 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes.push(x as u8);
            }
            for _ in 0..8 {
                bytes.extend_from_slice(&text[..64.min(text.len())]);
            }
        }
        bytes.truncate(1 << 20);
        fs::write(&pat, &bytes).map_err(|e| e.to_string())?;
        let size = q.gib << 30;
        let extents = ((size as f64 * q.data) as u64 >> 20).max(1);
        let step = (size / extents) & !0xffff;
        let mut cmds = String::new();
        for i in 0..extents {
            cmds.push_str(&format!(
                "write -q -s {} {} 1M\n",
                pat.display(),
                i * step
            ));
        }
        let cmdfile = scratch.join("q-cmds.txt");
        fs::write(&cmdfile, cmds).map_err(|e| e.to_string())?;
        let tmp = scratch.join(format!("{stem}.partial"));
        sh(&format!(
            "qemu-img create -q -f qcow2 {0} {1}G && qemu-io -f qcow2 {0} < {2} > /dev/null && mv {0} {3}",
            tmp.display(),
            q.gib,
            cmdfile.display(),
            plain.display()
        ))?;
    }
    let mut out = vec![("qcow2".to_string(), plain.clone())];
    for (label, opts) in [
        ("qcow2 zlib", "-c"),
        ("qcow2 zstd", "-c -o compression_type=zstd"),
    ] {
        let img =
            scratch.join(format!("{stem}-{}.qcow2", label.replace(' ', "-")));
        if !img.exists() {
            sh(&format!(
                "qemu-img convert -q -O qcow2 {opts} {} {}.partial && mv {1}.partial {1}",
                plain.display(),
                img.display()
            ))?;
        }
        out.push((label.to_string(), img));
    }
    let chain = scratch.join(format!("{stem}-chain.qcow2"));
    if !chain.exists() {
        let size = q.gib << 30;
        let pat = scratch.join("q-pattern.bin");
        let mut cmds = String::new();
        let extents = ((size as f64 * 0.05) as u64 >> 20).max(1);
        let step = (size / extents) & !0xffff;
        for i in 0..extents {
            // Offset from the base's extents, so that some overlap them.
            let at = i * step + step / 3;
            cmds.push_str(&format!(
                "write -q -s {} {} 1M\n",
                pat.display(),
                at & !0xffff
            ));
        }
        let zeros = ((size as f64 * 0.02) as u64 >> 20).max(1);
        let zstep = (size / zeros) & !0xffff;
        for i in 0..zeros {
            cmds.push_str(&format!("write -q -z {} 1M\n", i * zstep));
        }
        let cmdfile = scratch.join("q-chain-cmds.txt");
        fs::write(&cmdfile, cmds).map_err(|e| e.to_string())?;
        let base = plain.file_name().unwrap().to_string_lossy().into_owned();
        let tmp = scratch.join(format!("{stem}-chain.partial"));
        sh(&format!(
            "cd {0} && qemu-img create -q -f qcow2 -F qcow2 -b {1} {2} && qemu-io -f qcow2 {2} < {3} > /dev/null && mv {2} {4}",
            scratch.display(),
            base,
            tmp.display(),
            cmdfile.display(),
            chain.display()
        ))?;
    }
    out.push(("qcow2 chain of 2".to_string(), chain));
    Ok(out)
}

/// `zinstall provision IMAGE --count 1` with an empty cache (its one
/// flush included) against `qemu-img convert -O raw`, without and with a
/// `sync -f` (a syncfs of the output's filesystem, as zinstall's) after,
/// interleaved; each zinstall base checked against the image with
/// `qemu-img compare` once. zinstall's time without its flush is its
/// wall time less the flush it logs in the cache's `builds.log` (the
/// syncfs of the data, the immutable flag, the syncfs of the record and
/// the directory's fsync; older builds log less of it), from the same
/// run.
fn qcow2_bench(z: &Path, q: &Qcow2Bench, scratch: &Path) -> Result<(), String> {
    fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let images = qcow2_images(q, scratch)?;
    let mut zs = vec![("zinstall provision".to_string(), z.to_path_buf())];
    if let Some(o) = &q.other {
        zs.push(("zinstall provision (other)".to_string(), o.clone()));
    }
    let work = scratch.join("q-work");
    // Cache entries are immutable (chattr +i) when made as root.
    let clear = || {
        sh(&format!(
            "if [ -e {0} ]; then chattr -R -i {0} 2>/dev/null; rm -rf {0}; fi",
            work.display()
        ))
    };
    // The load: busy processes for the whole comparison, stopped (by
    // their own handles) when it ends, however it ends.
    struct Load(Vec<std::process::Child>);
    impl Drop for Load {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut load = Load(Vec::new());
    for _ in 0..q.load {
        load.0.push(
            std::process::Command::new("yes")
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("yes: {e}"))?,
        );
    }
    if q.load > 0 {
        eprintln!("under load: {} busy processes (yes > /dev/null)", q.load);
    }
    let mut tables = String::new();
    for (label, img) in &images {
        let mut names: Vec<String> =
            zs.iter().map(|(n, _)| n.clone()).collect();
        names.push(QEMU.into());
        names.push(QEMU_SYNC.into());
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut checked = vec![false; zs.len()];
        // Per zinstall binary: its wall times less its logged flush, and
        // the flush alone.
        let mut unsynced: Vec<Vec<std::time::Duration>> =
            vec![vec![]; zs.len()];
        let mut syncs: Vec<Vec<std::time::Duration>> = vec![vec![]; zs.len()];
        let samples = report::interleaved(
            &refs,
            q.runs,
            |i| {
                clear()?;
                fs::create_dir_all(&work).map_err(|e| e.to_string())?;
                peers::sync();
                peers::warm(img).map_err(|e| e.to_string())?;
                std::thread::sleep(q.settle);
                let out = work.join("out.raw");
                let t = match i {
                    i if i < zs.len() => {
                        let mut c = std::process::Command::new(&zs[i].1);
                        c.arg("provision")
                            .arg(img)
                            .args(["--count", "1", "--out"])
                            .arg(work.join("g"))
                            .arg("--cache")
                            .arg(work.join("c"));
                        let t = peers::time(c)?;
                        if let Some(sync) = logged_sync(&work.join("c")) {
                            eprintln!(
                                "      {} flush {:.3} s",
                                zs[i].0,
                                sync.as_secs_f64()
                            );
                            unsynced[i].push(t.saturating_sub(sync));
                            syncs[i].push(sync);
                        }
                        if !checked[i] {
                            sh(&format!(
                                "qemu-img compare -q -f qcow2 -F qcow2 {} {}",
                                img.display(),
                                work.join("g/guest-0.qcow2").display()
                            ))
                            .map_err(|e| {
                                format!("{}: wrong guest: {e}", zs[i].0)
                            })?;
                            checked[i] = true;
                        }
                        t
                    }
                    i if i == zs.len() => sh(&format!(
                        "qemu-img convert -O raw {} {}",
                        img.display(),
                        out.display()
                    ))?,
                    _ => sh(&format!(
                        "qemu-img convert -O raw {0} {1} && sync -f {1}",
                        img.display(),
                        out.display()
                    ))?,
                };
                Ok(t)
            },
            &mut |l| eprintln!("{l}"),
        )?;
        // Each side with its flush, then each without.
        let pick =
            |name: &str| samples.iter().find(|s| s.tool == name).cloned();
        let mut synced: Vec<Samples> = Vec::new();
        let mut bare: Vec<Samples> = Vec::new();
        for (i, (name, _)) in zs.iter().enumerate() {
            synced.extend(pick(name));
            if !unsynced[i].is_empty() {
                bare.push(Samples {
                    tool: format!("{name}, less its flush"),
                    times: unsynced[i].clone(),
                });
                synced.push(Samples {
                    tool: format!("{name}: its flush alone"),
                    times: syncs[i].clone(),
                });
            }
        }
        synced.extend(pick(QEMU_SYNC));
        bare.extend(pick(QEMU));
        let _ = tables.write_fmt(format_args!(
            "\n{label} ({}, {} GiB, {:.0}% data{})\n\nwith the flush to disk:\n\n{}\nwithout it:\n\n{}",
            img.display(),
            q.gib,
            q.data * 100.0,
            if q.load > 0 {
                format!(", {} busy processes", q.load)
            } else {
                String::new()
            },
            report::markdown(&synced, QEMU_SYNC),
            report::markdown(&bare, QEMU)
        ));
    }
    clear()?;
    println!("{tables}");
    Ok(())
}

const QEMU: &str = "qemu-img convert";
const QEMU_SYNC: &str = "qemu-img convert; sync -f";

/// The flush of the last build in the cache at `cache`, as its
/// `builds.log` records it (time, pid, entry, build ms, flush ms,
/// source); `None` from a build that does not record it.
fn logged_sync(cache: &Path) -> Option<std::time::Duration> {
    let log = fs::read_to_string(cache.join("builds.log")).ok()?;
    let ms = log.lines().last()?.split(' ').nth(4)?.parse::<u64>().ok()?;
    Some(std::time::Duration::from_millis(ms))
}

fn install_bench(
    runs: usize,
    scratch: &Path,
    zinstall: Option<PathBuf>,
) -> Result<(), String> {
    let z =
        zinstall.unwrap_or_else(|| workspace().join("target/release/zinstall"));
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p brand",
            z.display()
        ));
    }
    let (seed, profile) = seed_install(scratch)?;
    // Installs flush the root before they are marked complete; --no-sync
    // is the install as it was timed before that, and beside it what
    // the flush costs.
    let names = ["install 8x128", "install 1x1", "install 8x128 --no-sync"];
    let zp = scratch.join("zonepath");
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            let _ = fs::remove_dir_all(&zp);
            peers::sync();
            peers::warm(&seed).map_err(|e| e.to_string())?;
            let mut c = std::process::Command::new(&z);
            c.env("ZINSTALL_DEFAULTS", "/dev/null").arg("install");
            if i == 1 {
                c.args(["--threads", "1", "--batch", "1"]);
            }
            if i == 2 {
                c.arg("--no-sync");
            }
            c.arg("--profile").arg(&profile).arg("--zonepath").arg(&zp);
            peers::time(c)
        },
        &mut |l| eprintln!("{l}"),
    )?;
    let _ = fs::remove_dir_all(&zp);
    println!(
        "\nseed install ({})\n\n{}",
        seed.display(),
        report::markdown(&samples, "install 1x1")
    );
    Ok(())
}

/// The seed zone install's source root (a generated /usr and a baseline
/// archive, made once under `scratch`) and a profile with the shipped link
/// rules for it.
pub(crate) fn seed_install(
    scratch: &Path,
) -> Result<(PathBuf, PathBuf), String> {
    let seed = scratch.join("seedroot");
    let done = scratch.join("seedroot.done");
    if !done.exists() {
        let _ = fs::remove_dir_all(&seed);
        fs::create_dir_all(&seed).map_err(|e| e.to_string())?;
        let s = trees::generate(Shape::Usr, &seed.join("usr"), 1.0, false)
            .map_err(|e| e.to_string())?;
        eprintln!("seed /usr: {s:?}");
        fs::create_dir_all(seed.join("baseline")).map_err(|e| e.to_string())?;
        archives::archive_tar(
            &seed.join("baseline/files.tar"),
            "baseline",
            2000,
            10_000,
        )
        .map_err(|e| e.to_string())?;
        fs::write(&done, b"").map_err(|e| e.to_string())?;
    }
    // The shipped profile's link rules, on the seed tree.
    let shipped = include_str!("../../etc/zinstall/profile.toml");
    let rules: String = shipped
        .split("[[rule]]")
        .skip(1)
        .map(|r| {
            let r = r.split("\n[").next().unwrap_or("");
            format!("[[rule]]{r}\n")
        })
        .collect();
    let profile = scratch.join("seed-profile.toml");
    fs::write(&profile, format!(
        "source_root = \"{}\"\ntrees = [\"usr\"]\nlog = \"{}\"\n\n{rules}\n[baseline]\nfile = \"files.tar\"\nsearch = [\"{}\"]\nrequired = true\n",
        seed.display(),
        scratch.join("seed-install.log").display(),
        seed.join("baseline").display()
    )).map_err(|e| e.to_string())?;
    Ok((seed, profile))
}

#[allow(clippy::too_many_arguments)]
fn sweep_bench(
    tree: &str,
    scale: f64,
    threads: &str,
    batch: &str,
    runs: usize,
    peer_list: &str,
    floor: bool,
    cold: bool,
    scratch: &Path,
    keep: Option<&Path>,
    zinstall: Option<PathBuf>,
) -> Result<(), String> {
    use zinstall_tune::sweep::{self, Bench, Grid};
    fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let z =
        zinstall.unwrap_or_else(|| workspace().join("target/release/zinstall"));
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p brand",
            z.display()
        ));
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let grid = Grid {
        threads: sweep::list(threads)?,
        batches: sweep::list(batch)?,
        walkers: Vec::new(),
    };
    let mut tools = grid.tools();
    for p in peer_list.split(',').filter(|p| !p.is_empty()) {
        match p {
            "cp" => tools.push(Tool::Cp),
            "tar" => tools.push(Tool::Tar),
            "rsync" => tools.push(Tool::Rsync),
            "serial8k" => tools.push(Tool::Serial8k),
            "xcp" | "fcp" => tools.extend(optional_peer(p)),
            other => return Err(format!("unknown peer {other}")),
        }
    }
    if !tools.contains(&(Tool::zinstall(1, 1))) {
        tools.push(Tool::zinstall(1, 1));
    }
    let src = source(tree, scale, false, scratch)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = scratch.join(format!("sweep-{stamp}"));
    fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let mut log = |l: &str| eprintln!("{l}");
    eprintln!(
        "sweep of {} over {} points and {} peers, {runs} runs each",
        src.display(),
        grid.threads.len() * grid.batches.len(),
        tools.len() - grid.threads.len() * grid.batches.len()
    );
    let mut b = Bench {
        src: &src,
        dst: scratch.join("dst"),
        zinstall: &z,
        bench: &me,
        runs,
        cold,
        durable: false,
        log: &mut log,
    };
    let m = b.measure(&tools)?;
    let label = if tree.contains('/') {
        tree.to_string()
    } else {
        format!("{tree} (scale {scale})")
    };
    let mut md =
        format!("### {label}\n\n{}", report::markdown(&m.samples, "cp -a"));
    for w in &m.wrong {
        md.push_str(&format!("\nNot counted, wrong copy: {w}\n"));
    }
    if let Some((p, s)) = sweep::best(&m.samples, &grid) {
        md.push_str(&format!(
            "\nBest point: COPY_THREADS={} COPY_BATCH={}, median {:.3} s.\n",
            p.threads,
            p.batch,
            s.median().as_secs_f64()
        ));
    }
    if floor {
        let empty = source(tree, scale, true, scratch)?;
        let floor_tools = [Tool::zinstall(8, 128), Tool::Cp];
        let mut b = Bench {
            src: &empty,
            dst: scratch.join("dst"),
            zinstall: &z,
            bench: &me,
            runs,
            cold,
            durable: false,
            log: &mut log,
        };
        let f = b.measure(&floor_tools)?;
        md.push_str(&format!(
            "\n#### metadata floor: {label} with every file empty\n\n{}",
            report::markdown(&f.samples, "cp -a")
        ));
        fs::write(
            out.join("floor.csv"),
            report::csv(&format!("{label} empty"), &f.samples),
        )
        .map_err(|e| e.to_string())?;
    }
    fs::write(out.join("sweep.csv"), report::csv(&label, &m.samples))
        .map_err(|e| e.to_string())?;
    fs::write(out.join("sweep.md"), &md).map_err(|e| e.to_string())?;
    plot::sweep_charts(&out, &label, &grid, &m.samples)?;
    println!("{md}");
    if let Some(k) = keep {
        fs::create_dir_all(k).map_err(|e| e.to_string())?;
        for e in fs::read_dir(&out).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            fs::copy(e.path(), k.join(e.file_name()))
                .map_err(|e| e.to_string())?;
        }
        eprintln!("results copied to {}", k.display());
    }
    eprintln!("results in {}", out.display());
    Ok(())
}

/// The peer `name` (xcp, fcp) if installed; says so when it is not.
fn optional_peer(name: &str) -> Option<Tool> {
    let t = peers::optional_peer(&workspace(), name);
    if t.is_none() {
        eprintln!("skipping {name}: not found (see bench/README.md)");
    }
    t
}
