//! Which packed matmul follows which: decode makes the same calls in the same order every
//! token, so as a thread finishes its span of one call it can ask for the first lines of its
//! span in the next (the thread whose span ends where the next call's begins streams on
//! anyway; the other would otherwise start cold after the barrier), and a worker can fetch
//! more of it while it waits (`pool::prefetch_while_idle`).
use super::spans::{for_each_part, span_bytes};
use super::Packed;
use std::cell::RefCell;
use std::collections::HashMap;

/// Where a span starts: its first byte's address, its bytes, and the address of the end of
/// the mapped bytes after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SpanStart {
    pub at: usize,
    pub len: usize,
    pub end: usize,
}

/// Distinct calls remembered (a forward of a large model makes a few hundred).
const MAX_CALLS: usize = 4096;

/// A call, by its first weight's address and all its weights' bytes.
type Call = (usize, usize);

struct CallInfo {
    call: Call,
    /// Its span starts, in span order.
    starts: Vec<SpanStart>,
    /// The call that followed it last time, as an index into `CallLog::calls`.
    next: Option<usize>,
}

#[derive(Default)]
struct CallLog {
    calls: Vec<CallInfo>,
    index: HashMap<Call, usize>,
    last: Option<usize>,
}

impl CallLog {
    /// This call's index: the one that followed the last call last time if it is this one
    /// (every call of a decoding forward after the first token, found without hashing).
    fn find(&mut self, call: Call) -> usize {
        let predicted = self.last.and_then(|l| self.calls[l].next);
        if let Some(id) = predicted.filter(|&id| self.calls[id].call == call) {
            return id;
        }
        if self.calls.len() >= MAX_CALLS {
            // calls of weights since dropped, or more than a forward makes: start over
            *self = CallLog::default();
        }
        *self.index.entry(call).or_insert_with(|| {
            self.calls.push(CallInfo {
                call,
                starts: Vec::new(),
                next: None,
            });
            self.calls.len() - 1
        })
    }
}

thread_local! {
    static LOG: RefCell<CallLog> = RefCell::new(CallLog::default());
}

/// Records this call of `spans` spans over `ps` (`total` bytes, `total_bytes`) and returns
/// into `ahead` the span starts of the call that followed it last time (empty if none has).
pub(super) fn record(ps: &[&Packed], total: usize, spans: usize, ahead: &mut Vec<SpanStart>) {
    let call = (ps[0].bytes().as_ptr() as usize, total);
    ahead.clear();
    LOG.with_borrow_mut(|log| {
        let id = log.find(call);
        if let Some(last) = log.last.replace(id) {
            log.calls[last].next = Some(id);
        }
        let starts = &mut log.calls[id].starts;
        // the same weights come in the same call each token: their starts change only with
        // the number of spans
        if starts.len() != spans {
            starts.clear();
            for span in 0..spans {
                let bytes = span_bytes(total, span, spans);
                let mut first = None;
                for_each_part(ps, bytes.clone(), |ji, tiles| {
                    let p = ps[ji];
                    first.get_or_insert(SpanStart {
                        at: p.bytes().as_ptr() as usize + tiles.start * p.tile_bytes(),
                        len: bytes.len(),
                        end: p.prefetch_end() as usize,
                    });
                });
                starts.extend(first);
            }
        }
        if let Some(next) = log.calls[id].next {
            ahead.extend_from_slice(&log.calls[next].starts);
        }
    });
}
