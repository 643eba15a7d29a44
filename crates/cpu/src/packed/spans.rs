//! A call's weights cut into spans, one per thread, and each span into chunks the threads
//! claim: a thread streams its own span from the front, and one that runs out takes chunks
//! from the back of the span with the most left. Equal bytes do not take equal time (a span
//! that starts cold, a core that is interrupted), so the threads would otherwise end a call
//! several chunks apart; this way they end within about one chunk's time of each other.
use super::Packed;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of weights claimed at a time: a fraction of a microsecond of streaming, against a
/// claim of a few nanoseconds.
pub(super) const CHUNK_BYTES: usize = 16 << 10;

/// One span's unclaimed chunks `front..back` as `back << 32 | front`, on a line of its own so
/// the owner's claims stay in its cache until another thread comes to take from the back.
#[repr(align(128))]
#[derive(Default)]
struct Unclaimed(AtomicU64);

const FRONT_MASK: u64 = (1 << 32) - 1;

/// The chunks of one call's spans.
#[derive(Default)]
pub(super) struct Chunks {
    /// Bytes of all the call's weights' tiles.
    total: usize,
    spans: Vec<Unclaimed>,
}

impl Chunks {
    /// Every chunk of `spans` spans over `total` bytes unclaimed.
    pub(super) fn reset(&mut self, total: usize, spans: usize) {
        self.total = total;
        self.spans.resize_with(spans, Unclaimed::default);
        for span in 0..spans {
            let n = self.span_bytes(span).len().div_ceil(CHUNK_BYTES) as u64;
            self.spans[span].0.store(n << 32, Ordering::Relaxed);
        }
    }

    /// Span `span`'s share of the bytes.
    pub(super) fn span_bytes(&self, span: usize) -> Range<usize> {
        span_bytes(self.total, span, self.spans.len())
    }

    /// Chunks `chunks` of span `span`, as bytes of all the weights.
    pub(super) fn chunk_bytes(&self, span: usize, chunks: Range<usize>) -> Range<usize> {
        let b = self.span_bytes(span);
        let at = |c: usize| (b.start + c * CHUNK_BYTES).min(b.end);
        at(chunks.start)..at(chunks.end)
    }

    /// The next chunks from the front of span `span`: half of those left (at least one), so
    /// the owner makes a few claims per call while a thief still finds about half of what is
    /// left unclaimed. None when the span is all claimed.
    pub(super) fn claim_front(&self, span: usize) -> Option<Range<usize>> {
        let word = &self.spans[span].0;
        let seen = word.load(Ordering::Relaxed);
        let take = (seen >> 32)
            .saturating_sub(seen & FRONT_MASK)
            .div_ceil(2)
            .max(1);
        // front may pass back here; those chunks were stolen, and `steal_back` sees an empty
        // span
        let old = word.fetch_add(take, Ordering::Relaxed);
        let (front, back) = (old & FRONT_MASK, old >> 32);
        (front < back).then(|| front as usize..(front + take).min(back) as usize)
    }

    /// The last unclaimed chunk of the span with the most left, as `(span, chunk)`; None when
    /// every chunk is claimed.
    pub(super) fn steal_back(&self) -> Option<(usize, usize)> {
        loop {
            let left = |w: u64| (w >> 32).saturating_sub(w & FRONT_MASK);
            let (span, old) = self
                .spans
                .iter()
                .map(|s| s.0.load(Ordering::Relaxed))
                .enumerate()
                .max_by_key(|&(_, w)| left(w))?;
            if left(old) == 0 {
                return None;
            }
            let taken = self.spans[span].0.compare_exchange(
                old,
                old - (1 << 32),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            if taken.is_ok() {
                return Some((span, (old >> 32) as usize - 1));
            }
        }
    }
}

/// Bytes of weights `total` cut into `spans` spans of about equal size: span `span`'s.
pub(super) fn span_bytes(total: usize, span: usize, spans: usize) -> Range<usize> {
    total * span / spans..total * (span + 1) / spans
}

/// Bytes of all the weights' tiles, in order.
pub(super) fn total_bytes(ps: &[&Packed]) -> usize {
    ps.iter().map(|p| p.n_tiles() * p.tile_bytes()).sum()
}

/// Calls `f(weight, tiles)` for the non-empty parts of `bytes` (of all the weights' tiles, in
/// order): the tiles whose first byte lies in that range. Ranges that partition the bytes
/// partition the tiles.
pub(super) fn for_each_part(
    ps: &[&Packed],
    bytes: Range<usize>,
    mut f: impl FnMut(usize, Range<usize>),
) {
    let mut at = 0;
    for (ji, p) in ps.iter().enumerate() {
        let first_at_or_after = |b: usize| {
            b.saturating_sub(at)
                .div_ceil(p.tile_bytes())
                .min(p.n_tiles())
        };
        let tiles = first_at_or_after(bytes.start)..first_at_or_after(bytes.end);
        at += p.n_tiles() * p.tile_bytes();
        if !tiles.is_empty() {
            f(ji, tiles);
        }
    }
}
