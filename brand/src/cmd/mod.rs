//! One module per `zinstall` subcommand.

pub mod copy;
