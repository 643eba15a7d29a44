//! One module per subcommand, plus what they share: loading a model and its tokenizer.
pub mod bench;
pub mod demo;
pub mod device;
pub mod inspect;
pub mod perplexity;
mod profile;
pub mod pull;
pub mod run;
pub mod serve;
pub mod synth;
pub mod tokenize;

use device::{Chosen, Device};
use ishizuki::fetch::resolve_model;
use ishizuki_core::Backend;
use ishizuki_engine::draft::{check_vocab, DraftModel};
use ishizuki_engine::{Engine, TextModel};
use ishizuki_models::Model;
use ishizuki_text::Tokenizer;
use std::sync::Arc;
use std::time::Instant;

/// Any error, printed with its message; subcommands only report.
pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

pub struct Loaded {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub chosen: Chosen,
}

/// Resolves `-m` (a path or a curated name), loads the model, its tokenizer and the backend
/// for `device`; `quiet` leaves out the line saying what was loaded.
pub fn load(model_arg: &str, threads: usize, device: Device, quiet: bool) -> CliResult<Loaded> {
    let path = resolve_model(model_arg)?;
    let t0 = Instant::now();
    let chosen = device::choose(device, threads)?;
    let model = Model::load(&path, chosen.backend())?;
    let tokenizer = Tokenizer::from_gguf(model.file())?;
    let packed = model.backend_bytes();
    let c = &model.config;
    if !quiet {
        eprintln!(
            "loaded {} ({}, {} layers, n_embd {}, vocab {}) in {:.2}s on {} ({:.1} MiB repacked)",
            path.display(),
            c.arch,
            c.n_layer,
            c.n_embd,
            c.n_vocab,
            t0.elapsed().as_secs_f64(),
            model.backend().name(),
            packed as f64 / (1 << 20) as f64
        );
    }
    Ok(Loaded {
        model,
        tokenizer,
        chosen,
    })
}

/// How an engine is set up: the context, the prefix-cache slots, the name clients see and
/// drafting.
pub struct EngineOptions {
    pub ctx: Option<usize>,
    pub cache_slots: Option<usize>,
    pub alias: Option<String>,
    pub draft: DraftArgs,
    /// No line about what was loaded (the demo shows it in its header).
    pub quiet: bool,
    pub device: Device,
}

/// Drafting switches shared by `run` and `serve`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DraftArgs {
    /// Turn drafting off (it never changes the output; it only makes decoding faster).
    #[arg(long)]
    pub no_draft: bool,
    /// Draft with this smaller model of the same vocabulary (path or curated name) instead of
    /// prompt lookup; it turns itself off where it does not pay.
    #[arg(long, conflicts_with = "no_draft")]
    pub draft_model: Option<String>,
}

/// Loads the draft model onto the target's backend, refusing a different vocabulary.
fn load_draft(
    arg: &str,
    target: &Tokenizer,
    backend: Arc<dyn Backend>,
    n_ctx: usize,
) -> CliResult<DraftModel> {
    let path = resolve_model(arg)?;
    let model = Model::load(&path, backend)?;
    let tokenizer = Tokenizer::from_gguf(model.file())?;
    check_vocab(target, &tokenizer).map_err(|e| format!("--draft-model {arg}: {e}"))?;
    eprintln!(
        "draft model {} ({}, {} layers)",
        path.display(),
        model.config.arch,
        model.config.n_layer
    );
    Ok(DraftModel::new(model, n_ctx)?)
}

/// Loads `model_arg` into an engine (model, tokenizer, chat template, backend).
pub fn load_engine(model_arg: &str, threads: usize, o: &EngineOptions) -> CliResult<Engine> {
    let l = load(model_arg, threads, o.device, o.quiet)?;
    let n_ctx = o
        .ctx
        .unwrap_or_else(|| l.model.config.n_ctx_train.min(4096))
        .max(1);
    let name = o
        .alias
        .clone()
        .unwrap_or_else(|| default_model_name(model_arg));
    let source = l
        .model
        .file()
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let text = TextModel::new(name, l.tokenizer, source.as_deref(), n_ctx)?;
    let slots = o.cache_slots.unwrap_or_else(|| {
        // a quarter of the free memory (the GPU's where the caches live there), as
        // llama-server's default keeps a few slots
        let free = l.chosen.device_free_memory().or_else(available_memory);
        let budget = free.unwrap_or(4 << 30) / 4;
        ishizuki_engine::prefix_cache::slots_for_budget(&l.model, n_ctx, budget)
    });
    let backend = l.model.backend().clone();
    let draft = match &o.draft.draft_model {
        Some(arg) => Some(load_draft(arg, &text.tokenizer, backend.clone(), n_ctx)?),
        None => None,
    };
    let mut engine = Engine::new(Arc::new(text), l.model, slots).with_drafting(!o.draft.no_draft);
    if let Some(d) = draft {
        engine = engine.with_draft_model(d);
    }
    Ok(engine)
}

/// A curated name as typed, else the file name without `.gguf`.
fn default_model_name(model_arg: &str) -> String {
    let path = std::path::Path::new(model_arg);
    match path.file_name().and_then(|f| f.to_str()) {
        Some(f) if path.exists() => f.strip_suffix(".gguf").unwrap_or(f).to_string(),
        _ => model_arg.to_string(),
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn available_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
