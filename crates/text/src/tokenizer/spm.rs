//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`), as llama.cpp's `llm_tokenizer_spm`:
//! spaces become U+2581, the text starts as one symbol per character, and the adjacent pair whose
//! concatenation is the highest-scoring vocabulary entry merges first (leftmost on ties).
//! Characters left without a token are written as their `<0xXX>` byte tokens.
use super::merge::{initial_symbols, merge_symbols, Symbol, NONE};

pub(crate) const SPACE_MARK: &str = "\u{2581}";

pub(crate) struct SpmModel {
    /// Token id of `<0xXX>` for each byte, `NONE` where the vocabulary lacks it.
    byte_ids: [u32; 256],
    unk_id: Option<u32>,
}

/// The byte a `<0xXX>` spelling stands for.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

fn utf8_len(first: u8) -> u32 {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

impl SpmModel {
    pub(crate) fn new(byte_ids: [u32; 256], unk_id: Option<u32>) -> Self {
        SpmModel { byte_ids, unk_id }
    }

    /// Appends the ids of `text` (one raw-text fragment) to `out`. `lookup` gives the id and merge
    /// priority (higher merges first) of an exact vocabulary spelling; `space_prefix` prepends one
    /// space first.
    pub(crate) fn encode(
        &self,
        text: &str,
        space_prefix: bool,
        lookup: impl Fn(&[u8]) -> Option<(u32, f64)>,
        out: &mut Vec<u32>,
    ) {
        let mut escaped = String::with_capacity(text.len() + 3);
        if space_prefix {
            escaped.push_str(SPACE_MARK);
        }
        escaped.push_str(&text.replace(' ', SPACE_MARK));
        let bytes = escaped.as_bytes();
        let mut symbols: Vec<Symbol> = Vec::new();
        initial_symbols(bytes, &mut symbols, |rest| {
            let len = utf8_len(rest[0]).min(rest.len() as u32);
            let id = lookup(&rest[..len as usize]).map_or(NONE, |(id, _)| id);
            (len, id)
        });
        let merged = merge_symbols(&mut symbols, |l, r| {
            let span = &bytes[l.start as usize..(r.start + r.len) as usize];
            let (id, priority) = lookup(span)?;
            // Among splits of one token the longer left piece merges first (Hugging Face's order).
            Some((priority, (u64::from(l.len) << 32) | u64::from(r.len), id))
        });
        for s in merged {
            if s.id != NONE {
                out.push(s.id);
                continue;
            }
            for &b in &bytes[s.start as usize..(s.start + s.len) as usize] {
                match (self.byte_ids[b as usize], self.unk_id) {
                    (NONE, Some(unk)) => out.push(unk),
                    (NONE, None) => {}
                    (id, _) => out.push(id),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_token_spellings_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("0x0A"), None);
    }
}
