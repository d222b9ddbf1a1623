//! The embedded store's in-memory vector index: 8-bit codes scanned first, the best
//! candidates rescored with their `f32` vectors.
//!
//! A search quantizes the query ([`crate::quantized`]), scores every row of the matching
//! length with integer dot products (on several threads for large stores), keeps the
//! `max(limit · RESCORE_FACTOR, RESCORE_MIN)` best, and scores those exactly — the same `f32`
//! arithmetic as a full exact scan — so the hits a caller sees carry exact cosines, ranked by
//! them. A store with no more rows than that depth is searched exactly. The exact vectors come
//! from memory while they fit [`IndexBuilder`]'s budget, and from the store (a lookup by id per
//! candidate) beyond it, so a million 512-dimension chunks hold ~0.5 GiB, not 2 GiB.
//!
//! *Architecture invariant*: what [`VectorIndex::search`] returns for a store of at most
//! `RESCORE_MIN` vectors equals an exact scan, scores and order; beyond, only the choice of
//! candidates is approximate (measured as recall@10 by `bib bench scale`).

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use crate::quantized::{DotKernel, QuantizedQuery, QuantizedVectors};
use crate::{ChunkId, NodeId};

/// Candidates rescored per result asked for.
const RESCORE_FACTOR: usize = 4;
/// Candidates rescored at least.
pub(crate) const RESCORE_MIN: usize = 256;
/// Rows scored per block of the scan (the scores of one block stay in L1).
const BLOCK: usize = 1024;
/// Stores with fewer rows than this are scanned on one thread.
const PARALLEL_MIN_ROWS: usize = 65_536;
/// Rows a scan thread takes at a time from the shared counter (a few dozen pieces per thread
/// at a million rows; each a multiple of `BLOCK`).
const PIECE: usize = 16 * BLOCK;
/// Default budget of exact `f32` vectors kept in memory: 128k vectors of 512 dimensions.
pub(crate) const DEFAULT_EXACT_BUDGET: usize = 256 << 20;

// `v / |v|` (a zero or non-finite norm gives zeros) — the normalization every stored and
// query vector goes through before a dot product.
use bib_text::vectors::unit;

/// The exact score of two unit vectors: the one dot product ([`bib_text::vectors::dot`], SIMD
/// once compiled), so the store, the packer and the benchmarks' ground truth agree to the bit.
fn exact_dot(a: &[f32], b: &[f32]) -> f64 {
    f64::from(bib_text::vectors::dot(a, b))
}

/// The exact score of each stored vector to `query` (vectors of another length skipped), by
/// the same arithmetic as a search's rescoring.
pub(crate) fn exact_scores(query: &[f32], rows: Vec<(ChunkId, Vec<f32>)>) -> Vec<(ChunkId, f64)> {
    let q = unit(query);
    rows.into_iter()
        .filter(|(_, v)| v.len() == q.len())
        .map(|(id, v)| (id, exact_dot(&unit(&v), &q)))
        .collect()
}

/// Vectors of one length.
struct Group {
    ids: Vec<ChunkId>,
    nodes: Vec<NodeId>,
    codes: QuantizedVectors,
    /// Unit vectors, row-major, while the index keeps them.
    exact: Option<Vec<f32>>,
}

impl Group {
    fn exact_row(&self, row: usize) -> Option<&[f32]> {
        let d = self.codes.dims();
        self.exact.as_ref().map(|e| &e[row * d..(row + 1) * d])
    }
}

/// Collects `(id, node, vector)` rows into a [`VectorIndex`].
pub(crate) struct IndexBuilder {
    groups: Vec<Group>,
    exact_budget: usize,
    exact_bytes: usize,
}

impl IndexBuilder {
    /// A builder that keeps exact vectors in memory while they take at most `exact_budget`
    /// bytes in all, and none once they would take more.
    pub(crate) fn new(exact_budget: usize) -> Self {
        IndexBuilder {
            groups: Vec::new(),
            exact_budget,
            exact_bytes: 0,
        }
    }

    /// Add one stored vector (any norm; it is normalized here). Rows come in ascending id
    /// order (lookups by id search the ids by bisection).
    pub(crate) fn push(&mut self, id: ChunkId, node: NodeId, vector: &[f32]) {
        let v = unit(vector);
        let g = match self.groups.iter().position(|g| g.codes.dims() == v.len()) {
            Some(g) => g,
            None => {
                self.groups.push(Group {
                    ids: Vec::new(),
                    nodes: Vec::new(),
                    codes: QuantizedVectors::new(v.len()),
                    exact: Some(Vec::new()),
                });
                self.groups.len() - 1
            }
        };
        self.exact_bytes += 4 * v.len();
        if self.exact_bytes > self.exact_budget {
            for g in &mut self.groups {
                g.exact = None;
            }
        }
        let g = &mut self.groups[g];
        debug_assert!(
            g.ids.last().is_none_or(|&last| last < id),
            "ids out of order"
        );
        g.ids.push(id);
        g.nodes.push(node);
        g.codes.push(&v);
        if let Some(e) = &mut g.exact {
            e.extend_from_slice(&v);
        }
    }

    pub(crate) fn finish(self) -> VectorIndex {
        VectorIndex {
            groups: Arc::new(self.groups),
            kernel: DotKernel::detect(),
            dead: HashSet::new(),
            extra: Vec::new(),
        }
    }
}

/// A stored vector row: `(chunk id, node id, vector)`.
pub(crate) type VectorRow = (ChunkId, NodeId, Vec<f32>);

/// Changes (rows written plus documents rewritten or removed) an index takes on top of what it
/// was built from ([`VectorIndex::patched`]) before it is better read again.
const PATCH_MAX_ROWS: usize = 2_048;

/// See the module documentation. Besides the rows it was built from (shared between an index
/// and its patched copies), an index holds the changes written since: the nodes whose built
/// rows are no longer current, and the current rows of those nodes, searched exactly.
pub(crate) struct VectorIndex {
    groups: Arc<Vec<Group>>,
    kernel: DotKernel,
    /// Nodes whose rows in `groups` are stale.
    dead: HashSet<NodeId>,
    /// The rows written since the index was built: `(id, node, unit vector)`.
    extra: Vec<VectorRow>,
}

impl VectorIndex {
    /// The `limit` rows with the highest cosine to `query` among those whose node passes
    /// `allowed` (`None`: all), best first, ties by id. `fetch` returns the stored vectors of
    /// the given ids (any order, unknown ids skipped) when the index holds no exact copy.
    pub(crate) fn search<E>(
        &self,
        query: &[f32],
        limit: usize,
        allowed: Option<&HashSet<NodeId>>,
        fetch: impl FnOnce(&[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, E>,
    ) -> Result<Vec<(ChunkId, f64)>, E> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let q = unit(query);
        let allow = |node: NodeId| allowed.is_none_or(|a| a.contains(&node));
        let mut scored = match self.groups.iter().find(|g| g.codes.dims() == query.len()) {
            Some(g) if !g.ids.is_empty() => {
                self.search_built(g, query, &q, limit, &allow, fetch)?
            }
            _ => Vec::new(),
        };
        scored.extend(
            self.extra
                .iter()
                .filter(|(_, node, v)| v.len() == q.len() && allow(*node))
                .map(|(id, _, v)| (*id, exact_dot(v, &q))),
        );
        scored.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(limit);
        Ok(scored)
    }

    /// [`Self::search`] over the rows the index was built from (stale ones left out), scored
    /// exactly, unsorted; `q` is `query` as a unit vector, `allow` the search's node filter.
    fn search_built<E>(
        &self,
        g: &Group,
        query: &[f32],
        q: &[f32],
        limit: usize,
        allow: &(dyn Fn(NodeId) -> bool + Sync),
        fetch: impl FnOnce(&[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, E>,
    ) -> Result<Vec<(ChunkId, f64)>, E> {
        let pass =
            |node: NodeId| allow(node) && (self.dead.is_empty() || !self.dead.contains(&node));
        let depth = (limit.saturating_mul(RESCORE_FACTOR)).max(RESCORE_MIN);
        let rows: Vec<usize> = if g.ids.len() <= depth {
            (0..g.ids.len()).filter(|&r| pass(g.nodes[r])).collect()
        } else {
            self.candidates(g, q, depth, &pass)
        };
        if g.exact.is_some() {
            return Ok(rows
                .iter()
                .filter_map(|&r| Some((g.ids[r], exact_dot(g.exact_row(r)?, q))))
                .collect());
        }
        let mut ids: Vec<ChunkId> = rows.iter().map(|&r| g.ids[r]).collect();
        ids.sort_unstable();
        // The store's current vectors; a row rewritten since is among `extra` and its node
        // is dead here, so it is not fetched twice.
        Ok(exact_scores(query, fetch(&ids)?))
    }

    /// A copy of this index after a write that replaced every row of `nodes` by `rows`
    /// (`(id, node, vector)`, any norm; a removed node has none). `None` when the changes
    /// held (rows and nodes) would exceed [`PATCH_MAX_ROWS`]: read the index again instead.
    pub(crate) fn patched(
        &self,
        nodes: &HashSet<NodeId>,
        rows: Vec<VectorRow>,
    ) -> Option<VectorIndex> {
        let mut extra: Vec<VectorRow> = self
            .extra
            .iter()
            .filter(|(_, node, _)| !nodes.contains(node))
            .cloned()
            .collect();
        extra.extend(rows.into_iter().map(|(id, node, v)| (id, node, unit(&v))));
        let mut dead = self.dead.clone();
        dead.extend(nodes.iter().copied());
        if extra.len() + dead.len() > PATCH_MAX_ROWS {
            return None;
        }
        Some(VectorIndex {
            groups: self.groups.clone(),
            kernel: self.kernel,
            dead,
            extra,
        })
    }

    /// The exact score to `query` of each of `ids` (in the order asked; unknown ids and
    /// vectors of another length skipped), from the exact copies the index holds, or from
    /// `fetch` when it holds none — the scores [`Self::search`] gives the same rows.
    pub(crate) fn scores_of<E>(
        &self,
        query: &[f32],
        ids: &[ChunkId],
        fetch: impl FnOnce(&[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, E>,
    ) -> Result<Vec<(ChunkId, f64)>, E> {
        let g = self.groups.iter().find(|g| g.codes.dims() == query.len());
        if g.is_some_and(|g| g.exact.is_none()) {
            // The store's current vectors, which are what the index's changes hold too.
            return Ok(exact_scores(query, fetch(ids)?));
        }
        let q = unit(query);
        let built = |id: ChunkId| {
            let g = g?;
            let row = g.ids.binary_search(&id).ok()?;
            if self.dead.contains(&g.nodes[row]) {
                return None;
            }
            Some(exact_dot(g.exact_row(row)?, &q))
        };
        let written = |id: ChunkId| {
            let (_, _, v) = self.extra.iter().find(|r| r.0 == id)?;
            (v.len() == q.len()).then(|| exact_dot(v, &q))
        };
        Ok(ids
            .iter()
            .filter_map(|&id| Some((id, written(id).or_else(|| built(id))?)))
            .collect())
    }

    /// The `depth` rows of `g` with the best 8-bit scores (among those passing `pass`).
    fn candidates(
        &self,
        g: &Group,
        q: &[f32],
        depth: usize,
        pass: &(dyn Fn(NodeId) -> bool + Sync),
    ) -> Vec<usize> {
        let threads = if g.ids.len() < PARALLEL_MIN_ROWS {
            1
        } else {
            std::thread::available_parallelism().map_or(1, |p| p.get().min(8))
        };
        self.candidates_on(g, q, depth, pass, threads)
    }

    /// [`Self::candidates`] on `threads` threads (the same rows whatever the number).
    fn candidates_on(
        &self,
        g: &Group,
        q: &[f32],
        depth: usize,
        pass: &(dyn Fn(NodeId) -> bool + Sync),
        threads: usize,
    ) -> Vec<usize> {
        let qq = g.codes.quantize_query(q);
        let n = g.ids.len();
        let mut best = if threads == 1 {
            let mut top = TopRows::new(depth);
            self.scan_rows(g, &qq, 0..n, pass, &mut top);
            top.best
        } else {
            // Threads take pieces from a shared counter rather than fixed halves, so a thread
            // whose core is also running something else (another request in `bib serve`)
            // does less of the scan instead of finishing last.
            let next = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                let parts: Vec<_> = (0..threads)
                    .map(|_| {
                        let (qq, next) = (&qq, &next);
                        s.spawn(move || {
                            let mut top = TopRows::new(depth);
                            loop {
                                let piece = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                let start = piece.saturating_mul(PIECE);
                                if start >= n {
                                    return top.best;
                                }
                                self.scan_rows(
                                    g,
                                    qq,
                                    start..(start + PIECE).min(n),
                                    pass,
                                    &mut top,
                                );
                            }
                        })
                    })
                    .collect();
                let mut all = Vec::with_capacity(threads * 2 * depth);
                for p in parts {
                    // A scan thread only computes; a panic there is a bug worth surfacing.
                    all.extend(p.join().expect("vector scan thread panicked"));
                }
                all
            })
        };
        keep_best(&mut best, depth);
        best.into_iter().map(|(_, r)| r).collect()
    }

    /// Score `rows` in blocks into `top`: a row scoring below the worst of a full candidate
    /// list is not looked at further.
    fn scan_rows(
        &self,
        g: &Group,
        qq: &QuantizedQuery,
        rows: Range<usize>,
        pass: &(dyn Fn(NodeId) -> bool + Sync),
        top: &mut TopRows,
    ) {
        let TopRows {
            depth,
            best,
            floor,
            buf,
        } = top;
        let mut start = rows.start;
        while start < rows.end {
            let end = (start + BLOCK).min(rows.end);
            let scores = &mut buf[..end - start];
            g.codes.scores(qq, start..end, self.kernel, scores);
            for (j, &s) in scores.iter().enumerate() {
                if s < *floor || !pass(g.nodes[start + j]) {
                    continue;
                }
                best.push((s, start + j));
                if best.len() >= 2 * *depth {
                    keep_best(best, *depth);
                    *floor = best[*depth - 1].0;
                }
            }
            start = end;
        }
    }
}

/// One scan thread's best `(score, row)` so far: at most `2 · depth` kept, none below `floor`.
struct TopRows {
    depth: usize,
    best: Vec<(f32, usize)>,
    floor: f32,
    buf: Vec<f32>,
}

impl TopRows {
    fn new(depth: usize) -> Self {
        TopRows {
            depth,
            best: Vec::with_capacity(2 * depth),
            floor: f32::NEG_INFINITY,
            buf: vec![0f32; BLOCK],
        }
    }
}

/// Keep the `depth` best `(score, row)` (score descending, then row), in no particular order
/// except that the worst kept is last.
fn keep_best(best: &mut Vec<(f32, usize)>, depth: usize) {
    if best.len() <= depth {
        return;
    }
    best.select_nth_unstable_by(depth - 1, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    best.truncate(depth);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bib_text::vectors::quantized::random_unit_vectors as random_vectors;
    use proptest::prelude::*;

    /// The exact scan the index replaces: every row of the query's length, cosine, best first.
    fn exact_scan(
        rows: &[(ChunkId, NodeId, Vec<f32>)],
        q: &[f32],
        limit: usize,
        allowed: Option<&HashSet<NodeId>>,
    ) -> Vec<(ChunkId, f64)> {
        let q = unit(q);
        let mut s: Vec<(ChunkId, f64)> = rows
            .iter()
            .filter(|(_, n, v)| v.len() == q.len() && allowed.is_none_or(|a| a.contains(n)))
            .map(|(id, _, v)| (*id, exact_dot(&unit(v), &q)))
            .collect();
        s.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        s.truncate(limit);
        s
    }

    fn index(rows: &[(ChunkId, NodeId, Vec<f32>)], budget: usize) -> VectorIndex {
        let mut b = IndexBuilder::new(budget);
        for (id, node, v) in rows {
            b.push(*id, *node, v);
        }
        b.finish()
    }

    type Fetched = Result<Vec<(ChunkId, Vec<f32>)>, ()>;

    fn fetch_from(rows: &[(ChunkId, NodeId, Vec<f32>)]) -> impl Fn(&[ChunkId]) -> Fetched + '_ {
        move |ids| {
            Ok(ids
                .iter()
                .filter_map(|id| rows.iter().find(|r| r.0 == *id))
                .map(|r| (r.0, r.2.clone()))
                .collect())
        }
    }

    proptest! {
        /// Up to `RESCORE_MIN` rows the index is an exact scan — with exact vectors in memory
        /// or fetched, with and without a filter, mixed lengths ignored.
        #[test]
        fn small_indexes_are_exact(n in 0usize..RESCORE_MIN, limit in 1usize..40,
                                   seed in 1u64..u64::MAX, filtered: bool) {
            let vs = random_vectors(n + 1, 24, seed);
            let mut rows: Vec<(ChunkId, NodeId, Vec<f32>)> = vs[1..]
                .iter()
                .enumerate()
                .map(|(i, v)| (i as ChunkId * 3 + 1, (i % 5) as NodeId, v.clone()))
                .collect();
            rows.push((10_000, 0, vec![1.0; 7]));
            let allowed: HashSet<NodeId> = [1, 3].into_iter().collect();
            let allowed = filtered.then_some(&allowed);
            let want = exact_scan(&rows, &vs[0], limit, allowed);
            for budget in [usize::MAX, 0] {
                let got = index(&rows, budget).search(&vs[0], limit, allowed, fetch_from(&rows));
                prop_assert_eq!(&got.unwrap(), &want);
            }
        }

        /// An index patched with writes (nodes rewritten with new and reused ids, removed,
        /// added) searches and scores as an index built from the rows they leave.
        #[test]
        fn a_patched_index_equals_one_built_after_the_writes(
            seed in 1u64..u64::MAX,
            writes in proptest::collection::vec((0i64..8, 0usize..4, any::<bool>()), 1..6),
            budget_exact: bool,
        ) {
            let vs = random_vectors(200, 12, seed);
            let mut fresh = vs[1..].iter().cloned();
            // Three rows per node 0..6 to begin with.
            let mut rows: Vec<(ChunkId, NodeId, Vec<f32>)> = (0..18)
                .map(|i| (i as ChunkId, i as NodeId / 3, fresh.next().unwrap()))
                .collect();
            let budget = if budget_exact { usize::MAX } else { 0 };
            let mut idx = index(&rows, budget);
            let mut next_id = 100;
            for (node, n, reuse) in writes {
                let old: Vec<ChunkId> = rows.iter().filter(|r| r.1 == node).map(|r| r.0).collect();
                rows.retain(|r| r.1 != node);
                let mut written = Vec::new();
                for k in 0..n {
                    let id = match old.get(k) {
                        Some(&id) if reuse => id,
                        _ => { next_id += 1; next_id }
                    };
                    written.push((id, node, fresh.next().unwrap()));
                }
                rows.extend(written.iter().cloned());
                idx = idx.patched(&[node].into_iter().collect(), written).unwrap();
            }
            rows.sort_by_key(|r| r.0);
            let built = index(&rows, budget);
            let ids: Vec<ChunkId> = (0..120).collect();
            for limit in [1, 5, 50] {
                prop_assert_eq!(
                    idx.search(&vs[0], limit, None, fetch_from(&rows)).unwrap(),
                    built.search(&vs[0], limit, None, fetch_from(&rows)).unwrap()
                );
            }
            let allowed: HashSet<NodeId> = [1, 2, 7].into_iter().collect();
            prop_assert_eq!(
                idx.search(&vs[0], 10, Some(&allowed), fetch_from(&rows)).unwrap(),
                built.search(&vs[0], 10, Some(&allowed), fetch_from(&rows)).unwrap()
            );
            prop_assert_eq!(
                idx.scores_of(&vs[0], &ids, fetch_from(&rows)).unwrap(),
                built.scores_of(&vs[0], &ids, fetch_from(&rows)).unwrap()
            );
        }

        /// Given ids are scored as a search scores them, in the order asked, from memory or
        /// fetched; unknown ids and vectors of another length are skipped.
        #[test]
        fn given_ids_score_as_a_search_scores_them(n in 1usize..60, seed in 1u64..u64::MAX) {
            let vs = random_vectors(n + 1, 24, seed);
            let mut rows: Vec<(ChunkId, NodeId, Vec<f32>)> = vs[1..]
                .iter()
                .enumerate()
                .map(|(i, v)| (i as ChunkId * 2 + 1, 0, v.clone()))
                .collect();
            rows.push((10_000, 0, vec![1.0; 7]));
            let want = exact_scan(&rows, &vs[0], usize::MAX, None);
            let mut ids: Vec<ChunkId> = want.iter().rev().map(|w| w.0).collect();
            ids.push(4); // no such row
            ids.push(10_000); // another length
            let want: Vec<(ChunkId, f64)> = want.into_iter().rev().collect();
            for budget in [usize::MAX, 0] {
                let got = index(&rows, budget).scores_of(&vs[0], &ids, fetch_from(&rows));
                prop_assert_eq!(&got.unwrap(), &want);
            }
        }
    }

    /// Changes pile up only to a bound, however many documents are written or removed: then
    /// the index asks to be read again.
    #[test]
    fn patches_are_bounded() {
        let vs = random_vectors(2, 8, 3);
        let mut idx = index(&[(1, 1, vs[0].clone())], usize::MAX);
        let mut taken = 0;
        for node in 0..10_000 {
            match idx.patched(&[node].into_iter().collect(), Vec::new()) {
                Some(next) => {
                    idx = next;
                    taken += 1;
                }
                None => break,
            }
            assert!(idx.dead.len() + idx.extra.len() <= PATCH_MAX_ROWS);
        }
        assert_eq!(taken, PATCH_MAX_ROWS);
    }

    /// However many threads share the scan, and with a filter, the candidates are the same.
    #[test]
    fn the_scan_picks_the_same_candidates_on_any_number_of_threads() {
        let vs = random_vectors(40_003, 16, 7);
        let rows: Vec<(ChunkId, NodeId, Vec<f32>)> = vs[3..]
            .iter()
            .enumerate()
            .map(|(i, v)| (i as ChunkId, (i % 5) as NodeId, v.clone()))
            .collect();
        let idx = index(&rows, 0);
        let g = &idx.groups[0];
        let odd = |node: NodeId| node % 2 == 1;
        for q in &vs[..3] {
            let q = unit(q);
            for pass in [&(|_| true) as &(dyn Fn(NodeId) -> bool + Sync), &odd] {
                let mut one = idx.candidates_on(g, &q, 300, pass, 1);
                one.sort_unstable();
                assert_eq!(one.len(), 300);
                for threads in [2, 3, 8] {
                    let mut many = idx.candidates_on(g, &q, 300, pass, threads);
                    many.sort_unstable();
                    assert_eq!(many, one, "{threads} threads");
                }
            }
        }
    }

    /// Beyond the rescoring depth the first pass is approximate: on random vectors (the hardest
    /// case, no structure) the top-10 still matches the exact one almost always.
    #[test]
    fn large_indexes_find_the_exact_top_ten() {
        let vs = random_vectors(20_050, 64, 42);
        let rows: Vec<(ChunkId, NodeId, Vec<f32>)> = vs[50..]
            .iter()
            .enumerate()
            .map(|(i, v)| (i as ChunkId, 0, v.clone()))
            .collect();
        let idx = index(&rows, 0);
        let (mut hit, mut total) = (0, 0);
        for q in &vs[..50] {
            let want = exact_scan(&rows, q, 10, None);
            let got = idx.search(q, 10, None, fetch_from(&rows)).unwrap();
            // The scores of what is returned are exact.
            for (id, s) in &got {
                let w = exact_dot(&unit(&rows[*id as usize].2), &unit(q));
                assert_eq!(*s, w);
            }
            total += want.len();
            hit += want
                .iter()
                .filter(|w| got.iter().any(|g| g.0 == w.0))
                .count();
        }
        assert!(hit * 100 >= total * 99, "recall@10 {hit}/{total}");
    }

    #[test]
    fn exact_vectors_are_dropped_past_the_budget() {
        let vs = random_vectors(10, 16, 5);
        let rows: Vec<_> = vs
            .iter()
            .enumerate()
            .map(|(i, v)| (i as ChunkId, 0, v.clone()))
            .collect();
        assert!(index(&rows, 10 * 16 * 4).groups[0].exact.is_some());
        assert!(index(&rows, 10 * 16 * 4 - 1).groups[0].exact.is_none());
    }
}
