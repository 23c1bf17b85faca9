//! The platform seam, as this crate names it: re-exports of
//! `zinstall-sys`, where every system call Rust cannot check is made
//! (see its `fs` module for what each platform does). Nothing here is
//! `unsafe`.

pub(crate) mod posix;

pub(crate) use zinstall_sys::fs::{
    XATTRS, XattrTarget, advise_sequential, chmod_at, clone_file, clone_range,
    copy_range, get_xattr, list_xattrs, mount_id, open_dir_beneath,
    open_dir_same_mount, open_dir_search, open_source_at, read_dir, set_xattr,
    start_writeback, sync_fs,
};
pub(crate) use zinstall_sys::ident::Assumed;

/// Takes the run's identity `c` on this thread until the guard drops
/// (Linux; an error elsewhere).
pub(crate) fn assume(c: &crate::pool::Credentials) -> std::io::Result<Assumed> {
    zinstall_sys::ident::assume(c.uid, c.gid, &c.groups)
}
