//! External programs the tests drive: see `zinstall_testkit`.

#![allow(unused_imports)]

pub use zinstall_testkit::{have, need, package, tool};
