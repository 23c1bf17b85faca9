//! qcow2 → sparse raw, in parallel.
//!
//! The guest's clusters are split into ranges as equal as can be, one per
//! thread (no more threads than clusters). Each thread walks its range,
//! skips the span of every unallocated L2 table in one step, gathers runs of clusters whose host data is
//! contiguous (read with one `pread` of up to 4 MiB), inflates compressed
//! clusters, and writes only the 4 KiB blocks that are not all zeros.
//! Unallocated and zero clusters are never touched: they stay holes in the
//! output, whose length is set to the virtual size first.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::reader::{Image, Mapping};
use super::{Error, Result};

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
    let results: Vec<Result<ConvertStats>> = std::thread::scope(|s| {
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
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
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

fn convert_range(
    img: &Image,
    dst: &File,
    start: u64,
    end: u64,
    done: &AtomicU64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ConvertStats> {
    let cs = img.cluster_size();
    let size = img.virtual_size();
    let mut st = ConvertStats::default();
    // A run never spans more than the range: small images, or many
    // threads, need no 4 MiB buffer each.
    let mut buf = vec![
        0u8;
        RUN_BYTES
            .max(cs)
            .min((end - start).max(1).saturating_mul(cs))
            as usize
    ];
    // The current run: first guest cluster, first host offset, clusters.
    let mut run: Option<(u64, u64, u64)> = None;
    let mut n = start;
    let mut reported = start;
    let mut l2 = None;
    while n < end {
        if let Some(next) = img.unmapped_until(n) {
            // No L2 table: the whole span reads as zeros.
            if let Some(r) = run.take() {
                st.written += flush_run(img, dst, r, &mut buf)?;
            }
            let next = next.min(end);
            st.hole_clusters += next - n;
            n = next;
        } else {
            let m = img.map_with(n, &mut l2)?;
            let extends = matches!((run, m), (Some((_, h, k)), Mapping::Data(host))
                if host == h + k * cs && (k + 1) * cs <= RUN_BYTES);
            if !extends && let Some(r) = run.take() {
                st.written += flush_run(img, dst, r, &mut buf)?;
            }
            match m {
                Mapping::Data(host) => {
                    st.data_clusters += 1;
                    match &mut run {
                        Some((_, _, k)) if extends => *k += 1,
                        _ => run = Some((n, host, 1)),
                    }
                }
                Mapping::Compressed(off, len) => {
                    st.compressed_clusters += 1;
                    let c = img.inflate(n, off, len)?;
                    let take = cs.min(size - n * cs) as usize;
                    st.written += write_nonzero(img, dst, &c[..take], n * cs)?;
                }
                Mapping::Unallocated | Mapping::Zero => st.hole_clusters += 1,
            }
            n += 1;
        }
        if n - reported >= 64 || n == end {
            let bytes = (n - reported) * cs;
            progress(done.fetch_add(bytes, Ordering::Relaxed) + bytes);
            reported = n;
        }
    }
    if let Some(r) = run.take() {
        st.written += flush_run(img, dst, r, &mut buf)?;
    }
    Ok(st)
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
    let mut start: Option<usize> = None;
    for (i, b) in data.chunks(BLOCK).enumerate() {
        let zero = b.iter().fold(0u8, |a, &x| a | x) == 0;
        match (zero, start) {
            (true, Some(s)) => {
                let e = i * BLOCK;
                dst.write_all_at(&data[s..e], at + s as u64)
                    .map_err(|e| Error::io(img.path(), "write output", e))?;
                written += (e - s) as u64;
                start = None;
            }
            (false, None) => start = Some(i * BLOCK),
            _ => {}
        }
    }
    if let Some(s) = start {
        dst.write_all_at(&data[s..], at + s as u64)
            .map_err(|e| Error::io(img.path(), "write output", e))?;
        written += (data.len() - s) as u64;
    }
    Ok(written)
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
