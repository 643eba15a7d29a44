//! `ishizuki`: demo, run, serve, bench, perplexity, tokenize, inspect, pull, synth. Generated text goes to stdout,
//! everything else to stderr.
mod commands;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ishizuki",
    version,
    about = "Native LLM inference for quantized model packs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Chat with a model in the terminal, replies rendered as markdown.
    Demo(commands::demo::DemoArgs),
    /// Generate text from a prompt.
    Run(commands::run::RunArgs),
    /// Serve the OpenAI and Anthropic HTTP APIs.
    Serve(commands::serve::ServeArgs),
    /// Perplexity of a text file over non-overlapping windows.
    Perplexity(commands::perplexity::PerplexityArgs),
    /// Print the token ids of a text.
    Tokenize(commands::tokenize::TokenizeArgs),
    /// Print a GGUF file's metadata and tensor table.
    Inspect(commands::inspect::InspectArgs),
    /// Prefill and decode speed, like llama-bench.
    Bench(commands::bench::BenchArgs),
    /// Fetch curated models into the cache.
    Pull(commands::pull::PullArgs),
    /// Write a random-weight GGUF of a real model's shape (for measuring speed).
    Synth(commands::synth::SynthArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => commands::demo::run(a),
        Command::Run(a) => commands::run::run(a),
        Command::Serve(a) => commands::serve::run(a),
        Command::Perplexity(a) => commands::perplexity::run(a),
        Command::Tokenize(a) => commands::tokenize::run(a),
        Command::Inspect(a) => commands::inspect::run(a),
        Command::Pull(a) => commands::pull::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::Synth(a) => commands::synth::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
