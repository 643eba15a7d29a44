//! `ishizuki synth`: a random-weight GGUF of a real architecture's shape, quantized by our own
//! quantizers with llama.cpp's recipe, for measuring speed at sizes we have no weights for.
use super::CliResult;
use ishizuki_models::synth::{preset, synth, Recipe, SynthOptions, PRESETS};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct SynthArgs {
    /// Architecture (checked against the preset's).
    #[arg(long, default_value = "llama")]
    arch: String,
    /// The shape: llama3-8b, llama3-1b or llama-tiny.
    #[arg(long)]
    preset: String,
    /// Quantization recipe: q4_k_m, q8_0 or f16.
    #[arg(long = "type", default_value = "q4_k_m")]
    recipe: String,
    /// Output GGUF file.
    #[arg(short = 'o', long)]
    output: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only the first N layers of the shape.
    #[arg(long)]
    layers: Option<usize>,
    /// Quantizing threads (default: all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
}

pub fn run(a: SynthArgs) -> CliResult {
    let names = || {
        PRESETS
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let p = preset(&a.preset)
        .ok_or_else(|| format!("unknown preset {:?} (presets: {})", a.preset, names()))?;
    if p.arch != a.arch {
        return Err(format!("preset {} is a {} model, not {}", p.name, p.arch, a.arch).into());
    }
    let recipe = Recipe::parse(&a.recipe)
        .ok_or_else(|| format!("unknown type {:?} (q4_k_m, q8_0, f16)", a.recipe))?;
    let opts = SynthOptions {
        recipe,
        seed: a.seed,
        threads: a.threads,
        n_layer: a.layers,
    };
    let t0 = Instant::now();
    let report = synth(p, &opts, &a.output)?;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    eprintln!(
        "wrote {} ({} {recipe:?}, {:.2}e9 parameters, {:.2} GiB) in {:.1} s",
        a.output.display(),
        p.name,
        report.n_params as f64 / 1e9,
        gib(report.file_bytes),
        t0.elapsed().as_secs_f64()
    );
    for (ty, count, bytes) in &report.types {
        eprintln!("  {ty:<6} {count:>4} tensors {:>8.3} GiB", gib(*bytes));
    }
    Ok(())
}
