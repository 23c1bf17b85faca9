//! A request line read into a [`Request`] (the envelope first, then the
//! arguments typed by the operation, every bound checked before anything
//! is built), why a line is refused, and a request written as a line.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::args::{
    CopyArgs, GcArgs, InstallArgs, JobRef, ProvisionArgs, RollbackArgs,
    UninstallArgs, UpdateArgs,
};
use super::bounds::{MAX_DEPTH, MAX_ECHO, MAX_LINE, VERSION, clip};
use super::request::{Call, Request};

/// The most bytes of a parse error's message, which quotes client text
/// amid its own words.
const MAX_DETAIL: usize = 512;

/// Why a request line was refused before it was run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// Not JSON, or not the request's shape.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// Another protocol version.
    #[error(
        "protocol version {got} is not spoken here (this daemon speaks {VERSION})"
    )]
    Version {
        /// What the client sent.
        got: u64,
    },
    /// No such operation.
    #[error("unknown operation {0:?} (known: {known})", known = Call::NAMES.join(", "))]
    UnknownOp(String),
    /// The operation's arguments are wrong.
    #[error("bad arguments for {op}: {why}")]
    Args {
        /// The operation.
        op: String,
        /// What is wrong.
        why: String,
    },
    /// Longer than [`MAX_LINE`].
    #[error("request longer than {MAX_LINE} bytes")]
    TooLong,
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    #[error("malformed request: nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// The request's envelope, read first: its arguments are checked for
/// JSON and skipped (nothing is built from them) until the operation
/// says what they must be.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: Version,
    op: String,
    #[serde(default, rename = "args")]
    _args: Option<IgnoredAny>,
    #[serde(default)]
    detach: bool,
}

/// The same line read again for the arguments, typed by the operation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireArgs<T> {
    #[serde(rename = "v")]
    _v: IgnoredAny,
    #[serde(rename = "op")]
    _op: IgnoredAny,
    #[serde(default = "Option::default")]
    args: Option<T>,
    #[serde(default, rename = "detach")]
    _detach: IgnoredAny,
}

/// Arguments of an operation that takes none: `{}` only.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// A request as its line is written.
#[derive(Serialize)]
struct Line<'a> {
    v: u32,
    op: &'static str,
    args: Args<'a>,
    detach: bool,
}

/// A request's arguments as its line has them: the arguments alone.
#[derive(Serialize)]
#[serde(untagged)]
enum Args<'a> {
    None(NoArgs),
    Copy(&'a CopyArgs),
    Install(&'a InstallArgs),
    Uninstall(&'a UninstallArgs),
    Update(&'a UpdateArgs),
    Rollback(&'a RollbackArgs),
    Provision(&'a ProvisionArgs),
    CacheGc(&'a GcArgs),
    Job(&'a JobRef),
}

/// `v`: a whole number, or the request is malformed.
struct Version(u64);

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Version;
            fn expecting(
                &self,
                f: &mut std::fmt::Formatter<'_>,
            ) -> std::fmt::Result {
                f.write_str("a protocol version number")
            }
            fn visit_u64<E: serde::de::Error>(
                self,
                v: u64,
            ) -> Result<Version, E> {
                Ok(Version(v))
            }
        }
        d.deserialize_u64(V)
    }
}

/// Whether arrays and objects in `line` nest deeper than [`MAX_DEPTH`]:
/// one pass over the bytes, strings skipped, before the parser (whose
/// own limit is deeper) sees them.
fn too_deep(line: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in line {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

impl Request {
    /// Parses one request line (without its newline).
    pub fn parse(line: &[u8]) -> Result<Request, BadRequest> {
        let w = Request::envelope(line)?;
        let call = Request::arguments(line, &w.op)?;
        Ok(Request {
            call,
            detach: w.detach,
        })
    }

    /// The operation's name a line asks for (cut as [`clip`] cuts it),
    /// its envelope checked but not its arguments: what the daemon
    /// looks at before it spends anything on a caller that may ask for
    /// nothing but `version`.
    pub fn operation(line: &[u8]) -> Result<String, BadRequest> {
        Request::envelope(line).map(|w| clip(&w.op, MAX_ECHO))
    }

    fn envelope(line: &[u8]) -> Result<Wire, BadRequest> {
        if line.len() >= MAX_LINE {
            return Err(BadRequest::TooLong);
        }
        if too_deep(line) {
            return Err(BadRequest::TooDeep);
        }
        let w: Wire = serde_json::from_slice(line).map_err(|e| {
            let e = e.to_string();
            if e.starts_with("invalid type") && e.contains("protocol version") {
                BadRequest::Malformed(
                    "\"v\" must be a protocol version number".into(),
                )
            } else {
                BadRequest::Malformed(clip(&e, MAX_DETAIL))
            }
        })?;
        if w.v.0 != u64::from(VERSION) {
            return Err(BadRequest::Version { got: w.v.0 });
        }
        Ok(w)
    }

    /// The arguments of `op`, read from the line again now that their
    /// type is known.
    fn arguments(line: &[u8], op: &str) -> Result<Call, BadRequest> {
        fn typed<T: serde::de::DeserializeOwned>(
            op: &str,
            line: &[u8],
        ) -> Result<T, BadRequest> {
            let bad = |e: serde_json::Error| BadRequest::Args {
                op: op.into(),
                why: clip(&e.to_string(), MAX_DETAIL),
            };
            let w: WireArgs<T> = serde_json::from_slice(line).map_err(bad)?;
            match w.args {
                Some(a) => Ok(a),
                // Missing arguments are `{}`: the fields' defaults, or
                // the missing field named.
                None => serde_json::from_slice(b"{}").map_err(bad),
            }
        }
        let none = || -> Result<(), BadRequest> {
            typed::<NoArgs>(op, line).map(|_| ()).map_err(|_| {
                BadRequest::Args {
                    op: op.into(),
                    why: "takes no arguments".into(),
                }
            })
        };
        Ok(match op {
            "version" => none().map(|()| Call::Version)?,
            "copy" => Call::Copy(typed(op, line)?),
            "install" => Call::Install(typed(op, line)?),
            "uninstall" => Call::Uninstall(typed(op, line)?),
            "update" => Call::Update(typed(op, line)?),
            "rollback" => Call::Rollback(typed(op, line)?),
            "provision" => Call::Provision(typed(op, line)?),
            "cache-list" => none().map(|()| Call::CacheList)?,
            "cache-gc" => Call::CacheGc(typed(op, line)?),
            "jobs" => none().map(|()| Call::Jobs)?,
            "status" => Call::Status(typed(op, line)?),
            "cancel" => Call::Cancel(typed(op, line)?),
            _ => return Err(BadRequest::UnknownOp(clip(op, MAX_ECHO))),
        })
    }

    /// The request as one line (without its newline).
    pub fn to_line(&self) -> String {
        let args = match &self.call {
            Call::Version | Call::CacheList | Call::Jobs => {
                Args::None(NoArgs {})
            }
            Call::Copy(a) => Args::Copy(a),
            Call::Install(a) => Args::Install(a),
            Call::Uninstall(a) => Args::Uninstall(a),
            Call::Update(a) => Args::Update(a),
            Call::Rollback(a) => Args::Rollback(a),
            Call::Provision(a) => Args::Provision(a),
            Call::CacheGc(a) => Args::CacheGc(a),
            Call::Status(a) | Call::Cancel(a) => Args::Job(a),
        };
        serde_json::to_string(&Line {
            v: VERSION,
            op: self.call.name(),
            args,
            detach: self.detach,
        })
        // Strings, numbers, and lists and structs of them: always JSON.
        .expect("a request is always JSON")
    }
}
