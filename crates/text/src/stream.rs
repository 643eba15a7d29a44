//! Detokenizing one id at a time without ever emitting half a UTF-8 character: bytes of an
//! incomplete sequence wait for the tokens that complete it (a multi-byte character is often split
//! across byte-fallback or byte-level tokens). The concatenated output equals
//! `Tokenizer::decode` of all ids fed.
use crate::tokenizer::Tokenizer;

#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    /// Bytes received but not yet emitted: at most an incomplete UTF-8 sequence.
    pending: Vec<u8>,
    skip_special: bool,
    /// Drop one leading space from the first bytes emitted (see `new`).
    strip_first_space: bool,
    started: bool,
}

impl StreamDecoder {
    /// A decoder whose output matches `tokenizer.decode(ids, skip_special)`: for a SentencePiece
    /// vocabulary that prefixes a space when encoding, the space the first token carries is
    /// dropped, as llama.cpp's detokenizer does.
    pub fn new(tokenizer: &Tokenizer, skip_special: bool) -> Self {
        StreamDecoder {
            skip_special,
            strip_first_space: tokenizer.add_space_prefix(),
            ..Self::default()
        }
    }

    /// A decoder for tokens that continue earlier text (generated output after a prompt): every
    /// space is kept, since the first token's space separates it from that text.
    pub fn continuation(skip_special: bool) -> Self {
        StreamDecoder {
            skip_special,
            ..Self::default()
        }
    }

    /// Feeds one id; returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        let skipped = self.skip_special && tokenizer.token_type(id).is_some_and(|t| t.is_special());
        if skipped {
            return String::new();
        }
        let mut piece = tokenizer.token_bytes(id);
        if !self.started && !piece.is_empty() {
            self.started = true;
            if self.strip_first_space && piece[0] == b' ' {
                piece = &piece[1..];
            }
        }
        self.pending.extend_from_slice(piece);
        self.take_complete(false)
    }

    /// Flushes what is left; an incomplete sequence becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        self.take_complete(true)
    }

    /// Whether bytes of an incomplete character are waiting.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Emits the longest prefix of `pending` that cannot change with more bytes: valid text, and
    /// U+FFFD for each invalid sequence (as `String::from_utf8_lossy` does), keeping a trailing
    /// incomplete sequence unless `flush`.
    fn take_complete(&mut self, flush: bool) -> String {
        let mut out = String::new();
        let mut rest = &self.pending[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&rest[..valid]).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &rest[valid + bad..];
                        }
                        None if flush => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = &rest[valid..];
                            break;
                        }
                    }
                }
            }
        }
        let kept = rest.len();
        let drained = self.pending.len() - kept;
        self.pending.drain(..drained);
        out
    }
}
