//! Where the user's text sits in a rendered chat prompt, so that only the template's own markup
//! is parsed for control tokens ([`Tokenizer::encode_with_plain_spans`]).
use crate::tokenizer::Tokenizer;
use std::ops::Range;

#[derive(Debug, thiserror::Error)]
#[error("{what} holds control-token text that the chat template changes before rendering, so it cannot be kept apart from the template's markup")]
pub struct UnplaceableText {
    pub what: String,
}

/// Byte ranges of `texts` in `rendered`: each is searched for in order after the previous one
/// (verbatim, trimmed, or JSON-escaped as `tojson` writes it), then anywhere not yet claimed. A
/// text that cannot be found is harmless unless it spells a control token: then it is an error,
/// since parsing the rendering would turn it into one. `texts` pairs a label with the text.
pub fn plain_spans(
    tokenizer: &Tokenizer,
    rendered: &str,
    texts: &[(String, String)],
) -> Result<Vec<Range<usize>>, UnplaceableText> {
    let controls = tokenizer.control_token_ranges(rendered);
    let mut spans: Vec<Range<usize>> = Vec::new();
    let mut cursor = 0;
    for (label, text) in texts {
        if text.is_empty() {
            continue;
        }
        let escaped = serde_json::to_string(text).unwrap_or_default();
        let escaped = &escaped[1..escaped.len() - 1];
        let forms = [text.as_str(), text.trim(), escaped];
        let found = forms
            .iter()
            .filter(|f| !f.is_empty())
            .find_map(|f| find_free(rendered, f, cursor, &spans, &controls))
            .or_else(|| {
                forms
                    .iter()
                    .filter(|f| !f.is_empty())
                    .find_map(|f| find_free(rendered, f, 0, &spans, &controls))
            });
        match found {
            Some(range) => {
                cursor = range.end;
                spans.push(range);
            }
            None if tokenizer.spells_control_token(text) => {
                return Err(UnplaceableText {
                    what: label.clone(),
                })
            }
            None => {}
        }
    }
    spans.sort_by_key(|r| r.start);
    Ok(spans)
}

/// The first occurrence of `needle` at or after `from` that overlaps no claimed span and cuts
/// through no control token of the markup.
fn find_free(
    haystack: &str,
    needle: &str,
    from: usize,
    claimed: &[Range<usize>],
    controls: &[Range<usize>],
) -> Option<Range<usize>> {
    let mut at = from;
    while at <= haystack.len() {
        let start = at + haystack.get(at..)?.find(needle)?;
        let range = start..start + needle.len();
        let apart = |c: &Range<usize>| range.end <= c.start || range.start >= c.end;
        let inside = |c: &Range<usize>| range.start <= c.start && c.end <= range.end;
        if claimed.iter().all(apart) && controls.iter().all(|c| apart(c) || inside(c)) {
            return Some(range);
        }
        at = start + haystack[start..].chars().next().map_or(1, char::len_utf8);
    }
    None
}
