//! What an install did: its totals, summed step by step, and the
//! engine's notices, one per kind. A leaf: the steps and the dry run
//! both add into it.

use zinstall_engine::Stats;

/// What an install did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Everything copied, linked and unpacked.
    pub stats: Stats,
    /// Notices from the engine, one per kind for the whole install.
    pub notices: Vec<zinstall_engine::Notice>,
    /// With [`Install::objects`]: each unpacked file's hashes under its
    /// path in the root, when nothing but the images wrote into it (so
    /// that every hash recorded is of what is there).
    ///
    /// [`Install::objects`]: crate::Install::objects
    pub contents: Option<std::sync::Arc<zinstall_engine::contents::Contents>>,
}

/// Adds `from` to `into`, one notice per kind: counts summed, the first
/// example kept.
pub(crate) fn merge_notices(
    into: &mut Vec<zinstall_engine::Notice>,
    from: &[zinstall_engine::Notice],
) {
    for n in from {
        match into.iter_mut().find(|m| m.kind == n.kind) {
            Some(m) => m.count += n.count,
            None => into.push(n.clone()),
        }
    }
}

pub(crate) fn add(total: &mut Stats, s: &Stats) {
    total.files += s.files;
    total.dirs += s.dirs;
    total.symlinks += s.symlinks;
    total.hardlinks += s.hardlinks;
    total.redirects += s.redirects;
    total.specials += s.specials;
    total.skipped += s.skipped;
    total.bytes += s.bytes;
    // The steps run one after another: their largest descriptor counts.
    total.fd_limit = total.fd_limit.max(s.fd_limit);
    total.fd_budget = total.fd_budget.max(s.fd_budget);
    total.fd_peak = total.fd_peak.max(s.fd_peak);
}
