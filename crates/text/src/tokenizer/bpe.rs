//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): GPT-2's byte-to-character spelling, merge
//! ranks from `tokenizer.ggml.merges`, and the pre-tokenizer split chosen by `tokenizer.ggml.pre`.
use super::merge::{initial_symbols, merge_symbols, Symbol, NONE};
use super::pretokenize::PreTokenizer;
use super::TokenizerError;
use rustc_hash::FxHashMap;

/// GPT-2's `bytes_to_unicode`: printable Latin-1 bytes spell themselves, the other 68 bytes take
/// the code points from U+0100 on, in byte order.
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next_extra = 256u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let code = if printable {
            b as u32
        } else {
            next_extra += 1;
            next_extra - 1
        };
        *slot = char::from_u32(code).unwrap_or('\u{fffd}');
    }
    table
}

/// The raw bytes a byte-level token spelling stands for. A character outside GPT-2's alphabet
/// (seen in some converted vocabularies) stands for its own UTF-8 bytes.
pub(crate) fn decode_byte_level(text: &str, char_to_byte: &FxHashMap<char, u8>, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_to_byte.get(&c) {
            Some(&b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

pub(crate) struct BpeModel {
    pre: PreTokenizer,
    /// Token id of each single byte's spelling, `NONE` where the vocabulary lacks it.
    byte_ids: [u32; 256],
    /// `(left id, right id) -> (rank, merged id)`.
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    unk_id: Option<u32>,
}

impl BpeModel {
    pub(crate) fn new(
        pre: &str,
        merges: &[String],
        lookup: impl Fn(&str) -> Option<u32>,
        unk_id: Option<u32>,
    ) -> Result<Self, TokenizerError> {
        let table = byte_to_char_table();
        let mut byte_ids = [NONE; 256];
        let mut buf = [0u8; 4];
        for (b, c) in table.iter().enumerate() {
            byte_ids[b] = lookup(c.encode_utf8(&mut buf)).unwrap_or(NONE);
        }
        let mut ranks = FxHashMap::default();
        ranks.reserve(merges.len());
        let mut joined = String::new();
        for (rank, line) in merges.iter().enumerate() {
            // The left side may itself start with a space, so the separator is searched after
            // its first character.
            let first_len = line.chars().next().map_or(0, char::len_utf8);
            let Some(cut) = line[first_len..].find(' ').map(|i| i + first_len) else {
                return Err(TokenizerError::Invalid {
                    key: "tokenizer.ggml.merges",
                    rule: format!("entry {rank} ({line:?}) is not two tokens separated by a space"),
                });
            };
            let (left, right) = (&line[..cut], &line[cut + 1..]);
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            if let (Some(l), Some(r), Some(m)) = (lookup(left), lookup(right), lookup(&joined)) {
                ranks.insert((l, r), (rank as u32, m));
            }
        }
        Ok(BpeModel {
            pre: PreTokenizer::for_name(pre)?,
            byte_ids,
            merges: ranks,
            unk_id,
        })
    }

    /// Appends the ids of `text` (no special-token handling) to `out`.
    pub(crate) fn encode(&self, text: &str, out: &mut Vec<u32>) {
        let mut pieces = Vec::new();
        self.pre.split(text, &mut pieces);
        let mut symbols: Vec<Symbol> = Vec::new();
        for piece in pieces {
            initial_symbols(piece.as_bytes(), &mut symbols, |rest| {
                (1, self.byte_ids[rest[0] as usize])
            });
            let merged = merge_symbols(&mut symbols, |l, r| {
                let &(rank, id) = self.merges.get(&(l.id, r.id))?;
                Some((-(rank as f64), 0, id))
            });
            for s in merged {
                match (s.id, self.unk_id) {
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
    fn byte_table_matches_gpt2_for_space_newline_and_latin1() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[0xAD], 'Ń');
        assert_eq!(t[0xFF], 'ÿ');
        let distinct: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }
}
