//! Making each guest ready to boot, as virt-customize(1) does, without an
//! appliance: a way in (keys, passwords), first-boot commands, files.
//! [`spec`] parses and checks the options' values; `plan` makes them
//! into each guest's steps, reading the files they name and checking the
//! image's users, before any guest is made; `apply` gives each directory
//! guest its steps beneath its root, with `shadow` (passwords hashed as
//! the guest's `/etc/login.defs` says) and `firstboot` (a one-shot
//! systemd unit or SMF service) and `run` (`--run`, `--run-command`
//! inside the guest, in namespaces of its own). [`sent`] is the plan
//! as another process sends it: every file already read into the
//! request (zinstalld's clients).

mod apply;
mod firstboot;
mod plan;
mod run;
pub mod sent;
mod shadow;
pub mod spec;
pub mod wire;

pub use apply::Customized;
pub(crate) use apply::{apply, kept};
pub use plan::read_commands;
pub(crate) use plan::{Customization, check_tree, prepare};
pub use run::Ran;
