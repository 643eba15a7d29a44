//! Running prepared requests on one model: prefix-cache reuse, chunked prefill that stops
//! within a chunk of a cancellation, decode, and text-level events out.
use crate::decode::Drafting;
use crate::draft::{DraftModel, DraftSource, PromptLookup, RowCosts};
use crate::events::{
    Done, DraftUsage, Event, FailureKind, FinishReason, Timings, TokenLogprob, TopLogprob, Usage,
};
use crate::prefix_cache::{PrefixCache, Slot};
use crate::prompt::{Prepared, TextModel};
use crate::stats::EngineStats;
use ishizuki_core::Backend;
use ishizuki_models::{Logits, Model};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Prompt tokens per prefill forward: bounds how long a cancellation waits.
pub const PREFILL_CHUNK: usize = 512;

pub struct Engine {
    pub text: Arc<TextModel>,
    model: Model,
    backend: Arc<dyn Backend>,
    cache: PrefixCache,
    pub stats: Arc<EngineStats>,
    prefill_chunk: usize,
    drafter: Drafter,
}

/// What the engine drafts with: prompt lookup, and a draft model (where lookup has nothing)
/// while it pays.
struct Drafter {
    enabled: bool,
    always: bool,
    lookup: PromptLookup,
    model: Option<DraftModel>,
    /// Why the draft model turned itself off, once it did.
    model_off: Option<String>,
    costs: RowCosts,
}

/// Where a run ended before it finished normally.
pub(crate) enum Halt {
    Cancelled,
    Fault(String),
}

impl From<ishizuki_models::ModelError> for Halt {
    fn from(e: ishizuki_models::ModelError) -> Halt {
        Halt::Fault(e.to_string())
    }
}

impl Engine {
    pub fn new(text: Arc<TextModel>, model: Model, slots: usize) -> Engine {
        let n_ctx = text.n_ctx;
        let backend = model.backend().clone();
        Engine {
            text,
            model,
            backend,
            cache: PrefixCache::new(slots, n_ctx),
            stats: Arc::new(EngineStats::default()),
            prefill_chunk: PREFILL_CHUNK,
            drafter: Drafter {
                enabled: true,
                always: false,
                lookup: PromptLookup::new(),
                model: None,
                model_off: None,
                costs: RowCosts::default(),
            },
        }
    }

    /// Drafting on (the default) or off for every request.
    pub fn with_drafting(mut self, on: bool) -> Engine {
        self.drafter.enabled = on;
        self
    }

    /// Drafts whenever the source proposes, whether it pays or not: for tests that hold
    /// drafting to exactness whatever the hardware.
    pub fn with_drafting_always(mut self) -> Engine {
        self.drafter.always = true;
        self
    }

    /// Drafts with `draft` (a model of the same vocabulary, checked by the caller) where prompt
    /// lookup has nothing, for as long as it pays.
    pub fn with_draft_model(mut self, draft: DraftModel) -> Engine {
        self.drafter.model = Some(draft);
        self.stats.draft_model_active.store(1, Ordering::Relaxed);
        self
    }

    pub fn drafting(&self) -> bool {
        self.drafter.enabled
    }

    /// Why the draft model stopped drafting, if it did.
    pub fn draft_model_off(&self) -> Option<&str> {
        self.drafter.model_off.as_deref()
    }

    /// Prompt tokens per prefill forward (at least twice the backend's invariant rows).
    pub fn with_prefill_chunk(mut self, chunk: usize) -> Engine {
        self.prefill_chunk = chunk.max(2 * self.backend.batch_invariant_rows());
        self
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The prefix cache's slots, for reporting what it holds.
    pub fn cache(&self) -> &PrefixCache {
        &self.cache
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// Runs `p`, reporting through `sink` (which returns false once nobody listens). A panic
    /// inside fails this request only: the caches are reset and the engine stays usable.
    pub fn run(
        &mut self,
        p: &Prepared,
        cancel: &AtomicBool,
        queued_secs: f64,
        sink: &mut dyn FnMut(Event) -> bool,
    ) {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.run_inner(p, cancel, queued_secs, sink)
        }));
        if let Err(panic) = caught {
            self.cache.clear();
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            sink(Event::Failed {
                kind: FailureKind::Internal,
                message: format!("internal error: {message}"),
            });
        }
    }

    fn run_inner(
        &mut self,
        p: &Prepared,
        cancel: &AtomicBool,
        queued_secs: f64,
        sink: &mut dyn FnMut(Event) -> bool,
    ) {
        let mut run = Run::new(p, queued_secs);
        let outcome = run.execute(self, p, cancel, sink);
        let stats = &self.stats;
        match outcome {
            Ok(()) => {}
            Err(Halt::Cancelled) => {
                stats.cancelled.fetch_add(1, Ordering::Relaxed);
                sink(Event::Done(run.done(FinishReason::Cancelled)));
            }
            Err(Halt::Fault(message)) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                sink(Event::Failed {
                    kind: FailureKind::Internal,
                    message,
                });
            }
        }
    }
}

/// One request's progress: what `Done` reports however the run ends.
struct Run {
    usage: Usage,
    timings: Timings,
    generated: Vec<u32>,
}

pub(crate) fn check(sink_ok: bool, cancel: &AtomicBool) -> Result<(), Halt> {
    if !sink_ok || cancel.load(Ordering::Relaxed) {
        Err(Halt::Cancelled)
    } else {
        Ok(())
    }
}

impl Run {
    fn new(p: &Prepared, queued_secs: f64) -> Self {
        Run {
            usage: Usage {
                prompt_tokens: p.tokens.len(),
                ..Usage::default()
            },
            timings: Timings {
                queued_secs,
                ..Timings::default()
            },
            generated: Vec::new(),
        }
    }

    fn execute(
        &mut self,
        engine: &mut Engine,
        p: &Prepared,
        cancel: &AtomicBool,
        sink: &mut dyn FnMut(Event) -> bool,
    ) -> Result<(), Halt> {
        let Engine {
            text,
            model,
            backend,
            cache,
            stats,
            prefill_chunk,
            drafter,
        } = engine;
        let t0 = Instant::now();
        let prompt = &p.tokens;
        let min_rows = backend.batch_invariant_rows();
        let (slot, mut reuse) = cache.acquire(model, prompt, min_rows)?;
        if p.request.prompt_logprobs {
            reuse = 0;
            slot.tokens.clear();
            slot.cache.clear();
        }
        let n = prompt.len() as u64;
        stats.prompt_tokens.fetch_add(n, Ordering::Relaxed);
        stats.prefix_queries.fetch_add(n, Ordering::Relaxed);
        stats.prefix_hits.fetch_add(reuse as u64, Ordering::Relaxed);
        self.usage.cached_tokens = reuse;
        let started = sink(Event::Started {
            prompt_tokens: prompt.len(),
            cached_tokens: reuse,
        });
        check(started, cancel)?;
        let step = Step {
            text,
            model,
            be: &**backend,
            stats,
            p,
            cancel,
            chunk: *prefill_chunk,
        };
        let mut matcher = p.constraint.clone().map(|c| c.0);
        // the first token's mask is computed while the prompt runs
        let (logits, mask) = std::thread::scope(|s| {
            let job = matcher
                .as_mut()
                .map(|m| s.spawn(move || m.compute_mask_or_eos()));
            let logits = step.prefill(slot, reuse, sink);
            (logits, job.map(|j| j.join()))
        });
        let logits = logits?;
        let mask = mask.map(joined).transpose()?;
        self.timings.prefill_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut drafting = drafter.for_request(p, &**backend);
        let decoded = step.decode(
            slot,
            logits,
            (matcher, mask),
            &mut self.generated,
            &mut drafting,
            sink,
        );
        self.timings.decode_secs = t1.elapsed().as_secs_f64();
        if let Some((usage, off)) = drafting.map(|dr| (dr.usage(), dr.off_reason)) {
            self.usage.draft = Some(usage);
            drafter.account(stats, &usage, off);
        }
        let (finish, stop_sequence) = decoded?;
        let mut done = self.done(finish);
        done.stop_sequence = stop_sequence;
        sink(Event::Done(done));
        Ok(())
    }

    fn done(&mut self, finish: FinishReason) -> Done {
        self.usage.completion_tokens = self.generated.len();
        Done {
            finish,
            stop_sequence: None,
            usage: self.usage,
            timings: self.timings,
            tokens: std::mem::take(&mut self.generated),
        }
    }
}

impl Drafter {
    /// This request's drafting, unless it or the engine turned drafting off or the backend's
    /// forwards of several rows differ from one-row forwards (drafting would change output).
    fn for_request<'a>(&'a mut self, p: &Prepared, be: &dyn Backend) -> Option<Drafting<'a>> {
        if !self.enabled || !p.request.draft || be.verify_rows() < 2 {
            return None;
        }
        let model = match (&mut self.model, &self.model_off) {
            (Some(m), None) => Some(m as &mut dyn DraftSource),
            _ => None,
        };
        Some(Drafting::new(
            &mut self.lookup,
            model,
            &mut self.costs,
            be.verify_rows(),
            self.always,
        ))
    }

    /// Adds a request's drafting to the counters; a draft model that turned itself off stays
    /// off, for the reason given.
    fn account(&mut self, stats: &EngineStats, u: &DraftUsage, off: Option<String>) {
        let add = |a: &AtomicU64, n: usize| a.fetch_add(n as u64, Ordering::Relaxed);
        add(&stats.draft_tokens, u.drafted_tokens);
        add(&stats.draft_accepted, u.accepted_tokens);
        add(&stats.decode_steps, u.decode_steps);
        if let Some(reason) = off {
            // once per engine: the server's log and `run`'s stderr say why drafting changed
            eprintln!("draft model turned off: {reason}; prompt lookup drafts from now on");
            self.model_off = Some(reason);
            stats.draft_model_active.store(0, Ordering::Relaxed);
        }
    }
}

/// What one request's forwards need, borrowed from the engine.
pub(crate) struct Step<'a> {
    pub text: &'a TextModel,
    pub model: &'a Model,
    pub be: &'a dyn Backend,
    pub stats: &'a EngineStats,
    pub p: &'a Prepared,
    pub cancel: &'a AtomicBool,
    pub chunk: usize,
}

pub(crate) type Mask = toktrie::SimpleVob;

/// A mask from the thread that computed it; a constraint error fails the request.
pub(crate) fn joined<E: std::fmt::Display>(
    r: std::thread::Result<Result<Mask, E>>,
) -> Result<Mask, Halt> {
    match r {
        Ok(Ok(mask)) => Ok(mask),
        Ok(Err(e)) => Err(Halt::Fault(format!("constraint error: {e}"))),
        Err(_) => Err(Halt::Fault("the constraint panicked".into())),
    }
}

impl Step<'_> {
    /// Runs the prompt after the reused prefix in chunks; the last row's logits. No forward has
    /// fewer than `batch_invariant_rows` rows unless the prompt is that short (see
    /// `PrefixCache::acquire`).
    fn prefill(
        &self,
        slot: &mut Slot,
        reuse: usize,
        sink: &mut dyn FnMut(Event) -> bool,
    ) -> Result<Vec<f32>, Halt> {
        let (p, prompt) = (self.p, &self.p.tokens);
        let n_vocab = self.model.config.n_vocab;
        let scoring = p.request.prompt_logprobs;
        let top = p.request.logprobs.unwrap_or(0);
        let mut scores = Vec::new();
        if scoring {
            scores.push(token_logprob(self.text, prompt[0], None, &[], 0));
        }
        let mut logits = Vec::new();
        let mut at = reuse;
        while at < prompt.len() {
            check(true, self.cancel)?;
            let mut end = (at + self.chunk).min(prompt.len());
            let min_rows = self.be.batch_invariant_rows();
            if (1..min_rows).contains(&(prompt.len() - end)) {
                // the last forward gets `min_rows` rows too (a chunk is far longer than that)
                end = prompt.len() - min_rows;
            }
            let want = match (scoring, end == prompt.len()) {
                (true, _) => Logits::All,
                (false, true) => Logits::Last,
                (false, false) => Logits::None,
            };
            logits = self
                .model
                .forward(&prompt[at..end], &mut slot.cache, want)?;
            slot.tokens.extend_from_slice(&prompt[at..end]);
            check(sink(Event::Progress { prefilled: end }), self.cancel)?;
            if scoring {
                for (row, &next) in logits.chunks_exact(n_vocab).zip(&prompt[at + 1..]) {
                    scores.push(token_logprob(self.text, next, Some(row), row, top));
                }
                logits.drain(..logits.len() - n_vocab);
            }
            at = end;
        }
        if scoring {
            check(sink(Event::PromptLogprobs(scores)), self.cancel)?;
        }
        Ok(logits)
    }
}

/// `id` with its log-probability under `row` (None for an unpredicted first token) and the
/// `top` most likely alternatives from `top_row`.
pub(crate) fn token_logprob(
    text: &TextModel,
    id: u32,
    row: Option<&[f32]>,
    top_row: &[f32],
    top: usize,
) -> TokenLogprob {
    let tok = &text.tokenizer;
    let piece = |id: u32| {
        let bytes = tok.token_bytes(id).to_vec();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    };
    let (text_of, bytes) = piece(id);
    let log_norm = row.map(log_sum_exp);
    let logprob = row
        .zip(log_norm)
        .map(|(r, z)| r.get(id as usize).map_or(f32::NEG_INFINITY, |l| l - z));
    let mut alternatives = Vec::new();
    if top > 0 && !top_row.is_empty() {
        let z = log_sum_exp(top_row);
        let mut idx: Vec<u32> = (0..top_row.len() as u32).collect();
        let k = top.min(idx.len());
        idx.select_nth_unstable_by(k - 1, |&a, &b| {
            top_row[b as usize].total_cmp(&top_row[a as usize])
        });
        idx.truncate(k);
        idx.sort_by(|&a, &b| top_row[b as usize].total_cmp(&top_row[a as usize]));
        for t in idx {
            let (text, bytes) = piece(t);
            alternatives.push(TopLogprob {
                id: t,
                text,
                bytes,
                logprob: top_row[t as usize] - z,
            });
        }
    }
    TokenLogprob {
        id,
        text: text_of,
        bytes,
        logprob,
        top: alternatives,
    }
}

fn log_sum_exp(row: &[f32]) -> f32 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let sum: f64 = row.iter().map(|&x| ((x - max) as f64).exp()).sum();
    max + sum.ln() as f32
}
