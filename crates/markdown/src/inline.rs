//! Inline spans (emphasis, code, strike, links) decided one char at a time.
//!
//! Plain text is emitted as soon as it arrives. An opening delimiter starts a hold: the
//! span's raw text is kept until its closer lands (then it is emitted styled, its inside
//! rendered again by a nested parser) or until the line ends or the hold grows too big
//! (then the opener is given back as plain text and the held chars are parsed again).

use crate::style::{Style, CODE, LINK, MUTED};
use crate::wrap::StyledChar;

/// Longest span held back waiting for its closer.
const HOLD_LIMIT: usize = 4096;
/// Spans nested deeper than this render their inside as plain styled text.
const MAX_NESTING: usize = 8;

#[derive(Debug)]
pub struct Inline {
    base: Style,
    depth: usize,
    prev: char,
    state: State,
}

#[derive(Debug)]
enum State {
    Text,
    Escape,
    Run {
        delim: char,
        len: usize,
        before: char,
    },
    Span(Span),
    Link(Link),
}

#[derive(Debug, Clone, Copy)]
enum SpanKind {
    Code(usize),
    Emphasis { delim: char, len: usize },
    Strike,
}

impl SpanKind {
    fn delim(self) -> char {
        match self {
            SpanKind::Code(_) => '`',
            SpanKind::Emphasis { delim, .. } => delim,
            SpanKind::Strike => '~',
        }
    }

    fn len(self) -> usize {
        match self {
            SpanKind::Code(len) | SpanKind::Emphasis { len, .. } => len,
            SpanKind::Strike => 2,
        }
    }
}

#[derive(Debug)]
struct Span {
    kind: SpanKind,
    inner: String,
    /// Length of the run of delimiter chars at the end of `inner` (a closer candidate).
    run: usize,
    /// The char before that run, for the "closer is not after a space" rule.
    before_run: char,
}

#[derive(Debug, PartialEq, Eq)]
enum LinkStage {
    Text,
    AfterText,
    Url,
}

#[derive(Debug)]
struct Link {
    text: String,
    url: String,
    depth: usize,
    stage: LinkStage,
}

impl Link {
    /// The chars the link consumed so far, as they appeared.
    fn raw(&self) -> String {
        let mut raw = format!("[{}", self.text);
        if self.stage != LinkStage::Text {
            raw.push(']');
        }
        if self.stage == LinkStage::Url {
            raw.push('(');
            raw.push_str(&self.url);
        }
        raw
    }
}

impl Inline {
    pub fn new(base: Style) -> Inline {
        Inline::nested(base, 0)
    }

    fn nested(base: Style, depth: usize) -> Inline {
        Inline {
            base,
            depth,
            prev: ' ',
            state: State::Text,
        }
    }

    /// Renders complete text (a table cell) in one go.
    pub fn render(text: &str, base: Style) -> Vec<StyledChar> {
        let mut out = Vec::new();
        Inline::render_nested(text, base, 0, &mut out);
        out
    }

    fn render_nested(text: &str, base: Style, depth: usize, out: &mut Vec<StyledChar>) {
        if depth >= MAX_NESTING {
            out.extend(text.chars().map(|c| (c, base)));
            return;
        }
        let mut parser = Inline::nested(base, depth);
        text.chars().for_each(|c| parser.feed(c, out));
        parser.end_line(out);
    }

    pub fn feed(&mut self, c: char, out: &mut Vec<StyledChar>) {
        match std::mem::replace(&mut self.state, State::Text) {
            State::Text => self.feed_text(c, out),
            State::Escape => {
                if !c.is_ascii_punctuation() {
                    self.emit('\\', out);
                }
                self.emit(c, out);
            }
            State::Run { delim, len, before } if c == delim => {
                self.state = State::Run {
                    delim,
                    len: len + 1,
                    before,
                };
            }
            State::Run { delim, len, before } => self.end_run(delim, len, before, Some(c), out),
            State::Span(span) => self.feed_span(span, c, out),
            State::Link(link) => self.feed_link(link, c, out),
        }
    }

    /// The line ended: close what can close, give back every unclosed opener as plain text.
    pub fn end_line(&mut self, out: &mut Vec<StyledChar>) {
        loop {
            match std::mem::replace(&mut self.state, State::Text) {
                State::Text => return,
                State::Escape => self.emit('\\', out),
                State::Run { delim, len, before } => self.end_run(delim, len, before, None, out),
                State::Span(span) if span.run > 0 && closes(&span, None) => {
                    self.close_span(span, out)
                }
                State::Span(span) => self.give_back_span(span, out),
                State::Link(link) => self.give_back_link(link, out),
            }
        }
    }

    fn emit(&mut self, c: char, out: &mut Vec<StyledChar>) {
        out.push((c, self.base));
        self.prev = c;
    }

    fn feed_text(&mut self, c: char, out: &mut Vec<StyledChar>) {
        match c {
            '\\' => self.state = State::Escape,
            '*' | '_' | '~' | '`' => {
                self.state = State::Run {
                    delim: c,
                    len: 1,
                    before: self.prev,
                }
            }
            '[' => {
                self.state = State::Link(Link {
                    text: String::new(),
                    url: String::new(),
                    depth: 1,
                    stage: LinkStage::Text,
                })
            }
            _ => self.emit(c, out),
        }
    }

    /// A run of delimiter chars ended with `next` (None: end of line); decide if it opens a span.
    fn end_run(
        &mut self,
        delim: char,
        len: usize,
        before: char,
        next: Option<char>,
        out: &mut Vec<StyledChar>,
    ) {
        let kind = next.and_then(|next| opening_kind(delim, len, before, next));
        match kind {
            Some(kind) => {
                self.state = State::Span(Span {
                    kind,
                    inner: String::new(),
                    run: 0,
                    before_run: delim,
                })
            }
            None => (0..len).for_each(|_| self.emit(delim, out)),
        }
        if let Some(next) = next {
            self.feed(next, out);
        }
    }

    fn feed_span(&mut self, mut span: Span, c: char, out: &mut Vec<StyledChar>) {
        if c == span.kind.delim() {
            if span.run == 0 {
                span.before_run = span.inner.chars().next_back().unwrap_or(c);
            }
            span.run += 1;
            span.inner.push(c);
        } else if span.run > 0 && closes(&span, Some(c)) {
            self.close_span(span, out);
            self.feed(c, out);
            return;
        } else {
            span.run = 0;
            span.inner.push(c);
        }
        if span.inner.len() > HOLD_LIMIT {
            let opener = span.kind.delim().to_string().repeat(span.kind.len());
            self.emit_plain(&opener, out);
            self.emit_plain(&span.inner, out);
        } else {
            self.state = State::Span(span);
        }
    }

    fn close_span(&mut self, span: Span, out: &mut Vec<StyledChar>) {
        let inner = &span.inner[..span.inner.len() - span.run];
        match span.kind {
            SpanKind::Code(_) => {
                let style = self.base.with_fg(CODE);
                out.extend(inner.chars().map(|c| (c, style)));
            }
            SpanKind::Strike => {
                Inline::render_nested(inner, self.base.strike(), self.depth + 1, out)
            }
            SpanKind::Emphasis { len, .. } => {
                let style = match len {
                    1 => self.base.italic(),
                    2 => self.base.bold(),
                    _ => self.base.bold().italic(),
                };
                Inline::render_nested(inner, style, self.depth + 1, out);
            }
        }
        self.prev = span.kind.delim();
    }

    fn give_back_span(&mut self, span: Span, out: &mut Vec<StyledChar>) {
        (0..span.kind.len()).for_each(|_| self.emit(span.kind.delim(), out));
        span.inner.chars().for_each(|c| self.feed(c, out));
    }

    fn feed_link(&mut self, mut link: Link, c: char, out: &mut Vec<StyledChar>) {
        match link.stage {
            LinkStage::Text => {
                match c {
                    '[' => link.depth += 1,
                    ']' => link.depth -= 1,
                    _ => {}
                }
                if link.depth == 0 {
                    link.stage = LinkStage::AfterText;
                } else {
                    link.text.push(c);
                }
            }
            LinkStage::AfterText if c == '(' => link.stage = LinkStage::Url,
            LinkStage::Url if c == ')' && link.depth == 0 => return self.close_link(link, out),
            LinkStage::Url if !c.is_whitespace() => {
                match c {
                    '(' => link.depth += 1,
                    ')' => link.depth -= 1,
                    _ => {}
                }
                link.url.push(c);
            }
            LinkStage::AfterText | LinkStage::Url => {
                self.give_back_link(link, out);
                return self.feed(c, out);
            }
        }
        if link.text.len() + link.url.len() > HOLD_LIMIT {
            self.emit_plain(&link.raw(), out);
        } else {
            self.state = State::Link(link);
        }
    }

    fn close_link(&mut self, link: Link, out: &mut Vec<StyledChar>) {
        let text_style = self.base.underline().with_fg(LINK);
        Inline::render_nested(&link.text, text_style, self.depth + 1, out);
        if !link.url.is_empty() && link.url != link.text {
            let url_style = Style::fg(MUTED);
            out.push((' ', self.base));
            out.push(('(', url_style));
            out.extend(link.url.chars().map(|c| (c, url_style)));
            out.push((')', url_style));
        }
        self.prev = ')';
    }

    fn give_back_link(&mut self, link: Link, out: &mut Vec<StyledChar>) {
        let raw = link.raw();
        self.emit('[', out);
        raw.chars().skip(1).for_each(|c| self.feed(c, out));
    }

    /// An overlong hold is shown as it came, without looking for spans in it again (keeps it linear).
    fn emit_plain(&mut self, text: &str, out: &mut Vec<StyledChar>) {
        text.chars().for_each(|c| self.emit(c, out));
    }
}

/// Which span a delimiter run opens, given the chars around it (flanking rules, simplified).
fn opening_kind(delim: char, len: usize, before: char, next: char) -> Option<SpanKind> {
    match delim {
        '`' => Some(SpanKind::Code(len)),
        '~' if len == 2 && !next.is_whitespace() => Some(SpanKind::Strike),
        '*' | '_' if len <= 3 && !next.is_whitespace() => {
            // An underscore inside a word (snake_case) is not emphasis.
            let intra_word = delim == '_' && before.is_alphanumeric();
            (!intra_word).then_some(SpanKind::Emphasis { delim, len })
        }
        _ => None,
    }
}

/// Whether the delimiter run at the end of the span closes it, `next` being the char after.
fn closes(span: &Span, next: Option<char>) -> bool {
    let has_content = span.inner.len() > span.run;
    let after_text = !span.before_run.is_whitespace();
    match span.kind {
        SpanKind::Code(len) => span.run == len && has_content,
        SpanKind::Strike => span.run == 2 && has_content && after_text,
        SpanKind::Emphasis { delim, len } => {
            let word_follows = next.is_some_and(char::is_alphanumeric);
            span.run == len && has_content && after_text && !(delim == '_' && word_follows)
        }
    }
}
