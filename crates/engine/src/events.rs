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
