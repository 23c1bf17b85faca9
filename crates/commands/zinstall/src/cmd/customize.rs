//! `zinstall provision`'s customisation flags: what virt-customize(1)
//! does to a guest, for each directory guest.

use std::path::PathBuf;

use clap::{ArgMatches, Args};
use zinstall_provision::CustomizeOptions;
use zinstall_provision::customize::spec::RunStep;

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
    /// Run this script (of this host) with the guest's /bin/sh inside
    /// each directory guest as it is made: the guest as /, no network,
    /// its own /proc, /dev and PIDs (repeatable, in order with
    /// --run-command). Not for disk guests.
    #[arg(long, value_name = "SCRIPT")]
    pub run: Vec<PathBuf>,
    /// Run this command (/bin/sh -c) inside each directory guest as
    /// --run does; a disk guest runs it at its first boot (cloud-config
    /// runcmd, after --firstboot-command). Repeatable.
    #[arg(long, value_name = "CMD")]
    pub run_command: Vec<String>,
    /// How long each --run or --run-command may run in a guest before it
    /// is killed and the guest fails, at most 86400 [default: 600].
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub run_timeout: Option<u64>,
    /// --run and --run-command in the order given, when the command line
    /// told it (see [`CustomizeArgs::order_runs`]).
    #[arg(skip)]
    pub run_order: Option<Vec<RunStep>>,
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
            run: self.run_order.clone().unwrap_or_else(|| {
                let scripts = self.run.iter().cloned().map(RunStep::Script);
                let commands =
                    self.run_command.iter().cloned().map(RunStep::Command);
                scripts.chain(commands).collect()
            }),
            run_timeout: self.run_timeout,
        }
    }

    /// Puts --run and --run-command in the order they were given in `m`,
    /// the provision command's matches: two flags are two lists to clap,
    /// and only their indices say which came first.
    pub fn order_runs(&mut self, m: &ArgMatches) {
        let at = |id: &str| -> Vec<usize> {
            m.indices_of(id).map(Iterator::collect).unwrap_or_default()
        };
        let mut steps: Vec<(usize, RunStep)> =
            at("run")
                .into_iter()
                .zip(self.run.iter().cloned().map(RunStep::Script))
                .chain(at("run_command").into_iter().zip(
                    self.run_command.iter().cloned().map(RunStep::Command),
                ))
                .collect();
        steps.sort_by_key(|(i, _)| *i);
        self.run_order = Some(steps.into_iter().map(|(_, s)| s).collect());
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
