//! `bench unpack`: zinstall's unpack of one tar, plain and compressed,
//! against GNU tar extracting the same files, interleaved; each run timed
//! to its end and to the end of a flush of what it wrote.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zinstall_archive::ArchiveKind;
use zinstall_engine::unpack::{self as archive, UnpackOptions};
use zinstall_tune::peers;
use zinstall_tune::report::{self, Samples};

use crate::archives;
use crate::common::sh;

/// What to unpack and how often.
pub struct UnpackBench<'a> {
    /// Tar this tree (`/usr/share`), instead of a generated layer.
    pub tree: Option<&'a Path>,
    /// The generated layer's files and their size.
    pub files: usize,
    pub size: usize,
    pub runs: usize,
    /// zinstall's workers.
    pub threads: usize,
    /// Compressions, each timed in the same run: none, gz, zst.
    pub compress: &'a str,
    /// Also zinstall with one worker.
    pub serial: bool,
    /// zinstall's COPY_WRITEBACK values, each a contender of its own.
    pub writeback: &'a str,
    pub scratch: &'a Path,
}

/// One contender: who unpacks which archive.
struct Contender {
    name: String,
    archive: PathBuf,
    /// zinstall's workers, or `None` for GNU tar with this flag.
    threads: Option<usize>,
    writeback: zinstall_engine::Writeback,
    tar_flag: &'static str,
}

impl UnpackBench<'_> {
    pub fn run(&self) -> Result<(), String> {
        let scratch = self.scratch;
        fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
        let (plain, expect) = self.plain_tar()?;
        let mut writebacks = Vec::new();
        for w in self.writeback.split(',') {
            let mut t = zinstall_engine::Tunables::default();
            t.set("COPY_WRITEBACK", w, Path::new("--writeback"), 0)
                .map_err(|e| e.to_string())?;
            writebacks.push(t.copy_writeback);
        }
        let mut contenders = Vec::new();
        for c in self.compress.split(',') {
            let (archive, tar_flag, suffix) = match c {
                "none" => (plain.clone(), "", ".tar"),
                "gz" => (compressed(&plain, "gz", "gzip -c")?, "-z", ".tar.gz"),
                "zst" => (
                    compressed(&plain, "zst", "zstd -q -T0 -3 -c")?,
                    "--zstd",
                    ".tar.zst",
                ),
                other => {
                    return Err(format!("--compress {other}: none, gz or zst"));
                }
            };
            let workers =
                std::iter::once(self.threads).chain(self.serial.then_some(1));
            for t in workers {
                for w in &writebacks {
                    let also = match writebacks.len() {
                        1 => String::new(),
                        _ => format!(", writeback {}", w.name()),
                    };
                    contenders.push(Contender {
                        name: format!("zinstall {t} workers {suffix}{also}"),
                        archive: archive.clone(),
                        threads: Some(t),
                        writeback: *w,
                        tar_flag,
                    });
                }
            }
            contenders.push(Contender {
                name: format!("tar {tar_flag} -xf {suffix}").replace("  ", " "),
                archive,
                threads: None,
                writeback: zinstall_engine::Writeback::Never,
                tar_flag,
            });
        }
        let names: Vec<&str> =
            contenders.iter().map(|c| c.name.as_str()).collect();
        let dst = scratch.join("unpack-dst");
        let mut flushed: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
        // CPU time (user and system) of each run: this process's for
        // zinstall, the child's for tar.
        let mut cpu: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
        let samples = report::interleaved(
            &names,
            self.runs,
            |i| {
                let c = &contenders[i];
                let _ = fs::remove_dir_all(&dst);
                fs::create_dir_all(&dst).map_err(|e| e.to_string())?;
                peers::sync();
                peers::warm(&c.archive).map_err(|e| e.to_string())?;
                let cpu0 = cpu_time();
                let t0 = Instant::now();
                match c.threads {
                    None => {
                        let mut cmd = std::process::Command::new("tar");
                        if !c.tar_flag.is_empty() {
                            cmd.arg(c.tar_flag);
                        }
                        cmd.arg("-xf").arg(&c.archive).arg("-C").arg(&dst);
                        peers::time(cmd).map_err(|e| e.to_string())?;
                    }
                    Some(t) => {
                        // As an install unpacks: flushed at its end, so
                        // each file's writeback starts as it is written.
                        let opts = UnpackOptions {
                            tunables: zinstall_engine::Tunables {
                                copy_threads: t,
                                copy_writeback: c.writeback,
                                ..zinstall_engine::Tunables::default()
                            },
                            expect,
                            durable: true,
                            ..UnpackOptions::default()
                        };
                        let root = dst.join("root");
                        fs::create_dir(&root).map_err(|e| e.to_string())?;
                        archive::unpack(&c.archive, &root, &opts)
                            .map_err(|e| e.to_string())?;
                    }
                }
                let t = t0.elapsed();
                let used = cpu_time();
                cpu[i].push((used.0 + used.1).saturating_sub(cpu0.0 + cpu0.1));
                peers::sync_fs(&dst).map_err(|e| e.to_string())?;
                let d = t0.elapsed();
                eprintln!(
                    "    {:<32} {:>8.3} s with sync -f",
                    c.name,
                    d.as_secs_f64()
                );
                flushed[i].push(d);
                Ok::<_, String>(t)
            },
            &mut |l| eprintln!("{l}"),
        )?;
        let _ = fs::remove_dir_all(&dst);
        let durable: Vec<Samples> = names
            .iter()
            .zip(flushed)
            .map(|(n, times)| Samples {
                tool: peers::durable_name(n),
                times,
            })
            .collect();
        let reference = names.iter().find(|n| n.starts_with("tar")).copied();
        let reference = reference.unwrap_or("");
        println!(
            "\nunpack {} ({})\n\n{}\nTo the disk (each run, then `sync -f` \
             of what it wrote):\n\n{}",
            plain.display(),
            self.what(),
            report::markdown(&samples, reference),
            report::markdown(&durable, &peers::durable_name(reference))
        );
        println!(
            "CPU time of each run (user and system, all threads), median, \
             and the cores it kept busy (CPU time / wall time):\n\n\
             | tool | CPU s | cores busy |\n|---|---:|---:|"
        );
        for ((n, c), w) in names.iter().zip(&cpu).zip(&samples) {
            let c = report::Samples {
                tool: n.to_string(),
                times: c.clone(),
            }
            .median();
            println!(
                "| {n} | {:.3} | {:.2} |",
                c.as_secs_f64(),
                c.as_secs_f64() / w.median().as_secs_f64().max(1e-9)
            );
        }
        Ok(())
    }

    fn what(&self) -> String {
        match self.tree {
            Some(t) => format!("a tar of {}", t.display()),
            None => format!("{} x {} bytes", self.files, self.size),
        }
    }

    /// The plain tar, made once: of the tree (a tarball, no zinstall
    /// metadata), or a generated zinstall layer.
    fn plain_tar(&self) -> Result<(PathBuf, Option<ArchiveKind>), String> {
        let scratch = self.scratch;
        if let Some(tree) = self.tree {
            let slug: String = tree
                .to_string_lossy()
                .chars()
                .map(|c| if c.is_alphanumeric() { c } else { '-' })
                .collect::<String>()
                .trim_matches('-')
                .to_string();
            let tar = scratch.join(format!("tree-{slug}.tar"));
            if !tar.exists() {
                sh(&format!(
                    "tar --format=posix -cf {0}.partial -C {1} . && mv {0}.partial {0}",
                    tar.display(),
                    tree.display()
                ))?;
            }
            return Ok((tar, None));
        }
        let layer =
            scratch.join(format!("layer-{}x{}.tar", self.files, self.size));
        if !layer.exists() {
            let tmp = layer.with_extension("partial");
            archives::layer_tar(&tmp, self.files, self.size)
                .map_err(|e| format!("{}: {e}", tmp.display()))?;
            fs::rename(&tmp, &layer).map_err(|e| e.to_string())?;
        }
        Ok((layer, Some(ArchiveKind::Layer)))
    }
}

/// `plain` compressed by `cmd` beside it as `.tar.EXT`, made once.
fn compressed(plain: &Path, ext: &str, cmd: &str) -> Result<PathBuf, String> {
    let c = plain.with_extension(format!("tar.{ext}"));
    if !c.exists() {
        sh(&format!(
            "{cmd} {} > {}.partial && mv {1}.partial {1}",
            plain.display(),
            c.display()
        ))?;
    }
    Ok(c)
}

/// CPU time used so far: this process's (every thread) and its waited-for
/// children's, each user plus system.
fn cpu_time() -> (Duration, Duration) {
    zinstall_sys::process::cpu_times()
}
