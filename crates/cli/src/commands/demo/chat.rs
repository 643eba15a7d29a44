//! The chat loop: read a line, run a command or ask the model, print the reply and its rates.
use super::editor::{self, ChatEditor};
use super::reply::rates_line;
use super::session::{Session, Totals, TurnNote};
use super::slash::{self, Slash};
use super::term::{self, human_bytes, QuietKeys};
use super::ThinkLevel;
use crate::commands::CliResult;
use ishizuki_engine::prefix_cache::slot_bytes;
use ishizuki_engine::Engine;
use ishizuki_markdown::{ColorMode, Renderer};
use rustyline::error::ReadlineError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const PROMPT: &str = "❯ ";

pub struct Chat {
    engine: Engine,
    session: Session,
    renderer: Renderer,
    color: ColorMode,
    editor: ChatEditor,
    history: Option<PathBuf>,
    cancel: Arc<AtomicBool>,
}

enum Flow {
    Continue,
    Quit,
}

impl Chat {
    pub fn new(engine: Engine, session: Session, color: ColorMode) -> CliResult<Chat> {
        let mut editor = editor::editor()?;
        let history = editor::history_path();
        if let Some(path) = &history {
            let _ = editor.load_history(path);
        }
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        // Ctrl-C while a reply streams stops it; at the prompt the editor reads it as a key
        ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))?;
        Ok(Chat {
            engine,
            session,
            renderer: Renderer::new(color, term::width()),
            color,
            editor,
            history,
            cancel,
        })
    }

    /// A muted line (the rates, notes): dim where there is colour.
    fn note(&self, text: &str) {
        match self.color {
            ColorMode::None => println!("{text}"),
            _ => println!("\x1b[2m{text}\x1b[0m"),
        }
    }

    fn error(&self, text: &str) {
        match self.color {
            ColorMode::None => println!("error: {text}"),
            _ => println!("\x1b[31merror:\x1b[0m {text}"),
        }
    }

    pub fn warn_if_cannot_think(&self) {
        if self.session.think.is_some() && !self.engine.text.thinks() {
            self.note("(this model's chat template has no thinking switch; --think is ignored)");
        }
    }

    pub fn run(&mut self) -> CliResult {
        loop {
            let line = match self.editor.readline(PROMPT) {
                Ok(line) => line,
                Err(ReadlineError::Interrupted) => {
                    self.note("(Ctrl-D or /quit leaves)");
                    continue;
                }
                Err(ReadlineError::Eof) => break,
                Err(e) => return Err(e.into()),
            };
            let text = editor::message_text(&line);
            if text.trim().is_empty() {
                continue;
            }
            let _ = self.editor.add_history_entry(line.as_str());
            let flow = match slash::parse(&text) {
                Some(Ok(command)) => self.command(command),
                Some(Err(message)) => {
                    self.error(&message);
                    Flow::Continue
                }
                None => {
                    self.turn(text);
                    Flow::Continue
                }
            };
            if let Flow::Quit = flow {
                break;
            }
        }
        if let Some(path) = &self.history {
            editor::save_history(&mut self.editor, path);
        }
        Ok(())
    }

    fn turn(&mut self, text: String) {
        self.cancel.store(false, Ordering::Relaxed);
        let quiet = QuietKeys::new();
        let mut stdout = std::io::stdout().lock();
        let asked = self.session.ask(
            &mut self.engine,
            text,
            &mut self.renderer,
            &mut stdout,
            &self.cancel,
        );
        drop(stdout);
        drop(quiet);
        match asked {
            Ok((done, notes)) => {
                for TurnNote::Trimmed(n) in notes {
                    self.note(&format!(
                        "(dropped the {n} oldest exchange(s) to fit the {}-token context)",
                        self.engine.text.n_ctx
                    ));
                }
                self.note(&rates_line(&done));
            }
            Err(message) => {
                self.error(&format!("{message} (the conversation goes on without it)"));
            }
        }
        println!();
    }

    fn command(&mut self, command: Slash) -> Flow {
        match command {
            Slash::New => {
                self.session.clear();
                self.note("(new conversation)");
            }
            Slash::System(text) => {
                self.session.system = (!text.is_empty()).then_some(text);
                self.note("(system message set; it applies from the next reply)");
            }
            Slash::Think(level) => {
                self.session.think = Some(level);
                self.note(&format!("(thinking {})", level.name()));
                self.warn_if_cannot_think();
            }
            Slash::Stats => println!("{}", self.stats()),
            Slash::Save(file) => self.save(&file),
            Slash::Help => print!("{}", slash::help()),
            Slash::Quit => return Flow::Quit,
        }
        Flow::Continue
    }

    fn save(&self, file: &str) {
        let json = self.session.to_json(&self.engine.text.name);
        let text = serde_json::to_string_pretty(&json).unwrap_or_default();
        match std::fs::write(file, text + "\n") {
            Ok(()) => self.note(&format!(
                "(saved {} messages to {file})",
                self.session.messages.len()
            )),
            Err(e) => self.error(&format!("cannot write {file}: {e}")),
        }
    }

    /// `/stats`: the cache, memory, the last reply's rates, the session's totals, drafting.
    fn stats(&self) -> String {
        let cache = self.engine.cache();
        let n_ctx = self.engine.text.n_ctx;
        let kv = slot_bytes(self.engine.model(), n_ctx) * cache.slots_in_use();
        let memory = term::resident_bytes().map_or("unknown".into(), human_bytes);
        let last = self
            .session
            .last
            .as_ref()
            .map_or("no reply yet".into(), rates_line);
        let think = self
            .session
            .think
            .map_or("template default", ThinkLevel::name);
        [
            format!(
                "cache     {} of {n_ctx} tokens warm · KV {} · {} messages",
                cache.warm_tokens(),
                human_bytes(kv),
                self.session.messages.len()
            ),
            format!("memory    {memory} in use"),
            format!("last      {last}"),
            format!("session   {}", totals_line(&self.session.totals)),
            format!(
                "drafting  {}",
                drafting_line(&self.session.totals, &self.engine)
            ),
            format!(
                "sampling  temperature {} · thinking {think}",
                self.session.sampler.temperature
            ),
        ]
        .join("\n")
    }
}

fn totals_line(t: &Totals) -> String {
    let fresh = t.prompt_tokens - t.cached_tokens;
    let rate = |n: usize, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let replies = if t.replies == 1 { "reply" } else { "replies" };
    format!(
        "{} {replies} · {} prompt tokens ({} cached), the rest at {:.1} tok/s · {} generated at \
         {:.1} tok/s",
        t.replies,
        t.prompt_tokens,
        t.cached_tokens,
        rate(fresh, t.prefill_secs),
        t.generated_tokens,
        rate(t.generated_tokens.saturating_sub(t.replies), t.decode_secs)
    )
}

fn drafting_line(t: &Totals, engine: &Engine) -> String {
    let mut line = if engine.drafting() {
        let rate = if t.drafted_tokens > 0 {
            100.0 * t.accepted_tokens as f64 / t.drafted_tokens as f64
        } else {
            0.0
        };
        format!(
            "on · {}/{} drafted tokens kept ({rate:.0}%)",
            t.accepted_tokens, t.drafted_tokens
        )
    } else {
        "off".to_string()
    };
    if let Some(reason) = engine.draft_model_off() {
        line.push_str(&format!(" · draft model off: {reason}"));
    }
    line
}
