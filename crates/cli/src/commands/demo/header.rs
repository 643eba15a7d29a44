//! The lines above the conversation: what runs, on what, in how much memory; a small bonsai
//! beside them where the terminal is wide enough (never below them: it costs no lines).
use super::term::human_bytes;
use unicode_width::UnicodeWidthStr;

pub struct HeaderInfo {
    pub model_name: String,
    pub arch: String,
    pub quant: String,
    pub file_bytes: usize,
    pub backend: String,
    pub n_ctx: usize,
    pub drafting: bool,
    pub resident_bytes: Option<usize>,
    pub load_secs: f64,
}

const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// The header, one string per line; `color` adds emphasis, `width` decides the bonsai.
pub fn header_lines(h: &HeaderInfo, color: bool, width: usize) -> Vec<String> {
    let memory = h.resident_bytes.map_or("unknown".into(), human_bytes);
    let rows = [
        (
            format!("ishizuki {}", env!("CARGO_PKG_VERSION")),
            "· demo".to_string(),
        ),
        (
            "model  ".into(),
            format!(
                "{} · {} · {} · {}",
                h.model_name,
                h.arch,
                h.quant,
                human_bytes(h.file_bytes)
            ),
        ),
        (
            "backend".into(),
            format!(
                "{} · context {} · drafting {}",
                h.backend,
                h.n_ctx,
                if h.drafting { "on" } else { "off" }
            ),
        ),
        (
            "memory ".into(),
            format!("{memory} in use · loaded in {:.1}s", h.load_secs),
        ),
        (
            "       ".into(),
            "/help · Ctrl-C stops a reply · Ctrl-D quits".into(),
        ),
    ];
    let plain: Vec<String> = rows.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let text_width = plain.iter().map(|l| l.width()).max().unwrap_or(0);
    let styled: Vec<String> = if color {
        rows.iter()
            .map(|(k, v)| format!("{BOLD}{k}{RESET} {v}"))
            .collect()
    } else {
        plain.clone()
    };
    let tree = bonsai(rows.len(), &h.model_name);
    if width < text_width + 4 + BONSAI_WIDTH {
        return styled;
    }
    let pad = width.min(text_width + 8 + BONSAI_WIDTH) - BONSAI_WIDTH - 1;
    styled
        .into_iter()
        .zip(plain)
        .zip(tree)
        .map(|((line, plain), cells)| {
            let gap = " ".repeat(pad - plain.width());
            let cells: String = cells.iter().collect();
            match cells.trim_end() {
                "" => line,
                cells => format!("{line}{gap}{}", paint_bonsai(cells, color)),
            }
        })
        .collect()
}

const BONSAI_WIDTH: usize = 17;

/// A bonsai `height` rows tall, shaped by `seed`: a canopy of pads over a trunk in a pot.
fn bonsai(height: usize, seed: &str) -> Vec<Vec<char>> {
    let w = BONSAI_WIDTH;
    let mut grid = vec![vec![' '; w]; height];
    let mut state = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut next = |n: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize % n.max(1)
    };
    let (canopy_rows, mid) = (height.saturating_sub(2), w / 2);
    // a crown over the trunk and a pad to each side, each a diamond of leaves
    let pads = [
        (mid - 1 + next(3), canopy_rows / 2, 4 + next(2)),
        (mid - 5 + next(2), next(canopy_rows), 2 + next(2)),
        (mid + 4 + next(2), next(canopy_rows), 2 + next(2)),
    ];
    for (cx, cy, rx) in pads {
        for (r, row) in grid.iter_mut().enumerate().take(canopy_rows) {
            let reach = rx.saturating_sub(r.abs_diff(cy) * 2);
            if r.abs_diff(cy) * 2 > rx {
                continue;
            }
            let leaves = cx.saturating_sub(reach)..(cx + reach + 1).min(w);
            row[leaves]
                .iter_mut()
                .for_each(|c| *c = ['@', '&', '%', '*'][next(4)]);
        }
    }
    for row in grid.iter_mut().take(height.saturating_sub(1)).skip(1) {
        if row[mid] == ' ' {
            row[mid] = '│';
        }
    }
    if let Some(pot) = grid.last_mut() {
        let (l, r) = (mid - 4, mid + 4);
        pot[l] = '╰';
        pot[l + 1..r].iter_mut().for_each(|c| *c = '─');
        pot[r] = '╯';
    }
    grid
}

fn paint_bonsai(cells: &str, color: bool) -> String {
    if !color {
        return cells.to_string();
    }
    let mut s = String::new();
    for c in cells.chars() {
        let code = match c {
            '@' | '&' | '%' | '*' => "\x1b[38;5;71m",
            '│' => "\x1b[38;5;130m",
            ' ' => "",
            _ => DIM,
        };
        s.push_str(code);
        s.push(c);
        if !code.is_empty() {
            s.push_str(RESET);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> HeaderInfo {
        HeaderInfo {
            model_name: "qwen2.5-coder-0.5b".into(),
            arch: "qwen2".into(),
            quant: "Q4_K_M".into(),
            file_bytes: 491_400_064,
            backend: "cpu avx2 x2".into(),
            n_ctx: 4096,
            drafting: true,
            resident_bytes: Some(600 << 20),
            load_secs: 0.4,
        }
    }

    #[test]
    fn the_header_names_model_backend_and_memory() {
        let lines = header_lines(&info(), false, 60);
        let text = lines.join("\n");
        assert!(
            text.contains("qwen2.5-coder-0.5b · qwen2 · Q4_K_M · 469 MiB"),
            "{text}"
        );
        assert!(text.contains("cpu avx2 x2"), "{text}");
        assert!(text.contains("600 MiB in use"), "{text}");
    }

    #[test]
    fn the_bonsai_costs_no_lines_and_fits_the_width() {
        let narrow = header_lines(&info(), false, 60);
        for width in [60, 80, 100, 200] {
            let lines = header_lines(&info(), false, width);
            assert_eq!(lines.len(), narrow.len());
            for l in &lines {
                assert!(l.width() <= width, "{width}: {l:?}");
                assert_eq!(l.trim_end(), l, "trailing spaces");
            }
        }
        let wide = header_lines(&info(), false, 100).join("\n");
        assert!(wide.contains('╰'), "{wide}");
    }
}
