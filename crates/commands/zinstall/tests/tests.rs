//! zinstall's integration tests, one binary: each module drives the built
//! commands, the daemon or the packaged files on real files.

// Tests make and read their own fixtures by path: the seam is the
// product's.
#![allow(clippy::disallowed_methods)]

mod boundary;
mod brand_files;
mod cli;
#[cfg(target_os = "linux")]
mod composefs_guests;
#[cfg(target_os = "linux")]
mod composefs_mount;
mod compressions;
mod customize;
mod customize_run;
mod daemon;
mod daemon_customize;
mod descriptors;
mod first_hour;
mod foreign_files;
mod front_door;
mod habits;
mod hostile;
mod image;
mod image_chains;
mod install;
#[cfg(target_os = "linux")]
mod install_composefs;
#[cfg(target_os = "linux")]
mod install_composefs_memory;
mod install_dry;
mod job_process;
mod manpages;
mod messages;
mod oci;
mod packaging;
mod provision;
mod provision_integrity;
mod provision_seed;
mod real_roots;
mod registry;
mod service_files;
mod signed_claims;
mod signed_images;
mod signed_world;
mod tar_quirks;
mod told;
mod tracing;
mod transports;
mod tune;
mod update;
mod update_sources;
mod walkers;
mod zoneadm;
