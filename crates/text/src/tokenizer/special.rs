//! Splitting control and user-defined token text out of the input before the model runs: a byte
//! trie over their spellings, matched leftmost-longest (Hugging Face's added-token matching).
use super::TokenType;
use rustc_hash::FxHashMap;

const NO_TOKEN: u32 = u32::MAX;

/// A piece of the input after special-token splitting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

pub(crate) struct SpecialMatcher {
    /// Edge `(node, byte) -> child`; node 0 is the root.
    edges: FxHashMap<(u32, u8), u32>,
    /// The token a node spells, or `NO_TOKEN`.
    node_token: Vec<u32>,
    node_type: Vec<TokenType>,
}

/// Whether a token of this type is split out of text: user-defined always, the special kinds
/// only when the caller parses special-token text.
fn matchable(ty: TokenType, parse_special: bool) -> bool {
    match ty {
        TokenType::UserDefined => true,
        TokenType::Control | TokenType::Unknown => parse_special,
        _ => false,
    }
}

impl SpecialMatcher {
    pub(crate) fn new<'a>(tokens: impl Iterator<Item = (u32, &'a str, TokenType)>) -> Self {
        let mut matcher = SpecialMatcher {
            edges: FxHashMap::default(),
            node_token: vec![NO_TOKEN],
            node_type: vec![TokenType::Normal],
        };
        for (id, text, ty) in tokens {
            if text.is_empty() || !(matchable(ty, true)) {
                continue;
            }
            let mut node = 0u32;
            for &b in text.as_bytes() {
                let fresh = matcher.node_token.len() as u32;
                node = *matcher.edges.entry((node, b)).or_insert(fresh);
                if node == fresh {
                    matcher.node_token.push(NO_TOKEN);
                    matcher.node_type.push(TokenType::Normal);
                }
            }
            // A later duplicate spelling wins, as in the vocabulary map.
            matcher.node_token[node as usize] = id;
            matcher.node_type[node as usize] = ty;
        }
        matcher
    }

    /// The longest matchable token starting at `bytes[0]`: `(length, id)`.
    fn longest_at(&self, bytes: &[u8], parse_special: bool) -> Option<(usize, u32)> {
        let mut node = 0u32;
        let mut best = None;
        for (i, &b) in bytes.iter().enumerate() {
            match self.edges.get(&(node, b)) {
                Some(&child) => node = child,
                None => break,
            }
            let id = self.node_token[node as usize];
            if id != NO_TOKEN && matchable(self.node_type[node as usize], parse_special) {
                best = Some((i + 1, id));
            }
        }
        best
    }

    /// Cuts `text` into raw-text fragments and matched tokens, in order.
    pub(crate) fn split<'a>(
        &self,
        text: &'a str,
        parse_special: bool,
        out: &mut Vec<Fragment<'a>>,
    ) {
        let bytes = text.as_bytes();
        let mut plain_from = 0;
        let mut at = 0;
        while at < bytes.len() {
            // Token spellings are whole UTF-8 strings, so a match starts and ends on char boundaries.
            match self.longest_at(&bytes[at..], parse_special) {
                Some((len, id)) => {
                    if plain_from < at {
                        out.push(Fragment::Text(&text[plain_from..at]));
                    }
                    out.push(Fragment::Token(id));
                    at += len;
                    plain_from = at;
                }
                None => at += 1,
            }
        }
        if plain_from < bytes.len() {
            out.push(Fragment::Text(&text[plain_from..]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher() -> SpecialMatcher {
        let tokens = [
            (10, "<s>", TokenType::Control),
            (11, "<start>", TokenType::Control),
            (12, "  ", TokenType::UserDefined),
            (13, "   ", TokenType::UserDefined),
            (14, "plain", TokenType::Normal),
        ];
        SpecialMatcher::new(tokens.into_iter())
    }

    #[test]
    fn longest_match_wins_and_control_needs_parse_special() {
        let m = matcher();
        let mut out = Vec::new();
        m.split("a<start>b    c plain", true, &mut out);
        use Fragment::*;
        assert_eq!(
            out,
            [Text("a"), Token(11), Text("b"), Token(13), Text(" c plain")]
        );
        out.clear();
        m.split("<s>x  ", false, &mut out);
        assert_eq!(out, [Text("<s>x"), Token(12)]);
    }
}
