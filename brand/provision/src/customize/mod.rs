//! Making each guest ready to boot, as virt-customize(1) does, without an
//! appliance: a way in (keys, passwords), first-boot commands, files.
//! [`spec`] parses and checks the options' values before any guest is
//! made.

pub mod spec;
