//! Reading a qcow2 image: cluster mapping through L1 and cached L2
//! tables, plain, zero and compressed clusters.
//!
//! The L1 table is read at open, as much of it as the virtual size
//! maps, in bounded pieces. L2 tables (one cluster each) are
//! read on first use and kept in a cache bounded in bytes: at the default
//! 1 MiB, 16 tables of a 64 KiB-cluster image map 8 GiB, so a sequential
//! read touches each table once instead of once per cluster. The last few
//! inflated compressed clusters are kept too, so partial reads of one
//! cluster do not inflate it again.
//!
//! [`Image::open_chain`] also opens the files an image names: its
//! external data file, and its backing file (qcow2 or raw), and that
//! one's, up to [`MAX_CHAIN`](crate::layout::MAX_CHAIN) images. Those names are the image's to
//! choose, so they are untrusted: each is opened beneath the naming
//! image's directory, one component at a time with `O_NOFOLLOW`, and
//! refused if absolute, if it has `..`, or if it passes a symlink --
//! unless it leads (lexically) beneath the directory the caller allows
//! for them ([`ChainOptions::backing_dir`]), where it is opened the same
//! way from that directory's descriptor. A cluster the top image does
//! not allocate reads from its backing file (zeros past that one's end);
//! a zero cluster or subcluster reads zeros and does not fall through.

mod cache;
mod chain;
mod image;
mod map;
mod open;
mod read;

use std::io;

pub use chain::{ChainOptions, InDir};
pub use image::Image;
pub(crate) use map::Mapping;

use crate::error::Error;

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::other(e)
    }
}
