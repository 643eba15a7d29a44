use super::device::Device;
use super::{load_engine, CliResult, DraftArgs, EngineOptions};
use ishizuki_engine::{DraftUsage, Event, Message, Prompt, Request, SamplerConfig, ToolChoice};
use std::io::Write;
use std::sync::atomic::AtomicBool;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Model path or curated name (smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long, default_value = "smollm2-135m")]
    model: String,
    /// The prompt (with --chat: the user message).
    #[arg(short = 'p', long)]
    prompt: String,
    /// Tokens to generate; -1 = until an end token or the context is full.
    #[arg(
        short = 'n',
        long,
        default_value_t = 256,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    /// Sampling temperature; 0 = greedy.
    #[arg(long = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95, allow_negative_numbers = true)]
    top_p: f32,
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    /// Recent tokens the penalties look at.
    #[arg(long, default_value_t = 64)]
    repeat_last_n: usize,
    /// Random seed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Wrap the prompt as a user message with the model's chat template.
    #[arg(long)]
    chat: bool,
    /// System message for --chat.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Print one JSON object at the end instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Context length (default: the model's, at most 4096).
    #[arg(long)]
    ctx: Option<usize>,
    /// Threads (default: all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Where the model runs: auto (the GPU when this build has CUDA and one is there), cpu, cuda.
    #[arg(long, value_enum, default_value_t = Device::Auto, env = "ISHIZUKI_DEVICE")]
    device: Device,
    #[command(flatten)]
    draft: DraftArgs,
}

impl RunArgs {
    fn sampler(&self) -> CliResult<SamplerConfig> {
        for (name, v) in [
            ("--temp", self.temperature),
            ("--top-p", self.top_p),
            ("--min-p", self.min_p),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{name} must be a finite number >= 0, got {v}").into());
            }
        }
        Ok(SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            penalty_last_n: self.repeat_last_n,
            seed: self
                .seed
                .unwrap_or_else(ishizuki_engine::sampler::seed_from_time),
        })
    }
}

/// The request: the prompt as plain text (BOS per the model), or as a chat turn.
fn request(a: &RunArgs, sampler: SamplerConfig) -> Request {
    let prompt = if a.chat {
        let mut messages = Vec::new();
        if let Some(s) = &a.system {
            messages.push(Message::new("system", s.as_str()));
        }
        messages.push(Message::new("user", a.prompt.as_str()));
        Prompt::Chat {
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            enable_thinking: None,
            template_kwargs: None,
        }
    } else {
        Prompt::Text(a.prompt.clone())
    };
    let mut r = Request::new(prompt);
    r.sampler = sampler;
    // fitted to the context below: `run` generates until it is full rather than refusing
    r.max_tokens = None;
    r.parse_tool_calls = false;
    r
}

pub fn run(a: RunArgs) -> CliResult {
    let sampler = a.sampler()?;
    let options = EngineOptions {
        ctx: a.ctx,
        cache_slots: Some(1),
        alias: None,
        draft: a.draft.clone(),
        quiet: false,
        device: a.device,
    };
    let mut engine = load_engine(&a.model, a.threads, &options)?;
    let mut prepared = engine.text.prepare(request(&a, sampler))?;
    if let Ok(n) = usize::try_from(a.n_predict) {
        prepared.max_tokens = prepared.max_tokens.min(n);
    }
    let mut stdout = std::io::stdout().lock();
    let (json, mut text, mut done, mut failure) = (a.json, String::new(), None, None);
    let mut sink = |event: Event| match event {
        Event::Text { text: t, .. } | Event::Reasoning(t) => {
            text.push_str(&t);
            // A closed stdout (e.g. `| head`) ends generation quietly.
            json || write!(stdout, "{t}").and_then(|_| stdout.flush()).is_ok()
        }
        Event::Done(d) => {
            done = Some(d);
            true
        }
        Event::Failed { message, .. } => {
            failure = Some(message);
            true
        }
        _ => true,
    };
    engine.run(&prepared, &AtomicBool::new(false), 0.0, &mut sink);
    if let Some(message) = failure {
        return Err(message.into());
    }
    let d = done.ok_or("generation ended without a result")?;
    let rate = |n: usize, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let prefill_tps = rate(d.usage.prompt_tokens, d.timings.prefill_secs);
    let decode_tps = rate(d.tokens.len().saturating_sub(1), d.timings.decode_secs);
    let draft = d
        .usage
        .draft
        .map(|u| draft_json(&u, d.tokens.len(), engine.draft_model_off()));
    if json {
        let out = serde_json::json!({
            "text": text,
            "tokens": d.tokens,
            "n_prompt": d.usage.prompt_tokens,
            "n_gen": d.tokens.len(),
            "prefill_tps": prefill_tps,
            "decode_tps": decode_tps,
            "draft": draft,
        });
        println!("{out}");
    } else {
        println!();
    }
    let drafting = match &draft {
        Some(v) => format!(
            ", drafting ({}) kept {}/{} tokens, {:.2} tokens per step",
            v["source"].as_str().unwrap_or(""),
            v["accepted_tokens"],
            v["drafted_tokens"],
            v["tokens_per_step"].as_f64().unwrap_or(1.0)
        ),
        None => String::new(),
    };
    eprintln!(
        "prompt {} tokens at {prefill_tps:.1} tok/s, generated {} tokens at {decode_tps:.1} tok/s{drafting}, stop: {:?}",
        d.usage.prompt_tokens,
        d.tokens.len(),
        d.finish
    );
    Ok(())
}

/// Drafting's numbers for `--json`: source, tokens drafted and kept, the rate, tokens per step.
fn draft_json(u: &DraftUsage, generated: usize, model_off: Option<&str>) -> serde_json::Value {
    let mut v = u.json(generated);
    v["model_turned_off"] = u.model_turned_off.into();
    v["model_off_reason"] = model_off.into();
    v
}
