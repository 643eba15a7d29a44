//! Which packed matmul follows which: decode makes the same calls in the same order every
//! token, so as a thread finishes its span of one call it can ask for the first lines of its
//! span in the next (the thread whose span ends where the next call's begins streams on
//! anyway; the other would otherwise start cold after the barrier).
use super::{for_each_part, Packed};
use std::cell::RefCell;
use std::collections::HashMap;

/// A span's first byte and the end of the mapped bytes after it, as addresses.
pub(super) type SpanStart = (usize, usize);

/// Distinct calls remembered (a forward of a large model makes a few hundred).
const MAX_CALLS: usize = 4096;

#[derive(Default)]
struct CallLog {
    /// Each call (by its first weight's address) -> its span starts, in span order.
    starts: HashMap<usize, Vec<SpanStart>>,
    /// Each call -> the call that followed it last time.
    next: HashMap<usize, usize>,
    last: Option<usize>,
}

thread_local! {
    static LOG: RefCell<CallLog> = RefCell::new(CallLog::default());
}

/// Records this call of `spans` spans over `ps` and returns into `ahead` the span starts of
/// the call that followed it last time (empty if none has).
pub(super) fn record(ps: &[&Packed], spans: usize, ahead: &mut Vec<SpanStart>) {
    let key = ps[0].bytes().as_ptr() as usize;
    ahead.clear();
    LOG.with_borrow_mut(|log| {
        if log.starts.len() >= MAX_CALLS {
            // calls of weights since dropped, or more than a forward makes: start over
            *log = CallLog::default();
        }
        if let Some(last) = log.last.replace(key) {
            log.next.insert(last, key);
        }
        let starts = log.starts.entry(key).or_default();
        starts.clear();
        for span in 0..spans {
            let mut first = None;
            for_each_part(ps, span, spans, |ji, tiles| {
                let p = ps[ji];
                let at = p.bytes().as_ptr() as usize + tiles.start * p.tile_bytes();
                first.get_or_insert((at, p.prefetch_end() as usize));
            });
            starts.extend(first);
        }
        if let Some(next) = log.next.get(&key).and_then(|n| log.starts.get(n)) {
            ahead.extend_from_slice(next);
        }
    });
}
