//! Perplexity over non-overlapping windows: each window scores every token after its first.
use crate::EngineError;
use ishizuki_models::{Logits, Model};

#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// Tokens scored.
    pub tokens: usize,
    pub mean_nll: f64,
    pub ppl: f64,
}

/// Splits `text_ids` into windows of `n_ctx` tokens (the first of each is `bos` when given,
/// followed by `n_ctx - 1` text tokens) and scores at most `max_windows` of them.
pub fn perplexity(
    model: &Model,
    text_ids: &[u32],
    bos: Option<u32>,
    n_ctx: usize,
    max_windows: Option<usize>,
    chunk: usize,
) -> Result<Perplexity, EngineError> {
    let per_window = n_ctx.saturating_sub(bos.is_some() as usize);
    if per_window == 0 || chunk == 0 {
        return Err(EngineError::BadArgument(format!(
            "context {n_ctx} leaves no room for text"
        )));
    }
    let mut cache = model.new_cache(n_ctx)?;
    let (mut nll, mut scored) = (0f64, 0usize);
    let windows = text_ids
        .chunks(per_window)
        .take(max_windows.unwrap_or(usize::MAX));
    for text in windows {
        let window: Vec<u32> = bos.into_iter().chain(text.iter().copied()).collect();
        if window.len() < 2 {
            continue;
        }
        cache.clear();
        for (c, part) in window.chunks(chunk).enumerate() {
            let logits = model.forward(part, &mut cache, Logits::All)?;
            let next = &window[c * chunk + 1..];
            for (row, &target) in logits.chunks_exact(model.config.n_vocab).zip(next) {
                nll += neg_log_softmax(row, target as usize);
                scored += 1;
            }
        }
    }
    if scored == 0 {
        return Err(EngineError::BadArgument(
            "the text has fewer than two tokens".into(),
        ));
    }
    let mean_nll = nll / scored as f64;
    Ok(Perplexity {
        tokens: scored,
        mean_nll,
        ppl: mean_nll.exp(),
    })
}

/// `-log softmax(row)[target]` in f64.
pub fn neg_log_softmax(row: &[f32], target: usize) -> f64 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v)) as f64;
    let lse = max
        + row
            .iter()
            .map(|v| (*v as f64 - max).exp())
            .sum::<f64>()
            .ln();
    lse - row[target] as f64
}

#[cfg(test)]
mod tests {
    use super::neg_log_softmax;

    #[test]
    fn uniform_row_scores_log_n() {
        let row = [0.5f32; 8];
        assert!((neg_log_softmax(&row, 3) - 8f64.ln()).abs() < 1e-12);
        let peaked = [0.0, 100.0, 0.0];
        assert!(neg_log_softmax(&peaked, 1) < 1e-12);
    }
}
