//! Filesystem helpers shared by the library's callers.

pub use crate::beneath::remove_tree;
