//! qcow2 → sparse raw, in parallel.
//!
//! The guest's clusters are split into ranges as equal as can be, one per
//! thread (no more threads than clusters). Each thread walks its range,
//! skips the span of every unallocated L2 table in one step, gathers runs of clusters whose host data is
//! contiguous (read with one `pread` of up to 4 MiB), inflates compressed
//! clusters, and writes only the 4 KiB blocks that are not all zeros.
//! Unallocated and zero clusters are never touched: they stay holes in the
//! output, whose length is set to the virtual size first. Unallocated
//! clusters of an image with a backing file, and clusters of mixed
//! subclusters, are read through the chain a cluster at a time and
//! written the same way.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::buf::{PAGE, aligned};
use super::error::{Error, Result};
use super::reader::{Image, Mapping};

/// How to convert.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// Threads reading and writing (at least 1).
    pub threads: usize,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions { threads: 4 }
    }
}

/// What a conversion did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// The virtual size (the output's length).
    pub virtual_size: u64,
    /// Bytes written to the output.
    pub written: u64,
    /// Clusters stored plainly.
    pub data_clusters: u64,
    /// Clusters stored compressed.
    pub compressed_clusters: u64,
    /// Clusters unallocated or marked zero (left as holes).
    pub hole_clusters: u64,
    /// Of `written`, the bytes placed without passing through user space
    /// (by a [`KernelCopy`]: reflinked or copied in the kernel).
    pub placed: u64,
}

/// One run of guest clusters read in one go.
const RUN_BYTES: u64 = 4 << 20;
/// Blocks of zeros shorter than this are written, longer ones skipped.
const BLOCK: usize = 4096;

/// Converts `img` into `dst` (an empty file, opened for writing).
/// `progress` gets the guest bytes done so far, from any thread.
pub fn convert_to_raw(
    img: &Image,
    dst: &File,
    opts: &ConvertOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ConvertStats> {
    let size = img.virtual_size();
    dst.set_len(size)
        .map_err(|e| Error::io(img.path(), "truncate output", e))?;
    let cs = img.cluster_size();
    let clusters = size.div_ceil(cs);
    let threads = (opts.threads.max(1) as u64).min(clusters.max(1));
    let done = AtomicU64::new(0);
    // One thread: this one (a caller on a worker budget starts no other).
    let results: Vec<Result<ConvertStats>> = if threads == 1 {
        vec![convert_range(img, dst, 0, clusters, &done, progress)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (start, end) = partition(clusters, threads, t);
                    let done = &done;
                    s.spawn(move || {
                        convert_range(img, dst, start, end, done, progress)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
                })
                .collect()
        })
    };
    let mut total = ConvertStats {
        virtual_size: size,
        ..ConvertStats::default()
    };
    for r in results {
        let r = r?;
        total.written += r.written;
        total.data_clusters += r.data_clusters;
        total.compressed_clusters += r.compressed_clusters;
        total.hole_clusters += r.hole_clusters;
    }
    Ok(total)
}

/// Thread `t` of `threads` gets clusters `start..end`: the first
/// `clusters % threads` ranges one longer than the rest, so that the
/// ranges cover `0..clusters` exactly, in order, none empty unless
/// `clusters` is 0.
pub(crate) fn partition(clusters: u64, threads: u64, t: u64) -> (u64, u64) {
    let threads = threads.max(1);
    let (per, extra) = (clusters / threads, clusters % threads);
    let start = t * per + t.min(extra);
    let end = start + per + u64::from(t < extra);
    (start.min(clusters), end.min(clusters))
}

/// Converts clusters `start..end` of `img` into `dst`, adding the guest
/// bytes done to `done` and reporting them every 64 clusters.
fn convert_range(
    img: &Image,
    dst: &File,
    start: u64,
    end: u64,
    done: &AtomicU64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ConvertStats> {
    let cs = img.cluster_size();
    // A run never spans more than the range: small images, or many
    // threads, need no 4 MiB buffer each.
    let (mut raw, at) = aligned(
        RUN_BYTES
            .max(cs)
            .min((end - start).max(1).saturating_mul(cs)) as usize,
    );
    let len = raw.len() - PAGE;
    let mut w = RangeWriter {
        img,
        dst,
        buf: &mut raw[at..at + len],
        one: Vec::new(),
        run: None,
        st: ConvertStats::default(),
    };
    let mut n = start;
    let mut reported = start;
    let mut l2 = None;
    while n < end {
        if let Some(next) = img.unmapped_until(n) {
            // No L2 table: the whole span reads as zeros.
            w.flush()?;
            let next = next.min(end);
            w.st.hole_clusters += next - n;
            n = next;
        } else {
            w.cluster(n, img.map_with(n, &mut l2)?)?;
            n += 1;
        }
        if n - reported >= 64 || n == end {
            let bytes = (n - reported) * cs;
            progress(done.fetch_add(bytes, Ordering::Relaxed) + bytes);
            reported = n;
        }
    }
    w.flush()?;
    Ok(w.st)
}

/// One thread's writing of its range: the run of host-contiguous data
/// clusters it is gathering, and what it wrote so far.
struct RangeWriter<'a> {
    img: &'a Image,
    dst: &'a File,
    /// Holds a run's data.
    buf: &'a mut [u8],
    /// A cluster read through the chain.
    one: Vec<u8>,
    /// The current run: first guest cluster, first host offset, clusters.
    run: Option<(u64, u64, u64)>,
    st: ConvertStats,
}

impl RangeWriter<'_> {
    /// Writes the run gathered so far, if any.
    fn flush(&mut self) -> Result<()> {
        if let Some(r) = self.run.take() {
            self.st.written += flush_run(self.img, self.dst, r, self.buf)?;
        }
        Ok(())
    }

    /// Guest cluster `n`, mapped to `m`: extends the run, or ends it and
    /// writes the cluster (or starts a new run).
    fn cluster(&mut self, n: u64, m: Mapping) -> Result<()> {
        let (img, cs) = (self.img, self.img.cluster_size());
        let size = img.virtual_size();
        let extends = matches!((self.run, m), (Some((_, h, k)), Mapping::Data(host))
            if host == h + k * cs && (k + 1) * cs <= RUN_BYTES);
        if !extends {
            self.flush()?;
        }
        let st = &mut self.st;
        match m {
            Mapping::Data(host) => {
                st.data_clusters += 1;
                match &mut self.run {
                    Some((_, _, k)) if extends => *k += 1,
                    _ => self.run = Some((n, host, 1)),
                }
            }
            Mapping::Compressed(off, len) => {
                st.compressed_clusters += 1;
                let c = img.inflate(n, off, len)?;
                let take = cs.min(size - n * cs) as usize;
                st.written +=
                    write_nonzero(img, self.dst, &c.bytes()[..take], n * cs)?;
            }
            Mapping::Zero => st.hole_clusters += 1,
            Mapping::Unallocated if !img.has_backing() => st.hole_clusters += 1,
            Mapping::Unallocated | Mapping::Sub { .. } => {
                st.data_clusters += 1;
                let take = cs.min(size - n * cs) as usize;
                self.one.resize(take, 0);
                img.read_mapped(n, m, 0, &mut self.one)?;
                st.written += write_nonzero(img, self.dst, &self.one, n * cs)?;
            }
        }
        Ok(())
    }
}

/// Reads a run of contiguous data clusters and writes its non-zero blocks.
fn flush_run(
    img: &Image,
    dst: &File,
    (guest, host, k): (u64, u64, u64),
    buf: &mut [u8],
) -> Result<u64> {
    let cs = img.cluster_size();
    let len = (k * cs).min(img.virtual_size() - guest * cs) as usize;
    let data = &mut buf[..len];
    img.read_host(data, host)?;
    write_nonzero(img, dst, data, guest * cs)
}

/// Writes `data` at `at`, skipping 4 KiB blocks of zeros; adjacent
/// non-zero blocks go out in one write.
fn write_nonzero(img: &Image, dst: &File, data: &[u8], at: u64) -> Result<u64> {
    let mut written = 0;
    for_each_nonzero(data, |s, e| {
        dst.write_all_at(&data[s..e], at + s as u64)
            .map_err(|e| Error::io(img.path(), "write output", e))?;
        written += (e - s) as u64;
        Ok(())
    })?;
    Ok(written)
}

/// Calls `f` with each span `start..end` of `data` made of adjacent 4 KiB
/// blocks that are not all zeros (the last block may be shorter).
fn for_each_nonzero(
    data: &[u8],
    mut f: impl FnMut(usize, usize) -> Result<()>,
) -> Result<()> {
    let mut start: Option<usize> = None;
    for (i, b) in data.chunks(BLOCK).enumerate() {
        // An OR over the whole block, without an early exit, so that it
        // vectorises.
        let zero = b.iter().fold(0u8, |a, &x| a | x) == 0;
        match (zero, start) {
            (true, Some(s)) => {
                f(s, i * BLOCK)?;
                start = None;
            }
            (false, None) => start = Some(i * BLOCK),
            _ => {}
        }
    }
    if let Some(s) = start {
        f(s, data.len())?;
    }
    Ok(())
}

/// Reads of the image file in [`convert_to_raw_streaming`].
const CHUNK: usize = 4 << 20;
/// Chunks queued for each of the sink and the writer.
const IN_FLIGHT: usize = 4;
/// Chunk buffers: the queues' and one in the hands of each thread.
const BUFFERS: usize = IN_FLIGHT + 3;
/// Plain clusters mapped at most, for the file-order walk; an image with
/// more (4 TiB of data at 64 KiB clusters, or a hostile one whose L1
/// entries all name one L2 table) is converted in guest order instead.
const MAX_MAPPED: usize = 1 << 26;

/// Places plain clusters' bytes from the image file in the output
/// without passing them through user space, where the caller can: a
/// reflink where both files share a filesystem that can, an in-kernel
/// copy elsewhere. This crate makes no system calls of its own; the
/// caller supplies them.
pub trait KernelCopy: Sync {
    /// Places `len` bytes of `src` at `src_off` at `dst_off` of `dst`.
    /// Returns how many bytes from the front of the range were placed;
    /// the converter writes the rest from the bytes it read.
    fn copy(
        &self,
        src: &File,
        src_off: u64,
        dst: &File,
        dst_off: u64,
        len: u64,
    ) -> std::io::Result<u64>;

    /// Told of ranges of `dst` the converter has finished (written or
    /// placed), adjacent ones merged: a caller that will flush the output
    /// can start writing them back here, while the conversion goes on.
    /// Does nothing unless overridden.
    fn finished(&self, _dst: &File, _off: u64, _len: u64) {}
}

/// Finished ranges of the output, merged while adjacent and handed to
/// [`KernelCopy::finished`] in pieces of at least [`WRITEBACK`] bytes (or
/// when the next range is elsewhere), and the rest when dropped.
struct Finished<'a> {
    kernel: &'a dyn KernelCopy,
    dst: &'a File,
    pending: Option<(u64, u64)>,
}

/// Ranges told to [`KernelCopy::finished`] at a time, at least.
const WRITEBACK: u64 = 8 << 20;

impl<'a> Finished<'a> {
    fn new(kernel: &'a dyn KernelCopy, dst: &'a File) -> Self {
        Finished {
            kernel,
            dst,
            pending: None,
        }
    }

    fn add(&mut self, off: u64, len: u64) {
        match &mut self.pending {
            Some((_, end)) if *end == off => *end += len,
            _ => {
                self.tell();
                self.pending = Some((off, off + len));
            }
        }
        if self.pending.is_some_and(|(s, e)| e - s >= WRITEBACK) {
            self.tell();
        }
    }

    fn tell(&mut self) {
        if let Some((s, e)) = self.pending.take() {
            self.kernel.finished(self.dst, s, e - s);
        }
    }
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.tell();
    }
}

/// Places nothing: every byte is written from the buffer that read it.
#[derive(Clone, Copy, Debug, Default)]
pub struct UserSpace;

impl KernelCopy for UserSpace {
    fn copy(
        &self,
        _: &File,
        _: u64,
        _: &File,
        _: u64,
        _: u64,
    ) -> std::io::Result<u64> {
        Ok(0)
    }
}

/// [`convert_to_raw_streaming_with`], every byte written from user
/// space.
pub fn convert_to_raw_streaming(
    img: &Image,
    dst: &File,
    opts: &ConvertOptions,
    sink: &mut (dyn FnMut(&[u8]) + Send),
) -> Result<ConvertStats> {
    convert_to_raw_streaming_with(img, dst, opts, sink, &UserSpace)
}

/// A buffer of the image file, shared by the sink and the writer; it
/// goes back to the pool when the last of them drops it, whichever that
/// is, and also when a queue is dropped with it inside (a writer that
/// failed), so the reader never waits for a buffer that is gone.
struct Chunk {
    at: u64,
    n: usize,
    raw: Vec<u8>,
    off: usize,
    home: std::sync::mpsc::SyncSender<(Vec<u8>, usize)>,
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.n]
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // The pool has room for every buffer: this never blocks.
        let _closed = self
            .home
            .try_send((std::mem::take(&mut self.raw), self.off));
    }
}

/// Converts `img` into `dst` like [`convert_to_raw`], and hands every
/// byte of the image *file*, front to back, to `sink` (for a digest),
/// then every byte of each other file it reads (its data file, its
/// backing chain: [`Image::files`] in order):
/// the file is read once, in large sequential reads. One thread reads;
/// the sink and the writer take each buffer at the same time. The writer
/// finds the 4 KiB blocks of plain clusters that are not all zeros in
/// the buffer and has `kernel` place them from the image file (a reflink
/// or an in-kernel copy: the bytes need not pass through user space
/// again), writing from the buffer whatever it does not place; blocks of
/// zeros stay holes. Compressed clusters are inflated meanwhile by
/// `opts.threads` threads of their own.
pub fn convert_to_raw_streaming_with(
    img: &Image,
    dst: &File,
    opts: &ConvertOptions,
    sink: &mut (dyn FnMut(&[u8]) + Send),
    kernel: &dyn KernelCopy,
) -> Result<ConvertStats> {
    // A chain, a data file or subclusters: read in guest order, the
    // sink fed from the files beside.
    let mapped = match img.is_plain() {
        true => file_order_map(img)?,
        false => None,
    };
    let Some((runs, compressed, mut st)) = mapped else {
        return convert_beside_stream(img, dst, opts, sink);
    };
    let size = img.virtual_size();
    dst.set_len(size)
        .map_err(|e| Error::io(img.path(), "truncate output", e))?;
    let file_len = img.file_len();
    let (to_sink, sink_rx) =
        std::sync::mpsc::sync_channel::<std::sync::Arc<Chunk>>(IN_FLIGHT);
    let (to_writer, writer_rx) =
        std::sync::mpsc::sync_channel::<std::sync::Arc<Chunk>>(IN_FLIGHT);
    let (home, pool) =
        std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(BUFFERS);
    for _ in 0..BUFFERS {
        let _room = home.send(aligned(CHUNK));
    }
    let (written, placed, inflated) = std::thread::scope(|s| {
        let inflater = s
            .spawn(|| inflate_all(img, dst, &compressed, opts.threads, kernel));
        let sink_thread = s.spawn(move || {
            for chunk in sink_rx {
                sink(chunk.bytes());
            }
        });
        let writer =
            s.spawn(move || write_chunks(img, dst, kernel, &runs, writer_rx));
        let failed =
            read_file_chunks(img, file_len, &pool, &home, &to_sink, &to_writer);
        drop((to_sink, to_writer));
        join(sink_thread);
        let w = join(writer);
        let c = join(inflater);
        if let Some(e) = failed {
            return Err(e);
        }
        let (w, p) = w?;
        Ok::<_, Error>((w, p, c?))
    })?;
    st.written += written + inflated;
    st.placed += placed;
    Ok(st)
}

/// The writer's side of [`convert_to_raw_streaming_with`]: each buffer
/// of the image file, front to back, placed where its plain clusters'
/// `runs` (host, guest, length) put it in `dst`; returns the bytes
/// written and placed.
fn write_chunks(
    img: &Image,
    dst: &File,
    kernel: &dyn KernelCopy,
    runs: &[(u64, u64, u64)],
    writer_rx: std::sync::mpsc::Receiver<std::sync::Arc<Chunk>>,
) -> Result<(u64, u64)> {
    let (mut written, mut placed) = (0, 0);
    let mut next = 0usize;
    let mut finished = Finished::new(kernel, dst);
    for chunk in writer_rx {
        let (at, buf) = (chunk.at, chunk.bytes());
        let end = at + buf.len() as u64;
        // Runs are sorted by host offset and do not overlap.
        while next < runs.len() && runs[next].0 + runs[next].2 <= at {
            next += 1;
        }
        let mut i = next;
        while i < runs.len() && runs[i].0 < end {
            let (host, guest, len) = runs[i];
            let from = host.max(at);
            let to = (host + len).min(end);
            let piece = &buf[(from - at) as usize..(to - at) as usize];
            let (w, p) =
                place(img, dst, kernel, piece, from, guest + (from - host))?;
            written += w;
            placed += p;
            finished.add(guest + (from - host), piece.len() as u64);
            i += 1;
        }
    }
    Ok((written, placed))
}

/// The reader's side of [`convert_to_raw_streaming_with`]: the image
/// file read front to back into the pool's buffers, each handed to the
/// sink and the writer; stops early when either has gone, and returns
/// the read's error, if any.
fn read_file_chunks(
    img: &Image,
    file_len: u64,
    pool: &std::sync::mpsc::Receiver<(Vec<u8>, usize)>,
    home: &std::sync::mpsc::SyncSender<(Vec<u8>, usize)>,
    to_sink: &std::sync::mpsc::SyncSender<std::sync::Arc<Chunk>>,
    to_writer: &std::sync::mpsc::SyncSender<std::sync::Arc<Chunk>>,
) -> Option<Error> {
    let mut at = 0u64;
    let mut failed = None;
    while at < file_len {
        let Ok((raw, off)) = pool.recv() else {
            break;
        };
        let mut chunk = Chunk {
            at,
            n: 0,
            raw,
            off,
            home: home.clone(),
        };
        let (off, raw) = (chunk.off, &mut chunk.raw);
        match img.read_file_at(&mut raw[off..off + CHUNK], at) {
            Ok(n) => {
                chunk.n = n;
                at += n as u64;
                let chunk = std::sync::Arc::new(chunk);
                if to_sink.send(std::sync::Arc::clone(&chunk)).is_err()
                    || to_writer.send(chunk).is_err()
                {
                    break;
                }
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    failed
}

/// A scoped thread's value; its panic goes on in the caller.
fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Places one piece of a run of plain clusters, read into `piece` from
/// `host` in the file, at `guest` in the output: its blocks that are not
/// all zeros by `kernel` where it can, the rest written from `piece`.
/// Returns the bytes written in all and of those, the bytes placed.
fn place(
    img: &Image,
    dst: &File,
    kernel: &dyn KernelCopy,
    piece: &[u8],
    host: u64,
    guest: u64,
) -> Result<(u64, u64)> {
    let (mut written, mut placed) = (0, 0);
    for_each_nonzero(piece, |s, e| {
        let len = (e - s) as u64;
        let k = match img.file() {
            Some(f) => kernel
                .copy(f, host + s as u64, dst, guest + s as u64, len)
                .map_err(|e| Error::io(img.path(), "copy to output", e))?
                .min(len),
            None => 0,
        };
        if k < len {
            dst.write_all_at(&piece[s + k as usize..e], guest + s as u64 + k)
                .map_err(|e| Error::io(img.path(), "write output", e))?;
        }
        written += len;
        placed += k;
        Ok(())
    })?;
    Ok((written, placed))
}

/// Plain clusters as runs `(host, guest, bytes)` sorted by host offset,
/// compressed clusters `(guest cluster, offset, length)`, and the counts;
/// `None` past [`MAX_MAPPED`].
#[allow(clippy::type_complexity)]
fn file_order_map(
    img: &Image,
) -> Result<Option<(Vec<(u64, u64, u64)>, Vec<(u64, u64, u64)>, ConvertStats)>>
{
    let cs = img.cluster_size();
    let size = img.virtual_size();
    let clusters = size.div_ceil(cs);
    let mut st = ConvertStats {
        virtual_size: size,
        ..ConvertStats::default()
    };
    let mut data: Vec<(u64, u64)> = Vec::new();
    let mut compressed = Vec::new();
    let mut l2 = None;
    let mut n = 0;
    while n < clusters {
        if let Some(next) = img.unmapped_until(n) {
            let next = next.min(clusters);
            st.hole_clusters += next - n;
            n = next;
            continue;
        }
        match img.map_with(n, &mut l2)? {
            Mapping::Data(host) => {
                st.data_clusters += 1;
                data.push((host, n));
            }
            Mapping::Compressed(off, len) => {
                st.compressed_clusters += 1;
                compressed.push((n, off, len));
            }
            Mapping::Unallocated | Mapping::Zero => st.hole_clusters += 1,
            Mapping::Sub { .. } => return Ok(None),
        }
        if data.len() + compressed.len() > MAX_MAPPED {
            return Ok(None);
        }
        n += 1;
    }
    data.sort_unstable();
    let mut runs: Vec<(u64, u64, u64)> = Vec::new();
    for (host, n) in data {
        // The last cluster may pass the virtual size: only its part
        // inside the disk is written.
        let len = cs.min(size - n * cs);
        match runs.last_mut() {
            Some((h, g, l))
                if *h + *l == host && *g + *l == n * cs && *l % cs == 0 =>
            {
                *l += len
            }
            Some((h, _, l)) if host < *h + *l => {
                // Two guest clusters on one host cluster: only a hostile
                // or corrupt image does this; guest order handles it.
                return Ok(None);
            }
            _ => runs.push((host, n * cs, len)),
        }
    }
    Ok(Some((runs, compressed, st)))
}

/// Inflates compressed clusters on `threads` threads and writes them.
fn inflate_all(
    img: &Image,
    dst: &File,
    compressed: &[(u64, u64, u64)],
    threads: usize,
    kernel: &dyn KernelCopy,
) -> Result<u64> {
    if compressed.is_empty() {
        return Ok(0);
    }
    let cs = img.cluster_size();
    let size = img.virtual_size();
    let threads = (threads.max(1) as u64).min(compressed.len() as u64);
    let results: Vec<Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (a, b) = partition(compressed.len() as u64, threads, t);
                let part = &compressed[a as usize..b as usize];
                s.spawn(move || -> Result<u64> {
                    let mut w = 0;
                    let mut finished = Finished::new(kernel, dst);
                    for &(n, off, len) in part {
                        let c = img.inflate(n, off, len)?;
                        let take = cs.min(size - n * cs) as usize;
                        w += write_nonzero(
                            img,
                            dst,
                            &c.bytes()[..take],
                            n * cs,
                        )?;
                        finished.add(n * cs, take as u64);
                    }
                    Ok(w)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    results.into_iter().sum()
}

/// Guest-order conversion while another thread reads the file in order
/// for the sink.
fn convert_beside_stream(
    img: &Image,
    dst: &File,
    opts: &ConvertOptions,
    sink: &mut (dyn FnMut(&[u8]) + Send),
) -> Result<ConvertStats> {
    std::thread::scope(|s| {
        let feeder = s.spawn(move || -> Result<()> {
            let (mut raw, off) = aligned(CHUNK);
            let buf = &mut raw[off..off + CHUNK];
            let mut at = 0;
            while at < img.file_len() {
                let n = img.read_file_at(buf, at)?;
                sink(&buf[..n]);
                at += n as u64;
            }
            for (path, file) in img.other_files() {
                let mut at = 0u64;
                loop {
                    let n = file
                        .read_at(buf, at)
                        .map_err(|e| Error::io(path, "read", e))?;
                    if n == 0 {
                        break;
                    }
                    sink(&buf[..n]);
                    at += n as u64;
                }
            }
            Ok(())
        });
        let r = convert_to_raw(img, dst, opts, &|_| {});
        let f = feeder
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        f.and(r)
    })
}

#[cfg(test)]
mod test {
    use super::partition;

    #[test]
    fn partitions_cover_every_cluster_once_in_order() {
        for clusters in 0..200u64 {
            for threads in 1..=33u64 {
                let mut next = 0;
                for t in 0..threads {
                    let (start, end) = partition(clusters, threads, t);
                    assert_eq!(start, next, "{clusters}/{threads} t{t}");
                    assert!(end >= start, "{clusters}/{threads} t{t}");
                    // Equal to within one cluster.
                    assert!(
                        end - start <= clusters.div_ceil(threads),
                        "{clusters}/{threads} t{t}"
                    );
                    next = end;
                }
                assert_eq!(next, clusters, "{clusters}/{threads}");
            }
        }
        // Large counts do not overflow.
        assert_eq!(partition(u64::MAX, 8, 7).1, u64::MAX);
    }
}
