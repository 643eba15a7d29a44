//! THE decoder: one forward for every architecture, driven by `TransformerConfig` flags.
use crate::arch::config_from_gguf;
use crate::config::TransformerConfig;
use crate::kv_cache::KvCache;
use crate::weights::{load_weights, LayerWeights, ModelWeights};
use crate::ModelError;
use ishizuki_core::backend::AttnParams;
use ishizuki_core::{Backend, Error};
use ishizuki_formats::GgufFile;
use std::path::Path;

/// Which rows of logits a forward returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (decode, end of prefill).
    Last,
    /// Every token's (perplexity, draft verification).
    All,
    /// None (prefill chunks that are not the last).
    None,
}

pub struct Model {
    pub config: TransformerConfig,
    weights: ModelWeights,
    file: GgufFile,
    /// The last forward's intermediates, kept for the next (as llama.cpp keeps its compute
    /// buffers): a prefill chunk's are megabytes, whose fresh pages cost faults and zeroing.
    scratch: std::sync::Mutex<Option<Intermediates>>,
}

impl Model {
    pub fn load(path: impl AsRef<Path>) -> Result<Model, ModelError> {
        Model::from_gguf(GgufFile::open(path).map_err(|e| ModelError::Core(e.into()))?)
    }

    pub fn from_gguf(file: GgufFile) -> Result<Model, ModelError> {
        let config = config_from_gguf(&file)?;
        let weights = load_weights(&file, &config)?;
        Ok(Model {
            config,
            weights,
            file,
            scratch: Default::default(),
        })
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    pub fn new_cache(&self, n_ctx: usize) -> KvCache {
        KvCache::new(&self.config, n_ctx)
    }

    /// Lets `be` make its packed copies of the matmul weights (call once, before the first
    /// forward on `be`; forwards on another backend still read the file's layout). Returns the
    /// memory the copies hold.
    pub fn pack_weights(&mut self, be: &dyn Backend) -> usize {
        self.weights.pack(be, &self.file)
    }

    /// Bytes of weights read per decoded token.
    pub fn weight_bytes(&self) -> usize {
        self.file.tensors.iter().map(|t| t.n_bytes as usize).sum()
    }

    /// Runs `tokens` at positions `cache.len()..`, appending to the cache.
    /// Returns `(rows, n_vocab)` logits for the rows `want` selects.
    pub fn forward(
        &self,
        be: &dyn Backend,
        tokens: &[u32],
        cache: &mut KvCache,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        let (n, start) = (tokens.len(), cache.len());
        if n == 0 {
            return Ok(Vec::new());
        }
        if start + n > cache.n_ctx() {
            return Err(Error::ContextOverflow {
                n_prompt: start + n,
                n_ctx: cache.n_ctx(),
            }
            .into());
        }
        let positions: Vec<u32> = (start..start + n).map(|p| p as u32).collect();
        let mut x = vec![0f32; n * c.n_embd];
        be.embed(&self.weights.tok_embd.view(&self.file), tokens, &mut x)?;
        if let Some(s) = c.embd_scale {
            x.iter_mut().for_each(|v| *v *= s);
        }
        dump("inp_embd", &x, c.n_embd);
        // a forward running beside this one (another thread's sequence) makes its own
        let mut kept = self.scratch.try_lock().ok();
        let mut own = None;
        let buf = match kept.as_deref_mut() {
            Some(slot) => slot.get_or_insert_with(Intermediates::default),
            None => own.insert(Intermediates::default()),
        };
        buf.fit(c, n);
        for (il, lw) in self.weights.layers.iter().enumerate() {
            self.layer(be, il, lw, &mut x, &positions, cache, buf)?;
        }
        cache.set_len(start + n);
        let from = match want {
            Logits::None => return Ok(Vec::new()),
            Logits::Last => (n - 1) * c.n_embd,
            Logits::All => 0,
        };
        // the last layer's FFN output, only on the rows whose logits are wanted
        let rows = &mut x[from..];
        if !self.weights.layers.is_empty() {
            add_into(rows, &buf.attn_out[from..]);
        }
        drop(kept);
        be.rms_norm(rows, &self.weights.out_norm, c.norm_eps, c.norm_kind);
        let n_rows = rows.len() / c.n_embd;
        let head = self
            .weights
            .lm_head
            .as_ref()
            .unwrap_or(&self.weights.tok_embd);
        let mut logits = vec![0f32; n_rows * c.n_vocab];
        be.matmul(&head.view(&self.file), rows, n_rows, &mut logits)?;
        if let Some(cap) = c.final_softcap {
            logits.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
        }
        dump("logits", &logits, c.n_vocab);
        Ok(logits)
    }

    #[allow(clippy::too_many_arguments)]
    fn layer(
        &self,
        be: &dyn Backend,
        il: usize,
        lw: &LayerWeights,
        x: &mut [f32],
        positions: &[u32],
        cache: &mut KvCache,
        buf: &mut Intermediates,
    ) -> Result<(), ModelError> {
        let c = &self.config;
        let f = &self.file;
        let n = positions.len();
        let la = c.layers[il];
        let Intermediates {
            attn_norm,
            q,
            k,
            v,
            kqv,
            attn_out,
            ffn_inp,
            gate,
            up,
        } = buf;
        // the previous layer's FFN output (left in attn_out) joins the residual in this
        // layer's first norm
        let delta = (il > 0).then_some(&attn_out[..]);
        be.add_rms_norm(x, delta, attn_norm, &lw.attn_norm, c.norm_eps, c.norm_kind);
        let qkv = [lw.wq.view(f), lw.wk.view(f), lw.wv.view(f)];
        be.matmul_multi(&qkv, attn_norm, n, &mut [&mut *q, &mut *k, &mut *v])?;
        add_bias(q, lw.bq.as_deref());
        add_bias(k, lw.bk.as_deref());
        add_bias(v, lw.bv.as_deref());
        if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
            be.rms_norm(q, qn, c.norm_eps, c.norm_kind);
            be.rms_norm(k, kn, c.norm_eps, c.norm_kind);
        }
        let freq_scale = 1.0 / la.rope_scale;
        be.rope(
            q,
            c.n_head,
            c.head_dim,
            positions,
            la.rope_theta,
            freq_scale,
            c.rope_kind,
        );
        be.rope(
            k,
            c.n_head_kv,
            c.head_dim,
            positions,
            la.rope_theta,
            freq_scale,
            c.rope_kind,
        );
        cache.write(il, positions[0] as usize, k, v);
        let n_kv = positions[n - 1] as usize + 1;
        let (kc, vc) = cache.layer(il);
        let params = AttnParams {
            n_head: c.n_head,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            scale: c.attn_scale,
            window: la.window,
            softcap: c.attn_softcap,
        };
        be.attention(q, kc, vc, n_kv, positions, &params, kqv)?;
        be.matmul(&lw.wo.view(f), kqv, n, attn_out)?;
        if let Some(w) = &lw.post_attn_norm {
            be.rms_norm(attn_out, w, c.norm_eps, c.norm_kind);
        }
        let (eps, kind) = (c.norm_eps, c.norm_kind);
        be.add_rms_norm(x, Some(attn_out), ffn_inp, &lw.ffn_norm, eps, kind);
        if dumping() {
            dump(&format!("l{il}.attn_residual"), x, c.n_embd);
        }

        let gate_up = [lw.w_gate.view(f), lw.w_up.view(f)];
        be.matmul_glu(&gate_up, ffn_inp, n, gate, up, c.activation)?;
        let ffn_out = attn_out;
        be.matmul(&lw.w_down.view(f), gate, n, ffn_out)?;
        if let Some(w) = &lw.post_ffn_norm {
            be.rms_norm(ffn_out, w, c.norm_eps, c.norm_kind);
        }
        if dumping() {
            let mut out = x.to_vec();
            add_into(&mut out, ffn_out);
            dump(&format!("l{il}.out"), &out, c.n_embd);
        }
        Ok(())
    }
}

/// Every per-layer intermediate of an `n`-token forward, allocated once and reused by each
/// layer (fresh large allocations per layer cost page faults and zeroing).
#[derive(Default)]
struct Intermediates {
    attn_norm: LineAligned, // (n, n_embd)
    q: LineAligned,         // (n, n_head * head_dim)
    k: LineAligned,         // (n, n_head_kv * head_dim)
    v: LineAligned,         // (n, n_head_kv * head_dim)
    kqv: LineAligned,       // (n, n_head * head_dim)
    attn_out: LineAligned,  // (n, n_embd), then the FFN output, added to x by the next layer
    ffn_inp: LineAligned,   // (n, n_embd)
    gate: LineAligned,      // (n, n_ff)
    up: LineAligned,        // (n, n_ff)
}

impl Intermediates {
    /// Sizes every buffer for `n` rows, keeping the memory of larger ones (every one is
    /// written before it is read, so old contents never leak into a forward).
    fn fit(&mut self, c: &TransformerConfig, n: usize) {
        for (b, width) in [
            (&mut self.attn_norm, c.n_embd),
            (&mut self.q, c.q_dim()),
            (&mut self.k, c.kv_dim()),
            (&mut self.v, c.kv_dim()),
            (&mut self.kqv, c.q_dim()),
            (&mut self.attn_out, c.n_embd),
            (&mut self.ffn_inp, c.n_embd),
            (&mut self.gate, c.n_ff),
            (&mut self.up, c.n_ff),
        ] {
            b.fit(n * width);
        }
    }
}

/// Zeroed f32s starting on a cache line: a matmul's threads write their 16 outputs of a row
/// as whole lines (a skewed buffer splits each across two, shared with the next columns').
struct LineAligned {
    buf: Vec<f32>,
    at: usize,
    len: usize,
}

impl LineAligned {
    /// f32s per 64-byte line.
    const LINE: usize = 16;

    fn zeros(len: usize) -> LineAligned {
        let buf = vec![0f32; len + LineAligned::LINE];
        let at = (buf.as_ptr() as usize / 4).wrapping_neg() % LineAligned::LINE;
        LineAligned { buf, at, len }
    }

    /// `len` elements from the same line: the kept memory when it has room, else new zeros.
    fn fit(&mut self, len: usize) {
        if self.at + len <= self.buf.len() {
            self.len = len;
        } else {
            *self = LineAligned::zeros(len);
        }
    }
}

impl Default for LineAligned {
    fn default() -> LineAligned {
        LineAligned::zeros(0)
    }
}

impl std::ops::Deref for LineAligned {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[self.at..][..self.len]
    }
}

impl std::ops::DerefMut for LineAligned {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[self.at..][..self.len]
    }
}

fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            add_into(row, b);
        }
    }
}

fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// Whether `ISHIZUKI_DUMP` is set (read once), so a layer formats the names of its dumps only
/// then.
fn dumping() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("ISHIZUKI_DUMP").is_some())
}

/// `ISHIZUKI_DUMP=1` prints the last row of each named intermediate, for layer-by-layer
/// comparison with a reference implementation.
fn dump(name: &str, x: &[f32], width: usize) {
    if !dumping() || x.len() < width {
        return;
    }
    let last = &x[x.len() - width..];
    let sum: f64 = last.iter().map(|v| *v as f64).sum();
    eprintln!(
        "{name}: sum {sum:.6} first {:?}",
        &last[..last.len().min(4)]
    );
}

#[cfg(test)]
mod tests {
    use super::LineAligned;

    /// Every buffer starts on a 64-byte line, holds exactly its length, and is zero.
    #[test]
    fn line_aligned_buffers_start_on_a_line() {
        for len in [0, 1, 15, 16, 17, 1000, 512 * 1536] {
            let mut b = LineAligned::zeros(len);
            assert_eq!(b.as_ptr() as usize % 64, 0, "{len}");
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&v| v == 0.0));
            b.iter_mut().for_each(|v| *v = 1.0);
            assert_eq!(b.iter().sum::<f32>(), len as f32);
        }
    }
}
