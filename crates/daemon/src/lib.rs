//! zinstalld: one process that serves copies, installs and provisions to
//! many clients over a Unix socket, with one worker budget, one cache and
//! one log.
//!
//! * [`server::run`]: the service (the `zinstalld` binary is a thin
//!   wrapper): its socket, the accept loop, a thread per connection, the
//!   job lanes (`queue`), and one [`zinstall_engine::Pool`] root's
//!   jobs' workers come from.
//! * [`process`]: a caller's granted copy, in a process that is the
//!   caller.
//! * [`protocol`]: the versioned JSON-lines protocol ([`protocol::Request`],
//!   [`protocol::Reply`]).
//! * [`client::Client`]: what `zinstall --daemon` uses.
//! * [`config::Config`]: `/etc/zinstall/zinstalld.toml`, with the grants
//!   [`auth::authorize`] applies to callers other than root.
//! * [`jobs`]: ids, progress, cancel, results.
//! * [`results`]: what the operations return, typed from the job to the
//!   wire and back.
//!
//! ```no_run
//! use zinstall_daemon::client::Client;
//! use zinstall_daemon::protocol::{Call, CleanPath, CopyArgs, Request};
//!
//! let mut c = Client::connect("/run/zinstall/zinstalld.sock".as_ref())?;
//! let request = Request {
//!     call: Call::Copy(CopyArgs {
//!         // Absolute, without `.` or `..`: what the daemon takes.
//!         src: CleanPath::new("/srv/a").expect("a clean path"),
//!         dst: CleanPath::new("/srv/b").expect("a clean path"),
//!         merge: false,
//!         sync: false,
//!         exclude: vec![],
//!         skip_special: false,
//!     }),
//!     detach: false,
//! };
//! let result = c.call(&request, &mut |_progress| {}, &mut |event| println!("{event}"))?;
//! println!("{result:?}");
//! # Ok::<(), zinstall_daemon::client::ClientError>(())
//! ```

#![deny(missing_docs)]
// System calls only in `zinstall-sys`, re-exported by `sys`.
#![forbid(unsafe_code)]

mod auth;
pub mod client;
pub mod config;
mod connection;
mod jobs;
mod limits;
mod ops;
pub mod process;
pub mod protocol;
mod queue;
pub mod replies;
pub mod results;
pub mod server;
mod shares;
mod state;
mod sys;
