//! Decode with drafting: each forward runs the last sampled token and the tokens drafted after
//! it; every row is then sampled or verified in order, through the same stops, end tokens,
//! token limit and grammar as plain decoding, so drafting changes no output (greedy: token for
//! token; sampled: in distribution). A step with no draft is exactly a plain step.
use crate::draft::{verify_one, Draft, DraftSource, Governor, RowCosts, MAX_DRAFT};
use crate::engine::{check, joined, token_logprob, Halt, Mask, Step};
use crate::events::{DraftUsage, Event, FinishReason, TokenLogprob};
use crate::output::{OutputProcessor, Piece};
use crate::prefix_cache::Slot;
use crate::request::ToolCall;
use crate::sampler::{Candidate, Sampler};
use ishizuki_models::Logits;
use llguidance::Matcher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A request's drafting: prompt lookup first (free), else the draft model while it pays; a
/// governor for each, and the engine's measured forward costs.
pub struct Drafting<'a> {
    pub lookup: &'a mut dyn DraftSource,
    pub model: Option<&'a mut dyn DraftSource>,
    pub costs: &'a mut RowCosts,
    pub lookup_governor: Governor,
    pub model_governor: Governor,
    /// Rows a verification forward may have (the backend's row-invariant limit).
    pub max_rows: usize,
    /// Draft whatever the sources propose, paying or not (tests of exactness).
    pub always: bool,
    pub steps: usize,
    /// Why the draft model stopped drafting (it did not pay): lookup alone from then on.
    pub off_reason: Option<String>,
    /// Which source made the draft being verified (`true`: the model).
    by_model: Option<bool>,
}

impl<'a> Drafting<'a> {
    pub fn new(
        lookup: &'a mut dyn DraftSource,
        model: Option<&'a mut dyn DraftSource>,
        costs: &'a mut RowCosts,
        max_rows: usize,
        always: bool,
    ) -> Self {
        Drafting {
            lookup,
            model,
            costs,
            lookup_governor: Governor::default(),
            model_governor: Governor::default(),
            max_rows,
            always,
            steps: 0,
            off_reason: None,
            by_model: None,
        }
    }

    pub fn usage(&self) -> DraftUsage {
        let (l, m) = (&self.lookup_governor, &self.model_governor);
        DraftUsage {
            source: self.model.as_ref().map_or(self.lookup.name(), |m| m.name()),
            drafted_tokens: l.drafted + m.drafted,
            accepted_tokens: l.kept + m.kept,
            decode_steps: self.steps,
            model_turned_off: self.off_reason.is_some(),
        }
    }

    /// The draft model's time per token in plain steps.
    fn model_cost(&self) -> f64 {
        let secs = self.model.as_ref().map_or(0.0, |m| m.secs_per_token());
        secs / self.costs.plain_secs()
    }

    fn max_len(&self) -> usize {
        self.max_rows.saturating_sub(1).min(MAX_DRAFT)
    }

    fn record(&mut self, drafted: usize, kept: usize) {
        match self.by_model {
            Some(true) => self.model_governor.record(drafted, kept),
            Some(false) => self.lookup_governor.record(drafted, kept),
            None => {}
        }
    }

    /// Tells both sources what the sequence became: the one that drafted how much of its
    /// draft was kept, the other each token.
    fn tell(&mut self, kept: &[u32], next: u32) {
        let by_model = self.by_model.take();
        let tell = |src: &mut dyn DraftSource, drafted_it: bool| {
            if drafted_it {
                src.accept(kept.len(), next);
            } else {
                kept.iter().chain([&next]).for_each(|&t| src.accept(0, t));
            }
        };
        tell(&mut *self.lookup, by_model == Some(false));
        if let Some(m) = self.model.as_deref_mut() {
            tell(m, by_model == Some(true));
        }
    }

    /// A draft of at most `max` tokens: lookup's if it has one, else the draft model's.
    fn propose(&mut self, max: usize) -> Draft {
        let k = if self.always {
            max
        } else {
            self.lookup_governor.choose(max, self.costs, 0.0)
        };
        let draft = if k > 0 {
            self.lookup.draft(k)
        } else {
            Draft::default()
        };
        if !draft.is_empty() {
            self.by_model = Some(false);
            return draft;
        }
        let cost = self.model_cost();
        let Some(model) = self
            .model
            .as_deref_mut()
            .filter(|_| self.off_reason.is_none())
        else {
            return draft;
        };
        let k = if self.always {
            max
        } else {
            self.model_governor.choose(max, self.costs, cost)
        };
        if k == 0 {
            return draft;
        }
        self.by_model = Some(true);
        model.draft(k)
    }
}

/// The state one decode carries from row to row.
struct Decoder<'s, 'a> {
    step: &'s Step<'a>,
    out: OutputProcessor<'a>,
    pieces: Vec<Piece>,
    sampler: Sampler,
    history: Vec<u32>,
    matcher: Option<Matcher>,
}

/// A forward's output as its rows' sampling needs it: the logits, or, where nothing else reads
/// them (no penalties, grammar or logprobs), each row's argmax (greedy) or its top-k logits
/// (top-k sampling), found by the backend, so a GPU reads back a few ids, not a vocabulary.
enum Out {
    Logits(Vec<f32>),
    Ids(Vec<u32>),
    Top(Vec<Vec<Candidate>>),
}

/// How a forward's rows ended: drafted tokens kept, the token after them, or the finish.
struct Rows {
    kept: usize,
    next: Option<u32>,
    finish: Option<FinishReason>,
}

impl Step<'_> {
    /// Samples (and verifies drafts) until a stop; each forward's first mask is computed while
    /// the forward runs.
    pub(crate) fn decode(
        &self,
        slot: &mut Slot,
        logits: Vec<f32>,
        (matcher, mut mask): (Option<Matcher>, Option<Mask>),
        generated: &mut Vec<u32>,
        drafting: &mut Option<Drafting>,
        sink: &mut dyn FnMut(Event) -> bool,
    ) -> Result<(FinishReason, Option<String>), Halt> {
        let (p, text) = (self.p, self.text);
        let mut d = Decoder {
            step: self,
            out: OutputProcessor::new(
                &text.tokenizer,
                &p.request.stop,
                p.parse_reasoning,
                p.starts_in_reasoning,
                p.request
                    .parse_tool_calls
                    .then(|| (text.tool_syntax, tool_names(&p.request))),
            ),
            pieces: Vec::new(),
            sampler: Sampler::new(p.request.sampler.clone()),
            history: p.tokens.clone(),
            matcher,
        };
        if let Some(dr) = drafting.as_mut() {
            dr.lookup.begin(&p.tokens, &p.request.sampler);
            if let Some(m) = dr.model.as_deref_mut() {
                m.begin(&p.tokens, &p.request.sampler);
            }
        }
        let (mut inputs, mut draft) = (Vec::new(), Draft::default());
        let mut out = Out::Logits(logits);
        let finish = loop {
            let rows = d.rows(&mut out, &draft, mask.take(), generated, sink);
            // the cache keeps the forward's first token and the drafted tokens that were kept
            let kept = rows.as_ref().map_or(0, |r| r.kept);
            if let Some(&first) = inputs.first() {
                slot.cache.truncate(slot.tokens.len() + 1 + kept);
                slot.tokens.push(first);
                slot.tokens.extend_from_slice(&draft.tokens[..kept]);
            }
            let rows = rows?;
            if let Some(dr) = drafting.as_mut().filter(|_| !inputs.is_empty()) {
                dr.record(draft.len(), kept);
                dr.check_pays();
            }
            if let Some(finish) = rows.finish {
                break finish;
            }
            let Some(next) = rows.next else {
                break FinishReason::Length;
            };
            if slot.cache.len() >= slot.cache.n_ctx() || generated.len() >= p.max_tokens {
                break FinishReason::Length;
            }
            draft = match drafting.as_mut() {
                Some(dr) => {
                    dr.tell(&draft.tokens[..kept], next);
                    d.next_draft(dr, slot, generated.len())?
                }
                None => Draft::default(),
            };
            inputs.clear();
            inputs.push(next);
            inputs.extend_from_slice(&draft.tokens);
            let want = if draft.is_empty() {
                Logits::Last
            } else {
                Logits::All
            };
            let (ids_only, top_only) = (d.argmax_suffices(), d.top_suffices());
            let (next_out, next_mask, secs) = std::thread::scope(|s| {
                let job = d
                    .matcher
                    .as_mut()
                    .map(|m| s.spawn(move || m.compute_mask_or_eos()));
                let (t0, cache) = (Instant::now(), &mut slot.cache);
                let out = if ids_only {
                    self.model
                        .forward_argmax(&inputs, cache, want)
                        .map(Out::Ids)
                } else if top_only {
                    let k = d.sampler.config().top_k;
                    self.model
                        .forward_top_k(&inputs, cache, want, k)
                        .map(Out::Top)
                } else {
                    self.model.forward(&inputs, cache, want).map(Out::Logits)
                };
                let secs = t0.elapsed().as_secs_f64();
                (out, job.map(|j| j.join()), secs)
            });
            out = next_out?;
            mask = next_mask.map(joined).transpose()?;
            if let Some(dr) = drafting.as_mut() {
                dr.costs.record(inputs.len(), secs);
                dr.steps += 1;
            }
        };
        let Decoder {
            mut out,
            mut pieces,
            ..
        } = d;
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

impl Drafting<'_> {
    /// A draft model whose rate no longer pays turns itself off: lookup alone from here on.
    fn check_pays(&mut self) {
        if self.always || self.off_reason.is_some() || self.model.is_none() {
            return;
        }
        let failure = self
            .model
            .as_ref()
            .and_then(|m| m.failure().map(str::to_string));
        if let Some(failure) = failure {
            self.off_reason = Some(failure);
            return;
        }
        let (max, cost) = (self.max_len(), self.model_cost());
        if !self.model_governor.pays(max, self.costs, cost) {
            self.off_reason = Some(format!(
                "the draft model does not pay here: {:.0}% of its tokens kept, each costing {:.2} \
                 plain steps to draft and {:.2} to verify",
                100.0 * self.model_governor.rate(),
                cost,
                self.costs.relative(2) - 1.0
            ));
        }
    }
}

impl Decoder<'_, '_> {
    /// Samples row by row: row i predicts the token after the forward's i-th input; a drafted
    /// token is verified against it, the first rejection (or the last row) samples the next.
    fn rows(
        &mut self,
        out: &mut Out,
        draft: &Draft,
        mut first_mask: Option<Mask>,
        generated: &mut Vec<u32>,
        sink: &mut dyn FnMut(Event) -> bool,
    ) -> Result<Rows, Halt> {
        let p = self.step.p;
        let n_vocab = self.step.model.config.n_vocab;
        let n_rows = match out {
            Out::Logits(l) => l.len() / n_vocab,
            Out::Ids(ids) => ids.len(),
            Out::Top(rows) => rows.len(),
        };
        let mut kept = 0;
        for i in 0..n_rows {
            if generated.len() >= p.max_tokens {
                return Ok(Rows {
                    kept,
                    next: None,
                    finish: Some(FinishReason::Length),
                });
            }
            let (id, constrained, raw) = match out {
                Out::Ids(ids) => (ids[i], false, None),
                Out::Top(rows) => (self.pick_top(&rows[i], i, draft)?, false, None),
                Out::Logits(l) => {
                    let row = &mut l[i * n_vocab..(i + 1) * n_vocab];
                    self.pick(row, i, draft, first_mask.take())?
                }
            };
            let accepted = draft.tokens.get(i) == Some(&id);
            if let Some(finish) = self.emit(id, constrained, raw, generated, sink)? {
                kept += usize::from(accepted);
                return Ok(Rows {
                    kept,
                    next: None,
                    finish: Some(finish),
                });
            }
            if !accepted {
                return Ok(Rows {
                    kept,
                    next: Some(id),
                    finish: None,
                });
            }
            kept += 1;
        }
        Err(Halt::Fault(format!(
            "verification: {n_rows} rows of output for a draft of {}",
            draft.len()
        )))
    }

    /// Row `i`'s token: masked by the grammar where one applies (`computed` is the mask made
    /// beside the forward, for its first row), then sampled, or its drafted token verified;
    /// with whether it was constrained and, for logprobs, the raw row.
    fn pick(
        &mut self,
        row: &mut [f32],
        i: usize,
        draft: &Draft,
        computed: Option<Mask>,
    ) -> Result<(u32, bool, Option<Vec<f32>>), Halt> {
        let raw = self.step.p.request.logprobs.map(|_| row.to_vec());
        let constrained = self.matcher.is_some() && !self.out.in_reasoning();
        if constrained {
            let m = match computed {
                Some(m) => m,
                None => self.compute_mask()?,
            };
            apply_mask(row, &m);
        }
        let id = match draft.tokens.get(i) {
            Some(&x) => {
                let dist = self.sampler.distribution(row, &self.history);
                verify_one(&dist, &draft.proposals[i], x, self.sampler.rng()).unwrap_or(x)
            }
            None => self.sampler.sample(row, &self.history),
        };
        Ok((id, constrained, raw))
    }

    /// Row `i`'s token from its top-k logits: sampled, or its drafted token verified.
    fn pick_top(&mut self, top: &[Candidate], i: usize, draft: &Draft) -> Result<u32, Halt> {
        let no_logit = || Halt::Fault("the model's logits hold no finite value".into());
        let Some(&x) = draft.tokens.get(i) else {
            return self.sampler.sample_top(top).ok_or_else(no_logit);
        };
        let dist = self.sampler.distribution_top(top).ok_or_else(no_logit)?;
        Ok(verify_one(&dist, &draft.proposals[i], x, self.sampler.rng()).unwrap_or(x))
    }

    /// Whether the next forward's top-k logits say all its rows' sampling needs: a top-k draw
    /// the backend can select for, no penalties, no grammar, no logprobs.
    fn top_suffices(&self) -> bool {
        self.sampler.top_suffices() && self.logits_read_only_by_sampling()
    }

    /// No grammar masks the logits and no logprobs report them: only the sampler reads them.
    fn logits_read_only_by_sampling(&self) -> bool {
        self.matcher.is_none() && self.step.p.request.logprobs.is_none()
    }

    /// Whether the next forward's argmax ids say all its rows' sampling needs: greedy, no
    /// penalties, no grammar, no logprobs.
    fn argmax_suffices(&self) -> bool {
        let c = self.sampler.config();
        c.is_greedy() && !c.penalties_active() && self.logits_read_only_by_sampling()
    }

    fn compute_mask(&mut self) -> Result<Mask, Halt> {
        let m = self.matcher.as_mut().expect("constrained");
        m.compute_mask_or_eos()
            .map_err(|e| Halt::Fault(format!("constraint error: {e}")))
    }

    /// Hands `id` to the output; the finish where it ends generation.
    fn emit(
        &mut self,
        id: u32,
        constrained: bool,
        raw: Option<Vec<f32>>,
        generated: &mut Vec<u32>,
        sink: &mut dyn FnMut(Event) -> bool,
    ) -> Result<Option<FinishReason>, Halt> {
        let (step, text) = (self.step, self.step.text);
        generated.push(id);
        self.history.push(id);
        step.stats.generation_tokens.fetch_add(1, Ordering::Relaxed);
        if text.tokenizer.is_eog(id) {
            return Ok(Some(FinishReason::EndOfTurn));
        }
        if let (true, Some(m)) = (constrained, self.matcher.as_mut()) {
            m.consume_token(id)
                .map_err(|e| Halt::Fault(format!("constraint error: {e}")))?;
        }
        let going = self.out.push_token(id, &mut self.pieces);
        let scores = match (&raw, step.p.request.logprobs) {
            (Some(row), Some(n)) => vec![token_logprob(text, id, Some(row), row, n)],
            _ => Vec::new(),
        };
        check(flush(&mut self.pieces, sink, scores), step.cancel)?;
        Ok((!going).then_some(FinishReason::StopSequence))
    }

    /// The next draft, as long as the governors, the token limit, the context and (for a
    /// constrained request) the grammar allow.
    fn next_draft(
        &mut self,
        dr: &mut Drafting,
        slot: &Slot,
        generated: usize,
    ) -> Result<Draft, Halt> {
        let room = slot.cache.n_ctx() - slot.cache.len() - 1;
        let max = dr
            .max_len()
            .min(self.step.p.max_tokens - generated - 1)
            .min(room);
        if max == 0 {
            return Ok(Draft::default());
        }
        let mut draft = dr.propose(max);
        draft.truncate(max);
        let constrained = !self.out.in_reasoning();
        if let (true, Some(m)) = (constrained, self.matcher.as_mut()) {
            let valid = m
                .validate_tokens(&draft.tokens)
                .map_err(|e| Halt::Fault(format!("constraint error: {e}")))?;
            draft.truncate(valid);
        }
        Ok(draft)
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
