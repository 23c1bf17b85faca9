//! Root's copies, run in the daemon with its pool. A caller's granted
//! copy, in its own process, gives the same reply ([`CopyReply::new`]).

use std::path::Path;
use std::sync::Arc;

use zinstall_engine::Plan;

use crate::jobs::Job;
use crate::protocol::{CopyArgs, CopyReply, NoticeInfo, WireError};
use crate::state::Daemon;

/// Root's copy, in the daemon with its pool. A caller's granted copy
/// runs in a process of its own ([`crate::process`]).
pub(super) fn copy(
    d: &Daemon,
    job: &Arc<Job>,
    a: &CopyArgs,
) -> Result<CopyReply, WireError> {
    job.set_phase("copy");
    let (src, dst) = (&a.src, &a.dst);
    let mut plan = Plan::new(src.as_path(), dst.as_path())
        .on_error(zinstall_engine::OnError::KeepGoing)
        .tunables(d.tunables())
        .pool(d.pool().clone())
        .cancel(job.cancel.clone())
        .progress(Arc::clone(job) as Arc<dyn zinstall_engine::Progress>)
        .merge(a.merge)
        .sync(a.sync)
        .skip_special(a.skip_special);
    if let Some(rules) = zinstall_engine::rules::excludes(&a.exclude)
        .map_err(|e| WireError::from_copier(&e))?
    {
        plan = plan.rules(rules, Path::new(""));
    }
    match plan.run() {
        Ok(r) => Ok(CopyReply::new(
            src,
            dst,
            r.stats,
            NoticeInfo::of(&r.notices),
        )),
        Err(f) => Err(WireError::from_failure(&f)),
    }
}
