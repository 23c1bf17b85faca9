//! Who a connection's peer is and who a job's process becomes: the types
//! both platform files fill or apply, kept apart so that they name nothing
//! of the seam that re-exports them.

/// Who is at the other end of a connection, as the kernel says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Process id (0 when the kernel does not say).
    pub pid: i32,
}

/// Who a job's process becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Real, effective and saved user id.
    pub uid: u32,
    /// Real, effective and saved group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}
