//! `zinstall statemap FILE`: draw a statemap and summarize it.

use crate::exit::Exit;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;

use clap::Args;
use zinstall_statemap::{self as statemap, RenderOptions, Summary};

use crate::output;

/// Arguments of `zinstall statemap`.
#[derive(Args, Debug)]
pub struct StatemapArgs {
    /// A statemap file: from --statemap, the DTrace or bpftrace scripts,
    /// or any program writing the statemap format.
    pub file: PathBuf,
    /// Where to write the SVG (default: FILE with the extension .svg).
    #[arg(short, long, value_name = "OUT.svg")]
    pub output: Option<PathBuf>,
    /// Width of the drawing in pixels.
    #[arg(long, default_value_t = 1200.0)]
    pub width: f64,
}

/// Renders and summarizes; exit 1 if the file cannot be read.
pub fn run(args: &StatemapArgs) -> Exit {
    // A statemap may be large: streamed, but only from a regular file.
    let opened = zinstall_core::foreign::open(
        &args.file,
        zinstall_core::foreign::Follow::Yes,
    );
    let map = match opened {
        Ok(f) => match statemap::parse(BufReader::new(f)) {
            Ok(m) => m,
            Err(e) => {
                output::error(parse_error(&args.file, &e));
                return Exit::Failed;
            }
        },
        Err(e) => {
            output::error(format_args!("open {}: {e}", args.file.display()));
            return Exit::Failed;
        }
    };
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| args.file.with_extension("svg"));
    let opts = RenderOptions {
        width: args.width,
        ..RenderOptions::default()
    };
    // Every write error fails the command, the last ones too: the
    // buffer is flushed and the file synced before success is said.
    let written = File::create(&out).and_then(|f| {
        let mut w = BufWriter::new(f);
        statemap::render_svg(&map, &opts, &mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        match f.sync_all() {
            // A character device such as /dev/stdout cannot be synced.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
            r => r,
        }
    });
    if let Err(e) = written {
        output::error(format_args!("write {}: {e}", out.display()));
        return Exit::Failed;
    }
    output::out(Summary::of(&map));
    output::out(format_args!("wrote {}", out.display()));
    Exit::Ok
}

/// A statemap that does not parse, shown with the line at fault and a
/// caret (under the column of a JSON error, else the line's start).
fn parse_error(file: &std::path::Path, e: &statemap::ParseError) -> String {
    let plain = format!("{}: {e}", file.display());
    if e.line == 0 {
        return plain;
    }
    use std::io::BufRead;
    let opened =
        zinstall_core::foreign::open(file, zinstall_core::foreign::Follow::Yes);
    let line = opened.ok().and_then(|f| {
        BufReader::new(f)
            .split(b'\n')
            .nth(e.line - 1)
            .and_then(Result::ok)
    });
    let Some(line) = line else { return plain };
    let text = String::from_utf8_lossy(&line);
    let why = e.to_string();
    let why = why.split_once(": ").map_or(why.as_str(), |w| w.1);
    let mut s =
        zinstall_engine::Syntax::at_line(file, &text, 1, e.column.max(1), why);
    s.line = e.line;
    s.to_string()
}
