//! The dry run ([`Install::dry_run`]): the install's own steps, set to
//! record instead of writing.

use crate::error::InstallError;
use crate::plan::{Install, Writes};
use crate::summary::Summary;

impl Install<'_> {
    /// A dry run: the steps of [`run`](Install::run), in its order and
    /// with its checks (the zonepath's state, the profile's trees, the
    /// baseline and each image's kind), each recording what it would
    /// write instead of writing it: the layout and the trees walked as
    /// their copies would walk them ([`zinstall_engine::Plan::dry_run`]), each
    /// archive and layer read to its end through the unpack's own reader
    /// ([`zinstall_engine::unpack::dry_run`]), the host files. Events and the
    /// listener report what would be done; the summary counts it. Takes
    /// no lock, makes no root, writes no marker, log or probe record and
    /// no manifest: a dry run leaves the zonepath as it found it. The
    /// layout's links and mount points are made in a private staging
    /// directory, removed after, as the real run makes them: what it
    /// cannot make fails the dry run too.
    ///
    /// What only the real run can find is not found: a registry image's
    /// layers are not downloaded (its manifest and config are checked);
    /// what each step would meet in the root is judged against the root
    /// as it is now (empty after an interrupted install), not as the
    /// steps before would have left it (a tree replicated over a mount
    /// point of the layout's passes here); a host file that is a link
    /// is copied as the link, where the real run may copy what it points
    /// to because the root lacks its target; notices, which tell of what
    /// writing met, are not reported.
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
        let (archives, writes) =
            self.begin(&root, Writes::Record { as_if_empty: false })?;
        let contents =
            std::sync::Arc::new(zinstall_engine::contents::Contents::new());
        self.lay_out(
            &root,
            &archives,
            &contents,
            &mut Default::default(),
            writes,
        )
        .map_err(InstallError::before)
    }
}
