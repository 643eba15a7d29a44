//! The KV write fused with rope, and decode and prefill attention over the f16 KV planes:
//! split-K for few rows, its partials merged in split order.
use crate::device::{grown, launch_1d, DevKv};
use crate::kernels::ATTN_HEAD_VARIANTS;
use crate::step::Arg;
use crate::{check_kv, CudaBackend, ATTN_MAX_HEAD_DIM, ATTN_MAX_SPLITS, ATTN_MIN_CHUNK};
use crate::{MERGE_THREADS, Q8_MAX_ROWS, ROW_THREADS};
use cudarc::driver::LaunchConfig;
use ishizuki_core::backend::{AttnParams, RopeKind, RopeParams};
use ishizuki_core::{Buffer, Error, ForwardMeta, KvStore, Result};

impl CudaBackend {
    /// `Backend::attention`: shapes checked, then the split-K kernel and, with several
    /// splits, their merge.
    pub(crate) fn split_k_attention(
        &self,
        q: &Buffer,
        kv: &KvStore,
        layer: usize,
        meta: &ForwardMeta,
        p: &AttnParams,
        out: &mut Buffer,
    ) -> Result<()> {
        let shape = kv.shape;
        check_kv(&shape, layer, meta)?;
        if p.head_dim != shape.head_dim
            || p.n_head_kv != shape.n_head_kv
            || p.n_head_kv == 0
            || !p.n_head.is_multiple_of(p.n_head_kv)
        {
            return Err(Error::Shape(format!(
                "attention: {p:?} over a KV cache of {shape:?}"
            )));
        }
        if p.head_dim == 0 || p.head_dim > ATTN_MAX_HEAD_DIM {
            return Err(Error::Backend(format!(
                "cuda attention: head_dim {} is not in 1..={ATTN_MAX_HEAD_DIM}",
                p.head_dim
            )));
        }
        let rows = meta.rows();
        let n = rows * p.n_head * p.head_dim;
        let qp = self.buf(q, n, "attention")?;
        let op = self.buf(out, n, "attention")?;
        if rows == 0 {
            return Ok(());
        }
        let (k_plane, v_plane) = self.planes(kv.get::<DevKv>()?, layer);
        let m = self.meta_ptrs(meta)?;
        let (chunk, splits) = attention_splits(shape.capacity, meta.n_kv, rows);
        let part = if splits > 1 {
            self.attn_partials(splits * rows * p.n_head * (p.head_dim + 2))?
        } else {
            op
        };
        let window = p.window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
        // decode rows leave their 8-bit form for the output matmul (the scratch held so no
        // other quantization lands between), in blocks of 32 that never straddle two heads
        let slot = self.q8_scratch.lock().unwrap_or_else(|e| e.into_inner());
        let q8 = slot
            .as_ref()
            .filter(|s| self.q8_rows(rows) && p.head_dim.is_multiple_of(32) && s.n_in >= n / rows)
            .map(|s| (self.ptr(&s.q), self.ptr(&s.d)));
        let (qp8, dp8) = q8.unwrap_or((0, 0));
        let args = [
            Arg::U64(qp),
            Arg::U64(k_plane),
            Arg::U64(v_plane),
            Arg::U64(op),
            Arg::U64(part),
            Arg::U64(m.positions),
            Arg::U64(m.n_kv),
            Arg::I32(shape.capacity.min(i32::MAX as usize) as i32),
            Arg::I32(p.n_head as i32),
            Arg::I32(p.n_head_kv as i32),
            Arg::I32(p.head_dim as i32),
            Arg::F32(p.scale),
            Arg::I32(window),
            Arg::F32(p.softcap.unwrap_or(0.0)),
            Arg::I32(chunk.min(i32::MAX as usize) as i32),
            Arg::U64(qp8),
            Arg::U64(dp8),
        ];
        // a block per KV head and group of query heads sharing it
        let (variant, heads) = attention_variant(p.n_head / p.n_head_kv);
        let groups = (p.n_head / p.n_head_kv).div_ceil(heads);
        let cfg = LaunchConfig {
            grid_dim: ((p.n_head_kv * groups) as u32, rows as u32, splits as u32),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: shapes checked against the cache and the buffers above; part holds splits x
        // rows x n_head x (head_dim + 2); the scratch, when given, Q8_MAX_ROWS >= rows of n
        unsafe { self.go(&self.ops.attention[variant], cfg, &args)? };
        if splits > 1 {
            self.merge_splits(part, op, rows, p, splits, (qp8, dp8))?;
        }
        if q8.is_some() {
            self.launcher.set_quantized((op, rows, n / rows));
        }
        Ok(())
    }

    /// attention_merge_f32 over `splits` partials into `op`, and into the 8-bit scratch
    /// `q8` when its addresses are not 0.
    fn merge_splits(
        &self,
        part: u64,
        op: u64,
        rows: usize,
        p: &AttnParams,
        splits: usize,
        q8: (u64, u64),
    ) -> Result<()> {
        let args = [
            Arg::U64(part),
            Arg::U64(op),
            Arg::I32(p.n_head as i32),
            Arg::I32(p.head_dim as i32),
            Arg::I32(splits as i32),
            Arg::U64(q8.0),
            Arg::U64(q8.1),
        ];
        let cfg = LaunchConfig {
            grid_dim: (p.n_head as u32, rows as u32, 1),
            block_dim: (MERGE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: part holds the splits' partials written above; out rows x n_head x head_dim
        unsafe { self.go(&self.ops.attention_merge, cfg, &args) }
    }

    /// `Backend::rope_write_kv` in one launch (`rope_kv_f32_f16`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fused_rope_write_kv(
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
        let shape = kv.shape;
        let rows = meta.rows();
        let w = self.kv_write(kv, layer, k, v, meta, "rope_write_kv")?;
        let qp = self.buf(q, rows * n_head * shape.head_dim, "rope_write_kv")?;
        let args = [
            Arg::U64(qp),
            Arg::U64(w.k),
            Arg::U64(w.v),
            Arg::U64(w.k_plane),
            Arg::U64(w.v_plane),
            Arg::U64(w.positions),
            Arg::I32(rows as i32),
            Arg::I32(n_head as i32),
            Arg::I32(shape.n_head_kv as i32),
            Arg::I32(shape.head_dim as i32),
            Arg::F32(rope.theta),
            Arg::F32(rope.freq_scale),
            Arg::I32((rope.kind == RopeKind::Neox) as i32),
        ];
        let pairs = rows * (n_head + shape.n_head_kv) * (shape.head_dim / 2);
        // SAFETY: q, k, v hold their rows (checked); every position is below the capacity
        unsafe { self.go(&self.ops.rope_kv, launch_1d(pairs as u64), &args) }
    }

    /// What a K/V write of `meta`'s rows into `layer` addresses, checked: `k` and `v` (rows,
    /// n_head_kv * head_dim) hold them, every position is below the capacity.
    pub(crate) fn kv_write(
        &self,
        kv: &KvStore,
        layer: usize,
        k: &Buffer,
        v: &Buffer,
        meta: &ForwardMeta,
        op: &str,
    ) -> Result<KvWrite> {
        let shape = kv.shape;
        check_kv(&shape, layer, meta)?;
        let n = meta.rows() * shape.n_head_kv * shape.head_dim;
        let (k, v) = (self.buf(k, n, op)?, self.buf(v, n, op)?);
        let (k_plane, v_plane) = self.planes(kv.get::<DevKv>()?, layer);
        let positions = self.meta_ptrs(meta)?.positions;
        Ok(KvWrite {
            k,
            v,
            k_plane,
            v_plane,
            positions,
        })
    }

    /// The split-K partials' address, grown to `n` f32s.
    fn attn_partials(&self, n: usize) -> Result<u64> {
        let mut slot = self.attn_part.lock().unwrap_or_else(|e| e.into_inner());
        let _hold = self.launcher.hold();
        Ok(self.ptr(grown(&self.stream, &mut slot, n)?))
    }
}

/// Device addresses of a K/V write (`CudaBackend::kv_write`).
pub(crate) struct KvWrite {
    pub k: u64,
    pub v: u64,
    pub k_plane: u64,
    pub v_plane: u64,
    pub positions: u64,
}

/// The attention entry point (its ATTN_HEAD_VARIANTS index) and heads a block for `group`
/// query heads a KV head: the fewest that hold them, the most in several blocks past that.
fn attention_variant(group: usize) -> (usize, usize) {
    let i = ATTN_HEAD_VARIANTS
        .iter()
        .position(|&g| g >= group)
        .unwrap_or(ATTN_HEAD_VARIANTS.len() - 1);
    (i, ATTN_HEAD_VARIANTS[i])
}

/// Split-K attention's keys per split and splits: few rows (decode, verification) split the
/// keys in chunks fixed by the cache's capacity, so a row's splits never depend on its batch
/// or on n_kv; prefill, with blocks enough in its rows, takes all keys in one split.
fn attention_splits(capacity: usize, n_kv: usize, rows: usize) -> (usize, usize) {
    if rows > Q8_MAX_ROWS {
        return (capacity, 1);
    }
    let chunk = ATTN_MIN_CHUNK.max(capacity.div_ceil(ATTN_MAX_SPLITS).next_power_of_two());
    (chunk, n_kv.min(capacity).div_ceil(chunk).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_takes_the_fewest_heads_that_hold_its_group() {
        let heads = |g| attention_variant(g).1;
        assert_eq!([1, 2, 3, 4, 5, 7, 8].map(heads), [1, 2, 4, 4, 8, 8, 8]);
        assert_eq!(heads(16), 8, "two blocks of 8");
        for g in 1..40 {
            let (i, h) = attention_variant(g);
            assert_eq!(ATTN_HEAD_VARIANTS[i], h);
        }
    }

    #[test]
    fn attention_splits_depend_on_capacity_not_on_rows_and_stay_bounded() {
        for capacity in [1, 63, 64, 4224, 32768, 131072, 1 << 20] {
            let (chunk, _) = attention_splits(capacity, 1, 1);
            assert!(
                chunk >= ATTN_MIN_CHUNK && chunk.is_power_of_two(),
                "{capacity}"
            );
            for n_kv in [1, 64, 65, capacity / 2, capacity] {
                for rows in [1, 2, 16] {
                    let (c, splits) = attention_splits(capacity, n_kv, rows);
                    assert_eq!(c, chunk, "the chunk of {capacity} keys moved with rows");
                    assert!((1..=ATTN_MAX_SPLITS).contains(&splits), "{capacity} {n_kv}");
                    assert!(c * splits >= n_kv.min(capacity), "keys left out");
                }
            }
        }
        assert_eq!(attention_splits(4224, 4097, 1), (64, 65));
        assert!(
            ATTN_MAX_SPLITS <= MERGE_THREADS as usize,
            "the merge's thread per split"
        );
        assert_eq!(attention_splits(4224, 4097, 512), (4224, 1));
    }
}
