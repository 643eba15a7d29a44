//! Quantized GEMM for many activation rows (prefill, perplexity, long draft verification).
//!
//! Weights are unpacked per tile of `NR` rows into one affine u8 form (`unpack`) in the VNNI
//! layout `(k / 4, NR, 4)`, once per tile, then reused by every activation row; activations are
//! quantized once per call to i8 with an f32 scale per 32 and the scaled sums of each 16 and 32.
//! The microkernel accumulates `vpdpbusd` per sub-block and applies the (scale, min) pair of
//! every weight row as a vector, so a prefill reads each weight once and spends its time in
//! integer dot products rather than in unpacking. With AMX the unpacked tile is dequantized
//! further to bf16 and the activations rounded to bf16, so `tdpbf16ps` accumulates over all of
//! k with no per-sub-block scaling (which bounded an AMX-INT8 kernel to VNNI's speed).
//! The FFN's gate and up weights go through together (`gemm_glu`): a task's gate tile and up
//! tile, gated as they come out, so only the gated product reaches memory.
mod acts;
pub mod unpack;
#[cfg(target_arch = "x86_64")]
mod x86_amx;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

#[cfg(test)]
pub(crate) mod tests;

use crate::pool::{SharedMut, ThreadPool};
use crate::simd::{tier, Tier};
use ishizuki_core::backend::Activation;
use ishizuki_core::WeightView;
use std::cell::RefCell;
use std::ops::Range;

/// Weight rows per tile: one 512-bit vector of i32 lanes.
pub const NR: usize = 16;
/// Activation rows a microkernel handles at once; panels of rows are multiples of it, and the
/// GEMM's quantized activations are padded to it (AMX loads whole 16-row tiles).
pub const MR: usize = 16;
/// Fewest activation rows the GEMM takes. Unpacking a tile pays off from 8 rows, but up to
/// `VERIFY_ROWS` rows (draft verification) every matmul must give each row exactly what a
/// one-row matmul gives, which the row-dot and packed kernels do and the GEMM does not.
pub const MIN_ROWS: usize = crate::VERIFY_ROWS + 1;
/// Most weight tiles a microkernel takes per call (`Microkernel::tiles`).
const MAX_TILES: usize = 2;
/// Tasks per thread to aim for when splitting activation rows of a matmul with few tiles.
const TASKS_PER_THREAD: usize = 4;

/// Activations quantized for the GEMM: `x[m][k] ~= d[m][k / 32] * q[m][k]`; `sum16` / `sum32`
/// hold `d * sum(q)` of each 16 / 32 elements (the weights' min terms multiply these).
#[derive(Default)]
pub struct Acts {
    pub k: usize,
    pub rows: usize,
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub sum16: Vec<f32>,
    pub sum32: Vec<f32>,
    /// The activations rounded to bf16 instead (`round_bf16_padded`), for the AMX-BF16 kernel:
    /// `(rows / MR, k / 32, MR, 32)`, so each 16 x 32 tile is 1 KiB in one piece.
    pub bf16: Vec<u16>,
}

impl Acts {
    /// Where activation rows `m0..m0 + R` start: their quants, their scales (one per 32
    /// quants) and the scaled sums of each `sub` (16 or 32) quants, as the kernels walk them.
    #[allow(clippy::type_complexity)]
    pub fn row_ptrs<const R: usize>(
        &self,
        m0: usize,
        sub: usize,
    ) -> ([*const i8; R], [*const f32; R], [*const f32; R]) {
        let k = self.k;
        let sums = if sub == 16 { &self.sum16 } else { &self.sum32 };
        (
            std::array::from_fn(|r| self.q.as_ptr().wrapping_add((m0 + r) * k)),
            std::array::from_fn(|r| self.d.as_ptr().wrapping_add((m0 + r) * (k / 32))),
            std::array::from_fn(|r| sums.as_ptr().wrapping_add((m0 + r) * (k / sub))),
        )
    }

    /// Quantizes `rows` rows of `k` (a multiple of 32) elements, in parallel.
    pub fn quantize(&mut self, pool: &ThreadPool, x: &[f32], rows: usize, k: usize) {
        self.quantize_padded(pool, x, rows, k, 1);
    }

    /// `quantize`, with zero rows after the last up to a multiple of `group` rows.
    pub fn quantize_padded(
        &mut self,
        pool: &ThreadPool,
        x: &[f32],
        rows: usize,
        k: usize,
        group: usize,
    ) {
        assert!(k.is_multiple_of(32) && x.len() == rows * k);
        self.k = k;
        self.rows = rows;
        let padded = rows.next_multiple_of(group);
        self.q.resize(padded * k, 0);
        self.q[rows * k..].fill(0);
        for (v, per_row) in [
            (&mut self.d, k / 32),
            (&mut self.sum16, k / 16),
            (&mut self.sum32, k / 32),
        ] {
            v.resize(padded * per_row, 0.0);
            v[rows * per_row..].fill(0.0);
        }
        let (q, d) = (
            SharedMut(self.q.as_mut_ptr()),
            SharedMut(self.d.as_mut_ptr()),
        );
        let s16 = SharedMut(self.sum16.as_mut_ptr());
        let s32 = SharedMut(self.sum32.as_mut_ptr());
        for_each_row(pool, rows, &|m| {
            // SAFETY: each call writes only its own row of every array.
            unsafe {
                acts::quantize_row(
                    &x[m * k..][..k],
                    std::slice::from_raw_parts_mut(q.ptr().add(m * k), k),
                    std::slice::from_raw_parts_mut(d.ptr().add(m * k / 32), k / 32),
                    std::slice::from_raw_parts_mut(s16.ptr().add(m * k / 16), k / 16),
                    std::slice::from_raw_parts_mut(s32.ptr().add(m * k / 32), k / 32),
                )
            }
        });
    }

    /// Rounds `rows` rows of `k` elements to bf16 into `bf16` as AMX tiles (`tiled_at`), zero
    /// rows after the last up to a multiple of `group` (a multiple of `MR`).
    fn round_bf16_padded(
        &mut self,
        pool: &ThreadPool,
        x: &[f32],
        rows: usize,
        k: usize,
        group: usize,
    ) {
        assert!(k.is_multiple_of(32) && x.len() == rows * k);
        (self.k, self.rows) = (k, rows);
        self.bf16.resize(rows.next_multiple_of(group) * k, 0);
        // the last group's tiles interleave its rows: zero them all, then write the real ones
        self.bf16[rows / group * group * k..].fill(0);
        let out = SharedMut(self.bf16.as_mut_ptr());
        for_each_row(pool, rows, &|m| {
            // SAFETY: each call writes only its own row; the AMX tier implies AVX-512.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                x86_amx::row_to_bf16_tiled(&x[m * k..][..k], m, out.ptr())
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                let _ = (m, &out);
                unreachable!("bf16 kernels exist on x86-64 only")
            }
        });
    }
}

/// `f(m)` for every row `m < rows`, in runs of consecutive rows across the pool.
fn for_each_row(pool: &ThreadPool, rows: usize, f: &(dyn Fn(usize) + Sync)) {
    let per_task = rows.div_ceil(pool.n_threads() * TASKS_PER_THREAD).max(1);
    pool.run(rows.div_ceil(per_task), &|task| {
        (task * per_task..((task + 1) * per_task).min(rows)).for_each(f)
    });
}

/// `NR` weight rows unpacked: `q` in the layout `(k / 4, NR, 4)`, `scale` / `min` as
/// `(k / sub, NR)`. Rows past the weight's end are zero.
#[derive(Default)]
pub struct Tile {
    pub sub: usize,
    pub q: Vec<u8>,
    pub scale: Vec<f32>,
    pub min: Vec<f32>,
    row_q: Vec<u8>,
    row_scale: Vec<f32>,
    row_min: Vec<f32>,
}

impl Tile {
    /// Unpacks rows `n0..n0 + NR` of `w`; false when `w`'s type has no unpacker or a row is
    /// malformed.
    pub fn unpack(&mut self, w: &WeightView, n0: usize) -> bool {
        let Some(sub) = unpack::sub_block(w.ty) else {
            return false;
        };
        let k = w.n_in;
        self.sub = sub;
        self.q.resize(k * NR, 0);
        self.scale.resize(k / sub * NR, 0.0);
        self.min.resize(k / sub * NR, 0.0);
        if let Some(p) = crate::packed::packed(w) {
            p.unpack_tile(n0 / NR, &mut self.q, &mut self.scale, &mut self.min);
            return true;
        }
        let Ok(row_bytes) = w.row_bytes() else {
            return false;
        };
        self.row_q.resize(k, 0);
        self.row_scale.resize(k / sub, 0.0);
        self.row_min.resize(k / sub, 0.0);
        for n in 0..NR {
            let r = n0 + n;
            if r >= w.n_out {
                self.row_q.fill(0);
                self.row_scale.fill(0.0);
                self.row_min.fill(0.0);
            } else {
                let Some(src) = w.data.get(r * row_bytes..(r + 1) * row_bytes) else {
                    return false;
                };
                let (q, s, m) = (&mut self.row_q, &mut self.row_scale, &mut self.row_min);
                if !unpack::unpack_row(w.ty, src, q, s, m) {
                    return false;
                }
            }
            for (kq, v) in self.row_q.chunks_exact(4).enumerate() {
                self.q[(kq * NR + n) * 4..][..4].copy_from_slice(v);
            }
            for (s, (&sc, &mn)) in self.row_scale.iter().zip(&self.row_min).enumerate() {
                self.scale[s * NR + n] = sc;
                self.min[s * NR + n] = mn;
            }
        }
        true
    }
}

/// The microkernel: `out[m][0..n_valid] = tiles . acts[m]` (the tiles' rows in order) for every
/// `m` in `rows`, `out` pointing at the first row's first output and rows `ld` apart.
/// Unsafe: the tier's instructions must exist and `out` must have room.
#[derive(Clone, Copy)]
pub struct Microkernel {
    run: unsafe fn(&[Tile], &Acts, Range<usize>, *mut f32, usize, usize),
    /// Takes the activations as bf16 (`Acts::bf16`) rather than quantized to i8.
    bf16: bool,
    /// Adjacent weight tiles per call (the outputs' `n_valid` columns span all of them).
    tiles: usize,
}

/// The GEMM microkernel for this tier, if it has one (the scalar tier keeps the row-dot kernels).
pub fn microkernel(t: Tier) -> Option<Microkernel> {
    #[cfg(target_arch = "x86_64")]
    if t >= Tier::Amx {
        return Some(Microkernel {
            run: x86_amx::tile_rows,
            bf16: true,
            tiles: x86_amx::TILES,
        });
    }
    #[cfg(target_arch = "x86_64")]
    if t >= Tier::Avx512 {
        return Some(Microkernel {
            run: x86_avx512::tile_rows,
            bf16: false,
            tiles: 1,
        });
    }
    #[cfg(target_arch = "x86_64")]
    if t >= Tier::Avx2 {
        return Some(Microkernel {
            run: x86_avx2::tile_rows,
            bf16: false,
            tiles: 1,
        });
    }
    let _ = t;
    None
}

/// Whether `matmul` should take the GEMM path for these weights and rows.
pub fn applies(ws: &[WeightView], rows: usize) -> bool {
    rows >= MIN_ROWS
        && microkernel(tier()).is_some()
        && ws.iter().all(|w| {
            unpack::sub_block(w.ty).is_some() && w.n_in == ws[0].n_in && w.row_bytes().is_ok()
        })
}

thread_local! {
    static TILES: RefCell<[Tile; MAX_TILES]> = RefCell::new(Default::default());
    static ACTS: RefCell<Acts> = RefCell::new(Acts::default());
    /// A `gemm_glu` task's products before gating: `(rows, 2 NR)`.
    static GATED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `outs[i] (rows, n_out_i) = x (rows, k) . ws[i]^T` for weights that `applies` accepted.
/// Returns false if a tile could not be unpacked (a malformed weight).
pub fn gemm(
    pool: &ThreadPool,
    ws: &[WeightView],
    x: &[f32],
    rows: usize,
    outs: &mut [&mut [f32]],
) -> bool {
    let kernel = microkernel(tier()).expect("checked by applies");
    gemm_with(kernel, pool, ws, x, rows, outs)
}

/// `gemm` with a given microkernel (the tests run every tier's).
fn gemm_with(
    kernel: Microkernel,
    pool: &ThreadPool,
    ws: &[WeightView],
    x: &[f32],
    rows: usize,
    outs: &mut [&mut [f32]],
) -> bool {
    let outs: Vec<SharedMut<f32>> = outs.iter_mut().map(|o| SharedMut(o.as_mut_ptr())).collect();
    // a task's unit: `kernel.tiles` adjacent tiles of one weight (fewer at its end)
    let per = kernel.tiles * NR;
    let units: Vec<usize> = ws.iter().map(|w| w.n_out.div_ceil(per)).collect();
    let n_units: usize = units.iter().sum();
    run_units(
        kernel,
        pool,
        ws[0].n_in,
        x,
        rows,
        n_units,
        &|unit, acts, m, tiles| {
            let (mut unit, mut ji) = (unit, 0);
            while unit >= units[ji] {
                unit -= units[ji];
                ji += 1;
            }
            let (w, n0) = (&ws[ji], unit * per);
            let n_valid = (w.n_out - n0).min(per);
            let tiles = &mut tiles[..n_valid.div_ceil(NR)];
            for (i, t) in tiles.iter_mut().enumerate() {
                if !t.unpack(w, n0 + i * NR) {
                    return false;
                }
            }
            // SAFETY: the tier is supported; this task alone writes columns n0..n0 + n_valid
            // of rows `m`, inside the (rows, n_out) output.
            unsafe {
                let out = outs[ji].ptr().add(m.start * w.n_out + n0);
                (kernel.run)(tiles, acts, m, out, w.n_out, n_valid)
            };
            true
        },
    )
}

/// `out (rows, n_out) = act(x . gate^T) * (x . up^T)` for a gate and an up weight that `applies`
/// accepted together: a task's tile of each in one microkernel call, gated as it comes out, so
/// the two products never go to memory. Returns false for a malformed weight.
pub fn gemm_glu(
    pool: &ThreadPool,
    [gate, up]: [&WeightView; 2],
    x: &[f32],
    rows: usize,
    out: &mut [f32],
    act: Activation,
) -> bool {
    let kernel = microkernel(tier()).expect("checked by applies");
    gemm_glu_with(kernel, pool, [gate, up], x, rows, out, act)
}

/// `gemm_glu` with a given microkernel.
fn gemm_glu_with(
    kernel: Microkernel,
    pool: &ThreadPool,
    [gate, up]: [&WeightView; 2],
    x: &[f32],
    rows: usize,
    out: &mut [f32],
    act: Activation,
) -> bool {
    let n_out = gate.n_out;
    let out = SharedMut(out.as_mut_ptr());
    let units = n_out.div_ceil(NR);
    run_units(
        kernel,
        pool,
        gate.n_in,
        x,
        rows,
        units,
        &|unit, acts, m, tiles| {
            let (n0, n_rows) = (unit * NR, m.len());
            let n_valid = (n_out - n0).min(NR);
            if !(tiles[0].unpack(gate, n0) && tiles[1].unpack(up, n0)) {
                return false;
            }
            GATED.with_borrow_mut(|both| {
                // row r: the gate's 16 products, then the up's
                both.resize(n_rows * 2 * NR, 0.0);
                let at = both.as_mut_ptr();
                // SAFETY: the tier is supported and `both` holds `n_rows` rows of 2 NR.
                unsafe {
                    if kernel.tiles >= 2 {
                        (kernel.run)(&tiles[..2], acts, m.clone(), at, 2 * NR, 2 * NR);
                    } else {
                        for t in 0..2 {
                            (kernel.run)(
                                &tiles[t..t + 1],
                                acts,
                                m.clone(),
                                at.add(t * NR),
                                2 * NR,
                                NR,
                            );
                        }
                    }
                }
                for (r, pair) in both.chunks_exact_mut(2 * NR).enumerate() {
                    let (g, u) = pair.split_at_mut(NR);
                    crate::ops::glu(&mut g[..n_valid], &u[..n_valid], act);
                    // SAFETY: this task alone writes columns n0..n0 + n_valid of rows `m`.
                    let o = unsafe { out.ptr().add((m.start + r) * n_out + n0) };
                    unsafe { std::ptr::copy_nonoverlapping(g.as_ptr(), o, n_valid) };
                }
            });
            true
        },
    )
}

/// A GEMM task's work: unit `u`'s products for activation rows `m` with the thread's tiles;
/// false for a malformed weight.
type UnitFn<'a> = dyn Fn(usize, &Acts, Range<usize>, &mut [Tile; MAX_TILES]) -> bool + Sync + 'a;

/// Prepares the activations for `kernel` and runs `unit(u, acts, rows, tiles)` for every unit
/// `u < n_units` and panel of activation rows across the pool (panels only when there are too
/// few units to keep every thread busy). False when a unit was.
fn run_units(
    kernel: Microkernel,
    pool: &ThreadPool,
    k: usize,
    x: &[f32],
    rows: usize,
    n_units: usize,
    unit: &UnitFn<'_>,
) -> bool {
    let want = pool.n_threads() * TASKS_PER_THREAD;
    let panels = want.div_ceil(n_units).min(rows.div_ceil(MR)).max(1);
    let panel_rows = rows.div_ceil(panels).next_multiple_of(MR);
    let panels = rows.div_ceil(panel_rows);
    let failed = std::sync::atomic::AtomicBool::new(false);
    ACTS.with_borrow_mut(|acts| {
        if kernel.bf16 {
            acts.round_bf16_padded(pool, x, rows, k, MR);
        } else {
            acts.quantize_padded(pool, x, rows, k, MR);
        }
        let acts: &Acts = acts;
        pool.run(n_units * panels, &|task| {
            let (u, panel) = (task / panels, task % panels);
            let m = panel * panel_rows..((panel + 1) * panel_rows).min(rows);
            if !TILES.with_borrow_mut(|tiles| unit(u, acts, m, tiles)) {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
    });
    !failed.into_inner()
}
