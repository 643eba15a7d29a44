//! Opening a GPU, what the backend's handles hold, and launch shapes.
use cudarc::driver::{
    sys, CudaContext, CudaSlice, CudaStream, DeviceRepr, DriverError, LaunchConfig, ValidAsZeroBits,
};
use ishizuki_core::{Error, Result};
use std::sync::{Arc, Mutex};

use crate::kernels::WeightKernels;

/// What `ishizuki` says of the GPU it runs on.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    /// Compute capability as `major * 10 + minor`.
    pub arch: u32,
    pub total_memory: usize,
}

/// An activation buffer, a norm weight or a bias: f32s in device memory.
pub struct DevBuf(pub CudaSlice<f32>);

/// A weight's bytes as the file stores them, and its type's kernels.
pub struct DevWeight {
    pub data: CudaSlice<u8>,
    pub row_bytes: usize,
    pub kernels: Arc<WeightKernels>,
}

/// KV storage: per layer a K plane then a V plane of `plane` f16s each.
pub struct DevKv {
    pub data: CudaSlice<u16>,
    pub plane: usize,
}

/// u32s of a pooled metadata buffer: n_kv, then tokens, positions and wanted rows of up to
/// 16 rows (a decode step or a draft verification).
pub const META_POOLED: usize = 64;
/// Pooled metadata buffers kept.
const META_POOL_MAX: usize = 8;

/// Metadata buffers of META_POOLED u32s, handed back when their forward ends.
#[derive(Clone, Default)]
pub struct MetaPool(Arc<Mutex<Vec<CudaSlice<u32>>>>);

impl MetaPool {
    pub fn take(&self) -> Option<CudaSlice<u32>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
}

/// A forward's n_kv, tokens, positions and wanted rows, in one upload: `[n_kv, tokens..,
/// positions.., out_rows..]`.
pub struct DevMeta {
    data: Option<CudaSlice<u32>>,
    /// Where `data` goes back to when the forward ends (None: freed).
    pool: Option<MetaPool>,
    pub positions_at: usize,
    pub out_rows_at: usize,
}

impl DevMeta {
    pub fn new(data: CudaSlice<u32>, pool: Option<MetaPool>, rows: usize) -> DevMeta {
        DevMeta {
            data: Some(data),
            pool,
            positions_at: 1 + rows,
            out_rows_at: 1 + 2 * rows,
        }
    }

    pub fn data(&self) -> Result<&CudaSlice<u32>> {
        self.data
            .as_ref()
            .ok_or_else(|| Error::Backend("cuda: a forward's metadata is gone".into()))
    }
}

impl Drop for DevMeta {
    fn drop(&mut self) {
        if let (Some(data), Some(pool)) = (self.data.take(), &self.pool) {
            let mut free = pool.0.lock().unwrap_or_else(|e| e.into_inner());
            if free.len() < META_POOL_MAX {
                free.push(data);
            }
        }
    }
}

/// `slot` holding at least `n` elements: reallocated (zeroed, the old one freed first) when
/// smaller. The caller holds the stream.
pub fn grown<'a, T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    slot: &'a mut Option<CudaSlice<T>>,
    n: usize,
) -> Result<&'a CudaSlice<T>> {
    if slot.as_ref().is_none_or(|s| s.len() < n) {
        *slot = None;
        *slot = Some(stream.alloc_zeros::<T>(n.max(1)).map_err(cuda_err)?);
    }
    Ok(slot.as_ref().expect("just allocated"))
}

pub fn cuda_err(e: DriverError) -> Error {
    Error::Backend(format!("cuda: {e}"))
}

/// Whether the driver library loads and sees at least one GPU.
pub fn available() -> bool {
    // SAFETY: probing for the library has no preconditions
    (unsafe { sys::is_culib_present() }) && CudaContext::device_count().is_ok_and(|n| n > 0)
}

/// The context of GPU `ordinal` (event tracking off: one stream orders everything) and what it is.
pub fn open(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo)> {
    // SAFETY: probing for the library has no preconditions
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::Backend(
            "cuda: the NVIDIA driver library (libcuda.so) was not found".into(),
        ));
    }
    let count = CudaContext::device_count().map_err(cuda_err)?;
    if ordinal >= count.max(0) as usize {
        return Err(Error::Backend(format!(
            "cuda: no GPU {ordinal} ({count} found)"
        )));
    }
    let ctx = CudaContext::new(ordinal).map_err(cuda_err)?;
    // SAFETY: every slice is used on the context's one stream, in order
    unsafe { ctx.disable_event_tracking() };
    let (major, minor) = ctx.compute_capability().map_err(cuda_err)?;
    let info = DeviceInfo {
        name: ctx.name().map_err(cuda_err)?,
        arch: (major * 10 + minor) as u32,
        total_memory: ctx.total_mem().map_err(cuda_err)?,
    };
    Ok((ctx, info))
}

/// A grid-stride launch over `n` elements.
pub fn launch_1d(n: u64) -> LaunchConfig {
    const THREADS: u64 = 256;
    let blocks = n.div_ceil(THREADS).clamp(1, 8192);
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl crate::CudaBackend {
    /// `w`'s rows uploaded as they are, then repacked by `repack` into planar rows padded to
    /// 16 bytes; the device copy and its row stride.
    pub(crate) fn upload_planar(
        &self,
        repack: &cudarc::driver::CudaFunction,
        w: &ishizuki_core::backend::WeightView,
        row_bytes: usize,
    ) -> Result<(CudaSlice<u8>, usize)> {
        let stride = row_bytes.next_multiple_of(16);
        let (raw, data) = {
            let _hold = self.launcher.hold();
            let raw = self.stream.clone_htod(w.data).map_err(cuda_err)?;
            let data = self
                .stream
                .alloc_zeros::<u8>(stride * w.n_out)
                .map_err(cuda_err)?;
            (raw, data)
        };
        let nb = w.n_in / w.ty.block_size();
        use crate::step::Arg;
        let args = [
            Arg::U64(self.ptr(&raw)),
            Arg::U64(self.ptr(&data)),
            Arg::I32(w.n_out as i32),
            Arg::I32(nb as i32),
            Arg::U64(row_bytes as u64),
            Arg::U64(stride as u64),
        ];
        // SAFETY: raw holds n_out rows of row_bytes (nb blocks), data n_out rows of stride
        unsafe { self.go(repack, launch_1d((w.n_out * nb) as u64), &args)? };
        // raw's free is ordered on the stream after the repack
        drop(raw);
        Ok((data, stride))
    }
}
