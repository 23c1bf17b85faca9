//! How `install` and `provision` pull images named by registry
//! reference: the options they share, and the progress they print.

use std::sync::Arc;

use clap::Args;
use zinstall_registry::{Event, PullOptions};

/// Registry options of `install` and `provision`.
#[derive(Args, Debug, Clone, Default)]
pub struct PullArgs {
    /// Speak plain HTTP to this registry (HOST[:PORT]); registries on the
    /// loopback always are. Repeatable.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub insecure_registry: Vec<String>,
}

impl PullArgs {
    /// The library's options, with each pull's progress printed on
    /// standard error (standard output stays the command's result).
    pub fn options(&self) -> PullOptions {
        PullOptions {
            insecure: self.insecure_registry.clone(),
            events: Some(Arc::new(|e: &Event| {
                crate::output::note(format_args!("{e}"))
            })),
            ..PullOptions::default()
        }
    }
}
