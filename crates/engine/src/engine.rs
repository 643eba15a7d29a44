//! Running prepared requests on one model: prefix-cache reuse, chunked prefill that stops
//! within a chunk of a cancellation, decode, and text-level events out.
use crate::events::{
    Done, Event, FailureKind, FinishReason, Timings, TokenLogprob, TopLogprob, Usage,
};
use crate::output::{OutputProcessor, Piece};
use crate::prefix_cache::{PrefixCache, Slot};
use crate::prompt::{Prepared, TextModel};
use crate::request::ToolCall;
use crate::sampler::Sampler;
use crate::stats::EngineStats;
use ishizuki_core::Backend;
use ishizuki_models::{Logits, Model};
use llguidance::Matcher;
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
}

/// Where a run ended before it finished normally.
enum Halt {
    Cancelled,
    Fault(String),
}

impl From<ishizuki_models::ModelError> for Halt {
    fn from(e: ishizuki_models::ModelError) -> Halt {
        Halt::Fault(e.to_string())
    }
}

impl Engine {
    pub fn new(
        text: Arc<TextModel>,
        model: Model,
        backend: Arc<dyn Backend>,
        slots: usize,
    ) -> Engine {
        let n_ctx = text.n_ctx;
        Engine {
            text,
            model,
            backend,
            cache: PrefixCache::new(slots, n_ctx),
            stats: Arc::new(EngineStats::default()),
            prefill_chunk: PREFILL_CHUNK,
        }
    }

    /// Prompt tokens per prefill forward (at least twice the backend's invariant rows).
    pub fn with_prefill_chunk(mut self, chunk: usize) -> Engine {
        self.prefill_chunk = chunk.max(2 * self.backend.batch_invariant_rows());
        self
    }

    pub fn model(&self) -> &Model {
        &self.model
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

fn check(sink_ok: bool, cancel: &AtomicBool) -> Result<(), Halt> {
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
        } = engine;
        let t0 = Instant::now();
        let prompt = &p.tokens;
        let min_rows = backend.batch_invariant_rows();
        let (slot, mut reuse) = cache.acquire(model, prompt, min_rows);
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
        let decoded = step.decode(slot, logits, matcher, mask, &mut self.generated, sink);
        self.timings.decode_secs = t1.elapsed().as_secs_f64();
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

/// What one request's forwards need, borrowed from the engine.
struct Step<'a> {
    text: &'a TextModel,
    model: &'a Model,
    be: &'a dyn Backend,
    stats: &'a EngineStats,
    p: &'a Prepared,
    cancel: &'a AtomicBool,
    chunk: usize,
}

type Mask = toktrie::SimpleVob;

/// A mask from the thread that computed it; a constraint error fails the request.
fn joined<E: std::fmt::Display>(r: std::thread::Result<Result<Mask, E>>) -> Result<Mask, Halt> {
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
                .forward(self.be, &prompt[at..end], &mut slot.cache, want)?;
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

    /// Samples until a stop; each next mask is computed while the forward runs.
    fn decode(
        &self,
        slot: &mut Slot,
        mut logits: Vec<f32>,
        mut matcher: Option<Matcher>,
        mut mask: Option<Mask>,
        generated: &mut Vec<u32>,
        sink: &mut dyn FnMut(Event) -> bool,
    ) -> Result<(FinishReason, Option<String>), Halt> {
        let (p, text) = (self.p, self.text);
        let mut out = OutputProcessor::new(
            &text.tokenizer,
            &p.request.stop,
            p.parse_reasoning,
            p.starts_in_reasoning,
            p.request
                .parse_tool_calls
                .then(|| (text.tool_syntax, tool_names(&p.request))),
        );
        let mut pieces = Vec::new();
        let mut sampler = Sampler::new(p.request.sampler.clone());
        let mut history = p.tokens.clone();
        let want_top = p.request.logprobs;
        let finish = loop {
            if generated.len() >= p.max_tokens {
                break FinishReason::Length;
            }
            let raw = want_top.map(|_| logits.clone());
            if let Some(m) = mask.as_ref().filter(|_| !out.in_reasoning()) {
                apply_mask(&mut logits, m);
            }
            let id = sampler.sample(&mut logits, &history);
            generated.push(id);
            history.push(id);
            self.stats.generation_tokens.fetch_add(1, Ordering::Relaxed);
            if text.tokenizer.is_eog(id) {
                break FinishReason::EndOfTurn;
            }
            let constrained = mask.is_some() && !out.in_reasoning();
            if let (true, Some(m)) = (constrained, matcher.as_mut()) {
                m.consume_token(id)
                    .map_err(|e| Halt::Fault(format!("constraint error: {e}")))?;
            }
            let going = out.push_token(id, &mut pieces);
            let scores = match (&raw, want_top) {
                (Some(row), Some(n)) => vec![token_logprob(text, id, Some(row), row, n)],
                _ => Vec::new(),
            };
            check(flush(&mut pieces, sink, scores), self.cancel)?;
            if !going {
                break FinishReason::StopSequence;
            }
            if slot.cache.len() >= slot.cache.n_ctx() || generated.len() >= p.max_tokens {
                break FinishReason::Length;
            }
            let (next, next_mask) = std::thread::scope(|s| {
                let job = matcher
                    .as_mut()
                    .map(|m| s.spawn(move || m.compute_mask_or_eos()));
                let next = self
                    .model
                    .forward(self.be, &[id], &mut slot.cache, Logits::Last);
                (next, job.map(|j| j.join()))
            });
            logits = next?;
            mask = next_mask.map(joined).transpose()?;
            slot.tokens.push(id);
        };
        out.finish(&mut pieces);
        let finish = if out.calls_seen() > 0 && finish != FinishReason::Length {
            FinishReason::ToolCalls
        } else {
            finish
        };
        flush(&mut pieces, sink, Vec::new());
        Ok((finish, out.stopped_by.clone()))
    }
}

fn tool_names(r: &crate::request::Request) -> Vec<String> {
    match &r.prompt {
        crate::request::Prompt::Chat { tools, .. } => {
            tools.iter().map(|t| t.name.clone()).collect()
        }
        _ => Vec::new(),
    }
}

/// Tokens the constraint does not allow get no probability.
fn apply_mask(logits: &mut [f32], mask: &Mask) {
    for (id, l) in logits.iter_mut().enumerate() {
        if !mask.is_allowed(id as u32) {
            *l = f32::NEG_INFINITY;
        }
    }
}

/// Sends the pieces gathered so far; `logprobs` ride on the first text event (or an empty one).
fn flush(
    pieces: &mut Vec<Piece>,
    sink: &mut dyn FnMut(Event) -> bool,
    mut logprobs: Vec<TokenLogprob>,
) -> bool {
    let mut ok = true;
    for piece in pieces.drain(..) {
        let event = match piece {
            Piece::Content(text) => Event::Text {
                text,
                logprobs: std::mem::take(&mut logprobs),
            },
            Piece::Reasoning(text) => Event::Reasoning(text),
            Piece::Call(c) => Event::ToolCall(ToolCall {
                id: call_id(),
                name: c.name,
                arguments: c.arguments,
            }),
        };
        ok &= sink(event);
    }
    if !logprobs.is_empty() {
        ok &= sink(Event::Text {
            text: String::new(),
            logprobs,
        });
    }
    ok
}

/// A fresh `call_…` id, unique within the process and unlikely to repeat across restarts.
fn call_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = crate::sampler::seed_from_time();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut rng = crate::sampler::Rng::new(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    format!("call_{:016x}{:08x}", rng.next_u64(), n as u32)
}

/// `id` with its log-probability under `row` (None for an unpredicted first token) and the
/// `top` most likely alternatives from `top_row`.
fn token_logprob(
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
