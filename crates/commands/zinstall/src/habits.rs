//! Command lines typed from habit (cp, rsync, tar): what zinstall does
//! instead, said before clap's generic "unexpected argument". The flags
//! that keep what zinstall always keeps (`-a`, `-r`, `-p`, ...) are
//! plain clap arguments of `copy`; this answers the ones that would mean
//! something zinstall does not do, and the value of an option whose `=`
//! was left out.

use std::ffi::OsString;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// A flag from another tool's habits, and what to say to it.
struct Habit {
    /// The command it is answered on (`None`: any).
    command: Option<&'static str>,
    /// The spellings clap reports as unknown (`--delete` also matches
    /// `--delete-after` and `--delete=...`).
    flags: &'static [&'static str],
    /// Whether a long spelling also matches the longer flags it begins.
    prefix: bool,
    /// What zinstall does instead, from the whole command line.
    says: fn(&[OsString]) -> String,
}

/// Each habit zinstall answers.
const HABITS: &[Habit] = &[
    Habit {
        command: Some("copy"),
        flags: &["--delete", "--del"],
        prefix: true,
        says: |_| {
            "zinstall copy never deletes: into an empty DST it makes an \
             exact copy, and --merge replaces the entries that differ and \
             keeps the rest; to make DST exact, copy into a new directory; \
             to bring an installed root in line with its profile, removing \
             what the source no longer has, run zinstall update --zonepath \
             ZONEPATH"
                .into()
        },
    },
    Habit {
        command: Some("copy"),
        flags: &["--no-preserve"],
        prefix: false,
        says: |_| {
            "zinstall copy always keeps owners, modes, times, ACLs, \
             xattrs, links and holes and cannot drop any of them; use cp \
             --no-preserve for a copy without them"
                .into()
        },
    },
    Habit {
        command: Some("install"),
        flags: &[
            "-C",
            "-x",
            "-f",
            "--directory",
            "--extract",
            "--get",
            "--file",
        ],
        prefix: false,
        says: tar_install,
    },
];

/// `install -C DIR -xf F`, said as zinstall writes it.
fn tar_install(args: &[OsString]) -> String {
    let mut dir = None;
    let mut files = Vec::new();
    let mut it = args.iter().skip(2).map(|a| a.to_string_lossy());
    while let Some(a) = it.next() {
        if let Some(d) = a.strip_prefix("--directory=") {
            dir = Some(d.to_string());
        } else if let Some(f) = a.strip_prefix("--file=") {
            files.push(f.to_string());
        } else if a == "--directory" {
            dir = it.next().map(|d| d.to_string());
        } else if a == "--file" {
            files.extend(it.next().map(|d| d.to_string()));
        } else if a.starts_with("--") {
        } else if let Some(flags) = a.strip_prefix('-') {
            // tar's bundled flags: `-C` and `-f` take the next argument
            // (or the rest of the bundle, `-CDIR`).
            for (i, c) in flags.char_indices() {
                if c == 'C' || c == 'f' {
                    let rest = &flags[i + 1..];
                    let value = if rest.is_empty() {
                        it.next().map(|v| v.to_string())
                    } else {
                        Some(rest.to_string())
                    };
                    if c == 'C' {
                        dir = value;
                    } else {
                        files.extend(value);
                    }
                    break;
                }
            }
        } else {
            files.push(a.to_string());
        }
    }
    let dir = dir.unwrap_or_else(|| "ZONEPATH".into());
    let files = if files.is_empty() {
        "ARCHIVE".into()
    } else {
        files.join(" ")
    };
    format!(
        "zinstall install is not tar: it takes the zonepath with \
         --zonepath and the archives as arguments: zinstall install \
         --zonepath {dir} {files}"
    )
}

/// What to say to a command line clap refused as an unknown argument,
/// when a habit explains it.
pub fn answer(e: &clap::Error, args: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // A shifted value shows as one argument too many, or as a command
    // zinstall does not have.
    if matches!(
        e.kind(),
        ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand
    ) && let Some(said) = spaced_after_error(args)
    {
        return Some(said);
    }
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = arg.split('=').next().unwrap_or(arg);
    let command = command_name(args);
    HABITS
        .iter()
        .find(|h| {
            h.command.is_none_or(|c| Some(c) == command.as_deref())
                && h.flags.iter().any(|f| {
                    flag == *f
                        || (h.prefix
                            && f.starts_with("--")
                            && flag.starts_with(&format!("{f}-")))
                })
        })
        .map(|h| (h.says)(args))
}

/// The subcommand the line names: its first argument not a flag.
fn command_name(args: &[OsString]) -> Option<String> {
    args.get(1..)?
        .iter()
        .map(|a| a.to_string_lossy())
        .find(|a| !a.starts_with('-'))
        .map(|a| a.into_owned())
}

/// An option whose value is optional and must follow an `=`: a value
/// written after a space is read as the command's next argument, which
/// for these would be the wrong file.
struct Spaced {
    /// The flag.
    flag: &'static str,
    /// Whether the next argument is surely meant as its value.
    meant: fn(&Path) -> bool,
}

/// Each option taking a value only after `=`. Accepting the spaced form
/// is not possible in general (`copy --daemon SRC DST` is the default
/// socket and two paths), so a spaced value is refused, with the `=`
/// form to write, where the next argument is surely the value: a socket
/// for `--daemon`, a qemu-img for `--qemu-img`; or wherever clap refused
/// the line.
const SPACED: &[Spaced] = &[
    Spaced {
        flag: "--daemon",
        meant: |p| {
            p.extension().is_some_and(|e| e == "sock")
                || std::fs::symlink_metadata(p)
                    .is_ok_and(|m| m.file_type().is_socket())
        },
    },
    Spaced {
        flag: "--qemu-img",
        // An image has a dot in its name; qemu-img and qemu-img-8 do not.
        meant: |p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("qemu-img") && !n.contains('.')
            })
        },
    },
];

/// The first spaced value of an `=` option, as (flag, value), among the
/// arguments before `--`, if `meant` says it is one.
fn spaced(
    args: &[OsString],
    meant: impl Fn(&Spaced, &Path) -> bool,
) -> Option<(&'static str, String)> {
    let args: Vec<_> = args.iter().take_while(|a| *a != "--").collect();
    args.windows(2).find_map(|w| {
        let next = w[1].to_string_lossy();
        SPACED
            .iter()
            .find(|s| {
                w[0] == s.flag
                    && !next.starts_with('-')
                    && meant(s, Path::new(w[1]))
            })
            .map(|s| (s.flag, next.into_owned()))
    })
}

/// What to say of a spaced value.
fn spaced_message(flag: &str, value: &str) -> String {
    format!(
        "{flag} takes its value after an =: write {flag}={value} (a bare \
         {flag} takes the default, and {value} would be read as the \
         command's next argument)"
    )
}

/// A command line with a value written after a space to an `=` option
/// that is surely that value: refused before it runs, as what to write.
pub fn spaced_value(args: &[OsString]) -> Option<String> {
    spaced(args, |s, p| (s.meant)(p))
        .map(|(flag, value)| spaced_message(flag, &value))
}

/// A command line clap refused, with a spaced value to an `=` option:
/// the refusal is the spaced value's (the value shifted every argument
/// after it), unless it is a command's name (`zinstall --daemon copy`).
fn spaced_after_error(args: &[OsString]) -> Option<String> {
    let commands = [
        "copy",
        "install",
        "uninstall",
        "update",
        "rollback",
        "provision",
        "cache",
        "jobs",
        "cancel",
    ];
    spaced(args, |_, p| !commands.iter().any(|c| p == Path::new(c)))
        .map(|(flag, value)| spaced_message(flag, &value))
}
