//! CPU backend: persistent thread pool, runtime-dispatched SIMD, quantized matmul, attention.
/// Most rows of a forward whose every row is bit-identical to a one-row forward of it: draft
/// verification stays within this, so drafting never changes a greedy token. One packed
/// kernel call covers 16 rows; a 17th would read every weight again.
pub const VERIFY_ROWS: usize = 16;

pub mod amx;
pub mod attention;
pub mod gemm;
pub mod gemv;
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

use half::f16;
use ishizuki_core::backend::{Activation, AttnParams, NormKind, RopeKind};
use ishizuki_core::huge::HugeArena;
use ishizuki_core::{Backend, PackedWeight, Result, WeightView};
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

    fn pack(&self, w: &WeightView, consumed: &mut dyn FnMut(&[u8])) -> Option<PackedWeight> {
        // the exact backend multiplies the file's layout in f32
        if self.exact {
            return None;
        }
        packed::pack(w, &self.arena, consumed)
    }

    fn matmul(&self, w: &WeightView, x: &[f32], rows: usize, out: &mut [f32]) -> Result<()> {
        let _op = trace::span("matmul");
        matmul::matmul(&self.pool, w, x, rows, out, self.exact)
    }

    fn matmul_multi(
        &self,
        ws: &[WeightView],
        x: &[f32],
        rows: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        let _op = trace::span("matmul_multi");
        matmul::matmul_multi(&self.pool, ws, x, rows, outs, self.exact)
    }

    fn embed(&self, table: &WeightView, ids: &[u32], out: &mut [f32]) -> Result<()> {
        matmul::embed(table, ids, out)
    }

    fn rms_norm(&self, x: &mut [f32], w: &[f32], eps: f32, kind: NormKind) {
        let _op = trace::span("rms_norm");
        let rows_per_task = PAR_ELEMENTS.div_ceil(w.len().max(1));
        par_chunks(&self.pool, x, rows_per_task * w.len(), &|chunk| {
            ops::rms_norm(chunk, w, eps, kind)
        });
    }

    fn add_rms_norm(
        &self,
        x: &mut [f32],
        delta: Option<&[f32]>,
        out: &mut [f32],
        w: &[f32],
        eps: f32,
        kind: NormKind,
    ) {
        let _op = trace::span("add_rms_norm");
        // the chunks of `out` index `x` unchecked (the trait's default panics here too)
        assert_eq!(x.len(), out.len(), "add_rms_norm: x and out differ in size");
        let (width, base) = (w.len().max(1), out.as_ptr() as usize);
        let xp = pool::SharedMut(x.as_mut_ptr());
        par_chunks(
            &self.pool,
            out,
            PAR_ELEMENTS.div_ceil(width) * width,
            &|out| {
                let at = (out.as_ptr() as usize - base) / 4;
                // SAFETY: each chunk of `out` takes the same rows of `x`, which no other touches.
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
            },
        );
    }

    fn rope(
        &self,
        x: &mut [f32],
        n_head: usize,
        head_dim: usize,
        positions: &[u32],
        theta: f32,
        freq_scale: f32,
        kind: RopeKind,
    ) {
        let _op = trace::span("rope");
        let (width, half, base) = (n_head * head_dim, head_dim / 2, x.as_ptr() as usize);
        if width == 0 || x.len() != positions.len() * width {
            // a shape the row split does not cover: the serial loop rotates what it can
            return ops::rope(x, n_head, head_dim, positions, theta, freq_scale, kind);
        }
        // the table on this thread, the rows across the pool
        let rows_per_task = PAR_ELEMENTS.div_ceil(width);
        ops::with_rope_table(positions, theta, freq_scale, head_dim, |cos, sin| {
            par_chunks(&self.pool, x, rows_per_task * width, &|rows| {
                let r0 = (rows.as_ptr() as usize - base) / 4 / width;
                let (cos, sin) = (&cos[r0 * half..], &sin[r0 * half..]);
                ops::rotate_rows(rows, n_head, head_dim, cos, sin, kind)
            })
        })
    }

    fn attention(
        &self,
        q: &[f32],
        k: &[f16],
        v: &[f16],
        n_kv: usize,
        positions: &[u32],
        p: &AttnParams,
        out: &mut [f32],
    ) -> Result<()> {
        let _op = trace::span("attention");
        attention::attention(&self.pool, q, k, v, n_kv, positions, p, out)
    }

    fn glu(&self, gate: &mut [f32], up: &[f32], act: Activation) {
        let _op = trace::span("glu");
        par_glu(&self.pool, gate, up, act)
    }

    fn matmul_glu(
        &self,
        ws: &[WeightView; 2],
        x: &[f32],
        rows: usize,
        gate: &mut [f32],
        up: &mut [f32],
        act: Activation,
    ) -> Result<()> {
        let _op = trace::span("matmul_glu");
        matmul::matmul_glu(&self.pool, ws, x, rows, gate, up, act, self.exact)
    }
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
    use test_rng::Rng;

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
            for with_delta in [true, false] {
                let (mut x, mut out) = (x0.clone(), vec![0f32; x0.len()]);
                let d = with_delta.then_some(&delta[..]);
                be.add_rms_norm(&mut x, d, &mut out, &w, 1e-6, NormKind::RmsPlusOne);
                let mut want_x = x0.clone();
                if with_delta {
                    want_x.iter_mut().zip(&delta).for_each(|(a, b)| *a += b);
                }
                let mut want = want_x.clone();
                ops::rms_norm(&mut want, &w, 1e-6, NormKind::RmsPlusOne);
                assert_eq!(x, want_x, "{rows} x {width}, residual {with_delta}");
                assert_eq!(out, want, "{rows} x {width}, residual {with_delta}");
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
        let (ty, n_out, k) = (ishizuki_core::GgmlType::Q4_1, 80, 256);
        let bytes = crate::gemm::tests::weights(ty, 2 * n_out, k, &mut rng);
        let half = bytes.len() / 2;
        let views = [&bytes[..half], &bytes[half..]].map(|b| WeightView::new(ty, n_out, k, b));
        let packed: Vec<_> = views.iter().map(|v| be.pack(v, &mut |_| {})).collect();
        let ws: [WeightView; 2] = std::array::from_fn(|i| WeightView {
            packed: packed[i].as_ref(),
            ..views[i]
        });
        for rows in [1, 5, 16, 40] {
            let x: Vec<f32> = (0..rows * k).map(|_| rng.unit()).collect();
            let (mut g, mut u) = (vec![0f32; rows * n_out], vec![0f32; rows * n_out]);
            be.matmul_multi(&ws, &x, rows, &mut [&mut g, &mut u])
                .unwrap();
            be.glu(&mut g, &u, Activation::SwiGlu);
            let (mut fused, mut scratch) = (vec![0f32; rows * n_out], vec![0f32; rows * n_out]);
            be.matmul_glu(&ws, &x, rows, &mut fused, &mut scratch, Activation::SwiGlu)
                .unwrap();
            assert_eq!(fused, g, "{rows} rows");
        }
        let short = WeightView {
            n_out: n_out - 16,
            data: &bytes[..half - 16 * views[0].row_bytes().unwrap()],
            packed: None,
            ..views[1]
        };
        let (mut g, mut u) = (vec![0f32; n_out], vec![0f32; n_out]);
        let x = vec![0f32; k];
        let err = be.matmul_glu(&[ws[0], short], &x, 1, &mut g, &mut u, Activation::SwiGlu);
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
            let positions: Vec<u32> = (0..rows as u32).map(|p| 5 + 3 * p).collect();
            for kind in [RopeKind::Norm, RopeKind::Neox] {
                let (mut got, mut want) = (x0.clone(), x0.clone());
                be.rope(&mut got, n_head, hd, &positions, 10000.0, 0.5, kind);
                ops::rope(&mut want, n_head, hd, &positions, 10000.0, 0.5, kind);
                assert_eq!(got, want, "{rows} rows, {kind:?}");
            }
        }
    }
}
