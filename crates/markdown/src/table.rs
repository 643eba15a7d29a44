//! Tables: rows are held until the table ends, then drawn aligned with box-drawing chars.

use crate::inline::Inline;
use crate::style::{Painter, Style, MUTED};
use crate::wrap::{cells_width, wrap_cells, Sink, StyledChar};

const MAX_ROWS: usize = 200;
const MAX_BYTES: usize = 64 * 1024;
/// Columns are never shrunk below this many columns of text.
const MIN_COLUMN_WIDTH: usize = 3;

#[derive(Debug, Default)]
pub struct HeldRows {
    pub rows: Vec<String>,
    bytes: usize,
}

impl HeldRows {
    pub fn push(&mut self, row: String) {
        self.bytes += row.len();
        self.rows.push(row);
    }

    /// Past the bounds a table is given up on and shown as plain text.
    pub fn is_full(&self) -> bool {
        self.rows.len() >= MAX_ROWS || self.bytes >= MAX_BYTES
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Center,
    Right,
}

type Cell = Vec<StyledChar>;

/// Draws the rows as a table; false when they are not one (no `|---|` row under the header).
pub fn draw_table(rows: &[String], width: usize, painter: &mut Painter) -> bool {
    let Some(alignments) = rows
        .get(1)
        .and_then(|row| parse_alignments(&split_cells(row)))
    else {
        return false;
    };
    let columns = alignments.len();
    let mut body: Vec<Vec<Cell>> = Vec::new();
    for (index, row) in rows.iter().enumerate().filter(|(index, _)| *index != 1) {
        let base = if index == 0 {
            Style::PLAIN.bold()
        } else {
            Style::PLAIN
        };
        let mut cells: Vec<Cell> = split_cells(row)
            .iter()
            .map(|cell| Inline::render(cell, base))
            .collect();
        cells.resize(columns, Vec::new());
        body.push(cells);
    }
    let widths = column_widths(&body, columns, width);
    draw_border(['┌', '┬', '┐'], &widths, painter);
    for (index, cells) in body.iter().enumerate() {
        draw_row(cells, &widths, &alignments, painter);
        if index == 0 && body.len() > 1 {
            draw_border(['├', '┼', '┤'], &widths, painter);
        }
    }
    draw_border(['└', '┴', '┘'], &widths, painter);
    true
}

/// Splits `| a | b |` into trimmed cells; `\|` and pipes inside backticks do not split.
fn split_cells(row: &str) -> Vec<String> {
    let trimmed = row.trim();
    let inner = trimmed.strip_prefix('|').unwrap_or(trimmed);
    let inner = match inner.strip_suffix('|') {
        Some(rest) if !rest.ends_with('\\') => rest,
        _ => inner,
    };
    let mut cells = Vec::new();
    let mut current = String::new();
    let mut in_code = false;
    let mut escaped = false;
    for c in inner.chars() {
        if c == '|' && !in_code && !escaped {
            cells.push(std::mem::take(&mut current));
            continue;
        }
        if c == '|' && escaped {
            current.pop();
        }
        if c == '`' {
            in_code = !in_code;
        }
        current.push(c);
        escaped = c == '\\' && !escaped;
    }
    cells.push(current);
    cells
        .iter()
        .map(|cell| cell.trim().replace('\t', " "))
        .collect()
}

fn parse_alignments(cells: &[String]) -> Option<Vec<Align>> {
    cells
        .iter()
        .map(|cell| {
            let dashes = cell.trim_matches(':');
            if dashes.is_empty() || !dashes.chars().all(|c| c == '-') {
                return None;
            }
            Some(match (cell.starts_with(':'), cell.ends_with(':')) {
                (true, true) => Align::Center,
                (false, true) => Align::Right,
                _ => Align::Left,
            })
        })
        .collect()
}

/// Natural widths, with the widest columns shrunk until the table fits the terminal.
fn column_widths(body: &[Vec<Cell>], columns: usize, width: usize) -> Vec<usize> {
    let mut widths = vec![1; columns];
    for cells in body {
        for (column, cell) in cells.iter().enumerate() {
            widths[column] = widths[column].max(cells_width(cell));
        }
    }
    let available = width.saturating_sub(3 * columns + 1);
    while widths.iter().sum::<usize>() > available {
        let widest = (0..columns)
            .max_by_key(|&column| widths[column])
            .unwrap_or(0);
        if widths[widest] <= MIN_COLUMN_WIDTH {
            break;
        }
        widths[widest] -= 1;
    }
    widths
}

fn draw_border([left, middle, right]: [char; 3], widths: &[usize], painter: &mut Painter) {
    let segments: Vec<String> = widths.iter().map(|&w| "─".repeat(w + 2)).collect();
    let line = format!("{left}{}{right}", segments.join(&middle.to_string()));
    painter.put_str(&line, Style::fg(MUTED));
    painter.newline();
}

fn draw_row(cells: &[Cell], widths: &[usize], alignments: &[Align], painter: &mut Painter) {
    let wrapped: Vec<Vec<Cell>> = cells
        .iter()
        .zip(widths)
        .map(|(cell, &width)| wrap_cells(cell, width))
        .collect();
    let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
    for line in 0..height {
        painter.put('│', Style::fg(MUTED));
        for ((lines, &width), &align) in wrapped.iter().zip(widths).zip(alignments) {
            let text = lines.get(line).map(Vec::as_slice).unwrap_or_default();
            let slack = width.saturating_sub(cells_width(text));
            let left = match align {
                Align::Left => 0,
                Align::Center => slack / 2,
                Align::Right => slack,
            };
            painter.put_str(&" ".repeat(left + 1), Style::PLAIN);
            painter.put_cells(text);
            painter.put_str(&" ".repeat(slack - left + 1), Style::PLAIN);
            painter.put('│', Style::fg(MUTED));
        }
        painter.newline();
    }
}
