//! A disk image's guests take their customisation through their NoCloud
//! seeds: what a seed cannot carry is refused, naming it, before
//! anything is made.

use std::path::Path;

use crate::error::ProvisionError;
use crate::options::ProvisionOptions;

/// For a disk image: the customisation options a NoCloud seed cannot
/// carry are refused, and so are those it carries when no seed is made.
pub(crate) fn check_disk(
    image: &Path,
    opts: &ProvisionOptions,
) -> Result<(), ProvisionError> {
    let c = &opts.customize;
    let dir_only: Vec<&str> = [
        ("--password", !c.password.is_empty()),
        ("--firstboot", !c.firstboot.is_empty()),
        ("--copy-in", !c.copy_in.is_empty()),
        ("--timezone", c.timezone.is_some()),
        ("--run", c.run.len() > c.run_commands().len()),
    ]
    .into_iter()
    .filter_map(|(f, set)| set.then_some(f))
    .collect();
    let why = if !dir_only.is_empty() {
        format!(
            "{}: a disk image, whose guests are seeded through cloud-init, \
             which takes --ssh-inject, --root-password, \
             --firstboot-command, --run-command and --write; these apply \
             to directory guests (a rootfs archive or OCI image)",
            dir_only.join(", ")
        )
    } else if opts.seed.is_none() && !c.is_empty() {
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
