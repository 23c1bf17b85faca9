//! `zinstall mount DIR` and `zinstall unmount DIR`: a composefs root (a
//! guest's directory, a zonepath holding `composefs.json`) mounted on
//! `DIR/root` from its store, writable through `DIR/upper`; or the
//! mount(8) lines that do the same, for fstab and systemd.

use std::path::PathBuf;

use clap::Args;

use crate::exit::Exit;

/// Where `--print`'s lines mount each image (once per image, shared by
/// every root of it).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const LOWER_BASE: &str = "/run/zinstall/composefs";

/// Arguments of `zinstall mount`.
#[derive(Args, Debug)]
pub struct MountArgs {
    /// The composefs root's directory: a guest of `provision --format
    /// composefs`, or a zonepath (it holds composefs.json).
    #[arg(required_unless_present = "zonepath", conflicts_with = "zonepath")]
    pub dir: Option<PathBuf>,
    /// The zonepath of a composefs install (the same as giving it as
    /// DIR).
    #[arg(long, short = 'z', value_name = "ZONEPATH")]
    pub zonepath: Option<PathBuf>,
    /// Mount the image alone, read-only, without DIR/upper.
    #[arg(long)]
    pub read_only: bool,
    /// Print the mkdir and mount(8) commands that mount the same root
    /// (for fstab or systemd mount units) instead of mounting it.
    #[arg(long)]
    pub print: bool,
}

/// Arguments of `zinstall unmount`.
#[derive(Args, Debug)]
pub struct UnmountArgs {
    /// The composefs root's directory, whose DIR/root is unmounted.
    pub dir: PathBuf,
}

/// Runs `zinstall mount`.
#[cfg(not(target_os = "linux"))]
pub fn mount(_args: &MountArgs) -> Exit {
    not_here()
}

/// Runs `zinstall unmount`.
#[cfg(not(target_os = "linux"))]
pub fn unmount(_args: &UnmountArgs) -> Exit {
    not_here()
}

#[cfg(not(target_os = "linux"))]
fn not_here() -> Exit {
    crate::output::error(
        "composefs is Linux's (EROFS, overlayfs and fs-verity): there are \
         no composefs roots to mount on this system",
    );
    Exit::Usage
}

/// Runs `zinstall mount`.
#[cfg(target_os = "linux")]
pub fn mount(args: &MountArgs) -> Exit {
    use zinstall_composefs::{MountVerity, Root};
    let Some(dir) = args.dir.as_ref().or(args.zonepath.as_ref()) else {
        return Exit::Usage;
    };
    let root = match Root::open(dir) {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    if args.print {
        let lines = match root
            .mount_commands(args.read_only, std::path::Path::new(LOWER_BASE))
        {
            Ok(l) => l,
            Err(e) => return failed(&e),
        };
        for argv in lines {
            let words: Vec<String> =
                argv.iter().map(|w| shell_word(w)).collect();
            crate::output::out(words.join(" "));
        }
        return Exit::Ok;
    }
    match root.mount(args.read_only, MountVerity::IfPresent) {
        Ok(()) => {
            crate::output::note(format_args!(
                "mounted {} on {}{}",
                root.record.image,
                crate::output::show(&root.mount_point()),
                if args.read_only { " (read-only)" } else { "" }
            ));
            Exit::Ok
        }
        Err(e) => failed(&e),
    }
}

/// Runs `zinstall unmount`.
#[cfg(target_os = "linux")]
pub fn unmount(args: &UnmountArgs) -> Exit {
    let done = zinstall_composefs::Root::open(&args.dir)
        .and_then(|root| root.unmount());
    match done {
        Ok(()) => Exit::Ok,
        Err(e) => failed(&e),
    }
}

/// `w` as one word of a POSIX shell command line: as is when it has
/// nothing the shell reads specially, single-quoted otherwise.
#[cfg(target_os = "linux")]
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(&b));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

#[cfg(target_os = "linux")]
fn failed(e: &zinstall_composefs::Error) -> Exit {
    crate::output::error(e);
    Exit::Failed
}
