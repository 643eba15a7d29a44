//! What the engine reports while it runs a request, in order: `Started`, then any of the deltas,
//! then exactly one `Done` or `Failed`.
use crate::request::ToolCall;

#[derive(Clone, Debug, PartialEq)]
pub struct TopLogprob {
    pub id: u32,
    pub text: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

/// One token with its log-probability under the model (before sampling filters).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub text: String,
    pub bytes: Vec<u8>,
    /// `None` for the first prompt token, which nothing predicts.
    pub logprob: Option<f32>,
    pub top: Vec<TopLogprob>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token.
    EndOfTurn,
    /// A stop string matched.
    StopSequence,
    /// The token budget or the context ran out.
    Length,
    ToolCalls,
    Cancelled,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// What drafting did, where the request drafted.
    pub draft: Option<DraftUsage>,
}

/// Drafting's share of a request: tokens proposed and kept, and the decode forwards it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DraftUsage {
    /// `lookup` or `model`.
    pub source: &'static str,
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
    /// Decode forwards, with drafted rows or without.
    pub decode_steps: usize,
    /// The draft model turned itself off during this request (it did not pay).
    pub model_turned_off: bool,
}

impl DraftUsage {
    /// Kept drafted tokens over drafted ones (0 when nothing was drafted).
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted_tokens == 0 {
            0.0
        } else {
            self.accepted_tokens as f64 / self.drafted_tokens as f64
        }
    }

    /// The fields every front reports: source, tokens drafted and kept, the rate, decode forwards
    /// and tokens per step (`generated` tokens in all).
    pub fn json(&self, generated: usize) -> serde_json::Value {
        serde_json::json!({
            "source": self.source,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": self.acceptance_rate(),
            "decode_steps": self.decode_steps,
            "tokens_per_step": self.tokens_per_step(generated),
        })
    }

    /// Tokens per decode forward (1.0 for plain decoding); the first generated token comes from
    /// the prompt's forward.
    pub fn tokens_per_step(&self, generated: usize) -> f64 {
        if self.decode_steps == 0 {
            1.0
        } else {
            generated.saturating_sub(1) as f64 / self.decode_steps as f64
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    pub queued_secs: f64,
    pub prefill_secs: f64,
    pub decode_secs: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Done {
    pub finish: FinishReason,
    /// The stop string that matched, for `StopSequence`.
    pub stop_sequence: Option<String>,
    pub usage: Usage,
    pub timings: Timings,
    /// Generated ids, including an end-of-generation id where generation stopped on one.
    pub tokens: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    InvalidRequest,
    ContextExceeded,
    Internal,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Started {
        prompt_tokens: usize,
        cached_tokens: usize,
    },
    /// Prompt tokens in the cache so far (after each prefill chunk).
    Progress {
        prefilled: usize,
    },
    /// Logprobs of every prompt token (requests with `prompt_logprobs`), before any text.
    PromptLogprobs(Vec<TokenLogprob>),
    /// Content text; `logprobs` holds the tokens decoded in this step where asked for.
    Text {
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    Reasoning(String),
    ToolCall(ToolCall),
    Done(Done),
    Failed {
        kind: FailureKind,
        message: String,
    },
}
