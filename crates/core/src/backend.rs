use crate::{dtype::GgmlType, Result};
use half::f16;
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

/// The op tier every backend provides. Activations are row-major `rows x width` f32.
/// The KV cache layout is head-major `(n_head_kv, capacity, head_dim)` in f16: each head's
/// positions are contiguous, so decode attention streams them.
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

    /// A copy of `w` in this backend's preferred layout, if it has one for `w`'s type; made once
    /// at load, handed back in `WeightView::packed` to every op that takes `w`. The backend
    /// hands `consumed` each part of `w.data` it has finished reading, so that the caller can
    /// let go of it while the rest is packed.
    fn pack(&self, w: &WeightView, consumed: &mut dyn FnMut(&[u8])) -> Option<PackedWeight> {
        let _ = (w, consumed);
        None
    }

    /// `out (rows, n_out) = x (rows, n_in) . w^T`, any number of rows.
    fn matmul(&self, w: &WeightView, x: &[f32], rows: usize, out: &mut [f32]) -> Result<()>;

    /// Several matmuls of the same input `x` (q/k/v, gate/up), `outs[i]` for `ws[i]`; a backend
    /// may quantize `x` once and run them in one parallel region.
    fn matmul_multi(
        &self,
        ws: &[WeightView],
        x: &[f32],
        rows: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        if ws.len() != outs.len() {
            return Err(crate::Error::Shape(format!(
                "{} weights for {} outputs",
                ws.len(),
                outs.len()
            )));
        }
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            self.matmul(w, x, rows, out)?;
        }
        Ok(())
    }

    /// Gathers the rows `ids` of an embedding table as f32 into `out (ids.len(), n_in)`.
    fn embed(&self, table: &WeightView, ids: &[u32], out: &mut [f32]) -> Result<()>;

    /// Row-wise RMS normalisation of `x (rows, w.len())` in place.
    fn rms_norm(&self, x: &mut [f32], w: &[f32], eps: f32, kind: NormKind);

    /// The residual add and the next norm in one pass: `x += delta` when given, then `out` =
    /// `x` RMS-normalised (`rms_norm`); `x`, `delta` and `out` are `(rows, w.len())`.
    #[allow(clippy::too_many_arguments)]
    fn add_rms_norm(
        &self,
        x: &mut [f32],
        delta: Option<&[f32]>,
        out: &mut [f32],
        w: &[f32],
        eps: f32,
        kind: NormKind,
    ) {
        if let Some(delta) = delta {
            x.iter_mut().zip(delta).for_each(|(a, b)| *a += b);
        }
        out.copy_from_slice(x);
        self.rms_norm(out, w, eps, kind);
    }

    /// Rotates `x (rows, n_head, head_dim)` in place; `positions[r]` is row r's position,
    /// multiplied by `freq_scale` (linear rope scaling; 1.0 = none).
    #[allow(clippy::too_many_arguments)]
    fn rope(
        &self,
        x: &mut [f32],
        n_head: usize,
        head_dim: usize,
        positions: &[u32],
        theta: f32,
        freq_scale: f32,
        kind: RopeKind,
    );

    /// Causal attention of `q (rows, n_head, head_dim)` over cached keys/values `0..n_kv`
    /// (`k` and `v` each `(n_head_kv, capacity, head_dim)`, capacity >= n_kv);
    /// query row r sits at `positions[r]` (< n_kv). Writes `out (rows, n_head, head_dim)`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &[f32],
        k: &[f16],
        v: &[f16],
        n_kv: usize,
        positions: &[u32],
        p: &AttnParams,
        out: &mut [f32],
    ) -> Result<()>;

    /// `gate = act(gate) * up`, elementwise.
    fn glu(&self, gate: &mut [f32], up: &[f32], act: Activation);

    /// The FFN's gated product in one call: `gate (rows, n_out) = act(x . ws[0]^T) *
    /// (x . ws[1]^T)`, with `up` scratch of gate's size; a backend may gate the products as
    /// they come out instead of writing both to memory first.
    #[allow(clippy::too_many_arguments)]
    fn matmul_glu(
        &self,
        ws: &[WeightView; 2],
        x: &[f32],
        rows: usize,
        gate: &mut [f32],
        up: &mut [f32],
        act: Activation,
    ) -> Result<()> {
        self.matmul_multi(ws, x, rows, &mut [&mut *gate, &mut *up])?;
        self.glu(gate, up, act);
        Ok(())
    }
}
