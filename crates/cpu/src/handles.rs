//! The CPU's side of the backend handles: activations in cache-line-aligned host memory,
//! weights read in place from the mapped file (or their packed copy), KV in huge pages.
use half::f16;
use half::slice::HalfFloatSliceExt;
use ishizuki_core::backend::too_small;
use ishizuki_core::huge::HugeBuf;
use ishizuki_core::{Buffer, Error, KvShape, KvStore, PackedWeight, Result, WeightView};
use std::any::Any;
use std::sync::Arc;

/// Zeroed f32s starting on a cache line: a matmul's threads write their 16 outputs of a row
/// as whole lines (a skewed buffer splits each across two, shared with the next columns').
pub struct LineAligned {
    buf: Vec<f32>,
    at: usize,
    len: usize,
}

impl LineAligned {
    /// f32s per 64-byte line.
    const LINE: usize = 16;

    pub fn zeros(len: usize) -> LineAligned {
        let buf = vec![0f32; len + LineAligned::LINE];
        let at = (buf.as_ptr() as usize / 4).wrapping_neg() % LineAligned::LINE;
        LineAligned { buf, at, len }
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

/// The first `n` f32s of a CPU buffer.
pub fn f32s<'a>(b: &'a Buffer, n: usize, op: &str) -> Result<&'a [f32]> {
    let data: &LineAligned = b.get()?;
    data.get(..n).ok_or_else(|| too_small(op, n, data.len()))
}

/// The first `n` f32s of a CPU buffer, to write.
pub fn f32s_mut<'a>(b: &'a mut Buffer, n: usize, op: &str) -> Result<&'a mut [f32]> {
    let data: &mut LineAligned = b.get_mut()?;
    let have = data.len();
    data.get_mut(..n).ok_or_else(|| too_small(op, n, have))
}

/// A weight as the CPU reads it: the file's bytes in place (kept mapped by `owner`), and the
/// packed copy made at load.
pub struct CpuWeight {
    data: *const u8,
    len: usize,
    _owner: Arc<dyn Any + Send + Sync>,
    pub packed: Option<PackedWeight>,
}

// SAFETY: `data` points into memory `_owner` keeps mapped and never writes.
unsafe impl Send for CpuWeight {}
unsafe impl Sync for CpuWeight {}

impl CpuWeight {
    pub fn new(
        data: &[u8],
        owner: Arc<dyn Any + Send + Sync>,
        packed: Option<PackedWeight>,
    ) -> CpuWeight {
        CpuWeight {
            data: data.as_ptr(),
            len: data.len(),
            _owner: owner,
            packed,
        }
    }

    /// The bytes in the file's layout: the resident copy when packing made one, else the file.
    pub fn bytes(&self) -> &[u8] {
        match self.packed.as_ref().and_then(|p| p.resident.as_deref()) {
            Some(copy) => copy,
            // SAFETY: `_owner` keeps these bytes mapped and unmoved while `self` lives.
            None => unsafe { std::slice::from_raw_parts(self.data, self.len) },
        }
    }
}

/// The view the kernels take of a loaded weight.
pub fn view(w: &ishizuki_core::LoadedWeight) -> Result<WeightView<'_>> {
    let cpu: &CpuWeight = w.get()?;
    Ok(WeightView {
        packed: cpu.packed.as_ref(),
        ..WeightView::new(w.ty, w.n_out, w.n_in, cpu.bytes())
    })
}

/// `(n_layer, 2, n_head_kv, capacity, head_dim)` f16: per layer keys then values, head-major,
/// so decode attention streams each head's positions. Huge pages: decode at depth streams all
/// of it once per token, as it does the weights.
pub struct CpuKv {
    data: HugeBuf,
}

pub fn alloc_kv(shape: KvShape) -> Result<KvStore> {
    let too_big = || {
        Error::Backend(format!(
            "a KV cache of {} positions x {} layers does not fit in memory",
            shape.capacity, shape.n_layer
        ))
    };
    let bytes = shape
        .n_elements()
        .and_then(|n| n.checked_mul(2))
        .ok_or_else(too_big)?;
    let data = HugeBuf::zeroed(bytes).ok_or_else(too_big)?;
    Ok(KvStore::new(shape, bytes, CpuKv { data }))
}

/// Layer `layer`'s keys and values, each `(n_head_kv, capacity, head_dim)`.
pub fn kv_layer(kv: &KvStore, layer: usize) -> Result<(&[f16], &[f16])> {
    let s = kv.shape;
    let cpu: &CpuKv = kv.get()?;
    let per = s.capacity * s.n_head_kv * s.head_dim;
    let all: &[f16] = bytemuck::cast_slice(&cpu.data);
    let layer = all
        .get(2 * layer * per..2 * (layer + 1) * per)
        .ok_or_else(|| Error::Shape(format!("KV layer {layer} of {}", s.n_layer)))?;
    Ok(layer.split_at(per))
}

/// Stores rows `(rows, n_head_kv * head_dim)` of keys and values for `layer` from position
/// `pos` on.
pub fn write_kv(kv: &mut KvStore, layer: usize, pos: usize, k: &[f32], v: &[f32]) -> Result<()> {
    let s = kv.shape;
    let (hd, kv_dim) = (s.head_dim, s.n_head_kv * s.head_dim);
    let rows = k.len() / kv_dim.max(1);
    if layer >= s.n_layer || pos + rows > s.capacity || k.len() != v.len() {
        return Err(Error::Shape(format!(
            "KV write of {rows} rows at {pos} into layer {layer} of {} x {}",
            s.n_layer, s.capacity
        )));
    }
    let per = s.capacity * kv_dim;
    let cpu: &mut CpuKv = kv.get_mut()?;
    let all: &mut [f16] = bytemuck::cast_slice_mut(&mut cpu.data);
    let (kc, vc) = all[2 * layer * per..][..2 * per].split_at_mut(per);
    for (cache, rows) in [(kc, k), (vc, v)] {
        for (r, row) in rows.chunks_exact(kv_dim).enumerate() {
            for (h, src) in row.chunks_exact(hd).enumerate() {
                let at = (h * s.capacity + pos + r) * hd;
                // one F16C conversion per slice, not a feature check per element
                cache[at..at + hd].convert_from_f32_slice(src);
            }
        }
    }
    Ok(())
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
