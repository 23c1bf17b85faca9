//! What an image keeps between reads: L2 tables and inflated clusters,
//! each in a small least-recently-used cache.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// A small cache with least-recently-used eviction.
pub(super) struct Lru<V> {
    map: HashMap<u64, Arc<V>>,
    order: VecDeque<u64>,
    cap: usize,
}

impl<V> Lru<V> {
    pub(super) fn new(cap: usize) -> Self {
        Lru {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    pub(super) fn get(&mut self, k: u64) -> Option<Arc<V>> {
        let v = self.map.get(&k).cloned()?;
        // Sequential reads ask for the same table cluster after cluster:
        // the most recent needs no reordering, and no scan.
        if self.order.back() != Some(&k) {
            if let Some(i) = self.order.iter().position(|&x| x == k) {
                self.order.remove(i);
            }
            self.order.push_back(k);
        }
        Some(v)
    }

    pub(super) fn put(&mut self, k: u64, v: Arc<V>) {
        if self.map.insert(k, v).is_none() {
            self.order.push_back(k);
        }
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

/// An inflated cluster, in a page-aligned buffer.
pub(crate) struct Cluster {
    pub(super) raw: Vec<u8>,
    pub(super) at: usize,
    pub(super) len: usize,
}

impl Cluster {
    /// The cluster's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.raw[self.at..self.at + self.len]
    }
}
