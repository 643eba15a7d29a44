use super::CliResult;
use ishizuki::fetch::resolve_model;
use ishizuki_formats::GgufFile;
use ishizuki_text::Tokenizer;
use std::io::Read;

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// Model path or curated name.
    #[arg(short = 'm', long)]
    model: String,
    /// Text to tokenize (default: standard input).
    #[arg(short = 'p', long)]
    prompt: Option<String>,
    /// Do not add BOS/EOS even where the model adds them.
    #[arg(long)]
    no_bos: bool,
    /// Print `{"ids": [...]}`.
    #[arg(long)]
    json: bool,
}

pub fn run(a: TokenizeArgs) -> CliResult {
    let file = GgufFile::open(resolve_model(&a.model)?)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let text = match a.prompt {
        Some(p) => p,
        None => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
    };
    let ids = tokenizer.encode(&text, !a.no_bos, true);
    if a.json {
        println!("{}", serde_json::json!({ "ids": ids }));
    } else {
        for id in ids {
            let piece = String::from_utf8_lossy(tokenizer.token_bytes(id));
            println!("{id:>8} {piece:?}");
        }
    }
    Ok(())
}
