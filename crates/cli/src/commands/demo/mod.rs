//! `ishizuki demo`: a terminal chat on one model. Replies render as markdown while they stream,
//! the KV cache stays warm across turns (each turn prefills only what changed), and the rates
//! of every reply are printed under it.
mod chat;
mod editor;
mod header;
mod reply;
mod session;
mod slash;
mod term;

use super::device::Device;
use super::{load_engine, CliResult, DraftArgs, EngineOptions};
use chat::Chat;
use ishizuki_engine::SamplerConfig;
use ishizuki_markdown::ColorMode;
use session::Session;
use std::io::IsTerminal;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ThinkLevel {
    Off,
    Low,
    Medium,
    High,
}

impl ThinkLevel {
    pub fn name(self) -> &'static str {
        match self {
            ThinkLevel::Off => "off",
            ThinkLevel::Low => "low",
            ThinkLevel::Medium => "medium",
            ThinkLevel::High => "high",
        }
    }

    pub fn parse(s: &str) -> Result<ThinkLevel, String> {
        [Self::Off, Self::Low, Self::Medium, Self::High]
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("thinking is off, low, medium or high, not {s:?}"))
    }
}

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Model path or curated name (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m, gemma3-270m).
    #[arg(short = 'm', long, default_value = "qwen2.5-coder-0.5b")]
    model: String,
    /// Where the model runs.
    #[arg(long, value_enum, default_value_t = Device::Auto, env = "ISHIZUKI_DEVICE")]
    device: Device,
    /// Sampling temperature; 0 = greedy.
    #[arg(long = "temp", default_value_t = 0.7)]
    temperature: f32,
    /// Random seed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// System message.
    #[arg(long)]
    system: Option<String>,
    /// Reasoning for models whose template can think (default: the template's).
    #[arg(long, value_enum)]
    think: Option<ThinkLevel>,
    /// Context length (default: the model's, at most 4096).
    #[arg(long)]
    ctx: Option<usize>,
    /// Threads (default: all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    draft: DraftArgs,
}

impl DemoArgs {
    fn sampler(&self) -> CliResult<SamplerConfig> {
        let t = self.temperature;
        if !t.is_finite() || t < 0.0 {
            return Err(format!("--temp must be a finite number >= 0, got {t}").into());
        }
        Ok(SamplerConfig {
            temperature: t,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: self
                .seed
                .unwrap_or_else(ishizuki_engine::sampler::seed_from_time),
            ..SamplerConfig::greedy()
        })
    }
}

pub fn run(a: DemoArgs) -> CliResult {
    let sampler = a.sampler()?;
    let path = ishizuki::fetch::resolve_model(&a.model)?;
    let name = model_name(&a.model, &path);
    eprintln!("loading {} ...", path.display());
    let started = Instant::now();
    let options = EngineOptions {
        ctx: a.ctx,
        cache_slots: Some(1),
        alias: Some(name.clone()),
        draft: a.draft.clone(),
        quiet: true,
        device: a.device,
    };
    let path_arg = path.to_string_lossy();
    let engine = load_engine(&path_arg, a.threads, &options)?;
    let stdout_tty = std::io::stdout().is_terminal();
    let color = ColorMode::detect(stdout_tty);
    let info = header::HeaderInfo {
        model_name: name,
        arch: engine.model().config.arch.clone(),
        quant: engine.model().file().quantization(),
        file_bytes: std::fs::metadata(&path).map_or(0, |m| m.len() as usize),
        backend: engine.backend().name(),
        n_ctx: engine.text.n_ctx,
        drafting: !a.draft.no_draft,
        resident_bytes: term::resident_bytes(),
        load_secs: started.elapsed().as_secs_f64(),
    };
    // the bonsai is for a terminal, not a log
    let width = if stdout_tty { term::width() } else { 0 };
    for line in header::header_lines(&info, color != ColorMode::None, width) {
        println!("{line}");
    }
    println!();
    let mut chat = Chat::new(engine, Session::new(a.system, a.think, sampler), color)?;
    chat.warn_if_cannot_think();
    chat.run()
}

/// The curated name as typed, else the file name without `.gguf`.
fn model_name(arg: &str, path: &std::path::Path) -> String {
    if !std::path::Path::new(arg).exists() {
        return arg.to_string();
    }
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
    let file = file.unwrap_or_else(|| arg.to_string());
    file.strip_suffix(".gguf").unwrap_or(&file).to_string()
}
