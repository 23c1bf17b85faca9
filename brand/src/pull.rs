//! How `install` and `provision` pull images named by registry
//! reference: the options they share, and the progress they print.

use std::sync::Arc;

use clap::Args;
use zinstall_registry::{Event, PullOptions};

use crate::output::Bar;

/// Registry options of `install` and `provision`.
#[derive(Args, Debug, Clone, Default)]
pub struct PullArgs {
    /// Speak plain HTTP to this registry (HOST[:PORT]); registries on the
    /// loopback always are. Repeatable.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub insecure_registry: Vec<String>,
}

impl PullArgs {
    /// The library's options, with each pull's steps printed on standard
    /// error (standard output stays the command's result), above `bar`,
    /// which shows each blob's download.
    pub fn options(&self, bar: Option<Arc<Bar>>) -> PullOptions {
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
            progress: bar.map(|b| b as Arc<dyn copier::Progress>),
            ..PullOptions::default()
        }
    }
}
