//! CPU backend: persistent thread pool, runtime-dispatched SIMD, quantized matmul, attention.
/// Most rows of a forward whose every row is bit-identical to a one-row forward of it: draft
/// verification stays within this, so drafting never changes a greedy token. One packed
/// kernel call covers 16 rows; a 17th would read every weight again.
pub const VERIFY_ROWS: usize = 16;

pub mod amx;
pub mod attention;
pub mod gemm;
pub mod gemv;
pub mod handles;
pub mod kernels;
pub mod matmul;
pub mod membw;
pub mod ops;
pub mod packed;
pub mod pool;
#[cfg(test)]
mod row_invariance;
pub mod simd;
#[cfg(test)]
mod test_rng;
pub mod trace;
pub mod vmath;

use handles::{f32s, f32s_mut, view, CpuWeight, LineAligned};
use ishizuki_core::backend::{Activation, AttnParams, NormKind, RopeKind};
use ishizuki_core::huge::HugeArena;
use ishizuki_core::{
    Backend, Buffer, ForwardMeta, KvShape, KvStore, LoadedWeight, Result, WeightSource,
};
use pool::ThreadPool;

/// Elements per task of the row-wise and elementwise ops (smaller ones run on the caller).
const PAR_ELEMENTS: usize = 1 << 15;

pub struct CpuBackend {
    pool: ThreadPool,
    /// Dequantize every weight to f32 instead of quantizing activations (reference accuracy).
    exact: bool,
    /// Huge-page memory the packed weights are carved from.
    arena: HugeArena,
}

impl CpuBackend {
    /// `n_threads` = 0 picks the number of available cores.
    pub fn new(n_threads: usize) -> CpuBackend {
        let n = if n_threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            n_threads
        };
        CpuBackend {
            pool: ThreadPool::new(n),
            exact: false,
            arena: HugeArena::default(),
        }
    }

    /// A backend whose matmuls dequantize weights to f32 and never quantize activations: slower,
    /// closest to an fp32 reference.
    pub fn exact(n_threads: usize) -> CpuBackend {
        CpuBackend {
            exact: true,
            ..CpuBackend::new(n_threads)
        }
    }

    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Read bandwidth in GB/s over `bytes` with this backend's threads.
    pub fn read_bandwidth(&self, bytes: usize) -> f64 {
        membw::read_bandwidth(&self.pool, bytes, 3)
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        format!("cpu {} x{}", simd::tier().name(), self.n_threads())
    }

    /// From `gemm::MIN_ROWS` rows on every quantized matmul takes the GEMM, which agrees row for
    /// row however rows are grouped; fewer rows take the per-row paths, which round differently
    /// from the GEMM (but exactly like one-row forwards: `verify_rows`).
    fn batch_invariant_rows(&self) -> usize {
        gemm::MIN_ROWS
    }

    fn verify_rows(&self) -> usize {
        VERIFY_ROWS
    }

    fn load_weight(
        &self,
        src: &WeightSource,
        consumed: &mut dyn FnMut(&[u8]),
    ) -> Result<LoadedWeight> {
        let w = &src.view;
        matmul::check_supported(w.ty).map_err(|_| ishizuki_core::Error::UnsupportedWeight {
            tensor: src.name.to_string(),
            ty: w.ty,
            backend: "cpu",
        })?;
        // validates the shape against the bytes, as every op on it will need
        if w.data.len() != w.row_bytes()? * w.n_out {
            return Err(ishizuki_core::Error::Shape(format!(
                "{}: {} bytes for {} rows of {} {}",
                src.name,
                w.data.len(),
                w.n_out,
                w.n_in,
                w.ty
            )));
        }
        // the exact backend multiplies the file's layout in f32
        let packed = match src.role.matmul && !self.exact {
            true => packed::pack(w, &self.arena, &self.pool, consumed),
            false => None,
        };
        let bytes = packed.as_ref().map_or(0, |p| p.bytes);
        let cpu = CpuWeight::new(w.data, src.owner.clone(), packed);
        Ok(LoadedWeight::new(w.ty, w.n_out, w.n_in, bytes, cpu))
    }

    fn load_vector(&self, data: &[f32]) -> Result<Buffer> {
        let mut b = LineAligned::zeros(data.len());
        b.copy_from_slice(data);
        Ok(Buffer::new(data.len(), b))
    }

    fn alloc(&self, len: usize) -> Result<Buffer> {
        Ok(Buffer::new(len, LineAligned::zeros(len)))
    }

    fn alloc_kv(&self, shape: KvShape) -> Result<KvStore> {
        handles::alloc_kv(shape)
    }

    fn matmul(&self, w: &LoadedWeight, x: &Buffer, rows: usize, out: &mut Buffer) -> Result<()> {
        let _op = trace::span("matmul");
        let x = f32s(x, rows * w.n_in, "matmul")?;
        let out = f32s_mut(out, rows * w.n_out, "matmul")?;
        matmul::matmul(&self.pool, &view(w)?, x, rows, out, self.exact)
    }

    fn matmul_multi(
        &self,
        ws: &[&LoadedWeight],
        x: &Buffer,
        rows: usize,
        outs: &mut [&mut Buffer],
    ) -> Result<()> {
        let _op = trace::span("matmul_multi");
        // before the zip below, which would drop the unmatched outputs
        ishizuki_core::backend::check_outputs(ws.len(), outs.len())?;
        let n_in = ws.first().map_or(0, |w| w.n_in);
        let x = f32s(x, rows * n_in, "matmul_multi")?;
        let views = ws.iter().map(|w| view(w)).collect::<Result<Vec<_>>>()?;
        let mut outs = (outs.iter_mut().zip(ws))
            .map(|(o, w)| f32s_mut(o, rows * w.n_out, "matmul_multi"))
            .collect::<Result<Vec<_>>>()?;
        matmul::matmul_multi(&self.pool, &views, x, rows, &mut outs, self.exact)
    }

    fn matmul_glu(
        &self,
        ws: [&LoadedWeight; 2],
        x: &Buffer,
        rows: usize,
        gate: &mut Buffer,
        up: &mut Buffer,
        act: Activation,
    ) -> Result<()> {
        let _op = trace::span("matmul_glu");
        let x = f32s(x, rows * ws[0].n_in, "matmul_glu")?;
        let views = [view(ws[0])?, view(ws[1])?];
        let gate = f32s_mut(gate, rows * ws[0].n_out, "matmul_glu")?;
        let up = f32s_mut(up, rows * ws[1].n_out, "matmul_glu")?;
        matmul::matmul_glu(&self.pool, &views, x, rows, gate, up, act, self.exact)
    }

    fn embed(&self, table: &LoadedWeight, meta: &ForwardMeta, out: &mut Buffer) -> Result<()> {
        let out = f32s_mut(out, meta.rows() * table.n_in, "embed")?;
        matmul::embed(&view(table)?, &meta.tokens, out)
    }

    fn rms_norm(
        &self,
        x: &mut Buffer,
        rows: usize,
        w: &Buffer,
        eps: f32,
        kind: NormKind,
    ) -> Result<()> {
        let _op = trace::span("rms_norm");
        let w = f32s(w, w.len(), "rms_norm")?;
        let x = f32s_mut(x, rows * w.len(), "rms_norm")?;
        let rows_per_task = PAR_ELEMENTS.div_ceil(w.len().max(1));
        par_chunks(&self.pool, x, rows_per_task * w.len(), &|chunk| {
            ops::rms_norm(chunk, w, eps, kind)
        });
        Ok(())
    }

    fn add_rms_norm(
        &self,
        x: &mut Buffer,
        delta: Option<&Buffer>,
        out: &mut Buffer,
        rows: usize,
        w: &Buffer,
        eps: f32,
        kind: NormKind,
    ) -> Result<()> {
        let _op = trace::span("add_rms_norm");
        let w = f32s(w, w.len(), "add_rms_norm")?;
        let n = rows * w.len();
        let x = f32s_mut(x, n, "add_rms_norm")?;
        let delta = delta.map(|d| f32s(d, n, "add_rms_norm")).transpose()?;
        let out = f32s_mut(out, n, "add_rms_norm")?;
        par_add_rms_norm(&self.pool, x, delta, out, w, eps, kind);
        Ok(())
    }

    fn add_bias(&self, x: &mut Buffer, rows: usize, b: &Buffer) -> Result<()> {
        let b = f32s(b, b.len(), "add_bias")?;
        let x = f32s_mut(x, rows * b.len(), "add_bias")?;
        for row in x.chunks_exact_mut(b.len().max(1)) {
            row.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        }
        Ok(())
    }

    fn add(&self, x: &mut Buffer, y: &Buffer, n: usize) -> Result<()> {
        let y = f32s(y, n, "add")?;
        let x = f32s_mut(x, n, "add")?;
        x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
        Ok(())
    }

    fn scale(&self, x: &mut Buffer, n: usize, s: f32) -> Result<()> {
        f32s_mut(x, n, "scale")?.iter_mut().for_each(|v| *v *= s);
        Ok(())
    }

    fn softcap(&self, x: &mut Buffer, n: usize, cap: f32) -> Result<()> {
        let x = f32s_mut(x, n, "softcap")?;
        x.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
        Ok(())
    }

    fn rope(
        &self,
        x: &mut Buffer,
        n_head: usize,
        head_dim: usize,
        meta: &ForwardMeta,
        theta: f32,
        freq_scale: f32,
        kind: RopeKind,
    ) -> Result<()> {
        let _op = trace::span("rope");
        let x = f32s_mut(x, meta.rows() * n_head * head_dim, "rope")?;
        par_rope(
            &self.pool,
            x,
            n_head,
            head_dim,
            &meta.positions,
            theta,
            freq_scale,
            kind,
        );
        Ok(())
    }

    fn write_kv(
        &self,
        kv: &mut KvStore,
        layer: usize,
        k: &Buffer,
        v: &Buffer,
        meta: &ForwardMeta,
    ) -> Result<()> {
        let s = kv.shape;
        let n = meta.rows() * s.n_head_kv * s.head_dim;
        let (k, v) = (f32s(k, n, "write_kv")?, f32s(v, n, "write_kv")?);
        let pos = meta.positions.first().map_or(0, |&p| p as usize);
        handles::write_kv(kv, layer, pos, k, v)
    }

    fn attention(
        &self,
        q: &Buffer,
        kv: &KvStore,
        layer: usize,
        meta: &ForwardMeta,
        p: &AttnParams,
        out: &mut Buffer,
    ) -> Result<()> {
        let _op = trace::span("attention");
        let n = meta.rows() * p.n_head * p.head_dim;
        let (q, out) = (f32s(q, n, "attention")?, f32s_mut(out, n, "attention")?);
        let (k, v) = handles::kv_layer(kv, layer)?;
        attention::attention(&self.pool, q, k, v, meta.n_kv, &meta.positions, p, out)
    }

    fn glu(&self, gate: &mut Buffer, up: &Buffer, n: usize, act: Activation) -> Result<()> {
        let _op = trace::span("glu");
        let up = f32s(up, n, "glu")?;
        par_glu(&self.pool, f32s_mut(gate, n, "glu")?, up, act);
        Ok(())
    }

    fn gather_rows(
        &self,
        src: &Buffer,
        width: usize,
        meta: &ForwardMeta,
        dst: &mut Buffer,
    ) -> Result<()> {
        let src = f32s(src, meta.rows() * width, "gather_rows")?;
        let dst = f32s_mut(dst, meta.out_rows.len() * width, "gather_rows")?;
        for (to, &r) in dst.chunks_exact_mut(width.max(1)).zip(&meta.out_rows) {
            let at = r as usize * width;
            let from = src.get(at..at + width).ok_or_else(|| {
                ishizuki_core::Error::Shape(format!("gather_rows: row {r} past the forward"))
            })?;
            to.copy_from_slice(from);
        }
        Ok(())
    }

    fn read(&self, x: &Buffer, out: &mut [f32]) -> Result<()> {
        out.copy_from_slice(f32s(x, out.len(), "read")?);
        Ok(())
    }

    fn argmax(&self, x: &Buffer, rows: usize, width: usize) -> Result<Vec<u32>> {
        let x = f32s(x, rows * width, "argmax")?;
        Ok(x.chunks_exact(width.max(1))
            .map(ishizuki_core::backend::argmax)
            .collect())
    }
}

/// `x += delta` (when given), then `out` = `x` RMS-normalised, in row chunks across the pool.
fn par_add_rms_norm(
    pool: &ThreadPool,
    x: &mut [f32],
    delta: Option<&[f32]>,
    out: &mut [f32],
    w: &[f32],
    eps: f32,
    kind: NormKind,
) {
    let (width, base) = (w.len().max(1), out.as_ptr() as usize);
    let xp = pool::SharedMut(x.as_mut_ptr());
    par_chunks(pool, out, PAR_ELEMENTS.div_ceil(width) * width, &|out| {
        let at = (out.as_ptr() as usize - base) / 4;
        // SAFETY: each chunk of `out` takes the same rows of `x` (as long as `out`, checked by
        // the caller), which no other touches.
        let x = unsafe { std::slice::from_raw_parts_mut(xp.ptr().add(at), out.len()) };
        match delta {
            Some(delta) => {
                let delta = &delta[at..at + out.len()];
                for ((o, a), b) in out.iter_mut().zip(x.iter_mut()).zip(delta) {
                    *a += b;
                    *o = *a;
                }
            }
            None => out.copy_from_slice(x),
        }
        ops::rms_norm(out, w, eps, kind);
    });
}

/// Rotates `x (positions.len(), n_head, head_dim)`: the table on this thread, the rows across
/// the pool.
#[allow(clippy::too_many_arguments)]
fn par_rope(
    pool: &ThreadPool,
    x: &mut [f32],
    n_head: usize,
    head_dim: usize,
    positions: &[u32],
    theta: f32,
    freq_scale: f32,
    kind: RopeKind,
) {
    let (width, half, base) = (n_head * head_dim, head_dim / 2, x.as_ptr() as usize);
    if width == 0 || x.len() != positions.len() * width {
        // a shape the row split does not cover: the serial loop rotates what it can
        return ops::rope(x, n_head, head_dim, positions, theta, freq_scale, kind);
    }
    let rows_per_task = PAR_ELEMENTS.div_ceil(width);
    ops::with_rope_table(positions, theta, freq_scale, head_dim, |cos, sin| {
        par_chunks(pool, x, rows_per_task * width, &|rows| {
            let r0 = (rows.as_ptr() as usize - base) / 4 / width;
            let (cos, sin) = (&cos[r0 * half..], &sin[r0 * half..]);
            ops::rotate_rows(rows, n_head, head_dim, cos, sin, kind)
        })
    })
}

/// `gate = act(gate) * up` in chunks across the pool.
fn par_glu(pool: &ThreadPool, gate: &mut [f32], up: &[f32], act: Activation) {
    if gate.len() != up.len() {
        // the kernels cover the shorter slice; chunks of `gate` would index past `up`
        return ops::glu(gate, up, act);
    }
    let base = gate.as_ptr() as usize;
    par_chunks(pool, gate, PAR_ELEMENTS, &|chunk| {
        let at = (chunk.as_ptr() as usize - base) / 4;
        ops::glu(chunk, &up[at..at + chunk.len()], act)
    });
}

/// `f` over consecutive chunks of `chunk` elements of `x` (the last shorter) across the pool;
/// one call inline when `x` is a single chunk.
fn par_chunks(pool: &ThreadPool, x: &mut [f32], chunk: usize, f: &(dyn Fn(&mut [f32]) + Sync)) {
    let chunk = chunk.max(1);
    let n_tasks = x.len().div_ceil(chunk);
    if n_tasks <= 1 {
        return f(x);
    }
    let (ptr, len) = (pool::SharedMut(x.as_mut_ptr()), x.len());
    pool.run(n_tasks, &|t| {
        let start = t * chunk;
        // SAFETY: the tasks' chunks are disjoint parts of `x`, which outlives `run`.
        f(unsafe { std::slice::from_raw_parts_mut(ptr.ptr().add(start), chunk.min(len - start)) })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use ishizuki_core::{GgmlType, WeightRole, WeightView};
    use std::sync::Arc;
    use test_rng::Rng;

    fn buffer(be: &CpuBackend, data: &[f32]) -> Buffer {
        be.load_vector(data).unwrap()
    }

    fn host(be: &CpuBackend, b: &Buffer) -> Vec<f32> {
        let mut out = vec![0f32; b.len()];
        be.read(b, &mut out).unwrap();
        out
    }

    /// Loads `bytes` as a matmul weight of `n_out x k`, kept alive by its own Arc.
    fn weight(be: &CpuBackend, ty: GgmlType, n_out: usize, k: usize, bytes: &[u8]) -> LoadedWeight {
        let owner: Arc<Vec<u8>> = Arc::new(bytes.to_vec());
        let src = WeightSource {
            name: "w",
            view: WeightView::new(ty, n_out, k, &owner[..]),
            owner: owner.clone(),
            role: WeightRole::MATMUL,
        };
        be.load_weight(&src, &mut |_| {}).unwrap()
    }

    /// The fused residual add and norm, split over threads, equals the add, the copy and
    /// `rms_norm` one after the other, bit for bit, with and without a residual.
    #[test]
    fn add_rms_norm_is_the_add_then_the_norm() {
        let mut rng = Rng(5);
        let be = CpuBackend::new(3);
        for (rows, width) in [(1, 576), (7, 64), (300, 640)] {
            let w: Vec<f32> = (0..width).map(|_| rng.unit()).collect();
            let x0: Vec<f32> = (0..rows * width).map(|_| rng.unit() * 4.0).collect();
            let delta: Vec<f32> = (0..rows * width).map(|_| rng.unit()).collect();
            let (wb, db) = (buffer(&be, &w), buffer(&be, &delta));
            for with_delta in [true, false] {
                let (mut x, mut out) = (buffer(&be, &x0), be.alloc(x0.len()).unwrap());
                let d = with_delta.then_some(&db);
                be.add_rms_norm(&mut x, d, &mut out, rows, &wb, 1e-6, NormKind::RmsPlusOne)
                    .unwrap();
                let mut want_x = x0.clone();
                if with_delta {
                    want_x.iter_mut().zip(&delta).for_each(|(a, b)| *a += b);
                }
                let mut want = want_x.clone();
                ops::rms_norm(&mut want, &w, 1e-6, NormKind::RmsPlusOne);
                let what = format!("{rows} x {width}, residual {with_delta}");
                assert_eq!(host(&be, &x), want_x, "{what}");
                assert_eq!(host(&be, &out), want, "{what}");
            }
        }
    }

    /// The backend's fused FFN gate equals its two matmuls and `glu` for packed weights on
    /// every path (packed decode rows, the GEMM), and a gate and up of different sizes is a
    /// shape error.
    #[test]
    fn matmul_glu_is_matmul_multi_then_glu() {
        let mut rng = Rng(17);
        let be = CpuBackend::new(2);
        let (ty, n_out, k) = (GgmlType::Q4_1, 80, 256);
        let bytes = crate::gemm::tests::weights(ty, 2 * n_out, k, &mut rng);
        let half = bytes.len() / 2;
        let ws = [&bytes[..half], &bytes[half..]].map(|b| weight(&be, ty, n_out, k, b));
        assert!(ws[0].bytes > 0, "the weights were packed");
        for rows in [1, 5, 16, 40] {
            let x0: Vec<f32> = (0..rows * k).map(|_| rng.unit()).collect();
            let x = buffer(&be, &x0);
            let (mut g, mut u) = (
                be.alloc(rows * n_out).unwrap(),
                be.alloc(rows * n_out).unwrap(),
            );
            be.matmul_multi(&[&ws[0], &ws[1]], &x, rows, &mut [&mut g, &mut u])
                .unwrap();
            be.glu(&mut g, &u, rows * n_out, Activation::SwiGlu)
                .unwrap();
            let mut fused = be.alloc(rows * n_out).unwrap();
            be.matmul_glu(
                [&ws[0], &ws[1]],
                &x,
                rows,
                &mut fused,
                &mut u,
                Activation::SwiGlu,
            )
            .unwrap();
            assert_eq!(host(&be, &fused), host(&be, &g), "{rows} rows");
        }
        let row_bytes = WeightView::new(ty, n_out, k, &bytes).row_bytes().unwrap();
        let short = weight(&be, ty, n_out - 16, k, &bytes[..half - 16 * row_bytes]);
        let (mut g, mut u) = (be.alloc(n_out).unwrap(), be.alloc(n_out).unwrap());
        let x = be.alloc(k).unwrap();
        let err = be.matmul_glu([&ws[0], &short], &x, 1, &mut g, &mut u, Activation::SwiGlu);
        assert!(
            matches!(err, Err(ishizuki_core::Error::Shape(_))),
            "{err:?}"
        );
    }

    /// Rope split over the pool's threads (prefill rows) rotates exactly as the serial loop,
    /// both layouts, one row and many.
    #[test]
    fn rope_across_threads_is_the_serial_rope() {
        let mut rng = Rng(23);
        let be = CpuBackend::new(3);
        for (rows, n_head, hd) in [(1, 9, 64), (300, 9, 64), (77, 4, 256)] {
            let x0: Vec<f32> = (0..rows * n_head * hd).map(|_| rng.unit()).collect();
            let mut meta = ForwardMeta::new(&vec![0; rows], 0, vec![]);
            meta.positions = (0..rows as u32).map(|p| 5 + 3 * p).collect();
            for kind in [RopeKind::Norm, RopeKind::Neox] {
                let (mut got, mut want) = (buffer(&be, &x0), x0.clone());
                be.rope(&mut got, n_head, hd, &meta, 10000.0, 0.5, kind)
                    .unwrap();
                ops::rope(&mut want, n_head, hd, &meta.positions, 10000.0, 0.5, kind);
                assert_eq!(host(&be, &got), want, "{rows} rows, {kind:?}");
            }
        }
    }

    /// A buffer of another backend, or one too small for the op, is an error, not a panic.
    #[test]
    fn foreign_and_short_buffers_are_errors() {
        let be = CpuBackend::new(1);
        let foreign = Buffer::new(64, 0u8);
        let mut x = be.alloc(64).unwrap();
        assert!(matches!(
            be.add(&mut x, &foreign, 64),
            Err(ishizuki_core::Error::Backend(_))
        ));
        let short = be.alloc(8).unwrap();
        assert!(matches!(
            be.add(&mut x, &short, 64),
            Err(ishizuki_core::Error::Shape(_))
        ));
        let mut out = be.alloc(64).unwrap();
        let err = be.matmul_multi(&[], &x, 1, &mut [&mut out]).unwrap_err();
        assert_eq!(err.to_string(), "shape mismatch: 0 weights for 1 outputs");
        be.matmul_multi(&[], &x, 1, &mut []).unwrap();
        assert_eq!(
            be.argmax(&buffer(&be, &[1.0, 3.0, 3.0, f32::NAN]), 1, 4)
                .unwrap(),
            [1]
        );
    }
}
