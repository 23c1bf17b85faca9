//! A NoCloud seed's filesystem: FAT labelled `cidata`, the files in its
//! root, made in memory (it is small) and sized from what it holds.

use std::io::{Cursor, Write};

/// The smallest image made: what `cloud-localds` makes for a small
/// user-data, and room for FAT12's tables.
const MIN: u64 = 128 << 10;

/// A FAT image labelled `cidata` holding `files` (name, bytes) in its
/// root; `volume_id` is its serial number.
pub(crate) fn image(
    files: &[(&str, &[u8])],
    volume_id: u32,
) -> std::io::Result<Vec<u8>> {
    // Each file rounded up to a generous cluster, then half again for
    // the tables and directory: small files waste little, large ones fit.
    let data: u64 = files
        .iter()
        .map(|(_, b)| (b.len() as u64).next_multiple_of(4096))
        .sum();
    let size = (MIN + data + data / 2).next_multiple_of(64 << 10);
    let len = usize::try_from(size)
        .map_err(|_| std::io::Error::other("seed too large"))?;
    let mut img = Cursor::new(vec![0u8; len]);
    fatfs::format_volume(
        &mut img,
        fatfs::FormatVolumeOptions::new()
            .volume_label(*b"cidata     ")
            .volume_id(volume_id),
    )?;
    {
        let fs = fatfs::FileSystem::new(&mut img, fatfs::FsOptions::new())?;
        let root = fs.root_dir();
        for (name, bytes) in files {
            let mut f = root.create_file(name)?;
            f.write_all(bytes)?;
            f.flush()?;
        }
        drop(root);
        fs.unmount()?;
    }
    Ok(img.into_inner())
}
