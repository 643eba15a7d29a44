//! Line classification from the first few chars of a line.

/// Longest line start held while it could still be a marker (a rule of dashes, indentation).
const PREFIX_HOLD_LIMIT: usize = 256;

/// An opening code fence: its char (` or ~), run length and indentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceOpen {
    pub fence_char: char,
    pub len: usize,
    pub indent: usize,
}

/// What a line is, decided from its start; `rest` is the held text after the marker.
#[derive(Debug, PartialEq, Eq)]
pub enum Marker {
    NeedMore,
    Blank,
    Rule,
    Quote { rest: String },
    Fence { open: FenceOpen, rest: String },
    TableRow,
    Text(TextLine),
}

/// A line of text (heading, list item or paragraph): the kind of its marker, then its text.
#[derive(Debug, PartialEq, Eq)]
pub struct TextLine {
    pub kind: TextKind,
    pub indent: usize,
    pub rest: String,
}

#[derive(Debug, PartialEq, Eq)]
pub enum TextKind {
    Heading(usize),
    Bullet,
    Numbered(String),
    Paragraph,
}

fn text(kind: TextKind, indent: usize, rest: &[char]) -> Marker {
    Marker::Text(TextLine {
        kind,
        indent,
        rest: collect(rest),
    })
}

/// Which block markers the current context allows (none of fences and tables inside quotes).
#[derive(Debug, Clone, Copy)]
pub struct Allowed {
    pub fences: bool,
    pub tables: bool,
}

/// Classifies the line start `held`; `eol` says the line ended there.
pub fn classify(held: &str, eol: bool, allowed: Allowed) -> Marker {
    let chars: Vec<char> = held.chars().collect();
    let marker = classify_chars(&chars, eol, allowed);
    if marker == Marker::NeedMore && chars.len() > PREFIX_HOLD_LIMIT {
        let (indent, start) = indentation(&chars);
        return text(TextKind::Paragraph, indent, &chars[start..]);
    }
    marker
}

fn indentation(chars: &[char]) -> (usize, usize) {
    let mut indent = 0;
    let mut index = 0;
    while let Some(&c) = chars.get(index) {
        match c {
            ' ' => indent += 1,
            '\t' => indent += 4,
            _ => break,
        }
        index += 1;
    }
    (indent, index)
}

fn collect(chars: &[char]) -> String {
    chars.iter().collect()
}

fn classify_chars(chars: &[char], eol: bool, allowed: Allowed) -> Marker {
    let (indent, start) = indentation(chars);
    let body = &chars[start..];
    let paragraph = || text(TextKind::Paragraph, indent, body);
    let Some(&first) = body.first() else {
        return if eol { Marker::Blank } else { Marker::NeedMore };
    };
    let marker = match first {
        '#' => heading(body, eol),
        '-' | '*' | '+' | '_' => bullet_or_rule(body, eol, indent),
        '0'..='9' => numbered(body, eol, indent),
        '>' => quote(body, eol),
        '`' | '~' if allowed.fences => fence(body, eol, indent),
        '|' if allowed.tables => Some(Marker::TableRow),
        _ => None,
    };
    marker.unwrap_or_else(paragraph)
}

/// `None` means "not this marker": the line is a paragraph.
fn heading(body: &[char], eol: bool) -> Option<Marker> {
    let level = body.iter().take_while(|&&c| c == '#').count();
    match body.get(level) {
        None if !eol && level <= 6 => Some(Marker::NeedMore),
        Some(' ') if level <= 6 => Some(text(TextKind::Heading(level), 0, &body[level + 1..])),
        _ => None,
    }
}

fn bullet_or_rule(body: &[char], eol: bool, indent: usize) -> Option<Marker> {
    let first = body[0];
    if first != '_' && body.get(1) == Some(&' ') {
        return Some(text(TextKind::Bullet, indent, &body[2..]));
    }
    if first == '+' {
        return (body.len() == 1 && !eol).then_some(Marker::NeedMore);
    }
    let run = body.iter().take_while(|&&c| c == first).count();
    let only_spaces_after = body[run..].iter().all(|&c| c == ' ');
    if !only_spaces_after {
        return None;
    }
    match (eol, run >= 3) {
        (false, _) => Some(Marker::NeedMore),
        (true, true) => Some(Marker::Rule),
        (true, false) => None,
    }
}

fn numbered(body: &[char], eol: bool, indent: usize) -> Option<Marker> {
    let digits = body.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits > 9 {
        return None;
    }
    let delimiter = body.get(digits);
    let space = body.get(digits + 1);
    match (delimiter, space) {
        (None, _) | (Some('.' | ')'), None) if !eol => Some(Marker::NeedMore),
        (Some('.' | ')'), Some(' ')) => {
            let number = TextKind::Numbered(collect(&body[..=digits]));
            Some(text(number, indent, &body[digits + 2..]))
        }
        _ => None,
    }
}

fn quote(body: &[char], eol: bool) -> Option<Marker> {
    match body.get(1) {
        None if !eol => Some(Marker::NeedMore),
        Some(' ') => Some(Marker::Quote {
            rest: collect(&body[2..]),
        }),
        _ => Some(Marker::Quote {
            rest: collect(&body[1..]),
        }),
    }
}

fn fence(body: &[char], eol: bool, indent: usize) -> Option<Marker> {
    let fence_char = body[0];
    let len = body.iter().take_while(|&&c| c == fence_char).count();
    if len >= 3 {
        return Some(Marker::Fence {
            open: FenceOpen {
                fence_char,
                len,
                indent,
            },
            rest: collect(&body[len..]),
        });
    }
    (len == body.len() && !eol).then_some(Marker::NeedMore)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Allowed = Allowed {
        fences: true,
        tables: true,
    };

    fn kind(held: &str) -> Option<TextKind> {
        match classify(held, false, ALL) {
            Marker::Text(line) => Some(line.kind),
            _ => None,
        }
    }

    #[test]
    fn markers_are_recognised_from_their_first_chars() {
        assert_eq!(classify("#", false, ALL), Marker::NeedMore);
        assert_eq!(kind("## x"), Some(TextKind::Heading(2)));
        assert_eq!(kind("#x"), Some(TextKind::Paragraph));
        assert_eq!(kind("  - a"), Some(TextKind::Bullet));
        assert_eq!(classify("--", false, ALL), Marker::NeedMore);
        assert_eq!(classify("---", true, ALL), Marker::Rule);
        assert_eq!(kind("**b"), Some(TextKind::Paragraph));
        assert_eq!(kind("12. x"), Some(TextKind::Numbered("12.".to_string())));
        assert!(matches!(
            classify("```py", false, ALL),
            Marker::Fence { .. }
        ));
        assert_eq!(kind("`x"), Some(TextKind::Paragraph));
        assert_eq!(classify("|", false, ALL), Marker::TableRow);
        assert_eq!(classify("   ", true, ALL), Marker::Blank);
    }
}
