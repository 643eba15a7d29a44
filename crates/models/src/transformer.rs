//! THE decoder: one forward for every architecture, driven by `TransformerConfig` flags,
//! written against the Backend: it sequences ops and reads back only what it is asked for.
use crate::arch::config_from_gguf;
use crate::config::TransformerConfig;
use crate::kv_cache::KvCache;
use crate::weights::{load_weights, LayerWeights, ModelWeights};
use crate::workspace::{self, Workspace};
use crate::ModelError;
use ishizuki_core::backend::{AttnParams, Candidate, RopeParams};
use ishizuki_core::{Backend, Buffer, Error, ForwardMeta};
use ishizuki_formats::GgufFile;
use std::path::Path;
use std::sync::Arc;

/// Which rows of output a forward returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (decode, end of prefill).
    Last,
    /// Every token's (perplexity, draft verification).
    All,
    /// None (prefill chunks that are not the last).
    None,
}

impl Logits {
    fn rows(self, n: usize) -> Vec<u32> {
        match self {
            Logits::Last => vec![n as u32 - 1],
            Logits::All => (0..n as u32).collect(),
            Logits::None => Vec::new(),
        }
    }
}

pub struct Model {
    pub config: TransformerConfig,
    be: Arc<dyn Backend>,
    weights: ModelWeights,
    file: GgufFile,
    /// The last forward's intermediates, kept for the next (as llama.cpp keeps its compute
    /// buffers): a prefill chunk's are megabytes, whose fresh pages cost faults and zeroing.
    scratch: std::sync::Mutex<Option<Workspace>>,
}

impl Model {
    /// Loads the model at `path` into `be`, which runs every forward of it.
    pub fn load(path: impl AsRef<Path>, be: Arc<dyn Backend>) -> Result<Model, ModelError> {
        let file = GgufFile::open(path).map_err(|e| ModelError::Core(e.into()))?;
        Model::from_gguf(file, be)
    }

    pub fn from_gguf(file: GgufFile, be: Arc<dyn Backend>) -> Result<Model, ModelError> {
        let config = config_from_gguf(&file)?;
        let weights = load_weights(&file, &config, &*be)?;
        Ok(Model {
            config,
            be,
            weights,
            file,
            scratch: Default::default(),
        })
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The backend the weights live in.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.be
    }

    /// A KV cache of `n_ctx` positions in the model's backend.
    pub fn new_cache(&self, n_ctx: usize) -> Result<KvCache, ModelError> {
        Ok(KvCache::new(&*self.be, &self.config, n_ctx)?)
    }

    /// Memory the backend holds for the weights beyond the mapped file (packed copies).
    pub fn backend_bytes(&self) -> usize {
        self.weights.backend_bytes()
    }

    /// Bytes of weights read per decoded token.
    pub fn weight_bytes(&self) -> usize {
        self.file.tensors.iter().map(|t| t.n_bytes as usize).sum()
    }

    /// Runs `tokens` at positions `cache.len()..`, appending to the cache.
    /// Returns `(rows, n_vocab)` logits for the rows `want` selects.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
        let n_vocab = self.config.n_vocab;
        let out = self.forward_with(tokens, cache, want, |be, logits, rows| {
            let mut out = vec![0f32; rows * n_vocab];
            be.read(logits, &mut out)?;
            dump("logits", &out, n_vocab);
            Ok(out)
        })?;
        Ok(out.unwrap_or_default())
    }

    /// As `forward`, reading back only each selected row's argmax (greedy decoding and its
    /// draft verification), computed by the backend.
    pub fn forward_argmax(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        want: Logits,
    ) -> Result<Vec<u32>, ModelError> {
        let n_vocab = self.config.n_vocab;
        let out = self.forward_with(tokens, cache, want, |be, logits, rows| {
            be.argmax(logits, rows, n_vocab)
        })?;
        Ok(out.unwrap_or_default())
    }

    /// As `forward`, reading back only each selected row's `k` best logits (a sampler keeping
    /// the top `k`), selected by the backend.
    pub fn forward_top_k(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        want: Logits,
        k: usize,
    ) -> Result<Vec<Vec<Candidate>>, ModelError> {
        let n_vocab = self.config.n_vocab;
        let out = self.forward_with(tokens, cache, want, |be, logits, rows| {
            be.top_k(logits, rows, n_vocab, k)
        })?;
        Ok(out.unwrap_or_default())
    }

    /// The forward, then `read` of the logits buffer and its row count (not called when no
    /// rows are wanted).
    fn forward_with<T>(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        want: Logits,
        read: impl FnOnce(&dyn Backend, &Buffer, usize) -> ishizuki_core::Result<T>,
    ) -> Result<Option<T>, ModelError> {
        let (n, start) = (tokens.len(), cache.len());
        if n == 0 {
            return Ok(None);
        }
        if start + n > cache.n_ctx() {
            return Err(Error::ContextOverflow {
                n_prompt: start + n,
                n_ctx: cache.n_ctx(),
            }
            .into());
        }
        let be = &*self.be;
        let mut meta = ForwardMeta::new(tokens, start, want.rows(n));
        be.prepare(&mut meta)?;
        // a forward running beside this one (another thread's sequence) makes its own
        let mut kept = self.scratch.try_lock().ok();
        let mut own = None;
        let slot = match kept.as_deref_mut() {
            Some(slot) => slot,
            None => &mut own,
        };
        let ws = workspace::fit(slot, be, &self.config, n, meta.out_rows.len())?;
        be.forward_step(n, &mut || self.ops(&meta, cache, ws))?;
        cache.set_len(start + n);
        match meta.out_rows.len() {
            0 => Ok(None),
            rows => Ok(Some(read(be, &ws.logits, rows)?)),
        }
    }

    /// Every op of one forward, from the embedding to the logits of `meta.out_rows`.
    fn ops(
        &self,
        meta: &ForwardMeta,
        cache: &mut KvCache,
        ws: &mut Workspace,
    ) -> ishizuki_core::Result<()> {
        let (c, be, w) = (&self.config, &*self.be, &self.weights);
        let n = meta.rows();
        be.embed(&w.tok_embd, meta, &mut ws.x)?;
        if let Some(s) = c.embd_scale {
            be.scale(&mut ws.x, n * c.n_embd, s)?;
        }
        self.dump_buffer("inp_embd", &ws.x, n, c.n_embd);
        for (il, lw) in w.layers.iter().enumerate() {
            self.layer(il, lw, meta, cache, ws)?;
        }
        let out_rows = meta.out_rows.len();
        if out_rows == 0 {
            return Ok(());
        }
        // the last layer's FFN output joins the residual
        if !w.layers.is_empty() {
            be.add(&mut ws.x, &ws.attn_out, n * c.n_embd)?;
        }
        be.gather_rows(&ws.x, c.n_embd, meta, &mut ws.head_in)?;
        be.rms_norm(
            &mut ws.head_in,
            out_rows,
            &w.out_norm,
            c.norm_eps,
            c.norm_kind,
        )?;
        be.matmul(w.head(), &ws.head_in, out_rows, &mut ws.logits)?;
        if let Some(cap) = c.final_softcap {
            be.softcap(&mut ws.logits, out_rows * c.n_vocab, cap)?;
        }
        Ok(())
    }

    fn layer(
        &self,
        il: usize,
        lw: &LayerWeights,
        meta: &ForwardMeta,
        cache: &mut KvCache,
        ws: &mut Workspace,
    ) -> ishizuki_core::Result<()> {
        let (c, be) = (&self.config, &*self.be);
        let n = meta.rows();
        let la = c.layers[il];
        let (eps, kind) = (c.norm_eps, c.norm_kind);
        let Workspace {
            x,
            attn_norm,
            q,
            k,
            v,
            kqv,
            attn_out,
            ffn_inp,
            gate,
            up,
            ..
        } = ws;
        // the previous layer's FFN output (left in attn_out) joins the residual in this
        // layer's first norm
        let delta = (il > 0).then_some(&*attn_out);
        be.add_rms_norm(x, delta, attn_norm, n, &lw.attn_norm, eps, kind)?;
        let qkv = [&lw.wq, &lw.wk, &lw.wv];
        be.matmul_multi(&qkv, attn_norm, n, &mut [&mut *q, &mut *k, &mut *v])?;
        for (t, b) in [(&mut *q, &lw.bq), (&mut *k, &lw.bk), (&mut *v, &lw.bv)] {
            if let Some(b) = b {
                be.add_bias(t, n, b)?;
            }
        }
        if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
            be.rms_norm(q, n * c.n_head, qn, eps, kind)?;
            be.rms_norm(k, n * c.n_head_kv, kn, eps, kind)?;
        }
        let rope = RopeParams {
            theta: la.rope_theta,
            freq_scale: 1.0 / la.rope_scale,
            kind: c.rope_kind,
        };
        be.rope_write_kv(q, k, v, c.n_head, &mut cache.store, il, meta, rope)?;
        let params = AttnParams {
            n_head: c.n_head,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            scale: c.attn_scale,
            window: la.window,
            softcap: c.attn_softcap,
        };
        be.attention(q, &cache.store, il, meta, &params, kqv)?;
        be.matmul(&lw.wo, kqv, n, attn_out)?;
        if let Some(w) = &lw.post_attn_norm {
            be.rms_norm(attn_out, n, w, eps, kind)?;
        }
        be.add_rms_norm(x, Some(attn_out), ffn_inp, n, &lw.ffn_norm, eps, kind)?;
        if dumping() {
            self.dump_buffer(&format!("l{il}.attn_residual"), x, n, c.n_embd);
        }
        be.matmul_glu([&lw.w_gate, &lw.w_up], ffn_inp, n, gate, up, c.activation)?;
        let ffn_out = attn_out;
        be.matmul(&lw.w_down, gate, n, ffn_out)?;
        if let Some(w) = &lw.post_ffn_norm {
            be.rms_norm(ffn_out, n, w, eps, kind)?;
        }
        if dumping() {
            let mut out = self.host(x, n * c.n_embd);
            let ffn = self.host(ffn_out, n * c.n_embd);
            out.iter_mut().zip(ffn).for_each(|(a, b)| *a += b);
            dump(&format!("l{il}.out"), &out, c.n_embd);
        }
        Ok(())
    }

    /// A buffer's first `n` values read back (dumps only), empty when the read fails.
    fn host(&self, b: &Buffer, n: usize) -> Vec<f32> {
        let mut out = vec![0f32; n];
        match self.be.read(b, &mut out) {
            Ok(()) => out,
            Err(_) => Vec::new(),
        }
    }

    fn dump_buffer(&self, name: &str, b: &Buffer, rows: usize, width: usize) {
        if dumping() {
            dump(name, &self.host(b, rows * width), width);
        }
    }
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
