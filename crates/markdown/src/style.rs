//! ANSI styles, colour conversion and the painter that writes styled chars.

use crate::wrap::{Sink, StyledChar};
use crate::ColorMode;

/// A 24-bit colour; converted to the 256-colour palette when the terminal needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

pub const MUTED: Rgb = Rgb(128, 128, 128);
pub const THINKING: Rgb = Rgb(150, 150, 150);
pub const ACCENT: Rgb = Rgb(95, 175, 215);
pub const CODE: Rgb = Rgb(215, 175, 95);
pub const LINK: Rgb = Rgb(95, 135, 255);
const HEADINGS: [Rgb; 3] = [Rgb(215, 95, 175), Rgb(95, 175, 255), Rgb(95, 215, 175)];

const RESET: &str = "\x1b[0m";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    pub fg: Option<Rgb>,
    pub bold: bool,
    pub italic: bool,
    pub underline: bool,
    pub strike: bool,
    pub dim: bool,
}

impl Style {
    pub const PLAIN: Style = Style {
        fg: None,
        bold: false,
        italic: false,
        underline: false,
        strike: false,
        dim: false,
    };

    pub fn fg(color: Rgb) -> Style {
        Style::PLAIN.with_fg(color)
    }

    pub fn with_fg(self, color: Rgb) -> Style {
        Style {
            fg: Some(color),
            ..self
        }
    }

    pub fn bold(self) -> Style {
        Style { bold: true, ..self }
    }

    pub fn italic(self) -> Style {
        Style {
            italic: true,
            ..self
        }
    }

    pub fn underline(self) -> Style {
        Style {
            underline: true,
            ..self
        }
    }

    pub fn strike(self) -> Style {
        Style {
            strike: true,
            ..self
        }
    }

    pub fn dim(self) -> Style {
        Style { dim: true, ..self }
    }

    pub fn heading(level: usize) -> Style {
        let color = HEADINGS[level.saturating_sub(1).min(HEADINGS.len() - 1)];
        Style::fg(color).bold()
    }

    /// The SGR escape that turns this style on from a reset state ("" for plain).
    fn sgr(&self, mode: ColorMode) -> String {
        let mut codes: Vec<String> = Vec::new();
        let flags = [
            (self.bold, "1"),
            (self.dim, "2"),
            (self.italic, "3"),
            (self.underline, "4"),
            (self.strike, "9"),
        ];
        codes.extend(
            flags
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, code)| code.to_string()),
        );
        if let Some(Rgb(r, g, b)) = self.fg {
            match mode {
                ColorMode::TrueColor => codes.push(format!("38;2;{r};{g};{b}")),
                ColorMode::Ansi256 => codes.push(format!("38;5;{}", rgb_to_256(Rgb(r, g, b)))),
                ColorMode::None => {}
            }
        }
        if codes.is_empty() {
            String::new()
        } else {
            format!("\x1b[{}m", codes.join(";"))
        }
    }
}

/// Nearest xterm-256 palette entry: the 6x6x6 cube or the grey ramp, whichever is closer.
pub fn rgb_to_256(Rgb(r, g, b): Rgb) -> u8 {
    const LEVELS: [u8; 6] = [0, 95, 135, 175, 215, 255];
    let cube_index = |v: u8| match v {
        0..=47 => 0,
        48..=114 => 1,
        _ => (v - 35) / 40,
    };
    let (cr, cg, cb) = (cube_index(r), cube_index(g), cube_index(b));
    let cube = Rgb(
        LEVELS[cr as usize],
        LEVELS[cg as usize],
        LEVELS[cb as usize],
    );
    let average = (u16::from(r) + u16::from(g) + u16::from(b)) / 3;
    let grey_index = (average.saturating_sub(8) / 10).min(23) as u8;
    let grey_level = 8 + 10 * grey_index;
    let grey = Rgb(grey_level, grey_level, grey_level);
    if distance(grey, Rgb(r, g, b)) < distance(cube, Rgb(r, g, b)) {
        232 + grey_index
    } else {
        16 + 36 * cr + 6 * cg + cb
    }
}

fn distance(a: Rgb, b: Rgb) -> u32 {
    let d = |x: u8, y: u8| (i32::from(x) - i32::from(y)).pow(2) as u32;
    d(a.0, b.0) + d(a.1, b.1) + d(a.2, b.2)
}

/// Writes styled chars as ANSI text, emitting escapes only when the style changes.
#[derive(Debug)]
pub struct Painter {
    mode: ColorMode,
    out: String,
    active: Style,
    last: Option<char>,
}

impl Painter {
    pub fn new(mode: ColorMode) -> Painter {
        Painter {
            mode,
            out: String::new(),
            active: Style::PLAIN,
            last: None,
        }
    }

    pub fn put_str(&mut self, text: &str, style: Style) {
        text.chars().for_each(|c| self.put(c, style));
    }

    pub fn put_cells(&mut self, cells: &[StyledChar]) {
        cells.iter().for_each(|&(c, style)| self.put(c, style));
    }

    /// Text written as is (no-colour passthrough).
    pub fn put_raw(&mut self, text: &str) {
        self.out.push_str(text);
        if let Some(last) = text.chars().next_back() {
            self.last = Some(last);
        }
    }

    /// True when nothing is on the current terminal line yet.
    pub fn at_line_start(&self) -> bool {
        matches!(self.last, None | Some('\n'))
    }

    /// Forgets what was written, for the start of a new reply.
    pub fn reset(&mut self) {
        self.last = None;
    }

    pub fn take(&mut self) -> String {
        std::mem::take(&mut self.out)
    }
}

impl Sink for Painter {
    fn put(&mut self, c: char, style: Style) {
        if style != self.active {
            if self.active != Style::PLAIN {
                self.out.push_str(RESET);
            }
            self.out.push_str(&style.sgr(self.mode));
            self.active = style;
        }
        self.out.push(c);
        self.last = Some(c);
    }

    fn newline(&mut self) {
        if self.active != Style::PLAIN {
            self.out.push_str(RESET);
            self.active = Style::PLAIN;
        }
        self.out.push('\n');
        self.last = Some('\n');
    }
}
