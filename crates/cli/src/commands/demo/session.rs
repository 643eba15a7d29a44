//! The conversation: its messages, how each turn is asked, the totals `/stats` shows and the
//! JSON `/save` writes.
use super::reply::{Outcome, Reply};
use super::ThinkLevel;
use ishizuki_engine::{
    Done, Engine, Message, Prepared, Prompt, Request, SamplerConfig, ToolChoice,
};
use ishizuki_markdown::Renderer;
use std::io::Write;
use std::sync::atomic::AtomicBool;

/// Sums over the session's replies.
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    pub replies: usize,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub prefill_secs: f64,
    pub generated_tokens: usize,
    pub decode_secs: f64,
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
}

impl Totals {
    fn add(&mut self, d: &Done) {
        self.replies += 1;
        self.prompt_tokens += d.usage.prompt_tokens;
        self.cached_tokens += d.usage.cached_tokens;
        self.prefill_secs += d.timings.prefill_secs;
        self.generated_tokens += d.usage.completion_tokens;
        self.decode_secs += d.timings.decode_secs;
        if let Some(u) = &d.usage.draft {
            self.drafted_tokens += u.drafted_tokens;
            self.accepted_tokens += u.accepted_tokens;
        }
    }
}

pub struct Session {
    pub system: Option<String>,
    pub think: Option<ThinkLevel>,
    /// User and assistant turns, oldest first.
    pub messages: Vec<Message>,
    pub sampler: SamplerConfig,
    pub totals: Totals,
    pub last: Option<Done>,
}

/// What a turn left to say besides the reply itself.
pub enum TurnNote {
    /// Oldest exchanges dropped to make room in the context.
    Trimmed(usize),
}

impl Session {
    pub fn new(system: Option<String>, think: Option<ThinkLevel>, sampler: SamplerConfig) -> Self {
        Session {
            system,
            think,
            messages: Vec::new(),
            sampler,
            totals: Totals::default(),
            last: None,
        }
    }

    /// Forgets the conversation (the system message and settings stay).
    pub fn clear(&mut self) {
        self.messages.clear();
    }

    fn request(&self) -> Request {
        let mut messages = Vec::with_capacity(self.messages.len() + 1);
        if let Some(system) = self.system.as_deref().filter(|s| !s.is_empty()) {
            messages.push(Message::new("system", system));
        }
        messages.extend(self.messages.iter().cloned());
        let (enable_thinking, template_kwargs) = match self.think {
            None => (None, None),
            Some(ThinkLevel::Off) => (Some(false), None),
            Some(level) => (
                Some(true),
                Some(serde_json::json!({ "reasoning_effort": level.name() })),
            ),
        };
        let mut r = Request::new(Prompt::Chat {
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            enable_thinking,
            template_kwargs,
        });
        r.sampler = self.sampler.clone();
        r.max_tokens = None;
        r.parse_tool_calls = false;
        r
    }

    /// Prepares the conversation with the new user message, dropping the oldest exchanges while
    /// the context leaves too little room for a reply.
    fn prepare(&mut self, engine: &Engine, notes: &mut Vec<TurnNote>) -> Result<Prepared, String> {
        let room = (engine.text.n_ctx / 4).clamp(16, 1024);
        let mut dropped = 0;
        let result = loop {
            let result = engine.text.prepare(self.request());
            let short = match &result {
                Ok(p) => p.max_tokens < room,
                Err(e) => e.context_exceeded,
            };
            // the new message alone stays, whatever room it leaves
            if !short || self.messages.len() < 3 {
                break result;
            }
            self.messages.drain(..2);
            dropped += 1;
        };
        if dropped > 0 {
            notes.push(TurnNote::Trimmed(dropped));
        }
        result.map_err(|e| e.message)
    }

    /// Asks the model for a reply to `text`, streaming it rendered to `out`. A failed reply
    /// leaves the conversation as it was before.
    pub fn ask(
        &mut self,
        engine: &mut Engine,
        text: String,
        renderer: &mut Renderer,
        out: &mut dyn Write,
        cancel: &AtomicBool,
    ) -> Result<(Done, Vec<TurnNote>), String> {
        let before = self.messages.clone();
        self.messages.push(Message::new("user", text));
        let mut notes = Vec::new();
        let prepared = match self.prepare(engine, &mut notes) {
            Ok(p) => p,
            Err(e) => {
                self.messages = before;
                return Err(e);
            }
        };
        let mut reply = Reply::new(renderer, out);
        engine.run(&prepared, cancel, 0.0, &mut |e| reply.on_event(e));
        match reply.finish() {
            Outcome::Finished {
                content,
                reasoning,
                done,
            } => {
                let mut answer = Message::new("assistant", content);
                answer.reasoning = (!reasoning.is_empty()).then_some(reasoning);
                self.messages.push(answer);
                self.totals.add(&done);
                self.last = Some(done.clone());
                Ok((done, notes))
            }
            Outcome::Failed { message } => {
                self.messages = before;
                Err(message)
            }
        }
    }

    /// The conversation as `/save` writes it.
    pub fn to_json(&self, model: &str) -> serde_json::Value {
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(serde_json::json!({ "role": "system", "content": system }));
        }
        for m in &self.messages {
            let mut v = serde_json::json!({ "role": m.role, "content": m.content });
            if let Some(r) = &m.reasoning {
                v["reasoning"] = r.as_str().into();
            }
            messages.push(v);
        }
        serde_json::json!({
            "model": model,
            "think": self.think.map(ThinkLevel::name),
            "temperature": self.sampler.temperature,
            "messages": messages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(think: Option<ThinkLevel>) -> Session {
        let mut s = Session::new(Some("be brief".into()), think, SamplerConfig::greedy());
        s.messages.push(Message::new("user", "hi"));
        s
    }

    fn chat(r: &Request) -> (&[Message], Option<bool>, Option<&serde_json::Value>) {
        match &r.prompt {
            Prompt::Chat {
                messages,
                enable_thinking,
                template_kwargs,
                ..
            } => (messages, *enable_thinking, template_kwargs.as_ref()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_request_carries_the_system_message_and_the_thinking_level() {
        let r = session(Some(ThinkLevel::High)).request();
        let (messages, thinking, kwargs) = chat(&r);
        assert_eq!(messages[0], Message::new("system", "be brief"));
        assert_eq!(messages[1], Message::new("user", "hi"));
        assert_eq!(thinking, Some(true));
        assert_eq!(kwargs.unwrap()["reasoning_effort"], "high");
        let r = session(Some(ThinkLevel::Off)).request();
        assert_eq!(chat(&r).1, Some(false));
        let r = session(None).request();
        assert_eq!((chat(&r).1, chat(&r).2), (None, None));
    }

    #[test]
    fn an_empty_system_message_is_left_out() {
        let mut s = session(None);
        s.system = Some(String::new());
        let r = s.request();
        assert_eq!(chat(&r).0, &[Message::new("user", "hi")]);
    }

    #[test]
    fn the_saved_conversation_lists_every_message() {
        let mut s = session(Some(ThinkLevel::Low));
        let mut answer = Message::new("assistant", "hello");
        answer.reasoning = Some("greet back".into());
        s.messages.push(answer);
        let v = s.to_json("qwen");
        assert_eq!(v["model"], "qwen");
        assert_eq!(v["think"], "low");
        let roles: Vec<&str> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant"]);
        assert_eq!(v["messages"][2]["reasoning"], "greet back");
    }
}
