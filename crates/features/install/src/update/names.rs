//! The names an update and a rollback use in the zonepath. A leaf:
//! the error, the journal and the exchange all name them.

/// The journal of an update or rollback under way, in the zonepath.
pub const JOURNAL: &str = ".zinstall.update";
/// The new root an update builds.
pub const ROOT_NEW: &str = "root.new";
/// The root before the last update, kept for rollback.
pub const ROOT_PREV: &str = "root.prev";
/// Where an update unpacks what it reads again (a baseline, image
/// layers).
pub const STAGE: &str = ".zinstall.stage";
/// Where a non-Linux exchange parks one side.
pub(super) const SWAP: &str = ".zinstall.swap";
