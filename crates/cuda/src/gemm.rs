//! Prefill matmuls (more rows than draft verification) on tensor cores: the weight dequantised
//! to f16 in slices of rows, the activations converted to f16, and cuBLAS's GEMM with f32
//! accumulation and output.
use crate::device::{cuda_err, grown, launch_1d, DevWeight};
use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, PushKernelArg};
use ishizuki_core::{Error, LoadedWeight, Result};
use std::sync::{Arc, Mutex};

/// f16 elements of one dequantised weight slice (64 Mi: 128 MiB).
const SLICE_ELEMENTS: usize = 64 << 20;

pub struct Gemm {
    blas: CudaBlas,
    scratch: Mutex<Scratch>,
}

#[derive(Default)]
struct Scratch {
    weight: Option<CudaSlice<u16>>,
    acts: Option<CudaSlice<u16>>,
}

fn blas_err(e: cudarc::cublas::result::CublasError) -> Error {
    Error::Backend(format!("cublas: {e:?}"))
}

impl Gemm {
    /// cuBLAS on `stream`, or None when its library is not there (prefill then keeps the
    /// f32 kernel).
    pub fn new(stream: Arc<CudaStream>) -> Option<Gemm> {
        // SAFETY: probing for the library has no preconditions
        if !unsafe { blas_sys::is_culib_present() } {
            return None;
        }
        let blas = CudaBlas::new(stream).ok()?;
        Some(Gemm {
            blas,
            scratch: Mutex::default(),
        })
    }

    /// `out (rows, n_out) = x (rows, n_in) . w^T`; `convert` is `convert_f32_f16`.
    pub fn matmul(
        &self,
        stream: &Arc<CudaStream>,
        convert: &cudarc::driver::CudaFunction,
        w: &LoadedWeight,
        x: u64,
        rows: usize,
        out: u64,
    ) -> Result<()> {
        let dw = w.get::<DevWeight>()?;
        let (n_out, n_in) = (w.n_out, w.n_in);
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let ap = {
            let acts = grown(stream, &mut scratch.acts, rows * n_in)?;
            let (p, _) = acts.device_ptr(stream);
            p
        };
        let n = (rows * n_in) as u64;
        let mut b = stream.launch_builder(convert);
        b.arg(&x).arg(&ap).arg(&n);
        // SAFETY: x holds rows x n_in f32s, the scratch as many f16s
        unsafe { b.launch(launch_1d(n)) }.map_err(cuda_err)?;
        let slice_rows = (SLICE_ELEMENTS / n_in).clamp(1, n_out);
        let wp16 = {
            let ws = grown(stream, &mut scratch.weight, slice_rows * n_in)?;
            let (p, _) = ws.device_ptr(stream);
            p
        };
        let (wp, _) = dw.data.device_ptr(stream);
        for row0 in (0..n_out).step_by(slice_rows) {
            let n_rows = slice_rows.min(n_out - row0);
            let subs = (n_rows * n_in / 32) as u64;
            let (r0, nr, ni, rb) = (row0 as i32, n_rows as i32, n_in as i32, dw.row_bytes as u64);
            let mut b = stream.launch_builder(&dw.kernels.dequant_f16);
            b.arg(&wp).arg(&wp16).arg(&r0).arg(&nr).arg(&ni).arg(&rb);
            // SAFETY: rows row0..row0 + n_rows exist; the slice holds n_rows x n_in f16s
            unsafe { b.launch(launch_1d(subs)) }.map_err(cuda_err)?;
            // column-major: C (n_rows x rows, ld n_out) = W_slice^T' (n_rows x n_in) . X (n_in x rows)
            let c = out + 4 * row0 as u64;
            self.gemm(n_rows, rows, n_in, wp16, ap, c, n_out)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm(&self, m: usize, n: usize, k: usize, a: u64, b: u64, c: u64, ldc: usize) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        use blas_sys::{
            cublasComputeType_t as Compute, cublasOperation_t as Op, cudaDataType as Ty,
        };
        // SAFETY: a holds m rows of k f16s (ld k), b n rows of k f16s (ld k), c n rows of ldc f32s
        unsafe {
            blas::gemm_ex(
                *self.blas.handle(),
                Op::CUBLAS_OP_T,
                Op::CUBLAS_OP_N,
                m as i32,
                n as i32,
                k as i32,
                (&alpha as *const f32).cast(),
                a as *const _,
                Ty::CUDA_R_16F,
                k as i32,
                b as *const _,
                Ty::CUDA_R_16F,
                k as i32,
                (&beta as *const f32).cast(),
                c as *mut _,
                Ty::CUDA_R_32F,
                ldc as i32,
                Compute::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(blas_err)
    }
}
