//! An install built in memory (Linux, for a composefs root): the same
//! install, its archives and OCI images' layers unpacked into a
//! [`MemTree`] with every file's body in a store, for an install that is
//! its archives alone. Anything else (a tree of the host, a host file,
//! links or directories the profile makes, a member only the kernel can
//! decide) is
//! said to be [`Built::Unmodeled`], and the caller installs through a
//! tree instead.

use std::time::Instant;

use slog::info;

use zinstall_archive::ArchiveKind;
use zinstall_engine::oci;
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
            // The store is flushed before a ref names the image.
            let opts = UnpackOptions {
                durable: true,
                ..self.unpack_options(a)
            };
            let layers = a.oci.as_ref().map_or(1, |image| image.layers.len());
            for i in 0..layers {
                let at = Layer {
                    archive: a,
                    i,
                    root: &root,
                };
                match self.unpack_one(&at, tree, sink, &opts, &mut sum)? {
                    None => {}
                    Some(why) => return Ok(Built::Unmodeled(why)),
                }
            }
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

    /// One archive, or layer `i` of an OCI image, into `tree`, its counts
    /// and notices added to `sum`; `Some(why)` when it holds what the
    /// build in memory leaves to a tree.
    fn unpack_one(
        &mut self,
        at: &Layer<'_>,
        tree: &mut MemTree,
        sink: &dyn ObjectSink,
        opts: &UnpackOptions,
        sum: &mut Summary,
    ) -> Result<Option<String>, InstallError> {
        let a = at.archive;
        let (path, kind) = match &a.oci {
            Some(image) => (image.layer_path(at.i), ArchiveKind::Layer),
            None => (a.path.clone(), a.kind),
        };
        (self.events)(&Event::Unpacking {
            path: path.clone(),
            kind,
        });
        let t0 = Instant::now();
        let r = match &a.oci {
            Some(image) => oci::unpack_layer_to_memory(
                image, at.i, at.root, tree, sink, opts,
            ),
            None => {
                unpack::unpack_to_memory(&a.path, at.root, tree, sink, opts)
            }
        };
        let r = match r {
            Err(e @ zinstall_engine::Error::Unmodeled { .. }) => {
                return Ok(Some(e.to_string()));
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
            path: path.clone(),
            stats: r.stats.clone(),
            took,
        });
        info!(self.log, "unpacked"; "archive" => %path.display(),
              "files" => r.stats.files, "bytes" => r.stats.bytes,
              "ms" => took.as_millis() as u64);
        merge_notices(&mut sum.notices, &r.notices);
        add(&mut sum.stats, &r.stats);
        Ok(None)
    }
}

/// One archive, or one layer of an OCI image, of an install.
struct Layer<'a> {
    archive: &'a crate::plan::Archive,
    i: usize,
    root: &'a std::path::Path,
}
