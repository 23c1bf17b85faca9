//! `zinstall provision`'s options for disk guests' NoCloud seeds: the
//! customisation options (named as virt-customize(1) names them), as
//! cloud-config, and the seed's own files.

use std::path::PathBuf;

use clap::Args;
use zinstall_provision::SeedRequest;
use zinstall_provision::customize::spec::{
    Password, SpecError, SshInject, WriteFile,
};

/// What each disk guest's seed holds.
#[derive(Args, Debug)]
pub struct SeedArgs {
    /// Authorize an SSH key for USER (root: root's own keys) in each disk
    /// guest's seed: USER:file:KEY.pub or USER:string:KEY; repeatable.
    #[arg(long, value_name = "USER:SOURCE", value_parser = parse_ssh_inject)]
    pub ssh_inject: Vec<SshInject>,
    /// Root's password in each disk guest's seed: file:FILE (its first
    /// line; the file not readable by others), password:PASSWORD,
    /// random (one per guest, printed once), disabled, or locked:
    /// before one of them.
    #[arg(long, value_name = "SELECTOR", value_parser = parse_root_password)]
    pub root_password: Option<Password>,
    /// A command each disk guest runs once, at its first boot
    /// (cloud-config runcmd); repeatable.
    #[arg(long, value_name = "CMD")]
    pub firstboot_command: Vec<String>,
    /// A command each disk guest runs: a disk guest runs nothing before
    /// it boots, so this is run once at its first boot too, after the
    /// --firstboot-command ones (runcmd); repeatable.
    #[arg(long, value_name = "CMD")]
    pub run_command: Vec<String>,
    /// A file each disk guest has written at its first boot
    /// (write_files): FILE:CONTENT, FILE absolute; repeatable.
    #[arg(long, value_name = "FILE:CONTENT", value_parser = parse_write)]
    pub write: Vec<WriteFile>,
    /// The disk guests' user-data: a #cloud-config the options above are
    /// merged into, or another cloud-init format (a #! script, MIME
    /// multi-part) given alone.
    #[arg(long, value_name = "FILE")]
    pub user_data: Option<PathBuf>,
    /// The disk guests' network-config (cloud-init's version 1 or 2
    /// YAML), copied into each seed.
    #[arg(long, value_name = "FILE")]
    pub network_config: Option<PathBuf>,
    /// Disk guests get no NoCloud seed (PREFIX-N.seed.img).
    #[arg(long, conflicts_with_all = ["ssh_inject", "root_password",
          "firstboot_command", "run_command", "write", "user_data",
          "network_config"])]
    pub no_seed: bool,
}

impl SeedArgs {
    /// The seed asked for (`None` with `--no-seed`); `hostname` is
    /// `--hostname` as given.
    pub(crate) fn request(
        &self,
        hostname: Option<&str>,
    ) -> Option<SeedRequest> {
        (!self.no_seed).then(|| SeedRequest {
            ssh_inject: self.ssh_inject.clone(),
            root_password: self.root_password.clone(),
            firstboot_commands: self.firstboot_command.clone(),
            run_commands: self.run_command.clone(),
            writes: self.write.clone(),
            hostname: hostname.map(str::to_string),
            user_data: self.user_data.clone(),
            network_config: self.network_config.clone(),
        })
    }

    /// Whether any seed option is set, for refusing them with
    /// `--daemon`.
    pub(crate) fn any_set(&self) -> bool {
        !self.ssh_inject.is_empty()
            || self.root_password.is_some()
            || !self.firstboot_command.is_empty()
            || !self.run_command.is_empty()
            || !self.write.is_empty()
            || self.user_data.is_some()
            || self.network_config.is_some()
            || self.no_seed
    }
}

fn parse_ssh_inject(s: &str) -> Result<SshInject, String> {
    s.parse().map_err(|e: SpecError| e.to_string())
}

fn parse_root_password(s: &str) -> Result<Password, String> {
    s.parse().map_err(|e: SpecError| e.to_string())
}

fn parse_write(s: &str) -> Result<WriteFile, String> {
    s.parse().map_err(|e: SpecError| e.to_string())
}
