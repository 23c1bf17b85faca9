//! One module per `zinstall` subcommand.

pub mod copy;
pub mod statemap;
pub mod verify;
