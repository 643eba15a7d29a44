//! The reply's line-level state machine: classify each line from its first chars, then
//! route its chars to inline rendering, a code box or a held table.

use crate::classify::{classify, Allowed, FenceOpen, Marker, TextKind, TextLine};
use crate::code::CodeBlock;
use crate::inline::Inline;
use crate::style::{Painter, Style, ACCENT, MUTED};
use crate::table::{draw_table, HeldRows};
use crate::wrap::{cells_width, Sink, StyledChar, Wrapper};

/// A code line longer than this is drawn in pieces rather than held whole.
const CODE_LINE_LIMIT: usize = 4096;
/// Deeper quotes are drawn with this many gutters, so prefixes stay narrower than the line.
const MAX_QUOTE_GUTTERS: usize = 8;
/// Longest fence info string kept (the language tag is its first word).
const FENCE_INFO_LIMIT: usize = 256;

enum Line {
    /// Classifying: `held` is the line so far, `quotes` the `>` markers already consumed.
    Start {
        held: String,
        quotes: usize,
    },
    /// Prefix drawn; chars go through inline spans and wrapping.
    Text,
    FenceInfo {
        held: String,
        open: FenceOpen,
    },
    TableRow {
        held: String,
    },
    Code {
        held: String,
    },
}

pub struct Reply {
    width: usize,
    next_width: usize,
    line: Line,
    fence: Option<CodeBlock>,
    table: Option<HeldRows>,
    /// Set while lines starting with `|` are shown as text (a table given up on).
    pipes_as_text: bool,
    wrapper: Wrapper,
    inline: Inline,
    pieces: Vec<StyledChar>,
}

impl Reply {
    pub fn new(width: usize) -> Reply {
        Reply {
            width,
            next_width: width,
            line: Line::Start {
                held: String::new(),
                quotes: 0,
            },
            fence: None,
            table: None,
            pipes_as_text: false,
            wrapper: Wrapper::new(width),
            inline: Inline::new(Style::PLAIN),
            pieces: Vec::new(),
        }
    }

    /// Takes effect at the next line start, so a line is never drawn at two widths.
    pub fn set_width(&mut self, width: usize) {
        self.next_width = width;
    }

    pub fn feed(&mut self, c: char, painter: &mut Painter) {
        let eol = c == '\n';
        match std::mem::replace(&mut self.line, Line::Text) {
            Line::Start { mut held, quotes } => {
                if !eol {
                    held.push(c);
                }
                let allowed = Allowed {
                    fences: quotes == 0,
                    tables: quotes == 0 && !self.pipes_as_text,
                };
                let marker = classify(&held, eol, allowed);
                self.apply(marker, held, quotes, eol, painter);
            }
            Line::Text => self.feed_text(c, painter),
            Line::FenceInfo { held, open } if eol => {
                let language = held.split_whitespace().next().unwrap_or_default();
                self.fence = Some(CodeBlock::open(language, open, self.width, painter));
                self.begin_line();
            }
            Line::FenceInfo { mut held, open } => {
                if held.len() < FENCE_INFO_LIMIT {
                    held.push(c);
                }
                self.line = Line::FenceInfo { held, open };
            }
            Line::TableRow { held } if eol => self.end_table_row(held, painter),
            Line::TableRow { mut held } => {
                held.push(c);
                self.line = Line::TableRow { held };
            }
            Line::Code { held } => self.feed_code(held, c, painter),
        }
    }

    /// Thinking is about to interrupt the reply: show the word held for wrapping now.
    pub fn flush_word(&mut self, painter: &mut Painter) {
        if matches!(self.line, Line::Text) {
            self.wrapper.end_line(painter);
        }
    }

    /// End of the reply: complete the open line, close an open code box, draw a held table.
    pub fn finish(&mut self, painter: &mut Painter) {
        let mid_line = match &self.line {
            Line::Start { held, quotes } => !held.is_empty() || *quotes > 0,
            Line::Text | Line::FenceInfo { .. } | Line::TableRow { .. } => true,
            Line::Code { held } => !held.is_empty(),
        };
        if mid_line {
            self.feed('\n', painter);
        }
        if let Some(fence) = self.fence.take() {
            fence.close(painter);
        }
        self.flush_table(painter);
        *self = Reply::new(self.next_width);
    }

    fn begin_line(&mut self) {
        self.width = self.next_width;
        self.wrapper.set_width(self.width);
        self.line = match self.fence {
            Some(_) => Line::Code {
                held: String::new(),
            },
            None => Line::Start {
                held: String::new(),
                quotes: 0,
            },
        };
    }

    fn refeed(&mut self, text: &str, eol: bool, painter: &mut Painter) {
        text.chars().for_each(|c| self.feed(c, painter));
        if eol {
            self.feed('\n', painter);
        }
    }

    fn apply(
        &mut self,
        marker: Marker,
        held: String,
        quotes: usize,
        eol: bool,
        painter: &mut Painter,
    ) {
        let decided = marker != Marker::NeedMore;
        if decided && self.table.is_some() && marker != Marker::TableRow {
            // The table ended: draw it, then classify this line again from its start.
            self.flush_table(painter);
            return self.refeed(&held, eol, painter);
        }
        if decided && !held.trim_start().starts_with('|') {
            self.pipes_as_text = false;
        }
        match marker {
            Marker::NeedMore => self.line = Line::Start { held, quotes },
            Marker::Quote { rest } => {
                self.line = Line::Start {
                    held: String::new(),
                    quotes: quotes + 1,
                };
                self.refeed(&rest, eol, painter);
            }
            Marker::Blank => {
                painter.put_cells(&gutters(quotes, false));
                self.end_line(painter);
            }
            Marker::Rule => {
                let gutter = gutters(quotes, true);
                let rule = "─".repeat(self.width.saturating_sub(cells_width(&gutter)));
                painter.put_cells(&gutter);
                painter.put_str(&rule, Style::fg(MUTED));
                self.end_line(painter);
            }
            Marker::Text(line) => self.start_text_line(line, quotes, eol, painter),
            Marker::Fence { open, rest } => {
                self.line = Line::FenceInfo {
                    held: String::new(),
                    open,
                };
                self.refeed(&rest, eol, painter);
            }
            Marker::TableRow => {
                self.table.get_or_insert_with(HeldRows::default);
                self.line = Line::TableRow {
                    held: String::new(),
                };
                self.refeed(&held, eol, painter);
            }
        }
    }

    fn start_text_line(&mut self, line: TextLine, quotes: usize, eol: bool, painter: &mut Painter) {
        let indent = line.indent.min(self.width / 2);
        let (marker, style) = match line.kind {
            TextKind::Heading(level) => (Vec::new(), Style::heading(level)),
            TextKind::Bullet => (vec![('•', Style::fg(ACCENT))], Style::PLAIN),
            TextKind::Numbered(number) => {
                let marker = number.chars().map(|c| (c, Style::fg(ACCENT))).collect();
                (marker, Style::PLAIN)
            }
            TextKind::Paragraph => (Vec::new(), Style::PLAIN),
        };
        self.start_text(quotes, indent, marker, style, painter);
        self.refeed(&line.rest, eol, painter);
    }

    /// Draws the line's prefix now and sets up wrapping with a hanging indent under it.
    fn start_text(
        &mut self,
        quotes: usize,
        indent: usize,
        marker: Vec<StyledChar>,
        style: Style,
        painter: &mut Painter,
    ) {
        let mut first = gutters(quotes, true);
        let mut continuation = first.clone();
        first.extend(std::iter::repeat_n((' ', Style::PLAIN), indent));
        if !marker.is_empty() {
            first.extend(marker);
            first.push((' ', Style::PLAIN));
        }
        let hanging = cells_width(&first) - cells_width(&continuation);
        continuation.extend(std::iter::repeat_n((' ', Style::PLAIN), hanging));
        painter.put_cells(&first);
        self.wrapper.start_line(cells_width(&first), continuation);
        self.inline = Inline::new(style);
        self.line = Line::Text;
    }

    fn feed_text(&mut self, c: char, painter: &mut Painter) {
        if c == '\n' {
            self.inline.end_line(&mut self.pieces);
        } else {
            let c = if c == '\t' { ' ' } else { c };
            self.inline.feed(c, &mut self.pieces);
        }
        for (c, style) in self.pieces.drain(..) {
            self.wrapper.push(c, style, painter);
        }
        if c == '\n' {
            self.wrapper.end_line(painter);
            self.end_line(painter);
        }
    }

    fn end_line(&mut self, painter: &mut Painter) {
        painter.newline();
        self.begin_line();
    }

    fn feed_code(&mut self, mut held: String, c: char, painter: &mut Painter) {
        let Some(fence) = self.fence.as_mut() else {
            return self.begin_line();
        };
        if c != '\n' {
            held.push(c);
            if held.len() < CODE_LINE_LIMIT {
                self.line = Line::Code { held };
                return;
            }
            fence.draw_line(&held, painter);
            self.line = Line::Code {
                held: String::new(),
            };
            return;
        }
        if fence.is_closing(&held) {
            fence.close(painter);
            self.fence = None;
        } else {
            fence.draw_line(&held, painter);
        }
        self.begin_line();
    }

    fn end_table_row(&mut self, held: String, painter: &mut Painter) {
        let table = self.table.get_or_insert_with(HeldRows::default);
        table.push(held);
        if table.is_full() {
            self.flush_table_as_text(painter);
            self.pipes_as_text = true;
        }
        self.begin_line();
    }

    fn flush_table(&mut self, painter: &mut Painter) {
        let drawn = match &self.table {
            Some(table) => draw_table(&table.rows, self.width, painter),
            None => return,
        };
        if drawn {
            self.table = None;
        } else {
            self.flush_table_as_text(painter);
        }
        self.begin_line();
    }

    /// Replays held rows through the state machine with pipes meaning plain text.
    fn flush_table_as_text(&mut self, painter: &mut Painter) {
        let Some(table) = self.table.take() else {
            return;
        };
        self.pipes_as_text = true;
        self.begin_line();
        for row in &table.rows {
            self.refeed(row, true, painter);
        }
        self.pipes_as_text = false;
    }
}

/// One `│` per quote level; `trailing_space` is off for an otherwise empty line.
fn gutters(quotes: usize, trailing_space: bool) -> Vec<StyledChar> {
    let quotes = quotes.min(MAX_QUOTE_GUTTERS);
    let mut cells = Vec::new();
    for level in 0..quotes {
        cells.push(('│', Style::fg(MUTED)));
        if trailing_space || level + 1 < quotes {
            cells.push((' ', Style::PLAIN));
        }
    }
    cells
}
