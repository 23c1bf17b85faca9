//! Loop-mounted filesystems: see `zinstall_testkit::loopfs`.

#![allow(unused_imports)]

pub use zinstall_testkit::{Kind, LoopFs, shares_extents};
