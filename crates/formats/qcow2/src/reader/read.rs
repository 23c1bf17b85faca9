//! Reading guest bytes: each cluster from where its mapping says (the
//! image, its data file, its backing file, or zeros), compressed ones
//! inflated.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::cache::Cluster;
use super::image::{Backing, Image};
use super::map::Mapping;
use crate::error::{Error, Problem, Result};
use crate::header::INCOMPAT_COMPRESSION;

impl Image {
    /// Fills `buf` with the backing file's bytes at guest offset `at`
    /// (zeros past its end, or without one).
    pub(crate) fn read_backing(&self, buf: &mut [u8], at: u64) -> Result<()> {
        match &self.backing {
            None => buf.fill(0),
            Some(Backing::Qcow2(b)) => b.read_at(buf, at)?,
            Some(Backing::Raw { path, file, len }) => {
                let avail =
                    len.saturating_sub(at).min(buf.len() as u64) as usize;
                let (data, tail) = buf.split_at_mut(avail);
                file.read_exact_at(data, at)
                    .map_err(|e| Error::io(path, "read backing file", e))?;
                tail.fill(0);
            }
        }
        Ok(())
    }

    /// Fills `out` with guest cluster `n`'s bytes from `within`, mapped
    /// as `m` (not compressed).
    pub(crate) fn read_mapped(
        &self,
        n: u64,
        m: Mapping,
        within: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let cs = self.cluster_size();
        match m {
            Mapping::Unallocated => self.read_backing(out, n * cs + within),
            Mapping::Zero => {
                out.fill(0);
                Ok(())
            }
            Mapping::Data(host) => self.read_host(out, host + within),
            Mapping::Compressed(off, len) => {
                let c = self.inflate(n, off, len)?;
                let w = within as usize;
                out.copy_from_slice(&c.bytes()[w..w + out.len()]);
                Ok(())
            }
            Mapping::Sub { host, alloc, zero } => {
                // 32 subclusters a cluster.
                let sc = cs / 32;
                let end = within + out.len() as u64;
                let mut at = within;
                while at < end {
                    let k = at / sc;
                    let stop = ((k + 1) * sc).min(end);
                    let piece = &mut out
                        [(at - within) as usize..(stop - within) as usize];
                    if alloc & (1 << k) != 0 {
                        self.read_host(piece, host + at)?;
                    } else if zero & (1 << k) != 0 {
                        piece.fill(0);
                    } else {
                        self.read_backing(piece, n * cs + at)?;
                    }
                    at = stop;
                }
                Ok(())
            }
        }
    }

    /// Reads a data cluster's bytes at `host + within` into `buf`; bytes
    /// past the end of the file (qemu-img does not pad) read as zeros.
    pub(crate) fn read_host(&self, buf: &mut [u8], host: u64) -> Result<()> {
        let len = self.data.as_ref().map_or(self.file_len, |d| d.len);
        let avail = len.saturating_sub(host).min(buf.len() as u64) as usize;
        let (data, tail) = buf.split_at_mut(avail);
        match &self.data {
            Some(d) => d
                .file
                .read_exact_at(data, host)
                .map_err(|e| Error::io(&d.path, "read data file", e))?,
            None => self
                .file
                .read_exact_at(data, host)
                .map_err(|e| Error::io(&self.path, "read data cluster", e))?,
        }
        tail.fill(0);
        Ok(())
    }

    /// The inflated bytes of compressed guest cluster `n`.
    pub(crate) fn inflate(
        &self,
        n: u64,
        off: u64,
        len: u64,
    ) -> Result<Arc<Cluster>> {
        if let Some(c) = self
            .inflated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(n)
        {
            return Ok(c);
        }
        let cs = self.cluster_size() as usize;
        let len = len.min(self.file_len.saturating_sub(off)) as usize;
        let mut packed = vec![0u8; len];
        self.file
            .read_exact_at(&mut packed, off)
            .map_err(|e| Error::io(&self.path, "read compressed cluster", e))?;
        let (mut raw, at) = crate::buf::aligned(cs);
        let out = &mut raw[at..at + cs];
        let fail = |why: String| {
            Error::problem(
                &self.path,
                Problem::Decompress {
                    guest_offset: n * cs as u64,
                    why,
                },
            )
        };
        if self.header.incompatible & INCOMPAT_COMPRESSION != 0 {
            // zstd: one or more frames until a whole cluster is out.
            let mut d = zstd::stream::read::Decoder::with_buffer(&packed[..])
                .map_err(|e| fail(format!("zstd: {e}")))?;
            // A frame may declare a window of up to 2 GiB, which the
            // decoder would allocate; one cluster never needs more than
            // its own size (QEMU compresses each cluster alone).
            d.window_log_max(self.header.cluster_bits.max(10) + 2)
                .map_err(|e| fail(format!("zstd: {e}")))?;
            d.read_exact(out).map_err(|e| fail(format!("zstd: {e}")))?;
        } else {
            // Raw deflate, no zlib header.
            let mut d = flate2::Decompress::new(false);
            match d.decompress(&packed, out, flate2::FlushDecompress::Finish) {
                Ok(_) if d.total_out() as usize == cs => {}
                Ok(_) => {
                    return Err(fail(format!(
                        "deflate gave {} of {cs} bytes",
                        d.total_out()
                    )));
                }
                Err(e) => return Err(fail(format!("deflate: {e}"))),
            }
        }
        let out = Arc::new(Cluster { raw, at, len: cs });
        self.inflated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(n, Arc::clone(&out));
        Ok(out)
    }

    /// Fills `buf` with the guest's bytes at `offset`; past the virtual
    /// size reads as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let cs = self.cluster_size();
        let mut done = 0usize;
        while done < buf.len() {
            // Past u64::MAX is past any virtual size: zeros.
            let pos = offset.saturating_add(done as u64);
            let n = pos / cs;
            let within = (pos % cs) as usize;
            let take = (cs as usize - within).min(buf.len() - done);
            let out = &mut buf[done..done + take];
            if pos >= self.header.size {
                out.fill(0);
            } else {
                self.read_mapped(n, self.map(n)?, within as u64, out)?;
            }
            done += take;
        }
        Ok(())
    }
}
