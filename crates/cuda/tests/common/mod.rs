//! What the CUDA test files share: the GPU opened once per file, and a small generator.
#![allow(dead_code)]
use ishizuki_cuda::CudaBackend;

/// The backend on GPU 0 (with f32 activations into every matmul when `exact`), or None
/// without a GPU, which fails where ISHIZUKI_REQUIRE_CUDA is set (the GPU host).
pub fn open_gpu(exact: bool) -> Option<CudaBackend> {
    if !ishizuki_cuda::available() {
        let required = std::env::var_os("ISHIZUKI_REQUIRE_CUDA").is_some();
        assert!(
            !required,
            "ISHIZUKI_REQUIRE_CUDA is set but no GPU is available"
        );
        eprintln!("no CUDA GPU here: skipped");
        return None;
    }
    let cache = std::env::var_os("ISHIZUKI_CUDA_CACHE").map(Into::into);
    let be = CudaBackend::new(0, cache).expect("the CUDA backend starts");
    Some(if exact { be.exact() } else { be })
}

/// xorshift64: the same values on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}
