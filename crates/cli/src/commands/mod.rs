//! One module per subcommand, plus what they share: loading a model and its tokenizer.
pub mod bench;
pub mod inspect;
pub mod perplexity;
mod profile;
pub mod pull;
pub mod run;
pub mod tokenize;

use ishizuki::fetch::resolve_model;
use ishizuki_cpu::CpuBackend;
use ishizuki_models::Model;
use ishizuki_text::Tokenizer;
use std::time::Instant;

/// Any error, printed with its message; subcommands only report.
pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

pub struct Loaded {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub backend: CpuBackend,
}

/// Resolves `-m` (a path or a curated name), loads the model, its tokenizer and a backend.
pub fn load(model_arg: &str, threads: usize) -> CliResult<Loaded> {
    let path = resolve_model(model_arg)?;
    let t0 = Instant::now();
    let mut model = Model::load(&path)?;
    let tokenizer = Tokenizer::from_gguf(model.file())?;
    let backend = CpuBackend::new(threads);
    let packed = model.pack_weights(&backend);
    let c = &model.config;
    eprintln!(
        "loaded {} ({}, {} layers, n_embd {}, vocab {}) in {:.2}s on {} ({:.1} MiB repacked)",
        path.display(),
        c.arch,
        c.n_layer,
        c.n_embd,
        c.n_vocab,
        t0.elapsed().as_secs_f64(),
        ishizuki_core::Backend::name(&backend),
        packed as f64 / (1 << 20) as f64
    );
    Ok(Loaded {
        model,
        tokenizer,
        backend,
    })
}
