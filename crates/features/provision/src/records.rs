//! The cache's own small files read back (an entry's `meta.json`, an
//! `.altered` marker, an index naming an entry, a `.users` list): the
//! project wrote them, but in a directory others may have reached since,
//! so they are read as any foreign file is ([`zinstall_core::foreign`]):
//! never through a link, only a regular file, within a record's cap.

use std::io;
use std::path::Path;

use zinstall_core::foreign::{self, Follow, Kind};

/// `path` whole.
pub(crate) fn read(path: &Path) -> io::Result<Vec<u8>> {
    Ok(foreign::read(path, Follow::No, Kind::Record)?)
}

/// `path` whole, as text.
pub(crate) fn read_text(path: &Path) -> io::Result<String> {
    Ok(foreign::read_to_string(path, Follow::No, Kind::Record)?)
}
