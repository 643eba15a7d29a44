//! Incremental UTF-8 decoding that gives the same chars however the bytes are split.

const REPLACEMENT: char = '\u{FFFD}';

/// Holds the bytes of a char that is not complete yet, so a split inside it changes nothing.
#[derive(Debug, Default)]
pub struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    /// Appends the chars completed by `bytes`; invalid sequences become U+FFFD.
    pub fn decode(&mut self, bytes: &[u8], out: &mut String) {
        let mut buffer = std::mem::take(&mut self.pending);
        buffer.extend_from_slice(bytes);
        let mut rest: &[u8] = &buffer;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    rest = &[];
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        Some(invalid) => {
                            out.push(REPLACEMENT);
                            rest = &after[invalid..];
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
    }

    /// Ends the stream: a char cut short becomes one U+FFFD, as a lossy decode of the whole input would.
    pub fn flush(&mut self, out: &mut String) {
        if !self.pending.is_empty() {
            self.pending.clear();
            out.push(REPLACEMENT);
        }
    }
}
