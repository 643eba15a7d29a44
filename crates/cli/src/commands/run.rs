use super::{load, CliResult, Loaded};
use ishizuki_engine::{GenerateParams, SamplerConfig, Session};
use ishizuki_text::{ChatMessage, ChatTemplate, StreamDecoder, Tokenizer};
use std::io::Write;
use std::sync::atomic::AtomicBool;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Model path or curated name (smollm2-135m, gemma3-270m).
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

/// The prompt ids: plain text with BOS per the model, or the chat template's rendering.
fn prompt_ids(a: &RunArgs, l: &Loaded) -> CliResult<Vec<u32>> {
    let tok = &l.tokenizer;
    if !a.chat {
        return Ok(tok.encode(&a.prompt, true, true));
    }
    let source = l
        .model
        .file()
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .ok_or("this model has no chat template (tokenizer.chat_template); run without --chat")?;
    let piece = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
    let template = ChatTemplate::new(source, &piece(tok.bos_id()), &piece(tok.eos_id()))?;
    let mut messages = Vec::new();
    if let Some(s) = &a.system {
        messages.push(ChatMessage::new("system", s.as_str()));
    }
    messages.push(ChatMessage::new("user", a.prompt.as_str()));
    let rendered = template.render_chat(&messages, true)?;
    let mut ids = tok.encode(&rendered, false, true);
    // The template may already start with BOS; add it only where the model wants one and it is absent.
    if let Some(bos) = tok.bos_id().filter(|_| tok.add_bos()) {
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
    Ok(ids)
}

pub fn run(a: RunArgs) -> CliResult {
    let sampler = a.sampler()?;
    let l = load(&a.model, a.threads)?;
    let prompt = prompt_ids(&a, &l)?;
    let n_ctx = a
        .ctx
        .unwrap_or_else(|| l.model.config.n_ctx_train.min(4096));
    let params = GenerateParams {
        max_tokens: usize::try_from(a.n_predict).ok(),
        sampler,
        prefill_chunk: 512,
    };
    let mut session = Session::new(&l.model, &l.backend, n_ctx);
    let tok: &Tokenizer = &l.tokenizer;
    let mut stream = StreamDecoder::continuation(true);
    let mut stdout = std::io::stdout().lock();
    let json = a.json;
    let mut on_token = |id: u32| {
        if !json {
            let text = stream.push(tok, id);
            // A closed stdout (e.g. `| head`) ends generation quietly.
            return write!(stdout, "{text}")
                .and_then(|_| stdout.flush())
                .is_ok();
        }
        true
    };
    let g = session.generate(
        &prompt,
        &params,
        &|id| tok.is_eog(id),
        &AtomicBool::new(false),
        &mut on_token,
    )?;
    let generated: Vec<u32> = g
        .tokens
        .iter()
        .copied()
        .filter(|&id| !tok.is_eog(id))
        .collect();
    if json {
        let out = serde_json::json!({
            "text": tok.decode(&generated, true),
            "tokens": g.tokens,
            "n_prompt": g.n_prompt,
            "n_gen": g.tokens.len(),
            "prefill_tps": g.prefill_tps(),
            "decode_tps": g.decode_tps(),
        });
        println!("{out}");
    } else {
        println!("{}", stream.finish());
    }
    eprintln!(
        "prompt {} tokens at {:.1} tok/s, generated {} tokens at {:.1} tok/s, stop: {:?}",
        g.n_prompt,
        g.prefill_tps(),
        g.tokens.len(),
        g.decode_tps(),
        g.stop
    );
    Ok(())
}
