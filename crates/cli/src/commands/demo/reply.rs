//! One reply as it streams: events in, rendered markdown out, and the line of rates under it.
use super::term;
use ishizuki_engine::{Done, Event, FinishReason};
use ishizuki_markdown::Renderer;
use std::io::Write;

/// How a reply ended.
#[derive(Debug)]
pub enum Outcome {
    /// Finished or stopped (`done.finish` says which); `content` is what was shown.
    Finished {
        content: String,
        reasoning: String,
        done: Done,
    },
    Failed {
        message: String,
    },
}

pub struct Reply<'r, W: Write> {
    renderer: &'r mut Renderer,
    out: W,
    content: String,
    reasoning: String,
    done: Option<Done>,
    failure: Option<String>,
}

impl<'r, W: Write> Reply<'r, W> {
    pub fn new(renderer: &'r mut Renderer, out: W) -> Self {
        Reply {
            renderer,
            out,
            content: String::new(),
            reasoning: String::new(),
            done: None,
            failure: None,
        }
    }

    /// Renders one engine event; false once the terminal is gone (the engine then stops).
    pub fn on_event(&mut self, event: Event) -> bool {
        let shown = match event {
            Event::Text { text, .. } => {
                self.renderer.set_width(term::width());
                self.content.push_str(&text);
                self.renderer.push(text.as_bytes())
            }
            Event::Reasoning(text) => {
                self.renderer.set_width(term::width());
                self.reasoning.push_str(&text);
                self.renderer.push_thinking(text.as_bytes())
            }
            Event::Done(done) => {
                self.done = Some(done);
                return true;
            }
            Event::Failed { message, .. } => {
                self.failure = Some(message);
                return true;
            }
            _ => return true,
        };
        self.write(&shown)
    }

    fn write(&mut self, text: &str) -> bool {
        text.is_empty()
            || self
                .out
                .write_all(text.as_bytes())
                .and(self.out.flush())
                .is_ok()
    }

    /// Flushes what the renderer holds and says how the reply ended.
    pub fn finish(mut self) -> Outcome {
        let rest = self.renderer.finish();
        self.write(&rest);
        match (self.failure, self.done) {
            (Some(message), _) => Outcome::Failed { message },
            (None, Some(done)) => Outcome::Finished {
                content: self.content,
                reasoning: self.reasoning,
                done,
            },
            (None, None) => Outcome::Failed {
                message: "generation ended without a result".into(),
            },
        }
    }
}

fn per_second(n: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// Prompt tokens newly prefilled (not from the cache) and their rate.
fn prefill_rate(d: &Done) -> (usize, f64) {
    let fresh = d.usage.prompt_tokens.saturating_sub(d.usage.cached_tokens);
    (fresh, per_second(fresh, d.timings.prefill_secs))
}

/// Generated tokens per second of decoding (the first comes from the prompt's forward).
fn decode_rate(d: &Done) -> f64 {
    per_second(d.tokens.len().saturating_sub(1), d.timings.decode_secs)
}

/// The line under every reply: the prompt (how much came from the cache, the rate of the
/// rest), the generated tokens and their rate, and what drafting kept.
pub fn rates_line(d: &Done) -> String {
    let (_, prefill_tps) = prefill_rate(d);
    let drafting = match &d.usage.draft {
        Some(u) => format!(
            "drafts kept {}/{} ({:.0}%, {})",
            u.accepted_tokens,
            u.drafted_tokens,
            100.0 * u.acceptance_rate(),
            u.source
        ),
        None => "drafting off".to_string(),
    };
    let stopped = if d.finish == FinishReason::Cancelled {
        " · stopped"
    } else {
        ""
    };
    format!(
        "{} prompt tokens ({} cached) at {prefill_tps:.1} tok/s · {} generated at {:.1} tok/s \
         · {drafting}{stopped}",
        d.usage.prompt_tokens,
        d.usage.cached_tokens,
        d.usage.completion_tokens,
        decode_rate(d)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ishizuki_engine::{DraftUsage, Usage};
    use ishizuki_markdown::ColorMode;

    fn done(finish: FinishReason) -> Done {
        Done {
            finish,
            stop_sequence: None,
            usage: Usage {
                prompt_tokens: 120,
                cached_tokens: 100,
                completion_tokens: 11,
                draft: Some(DraftUsage {
                    source: "lookup",
                    drafted_tokens: 8,
                    accepted_tokens: 6,
                    decode_steps: 5,
                    model_turned_off: false,
                }),
            },
            timings: ishizuki_engine::events::Timings {
                queued_secs: 0.0,
                prefill_secs: 0.5,
                decode_secs: 2.0,
            },
            tokens: (0..11).collect(),
        }
    }

    #[test]
    fn a_reply_streams_through_the_renderer_and_finishes() {
        let mut renderer = Renderer::new(ColorMode::None, 80);
        let mut screen = Vec::new();
        let mut reply = Reply::new(&mut renderer, &mut screen);
        assert!(reply.on_event(Event::Reasoning("hmm".into())));
        for piece in ["Use **", "bold**", " here."] {
            assert!(reply.on_event(Event::Text {
                text: piece.into(),
                logprobs: vec![],
            }));
        }
        reply.on_event(Event::Done(done(FinishReason::EndOfTurn)));
        match reply.finish() {
            Outcome::Finished {
                content, reasoning, ..
            } => {
                assert_eq!(content, "Use **bold** here.");
                assert_eq!(reasoning, "hmm");
            }
            other => panic!("{other:?}"),
        }
        let screen = String::from_utf8(screen).unwrap();
        assert!(screen.contains("Use **bold** here."), "{screen:?}");
    }

    #[test]
    fn a_failure_mid_reply_is_reported_not_kept() {
        let mut renderer = Renderer::new(ColorMode::None, 80);
        let mut reply = Reply::new(&mut renderer, Vec::new());
        reply.on_event(Event::Text {
            text: "partial".into(),
            logprobs: vec![],
        });
        reply.on_event(Event::Failed {
            kind: ishizuki_engine::FailureKind::Internal,
            message: "the backend fell over".into(),
        });
        match reply.finish() {
            Outcome::Failed { message } => assert_eq!(message, "the backend fell over"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_rates_line_counts_only_fresh_prompt_tokens() {
        let line = rates_line(&done(FinishReason::EndOfTurn));
        assert!(
            line.starts_with("120 prompt tokens (100 cached) at 40.0 tok/s"),
            "{line}"
        );
        assert!(line.contains("11 generated at 5.0 tok/s"), "{line}");
        assert!(line.contains("drafts kept 6/8 (75%, lookup)"), "{line}");
        assert!(rates_line(&done(FinishReason::Cancelled)).ends_with("stopped"));
    }
}
