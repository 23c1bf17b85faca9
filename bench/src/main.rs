//! `cargo run --release -p zinstall-bench -- ...`: see bench/README.md.
//!
//! The arguments of each command and the dispatch to its module.

// The benchmark makes and reads its own trees by path: it is no part
// of the product.
#![allow(clippy::disallowed_methods)]
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use zinstall_tune::peers;
use zinstall_tune::trees::{self, Shape};

mod archives;
mod common;
mod composefs;
mod composefs_guests;
mod copy;
mod customize;
mod customize_check;
mod customize_setup;
mod daemon;
mod install;
mod model;
mod oci;
mod plot;
mod provision;
mod qcow2;
mod sweep;
mod unpack;
mod update;
mod update_image;
mod walk;

use common::{source, workspace};
use copy::copy_bench;
use install::install_bench;
use provision::provision_bench;
use qcow2::{Qcow2Bench, qcow2_bench};
use sweep::sweep_bench;
use walk::walk_bench;

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
    /// A tar of a tree installed by `zinstall install`, by `zinstall
    /// install --format composefs` (a fresh store each run), the same
    /// with `--composefs-staging`, and mkfs.erofs of the unpacked tree,
    /// interleaved.
    Composefs {
        /// Timed runs of each.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The tree to tar.
        #[arg(long, default_value = "/usr/share")]
        tree: PathBuf,
        /// Where the archive, the roots and the stores go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
        /// Write every sample here as CSV.
        #[arg(long, value_name = "FILE")]
        csv: Option<PathBuf>,
    },
    /// `zinstall install --no-sync` of a tar of a tree (its manifest
    /// included) against GNU tar -xpf, interleaved.
    InstallTar {
        /// Timed runs of each.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// The tree to tar.
        #[arg(long, default_value = "/usr/share")]
        tree: PathBuf,
        /// Where the archive and the roots go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
        /// Another zinstall binary (the build before a change), timed
        /// beside it.
        #[arg(long, value_name = "BIN")]
        before: Option<PathBuf>,
    },
    /// `zinstall update` of a root installed from an OCI image of a tree
    /// to a version adding one layer (a percentage of its files
    /// changed), against a fresh install of that version.
    UpdateImage {
        /// Timed runs of each.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// The tree (the image holds it as share).
        #[arg(long, default_value = "/usr/share")]
        tree: PathBuf,
        /// Percentage of its files the new layer changes.
        #[arg(long, default_value_t = 1.0)]
        percent: f64,
        /// Where the image and roots go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
    },
    /// A three-file update, on an idle filesystem and beside a writer
    /// keeping it dirty.
    UpdateDirty {
        /// Timed runs of each.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// The tree (installed as usr/share).
        #[arg(long, default_value = "/usr/share")]
        tree: PathBuf,
        /// Where the source, the root and the dirty file go.
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
        #[arg(long, default_value_t = zinstall_engine::tunables::DEFAULT_COPY_THREADS)]
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
    /// The same Debian root customised the same way by virt-customize
    /// (per guest, through its appliance) and by zinstall provision
    /// (100 guests), timed; then one guest of each compared file by file.
    Customize {
        /// Guests zinstall provisions (and virt-customize's time is
        /// extrapolated to).
        #[arg(long, default_value_t = 100)]
        guests: usize,
        /// Guests virt-customize customises, timed one by one (each boots
        /// an appliance: tens of seconds under TCG).
        #[arg(long, default_value_t = 5)]
        virt_guests: usize,
        /// Timed runs of each zinstall provision.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// A Linux root with /etc/passwd, /etc/shadow, zoneinfo, systemd
        /// and a user `debian` (default: a debootstrap'd bookworm
        /// minbase, made once under --scratch).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Where the root, images, guests and results go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
    },
    /// 100 guests of one Debian root in composefs form (each mounted
    /// for its identity, and with --keep-identity) beside tree guests of
    /// the same image, on ext4 on a direct-I/O loop device: wall time
    /// after the first build, and new disk use per guest (df and du).
    ComposefsGuests {
        /// Composefs guests per provision.
        #[arg(long, default_value_t = 100)]
        guests: usize,
        /// Tree guests per provision (each a full copy of the root).
        #[arg(long, default_value_t = 10)]
        tree_guests: usize,
        /// Timed runs of each.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The root filesystem to provision from (tarred once; default:
        /// the debootstrap'd Debian root bench/boot makes).
        #[arg(long, default_value = "/var/tmp/zinstall-boot/root")]
        root: PathBuf,
        /// Size of the loop-backed ext4, GiB (sparse).
        #[arg(long, default_value_t = 16)]
        gib: u64,
        /// Where the tar and the loop file go.
        #[arg(long, default_value = "/var/tmp/zinstall-bench")]
        scratch: PathBuf,
        /// The zinstall binary.
        #[arg(long)]
        zinstall: Option<PathBuf>,
    },
    /// The serial 8 KiB baseline copy (used by `copy`).
    SerialCopy { src: PathBuf, dst: PathBuf },
}

fn main() -> ExitCode {
    // The binaries measured raise theirs too: the same limits for both.
    let _kept = zinstall_engine::descriptors::raise_limit();
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
        Cmd::Composefs {
            runs,
            tree,
            scratch,
            zinstall,
            csv,
        } => composefs::composefs_bench(
            runs,
            &tree,
            &scratch,
            &zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall")),
            csv.as_deref(),
        ),
        Cmd::InstallTar {
            runs,
            tree,
            scratch,
            zinstall,
            before,
        } => update_image::install_tar(
            runs,
            &tree,
            &scratch,
            &zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall")),
            before.as_deref(),
        ),
        Cmd::UpdateImage {
            runs,
            tree,
            percent,
            scratch,
            zinstall,
        } => update_image::update_image(
            runs,
            &tree,
            percent,
            &scratch,
            &zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall")),
        ),
        Cmd::UpdateDirty {
            runs,
            tree,
            scratch,
            zinstall,
        } => update_image::update_dirty(
            runs,
            &tree,
            &scratch,
            &zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall")),
        ),
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
        Cmd::Customize {
            guests,
            virt_guests,
            runs,
            root,
            scratch,
            zinstall,
        } if virt_guests > 0 => customize::bench(&customize::CustomizeBench {
            guests,
            virt_guests,
            runs,
            root: root.as_deref(),
            scratch: &scratch,
            zinstall: &zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall")),
        }),
        Cmd::ComposefsGuests {
            guests,
            tree_guests,
            runs,
            root,
            gib,
            scratch,
            zinstall,
        } => composefs_guests::bench(&composefs_guests::ComposefsBench {
            guests,
            tree_guests,
            runs,
            root: &root,
            scratch: &scratch,
            zinstall: &zinstall
                .unwrap_or_else(|| workspace().join("target/release/zinstall")),
            gib,
        }),
        Cmd::Customize { .. } => {
            Err("--virt-guests: at least 1 (its guest is compared)".into())
        }
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
        } => zinstall_tune::sweep::list(&walkers)
            .map_err(|e| e.to_string())
            .and_then(|w| {
                walk_bench(
                    &tree,
                    scale,
                    runs,
                    only.as_deref(),
                    &w,
                    cold,
                    &scratch,
                )
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
