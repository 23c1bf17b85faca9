//! The manifest file in the zonepath: written beside and renamed over,
//! read back with every length bounded, removed with the marker.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::format::{
    Entry, Header, MANIFEST, MAX_ENTRIES, MAX_FILE, MAX_LINE, Manifest,
    ManifestError, OLDEST, VERSION, io_err,
};

/// Writes `m` to `zonepath/name` atomically and durably.
pub fn write(
    zonepath: &Path,
    name: &str,
    m: &Manifest,
) -> Result<(), ManifestError> {
    let path = zonepath.join(name);
    let tmp = zonepath.join(format!("{name}.{}", std::process::id()));
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(io_err("remove", &tmp)(e));
        }
        _ => {}
    }
    // Our own file, made new beside the manifest and renamed over it.
    #[allow(clippy::disallowed_methods)]
    let written = (|| -> io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        // The JSON writer's many small writes are gathered before the
        // encoder: one compression call per write cost more than the
        // walk. Level 1: the manifest is written on every install.
        let mut z = io::BufWriter::with_capacity(
            256 << 10,
            zstd::stream::Encoder::new(f, 1)?,
        );
        serde_json::to_writer(&mut z, &m.header)?;
        z.write_all(b"\n")?;
        for e in &m.entries {
            serde_json::to_writer(&mut z, e)?;
            z.write_all(b"\n")?;
        }
        let f = z.into_inner().map_err(|e| e.into_error())?.finish()?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        sync_dir(zonepath)
    })();
    if let Err(e) = written {
        let _already_failing = fs::remove_file(&tmp);
        return Err(io_err("write", &path)(e));
    }
    Ok(())
}

/// Makes what was renamed or removed in the directory `dir` durable:
/// the directory opened without following a link, and `fsync`ed.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let d =
        zinstall_engine::beneath::Root::open(dir).map_err(io::Error::other)?;
    rustix::fs::fsync(&d).map_err(io::Error::from)
}

/// Reads `zonepath/name`: `None` if there is none.
pub fn read(
    zonepath: &Path,
    name: &str,
) -> Result<Option<Manifest>, ManifestError> {
    let path = zonepath.join(name);
    // Ours, but in a zonepath someone else may have written to: read as
    // any file the project did not make (no link followed, a regular
    // file or refused, never blocking).
    let f = match zinstall_core::foreign::open(
        &path,
        zinstall_core::foreign::Follow::No,
    ) {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(io_err("open", &path)(e.into())),
    };
    let md = f.metadata().map_err(io_err("stat", &path))?;
    if !md.is_file() || md.len() > MAX_FILE {
        return Err(ManifestError::Invalid {
            path,
            why: format!("not a regular file of at most {MAX_FILE} bytes"),
        });
    }
    parse(f, &path).map(Some)
}

/// A manifest from what `r` reads (zstd-compressed JSON lines), `path`
/// naming it in errors; every length bounded before it sizes anything.
pub fn parse(r: impl Read, path: &Path) -> Result<Manifest, ManifestError> {
    let path = path.to_path_buf();
    let z = zstd::stream::Decoder::new(r.take(MAX_FILE))
        .map_err(io_err("read", &path))?;
    let mut r = BufReader::new(z);
    let invalid = |why: String| ManifestError::Invalid {
        path: path.clone(),
        why,
    };
    let mut line = Vec::new();
    let next = |r: &mut BufReader<_>,
                line: &mut Vec<u8>|
     -> Result<bool, ManifestError> {
        line.clear();
        let n = r
            .by_ref()
            .take(MAX_LINE + 1)
            .read_until(b'\n', line)
            .map_err(io_err("read", &path))?;
        if n as u64 > MAX_LINE {
            return Err(ManifestError::Invalid {
                path: path.clone(),
                why: format!("a line longer than {MAX_LINE} bytes"),
            });
        }
        Ok(n > 0)
    };
    if !next(&mut r, &mut line)? {
        return Err(invalid("empty".into()));
    }
    let header: Header = serde_json::from_slice(&line)
        .map_err(|e| invalid(format!("header: {e}")))?;
    if !(OLDEST..=VERSION).contains(&header.version) {
        return Err(invalid(format!(
            "version {} (this zinstall reads {VERSION})",
            header.version
        )));
    }
    if header.entries > MAX_ENTRIES as u64 {
        return Err(invalid(format!(
            "{} entries, more than {MAX_ENTRIES}",
            header.entries
        )));
    }
    // Sized by the header only up to a bound: the entries themselves
    // decide the rest.
    let mut entries =
        Vec::with_capacity((header.entries as usize).min(1 << 20));
    let mut lineno = 1u64;
    while next(&mut r, &mut line)? {
        lineno += 1;
        if entries.len() >= MAX_ENTRIES {
            return Err(invalid(format!("more than {MAX_ENTRIES} entries")));
        }
        let e: Entry = serde_json::from_slice(&line)
            .map_err(|e| invalid(format!("line {lineno}: {e}")))?;
        entries.push(e);
    }
    if entries.len() as u64 != header.entries {
        return Err(invalid(format!(
            "{} entries, the header says {}",
            entries.len(),
            header.entries
        )));
    }
    Ok(Manifest { header, entries })
}

/// Removes every manifest of the zonepath and their temporaries.
pub fn clear(zonepath: &Path) -> io::Result<()> {
    crate::state::remove_files_where(zonepath, |n| n.starts_with(MANIFEST))
}
