//! The dry run ([`Install::dry_run`]): every check the install makes,
//! then each step walked or read through without writing anything. Its
//! own room: it shares the plan's checks and none of the steps' writes.

use copier::unpack;

use crate::error::{Cause, InstallError};
use crate::event::Event;
use crate::plan::Install;
use crate::state::State;
use crate::summary::{Summary, add};

impl Install<'_> {
    /// A dry run: every check [`run`](Install::run) makes before writing
    /// (the zonepath's state, the profile's trees, the baseline and each
    /// image's kind), then each step walked or read through without
    /// writing anything: the trees as their copies would walk them, each
    /// archive read to its end ([`unpack::dry_run`]), the host files.
    /// Events and the listener report what would be done; the summary
    /// counts it. Takes no lock and writes no log record: a dry run
    /// leaves the zonepath as it found it.
    pub fn dry_run(&mut self) -> Result<Summary, InstallError> {
        self.choose_host_parts();
        // A registry image's manifest and config are fetched into a store
        // of the dry run's own, removed after: a dry run writes nothing
        // into the cache, and downloads no layer.
        let pulls = self
            .images
            .iter()
            .any(|i| zinstall_registry::reference_of(i).is_some());
        if !pulls {
            return self.dry_run_with();
        }
        let scratch = std::env::temp_dir().join(format!(
            "zinstall-dry-run.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let kept = self.store.replace(scratch.clone());
        let r = self.dry_run_with();
        self.store = kept;
        let _best_effort = std::fs::remove_dir_all(&scratch);
        r
    }

    fn dry_run_with(&mut self) -> Result<Summary, InstallError> {
        let root = self.zonepath.join("root");
        // An interrupted install's partial root is removed before the
        // real run writes: the dry run takes the root as empty, as that
        // run will find it.
        let interrupted = self.check_state(&root)? == Some(State::Installing);
        if interrupted {
            (self.events)(&Event::CleaningInterrupted);
        }
        let archives = self.preflight()?;
        let mut sum = Summary::default();
        let copy_err =
            |step: String| move |source| Cause::Copy { step, source };
        // The layout step copies a staging tree: its top, every
        // directory named and every parent a directory or link needs.
        let p = &self.profile;
        if !p.links.is_empty() || !p.dirs.is_empty() {
            let mut dirs = std::collections::BTreeSet::new();
            let parents = p.links.iter().filter_map(|(l, _)| l.parent());
            for d in p.dirs.iter().map(|(d, _)| d.as_path()).chain(parents) {
                dirs.extend(
                    d.ancestors().filter(|a| !a.as_os_str().is_empty()),
                );
            }
            sum.stats.dirs += 1 + dirs.len() as u64;
            sum.stats.symlinks += p.links.len() as u64;
            if let Some(l) = &self.listener {
                for d in &dirs {
                    l.entry(d, &root.join(d), copier::EntryKind::Dir);
                }
                for (path, target) in &p.links {
                    l.entry(
                        target,
                        &root.join(path),
                        copier::EntryKind::Symlink,
                    );
                }
            }
        }
        for t in &self.profile.trees.clone() {
            let name = format!("/{}", t.display());
            (self.events)(&Event::Replicating { tree: name.clone() });
            let src = self.profile.source_root.join(t);
            let r = self
                .plan(&src, &root.join(t))
                .tunables(self.tunables)
                .rules(std::sync::Arc::clone(&self.profile.rules), t)
                .skip_special(true)
                .dry_run(true)
                .dry_run_as_if_empty(interrupted)
                .run()
                .map_err(copy_err(format!("replicate {name}")))
                .map_err(InstallError::before)?;
            (self.events)(&Event::Replicated {
                tree: name,
                stats: r.stats.clone(),
            });
            add(&mut sum.stats, &r.stats);
        }
        for a in &archives {
            if let Some(image) = &a.oci {
                if self.store.as_deref() == Some(image.location.as_path()) {
                    // Pulled: its layers are not downloaded to be looked
                    // at; the manifest and config were checked.
                    continue;
                }
                // Each layer read through as its unpack reads it: checked
                // against its digest and diff_id, its members counted.
                for i in 0..image.layers.len() {
                    let path = image.layer_path(i);
                    (self.events)(&Event::Unpacking {
                        path: path.clone(),
                        kind: a.kind,
                    });
                    let r = copier::oci::dry_run_layer(
                        image,
                        i,
                        &root,
                        &self.unpack_options(a),
                    )
                    .map_err(|source| {
                        InstallError::before(Cause::Step {
                            step: "check OCI image".into(),
                            source: Box::new(source),
                        })
                    })?;
                    (self.events)(&Event::Unpacked {
                        path,
                        stats: r.stats.clone(),
                        took: r.stats.elapsed,
                    });
                    add(&mut sum.stats, &r.stats);
                }
                continue;
            }
            (self.events)(&Event::Unpacking {
                path: a.path.clone(),
                kind: a.kind,
            });
            let opts = self.unpack_options(a);
            let r =
                unpack::dry_run(&a.path, &root, &opts).map_err(|source| {
                    InstallError::before(Cause::Step {
                        step: "unpack".into(),
                        source: Box::new(source),
                    })
                })?;
            (self.events)(&Event::Unpacked {
                path: a.path.clone(),
                stats: r.stats.clone(),
                took: r.stats.elapsed,
            });
            add(&mut sum.stats, &r.stats);
        }
        for f in &self.profile.host_files.clone() {
            (self.events)(&Event::CopyingHostFile { path: f.clone() });
            let dst = root.join(f.strip_prefix("/").unwrap_or(f));
            let r = self
                .plan(f, &dst)
                .merge(true)
                .dry_run(true)
                .dry_run_as_if_empty(interrupted)
                .run()
                .map_err(copy_err(format!("host file {}", f.display())))
                .map_err(InstallError::before)?;
            add(&mut sum.stats, &r.stats);
        }
        Ok(sum)
    }
}
