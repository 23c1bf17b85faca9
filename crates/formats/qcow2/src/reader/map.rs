//! Where a guest cluster's bytes are: the L1 and L2 tables walked, each
//! entry checked against the image, L2 tables cached.

use std::sync::Arc;

use super::image::{Backing, Image};
use crate::error::{Error, Problem, Result};
use crate::layout::{OFFSET_MASK, be64};

/// Where a guest cluster's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mapping {
    /// Never written: the backing file's bytes, or zeros.
    Unallocated,
    /// Written as zeros.
    Zero,
    /// Stored at this host offset.
    Data(u64),
    /// Compressed: host offset and length of the compressed bytes.
    Compressed(u64, u64),
    /// Extended L2, subclusters of different kinds: the host cluster,
    /// the allocated and the zero subclusters (bit n for subcluster n);
    /// the rest read from the backing file.
    Sub {
        /// The host cluster (of the allocated subclusters).
        host: u64,
        /// Allocated subclusters.
        alloc: u32,
        /// Subclusters that read as zeros.
        zero: u32,
    },
}

impl Image {
    /// The most bytes of data a conversion can write: the guest clusters
    /// that hold data, plain or compressed, times the cluster size (at
    /// most the virtual size). Unallocated and zero clusters stay holes.
    /// Found from the L1 and L2 tables alone, before any data is read, so
    /// an image whose tables point many clusters at the same few host
    /// bytes (a small file expanding to a huge disk) can be refused before
    /// anything is written.
    pub fn data_bytes(&self) -> Result<u64> {
        let cs = self.cluster_size();
        let per_l2 = 1u64 << self.header.l2_bits();
        let ext = self.header.extended_l2();
        let words = if ext { 2 } else { 1 };
        let external = self.header.external_data();
        let clusters = self.virtual_size().div_ceil(cs);
        let mut mapped = 0u64;
        for (i, &l1e) in self.l1.iter().enumerate() {
            let l2_off = l1e & OFFSET_MASK;
            if l2_off == 0 {
                continue;
            }
            let first = i as u64 * per_l2;
            let n = clusters.saturating_sub(first).min(per_l2) as usize;
            let l2 = self.l2_table(l2_off)?;
            mapped += l2[..(n * words).min(l2.len())]
                .chunks(words)
                .filter(|c| {
                    let e = c[0];
                    let host = e & OFFSET_MASK != 0
                        || (external && e & (1 << 63) != 0);
                    e & (1 << 62) != 0
                        || if ext {
                            c.get(1).is_some_and(|b| *b as u32 != 0)
                        } else {
                            e & 1 == 0 && host
                        }
                })
                .count() as u64;
        }
        let below = match &self.backing {
            None => 0,
            Some(Backing::Qcow2(b)) => b.data_bytes()?,
            Some(Backing::Raw { len, .. }) => *len,
        };
        Ok(mapped
            .saturating_mul(cs)
            .saturating_add(below)
            .min(self.virtual_size()))
    }

    /// If the L2 table that would map guest cluster `n` is unallocated,
    /// the first cluster past the range it would map: every cluster up
    /// to there reads as zeros, and a walk can skip them in one step.
    pub(crate) fn unmapped_until(&self, n: u64) -> Option<u64> {
        if self.backing.is_some() {
            return None;
        }
        let per_l2 = 1u64 << self.header.l2_bits();
        let i = n / per_l2;
        let unmapped = self
            .l1
            .get(usize::try_from(i).ok()?)
            .is_none_or(|e| e & OFFSET_MASK == 0);
        unmapped.then(|| (i + 1).saturating_mul(per_l2))
    }

    fn l2_table(&self, offset: u64) -> Result<Arc<Vec<u64>>> {
        if let Some(t) = self
            .l2_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(offset)
        {
            return Ok(t);
        }
        let cs = self.cluster_size();
        if !offset.is_multiple_of(cs) {
            return Err(self.problem(Problem::Unaligned {
                what: "L2 table",
                offset,
                align: cs,
            }));
        }
        if offset.checked_add(cs).is_none_or(|end| end > self.file_len) {
            return Err(self.problem(Problem::OutsideFile {
                what: "L2 table",
                offset,
                len: cs,
                file_len: self.file_len,
            }));
        }
        let mut raw = vec![0u8; cs as usize];
        self.file
            .read_exact_at(&mut raw, offset)
            .map_err(|e| Error::io(&self.path, "read L2 table", e))?;
        let t: Arc<Vec<u64>> =
            Arc::new((0..cs as usize / 8).map(|i| be64(&raw, i * 8)).collect());
        self.l2_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(offset, Arc::clone(&t));
        Ok(t)
    }

    /// Where guest cluster `n` lives.
    pub(crate) fn map(&self, n: u64) -> Result<Mapping> {
        self.map_with(n, &mut None)
    }

    /// [`Self::map`], keeping the last L2 table used in `last`: a walk
    /// over consecutive clusters then takes the shared cache's lock once
    /// per table instead of once per cluster.
    pub(crate) fn map_with(
        &self,
        n: u64,
        last: &mut Option<(u64, Arc<Vec<u64>>)>,
    ) -> Result<Mapping> {
        let per_l2 = 1u64 << self.header.l2_bits();
        let Some(&l1e) = usize::try_from(n / per_l2)
            .ok()
            .and_then(|i| self.l1.get(i))
        else {
            return Ok(Mapping::Unallocated);
        };
        let l2_off = l1e & OFFSET_MASK;
        if l2_off == 0 {
            return Ok(Mapping::Unallocated);
        }
        let l2 = match last {
            Some((off, t)) if *off == l2_off => t,
            _ => &mut last.insert((l2_off, self.l2_table(l2_off)?)).1,
        };
        let i = (n % per_l2) as usize;
        let ext = self.header.extended_l2();
        let (e, bitmap) = if ext {
            (l2[2 * i], l2[2 * i + 1])
        } else {
            (l2[i], 0)
        };
        let external = self.header.external_data();
        if e & (1 << 62) != 0 {
            return self.compressed(n, e);
        }
        let host = e & OFFSET_MASK;
        // In an external data file, offset 0 is its first cluster: the
        // copied bit says it is allocated.
        let has_host = host != 0 || (external && e & (1 << 63) != 0);
        if !ext {
            if e & 1 != 0 {
                return Ok(Mapping::Zero);
            }
            if !has_host {
                return Ok(Mapping::Unallocated);
            }
            self.check_host(host)?;
            return Ok(Mapping::Data(host));
        }
        self.subclusters(n, host, has_host, bitmap)
    }

    /// Guest cluster `n`, compressed by its L2 entry `e`: where its
    /// compressed bytes are.
    fn compressed(&self, n: u64, e: u64) -> Result<Mapping> {
        if self.header.external_data() {
            return Err(self.problem(Problem::Corrupt(format!(
                "guest cluster {n}: compressed, in an image with an \
                 external data file"
            ))));
        }
        // Compressed: offset in the low x bits, then the count of
        // additional 512-byte sectors.
        let bits = self.header.cluster_bits;
        let x = 62 - (bits - 8);
        let off = e & ((1u64 << x) - 1);
        let sectors = (e >> x) & ((1u64 << (bits - 8)) - 1);
        let len = (sectors + 1) * 512 - (off % 512);
        if off >= self.file_len {
            return Err(self.problem(Problem::OutsideFile {
                what: "compressed cluster",
                offset: off,
                len,
                file_len: self.file_len,
            }));
        }
        Ok(Mapping::Compressed(off, len))
    }

    /// Guest cluster `n` of an image with extended L2 entries: its host
    /// cluster `host` (if it `has_host`) and its subclusters, allocated
    /// and zero, as `bitmap` says.
    fn subclusters(
        &self,
        n: u64,
        host: u64,
        has_host: bool,
        bitmap: u64,
    ) -> Result<Mapping> {
        let (alloc, zero) = (bitmap as u32, (bitmap >> 32) as u32);
        if alloc & zero != 0 {
            return Err(self.problem(Problem::Corrupt(format!(
                "guest cluster {n}: subclusters {:#x} both allocated and zero",
                alloc & zero
            ))));
        }
        if alloc != 0 {
            if !has_host {
                return Err(self.problem(Problem::Corrupt(format!(
                    "guest cluster {n}: subclusters {alloc:#x} allocated \
                     without a host cluster"
                ))));
            }
            self.check_host(host)?;
        }
        Ok(match (alloc, zero) {
            (u32::MAX, _) => Mapping::Data(host),
            (0, u32::MAX) => Mapping::Zero,
            (0, 0) => Mapping::Unallocated,
            _ => Mapping::Sub { host, alloc, zero },
        })
    }

    /// Refuses a data cluster offset that is unaligned, or past the end
    /// of the image file (an external data file may be shorter than
    /// what it maps: past its end reads as zeros).
    fn check_host(&self, host: u64) -> Result<()> {
        if !host.is_multiple_of(self.cluster_size()) {
            return Err(self.problem(Problem::Unaligned {
                what: "data cluster",
                offset: host,
                align: self.cluster_size(),
            }));
        }
        // The last cluster may end past EOF (qemu-img does not pad the
        // file); it must start inside it.
        if self.data.is_none() && host >= self.file_len {
            return Err(self.problem(Problem::OutsideFile {
                what: "data cluster",
                offset: host,
                len: self.cluster_size(),
                file_len: self.file_len,
            }));
        }
        Ok(())
    }
}
