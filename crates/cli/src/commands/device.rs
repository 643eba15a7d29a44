//! `--device auto|cpu|cuda`: which backend runs the model. `auto` takes the GPU when this build
//! has the CUDA backend and the machine has a GPU, else the CPU.
use super::CliResult;
use ishizuki_core::Backend;
use ishizuki_cpu::CpuBackend;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    #[default]
    Auto,
    Cpu,
    Cuda,
}

/// The backend a command runs on, with what only one kind can say.
#[derive(Clone)]
pub enum Chosen {
    Cpu(Arc<CpuBackend>),
    #[cfg(feature = "cuda")]
    Cuda(Arc<ishizuki_cuda::CudaBackend>),
}

impl Chosen {
    pub fn backend(&self) -> Arc<dyn Backend> {
        match self {
            Chosen::Cpu(b) => b.clone(),
            #[cfg(feature = "cuda")]
            Chosen::Cuda(b) => b.clone(),
        }
    }

    /// Memory the KV caches may come from: the GPU's free memory, or None for host memory.
    pub fn device_free_memory(&self) -> Option<usize> {
        match self {
            Chosen::Cpu(_) => None,
            #[cfg(feature = "cuda")]
            Chosen::Cuda(b) => {
                let total = b.info().total_memory;
                Some(total.saturating_sub(b.memory_in_use().unwrap_or(total)))
            }
        }
    }
}

impl Chosen {
    /// The threads column of a table: the CPU's, or "-" on a GPU.
    pub fn threads(&self) -> String {
        match self {
            Chosen::Cpu(b) => b.n_threads().to_string(),
            #[cfg(feature = "cuda")]
            Chosen::Cuda(_) => "-".into(),
        }
    }

    /// Measured memory bandwidth in GB/s over `bytes`: the CPU's read bandwidth, or the GPU's
    /// copy bandwidth (bytes read plus bytes written).
    pub fn bandwidth(&self, bytes: usize) -> CliResult<f64> {
        match self {
            Chosen::Cpu(b) => Ok(b.read_bandwidth(bytes)),
            #[cfg(feature = "cuda")]
            Chosen::Cuda(b) => Ok(b.copy_bandwidth(bytes)?),
        }
    }

    pub fn bandwidth_kind(&self) -> &'static str {
        match self {
            Chosen::Cpu(_) => "read",
            #[cfg(feature = "cuda")]
            Chosen::Cuda(_) => "device copy",
        }
    }
}

/// The backend for `device`; `threads` is the CPU's (0 = all cores).
pub fn choose(device: Device, threads: usize) -> CliResult<Chosen> {
    match device {
        Device::Cpu => Ok(Chosen::Cpu(Arc::new(CpuBackend::new(threads)))),
        Device::Cuda => cuda(),
        Device::Auto if cuda_available() => cuda(),
        Device::Auto => Ok(Chosen::Cpu(Arc::new(CpuBackend::new(threads)))),
    }
}

#[cfg(feature = "cuda")]
fn cuda_available() -> bool {
    ishizuki_cuda::available()
}

#[cfg(not(feature = "cuda"))]
fn cuda_available() -> bool {
    false
}

#[cfg(feature = "cuda")]
fn cuda() -> CliResult<Chosen> {
    // compiled kernels are cached beside the models; without a cache dir each load compiles
    let cache = ishizuki::fetch::cache_dir().ok().map(|d| d.join("cuda"));
    let be = ishizuki_cuda::CudaBackend::new(0, cache)?;
    Ok(Chosen::Cuda(Arc::new(be)))
}

#[cfg(not(feature = "cuda"))]
fn cuda() -> CliResult<Chosen> {
    Err("this build has no CUDA backend: build with `cargo build --release --features cuda`".into())
}
