//! Matmul dispatch: quantized weights with a kernel for this tier take the integer path
//! (activations quantized once per call to the kernel's format); everything else dequantizes
//! chunks of weight rows to f32. Either way a task reads its weight rows once and reuses them for
//! every activation row, so a prefill streams the weights once.
use crate::kernels::{self, QKernel, MAX_ROWS};
use crate::pool::{SharedMut, ThreadPool};
use crate::simd::{dot, dot4, tier};
use crate::{gemm, gemv, packed};
use ishizuki_core::backend::Activation;
use ishizuki_core::{
    quant::dequantize_row, quant::quantize_row, Error, GgmlType, Result, WeightView,
};
use std::cell::RefCell;

/// Weight rows per task of the f32 path, and the granularity of the quantized path's tasks.
const CHUNK: usize = 16;
/// Tasks per thread and weight when few activation rows are multiplied: each task streams one long
/// contiguous range of weight rows (hardware prefetchers ramp up once per range), and there are
/// still enough of them to balance a thread that is slowed down.
pub(crate) const GEMV_TASKS_PER_THREAD: usize = 4;
/// Activation rows quantized per task.
const QUANT_ROWS: usize = 8;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static ACTIVATIONS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

pub fn check_supported(ty: GgmlType) -> Result<()> {
    let mut probe = vec![0f32; ty.block_size()];
    let zeros = vec![0u8; ty.type_size()];
    dequantize_row(ty, &zeros, &mut probe).map_err(|_| Error::UnsupportedType(ty, "cpu matmul"))
}

/// `exact` skips the quantized kernels (f32 dequantized weights, f32 activations).
pub fn matmul(
    pool: &ThreadPool,
    w: &WeightView,
    x: &[f32],
    rows: usize,
    out: &mut [f32],
    exact: bool,
) -> Result<()> {
    matmul_multi(pool, std::slice::from_ref(w), x, rows, &mut [out], exact)
}

/// Several matmuls of the same input (q/k/v, gate/up): the activations are quantized once and
/// all weights' row chunks share one parallel region.
pub fn matmul_multi(
    pool: &ThreadPool,
    ws: &[WeightView],
    x: &[f32],
    rows: usize,
    outs: &mut [&mut [f32]],
    exact: bool,
) -> Result<()> {
    ishizuki_core::backend::check_outputs(ws.len(), outs.len())?;
    if ws.is_empty() {
        // every path below reads the first weight
        return Ok(());
    }
    for (w, out) in ws.iter().zip(outs.iter()) {
        check_shapes(w, x, rows, out)?;
    }
    if !exact && packed::applies(ws, rows) {
        packed::matmul(pool, ws, x, rows, outs);
        return Ok(());
    }
    if !exact && gemv::applies(ws, rows) {
        gemv::gemv(pool, ws, x, rows, outs);
        return Ok(());
    }
    if takes_gemm(ws, rows, exact) {
        return gemm::gemm(pool, ws, x, rows, outs)
            .then_some(())
            .ok_or_else(|| malformed(&ws[0]));
    }
    let ks: Vec<Option<QKernel>> = ws
        .iter()
        .map(|w| kernels::kernel(w.ty, tier()).filter(|_| !exact))
        .collect();
    let shared_act = ks.first().copied().flatten().map(|k| k.act);
    if let Some(act) = shared_act.filter(|a| ks.iter().all(|k| k.is_some_and(|k| k.act == *a))) {
        let jobs: Vec<Job> = ws
            .iter()
            .zip(&ks)
            .zip(outs.iter_mut())
            .map(|((w, k), out)| Job {
                w: *w,
                k: k.expect("checked"),
                out: SharedMut(out.as_mut_ptr()),
            })
            .collect();
        return matmul_quantized(pool, &jobs, act, x, rows);
    }
    for ((w, k), out) in ws.iter().zip(&ks).zip(outs.iter_mut()) {
        match k {
            Some(k) => {
                let job = Job {
                    w: *w,
                    k: *k,
                    out: SharedMut(out.as_mut_ptr()),
                };
                matmul_quantized(pool, &[job], k.act, x, rows)?;
            }
            None => {
                check_supported(w.ty)?;
                matmul_f32(pool, w, x, rows, out);
            }
        }
    }
    Ok(())
}

/// `gate (rows, n_out) = act(x . ws[0]^T) * (x . ws[1]^T)`, `up` scratch of gate's size: the
/// GEMM gates its products as they come out; fewer rows take `matmul_multi` and `glu`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_glu(
    pool: &ThreadPool,
    ws: &[WeightView; 2],
    x: &[f32],
    rows: usize,
    gate: &mut [f32],
    up: &mut [f32],
    act: Activation,
    exact: bool,
) -> Result<()> {
    if ws[0].n_out != ws[1].n_out {
        return Err(Error::Shape(format!(
            "matmul_glu: gate of {} outputs, up of {}",
            ws[0].n_out, ws[1].n_out
        )));
    }
    if !takes_gemm(ws, rows, exact) {
        matmul_multi(pool, ws, x, rows, &mut [&mut *gate, &mut *up], exact)?;
        crate::par_glu(pool, gate, up, act);
        return Ok(());
    }
    check_shapes(&ws[0], x, rows, gate)?;
    check_shapes(&ws[1], x, rows, up)?;
    gemm::gemm_glu(pool, [&ws[0], &ws[1]], x, rows, gate, act)
        .then_some(())
        .ok_or_else(|| malformed(&ws[0]))
}

/// Whether `matmul_multi` takes the GEMM for these weights and rows (after the packed and
/// row-dot paths have passed).
fn takes_gemm(ws: &[WeightView], rows: usize, exact: bool) -> bool {
    !exact && !packed::applies(ws, rows) && !gemv::applies(ws, rows) && gemm::applies(ws, rows)
}

fn malformed(w: &WeightView) -> Error {
    Error::Shape(format!("matmul: a {} weight has malformed blocks", w.ty))
}

fn check_shapes(w: &WeightView, x: &[f32], rows: usize, out: &[f32]) -> Result<()> {
    let (n_in, n_out) = (w.n_in, w.n_out);
    let row_bytes = w.row_bytes()?;
    if w.data.len() != row_bytes * n_out || x.len() != rows * n_in || out.len() != rows * n_out {
        return Err(Error::Shape(format!(
            "matmul: weight {n_out}x{n_in} {} ({} bytes), x {} for {rows} rows, out {}",
            w.ty,
            w.data.len(),
            x.len(),
            out.len()
        )));
    }
    Ok(())
}

/// One weight of a quantized matmul and where its `(rows, n_out)` output goes.
struct Job<'a> {
    w: WeightView<'a>,
    k: QKernel,
    out: SharedMut<f32>,
}

fn matmul_quantized(
    pool: &ThreadPool,
    jobs: &[Job],
    act_ty: GgmlType,
    x: &[f32],
    rows: usize,
) -> Result<()> {
    let n_in = jobs[0].w.n_in;
    let a_row = act_ty
        .row_bytes(n_in as u64)
        .ok_or_else(|| Error::Shape(format!("{n_in} elements are not whole {act_ty} blocks")))?
        as usize;
    let tasks = RowTasks::new(jobs.iter().map(|j| j.w.n_out), rows, pool.n_threads());
    ACTIVATIONS.with_borrow_mut(|act| -> Result<()> {
        act.resize(rows * a_row, 0);
        quantize_rows(pool, act_ty, x, rows, n_in, a_row, act)?;
        let act: &[u8] = act;
        pool.run(tasks.len(), &|task| {
            let (ji, range) = tasks.get(task);
            run_chunk(&jobs[ji], range, act, a_row, rows);
        });
        Ok(())
    })
}

/// Several weights' output rows split into tasks of `chunk_rows` rows: task t covers one
/// weight's rows, the weights' tasks in order.
pub(crate) struct RowTasks {
    n_outs: Vec<usize>,
    chunks: Vec<usize>,
    /// Index of each weight's first task, then the total.
    first: Vec<usize>,
}

impl RowTasks {
    pub(crate) fn new(n_outs: impl Iterator<Item = usize>, rows: usize, n_threads: usize) -> Self {
        let n_outs: Vec<usize> = n_outs.collect();
        let chunks: Vec<usize> = n_outs
            .iter()
            .map(|&n| chunk_rows(n, rows, n_threads).max(1))
            .collect();
        let mut first = vec![0];
        for (n, c) in n_outs.iter().zip(&chunks) {
            first.push(first.last().unwrap() + n.div_ceil(*c));
        }
        RowTasks {
            n_outs,
            chunks,
            first,
        }
    }

    pub(crate) fn len(&self) -> usize {
        *self.first.last().unwrap()
    }

    /// The weight task `task` belongs to and its rows.
    pub(crate) fn get(&self, task: usize) -> (usize, std::ops::Range<usize>) {
        let ji = self.first.partition_point(|&f| f <= task) - 1;
        let r0 = (task - self.first[ji]) * self.chunks[ji];
        (ji, r0..(r0 + self.chunks[ji]).min(self.n_outs[ji]))
    }
}

/// Weight rows per task: long ranges when the weights are streamed for a few activation rows,
/// `CHUNK` otherwise (each weight row is then reused by many activation rows).
fn chunk_rows(n_out: usize, rows: usize, n_threads: usize) -> usize {
    if rows > MAX_ROWS || n_threads == 1 {
        return CHUNK;
    }
    n_out
        .div_ceil(n_threads * GEMV_TASKS_PER_THREAD)
        .next_multiple_of(CHUNK)
}

/// Weight rows `range` of one job against every activation row, `MAX_ROWS` at a time.
fn run_chunk(job: &Job, range: std::ops::Range<usize>, act: &[u8], a_row: usize, rows: usize) {
    let (w, k) = (&job.w, job.k);
    let (n_in, n_out) = (w.n_in, w.n_out);
    let w_row = w.data.len() / n_out;
    let (r0, r1) = (range.start, range.end);
    let mut dots = [0f32; MAX_ROWS];
    for i0 in (0..rows).step_by(MAX_ROWS) {
        let g = (rows - i0).min(MAX_ROWS);
        let xs: [&[u8]; MAX_ROWS] =
            std::array::from_fn(|j| &act[(i0 + j.min(g - 1)) * a_row..][..a_row]);
        for r in r0..r1 {
            if i0 == 0 {
                // later groups of activation rows find these rows already cached
                prefetch(w.data, r * w_row + PREFETCH_BYTES, w_row);
            }
            // SAFETY: the table hands out kernels this CPU supports; slices hold whole rows.
            unsafe {
                (k.dot)(
                    n_in,
                    &w.data[r * w_row..][..w_row],
                    &xs[..g],
                    &mut dots[..g],
                )
            };
            for (j, d) in dots[..g].iter().enumerate() {
                // SAFETY: this chunk alone writes columns r0..r1 of every output row.
                unsafe { *job.out.ptr().add((i0 + j) * n_out + r) = *d };
            }
        }
    }
}

/// How far ahead of the weight row being multiplied its stream is requested: the hardware
/// prefetchers alone leave decode waiting on DRAM latency.
pub(crate) const PREFETCH_BYTES: usize = 8192;

/// Asks for the cache lines of `len` bytes at `at` in `data` (nothing past its end).
#[inline(always)]
pub(crate) fn prefetch(data: &[u8], at: usize, len: usize) {
    let bytes = data.as_ptr_range();
    prefetch_lines(bytes.start.wrapping_add(at), len, bytes.end);
}

/// Asks for the cache lines of `len` bytes at `at` that lie below `end`.
#[inline(always)]
pub(crate) fn prefetch_lines(at: *const u8, len: usize, end: *const u8) {
    prefetch_lines_into::<false>(at, len, end)
}

/// `prefetch_lines` into L2 only (a stream read later, not next).
#[inline(always)]
pub(crate) fn prefetch_lines_l2(at: *const u8, len: usize, end: *const u8) {
    prefetch_lines_into::<true>(at, len, end)
}

/// Asks for `lines` consecutive cache lines from `at`, with no bound per line: the caller has
/// checked that they lie in mapped memory. With `lines` a constant this is a few bare
/// prefetches, where `prefetch_lines`' bound and loop cost a packed kernel as much as a
/// sub-block's arithmetic.
#[inline(always)]
pub(crate) fn prefetch_line_run(at: *const u8, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in 0..lines {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch has no side effects (the caller keeps it to mapped memory).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(64 * line).cast()) };
    }
}

#[inline(always)]
fn prefetch_lines_into<const L2: bool>(at: *const u8, len: usize, end: *const u8) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..len.min((end as usize).saturating_sub(at as usize))).step_by(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let line = at.wrapping_add(line).cast();
        // SAFETY: a prefetch has no side effects (the caller keeps it to mapped memory).
        unsafe {
            if L2 {
                _mm_prefetch::<_MM_HINT_T1>(line)
            } else {
                _mm_prefetch::<_MM_HINT_T0>(line)
            }
        };
    }
}

/// Quantizes `rows` activation rows of `n_in` into `act` (`a_row` bytes each), in parallel.
fn quantize_rows(
    pool: &ThreadPool,
    ty: GgmlType,
    x: &[f32],
    rows: usize,
    n_in: usize,
    a_row: usize,
    act: &mut [u8],
) -> Result<()> {
    if rows == 1 {
        return quantize_row(ty, x, act);
    }
    let act_ptr = SharedMut(act.as_mut_ptr());
    let failed = std::sync::atomic::AtomicBool::new(false);
    pool.run(rows.div_ceil(QUANT_ROWS), &|task| {
        for i in task * QUANT_ROWS..((task + 1) * QUANT_ROWS).min(rows) {
            // SAFETY: each task writes its own rows.
            let dst =
                unsafe { std::slice::from_raw_parts_mut(act_ptr.ptr().add(i * a_row), a_row) };
            if quantize_row(ty, &x[i * n_in..][..n_in], dst).is_err() {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    if failed.into_inner() {
        return Err(Error::Shape(format!(
            "cannot quantize rows of {n_in} to {ty}"
        )));
    }
    Ok(())
}

fn matmul_f32(pool: &ThreadPool, w: &WeightView, x: &[f32], rows: usize, out: &mut [f32]) {
    let (n_in, n_out) = (w.n_in, w.n_out);
    let row_bytes = w.data.len() / n_out.max(1);
    let out_ptr = SharedMut(out.as_mut_ptr());
    pool.run(n_out.div_ceil(CHUNK), &|task| {
        let (r0, r1) = (task * CHUNK, ((task + 1) * CHUNK).min(n_out));
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.resize(CHUNK * n_in, 0.0);
            for r in r0..r1 {
                let src = &w.data[r * row_bytes..(r + 1) * row_bytes];
                let dst = &mut scratch[(r - r0) * n_in..(r - r0 + 1) * n_in];
                dequantize_row(w.ty, src, dst).expect("type and length checked by the caller");
            }
            let wrow = |r: usize| &scratch[(r - r0) * n_in..(r - r0 + 1) * n_in];
            for i in 0..rows {
                let xi = &x[i * n_in..(i + 1) * n_in];
                // SAFETY: this task alone writes columns r0..r1 of every output row.
                let o =
                    unsafe { std::slice::from_raw_parts_mut(out_ptr.ptr().add(i * n_out), n_out) };
                let mut r = r0;
                while r + 4 <= r1 {
                    let d = dot4(xi, [wrow(r), wrow(r + 1), wrow(r + 2), wrow(r + 3)]);
                    o[r..r + 4].copy_from_slice(&d);
                    r += 4;
                }
                while r < r1 {
                    o[r] = dot(xi, wrow(r));
                    r += 1;
                }
            }
        });
    });
}

pub fn embed(w: &WeightView, ids: &[u32], out: &mut [f32]) -> Result<()> {
    let row_bytes = w.row_bytes()?;
    if out.len() != ids.len() * w.n_in || w.data.len() != row_bytes * w.n_out {
        return Err(Error::Shape(format!(
            "embed: {} ids into {} floats of width {}",
            ids.len(),
            out.len(),
            w.n_in
        )));
    }
    for (i, &id) in ids.iter().enumerate() {
        let id = id as usize;
        if id >= w.n_out {
            return Err(Error::Model(format!(
                "token id {id} outside the vocabulary of {}",
                w.n_out
            )));
        }
        let row = &mut out[i * w.n_in..(i + 1) * w.n_in];
        // the packed copy, when there is one, is what stays resident
        match packed::packed(w) {
            Some(p) => p.dequantize_row(id, row),
            None => dequantize_row(w.ty, &w.data[id * row_bytes..(id + 1) * row_bytes], row)?,
        }
    }
    Ok(())
}
