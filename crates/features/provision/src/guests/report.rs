//! What a provision made: each guest, and the run's report.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::cache::{Entry, Obtained, Replaced};
use crate::customize::Customized;
use crate::detect::ImageKind;
use crate::identity::GuestIdentity;
use crate::seed::SeedMade;

/// What one guest is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestKind {
    /// A directory tree, cloned by reflink or copied.
    Tree {
        /// True if every file was cloned (shares extents with the cache).
        reflinked: bool,
    },
    /// A composefs root: the entry's image under an overlay whose upper
    /// layer is the guest's own.
    Composefs {
        /// The image's ID, hex.
        image: String,
        /// True if left mounted on its `root/` (`--mount`).
        mounted: bool,
    },
    /// A qcow2 overlay over the cached raw base.
    Disk {
        /// Its virtual size.
        virtual_size: u64,
    },
}

/// One guest made.
#[derive(Clone, Debug)]
pub struct Guest {
    /// Its directory or overlay file.
    pub path: PathBuf,
    /// What it is.
    pub kind: GuestKind,
    /// What of its identity was made its own (directory guests).
    pub identity: GuestIdentity,
    /// Its NoCloud seed (disk guests, unless none was asked for).
    pub seed: Option<SeedMade>,
    /// What its customisation made that its caller is to be told (the
    /// `random` passwords), directory guests.
    pub customized: Customized,
    /// How long it took.
    pub took: Duration,
}

impl fmt::Display for Guest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            GuestKind::Tree { reflinked: true } => {
                write!(f, "{}: tree, reflink clone", self.path.display())?
            }
            GuestKind::Tree { reflinked: false } => {
                write!(f, "{}: tree, parallel copy", self.path.display())?
            }
            GuestKind::Composefs { image, mounted } => write!(
                f,
                "{}: composefs, image {image}, {} (zinstall {} {})",
                self.path.display(),
                if *mounted {
                    "mounted on root/"
                } else {
                    "not mounted"
                },
                if *mounted { "unmount" } else { "mount" },
                self.path.display()
            )?,
            GuestKind::Disk { virtual_size } => write!(
                f,
                "{}: qcow2 overlay, {}",
                self.path.display(),
                zinstall_engine::stats::human_bytes(*virtual_size)
            )?,
        }
        write!(f, ", {}", zinstall_engine::stats::human_duration(self.took))?;
        let id = &self.identity;
        if let Some(h) = &id.hostname {
            write!(f, "; hostname {h}")?;
        }
        if let Some(m) = &id.machine_id {
            write!(f, ", machine-id {m}")?;
        }
        if !id.host_keys.is_empty() {
            write!(f, ", {} SSH host keys new", id.host_keys.len())?;
        }
        write!(f, "{}", self.customized)?;
        if let Some(s) = &self.seed {
            write!(
                f,
                "; seed {} (hostname {}, instance-id {}; attach with -drive \
                 file={},if=virtio,format=raw)",
                s.path.display(),
                s.hostname,
                s.instance_id,
                s.path.display()
            )?;
            if let Some(p) = &s.root_password {
                write!(f, "; root password {p}")?;
            }
        }
        Ok(())
    }
}

/// What a provisioning did.
#[derive(Clone, Debug)]
pub struct ProvisionReport {
    /// The image's kind.
    pub image: ImageKind,
    /// The cache entry the guests come from.
    pub entry: Entry,
    /// Whether the entry was built now or found.
    pub obtained: Obtained,
    /// The entry found altered and replaced by `entry`, if any.
    pub replaced: Option<Replaced>,
    /// The guests, in order.
    pub guests: Vec<Guest>,
    /// What was noticed and accepted building the entry (a qcow2 image
    /// read as it is though left dirty, a backing format probed, a
    /// conversion by qemu-img), each naming the file.
    pub notices: Vec<String>,
}
