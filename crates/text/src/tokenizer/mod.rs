//! Tokenizers built from GGUF metadata: byte-level BPE (`gpt2`) and SentencePiece BPE (`llama`),
//! matching the Hugging Face tokenizer that transformers builds from the same file (and
//! llama.cpp's `llama-tokenize`).
mod bpe;
mod gguf;
mod merge;
mod pretokenize;
mod special;
mod spm;
mod vocab;

use bpe::BpeModel;
use rustc_hash::FxHashMap;
use special::{Fragment, SpecialMatcher};
use spm::SpmModel;
use vocab::{Arena, VocabTable};

/// Which algorithm a vocabulary uses (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenizerModel {
    /// `gpt2`: byte-level BPE with merge ranks.
    #[default]
    Bpe,
    /// `llama`: SentencePiece BPE merged by token score, with `<0xXX>` byte fallback.
    Spm,
}

/// Variants of SentencePiece handling that the file format does not record, picked by
/// architecture the way transformers does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpmFlavor {
    /// Pairs merge by the score of the token they form.
    #[default]
    Default,
    /// Gemma: pairs merge by the position of the token they form (earlier first), since Gemma's
    /// scores do not follow its merge order; runs of spaces, stored with real spaces, are
    /// ordinary vocabulary entries spelled with U+2581 rather than tokens matched in raw text.
    Gemma,
}

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenType {
    #[default]
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    /// The GGUF code: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; anything
    /// else (0 is "undefined") reads as normal.
    pub fn from_code(code: i64) -> TokenType {
        match code {
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Normal,
        }
    }

    /// Control and unknown tokens: dropped by `decode(.., skip_special = true)`.
    pub fn is_special(self) -> bool {
        matches!(self, TokenType::Control | TokenType::Unknown)
    }
}

/// Everything a tokenizer is built from, as plain vectors (what the GGUF keys hold).
#[derive(Clone, Debug, Default)]
pub struct TokenizerSpec {
    pub model: TokenizerModel,
    /// `tokenizer.ggml.pre` (byte-level BPE only); empty means GPT-2's split.
    pub pre: String,
    /// Spellings as stored: byte-level characters for BPE, U+2581 for spaces in SentencePiece.
    pub tokens: Vec<String>,
    /// One per token, or empty for all normal.
    pub token_types: Vec<TokenType>,
    /// One per token (SentencePiece merge priority), or empty for all zero.
    pub scores: Vec<f32>,
    /// `"left right"` spellings, best first (BPE).
    pub merges: Vec<String>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub eot_id: Option<u32>,
    pub eom_id: Option<u32>,
    /// `None` takes llama.cpp's default: SentencePiece adds BOS, BPE does not.
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    /// `None` takes llama.cpp's default: true for SentencePiece.
    pub add_space_prefix: Option<bool>,
    pub spm_flavor: SpmFlavor,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer metadata: missing {0}")]
    Missing(&'static str),
    #[error("tokenizer metadata: {key}: {rule}")]
    Invalid { key: &'static str, rule: String },
    #[error("unsupported tokenizer model {0:?} (supported: gpt2, llama)")]
    UnsupportedModel(String),
    #[error("pre-tokenizer regex {0}")]
    Regex(String),
}

impl From<TokenizerError> for ishizuki_core::Error {
    fn from(e: TokenizerError) -> Self {
        ishizuki_core::Error::Format(e.to_string())
    }
}

enum Model {
    Bpe(BpeModel),
    Spm(SpmModel),
}

/// End-of-generation spellings llama.cpp recognises besides the EOS id.
const EOG_SPELLINGS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

pub struct Tokenizer {
    model: Model,
    kind: TokenizerModel,
    /// Spellings as looked up (Gemma's space runs respelled with U+2581), and their index.
    spellings: Arena,
    vocab: VocabTable,
    /// What each token writes when decoded.
    pieces: Arena,
    types: Vec<TokenType>,
    /// SentencePiece merge priority of each token (higher merges first).
    spm_priority: Vec<f64>,
    specials: SpecialMatcher,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
}

fn check_len<T>(v: &[T], n: usize, key: &'static str) -> Result<(), TokenizerError> {
    if v.is_empty() || v.len() == n {
        return Ok(());
    }
    Err(TokenizerError::Invalid {
        key,
        rule: format!("{} entries for a vocabulary of {n}", v.len()),
    })
}

fn check_id(id: Option<u32>, n: usize, key: &'static str) -> Result<Option<u32>, TokenizerError> {
    match id {
        Some(i) if i as usize >= n => Err(TokenizerError::Invalid {
            key,
            rule: format!("id {i} is outside the vocabulary of {n}"),
        }),
        _ => Ok(id),
    }
}

impl Tokenizer {
    pub fn from_gguf(file: &ishizuki_formats::GgufFile) -> Result<Tokenizer, TokenizerError> {
        Self::from_spec(gguf::spec_from_gguf(file)?)
    }

    pub fn from_spec(spec: TokenizerSpec) -> Result<Tokenizer, TokenizerError> {
        let n = spec.tokens.len();
        check_sizes(&spec)?;
        let ids = SpecialIds::check(&spec)?;
        let types = if spec.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else {
            spec.token_types
        };
        let gemma = spec.model == TokenizerModel::Spm && spec.spm_flavor == SpmFlavor::Gemma;
        let spm_priority: Vec<f64> = match (spec.model, gemma) {
            (TokenizerModel::Bpe, _) => Vec::new(),
            (TokenizerModel::Spm, true) => (0..n).map(|i| -(i as f64)).collect(),
            (TokenizerModel::Spm, false) if spec.scores.is_empty() => vec![0.0; n],
            (TokenizerModel::Spm, false) => spec.scores.iter().map(|&s| f64::from(s)).collect(),
        };
        let spellings = lookup_spellings(&spec.tokens, gemma);
        let vocab = VocabTable::new(&spellings);
        let lookup = |s: &str| vocab.get(&spellings, s.as_bytes());
        let model = match spec.model {
            TokenizerModel::Bpe => {
                Model::Bpe(BpeModel::new(&spec.pre, &spec.merges, lookup, ids.unk)?)
            }
            TokenizerModel::Spm => {
                Model::Spm(SpmModel::new(byte_token_ids(&spec.tokens, &types), ids.unk))
            }
        };
        let specials = SpecialMatcher::new(
            spec.tokens
                .iter()
                .enumerate()
                .filter(|(_, t)| !(gemma && is_space_run(t)))
                .map(|(i, t)| (i as u32, t.as_str(), types[i])),
        );
        let mut eog: Vec<u32> = [ids.eos, ids.eot, ids.eom].into_iter().flatten().collect();
        eog.extend(EOG_SPELLINGS.iter().filter_map(|s| lookup(s)));
        eog.sort_unstable();
        eog.dedup();
        let is_spm = spec.model == TokenizerModel::Spm;
        Ok(Tokenizer {
            model,
            kind: spec.model,
            pieces: decoded_pieces(spec.model, &spec.tokens, &types),
            spellings,
            vocab,
            types,
            spm_priority,
            specials,
            bos_id: ids.bos,
            eos_id: ids.eos,
            eog,
            add_bos: spec.add_bos.unwrap_or(is_spm),
            add_eos: spec.add_eos.unwrap_or(false),
            add_space_prefix: is_spm && spec.add_space_prefix.unwrap_or(true),
        })
    }
}

fn check_sizes(spec: &TokenizerSpec) -> Result<(), TokenizerError> {
    let n = spec.tokens.len();
    if n == 0 {
        return Err(TokenizerError::Missing("tokenizer.ggml.tokens (empty)"));
    }
    if n >= u32::MAX as usize {
        return Err(TokenizerError::Invalid {
            key: "tokenizer.ggml.tokens",
            rule: format!("{n} entries do not fit u32 ids"),
        });
    }
    check_len(&spec.token_types, n, "tokenizer.ggml.token_type")?;
    check_len(&spec.scores, n, "tokenizer.ggml.scores")
}

struct SpecialIds {
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
}

impl SpecialIds {
    fn check(spec: &TokenizerSpec) -> Result<Self, TokenizerError> {
        let n = spec.tokens.len();
        Ok(SpecialIds {
            bos: check_id(spec.bos_id, n, "tokenizer.ggml.bos_token_id")?,
            eos: check_id(spec.eos_id, n, "tokenizer.ggml.eos_token_id")?,
            unk: check_id(spec.unk_id, n, "tokenizer.ggml.unknown_token_id")?,
            eot: check_id(spec.eot_id, n, "tokenizer.ggml.eot_token_id")?,
            eom: check_id(spec.eom_id, n, "tokenizer.ggml.eom_token_id")?,
        })
    }
}

/// The spellings tokens are looked up by: as stored, except Gemma's space runs, which
/// transformers respells with U+2581 so that they merge like the rest of the vocabulary.
fn lookup_spellings(tokens: &[String], gemma: bool) -> Arena {
    let mut spellings = Arena::with_capacity(tokens.len(), tokens.iter().map(String::len).sum());
    for t in tokens {
        if gemma && is_space_run(t) {
            for _ in t.chars() {
                spellings.extend(spm::SPACE_MARK.as_bytes());
            }
            spellings.finish_entry();
        } else {
            spellings.push(t.as_bytes());
        }
    }
    spellings
}

/// Gemma's whitespace-run tokens: all whitespace with at least one space.
fn is_space_run(t: &str) -> bool {
    t.contains(' ') && t.chars().all(char::is_whitespace)
}

/// The bytes each token writes when decoded: byte-level spellings turned back into bytes (BPE),
/// U+2581 back into a space and `<0xXX>` into its byte (SentencePiece); control and user-defined
/// tokens write their spelling as is.
fn decoded_pieces(model: TokenizerModel, tokens: &[String], types: &[TokenType]) -> Arena {
    let mut pieces = Arena::with_capacity(tokens.len(), tokens.iter().map(String::len).sum());
    let char_to_byte: FxHashMap<char, u8> = bpe::byte_to_char_table()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect();
    let mut scratch = Vec::new();
    for (t, &ty) in tokens.iter().zip(types) {
        let verbatim = matches!(
            ty,
            TokenType::Control | TokenType::Unknown | TokenType::UserDefined
        );
        match model {
            _ if verbatim => pieces.push(t.as_bytes()),
            TokenizerModel::Bpe => {
                scratch.clear();
                bpe::decode_byte_level(t, &char_to_byte, &mut scratch);
                pieces.push(&scratch);
            }
            TokenizerModel::Spm => match spm::parse_byte_token(t) {
                Some(b) if ty == TokenType::Byte => pieces.push(&[b]),
                _ => {
                    for (i, part) in t.split(spm::SPACE_MARK).enumerate() {
                        if i > 0 {
                            pieces.extend(b" ");
                        }
                        pieces.extend(part.as_bytes());
                    }
                    pieces.finish_entry();
                }
            },
        }
    }
    pieces
}

/// The `<0xXX>` token for each byte (the last of equal spellings), `u32::MAX` where missing.
fn byte_token_ids(tokens: &[String], types: &[TokenType]) -> [u32; 256] {
    let mut ids = [u32::MAX; 256];
    for (id, (t, &ty)) in tokens.iter().zip(types).enumerate() {
        if matches!(ty, TokenType::Byte | TokenType::Normal | TokenType::Unused) {
            if let Some(b) = spm::parse_byte_token(t) {
                ids[b as usize] = id as u32;
            }
        }
    }
    ids
}

/// A piece of a rendered prompt: a control token of the template's markup, or a byte range to encode.
enum Piece {
    Token(u32),
    Text(std::ops::Range<usize>),
}

impl Tokenizer {
    /// Token ids for `text`. `add_special` adds BOS/EOS where this vocabulary asks for them;
    /// `parse_special` turns the spelling of a control token (`<|im_start|>`) into that token.
    /// User-defined tokens are always matched whole.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos_id);
        }
        let mut fragments = Vec::new();
        self.specials.split(text, parse_special, &mut fragments);
        // Metaspace's "first" scheme: a space goes before the start of the input only, unless
        // the input already starts with one.
        let mut at_start = true;
        for fragment in fragments {
            match fragment {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(s) => {
                    let prefix = self.add_space_prefix && at_start && !s.starts_with(' ');
                    self.encode_plain(s, prefix, &mut out);
                }
            }
            at_start = false;
        }
        if add_special && self.add_eos {
            out.extend(self.eos_id);
        }
        out
    }

    /// Token ids for a rendered prompt whose `plain` byte ranges (sorted, disjoint, on char
    /// boundaries) hold user text: control-token spelling is parsed only outside them, so message
    /// text can never inject a control token. Text on both sides of a boundary is encoded as one
    /// piece, giving the ids `encode(text, false, true)` gives when the user text holds no
    /// control-token spelling. No BOS/EOS is added.
    pub fn encode_with_plain_spans(
        &self,
        text: &str,
        plain: &[std::ops::Range<usize>],
    ) -> Vec<u32> {
        let mut pieces: Vec<Piece> = Vec::new();
        let push_text = |pieces: &mut Vec<Piece>, range: std::ops::Range<usize>| {
            if range.is_empty() {
                return;
            }
            match pieces.last_mut() {
                Some(Piece::Text(last)) if last.end == range.start => last.end = range.end,
                _ => pieces.push(Piece::Text(range)),
            }
        };
        let mut at = 0;
        let markup = plain
            .iter()
            .map(|r| (r.start.min(text.len()), r.end.min(text.len())))
            .chain([(text.len(), text.len())]);
        for (start, end) in markup {
            let start = start.max(at);
            let mut fragments = Vec::new();
            self.specials.split(&text[at..start], true, &mut fragments);
            for fragment in fragments {
                match fragment {
                    Fragment::Token(id) => pieces.push(Piece::Token(id)),
                    Fragment::Text(s) => {
                        let offset = s.as_ptr() as usize - text.as_ptr() as usize;
                        push_text(&mut pieces, offset..offset + s.len());
                    }
                }
            }
            push_text(&mut pieces, start..end.max(start));
            at = end.max(start);
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        let mut at_start = true;
        for piece in pieces {
            match piece {
                Piece::Token(id) => out.push(id),
                Piece::Text(range) => {
                    // user-defined tokens inside user text still match whole, as in `encode`
                    let mut fragments = Vec::new();
                    self.specials.split(&text[range], false, &mut fragments);
                    for fragment in fragments {
                        match fragment {
                            Fragment::Token(id) => out.push(id),
                            Fragment::Text(s) => {
                                let prefix =
                                    self.add_space_prefix && at_start && !s.starts_with(' ');
                                self.encode_plain(s, prefix, &mut out);
                            }
                        }
                        at_start = false;
                    }
                }
            }
            at_start = false;
        }
        out
    }

    /// Byte ranges of control-token spellings in `text`, as `encode(text, _, true)` matches them.
    pub fn control_token_ranges(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let mut fragments = Vec::new();
        self.specials.split(text, true, &mut fragments);
        let mut at = 0;
        let mut ranges = Vec::new();
        for f in fragments {
            match f {
                Fragment::Text(s) => at = s.as_ptr() as usize - text.as_ptr() as usize + s.len(),
                Fragment::Token(id) => {
                    let len = self.token_text(id).map_or(0, str::len);
                    if self
                        .token_type(id)
                        .is_some_and(|t| t != TokenType::UserDefined)
                    {
                        ranges.push(at..at + len);
                    }
                    at += len;
                }
            }
        }
        ranges
    }

    /// Whether `text` contains the spelling of a control (or unknown) token.
    pub fn spells_control_token(&self, text: &str) -> bool {
        let mut fragments = Vec::new();
        self.specials.split(text, true, &mut fragments);
        fragments.iter().any(|f| match f {
            Fragment::Token(id) => self
                .token_type(*id)
                .is_some_and(|t| t != TokenType::UserDefined),
            Fragment::Text(_) => false,
        })
    }

    fn encode_plain(&self, text: &str, space_prefix: bool, out: &mut Vec<u32>) {
        match &self.model {
            Model::Bpe(m) => m.encode(text, out),
            Model::Spm(m) => {
                let lookup = |s: &[u8]| {
                    let id = self.vocab.get(&self.spellings, s)?;
                    Some((id, self.spm_priority[id as usize]))
                };
                m.encode(text, space_prefix, lookup, out)
            }
        }
    }

    /// The text of `ids`. `skip_special` drops control and unknown tokens. Invalid UTF-8 becomes
    /// U+FFFD; ids outside the vocabulary are ignored. A SentencePiece vocabulary that prefixes a
    /// space when encoding drops one leading space here.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if skip_special && self.token_type(id).is_some_and(TokenType::is_special) {
                continue;
            }
            bytes.extend_from_slice(self.token_bytes(id));
        }
        let text = if self.add_space_prefix && bytes.first() == Some(&b' ') {
            &bytes[1..]
        } else {
            &bytes[..]
        };
        String::from_utf8_lossy(text).into_owned()
    }

    /// The bytes token `id` writes when decoded (empty for an id outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).unwrap_or(&[])
    }

    /// The vocabulary spelling (`Ġthe`, `▁the`, `<|im_start|>`; Gemma's space runs as U+2581).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        std::str::from_utf8(self.spellings.get(id as usize)?).ok()
    }

    /// The id of a stored spelling.
    pub fn token_to_id(&self, spelling: &str) -> Option<u32> {
        self.vocab.get(&self.spellings, spelling.as_bytes())
    }

    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    pub fn model(&self) -> TokenizerModel {
        self.kind
    }

    pub fn n_vocab(&self) -> usize {
        self.types.len()
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos && self.bos_id.is_some()
    }

    pub fn add_eos(&self) -> bool {
        self.add_eos && self.eos_id.is_some()
    }

    /// Whether encoding prefixes a space (and decoding drops one): SentencePiece only.
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// End of generation: EOS, EOT/EOM where given, and the end-of-turn spellings llama.cpp
    /// recognises (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>`, `<|endoftext|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }
}
