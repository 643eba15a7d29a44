//! Pairwise symbol merging shared by byte-level BPE and SentencePiece BPE: a doubly linked list of
//! symbols over the input and a max-heap of candidate pairs (best priority first, then leftmost),
//! the scheme both llama.cpp and Hugging Face tokenizers use.
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One symbol: a byte range of the input and the token it currently spells (if any).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Symbol {
    pub start: u32,
    pub len: u32,
    pub prev: u32,
    pub next: u32,
    pub id: u32,
}

pub(crate) const NONE: u32 = u32::MAX;

/// A candidate merge of `left` with the symbol after it; `len` is the merged length when it was
/// queued, so a stale entry (either side changed since) is recognised and dropped.
struct Candidate {
    priority: f64,
    tie_break: u64,
    left: u32,
    right: u32,
    len: u32,
    merged_id: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Higher priority, then higher tie-break, then the lower merged id, then the leftmost pair.
        self.priority
            .total_cmp(&other.priority)
            .then_with(|| self.tie_break.cmp(&other.tie_break))
            .then_with(|| other.merged_id.cmp(&self.merged_id))
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Merges adjacent symbols until no pair is mergeable. `pair` returns `(priority, tie_break,
/// merged_id)` for two adjacent symbols (higher merges first), or `None` when they do not form a
/// token. Returns the surviving symbols in
/// order (the caller reads `id`, or the byte range where `id` is `NONE`).
pub(crate) fn merge_symbols<F>(
    symbols: &mut [Symbol],
    mut pair: F,
) -> impl Iterator<Item = Symbol> + '_
where
    F: FnMut(&Symbol, &Symbol) -> Option<(f64, u64, u32)>,
{
    let mut heap = BinaryHeap::with_capacity(symbols.len());
    let mut push = |symbols: &[Symbol], heap: &mut BinaryHeap<Candidate>, left: u32| {
        if left == NONE {
            return;
        }
        let right = symbols[left as usize].next;
        if right == NONE {
            return;
        }
        let (l, r) = (&symbols[left as usize], &symbols[right as usize]);
        if let Some((priority, tie_break, merged_id)) = pair(l, r) {
            heap.push(Candidate {
                priority,
                tie_break,
                left,
                right,
                len: l.len + r.len,
                merged_id,
            });
        }
    };
    for i in 0..symbols.len() as u32 {
        push(symbols, &mut heap, i);
    }
    while let Some(c) = heap.pop() {
        let (l, r) = (symbols[c.left as usize], symbols[c.right as usize]);
        if l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.len {
            continue;
        }
        let left = &mut symbols[c.left as usize];
        left.len = c.len;
        left.id = c.merged_id;
        left.next = r.next;
        symbols[c.right as usize].len = 0;
        if r.next != NONE {
            symbols[r.next as usize].prev = c.left;
        }
        push(symbols, &mut heap, l.prev);
        push(symbols, &mut heap, c.left);
    }
    let first = if symbols.is_empty() { NONE } else { 0 };
    let mut at = first;
    std::iter::from_fn(move || {
        if at == NONE {
            return None;
        }
        let s = symbols[at as usize];
        at = s.next;
        Some(s)
    })
}

/// Symbols for `bytes`, one per unit as `unit` cuts them: it returns `(unit length, token id)` for
/// the unit at the start of the slice it is given (a byte, or a UTF-8 character).
pub(crate) fn initial_symbols(
    bytes: &[u8],
    out: &mut Vec<Symbol>,
    mut unit: impl FnMut(&[u8]) -> (u32, u32),
) {
    out.clear();
    let mut at = 0usize;
    while at < bytes.len() {
        let (len, id) = unit(&bytes[at..]);
        let len = len.clamp(1, (bytes.len() - at) as u32);
        let index = out.len() as u32;
        out.push(Symbol {
            start: at as u32,
            len,
            prev: if index == 0 { NONE } else { index - 1 },
            next: index + 1,
            id,
        });
        at += len as usize;
    }
    if let Some(last) = out.last_mut() {
        last.next = NONE;
    }
}
