//! Streaming markdown to ANSI for a terminal chat.
//!
//! A model's reply arrives a few bytes at a time and must appear as it arrives, so the
//! renderer is a char-at-a-time state machine whose every decision depends only on the
//! chars seen so far, never on where a chunk happened to end. The output of any split of
//! the input is therefore byte-identical to rendering it whole.
//!
//! What is held back, and why:
//! - the bytes of an incomplete UTF-8 char, until it completes (`utf8`);
//! - the first few chars of a line, until they say what the line is (`#`, `-`, `1.`, `>`,
//!   a fence, a rule, a table row; `classify`), so its prefix is drawn before the rest;
//! - the current word, until it is known to fit on the line (`wrap`);
//! - an open inline span, until its closing delimiter lands (or the line ends, when it is
//!   given back as plain text; at most 4 KiB; `inline`);
//! - the current code line, which is highlighted only once complete (`code`);
//! - table rows, until the table ends and column widths are known (`table`).
//!
//! Other decisions are made as soon as a char arrives: plain text outside spans, and code
//! box borders, are written immediately. Every line ends with a style reset, so colour never
//! leaks onto the prompt, and control chars from the model (ESC, other C0, C1, DEL) are
//! shown as U+FFFD rather than reaching the terminal. The reasoning channel is drawn as
//! plain muted text inside a `╭ thinking … ╰` inset (`thinking`), closed when reply text
//! arrives or the reply finishes.
//!
//! Without colour ([`ColorMode::None`]) the input is passed through untouched: no wrapping,
//! no boxes, no escapes.

mod block;
mod classify;
mod code;
mod inline;
mod style;
mod table;
mod thinking;
mod utf8;
mod wrap;

use block::Reply;
use style::Painter;
use thinking::Thinking;
use utf8::Utf8Decoder;

/// Narrowest terminal the layout supports; narrower widths are treated as this.
const MIN_WIDTH: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorMode {
    None,
    Ansi256,
    TrueColor,
}

impl ColorMode {
    /// Reads NO_COLOR, TERM and COLORTERM from the environment.
    pub fn detect(is_tty: bool) -> ColorMode {
        let var = |name: &str| std::env::var(name).ok();
        ColorMode::from_env(
            is_tty,
            var("NO_COLOR").as_deref(),
            var("TERM").as_deref(),
            var("COLORTERM").as_deref(),
        )
    }

    pub fn from_env(
        is_tty: bool,
        no_color: Option<&str>,
        term: Option<&str>,
        colorterm: Option<&str>,
    ) -> ColorMode {
        if no_color.is_some_and(|value| !value.is_empty()) || term == Some("dumb") || !is_tty {
            return ColorMode::None;
        }
        match colorterm.map(str::to_ascii_lowercase).as_deref() {
            Some("truecolor" | "24bit") => ColorMode::TrueColor,
            _ => ColorMode::Ansi256,
        }
    }
}

/// Renders one reply at a time (and its reasoning) as it streams.
pub struct Renderer {
    mode: ColorMode,
    reply_bytes: Utf8Decoder,
    thinking_bytes: Utf8Decoder,
    painter: Painter,
    reply: Reply,
    thinking: Thinking,
}

impl Renderer {
    pub fn new(mode: ColorMode, width: usize) -> Renderer {
        let width = width.max(MIN_WIDTH);
        Renderer {
            mode,
            reply_bytes: Utf8Decoder::default(),
            thinking_bytes: Utf8Decoder::default(),
            painter: Painter::new(mode),
            reply: Reply::new(width),
            thinking: Thinking::new(width),
        }
    }

    /// After a terminal resize; lines already started keep their width.
    pub fn set_width(&mut self, width: usize) {
        let width = width.max(MIN_WIDTH);
        self.reply.set_width(width);
        self.thinking.set_width(width);
    }

    /// A chunk of reply text; returns what to write to the terminal now.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut text = String::new();
        self.reply_bytes.decode(bytes, &mut text);
        if !text.is_empty() {
            self.end_thinking();
        }
        self.render_reply(&text);
        self.painter.take()
    }

    /// A chunk of the reasoning channel, shown muted in an inset box.
    pub fn push_thinking(&mut self, bytes: &[u8]) -> String {
        let mut text = String::new();
        self.thinking_bytes.decode(bytes, &mut text);
        if !text.is_empty() {
            self.interrupt_reply();
        }
        self.render_thinking(&text);
        self.painter.take()
    }

    /// End of the reply (or cancellation): flushes everything held and closes open boxes.
    pub fn finish(&mut self) -> String {
        let mut thinking_tail = String::new();
        self.thinking_bytes.flush(&mut thinking_tail);
        self.render_thinking(&thinking_tail);
        let mut reply_tail = String::new();
        self.reply_bytes.flush(&mut reply_tail);
        if !reply_tail.is_empty() {
            self.end_thinking();
        }
        self.render_reply(&reply_tail);
        if self.mode != ColorMode::None {
            self.thinking.close(&mut self.painter);
            self.reply.finish(&mut self.painter);
        }
        if !self.painter.at_line_start() {
            wrap::Sink::newline(&mut self.painter);
        }
        self.painter.reset();
        self.painter.take()
    }

    /// Shows what the reply holds mid-line (a cut char, a word) before a thinking box opens.
    fn interrupt_reply(&mut self) {
        let mut cut = String::new();
        self.reply_bytes.flush(&mut cut);
        self.render_reply(&cut);
        if self.mode != ColorMode::None {
            self.reply.flush_word(&mut self.painter);
        }
    }

    /// Closes the thinking box before reply text, first ending any char cut short in it.
    fn end_thinking(&mut self) {
        let mut cut = String::new();
        self.thinking_bytes.flush(&mut cut);
        self.render_thinking(&cut);
        if self.mode != ColorMode::None {
            self.thinking.close(&mut self.painter);
        }
    }

    fn render_reply(&mut self, text: &str) {
        match self.mode {
            ColorMode::None => self.painter.put_raw(text),
            _ => sanitized(text).for_each(|c| self.reply.feed(c, &mut self.painter)),
        }
    }

    fn render_thinking(&mut self, text: &str) {
        match self.mode {
            ColorMode::None => self.painter.put_raw(text),
            _ => sanitized(text).for_each(|c| self.thinking.feed(c, &mut self.painter)),
        }
    }
}

/// Control chars from the model must not drive the terminal: CR is dropped, others shown as U+FFFD.
fn sanitized(text: &str) -> impl Iterator<Item = char> + '_ {
    text.chars().filter(|&c| c != '\r').map(|c| match c {
        '\n' | '\t' => c,
        _ if c.is_control() => '\u{FFFD}',
        _ => c,
    })
}

/// Removes CSI (`ESC [ … final`) and OSC (`ESC ] … BEL/ST`) escapes and other `ESC x` pairs.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\x07' {
                        break;
                    }
                    if c == '\x1b' {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}
