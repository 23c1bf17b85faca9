//! `zinstall provision`'s customisation flags: what virt-customize(1)
//! does to a guest, for each directory guest.

use std::path::PathBuf;

use clap::Args;
use zinstall_provision::CustomizeOptions;

/// What virt-customize(1) would do to each directory guest, done beneath
/// its root (zinstall(8) names each option's virt-customize equivalent).
#[derive(Args, Debug, Default)]
pub struct CustomizeArgs {
    /// Append an SSH public key to ~USER/.ssh/authorized_keys, USER's
    /// home as the guest's /etc/passwd names it: USER:file:KEY.pub or
    /// USER:string:KEY (repeatable).
    #[arg(long, value_name = "USER:SELECTOR")]
    pub ssh_inject: Vec<String>,
    /// Root's password, hashed as the guest's /etc/login.defs says:
    /// file:FILE (its first line; not readable by others), password:PW,
    /// random (printed once per guest), disabled, or locked:SELECTOR.
    #[arg(long, value_name = "SELECTOR")]
    pub root_password: Option<String>,
    /// A user's password, as --root-password: USER:SELECTOR
    /// (repeatable).
    #[arg(long, value_name = "USER:SELECTOR")]
    pub password: Vec<String>,
    /// Run this script (of this host) once at each guest's first boot,
    /// through a one-shot systemd unit, or an SMF service in an illumos
    /// zone (repeatable, in order).
    #[arg(long, value_name = "SCRIPT")]
    pub firstboot: Vec<PathBuf>,
    /// Run this command (sh -c) once at each guest's first boot, as
    /// --firstboot (repeatable).
    #[arg(long, value_name = "CMD")]
    pub firstboot_command: Vec<String>,
    /// Make FILE (an absolute path in the guest) hold CONTENT
    /// (repeatable).
    #[arg(long, value_name = "FILE:CONTENT")]
    pub write: Vec<String>,
    /// Copy a file or directory of this host into the guest's directory
    /// REMOTEDIR, made if missing (repeatable; with --daemon, files
    /// only).
    #[arg(long, value_name = "LOCALPATH:REMOTEDIR")]
    pub copy_in: Vec<String>,
    /// The guest's time zone: /etc/localtime a link to its zoneinfo file
    /// (which the guest must have), and /etc/timezone on Debian-like
    /// guests.
    #[arg(long, value_name = "TZ")]
    pub timezone: Option<String>,
    /// Take these options from FILE too, one a line as virt-builder's
    /// --commands-from-file: `ssh-inject root:file:/k.pub`, `#` comments.
    /// In every value, {n} is the guest's number and {name} its name.
    #[arg(long, value_name = "FILE", help = crate::output::verbatim(
        "Take these options from FILE too, one a line as virt-builder's \
         --commands-from-file: `ssh-inject root:file:/k.pub`, `#` \
         comments. In every value, {n} is the guest's number and {name} \
         its name"
    ))]
    pub customize: Option<PathBuf>,
}

impl CustomizeArgs {
    /// The flags' values.
    fn flags(&self) -> CustomizeOptions {
        CustomizeOptions {
            ssh_inject: self.ssh_inject.clone(),
            root_password: self.root_password.clone(),
            password: self.password.clone(),
            firstboot: self.firstboot.clone(),
            firstboot_command: self.firstboot_command.clone(),
            write: self.write.clone(),
            copy_in: self.copy_in.clone(),
            timezone: self.timezone.clone(),
        }
    }

    /// The flags' values, and those of the --customize file after them.
    pub fn options(
        &self,
    ) -> Result<CustomizeOptions, zinstall_provision::ProvisionError> {
        let mut o = self.flags();
        if let Some(f) = &self.customize {
            zinstall_provision::customize::read_commands(f, &mut o)?;
        }
        Ok(o)
    }
}
