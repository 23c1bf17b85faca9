//! One module per `zinstall` subcommand.

pub mod cache_composefs;
mod cache_print;
pub mod copy;
pub mod customize;
mod daemon_arg;
pub mod image;
pub mod image_composefs;
pub mod install;
#[cfg(target_os = "linux")]
mod install_composefs;
pub mod mount;
pub mod provision;
mod provision_dry;
mod provision_seed;
mod provision_sent;
pub mod remote;
pub mod statemap;
pub mod trace;
pub mod tune;
pub mod update;
pub mod verify;
