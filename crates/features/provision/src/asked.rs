//! What a provision asks of its guests besides copies, read and checked
//! before the cache is touched, by the kind of guest the image makes:
//! disk guests' seeds, directory guests' customisation (from the options,
//! or as a client sent it), and the options a disk guest cannot take.

use std::path::{Path, PathBuf};

use crate::customize::wire::GuestRequest;
use crate::customize::{self, Customization};
use crate::detect::ImageKind;
use crate::error::ProvisionError;
use crate::options::ProvisionOptions;
use crate::seed::{self, Seed};

/// The seeds' contents, read and checked before the cache is touched,
/// when disk guests are to get seeds; the options only seeds take are
/// refused for directory guests.
pub(crate) fn prepare_seed(
    kind: ImageKind,
    disk: bool,
    opts: &ProvisionOptions,
) -> Result<Option<Seed>, ProvisionError> {
    let Some(r) = &opts.seed else {
        return Ok(None);
    };
    if disk {
        return seed::prepare(r, &opts.name, opts.identity.hostname.as_deref())
            .map(Some);
    }
    let set = seed::disk_only(r);
    if set.is_empty() {
        return Ok(None);
    }
    Err(ProvisionError::Seed {
        option: set.join(", "),
        path: PathBuf::new(),
        why: format!(
            "these go into disk guests' NoCloud seeds, and {} makes \
             directory guests: leave them out",
            kind.describe()
        ),
    })
}

/// Directory guests' customisation, read and checked; a disk image's
/// guests take theirs through their seeds.
pub(crate) fn prepare_customize(
    disk: bool,
    opts: &ProvisionOptions,
) -> Result<Option<Customization>, ProvisionError> {
    if disk {
        return Ok(None);
    }
    if let Some(sent) = &opts.customize_sent {
        if !opts.customize.is_empty() {
            return Err(ProvisionError::Customize {
                option: "--customize",
                value: String::new(),
                path: PathBuf::new(),
                why: "customisation both as options and as sent: give one"
                    .into(),
            });
        }
        return customize::sent::plan(sent, opts.count);
    }
    customize::prepare(&opts.customize, opts.count, &opts.name)
}

/// For a disk image: the customisation options a NoCloud seed cannot
/// carry are refused, and so are those it carries when no seed is made.
pub(crate) fn check_disk_customize(
    image: &Path,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    let c = &opts.customize;
    let sent = opts.customize_sent.as_ref().map(|s| s.guests.as_slice());
    let sent_has = |f: &dyn Fn(&GuestRequest) -> bool| {
        sent.unwrap_or_default().iter().any(f)
    };
    let dir_only: Vec<&str> = [
        (
            "--password",
            !c.password.is_empty()
                || sent_has(&|g| g.passwords.iter().any(|p| p.user_option)),
        ),
        (
            "--firstboot",
            !c.firstboot.is_empty() || sent_has(&|g| !g.firstboot.is_empty()),
        ),
        (
            "--copy-in",
            !c.copy_in.is_empty() || sent_has(&|g| !g.copy_in.is_empty()),
        ),
        (
            "--timezone",
            c.timezone.is_some() || sent_has(&|g| g.timezone.is_some()),
        ),
        (
            "--run",
            c.run.len() > c.run_commands().len()
                || sent_has(&|g| !g.run.is_empty()),
        ),
    ]
    .into_iter()
    .filter_map(|(f, set)| set.then_some(f))
    .collect();
    let customized =
        !c.is_empty() || sent_has(&|g| g != &GuestRequest::default());
    let why = if !dir_only.is_empty() {
        format!(
            "{}: a disk image, whose guests are seeded through cloud-init, \
             which takes --ssh-inject, --root-password, \
             --firstboot-command, --run-command and --write; these apply \
             to directory guests (a rootfs archive or OCI image)",
            dir_only.join(", ")
        )
    } else if opts.seed.is_none() && customized {
        "a disk image with --no-seed: its guests' customisation goes \
         into their NoCloud seeds, and none is made"
            .into()
    } else {
        return Ok(());
    };
    Err(ProvisionError::Customize {
        option: "--ssh-inject, --password, --firstboot, ...",
        value: image.to_string_lossy().into_owned(),
        path: image.to_path_buf(),
        why,
    })
}
