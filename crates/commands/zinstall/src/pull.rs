//! How `install` and `provision` pull images named by registry
//! reference: the options they share, and the progress they print.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use zinstall_registry::policy::{PolicyError, Trust};
use zinstall_registry::{Event, PullOptions};

use crate::output::Bar;

/// Registry options of `install` and `provision`.
#[derive(Args, Debug, Clone, Default)]
pub struct PullArgs {
    /// Speak plain HTTP to this registry (HOST[:PORT]); registries on the
    /// loopback always are. Repeatable.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub insecure_registry: Vec<String>,
    /// The trust policy (containers-policy.json(5)) every pulled image
    /// must satisfy before a layer is fetched (default: the profile's
    /// `policy`, else $HOME/.config/containers/policy.json or
    /// /etc/containers/policy.json, as podman reads it).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Where signatures are looked for (containers-registries.d(5);
    /// default /etc/containers/registries.d, as podman reads it).
    #[arg(long = "registries.d", value_name = "DIR")]
    pub registries_d: Option<PathBuf>,
    /// The longest a manifest, a token or a signature may take to arrive
    /// whole, however steadily it comes.
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub fetch_deadline: u64,
}

impl PullArgs {
    /// The library's options, with each pull's steps printed on standard
    /// error (standard output stays the command's result), above `bar`,
    /// which shows each blob's download.
    /// `trust` is what [`trust`](PullArgs::trust) read.
    pub fn options(
        &self,
        bar: Option<Arc<Bar>>,
        trust: Option<Arc<Trust>>,
    ) -> PullOptions {
        let above = bar.clone();
        PullOptions {
            insecure: self.insecure_registry.clone(),
            events: Some(Arc::new(move |e: &Event| {
                crate::output::above(&above, || {
                    crate::output::note(format_args!("{e}"))
                });
                if let (Some(b), Event::Fetching { digest, .. }) = (&above, e) {
                    b.set_what(&format!("pulling {digest}"));
                }
            })),
            progress: bar.map(|b| b as Arc<dyn zinstall_engine::Progress>),
            trust,
            fetch_deadline: Some(self.deadline()),
            ..PullOptions::default()
        }
    }

    /// `--fetch-deadline` (the library's default when made without
    /// the parser, as `PullArgs::default()`).
    pub fn deadline(&self) -> std::time::Duration {
        match self.fetch_deadline {
            0 => zinstall_registry::DEFAULT_FETCH_DEADLINE,
            s => std::time::Duration::from_secs(s),
        }
    }

    /// The trust policy: `--policy`, else `fallback` (a profile's
    /// `policy`), else the system's, with `--registries.d` or the
    /// system's. `None`: there is none at all; digests are checked,
    /// signatures are not, and each pull says so.
    pub fn trust(
        &self,
        fallback: Option<&Path>,
    ) -> Result<Option<Arc<Trust>>, PolicyError> {
        let named = self.policy.as_deref().or(fallback);
        Ok(Trust::load(named, self.registries_d.as_deref())?.map(Arc::new))
    }
}
