//! The reasoning channel: plain muted text inside an inset `╭ thinking … ╰` box.

use crate::style::{Painter, Style, MUTED, THINKING};
use crate::wrap::{cells_width, Sink, StyledChar, Wrapper};

const GUTTER: &str = "│ ";

#[derive(Debug)]
pub struct Thinking {
    width: usize,
    open: bool,
    line_started: bool,
    /// Blank lines are held so that none is drawn right before the box closes.
    held_blank_lines: usize,
    wrapper: Wrapper,
}

impl Thinking {
    pub fn new(width: usize) -> Thinking {
        Thinking {
            width,
            open: false,
            line_started: false,
            held_blank_lines: 0,
            wrapper: Wrapper::new(width),
        }
    }

    pub fn set_width(&mut self, width: usize) {
        self.width = width;
    }

    pub fn feed(&mut self, c: char, painter: &mut Painter) {
        if c == '\n' {
            if self.line_started {
                self.wrapper.end_line(painter);
                painter.newline();
                self.line_started = false;
            } else if self.open {
                self.held_blank_lines += 1;
            }
            return;
        }
        if !self.open {
            self.open_box(painter);
        }
        if !self.line_started {
            self.start_line(painter);
        }
        let c = if c == '\t' { ' ' } else { c };
        self.wrapper.push(c, Style::fg(THINKING), painter);
    }

    /// Ends the current line and draws the bottom of the box.
    pub fn close(&mut self, painter: &mut Painter) {
        if !self.open {
            return;
        }
        if self.line_started {
            self.wrapper.end_line(painter);
            painter.newline();
        }
        painter.put('╰', Style::fg(MUTED).dim());
        painter.newline();
        self.open = false;
        self.line_started = false;
        self.held_blank_lines = 0;
    }

    fn open_box(&mut self, painter: &mut Painter) {
        if !painter.at_line_start() {
            painter.newline();
        }
        painter.put_str("╭ thinking", Style::fg(MUTED).dim());
        painter.newline();
        self.open = true;
        self.held_blank_lines = 0;
    }

    fn start_line(&mut self, painter: &mut Painter) {
        let gutter = Style::fg(MUTED).dim();
        for _ in 0..std::mem::take(&mut self.held_blank_lines) {
            painter.put('│', gutter);
            painter.newline();
        }
        self.wrapper.set_width(self.width);
        painter.put_str(GUTTER, gutter);
        let continuation: Vec<StyledChar> = GUTTER.chars().map(|c| (c, gutter)).collect();
        self.wrapper
            .start_line(cells_width(&continuation), continuation);
        self.line_started = true;
    }
}
