//! An install built in memory (Linux, for a composefs root): the same
//! install, its archives unpacked into a [`MemTree`] with every file's
//! body in a store, for an install that is its archives alone. Anything
//! else (a tree of the host, a host file, links or directories the
//! profile makes, an OCI image, a member only the kernel can decide) is
//! said to be [`Built::Unmodeled`], and the caller installs through a
//! tree instead.

use std::time::Instant;

use slog::info;

use zinstall_engine::unpack::{self, MemTree, ObjectSink, UnpackOptions};

use crate::error::{Cause, InstallError};
use crate::event::Event;
use crate::plan::Install;
use crate::summary::{Summary, add, merge_notices};

/// What [`Install::run_in_memory`] did.
pub enum Built {
    /// The tree is built: what the unpacks counted and noticed.
    Memory(Box<Summary>),
    /// It was not built, for this reason: install through a tree.
    Unmodeled(String),
}

impl Install<'_> {
    /// Unpacks the install's archives into `tree`, each file's body into
    /// `sink`; the zonepath is not touched. [`Built::Unmodeled`] when the
    /// install is not its archives alone, or an archive holds a member
    /// whose result only the kernel decides.
    pub fn run_in_memory(
        &mut self,
        tree: &mut MemTree,
        sink: &dyn ObjectSink,
    ) -> Result<Built, InstallError> {
        let started = Instant::now();
        self.choose_host_parts();
        let p = &self.profile;
        if !p.trees.is_empty()
            || !p.host_files.is_empty()
            || !p.links.is_empty()
            || !p.dirs.is_empty()
        {
            return Ok(Built::Unmodeled(format!(
                "the profile {} makes more than its archives (trees, host \
                 files, links or directories)",
                p.path.display()
            )));
        }
        let archives = self.preflight()?;
        if archives.iter().any(|a| a.oci.is_some()) {
            return Ok(Built::Unmodeled(
                "an OCI image, whose layers apply whiteouts".into(),
            ));
        }
        (self.events)(&Event::Installing {
            zone: self.zone.clone(),
            zonepath: self.zonepath.clone(),
        });
        info!(self.log, "install in memory"; "zone" => &self.zone,
              "zonepath" => %self.zonepath.display(),
              "profile" => %self.profile.path.display());
        let root = self.zonepath.join("root");
        let mut sum = Summary::default();
        for a in &archives {
            (self.events)(&Event::Unpacking {
                path: a.path.clone(),
                kind: a.kind,
            });
            let t0 = Instant::now();
            let opts = UnpackOptions {
                // The store is flushed before a ref names the image.
                durable: true,
                ..self.unpack_options(a)
            };
            let r = match unpack::unpack_to_memory(
                &a.path, &root, tree, sink, &opts,
            ) {
                Err(e @ zinstall_engine::Error::Unmodeled { .. }) => {
                    return Ok(Built::Unmodeled(e.to_string()));
                }
                Err(source) => {
                    return Err(InstallError::before(Cause::Step {
                        step: "unpack".into(),
                        source: Box::new(source),
                    }));
                }
                Ok(r) => r,
            };
            let took = t0.elapsed();
            (self.events)(&Event::Unpacked {
                path: a.path.clone(),
                stats: r.stats.clone(),
                took,
            });
            info!(self.log, "unpacked"; "archive" => %a.path.display(),
                  "files" => r.stats.files, "bytes" => r.stats.bytes,
                  "ms" => took.as_millis() as u64);
            merge_notices(&mut sum.notices, &r.notices);
            add(&mut sum.stats, &r.stats);
        }
        for n in &sum.notices {
            (self.events)(&Event::Notice(n.clone()));
        }
        let took = started.elapsed();
        (self.events)(&Event::Complete {
            zone: self.zone.clone(),
            stats: sum.stats.clone(),
            took,
        });
        info!(self.log, "install complete"; "ms" => took.as_millis() as u64,
              "files" => sum.stats.files, "dirs" => sum.stats.dirs,
              "bytes" => sum.stats.bytes);
        Ok(Built::Memory(Box::new(sum)))
    }
}
