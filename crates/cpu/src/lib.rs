//! CPU backend: persistent thread pool, runtime-dispatched SIMD, quantized matmul, attention.
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
pub mod simd;
#[cfg(test)]
mod test_rng;
pub mod vmath;

use half::f16;
use ishizuki_core::backend::{Activation, AttnParams, NormKind, RopeKind};
use ishizuki_core::{Backend, PackedWeight, Result, WeightView};
use pool::ThreadPool;

pub struct CpuBackend {
    pool: ThreadPool,
    /// Dequantize every weight to f32 instead of quantizing activations (reference accuracy).
    exact: bool,
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

    fn pack(&self, w: &WeightView, consumed: &mut dyn FnMut(&[u8])) -> Option<PackedWeight> {
        // the exact backend multiplies the file's layout in f32
        if self.exact {
            return None;
        }
        packed::pack(w, consumed)
    }

    fn matmul(&self, w: &WeightView, x: &[f32], rows: usize, out: &mut [f32]) -> Result<()> {
        matmul::matmul(&self.pool, w, x, rows, out, self.exact)
    }

    fn matmul_multi(
        &self,
        ws: &[WeightView],
        x: &[f32],
        rows: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        matmul::matmul_multi(&self.pool, ws, x, rows, outs, self.exact)
    }

    fn embed(&self, table: &WeightView, ids: &[u32], out: &mut [f32]) -> Result<()> {
        matmul::embed(table, ids, out)
    }

    fn rms_norm(&self, x: &mut [f32], w: &[f32], eps: f32, kind: NormKind) {
        ops::rms_norm(x, w, eps, kind)
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
        ops::rope(x, n_head, head_dim, positions, theta, freq_scale, kind)
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
        attention::attention(&self.pool, q, k, v, n_kv, positions, p, out)
    }

    fn glu(&self, gate: &mut [f32], up: &[f32], act: Activation) {
        ops::glu(gate, up, act)
    }
}
