use super::device::Device;
use super::{load, CliResult};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct PerplexityArgs {
    /// Model path or curated name.
    #[arg(short = 'm', long)]
    model: String,
    /// Text file to score.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// Window length in tokens.
    #[arg(long, default_value_t = 512)]
    ctx: usize,
    /// Score at most this many windows.
    #[arg(long)]
    chunks: Option<usize>,
    /// Print `{"tokens", "mean_nll", "ppl"}`.
    #[arg(long)]
    json: bool,
    /// Threads (default: all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Where the model runs: auto (the GPU when this build has CUDA and one is there), cpu, cuda.
    #[arg(long, value_enum, default_value_t = Device::Auto, env = "ISHIZUKI_DEVICE")]
    device: Device,
}

pub fn run(a: PerplexityArgs) -> CliResult {
    let text =
        std::fs::read_to_string(&a.file).map_err(|e| format!("{}: {e}", a.file.display()))?;
    let l = load(&a.model, a.threads, a.device, false)?;
    let ids = l.tokenizer.encode(&text, false, false);
    let bos = l.tokenizer.bos_id().filter(|_| l.tokenizer.add_bos());
    let t0 = std::time::Instant::now();
    let p = ishizuki_engine::perplexity(&l.model, &ids, bos, a.ctx, a.chunks, 512)?;
    let secs = t0.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "tokens": p.tokens, "mean_nll": p.mean_nll, "ppl": p.ppl })
        );
    } else {
        println!(
            "ppl {:.4} (mean nll {:.6}) over {} tokens",
            p.ppl, p.mean_nll, p.tokens
        );
    }
    eprintln!(
        "scored {} tokens in {secs:.2}s ({:.1} tok/s)",
        p.tokens,
        p.tokens as f64 / secs
    );
    Ok(())
}
