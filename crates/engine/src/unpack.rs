//! Unpacking untrusted tar archives (tar, tar.gz, tar.zst) into a root,
//! in parallel, without ever writing outside it.
//!
//! # What stays outside
//!
//! Every name is checked before anything is done with it: one with a `..`
//! component anywhere is refused (the long names of PAX and GNU headers
//! included: the checked name is the one the entry ends up with). An
//! absolute name loses its leading slashes first, as GNU tar's do, and
//! lands beneath the root.
//!
//! What GNU tar and bsdtar read past (bytes after the end, a body on a
//! hard link, an ACL without a mask, ...; see the reader's
//! [`tar::QuirkKind`]) is read as GNU tar reads it, each with a notice
//! ([`NoticeKind::ArchiveQuirk`]) naming the member and what was done.
//! Directories on the way to an entry are opened beneath
//! the root's descriptor, on Linux with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, elsewhere one component at a time with
//! `O_NOFOLLOW`: no symlink is ever followed, so a symlink the archive
//! created (or one already in the root) cannot take a later entry
//! elsewhere. Everything is then made with `*at` calls on that directory
//! descriptor and a single-component name. Hard links must name a target
//! inside the root reached without symlinks. Device nodes need
//! [`UnpackOptions::allow_devices`]. A file never replaces a directory,
//! nor a directory a symlink. The total of the entries' sizes is bounded
//! ([`UnpackOptions::max_bytes`]), against decompression bombs.
//!
//! The first refused entry stops the unpack with an error naming the
//! archive, the entry and the reason.
//!
//! # Parallel bodies
//!
//! One thread reads the stream: it decodes, checks and orders entries, and
//! makes directories, symlinks, hard links and special files itself (they
//! are cheap, and later entries depend on them). A file body up to 1 MiB
//! is read into memory and handed to the worker pool, which creates,
//! writes and finishes files in parallel; bodies in flight are bounded by
//! a shared byte budget, so memory stays flat whatever the archive. A
//! larger body goes to a worker too, as it is read: the reader hands it
//! over in chunks through a short channel, so the writing (the costly
//! part) is a worker's while the reader reads on. A hard link whose target
//! is still queued waits until every queued file is written. Directory
//! metadata is applied last, deepest first, so that a read-only directory
//! does not stop its own contents.
//!
//! With one thread (`copy_threads = 1`) the reader does everything itself:
//! the serial unpack.
//!
//! # Into memory
//!
//! [`unpack_to_memory`] reads the archive through the same loop and the
//! same checks into a [`MemTree`] instead of beneath a root: each member
//! a node, made as the tree unpack would make it (a later member over an
//! earlier one, hard links sharing a node, missing parents as
//! `mkdir(0755)` makes them, directories' metadata last), each regular
//! file's body stored by the workers through an [`ObjectSink`] (a store of
//! objects named by their digest). For a root kept as an image over such
//! a store (composefs), no tree is written to be read back. An OCI
//! layer's whiteouts apply to the tree as beneath a root
//! (`memory_layers.rs`). An ACL is settled by asking the kernel on an
//! entry of the store's scratch directory (`kernel_attrs.rs`). What only
//! the kernel decides otherwise (a default ACL given to new entries,
//! security attributes, clamped times, sparse bodies, an unpack as a
//! user) is not modelled: such a member stops the
//! unpack with [`crate::Error::Unmodeled`] and the caller unpacks into a
//! tree instead.
//!
//! # Dry run
//!
//! [`dry_run`] reads the archive through the same loop and the same
//! checks, with a recorder in place of the tree: each member is counted
//! and told to the listener where the tree would have made it, and its
//! body skipped. What only the tree being built can show (a member below
//! a symlink an earlier member made, a file over a directory, a hard
//! link's target being there) is found by the unpack alone.
//!
//! [`tar::QuirkKind`]: zinstall_archive::tar::QuirkKind
//! [`NoticeKind::ArchiveQuirk`]: crate::stats::NoticeKind::ArchiveQuirk

mod batch;
mod budget;
mod checks;
mod ctx;
mod finish;
mod holes;
mod into_memory;
mod job;
mod kernel_attrs;
mod layered;
mod made;
mod members;
mod memory;
mod memory_layers;
mod options;
mod paths;
mod read;
mod reading;
mod run;
mod source;
mod write;

pub use memory::{
    Attrs, FileBody, MemTree, Node, NodeId, NodeKind, ObjectSink,
};
pub use options::{Change, UnpackOptions, UnpackReport, Whiteouts};
pub use run::{
    DECOMPRESS_THREAD, dry_run, dry_run_from, unpack, unpack_from,
    unpack_from_to_memory, unpack_to_memory,
};
pub use source::peek_kind;
