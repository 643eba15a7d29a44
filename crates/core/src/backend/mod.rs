//! The Backend trait the decoder is written against, and the handles it passes around.
mod handles;
mod select;

pub use handles::{Buffer, ForwardMeta, KvShape, KvStore, LoadedWeight, WeightRole, WeightSource};
pub use select::{argmax, by_logit_desc, top_candidates, top_k_rows, Candidate, TOP_K_MAX};

use crate::{dtype::GgmlType, Result};
use std::any::Any;

/// A backend's own copy of a weight in a layout of its choosing (rows interleaved for its SIMD
/// kernels, say), made once by `Backend::pack`.
pub struct PackedWeight {
    /// Memory the copy holds.
    pub bytes: usize,
    pub data: Box<dyn Any + Send + Sync>,
    /// A copy of the weight's bytes in the file's own layout, held where the backend reads it
    /// fastest (huge pages, say); views then read `data` from it instead of the file.
    pub resident: Option<crate::huge::HugeSlice>,
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedWeight({} bytes)", self.bytes)
    }
}

/// A 2-D weight as stored: `n_out` rows of `n_in` elements in `ty`'s block layout, and the
/// backend's packed copy of it when it made one.
#[derive(Clone, Copy)]
pub struct WeightView<'a> {
    pub ty: GgmlType,
    pub n_out: usize,
    pub n_in: usize,
    pub data: &'a [u8],
    pub packed: Option<&'a PackedWeight>,
}

impl std::fmt::Debug for WeightView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ty, n) = (self.ty, self.data.len());
        let packed = self.packed.map(|p| p.bytes);
        write!(
            f,
            "WeightView({ty} {}x{}, {n} bytes, packed {packed:?})",
            self.n_out, self.n_in
        )
    }
}

impl<'a> WeightView<'a> {
    /// A view with no packed copy.
    pub fn new(ty: GgmlType, n_out: usize, n_in: usize, data: &'a [u8]) -> WeightView<'a> {
        WeightView {
            ty,
            n_out,
            n_in,
            data,
            packed: None,
        }
    }

    /// Bytes of one row, or a shape error when `n_in` does not fill whole blocks.
    pub fn row_bytes(&self) -> Result<usize> {
        self.ty
            .row_bytes(self.n_in as u64)
            .map(|b| b as usize)
            .ok_or_else(|| {
                crate::Error::Shape(format!(
                    "row of {} elements is not a whole number of {} blocks",
                    self.n_in, self.ty
                ))
            })
    }
}

/// Normalisation flavour: plain RMSNorm multiplies by `w`, Gemma's by `1 + w`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    Rms,
    RmsPlusOne,
}

/// Rotary layout: `Norm` rotates adjacent pairs (llama GGUF, whose q/k are pre-permuted),
/// `Neox` rotates element i with i + head_dim/2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeKind {
    Norm,
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// silu(gate) * up
    SwiGlu,
    /// gelu_tanh(gate) * up
    GeGluTanh,
}

/// One layer's rotary embedding: base, linear scaling (1.0 = none) and layout.
#[derive(Clone, Copy, Debug)]
pub struct RopeParams {
    pub theta: f32,
    pub freq_scale: f32,
    pub kind: RopeKind,
}

#[derive(Clone, Copy, Debug)]
pub struct AttnParams {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub scale: f32,
    /// Keys at positions `> pos - window` are visible (sliding window), `None` = full causal.
    pub window: Option<usize>,
    pub softcap: Option<f32>,
}

/// The op tier every backend provides. Everything a forward touches is the backend's: weights
/// it loaded, activation buffers it allocated (row-major `rows x width` f32; ops name their
/// rows, a buffer may hold more), KV storage it allocated. The decoder only sequences ops and
/// reads back what it asks for.
pub trait Backend: Send + Sync {
    fn name(&self) -> String;

    /// The fewest rows from which a forward gives each row bit-identical results however the
    /// rows are grouped (smaller forwards may take other kernels). The engine runs no prefill
    /// forward smaller than this, so a cached prompt answers exactly as an uncached one.
    fn batch_invariant_rows(&self) -> usize {
        1
    }

    /// The most rows a forward may have such that each row's results are bit-identical to a
    /// one-row forward of that row: draft verification forwards stay within it.
    fn verify_rows(&self) -> usize {
        1
    }

    /// Loads a weight, choosing its kernel now; the backend hands `consumed` each part of the
    /// source's bytes it has finished reading, so the caller can let go of it.
    fn load_weight(
        &self,
        src: &WeightSource,
        consumed: &mut dyn FnMut(&[u8]),
    ) -> Result<LoadedWeight>;

    /// A buffer holding `data` (a norm weight, a bias).
    fn load_vector(&self, data: &[f32]) -> Result<Buffer>;

    /// A zeroed activation buffer of `len` f32s.
    fn alloc(&self, len: usize) -> Result<Buffer>;

    /// Zeroed KV storage of `shape`; out of memory is an error.
    fn alloc_kv(&self, shape: KvShape) -> Result<KvStore>;

    /// Makes the backend's copy of a forward's metadata (uploads it), once, before its ops.
    fn prepare(&self, meta: &mut ForwardMeta) -> Result<()> {
        let _ = meta;
        Ok(())
    }

    /// Runs one forward's ops (`record`, which calls this backend's ops): the fused tier. A
    /// backend may run it as a whole (capture a graph keyed by `rows`, replay it) instead.
    fn forward_step(&self, rows: usize, record: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let _ = rows;
        record()
    }

    /// `out (rows, n_out) = x (rows, n_in) . w^T`, any number of rows.
    fn matmul(&self, w: &LoadedWeight, x: &Buffer, rows: usize, out: &mut Buffer) -> Result<()>;

    /// Several matmuls of the same input `x` (q/k/v), `outs[i]` for `ws[i]`; a backend may
    /// quantize `x` once and run them in one parallel region.
    fn matmul_multi(
        &self,
        ws: &[&LoadedWeight],
        x: &Buffer,
        rows: usize,
        outs: &mut [&mut Buffer],
    ) -> Result<()> {
        check_outputs(ws.len(), outs.len())?;
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            self.matmul(w, x, rows, out)?;
        }
        Ok(())
    }

    /// The FFN's gated product: `gate (rows, n_out) = act(x . ws[0]^T) * (x . ws[1]^T)`, with
    /// `up` scratch of gate's size; a backend may gate the products as they come out.
    fn matmul_glu(
        &self,
        ws: [&LoadedWeight; 2],
        x: &Buffer,
        rows: usize,
        gate: &mut Buffer,
        up: &mut Buffer,
        act: Activation,
    ) -> Result<()> {
        self.matmul_multi(&ws, x, rows, &mut [&mut *gate, &mut *up])?;
        self.glu(gate, up, rows * ws[0].n_out, act)
    }

    /// Gathers the rows `meta.tokens` of an embedding table as f32 into `out (rows, n_in)`.
    fn embed(&self, table: &LoadedWeight, meta: &ForwardMeta, out: &mut Buffer) -> Result<()>;

    /// Row-wise RMS normalisation of `x (rows, w.len())` in place.
    fn rms_norm(
        &self,
        x: &mut Buffer,
        rows: usize,
        w: &Buffer,
        eps: f32,
        kind: NormKind,
    ) -> Result<()>;

    /// The residual add and the next norm in one pass: `x += delta` when given, then `out` =
    /// `x` RMS-normalised; `x`, `delta` and `out` are `(rows, w.len())`.
    #[allow(clippy::too_many_arguments)]
    fn add_rms_norm(
        &self,
        x: &mut Buffer,
        delta: Option<&Buffer>,
        out: &mut Buffer,
        rows: usize,
        w: &Buffer,
        eps: f32,
        kind: NormKind,
    ) -> Result<()>;

    /// `x (rows, b.len()) += b` on every row.
    fn add_bias(&self, x: &mut Buffer, rows: usize, b: &Buffer) -> Result<()>;

    /// `x[..n] += y[..n]`.
    fn add(&self, x: &mut Buffer, y: &Buffer, n: usize) -> Result<()>;

    /// `x[..n] *= s`.
    fn scale(&self, x: &mut Buffer, n: usize, s: f32) -> Result<()>;

    /// `x[..n] = cap * tanh(x / cap)`.
    fn softcap(&self, x: &mut Buffer, n: usize, cap: f32) -> Result<()>;

    /// Rotates `x (meta.rows(), n_head, head_dim)` in place at `meta.positions`, multiplied
    /// by `freq_scale` (linear rope scaling; 1.0 = none).
    #[allow(clippy::too_many_arguments)]
    fn rope(
        &self,
        x: &mut Buffer,
        n_head: usize,
        head_dim: usize,
        meta: &ForwardMeta,
        theta: f32,
        freq_scale: f32,
        kind: RopeKind,
    ) -> Result<()>;

    /// Stores `k` and `v` `(meta.rows(), n_head_kv * head_dim)` in `layer` of `kv` at
    /// `meta.positions`.
    fn write_kv(
        &self,
        kv: &mut KvStore,
        layer: usize,
        k: &Buffer,
        v: &Buffer,
        meta: &ForwardMeta,
    ) -> Result<()>;

    /// `rope` on `q (rows, n_head, head_dim)` and on `k`, then `write_kv` of `k` and `v`
    /// (their heads and head_dim those of `kv`): one op, so a backend may fuse the three.
    #[allow(clippy::too_many_arguments)]
    fn rope_write_kv(
        &self,
        q: &mut Buffer,
        k: &mut Buffer,
        v: &Buffer,
        n_head: usize,
        kv: &mut KvStore,
        layer: usize,
        meta: &ForwardMeta,
        rope: RopeParams,
    ) -> Result<()> {
        let (n_head_kv, head_dim) = (kv.shape.n_head_kv, kv.shape.head_dim);
        let RopeParams {
            theta,
            freq_scale,
            kind,
        } = rope;
        self.rope(q, n_head, head_dim, meta, theta, freq_scale, kind)?;
        self.rope(k, n_head_kv, head_dim, meta, theta, freq_scale, kind)?;
        self.write_kv(kv, layer, k, v, meta)
    }

    /// Causal attention of `q (meta.rows(), n_head, head_dim)` over `layer`'s cached keys and
    /// values `0..meta.n_kv`; row r sits at `meta.positions[r]`. Writes `out` like `q`.
    fn attention(
        &self,
        q: &Buffer,
        kv: &KvStore,
        layer: usize,
        meta: &ForwardMeta,
        p: &AttnParams,
        out: &mut Buffer,
    ) -> Result<()>;

    /// `gate[..n] = act(gate) * up`, elementwise.
    fn glu(&self, gate: &mut Buffer, up: &Buffer, n: usize, act: Activation) -> Result<()>;

    /// Copies the rows `meta.out_rows` of `src (rows, width)` to `dst (out_rows, width)`.
    fn gather_rows(
        &self,
        src: &Buffer,
        width: usize,
        meta: &ForwardMeta,
        dst: &mut Buffer,
    ) -> Result<()>;

    /// Reads `x[..out.len()]` back into host memory.
    fn read(&self, x: &Buffer, out: &mut [f32]) -> Result<()>;

    /// The index of each row's largest value in `x (rows, width)` (the first of equals).
    fn argmax(&self, x: &Buffer, rows: usize, width: usize) -> Result<Vec<u32>>;

    /// Each row's `k` (at most [`TOP_K_MAX`]) best values in `x (rows, width)`, exactly as
    /// [`top_candidates`] picks them, for a sampler that keeps no more (top-k).
    fn top_k(
        &self,
        x: &Buffer,
        rows: usize,
        width: usize,
        k: usize,
    ) -> Result<Vec<Vec<Candidate>>> {
        check_top_k(k)?;
        let mut host = vec![0f32; rows * width];
        self.read(x, &mut host)?;
        Ok(top_k_rows(&host, rows, width, k))
    }
}

/// A `top_k` wider than a backend serves is the caller's error.
pub fn check_top_k(k: usize) -> Result<()> {
    if k > TOP_K_MAX {
        return Err(crate::Error::Shape(format!(
            "top_k: k = {k} is above the {TOP_K_MAX} a backend selects"
        )));
    }
    Ok(())
}

/// A matmul over several weights gets one output per weight.
pub fn check_outputs(weights: usize, outputs: usize) -> Result<()> {
    if weights != outputs {
        return Err(crate::Error::Shape(format!(
            "{weights} weights for {outputs} outputs"
        )));
    }
    Ok(())
}

/// A buffer shape error naming the op: `need` f32s of a buffer holding `have`.
pub fn too_small(op: &str, need: usize, have: usize) -> crate::Error {
    crate::Error::Shape(format!("{op}: needs {need} f32s, the buffer holds {have}"))
}
