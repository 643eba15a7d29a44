//! Generated ids to text-level output, in the order a client sees it: detokenize (UTF-8 safe),
//! cut at stop strings, split reasoning (`<think>…</think>`) from content, and pull tool calls
//! out of the content.
use ishizuki_text::stops::partial_suffix_len;
use ishizuki_text::{
    ParsedCall, StopMatcher, StopScan, StreamDecoder, Tokenizer, ToolCallStream, ToolOutput,
    ToolSyntax,
};

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Content(String),
    Reasoning(String),
    Call(ParsedCall),
}

/// Where the reasoning splitter stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing but whitespace yet: a `<think>` here opens reasoning.
    Start,
    Reasoning,
    /// Just after `</think>`: leading whitespace is dropped.
    AfterReasoning,
    Content,
}

pub struct OutputProcessor<'a> {
    tokenizer: &'a Tokenizer,
    decoder: StreamDecoder,
    stops: StopMatcher,
    phase: Phase,
    parse_reasoning: bool,
    /// Text the reasoning splitter has not decided yet.
    held: String,
    tools: Option<ToolCallStream>,
    /// The stop string that ended generation, once one has.
    pub stopped_by: Option<String>,
}

impl<'a> OutputProcessor<'a> {
    pub fn new(
        tokenizer: &'a Tokenizer,
        stops: &[String],
        parse_reasoning: bool,
        starts_in_reasoning: bool,
        tools: Option<(ToolSyntax, Vec<String>)>,
    ) -> Self {
        let phase = match (parse_reasoning, starts_in_reasoning) {
            (true, true) => Phase::Reasoning,
            (true, false) => Phase::Start,
            (false, _) => Phase::Content,
        };
        OutputProcessor {
            tokenizer,
            decoder: StreamDecoder::continuation(true),
            stops: StopMatcher::new(stops),
            phase,
            parse_reasoning,
            held: String::new(),
            tools: tools.map(|(syntax, names)| ToolCallStream::new(syntax).with_known_tools(names)),
            stopped_by: None,
        }
    }

    /// Whether the output is inside a reasoning block (constraints wait for its end).
    pub fn in_reasoning(&self) -> bool {
        self.phase == Phase::Reasoning
    }

    /// Feeds one generated id; returns false once a stop string has matched.
    pub fn push_token(&mut self, id: u32, out: &mut Vec<Piece>) -> bool {
        let text = self.decoder.push(self.tokenizer, id);
        self.push_text(&text, out)
    }

    fn push_text(&mut self, text: &str, out: &mut Vec<Piece>) -> bool {
        if self.stopped_by.is_some() {
            return false;
        }
        match self.stops.push(text) {
            StopScan::Text(t) => {
                self.route(&t, out);
                true
            }
            StopScan::Stopped { text, stop } => {
                self.route(&text, out);
                self.stopped_by = Some(stop);
                false
            }
        }
    }

    /// End of generation: flushes every held byte.
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        if self.stopped_by.is_none() {
            let rest = self.decoder.finish();
            self.push_text(&rest, out);
            let held = self.stops.finish();
            self.route(&held, out);
        }
        let held = std::mem::take(&mut self.held);
        match self.phase {
            Phase::Reasoning => push(out, Piece::Reasoning(held)),
            _ => self.content(&held, out),
        }
        if let Some(tools) = &mut self.tools {
            let mut got = Vec::new();
            tools.finish(&mut got);
            out.extend(got.into_iter().map(piece_of));
        }
    }

    pub fn calls_seen(&self) -> usize {
        self.tools.as_ref().map_or(0, ToolCallStream::calls_seen)
    }

    /// Reasoning split of stop-checked text.
    fn route(&mut self, text: &str, out: &mut Vec<Piece>) {
        if !self.parse_reasoning {
            return self.content(text, out);
        }
        self.held.push_str(text);
        loop {
            match self.phase {
                Phase::Start => {
                    let trimmed = self.held.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(THINK_OPEN) {
                        self.held = rest.to_string();
                        self.phase = Phase::Reasoning;
                    } else if trimmed.is_empty() || THINK_OPEN.starts_with(trimmed) {
                        return;
                    } else {
                        self.phase = Phase::Content;
                    }
                }
                Phase::Reasoning => match self.held.find(THINK_CLOSE) {
                    Some(at) => {
                        let thought: String = self.held.drain(..at + THINK_CLOSE.len()).collect();
                        push(out, Piece::Reasoning(thought[..at].to_string()));
                        self.phase = Phase::AfterReasoning;
                    }
                    None => {
                        let keep = partial_suffix_len(&self.held, THINK_CLOSE);
                        let thought: String = self.held.drain(..self.held.len() - keep).collect();
                        push(out, Piece::Reasoning(thought));
                        return;
                    }
                },
                Phase::AfterReasoning => {
                    let trimmed = self.held.trim_start().to_string();
                    if trimmed.is_empty() {
                        self.held.clear();
                        return;
                    }
                    self.held = trimmed;
                    self.phase = Phase::Content;
                }
                Phase::Content => {
                    let rest = std::mem::take(&mut self.held);
                    return self.content(&rest, out);
                }
            }
        }
    }

    fn content(&mut self, text: &str, out: &mut Vec<Piece>) {
        match &mut self.tools {
            None => push(out, Piece::Content(text.to_string())),
            Some(tools) => {
                let mut got = Vec::new();
                tools.push(text, &mut got);
                for o in got {
                    push(out, piece_of(o));
                }
            }
        }
    }
}

fn piece_of(o: ToolOutput) -> Piece {
    match o {
        ToolOutput::Content(t) => Piece::Content(t),
        ToolOutput::Call(c) => Piece::Call(c),
    }
}

/// Appends, merging into the previous piece of the same text kind; empty text is dropped.
fn push(out: &mut Vec<Piece>, piece: Piece) {
    match (out.last_mut(), piece) {
        (_, Piece::Content(t) | Piece::Reasoning(t)) if t.is_empty() => {}
        (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
        (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => a.push_str(&b),
        (_, p) => out.push(p),
    }
}
