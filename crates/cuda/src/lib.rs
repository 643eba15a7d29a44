//! CUDA backend: the driver and NVRTC opened at run time (cudarc), kernels compiled at load for
//! the weight types present and cached on disk, activations, weights and the KV cache in device
//! memory. A forward uploads its metadata once and reads back only what the caller asks for.
pub mod compile;
mod device;
pub mod kernels;

pub use device::{available, DeviceInfo};

use compile::Target;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use device::{cuda_err, launch_1d, DevBuf, DevKv, DevMeta, DevWeight};
use ishizuki_core::backend::{too_small, Activation, AttnParams, NormKind, RopeKind};
use ishizuki_core::{
    Backend, Buffer, Error, ForwardMeta, GgmlType, KvShape, KvStore, LoadedWeight, Result,
    WeightSource,
};
use kernels::{OpKernels, WeightKernels};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Threads per block of the row-wise kernels (norms, argmax, embed, attention).
const ROW_THREADS: u32 = 128;
/// Output rows per matmul block (its warps) and activation rows per block (`matmul.cu`).
const MATMUL_WARPS: usize = 4;
const MATMUL_ROWS: usize = 8;
/// Rows up to which a matmul runs on 8-bit activations (in passes of MATMUL_ROWS): decode
/// and draft verification. Longer prefills keep f32 activations.
const Q8_MAX_ROWS: usize = 16;
/// Attention's head_dim bound (`attention.cu`).
const ATTN_MAX_HEAD_DIM: usize = 256;

pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    target: Target,
    cache: Option<PathBuf>,
    info: DeviceInfo,
    ops: OpKernels,
    weight_kernels: Mutex<HashMap<GgmlType, Arc<WeightKernels>>>,
    /// f32 activations into every matmul (no 8-bit activations): the reference-tolerance mode.
    exact: bool,
    /// 8-bit activations of the few-row matmul, sized at load for the widest weight, so a
    /// captured step sees fixed addresses.
    q8_scratch: Mutex<Option<Q8Scratch>>,
}

/// `Q8_MAX_ROWS x n_in` int8 activations and their per-32 scales.
struct Q8Scratch {
    q: CudaSlice<i8>,
    d: CudaSlice<f32>,
    n_in: usize,
}

impl CudaBackend {
    /// The GPU `ordinal`, its ops module compiled (or read from `cache`, a directory).
    pub fn new(ordinal: usize, cache: Option<PathBuf>) -> Result<CudaBackend> {
        let (ctx, info) = device::open(ordinal)?;
        let stream = ctx.default_stream();
        let target = Target {
            arch: info.arch,
            nvrtc: compile::nvrtc_version()?,
        };
        let ops = OpKernels::load(&ctx, &target, cache.as_deref())?;
        Ok(CudaBackend {
            ctx,
            stream,
            target,
            cache,
            info,
            ops,
            weight_kernels: Mutex::new(HashMap::new()),
            exact: false,
            q8_scratch: Mutex::new(None),
        })
    }

    /// f32 activations into every matmul, as `CpuBackend::exact` (set before loading).
    pub fn exact(mut self) -> CudaBackend {
        self.exact = true;
        self
    }

    /// Grows the 8-bit activation scratch to hold rows of `n_in`.
    fn reserve_q8(&self, n_in: usize) -> Result<()> {
        let mut slot = self.q8_scratch.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|s| s.n_in >= n_in) {
            return Ok(());
        }
        let q = self
            .stream
            .alloc_zeros::<i8>(Q8_MAX_ROWS * n_in)
            .map_err(cuda_err)?;
        let d = self
            .stream
            .alloc_zeros::<f32>(Q8_MAX_ROWS * n_in / 32)
            .map_err(cuda_err)?;
        *slot = Some(Q8Scratch { q, d, n_in });
        Ok(())
    }

    /// `out = x . w^T` for `rows <= Q8_MAX_ROWS` through 8-bit activations.
    fn matmul_q8(
        &self,
        f: &cudarc::driver::CudaFunction,
        w: &LoadedWeight,
        wp: u64,
        x: u64,
        rows: usize,
        out: u64,
    ) -> Result<()> {
        let dw = w.get::<DevWeight>()?;
        let slot = self.q8_scratch.lock().unwrap_or_else(|e| e.into_inner());
        let s = slot
            .as_ref()
            .filter(|s| s.n_in >= w.n_in)
            .ok_or_else(|| Error::Backend("cuda: no 8-bit activation scratch".into()))?;
        let (qp, dp) = (self.ptr(&s.q), self.ptr(&s.d));
        let n_blocks = (rows * w.n_in / 32) as u64;
        let mut b = self.stream.launch_builder(&self.ops.quantize_q8);
        b.arg(&x).arg(&qp).arg(&dp).arg(&n_blocks);
        // SAFETY: x holds rows x n_in f32s; the scratch holds Q8_MAX_ROWS rows of n_in
        unsafe { b.launch(launch_1d(n_blocks * 32)) }.map_err(cuda_err)?;
        let (n_out, n_in, r, rb) = (
            w.n_out as i32,
            w.n_in as i32,
            rows as i32,
            dw.row_bytes as u64,
        );
        let cfg = LaunchConfig {
            grid_dim: (
                w.n_out.div_ceil(MATMUL_WARPS) as u32,
                rows.div_ceil(MATMUL_ROWS) as u32,
                1,
            ),
            block_dim: (32 * MATMUL_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(&wp).arg(&qp).arg(&dp).arg(&out);
        b.arg(&n_out).arg(&n_in).arg(&r).arg(&rb);
        // SAFETY: the weight holds n_out rows of row_bytes; the scratch rows x n_in; out rows x n_out
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Device memory in use by this process and others, in bytes.
    pub fn memory_in_use(&self) -> Result<usize> {
        let (free, total) = self.ctx.mem_get_info().map_err(cuda_err)?;
        Ok(total.saturating_sub(free))
    }

    /// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written) over `bytes`,
    /// the median of 5 timed copies after a warm-up.
    pub fn copy_bandwidth(&self, bytes: usize) -> Result<f64> {
        let n = (bytes / 8).max(1 << 10);
        let src = self.stream.alloc_zeros::<u32>(n).map_err(cuda_err)?;
        let mut dst = self.stream.alloc_zeros::<u32>(n).map_err(cuda_err)?;
        let mut times = Vec::new();
        for rep in 0..6 {
            let start = self
                .ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(cuda_err)?;
            let end = self
                .ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(cuda_err)?;
            start.record(&self.stream).map_err(cuda_err)?;
            self.stream.memcpy_dtod(&src, &mut dst).map_err(cuda_err)?;
            end.record(&self.stream).map_err(cuda_err)?;
            end.synchronize().map_err(cuda_err)?;
            if rep > 0 {
                times.push(start.elapsed_ms(&end).map_err(cuda_err)? as f64 / 1e3);
            }
        }
        times.sort_by(f64::total_cmp);
        Ok(2.0 * 4.0 * n as f64 / times[times.len() / 2] / 1e9)
    }

    /// Waits for the queued work; a kernel's fault surfaces here.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(cuda_err)
    }

    fn kernels_for(&self, ty: GgmlType) -> Result<Option<Arc<WeightKernels>>> {
        let mut table = self
            .weight_kernels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(k) = table.get(&ty) {
            return Ok(Some(k.clone()));
        }
        let Some(k) = WeightKernels::load(&self.ctx, ty, &self.target, self.cache.as_deref())?
        else {
            return Ok(None);
        };
        let k = Arc::new(k);
        table.insert(ty, k.clone());
        Ok(Some(k))
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        let (p, _sync) = s.device_ptr(&self.stream);
        p
    }

    /// `b`'s device pointer, checked to hold `need` f32s.
    fn buf(&self, b: &Buffer, need: usize, op: &str) -> Result<u64> {
        if b.len() < need {
            return Err(too_small(op, need, b.len()));
        }
        Ok(self.ptr(&b.get::<DevBuf>()?.0))
    }

    fn meta_ptrs(&self, meta: &ForwardMeta) -> Result<(u64, u64, u64)> {
        let m = meta.device::<DevMeta>()?;
        let base = self.ptr(&m.data);
        let at = |i: usize| base + 4 * i as u64;
        Ok((at(0), at(m.positions_at), at(m.out_rows_at)))
    }

    fn elementwise(
        &self,
        f: &cudarc::driver::CudaFunction,
        x: u64,
        y: Option<u64>,
        n: usize,
        s: f32,
    ) -> Result<()> {
        let n = n as u64;
        let mut b = self.stream.launch_builder(f);
        b.arg(&x);
        if let Some(y) = &y {
            b.arg(y);
        } else {
            b.arg(&s);
        }
        b.arg(&n);
        // SAFETY: x (and y) hold n f32s, checked by the callers
        unsafe { b.launch(launch_1d(n)) }.map_err(cuda_err)?;
        Ok(())
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        format!("cuda ({})", self.info.name)
    }

    // every kernel forms a row's result from that row alone, in one fixed order
    fn verify_rows(&self) -> usize {
        16
    }

    fn load_weight(
        &self,
        src: &WeightSource,
        consumed: &mut dyn FnMut(&[u8]),
    ) -> Result<LoadedWeight> {
        let w = &src.view;
        let unsupported = || Error::UnsupportedWeight {
            tensor: src.name.to_string(),
            ty: w.ty,
            backend: "cuda",
        };
        let row_bytes = w.row_bytes()?;
        if w.data.len() != row_bytes * w.n_out {
            return Err(Error::Shape(format!(
                "{}: {} bytes for {} rows of {} {}",
                src.name,
                w.data.len(),
                w.n_out,
                w.n_in,
                w.ty
            )));
        }
        // the kernels walk rows in 32-element sub-blocks
        if !w.n_in.is_multiple_of(32) {
            return Err(unsupported());
        }
        let kernels = self.kernels_for(w.ty)?.ok_or_else(unsupported)?;
        if kernels.matmul_q8.is_some() && !self.exact {
            self.reserve_q8(w.n_in)?;
        }
        let data = self.stream.clone_htod(w.data).map_err(cuda_err)?;
        consumed(w.data);
        let bytes = w.data.len();
        let dev = DevWeight {
            data,
            row_bytes,
            kernels,
        };
        Ok(LoadedWeight::new(w.ty, w.n_out, w.n_in, bytes, dev))
    }

    fn load_vector(&self, data: &[f32]) -> Result<Buffer> {
        let s = self.stream.clone_htod(data).map_err(cuda_err)?;
        Ok(Buffer::new(data.len(), DevBuf(s)))
    }

    fn alloc(&self, len: usize) -> Result<Buffer> {
        let s = self
            .stream
            .alloc_zeros::<f32>(len.max(1))
            .map_err(cuda_err)?;
        Ok(Buffer::new(len, DevBuf(s)))
    }

    fn alloc_kv(&self, shape: KvShape) -> Result<KvStore> {
        let n = shape
            .n_elements()
            .ok_or_else(|| Error::Shape(format!("a KV cache of {shape:?} is too large")))?;
        let data = self.stream.alloc_zeros::<u16>(n.max(1)).map_err(cuda_err)?;
        let plane = shape.capacity * shape.n_head_kv * shape.head_dim;
        Ok(KvStore::new(shape, 2 * n, DevKv { data, plane }))
    }

    fn prepare(&self, meta: &mut ForwardMeta) -> Result<()> {
        self.ctx.bind_to_thread().map_err(cuda_err)?;
        let mut host = Vec::with_capacity(meta.tokens.len() * 2 + meta.out_rows.len());
        host.extend_from_slice(&meta.tokens);
        host.extend_from_slice(&meta.positions);
        host.extend_from_slice(&meta.out_rows);
        if host.is_empty() {
            host.push(0);
        }
        let data = self.stream.clone_htod(&host).map_err(cuda_err)?;
        let positions_at = meta.tokens.len();
        let out_rows_at = positions_at + meta.positions.len();
        meta.device = Some(Box::new(DevMeta {
            data,
            positions_at,
            out_rows_at,
        }));
        Ok(())
    }

    fn matmul(&self, w: &LoadedWeight, x: &Buffer, rows: usize, out: &mut Buffer) -> Result<()> {
        let dw = w.get::<DevWeight>()?;
        let xp = self.buf(x, rows * w.n_in, "matmul")?;
        let op = self.buf(out, rows * w.n_out, "matmul")?;
        if rows == 0 {
            return Ok(());
        }
        let wp = self.ptr(&dw.data);
        if let Some(f) = dw.kernels.matmul_q8.as_ref() {
            if !self.exact && rows <= Q8_MAX_ROWS {
                return self.matmul_q8(f, w, wp, xp, rows, op);
            }
        }
        let (n_out, n_in, r, rb) = (
            w.n_out as i32,
            w.n_in as i32,
            rows as i32,
            dw.row_bytes as u64,
        );
        let cfg = LaunchConfig {
            grid_dim: (
                w.n_out.div_ceil(MATMUL_WARPS) as u32,
                rows.div_ceil(MATMUL_ROWS) as u32,
                1,
            ),
            block_dim: (32 * MATMUL_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&dw.kernels.matmul);
        b.arg(&wp)
            .arg(&xp)
            .arg(&op)
            .arg(&n_out)
            .arg(&n_in)
            .arg(&r)
            .arg(&rb);
        // SAFETY: the weight holds n_out rows of row_bytes; x and out were checked above
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    fn embed(&self, table: &LoadedWeight, meta: &ForwardMeta, out: &mut Buffer) -> Result<()> {
        let dw = table.get::<DevWeight>()?;
        let rows = meta.rows();
        if let Some(&t) = meta.tokens.iter().find(|&&t| t as usize >= table.n_out) {
            return Err(Error::Shape(format!(
                "token {t} is outside the embedding table of {}",
                table.n_out
            )));
        }
        let op = self.buf(out, rows * table.n_in, "embed")?;
        if rows == 0 {
            return Ok(());
        }
        let (tokens, _, _) = self.meta_ptrs(meta)?;
        let (wp, n_in, rb) = (self.ptr(&dw.data), table.n_in as i32, dw.row_bytes as u64);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&dw.kernels.embed);
        b.arg(&wp).arg(&tokens).arg(&op).arg(&n_in).arg(&rb);
        // SAFETY: every token is a row of the table (checked); out holds rows x n_in
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    fn rms_norm(
        &self,
        x: &mut Buffer,
        rows: usize,
        w: &Buffer,
        eps: f32,
        kind: NormKind,
    ) -> Result<()> {
        let width = w.len();
        let xp = self.buf(x, rows * width, "rms_norm")?;
        self.norm(xp, 0, xp, rows, w, eps, kind)
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
        let n = rows * w.len();
        let xp = self.buf(x, n, "add_rms_norm")?;
        let dp = delta.map(|d| self.buf(d, n, "add_rms_norm")).transpose()?;
        let op = self.buf(out, n, "add_rms_norm")?;
        self.norm(xp, dp.unwrap_or(0), op, rows, w, eps, kind)
    }

    fn add_bias(&self, x: &mut Buffer, rows: usize, bias: &Buffer) -> Result<()> {
        let (width, n) = (bias.len() as i32, (rows * bias.len()) as u64);
        let xp = self.buf(x, n as usize, "add_bias")?;
        let bp = self.buf(bias, bias.len(), "add_bias")?;
        let mut b = self.stream.launch_builder(&self.ops.add_bias);
        b.arg(&xp).arg(&bp).arg(&width).arg(&n);
        // SAFETY: x holds rows x width, the bias width
        unsafe { b.launch(launch_1d(n)) }.map_err(cuda_err)?;
        Ok(())
    }

    fn add(&self, x: &mut Buffer, y: &Buffer, n: usize) -> Result<()> {
        let xp = self.buf(x, n, "add")?;
        let yp = self.buf(y, n, "add")?;
        self.elementwise(&self.ops.add, xp, Some(yp), n, 0.0)
    }

    fn scale(&self, x: &mut Buffer, n: usize, s: f32) -> Result<()> {
        let xp = self.buf(x, n, "scale")?;
        self.elementwise(&self.ops.scale, xp, None, n, s)
    }

    fn softcap(&self, x: &mut Buffer, n: usize, cap: f32) -> Result<()> {
        let xp = self.buf(x, n, "softcap")?;
        self.elementwise(&self.ops.softcap, xp, None, n, cap)
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
        let rows = meta.rows();
        let xp = self.buf(x, rows * n_head * head_dim, "rope")?;
        let (_, positions, _) = self.meta_ptrs(meta)?;
        let total = (rows * n_head * head_dim / 2) as u64;
        let (r, h, d, neox) = (
            rows as i32,
            n_head as i32,
            head_dim as i32,
            (kind == RopeKind::Neox) as i32,
        );
        let mut b = self.stream.launch_builder(&self.ops.rope);
        b.arg(&xp)
            .arg(&positions)
            .arg(&r)
            .arg(&h)
            .arg(&d)
            .arg(&theta)
            .arg(&freq_scale)
            .arg(&neox);
        // SAFETY: x holds rows x n_head x head_dim; positions holds rows entries
        unsafe { b.launch(launch_1d(total)) }.map_err(cuda_err)?;
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
        let shape = kv.shape;
        let width = shape.n_head_kv * shape.head_dim;
        let rows = meta.rows();
        check_kv(&shape, layer, meta)?;
        let kp = self.buf(k, rows * width, "write_kv")?;
        let vp = self.buf(v, rows * width, "write_kv")?;
        let (k_plane, v_plane) = self.planes(kv.get::<DevKv>()?, layer);
        let (_, positions, _) = self.meta_ptrs(meta)?;
        let (r, w) = (rows as i32, width as i32);
        let mut b = self.stream.launch_builder(&self.ops.write_kv);
        b.arg(&k_plane)
            .arg(&v_plane)
            .arg(&kp)
            .arg(&vp)
            .arg(&positions)
            .arg(&r)
            .arg(&w);
        // SAFETY: every position is below the capacity (checked); k and v hold rows x width
        unsafe { b.launch(launch_1d((rows * width) as u64)) }.map_err(cuda_err)?;
        Ok(())
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
        let (_, positions, _) = self.meta_ptrs(meta)?;
        let n_kv = meta.n_kv.min(shape.capacity) as i32;
        let (nh, nkv, hd) = (p.n_head as i32, p.n_head_kv as i32, p.head_dim as i32);
        let window = p.window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
        let softcap = p.softcap.unwrap_or(0.0);
        let cfg = LaunchConfig {
            grid_dim: (p.n_head as u32, rows as u32, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.ops.attention);
        b.arg(&qp)
            .arg(&k_plane)
            .arg(&v_plane)
            .arg(&op)
            .arg(&positions)
            .arg(&n_kv);
        b.arg(&nh)
            .arg(&nkv)
            .arg(&hd)
            .arg(&p.scale)
            .arg(&window)
            .arg(&softcap);
        // SAFETY: shapes checked against the cache and the buffers above
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    fn glu(&self, gate: &mut Buffer, up: &Buffer, n: usize, act: Activation) -> Result<()> {
        let gp = self.buf(gate, n, "glu")?;
        let upp = self.buf(up, n, "glu")?;
        let (n64, a) = (n as u64, matches!(act, Activation::GeGluTanh) as i32);
        let mut b = self.stream.launch_builder(&self.ops.glu);
        b.arg(&gp).arg(&upp).arg(&n64).arg(&a);
        // SAFETY: both hold n f32s
        unsafe { b.launch(launch_1d(n64)) }.map_err(cuda_err)?;
        Ok(())
    }

    fn gather_rows(
        &self,
        src: &Buffer,
        width: usize,
        meta: &ForwardMeta,
        dst: &mut Buffer,
    ) -> Result<()> {
        let n = meta.out_rows.len();
        if let Some(&r) = meta.out_rows.iter().find(|&&r| r as usize >= meta.rows()) {
            return Err(Error::Shape(format!(
                "gather_rows: row {r} of a forward of {} rows",
                meta.rows()
            )));
        }
        let sp = self.buf(src, meta.rows() * width, "gather_rows")?;
        let dp = self.buf(dst, n * width, "gather_rows")?;
        if n == 0 {
            return Ok(());
        }
        let (_, _, which) = self.meta_ptrs(meta)?;
        let (n32, w) = (n as i32, width as i32);
        let mut b = self.stream.launch_builder(&self.ops.gather_rows);
        b.arg(&sp).arg(&dp).arg(&which).arg(&n32).arg(&w);
        // SAFETY: every row index is below the forward's rows (checked)
        unsafe { b.launch(launch_1d((n * width) as u64)) }.map_err(cuda_err)?;
        Ok(())
    }

    fn read(&self, x: &Buffer, out: &mut [f32]) -> Result<()> {
        if x.len() < out.len() {
            return Err(too_small("read", out.len(), x.len()));
        }
        let s = &x.get::<DevBuf>()?.0;
        if out.is_empty() {
            return Ok(());
        }
        self.stream
            .memcpy_dtoh(&s.slice(..out.len()), out)
            .map_err(cuda_err)?;
        self.synchronize()
    }

    fn argmax(&self, x: &Buffer, rows: usize, width: usize) -> Result<Vec<u32>> {
        let xp = self.buf(x, rows * width, "argmax")?;
        if rows == 0 {
            return Ok(Vec::new());
        }
        let ids = self.stream.alloc_zeros::<u32>(rows).map_err(cuda_err)?;
        let (idp, w) = (self.ptr(&ids), width as i32);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.ops.argmax);
        b.arg(&xp).arg(&idp).arg(&w);
        // SAFETY: x holds rows x width; ids holds rows
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        let mut out = vec![0u32; rows];
        self.stream.memcpy_dtoh(&ids, &mut out).map_err(cuda_err)?;
        self.synchronize()?;
        Ok(out)
    }
}

impl CudaBackend {
    #[allow(clippy::too_many_arguments)]
    fn norm(
        &self,
        x: u64,
        delta: u64,
        out: u64,
        rows: usize,
        w: &Buffer,
        eps: f32,
        kind: NormKind,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let wp = self.buf(w, w.len(), "rms_norm")?;
        let (width, plus_one) = (w.len() as i32, (kind == NormKind::RmsPlusOne) as i32);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.ops.rms_norm);
        b.arg(&x)
            .arg(&delta)
            .arg(&out)
            .arg(&wp)
            .arg(&width)
            .arg(&eps)
            .arg(&plus_one);
        // SAFETY: x, delta and out hold rows x width (checked by the callers)
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    /// `layer`'s K and V planes, `(capacity, n_head_kv * head_dim)` f16 each.
    fn planes(&self, kv: &DevKv, layer: usize) -> (u64, u64) {
        let base = self.ptr(&kv.data) + (layer * 2 * kv.plane * 2) as u64;
        (base, base + (kv.plane * 2) as u64)
    }
}

/// The layer exists and every row's position has a slot.
fn check_kv(shape: &KvShape, layer: usize, meta: &ForwardMeta) -> Result<()> {
    if layer >= shape.n_layer {
        return Err(Error::Shape(format!(
            "layer {layer} of a KV cache of {}",
            shape.n_layer
        )));
    }
    if let Some(&p) = meta
        .positions
        .iter()
        .find(|&&p| p as usize >= shape.capacity)
    {
        return Err(Error::Shape(format!(
            "position {p} is past the KV cache's {} slots",
            shape.capacity
        )));
    }
    Ok(())
}
