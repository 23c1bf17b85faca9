//! `zinstall provision`'s options for disk guests' NoCloud seeds: the
//! seed's own files and flags; the customisation options (named as
//! virt-customize(1) names them, declared in `cmd::customize`) go into
//! it as cloud-config.

use std::path::PathBuf;

use clap::Args;
use zinstall_provision::customize::spec::{Password, SpecError};
use zinstall_provision::{CustomizeOptions, SeedRequest, Supplied};

/// What only a disk guest's seed takes; the customisation options
/// (`--ssh-inject`, `--root-password`, `--firstboot-command`, `--write`,
/// `--run-command`, declared in `cmd::customize`) go into it too.
#[derive(Args, Debug)]
pub struct SeedArgs {
    /// The disk guests' user-data: a #cloud-config the options are
    /// merged into, or another cloud-init format (a #! script, MIME
    /// multi-part) given alone.
    #[arg(long, value_name = "FILE")]
    pub user_data: Option<PathBuf>,
    /// The disk guests' network-config (cloud-init's version 1 or 2
    /// YAML), copied into each seed.
    #[arg(long, value_name = "FILE")]
    pub network_config: Option<PathBuf>,
    /// Disk guests get no NoCloud seed (PREFIX-N.seed.img).
    #[arg(long, conflicts_with_all = ["user_data", "network_config"])]
    pub no_seed: bool,
}

impl SeedArgs {
    /// The seed asked for (`None` with `--no-seed`): these flags, and the
    /// customisation options `custom` holds (flags and `--customize`
    /// file) that a seed takes; `hostname` is `--hostname` as given.
    pub(crate) fn request(
        &self,
        hostname: Option<&str>,
        custom: &CustomizeOptions,
    ) -> Result<Option<SeedRequest>, SpecError> {
        if self.no_seed {
            return Ok(None);
        }
        Ok(Some(SeedRequest {
            ssh_inject: parse_all(&custom.ssh_inject)?,
            root_password: custom
                .root_password
                .as_deref()
                .map(str::parse::<Password>)
                .transpose()?,
            firstboot_commands: custom.firstboot_command.clone(),
            run_commands: custom.run_commands(),
            writes: parse_all(&custom.write)?,
            hostname: hostname.map(str::to_string),
            user_data: self.user_data.clone().map(Supplied::File),
            network_config: self.network_config.clone().map(Supplied::File),
        }))
    }
}

fn parse_all<T: std::str::FromStr<Err = SpecError>>(
    values: &[String],
) -> Result<Vec<T>, SpecError> {
    values.iter().map(|v| v.parse()).collect()
}
