//! Fenced code: syntect highlighting, drawn inside a box sized to the terminal width.

use std::sync::OnceLock;

use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::{SyntaxReference, SyntaxSet};

use crate::classify::FenceOpen;
use crate::style::{Painter, Rgb, Style, MUTED};
use crate::wrap::{cells_width, char_width, Sink, StyledChar};

const THEME_NAME: &str = "base16-ocean.dark";
const TAB: &str = "    ";
/// Narrowest box drawn, whatever the indentation.
const MIN_BOX_WIDTH: usize = 12;

/// Loaded once: parsing the bundled syntax and theme dumps takes a noticeable time.
fn syntax_set() -> &'static SyntaxSet {
    static SYNTAXES: OnceLock<SyntaxSet> = OnceLock::new();
    SYNTAXES.get_or_init(SyntaxSet::load_defaults_newlines)
}

fn theme() -> Option<&'static Theme> {
    static THEMES: OnceLock<ThemeSet> = OnceLock::new();
    let themes = THEMES.get_or_init(ThemeSet::load_defaults);
    themes
        .themes
        .get(THEME_NAME)
        .or_else(|| themes.themes.values().next())
}

/// Maps a fence's language tag to a bundled syntax; unknown tags get plain text.
fn syntax_for(language: &str) -> &'static SyntaxReference {
    let syntaxes = syntax_set();
    let lower = language.to_ascii_lowercase();
    let name = match lower.as_str() {
        "py" | "python" => Some("Python"),
        "rs" | "rust" => Some("Rust"),
        "go" | "golang" => Some("Go"),
        // syntect bundles no TypeScript; JavaScript highlights it well enough.
        "js" | "javascript" | "mjs" | "ts" | "typescript" | "tsx" | "jsx" => Some("JavaScript"),
        "c" => Some("C"),
        "cpp" | "c++" | "cc" | "cxx" | "h" | "hpp" => Some("C++"),
        "sh" | "bash" | "shell" | "zsh" | "console" => Some("Bourne Again Shell (bash)"),
        "json" => Some("JSON"),
        "yaml" | "yml" => Some("YAML"),
        "diff" | "patch" => Some("Diff"),
        _ => None,
    };
    name.and_then(|name| syntaxes.find_syntax_by_name(name))
        .or_else(|| {
            (!lower.is_empty())
                .then(|| syntaxes.find_syntax_by_token(&lower))
                .flatten()
        })
        .unwrap_or_else(|| syntaxes.find_syntax_plain_text())
}

pub struct CodeBlock {
    fence: FenceOpen,
    indent: usize,
    box_width: usize,
    highlighter: Option<HighlightLines<'static>>,
}

impl CodeBlock {
    /// Draws the top border `╭─ lang ───╮` and starts highlighting for `language`.
    pub fn open(language: &str, fence: FenceOpen, width: usize, painter: &mut Painter) -> Self {
        let indent = fence.indent.min(width / 4);
        let box_width = width.saturating_sub(indent).max(MIN_BOX_WIDTH);
        let highlighter = theme().map(|theme| HighlightLines::new(syntax_for(language), theme));
        let block = CodeBlock {
            fence,
            indent,
            box_width,
            highlighter,
        };
        let title: String = match language {
            "" => "code".to_string(),
            _ => language.chars().take(box_width - 6).collect(),
        };
        let fill = box_width.saturating_sub(5 + title.chars().map(char_width).sum::<usize>());
        block.draw_indent(painter);
        painter.put_str("╭─ ", Style::fg(MUTED));
        painter.put_str(&title, Style::fg(MUTED).bold());
        painter.put_str(&format!(" {}╮", "─".repeat(fill)), Style::fg(MUTED));
        painter.newline();
        block
    }

    /// A closing fence: the same char, at least as long as the opener, nothing after it.
    pub fn is_closing(&self, line: &str) -> bool {
        let body = line.trim_start_matches([' ', '\t']);
        let len = body
            .chars()
            .take_while(|&c| c == self.fence.fence_char)
            .count();
        len >= self.fence.len && body[len..].trim().is_empty()
    }

    /// Draws one complete code line, soft-wrapped inside the box.
    pub fn draw_line(&mut self, line: &str, painter: &mut Painter) {
        let inner_width = self.box_width - 4;
        let cells = self.highlight(self.strip_indent(line));
        for row in split_rows(&cells, inner_width) {
            self.draw_indent(painter);
            painter.put_str("│ ", Style::fg(MUTED));
            painter.put_cells(&row);
            let padding = inner_width.saturating_sub(cells_width(&row));
            painter.put_str(&" ".repeat(padding), Style::PLAIN);
            painter.put_str(" │", Style::fg(MUTED));
            painter.newline();
        }
    }

    pub fn close(&self, painter: &mut Painter) {
        self.draw_indent(painter);
        let border = format!("╰{}╯", "─".repeat(self.box_width - 2));
        painter.put_str(&border, Style::fg(MUTED));
        painter.newline();
    }

    fn draw_indent(&self, painter: &mut Painter) {
        painter.put_str(&" ".repeat(self.indent), Style::PLAIN);
    }

    /// Code indented like its fence loses that indentation, as markdown specifies.
    fn strip_indent<'a>(&self, line: &'a str) -> &'a str {
        let spaces = line
            .chars()
            .take(self.fence.indent)
            .take_while(|&c| c == ' ');
        &line[spaces.count()..]
    }

    fn highlight(&mut self, line: &str) -> Vec<StyledChar> {
        let with_newline = format!("{line}\n");
        let ranges = self
            .highlighter
            .as_mut()
            .and_then(|h| h.highlight_line(&with_newline, syntax_set()).ok());
        let mut cells = Vec::new();
        match ranges {
            Some(ranges) => {
                for (token, text) in ranges {
                    let color = token.foreground;
                    let style = Style::fg(Rgb(color.r, color.g, color.b));
                    push_code_chars(text, style, &mut cells);
                }
            }
            None => push_code_chars(line, Style::PLAIN, &mut cells),
        }
        cells
    }
}

fn push_code_chars(text: &str, style: Style, cells: &mut Vec<StyledChar>) {
    for c in text.chars() {
        match c {
            '\n' => {}
            '\t' => cells.extend(TAB.chars().map(|space| (space, style))),
            _ => cells.push((c, style)),
        }
    }
}

/// Splits a code line into rows that fit the box (code wraps anywhere, not at spaces).
fn split_rows(cells: &[StyledChar], width: usize) -> Vec<Vec<StyledChar>> {
    let mut rows = vec![Vec::new()];
    let mut row_width = 0;
    for &(c, style) in cells {
        let w = char_width(c);
        if row_width + w > width && row_width > 0 {
            rows.push(Vec::new());
            row_width = 0;
        }
        if let Some(row) = rows.last_mut() {
            row.push((c, style));
        }
        row_width += w;
    }
    rows
}
