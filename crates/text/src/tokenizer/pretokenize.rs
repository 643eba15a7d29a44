//! Pre-tokenizer splits for byte-level BPE, chosen by `tokenizer.ggml.pre`: both the regex
//! matches and the text between them become pieces (Hugging Face's "isolated" splitting).
use super::TokenizerError;
use fancy_regex::Regex;

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The split regex for a `tokenizer.ggml.pre` name, as transformers builds the tokenizer from a
/// GGUF: the llama-3, qwen2, tekken and gpt-4o families get their own split, every other name (`smollm`,
/// `default`, `gpt2`, ...) GPT-2's byte-level split.
fn pattern_for(pre: &str) -> &'static str {
    match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "dbrx"
        | "smaug-bpe" | "midm-2.0" | "lfm2" | "jina-v5-nano" => LLAMA3,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2,
        "tekken" => TEKKEN,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O,
        _ => GPT2,
    }
}

pub(crate) struct PreTokenizer {
    regex: Regex,
}

impl PreTokenizer {
    pub(crate) fn for_name(pre: &str) -> Result<Self, TokenizerError> {
        let pattern = pattern_for(pre);
        let regex =
            Regex::new(pattern).map_err(|e| TokenizerError::Regex(format!("{pattern}: {e}")))?;
        Ok(PreTokenizer { regex })
    }

    /// Appends the pieces of `text` to `out`, in order; together they spell `text` exactly.
    pub(crate) fn split<'a>(&self, text: &'a str, out: &mut Vec<&'a str>) {
        split_isolated(&self.regex, text, out);
    }
}

fn split_isolated<'a>(regex: &Regex, text: &'a str, out: &mut Vec<&'a str>) {
    let mut last = 0;
    for found in regex.find_iter(text) {
        // A backtracking limit hit leaves the rest of the fragment unsplit rather than lost.
        let Ok(m) = found else { break };
        if m.start() > last {
            out.push(&text[last..m.start()]);
        }
        if m.end() > m.start() {
            out.push(m.as_str());
        }
        last = m.end();
    }
    if last < text.len() {
        out.push(&text[last..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(pre: &str, text: &str) -> Vec<String> {
        let p = PreTokenizer::for_name(pre).unwrap();
        let mut out = Vec::new();
        p.split(text, &mut out);
        out.into_iter().map(str::to_owned).collect()
    }

    #[test]
    fn gpt2_keeps_one_space_before_words_and_trailing_runs_whole() {
        assert_eq!(
            pieces("gpt2", "Hello  world's  "),
            ["Hello", " ", " world", "'s", "  "]
        );
    }

    #[test]
    fn smollm_uses_gpt2_split_with_spaces_before_digits() {
        assert_eq!(pieces("smollm", "x   123"), ["x", "  ", " 123"]);
    }

    #[test]
    fn llama3_groups_digits_by_three_and_attaches_newlines_to_punctuation() {
        assert_eq!(
            pieces("llama-bpe", "12345 a.\n\nb"),
            ["123", "45", " a", ".\n\n", "b"]
        );
    }

    #[test]
    fn qwen2_splits_single_digits_and_folds_case_in_contractions() {
        assert_eq!(pieces("qwen2", "I'M 42"), ["I", "'M", " ", "4", "2"]);
    }
}
