//! Paths of a tree being unpacked, interned: each directory is a node
//! holding its parent and its last component, so that what an unpack
//! remembers of a directory costs the same at any depth. A tree 3,000
//! levels deep costs 3,000 nodes, not the 4.5 million components of its
//! 3,000 full paths.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::ffi::{CStr, CString};
use std::hash::BuildHasher;

/// A node: the root is [`PathTree::ROOT`].
pub(crate) type NodeId = u32;

struct Node {
    parent: NodeId,
    name: CString,
    depth: u32,
    /// The next node with the same parent and the same hash of its name.
    collision: Option<NodeId>,
}

/// Interned relative paths.
pub(crate) struct PathTree {
    nodes: Vec<Node>,
    /// (parent, hash of the name) → the first node so keyed. The hash is
    /// keyed at random per tree, so names cannot be chosen to collide.
    index: HashMap<(NodeId, u64), NodeId>,
    hasher: RandomState,
    /// The path interned last, as nodes from the top: an archive lists a
    /// directory's entries together, so the next path mostly shares it.
    last: Vec<NodeId>,
}

impl PathTree {
    /// The root itself (no components).
    pub(crate) const ROOT: NodeId = 0;

    pub(crate) fn new() -> Self {
        PathTree {
            nodes: vec![Node {
                parent: Self::ROOT,
                name: CString::default(),
                depth: 0,
                collision: None,
            }],
            index: HashMap::new(),
            hasher: RandomState::new(),
            last: Vec::new(),
        }
    }

    fn key(&self, parent: NodeId, name: &CStr) -> (NodeId, u64) {
        (parent, self.hasher.hash_one(name.to_bytes()))
    }

    /// The child `name` of `parent`, if interned.
    pub(crate) fn child(&self, parent: NodeId, name: &CStr) -> Option<NodeId> {
        let mut at = self.index.get(&self.key(parent, name)).copied();
        while let Some(id) = at {
            let n = &self.nodes[id as usize];
            if n.parent == parent && n.name.as_c_str() == name {
                return Some(id);
            }
            at = n.collision;
        }
        None
    }

    /// The node of `parts`, if interned.
    pub(crate) fn find(&self, parts: &[CString]) -> Option<NodeId> {
        let shared = self.shared_with_last(parts);
        let mut id = shared.map_or(Self::ROOT, |k| self.last[k]);
        for p in &parts[shared.map_or(0, |k| k + 1)..] {
            id = self.child(id, p)?;
        }
        Some(id)
    }

    /// The node of `parts`, interned with its ancestors if new.
    pub(crate) fn intern(&mut self, parts: &[CString]) -> NodeId {
        let shared = self.shared_with_last(parts);
        let keep = shared.map_or(0, |k| k + 1);
        self.last.truncate(keep);
        let mut id = self.last.last().copied().unwrap_or(Self::ROOT);
        for p in &parts[keep..] {
            id = match self.child(id, p) {
                Some(c) => c,
                None => self.add(id, p),
            };
            self.last.push(id);
        }
        id
    }

    /// The index in `last` of the deepest component `parts` shares with
    /// the path interned last.
    fn shared_with_last(&self, parts: &[CString]) -> Option<usize> {
        self.last
            .iter()
            .zip(parts)
            .take_while(|(id, p)| self.nodes[**id as usize].name == **p)
            .count()
            .checked_sub(1)
    }

    fn add(&mut self, parent: NodeId, name: &CStr) -> NodeId {
        let id = NodeId::try_from(self.nodes.len()).unwrap_or(NodeId::MAX);
        let key = self.key(parent, name);
        let collision = self.index.insert(key, id);
        let depth = self.nodes[parent as usize].depth + 1;
        self.nodes.push(Node {
            parent,
            name: name.to_owned(),
            depth,
            collision,
        });
        id
    }

    /// Levels below the root.
    pub(crate) fn depth(&self, id: NodeId) -> u32 {
        self.nodes[id as usize].depth
    }

    /// The parent of `id` (the root's is the root).
    pub(crate) fn parent(&self, id: NodeId) -> NodeId {
        self.nodes[id as usize].parent
    }

    /// The path of `id`, from the top.
    pub(crate) fn parts(&self, id: NodeId) -> Vec<CString> {
        let mut v = Vec::with_capacity(self.depth(id) as usize);
        let mut at = id;
        while at != Self::ROOT {
            let n = &self.nodes[at as usize];
            v.push(n.name.clone());
            at = n.parent;
        }
        v.reverse();
        v
    }

    /// Nodes interned, the root included.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn p(s: &str) -> Vec<CString> {
        s.split('/')
            .filter(|c| !c.is_empty())
            .map(|c| CString::new(c).unwrap())
            .collect()
    }

    #[test]
    fn paths_intern_once_and_come_back() {
        let mut t = PathTree::new();
        let a = t.intern(&p("a/b/c"));
        let b = t.intern(&p("a/b/d"));
        let c = t.intern(&p("x"));
        assert_eq!(t.intern(&p("a/b/c")), a);
        assert_eq!(t.len(), 1 + 5);
        assert_eq!(t.parts(a), p("a/b/c"));
        assert_eq!(t.parts(b), p("a/b/d"));
        assert_eq!(t.parent(a), t.find(&p("a/b")).unwrap());
        assert_eq!(t.depth(c), 1);
        assert_eq!(t.find(&p("a/b/e")), None);
        assert_eq!(t.find(&p("")), Some(PathTree::ROOT));
        assert_eq!(t.parts(PathTree::ROOT), p(""));
    }

    /// A deep chain costs a node per level.
    #[test]
    fn deep_chains_cost_a_node_per_level() {
        let mut t = PathTree::new();
        let mut path = Vec::new();
        for _ in 0..5000 {
            path.push(CString::new("d").unwrap());
            t.intern(&path);
        }
        assert_eq!(t.len(), 5001);
        let deepest = t.find(&path).unwrap();
        assert_eq!(t.depth(deepest), 5000);
    }
}
