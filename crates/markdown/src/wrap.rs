//! Word wrapping of a stream of styled chars at a display width.

use unicode_width::UnicodeWidthChar;

use crate::style::Style;

pub type StyledChar = (char, Style);

/// Where wrapped text goes: the terminal painter, or a collector of lines for table cells.
pub trait Sink {
    fn put(&mut self, c: char, style: Style);
    fn newline(&mut self);
}

pub fn char_width(c: char) -> usize {
    c.width().unwrap_or(0)
}

pub fn cells_width(cells: &[StyledChar]) -> usize {
    cells.iter().map(|&(c, _)| char_width(c)).sum()
}

/// Greedy wrapper: holds the current word (and the spaces before it) until it is known
/// whether it fits, so a wrap never leaves trailing spaces and words are not split needlessly.
#[derive(Debug)]
pub struct Wrapper {
    width: usize,
    continuation: Vec<StyledChar>,
    line_start: usize,
    column: usize,
    word: Vec<StyledChar>,
    word_width: usize,
    gap: Vec<StyledChar>,
    gap_width: usize,
}

impl Wrapper {
    pub fn new(width: usize) -> Wrapper {
        Wrapper {
            width: width.max(1),
            continuation: Vec::new(),
            line_start: 0,
            column: 0,
            word: Vec::new(),
            word_width: 0,
            gap: Vec::new(),
            gap_width: 0,
        }
    }

    pub fn set_width(&mut self, width: usize) {
        self.width = width.max(1);
    }

    /// Starts a logical line whose first prefix (already drawn) is `column` wide;
    /// `continuation` is drawn at the start of every wrapped line.
    pub fn start_line(&mut self, column: usize, continuation: Vec<StyledChar>) {
        self.column = column;
        self.line_start = cells_width(&continuation);
        self.continuation = continuation;
        self.word.clear();
        self.word_width = 0;
        self.gap.clear();
        self.gap_width = 0;
    }

    pub fn push(&mut self, c: char, style: Style, sink: &mut impl Sink) {
        if c == ' ' {
            self.place_word(sink);
            self.gap.push((c, style));
            self.gap_width += 1;
            return;
        }
        let width = char_width(c);
        let room_on_fresh_line = self.width.saturating_sub(self.line_start).max(1);
        if self.word_width + width > room_on_fresh_line {
            // The word cannot fit on any line: break it hard where the line is full.
            self.place_word(sink);
        }
        self.word.push((c, style));
        self.word_width += width;
    }

    /// Places the held word; trailing spaces are dropped. The caller writes the newline.
    pub fn end_line(&mut self, sink: &mut impl Sink) {
        self.place_word(sink);
        self.gap.clear();
        self.gap_width = 0;
    }

    fn place_word(&mut self, sink: &mut impl Sink) {
        if self.word.is_empty() {
            return;
        }
        let overflows = self.column + self.gap_width + self.word_width > self.width;
        if overflows && self.column > self.line_start {
            self.wrap(sink);
        } else {
            for &(c, style) in &self.gap {
                sink.put(c, style);
            }
            self.column += self.gap_width;
        }
        for &(c, style) in &self.word {
            sink.put(c, style);
        }
        self.column += self.word_width;
        self.word.clear();
        self.word_width = 0;
        self.gap.clear();
        self.gap_width = 0;
    }

    fn wrap(&mut self, sink: &mut impl Sink) {
        sink.newline();
        for &(c, style) in &self.continuation {
            sink.put(c, style);
        }
        self.column = self.line_start;
    }
}

/// Collects wrapped output as lines of styled chars (used to lay out table cells).
struct LineCollector {
    lines: Vec<Vec<StyledChar>>,
}

impl Sink for LineCollector {
    fn put(&mut self, c: char, style: Style) {
        if let Some(line) = self.lines.last_mut() {
            line.push((c, style));
        }
    }

    fn newline(&mut self) {
        self.lines.push(Vec::new());
    }
}

/// Wraps already complete styled text into lines of at most `width` columns.
pub fn wrap_cells(cells: &[StyledChar], width: usize) -> Vec<Vec<StyledChar>> {
    let mut wrapper = Wrapper::new(width);
    let mut collector = LineCollector {
        lines: vec![Vec::new()],
    };
    wrapper.start_line(0, Vec::new());
    for &(c, style) in cells {
        wrapper.push(c, style, &mut collector);
    }
    wrapper.end_line(&mut collector);
    collector.lines
}
