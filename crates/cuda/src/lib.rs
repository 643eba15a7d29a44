//! CUDA backend: the driver and NVRTC opened at run time (cudarc), kernels compiled at load for
//! the weight types present and cached on disk, activations, weights and the KV cache in device
//! memory. A forward uploads its metadata once and reads back only what the caller asks for.
mod attention;
pub mod compile;
mod device;
mod gemm;
pub mod kernels;
mod matmul;
mod select;
mod step;

pub use device::{available, DeviceInfo};

use compile::Target;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig};
use device::{
    cuda_err, grown, launch_1d, DevBuf, DevKv, DevMeta, DevWeight, MetaPool, META_POOLED,
};
use ishizuki_core::backend::{
    too_small, Activation, AttnParams, Candidate, NormKind, RopeKind, RopeParams,
};
use ishizuki_core::{
    Backend, Buffer, Error, ForwardMeta, GgmlType, KvShape, KvStore, LoadedWeight, Result,
    WeightSource,
};
use kernels::{OpKernels, WeightKernels};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use step::{Arg, Launcher};

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
/// Keys per split of few-row attention at least, and splits at most (the chunk grows with
/// the cache's capacity, fixed for a sequence so a row's splits never depend on its batch).
const ATTN_MIN_CHUNK: usize = 64;
const ATTN_MAX_SPLITS: usize = 128;
/// Threads of attention_merge_f32's blocks (at least one per split).
const MERGE_THREADS: u32 = 512;

pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    launcher: Launcher,
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
    /// Prefill matmuls on tensor cores through cuBLAS, where its library is there.
    gemm: Option<gemm::Gemm>,
    /// Metadata buffers of few-row forwards, reused so a decode step keeps its addresses.
    meta_pool: MetaPool,
    /// The argmax ids and top-k rows read back.
    readback: Mutex<Option<CudaSlice<u32>>>,
    /// Split-K attention's partials (grown in a step's fingerprint pass, before any capture).
    attn_part: Mutex<Option<CudaSlice<f32>>>,
}

/// Programmatic dependent launch (Hopper on): a kernel's launch and first blocks overlap the
/// tail of the one before it.
fn pdl_on(arch: u32) -> bool {
    arch >= 90 && std::env::var_os("ISHIZUKI_CUDA_PDL").is_none_or(|v| v != "0")
}

/// `Q8_MAX_ROWS x n_in` int8 activations and their per-32 scales.
struct Q8Scratch {
    q: CudaSlice<i8>,
    d: CudaSlice<f32>,
    n_in: usize,
}

impl CudaBackend {
    /// The GPU `ordinal`, its ops module compiled (or read from `cache`, a directory).
    /// `ISHIZUKI_CUDA_GRAPHS=0` turns off the replay of captured decode steps,
    /// `ISHIZUKI_CUDA_PDL=0` programmatic dependent launches; `ISHIZUKI_CUDA_TUNE` overrides
    /// device-side kernel constants (`compile::TUNABLE`).
    pub fn new(ordinal: usize, cache: Option<PathBuf>) -> Result<CudaBackend> {
        let (ctx, info) = device::open(ordinal)?;
        // a stream of our own: the legacy default stream cannot be captured into a graph
        let stream = ctx.new_stream().map_err(cuda_err)?;
        let target = Target {
            arch: info.arch,
            nvrtc: compile::nvrtc_version()?,
            defines: compile::tune_defines(std::env::var("ISHIZUKI_CUDA_TUNE").ok().as_deref())?,
        };
        let ops = OpKernels::load(&ctx, &target, cache.as_deref())?;
        let gemm = gemm::Gemm::new(stream.clone());
        let graphs = std::env::var_os("ISHIZUKI_CUDA_GRAPHS").is_none_or(|v| v != "0");
        Ok(CudaBackend {
            launcher: Launcher::new(stream.clone(), graphs, pdl_on(info.arch)),
            ctx,
            stream,
            target,
            cache,
            info,
            ops,
            weight_kernels: Mutex::new(HashMap::new()),
            exact: false,
            q8_scratch: Mutex::new(None),
            gemm,
            meta_pool: MetaPool::default(),
            readback: Mutex::new(None),
            attn_part: Mutex::new(None),
        })
    }

    /// f32 activations into every matmul, as `CpuBackend::exact` (set before loading).
    pub fn exact(mut self) -> CudaBackend {
        self.exact = true;
        self
    }

    /// Every step launched kernel by kernel (as `ISHIZUKI_CUDA_GRAPHS=0`).
    pub fn without_graphs(mut self) -> CudaBackend {
        self.launcher = Launcher::new(self.stream.clone(), false, pdl_on(self.info.arch));
        self
    }

    /// Decode steps captured as CUDA graphs, and graph launches so far.
    pub fn graph_counts(&self) -> (usize, usize) {
        self.launcher.graph_counts()
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
        let _hold = self.launcher.hold();
        let n = (bytes / 8).max(1 << 10);
        let src = self.stream.alloc_zeros::<u32>(n).map_err(cuda_err)?;
        let mut dst = self.stream.alloc_zeros::<u32>(n).map_err(cuda_err)?;
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut times = Vec::new();
        for rep in 0..6 {
            let start = self.ctx.new_event(flags).map_err(cuda_err)?;
            let end = self.ctx.new_event(flags).map_err(cuda_err)?;
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
        let _hold = self.launcher.hold();
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

    /// The device addresses of a forward's n_kv, tokens, positions and wanted rows.
    fn meta_ptrs(&self, meta: &ForwardMeta) -> Result<MetaPtrs> {
        let m = meta.device::<DevMeta>()?;
        let base = self.ptr(m.data()?);
        let at = |i: usize| base + 4 * i as u64;
        Ok(MetaPtrs {
            n_kv: at(0),
            tokens: at(1),
            positions: at(m.positions_at),
            out_rows: at(m.out_rows_at),
        })
    }

    /// Launches `f` (or records it, inside a step being fingerprinted).
    ///
    /// # Safety
    /// As `Launcher::launch`: `args` match `f` and cover what it touches under `cfg`.
    unsafe fn go(&self, f: &CudaFunction, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        // SAFETY: the caller's contract
        unsafe { self.launcher.launch(f, cfg, args) }
    }

    fn elementwise(
        &self,
        f: &CudaFunction,
        x: u64,
        y: Option<u64>,
        n: usize,
        s: f32,
    ) -> Result<()> {
        let second = y.map_or(Arg::F32(s), Arg::U64);
        // SAFETY: x (and y) hold n f32s, checked by the callers
        unsafe {
            self.go(
                f,
                launch_1d(n as u64),
                &[Arg::U64(x), second, Arg::U64(n as u64)],
            )
        }
    }

    /// A block of ROW_THREADS per row (norms, argmax, embed).
    fn per_row(rows: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

struct MetaPtrs {
    n_kv: u64,
    tokens: u64,
    positions: u64,
    out_rows: u64,
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
        let (data, row_bytes) = match &kernels.repack {
            Some(repack) => self.upload_planar(repack, w, row_bytes)?,
            None => {
                let _hold = self.launcher.hold();
                (self.stream.clone_htod(w.data).map_err(cuda_err)?, row_bytes)
            }
        };
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
        let _hold = self.launcher.hold();
        let s = self.stream.clone_htod(data).map_err(cuda_err)?;
        Ok(Buffer::new(data.len(), DevBuf(s)))
    }

    fn alloc(&self, len: usize) -> Result<Buffer> {
        let _hold = self.launcher.hold();
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
        let _hold = self.launcher.hold();
        let data = self.stream.alloc_zeros::<u16>(n.max(1)).map_err(cuda_err)?;
        let plane = shape.capacity * shape.n_head_kv * shape.head_dim;
        Ok(KvStore::new(shape, 2 * n, DevKv { data, plane }))
    }

    fn prepare(&self, meta: &mut ForwardMeta) -> Result<()> {
        self.ctx.bind_to_thread().map_err(cuda_err)?;
        let rows = meta.tokens.len();
        let n_kv = u32::try_from(meta.n_kv)
            .map_err(|_| Error::Shape(format!("{} keys are too many", meta.n_kv)))?;
        let mut host = Vec::with_capacity(1 + 2 * rows + meta.out_rows.len());
        host.push(n_kv);
        host.extend_from_slice(&meta.tokens);
        host.extend_from_slice(&meta.positions);
        host.extend_from_slice(&meta.out_rows);
        let _hold = self.launcher.hold();
        let dev = if host.len() <= META_POOLED {
            let mut data = match self.meta_pool.take() {
                Some(d) => d,
                None => self
                    .stream
                    .alloc_zeros::<u32>(META_POOLED)
                    .map_err(cuda_err)?,
            };
            let mut view = data.slice_mut(..host.len());
            self.stream
                .memcpy_htod(&host, &mut view)
                .map_err(cuda_err)?;
            DevMeta::new(data, Some(self.meta_pool.clone()), rows)
        } else {
            let data = self.stream.clone_htod(&host).map_err(cuda_err)?;
            DevMeta::new(data, None, rows)
        };
        meta.device = Some(Box::new(dev));
        Ok(())
    }

    fn forward_step(&self, rows: usize, record: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        // few-row forwards launch only our kernels (no cuBLAS), so a graph can hold them
        self.launcher.step(rows <= Q8_MAX_ROWS, record)
    }

    fn matmul(&self, w: &LoadedWeight, x: &Buffer, rows: usize, out: &mut Buffer) -> Result<()> {
        self.matmul_one(w, x, rows, out)
    }

    fn matmul_multi(
        &self,
        ws: &[&LoadedWeight],
        x: &Buffer,
        rows: usize,
        outs: &mut [&mut Buffer],
    ) -> Result<()> {
        self.matmul_many(ws, x, rows, outs)
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
        self.matmul_gated(ws, x, rows, gate, up, act)
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
        let m = self.meta_ptrs(meta)?;
        let args = [
            Arg::U64(self.ptr(&dw.data)),
            Arg::U64(m.tokens),
            Arg::U64(op),
            Arg::I32(table.n_in as i32),
            Arg::U64(dw.row_bytes as u64),
        ];
        // SAFETY: every token is a row of the table (checked); out holds rows x n_in
        unsafe { self.go(&dw.kernels.embed, Self::per_row(rows), &args) }
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
        let args = [Arg::U64(xp), Arg::U64(bp), Arg::I32(width), Arg::U64(n)];
        // SAFETY: x holds rows x width, the bias width
        unsafe { self.go(&self.ops.add_bias, launch_1d(n), &args) }
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
        let m = self.meta_ptrs(meta)?;
        let total = (rows * n_head * head_dim / 2) as u64;
        let args = [
            Arg::U64(xp),
            Arg::U64(m.positions),
            Arg::I32(rows as i32),
            Arg::I32(n_head as i32),
            Arg::I32(head_dim as i32),
            Arg::F32(theta),
            Arg::F32(freq_scale),
            Arg::I32((kind == RopeKind::Neox) as i32),
        ];
        // SAFETY: x holds rows x n_head x head_dim; positions holds rows entries
        unsafe { self.go(&self.ops.rope, launch_1d(total), &args) }
    }

    fn write_kv(
        &self,
        kv: &mut KvStore,
        layer: usize,
        k: &Buffer,
        v: &Buffer,
        meta: &ForwardMeta,
    ) -> Result<()> {
        let width = kv.shape.n_head_kv * kv.shape.head_dim;
        let rows = meta.rows();
        let w = self.kv_write(kv, layer, k, v, meta, "write_kv")?;
        let args = [
            Arg::U64(w.k_plane),
            Arg::U64(w.v_plane),
            Arg::U64(w.k),
            Arg::U64(w.v),
            Arg::U64(w.positions),
            Arg::I32(rows as i32),
            Arg::I32(width as i32),
        ];
        // SAFETY: every position is below the capacity (checked); k and v hold rows x width
        unsafe { self.go(&self.ops.write_kv, launch_1d((rows * width) as u64), &args) }
    }

    fn rope_write_kv(
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
        self.fused_rope_write_kv(q, k, v, n_head, kv, layer, meta, rope)
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
        self.split_k_attention(q, kv, layer, meta, p, out)
    }

    fn glu(&self, gate: &mut Buffer, up: &Buffer, n: usize, act: Activation) -> Result<()> {
        let gp = self.buf(gate, n, "glu")?;
        let upp = self.buf(up, n, "glu")?;
        let args = [
            Arg::U64(gp),
            Arg::U64(upp),
            Arg::U64(n as u64),
            Arg::I32(matches!(act, Activation::GeGluTanh) as i32),
        ];
        // SAFETY: both hold n f32s
        unsafe { self.go(&self.ops.glu, launch_1d(n as u64), &args) }
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
        let m = self.meta_ptrs(meta)?;
        let args = [
            Arg::U64(sp),
            Arg::U64(dp),
            Arg::U64(m.out_rows),
            Arg::I32(n as i32),
            Arg::I32(width as i32),
        ];
        // SAFETY: every row index is below the forward's rows (checked)
        unsafe { self.go(&self.ops.gather_rows, launch_1d((n * width) as u64), &args) }
    }

    fn read(&self, x: &Buffer, out: &mut [f32]) -> Result<()> {
        if x.len() < out.len() {
            return Err(too_small("read", out.len(), x.len()));
        }
        if self.launcher.note_host_read() {
            // a dump inside a step being fingerprinted: the step then runs launch by launch
            return Err(Error::Backend(
                "cuda: a host read inside a recorded step".into(),
            ));
        }
        let s = &x.get::<DevBuf>()?.0;
        if out.is_empty() {
            return Ok(());
        }
        let _hold = self.launcher.hold();
        self.stream
            .memcpy_dtoh(&s.slice(..out.len()), out)
            .map_err(cuda_err)?;
        self.stream.synchronize().map_err(cuda_err)
    }

    fn argmax(&self, x: &Buffer, rows: usize, width: usize) -> Result<Vec<u32>> {
        let xp = self.buf(x, rows * width, "argmax")?;
        if rows == 0 {
            return Ok(Vec::new());
        }
        let mut slot = self.readback.lock().unwrap_or_else(|e| e.into_inner());
        let _hold = self.launcher.hold();
        let ids = grown(&self.stream, &mut slot, rows)?;
        let args = [
            Arg::U64(xp),
            Arg::U64(self.ptr(ids)),
            Arg::I32(width as i32),
        ];
        drop(_hold);
        // SAFETY: x holds rows x width; ids holds at least rows
        unsafe { self.go(&self.ops.argmax, Self::per_row(rows), &args)? };
        let mut out = vec![0u32; rows];
        let _hold = self.launcher.hold();
        self.stream
            .memcpy_dtoh(&ids.slice(..rows), &mut out)
            .map_err(cuda_err)?;
        self.stream.synchronize().map_err(cuda_err)?;
        Ok(out)
    }

    fn top_k(
        &self,
        x: &Buffer,
        rows: usize,
        width: usize,
        k: usize,
    ) -> Result<Vec<Vec<Candidate>>> {
        self.select_top_k(x, rows, width, k)
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
        let width = w.len();
        // decode rows are quantized for the matmul that reads them next (the scratch held so
        // no other matmul's quantization lands between)
        let slot = self.q8_scratch.lock().unwrap_or_else(|e| e.into_inner());
        let q8 = slot
            .as_ref()
            .filter(|s| self.q8_rows(rows) && width.is_multiple_of(32) && s.n_in >= width)
            .map(|s| (self.ptr(&s.q), self.ptr(&s.d)));
        let (qp, dp) = q8.unwrap_or((0, 0));
        let args = [
            Arg::U64(x),
            Arg::U64(delta),
            Arg::U64(out),
            Arg::U64(wp),
            Arg::I32(width as i32),
            Arg::F32(eps),
            Arg::I32((kind == NormKind::RmsPlusOne) as i32),
            Arg::U64(qp),
            Arg::U64(dp),
        ];
        // a thread per 4 elements, so a row is one step of float4 loads
        let threads = w.len().div_ceil(4).next_multiple_of(32).clamp(32, 1024) as u32;
        let cfg = LaunchConfig {
            block_dim: (threads, 1, 1),
            ..Self::per_row(rows)
        };
        // SAFETY: x, delta and out hold rows x width (checked by the callers); the scratch
        // Q8_MAX_ROWS >= rows rows of width
        unsafe { self.go(&self.ops.rms_norm, cfg, &args)? };
        if q8.is_some() {
            self.launcher.set_quantized((out, rows, width));
        }
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
