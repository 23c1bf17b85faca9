//! Whom a run reads and writes as.

/// The identity a run reads and writes files as, when it is not the
/// process's own: a service doing a client's copy checks every open and
/// every creation against the client, as if the client ran it.
///
/// The engine (`zinstall_engine::Plan::acting_as`) takes it on Linux as its
/// threads' filesystem identity (`setfsuid`, `setfsgid`, and the
/// supplementary groups of that thread only) for the run and its
/// batches, and drops every effective capability of those threads
/// meanwhile: the kernel then refuses what the caller could not do
/// itself (override permissions, set file capabilities or `trusted.*`
/// attributes, make device nodes). The run also keeps no `security.*` or
/// `trusted.*` attribute and no setuid or setgid bit for another owner,
/// each said once as a notice, as `cp -a` run by the caller would end.
/// Other platforms have no per-thread identity: a run given one fails
/// there (the engine's `Op::Credentials`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The user files are opened and created as.
    pub uid: u32,
    /// The primary group.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}
