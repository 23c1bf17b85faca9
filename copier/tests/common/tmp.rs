//! A temporary directory removed even with immutable files in it: see
//! `zinstall_testkit::Tmp`.

pub use zinstall_testkit::Tmp;
