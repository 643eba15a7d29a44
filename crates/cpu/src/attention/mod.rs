//! Causal (optionally sliding-window) attention over a head-major f16 KV cache (each KV head's
//! positions contiguous, so a task streams them sequentially). A task takes one query row,
//! one KV head and a range of keys: the query heads that share the KV head (GQA) read each key and
//! value once. Long decode contexts are split over keys (flash-decoding) so every thread works,
//! and the partial softmaxes are merged.
use crate::pool::{SharedMut, ThreadPool};
use crate::simd::{tier, Tier};
use half::f16;
use ishizuki_core::{backend::AttnParams, Error, Result};
use std::cell::RefCell;
use std::ops::Range;

/// Largest group of query heads the SIMD passes take; larger groups take the portable path.
#[cfg(target_arch = "x86_64")]
const MAX_GROUP: usize = 8;

/// Calls `$f::<G>(args)` (or `$f::<W, G>`) for the group size `$g` (1..=MAX_GROUP, checked
/// by the passes' `fits`).
#[cfg(target_arch = "x86_64")]
macro_rules! by_group {
    ($g:expr, $f:ident$(::<$w:literal>)?($($arg:expr),*)) => {
        match $g {
            1 => $f::<$($w,)? 1>($($arg),*),
            2 => $f::<$($w,)? 2>($($arg),*),
            3 => $f::<$($w,)? 3>($($arg),*),
            4 => $f::<$($w,)? 4>($($arg),*),
            5 => $f::<$($w,)? 5>($($arg),*),
            6 => $f::<$($w,)? 6>($($arg),*),
            7 => $f::<$($w,)? 7>($($arg),*),
            8 => $f::<$($w,)? 8>($($arg),*),
            _ => unreachable!("checked by fits"),
        }
    };
}

/// Calls `$f::<HD>(args)` (or `$f::<T, HD>`) for the head size `$hd` (checked by the blocked
/// paths' `fits`).
#[cfg(target_arch = "x86_64")]
macro_rules! by_hd {
    ($hd:expr, $f:ident$(::<$t:ty>)?($($arg:expr),*)) => {
        match $hd {
            32 => $f::<$($t,)? 32>($($arg),*),
            64 => $f::<$($t,)? 64>($($arg),*),
            128 => $f::<$($t,)? 128>($($arg),*),
            256 => $f::<$($t,)? 256>($($arg),*),
            _ => unreachable!("checked by fits"),
        }
    };
}

/// `impl blocked::Passes for $tier` from the calling module's `LANES`, `KEYS` and `passes`
/// (a `#[target_feature]` fn with `run`'s signature).
#[cfg(target_arch = "x86_64")]
macro_rules! impl_passes {
    ($tier:ident) => {
        impl Passes for $tier {
            const LANES: usize = LANES;
            const KEYS: usize = KEYS;
            unsafe fn run<const HD: usize>(s: &mut Scratch, a: &BlockInput) -> [f32; MAX_LANES] {
                passes::<HD>(s, a)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod blocked;
#[cfg(target_arch = "x86_64")]
mod blocked_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

/// A score or value pass over one KV head for a group of query heads (`x86_avx512::scores`).
#[cfg(target_arch = "x86_64")]
type Pass = unsafe fn(&[f32], &[f16], usize, usize, usize, &mut [f32]);

/// Keys a score pass takes at once for `group` heads: their `group * keys` sums, a key and a
/// spare fit `regs` vector registers, and the sums reduce together (`x86_avx2::sum8x4`).
#[cfg(target_arch = "x86_64")]
const fn keys_per_step(group: usize, regs: usize) -> usize {
    if group * 4 + 2 <= regs {
        4
    } else if group * 2 + 2 <= regs {
        2
    } else {
        1
    }
}

/// Fewest keys worth a task of their own.
const MIN_KEYS_PER_SPLIT: usize = 128;

/// Partial result of one key range for `group` query heads, over a flat slice of
/// `partial_len` floats: per head its max score and sum of exp, then `(group, hd)`
/// unnormalised weighted sums of values.
struct Partial<'a> {
    max: &'a mut [f32],
    sum: &'a mut [f32],
    acc: &'a mut [f32],
}

impl<'a> Partial<'a> {
    fn new(flat: &'a mut [f32], group: usize) -> Partial<'a> {
        let (max, rest) = flat.split_at_mut(group);
        let (sum, acc) = rest.split_at_mut(group);
        Partial { max, sum, acc }
    }
}

/// Floats of one `Partial` of `group` heads of `hd`.
fn partial_len(group: usize, hd: usize) -> usize {
    group * (2 + hd)
}

thread_local! {
    /// A task's scores `(group, keys)`, then (where its result is not split) its partial.
    static SCORES: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// The caller's partials of a call whose keys are split, one slot per task.
    static PARTIALS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The caller's per-row task plan.
    static PLAN: RefCell<Vec<RowTasks>> = const { RefCell::new(Vec::new()) };
}

#[allow(clippy::too_many_arguments)]
pub fn attention(
    pool: &ThreadPool,
    q: &[f32],
    k: &[f16],
    v: &[f16],
    n_kv: usize,
    positions: &[u32],
    p: &AttnParams,
    out: &mut [f32],
) -> Result<()> {
    let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
    let rows = positions.len();
    let head = nkv * hd;
    let capacity = k.len().checked_div(head).unwrap_or(0);
    if nkv == 0
        || !nh.is_multiple_of(nkv)
        || q.len() != rows * nh * hd
        || out.len() != q.len()
        || k.len() != capacity * head
        || v.len() != k.len()
        || capacity < n_kv
        || positions.iter().any(|&p| p as usize >= n_kv)
    {
        return Err(Error::Shape(format!(
            "attention: {rows} rows, {nh}/{nkv} heads of {hd}, {n_kv} cached positions"
        )));
    }
    let group = nh / nkv;
    // verification rows must equal one-row calls bit for bit: each row is split as if alone
    let verify = rows <= crate::VERIFY_ROWS;
    #[cfg(target_arch = "x86_64")]
    if !verify && attend_blocks(pool, q, k, v, capacity, positions, p, out) {
        return Ok(());
    }
    let want_tasks = 2 * pool.n_threads();
    let splits_for = |units: usize, keys: usize| {
        if units >= want_tasks {
            1
        } else {
            want_tasks
                .div_ceil(units)
                .min(keys.div_ceil(MIN_KEYS_PER_SPLIT))
                .max(1)
        }
    };
    let longest = positions.iter().map(|&p| p as usize + 1).max().unwrap_or(0);
    let uniform = splits_for(rows * nkv, longest);
    let slot = partial_len(group, hd);
    PLAN.with_borrow_mut(|plan| {
        plan.clear();
        let mut first_task = 0;
        for &pos in positions {
            let splits = if verify {
                splits_for(nkv, pos as usize + 1)
            } else {
                uniform
            };
            plan.push(RowTasks { first_task, splits });
            first_task += nkv * splits;
        }
        let any_split = plan.iter().any(|r| r.splits > 1);
        PARTIALS.with_borrow_mut(|partials| {
            partials.resize(if any_split { first_task * slot } else { 0 }, 0.0);
            let parts = SharedMut(partials.as_mut_ptr());
            let work = RowWork {
                q,
                k,
                v,
                capacity,
                positions,
                p,
            };
            attend_rows(pool, &work, plan, first_task, parts, out);
            for (row, tasks) in plan.iter().enumerate().filter(|(_, r)| r.splits > 1) {
                for kvh in 0..nkv {
                    let o = &mut out[(row * nh + kvh * group) * hd..][..group * hd];
                    let first = (tasks.first_task + kvh * tasks.splits) * slot;
                    merge(&partials[first..][..tasks.splits * slot], group, hd, o);
                }
            }
        });
    });
    Ok(())
}

/// One query row's tasks in the per-row path: `nkv * splits` of them from `first_task`, KV
/// head major.
#[derive(Clone, Copy)]
struct RowTasks {
    first_task: usize,
    splits: usize,
}

/// The per-row path's inputs, shapes checked by `attention`.
struct RowWork<'a> {
    q: &'a [f32],
    k: &'a [f16],
    v: &'a [f16],
    capacity: usize,
    positions: &'a [u32],
    p: &'a AttnParams,
}

/// The per-row path's tasks: query row, KV head and key range `split` of the row's `splits`
/// each; a task writes its partial into its slot of `parts` when its row is split, else its
/// heads' rows of `out`.
fn attend_rows(
    pool: &ThreadPool,
    w: &RowWork,
    plan: &[RowTasks],
    n_tasks: usize,
    parts: SharedMut<f32>,
    out: &mut [f32],
) {
    let p = w.p;
    let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
    let group = nh / nkv;
    let slot = partial_len(group, hd);
    let out_ptr = SharedMut(out.as_mut_ptr());
    pool.run(n_tasks, &|task| {
        let row = plan.partition_point(|r| r.first_task <= task) - 1;
        let RowTasks { first_task, splits } = plan[row];
        let (kvh, split) = ((task - first_task) / splits, (task - first_task) % splits);
        let pos = w.positions[row] as usize;
        let first = p.window.map_or(0, |win| (pos + 1).saturating_sub(win));
        let per = (pos + 1 - first).div_ceil(splits);
        let (j0, j1) = (
            first + split * per,
            (first + (split + 1) * per).min(pos + 1),
        );
        let at = (row * nh + kvh * group) * hd;
        let kv = kvh * w.capacity * hd..(kvh + 1) * w.capacity * hd;
        let qs = &w.q[at..][..group * hd];
        let kv = (&w.k[kv.clone()], &w.v[kv]);
        if splits == 1 {
            SCORES.with_borrow_mut(|(scores, part)| {
                part.resize(slot, 0.0);
                attend_range(qs, kv, hd, j0..j1, p, scores, Partial::new(part, group));
                // SAFETY: each (row, kv head) unit writes only its own query heads.
                let o =
                    unsafe { std::slice::from_raw_parts_mut(out_ptr.ptr().add(at), group * hd) };
                merge(part, group, hd, o);
            });
        } else {
            // SAFETY: each task writes only its own slot; slots are read after `run` returns.
            let part =
                unsafe { std::slice::from_raw_parts_mut(parts.ptr().add(task * slot), slot) };
            SCORES.with_borrow_mut(|(scores, _)| {
                attend_range(qs, kv, hd, j0..j1, p, scores, Partial::new(part, group))
            });
        }
    });
}

/// The blocked path (AVX-512, else AVX2) for several query rows, when it takes these heads
/// and has a task for every thread; false leaves the work to the per-row path. Shapes checked
/// by the caller.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn attend_blocks(
    pool: &ThreadPool,
    q: &[f32],
    k: &[f16],
    v: &[f16],
    capacity: usize,
    positions: &[u32],
    p: &AttnParams,
    out: &mut [f32],
) -> bool {
    let (hd, nh, nkv, rows) = (p.head_dim, p.n_head, p.n_head_kv, positions.len());
    let group = nh / nkv;
    use blocked::{Avx512, Passes};
    use blocked_avx2::Avx2;
    let wide = tier() >= Tier::Avx512 && blocked::fits::<Avx512>(hd, group);
    if rows < 2 || !(wide || tier() >= Tier::Avx2 && blocked::fits::<Avx2>(hd, group)) {
        return false;
    }
    let block_rows = if wide { Avx512::LANES } else { Avx2::LANES } / group;
    let n_blocks = rows.div_ceil(block_rows);
    // AVX2 blocks of a few rows, one per KV head, leave threads idle where the per-row path
    // splits the keys: they pay from two tasks per thread (`verification_attention_cost`)
    let per_thread = if wide { 1 } else { 2 };
    if n_blocks * nkv < per_thread * pool.n_threads() {
        return false;
    }
    let out = SharedMut(out.as_mut_ptr());
    pool.run(n_blocks * nkv, &|task| {
        // the last rows see the most keys: their blocks go first, so the threads end together
        let (blk, kvh) = (n_blocks - 1 - task / nkv, task % nkv);
        let b = blocked::Block {
            rows: blk * block_rows..((blk + 1) * block_rows).min(rows),
            kvh,
            group,
            n_head: nh,
            positions,
        };
        let kv = kvh * capacity * hd..(kvh + 1) * capacity * hd;
        // SAFETY: the tier has the path's instructions, its `fits` holds, the caller checked
        // every position against the cache and `out`'s shape; tasks write disjoint head rows.
        unsafe {
            let attend = if wide {
                blocked::attend::<Avx512>
            } else {
                blocked::attend::<Avx2>
            };
            attend(&b, q, &k[kv.clone()], &v[kv], hd, p, out.ptr())
        };
    });
    true
}

/// Attends `group` query heads `qs (group, hd)` to positions `keys` of one KV head's keys and
/// values `(capacity, hd)`, into `part`, with `scores` as scratch.
fn attend_range(
    qs: &[f32],
    (k, v): (&[f16], &[f16]),
    hd: usize,
    keys: Range<usize>,
    p: &AttnParams,
    scores: &mut Vec<f32>,
    mut part: Partial,
) {
    let group = qs.len() / hd;
    let (j0, j1) = (keys.start, keys.end.max(keys.start));
    let n = j1 - j0;
    if n == 0 {
        part.max.fill(f32::NEG_INFINITY);
        part.sum.fill(0.0);
        part.acc.fill(0.0);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let passes: Option<(Pass, Pass)> = if tier() >= Tier::Avx512 && x86_avx512::fits(hd, group) {
        Some((x86_avx512::scores, x86_avx512::values))
    } else if tier() >= Tier::Avx2 && x86_avx2::fits(hd, group) {
        Some((x86_avx2::scores, x86_avx2::values))
    } else {
        None
    };
    scores.resize(group * n, 0.0);
    #[cfg(target_arch = "x86_64")]
    if let Some((score_pass, value_pass)) = passes {
        // SAFETY: the tier has the pass's instructions, its `fits` holds, and the caller
        // checked that every position below n_kv is inside k and v.
        unsafe { score_pass(qs, k, hd, j0, j1, scores) };
        finish_scores(scores, group, n, p, &mut part);
        unsafe { value_pass(scores, v, hd, j0, j1, part.acc) };
        return;
    }
    for (jj, j) in (j0..j1).enumerate() {
        let kj = &k[j * hd..][..hd];
        for g in 0..group {
            scores[g * n + jj] = dot_f16(&qs[g * hd..][..hd], kj);
        }
    }
    finish_scores(scores, group, n, p, &mut part);
    part.acc.fill(0.0);
    for (jj, j) in (j0..j1).enumerate() {
        let vj = &v[j * hd..][..hd];
        for g in 0..group {
            axpy_f16(&mut part.acc[g * hd..][..hd], scores[g * n + jj], vj);
        }
    }
}

/// Scales (and soft-caps) raw q.k scores `(group, n)`, then turns each head's row into
/// unnormalised softmax weights, recording its max and sum in `part`.
fn finish_scores(scores: &mut [f32], group: usize, n: usize, p: &AttnParams, part: &mut Partial) {
    if let Some(cap) = p.softcap {
        scores
            .iter_mut()
            .for_each(|s| *s = cap * (*s * p.scale / cap).tanh());
    } else {
        scores.iter_mut().for_each(|s| *s *= p.scale);
    }
    for g in 0..group {
        let row = &mut scores[g * n..][..n];
        let max = crate::vmath::max_of(row);
        part.max[g] = max;
        part.sum[g] = crate::vmath::exp_shifted(row, max);
    }
}

/// Combines key-range partials (consecutive `Partial` layouts in `flat`) into normalised
/// outputs `o (group, hd)`.
fn merge(flat: &[f32], group: usize, hd: usize, o: &mut [f32]) {
    let parts = || flat.chunks_exact(partial_len(group, hd));
    // head `g`'s max and sum in one partial (its value sums at `2 group + g hd`)
    let max = |pt: &[f32], g: usize| pt[g];
    let sum = |pt: &[f32], g: usize| pt[group + g];
    let single = parts().len() == 1;
    for (g, out) in o.chunks_exact_mut(hd).enumerate() {
        // one range keeps its own max: nothing to rescale
        let top = if single {
            0.0
        } else {
            parts().fold(f32::NEG_INFINITY, |m, pt| m.max(max(pt, g)))
        };
        out.fill(0.0);
        let mut total = 0.0;
        for pt in parts() {
            if sum(pt, g) == 0.0 {
                continue;
            }
            let w = if single {
                1.0
            } else {
                (max(pt, g) - top).exp()
            };
            total += sum(pt, g) * w;
            for (a, b) in out.iter_mut().zip(&pt[2 * group + g * hd..][..hd]) {
                *a += w * b;
            }
        }
        let inv = if total > 0.0 { 1.0 / total } else { 0.0 };
        out.iter_mut().for_each(|x| *x *= inv);
    }
}

/// `dot(a, b)` with `b` in f16.
#[inline]
fn dot_f16(a: &[f32], b: &[f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2, FMA and F16C.
        return unsafe { dot_f16_avx2(a, b) };
    }
    a.iter().zip(b).map(|(x, y)| x * y.to_f32()).sum()
}

/// `y += alpha * x` with `x` in f16.
#[inline]
fn axpy_f16(y: &mut [f32], alpha: f32, x: &[f16]) {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2, FMA and F16C.
        return unsafe { axpy_f16_avx2(y, alpha, x) };
    }
    y.iter_mut()
        .zip(x)
        .for_each(|(a, b)| *a += alpha * b.to_f32());
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_avx2(a: &[f32], b: &[f16]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr() as *const __m128i);
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        let kb = _mm256_cvtph_ps(_mm_loadu_si128(pb.byte_add(i * 2)));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), kb, acc);
        i += 8;
    }
    let lo = _mm256_castps256_ps128(acc);
    let s = _mm_add_ps(lo, _mm256_extractf128_ps(acc, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let mut sum = _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
    while i < n {
        sum += a[i] * b[i].to_f32();
        i += 1;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_f16_avx2(y: &mut [f32], alpha: f32, x: &[f16]) {
    use std::arch::x86_64::*;
    let n = y.len().min(x.len());
    let (py, px) = (y.as_mut_ptr(), x.as_ptr() as *const __m128i);
    let va = _mm256_set1_ps(alpha);
    let mut i = 0;
    while i + 8 <= n {
        let xv = _mm256_cvtph_ps(_mm_loadu_si128(px.byte_add(i * 2)));
        _mm256_storeu_ps(
            py.add(i),
            _mm256_fmadd_ps(va, xv, _mm256_loadu_ps(py.add(i))),
        );
        i += 8;
    }
    while i < n {
        y[i] += alpha * x[i].to_f32();
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward f64 reference: softmax over the visible keys of each head.
    /// Keys and values are head-major `(n_head_kv, cap, hd)`.
    fn reference(q: &[f32], k: &[f16], v: &[f16], positions: &[u32], p: &AttnParams) -> Vec<f32> {
        let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
        let cap = k.len() / (nkv * hd);
        let mut out = vec![0f32; q.len()];
        for (r, &pos) in positions.iter().enumerate() {
            for h in 0..nh {
                let kvh = h / (nh / nkv);
                let first = p.window.map_or(0, |w| (pos as usize + 1).saturating_sub(w));
                let qh = &q[(r * nh + h) * hd..][..hd];
                let s: Vec<f64> = (first..=pos as usize)
                    .map(|j| {
                        let kj = &k[(kvh * cap + j) * hd..][..hd];
                        qh.iter()
                            .zip(kj)
                            .map(|(a, b)| *a as f64 * b.to_f64())
                            .sum::<f64>()
                            * p.scale as f64
                    })
                    .map(|s| p.softcap.map_or(s, |c| c as f64 * (s / c as f64).tanh()))
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for (i, j) in (first..=pos as usize).enumerate() {
                    let w = (s[i] - m).exp() / z;
                    for d in 0..hd {
                        out[(r * nh + h) * hd + d] +=
                            (w * v[(kvh * cap + j) * hd + d].to_f64()) as f32;
                    }
                }
            }
        }
        out
    }

    fn check(rows: usize, n_kv: usize, window: Option<usize>, threads: usize) {
        check_heads(rows, n_kv, window, threads, (6, 2, 20), None);
    }

    /// `heads` = (n_head, n_head_kv, head_dim).
    fn check_heads(
        rows: usize,
        n_kv: usize,
        window: Option<usize>,
        threads: usize,
        heads: (usize, usize, usize),
        softcap: Option<f32>,
    ) {
        let p = AttnParams {
            n_head: heads.0,
            n_head_kv: heads.1,
            head_dim: heads.2,
            scale: 0.3,
            window,
            softcap,
        };
        let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
        let val = |i: usize, s: f32| (i as f32 * s).sin() * 2.0;
        let q: Vec<f32> = (0..rows * nh * hd).map(|i| val(i, 0.37)).collect();
        let k: Vec<f16> = (0..n_kv * nkv * hd)
            .map(|i| f16::from_f32(val(i, 0.11)))
            .collect();
        let v: Vec<f16> = (0..n_kv * nkv * hd)
            .map(|i| f16::from_f32(val(i, 0.23)))
            .collect();
        let positions: Vec<u32> = (n_kv - rows..n_kv).map(|x| x as u32).collect();
        let pool = ThreadPool::new(threads);
        let mut out = vec![0f32; q.len()];
        attention(&pool, &q, &k, &v, n_kv, &positions, &p, &mut out).unwrap();
        let want = reference(&q, &k, &v, &positions, &p);
        let err = out
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err < 1e-4,
            "rows {rows} n_kv {n_kv} window {window:?}: error {err}"
        );
    }

    #[test]
    fn matches_reference_for_prefill_decode_and_windows() {
        for threads in [1, 2, 3] {
            check(5, 5, None, threads);
            check(1, 700, None, threads);
            check(1, 700, Some(300), threads);
            check(7, 40, Some(4), threads);
            check(2, 1000, Some(999), threads);
        }
    }

    #[test]
    fn vector_paths_match_reference_for_real_head_shapes() {
        // SmolLM2 (group 3, 64 dims), Gemma 3 (group 4, 256 dims), a group of 8, a group too
        // large for the register-held path, 48 dims (not a multiple of 32), and no grouping
        // (the score passes take 4, 2 or 1 keys at a time by group size, then the rest)
        for heads in [
            (9, 3, 64),
            (4, 1, 256),
            (8, 1, 32),
            (18, 2, 64),
            (4, 2, 48),
            (4, 4, 64),
        ] {
            check_heads(1, 300, None, 2, heads, None);
            check_heads(6, 50, Some(17), 2, heads, None);
        }
        check_heads(3, 40, None, 2, (4, 1, 256), Some(2.0));
    }

    #[test]
    fn query_blocks_match_reference() {
        // many rows: the blocked path, with partial blocks, windows, idle lanes and soft-caps
        for heads in [
            (9, 3, 64),
            (4, 1, 256),
            (8, 1, 32),
            (18, 2, 64),
            (12, 1, 128),
            (6, 6, 64),
        ] {
            for threads in [1, 3] {
                check_heads(37, 80, None, threads, heads, None);
                check_heads(20, 20, Some(7), threads, heads, None);
            }
        }
        check_heads(33, 90, Some(40), 2, (4, 1, 256), Some(2.0));
    }

    /// SmolLM2's heads and a cache of 4096 positions (keys and values alike), for the timings.
    fn smollm2_heads_and_cache() -> (AttnParams, Vec<f16>) {
        let p = AttnParams {
            n_head: 9,
            n_head_kv: 3,
            head_dim: 64,
            scale: 0.125,
            window: None,
            softcap: None,
        };
        let kv = (0..3 * 4096 * 64)
            .map(|i| f16::from_f32((i as f32 * 0.1).sin()))
            .collect();
        (p, kv)
    }

    /// Microseconds per decode attention call (one query row) for SmolLM2's heads and a cache
    /// of `capacity` 4096, 1 and 2 threads:
    /// `cargo test --release -p ishizuki-cpu decode_attention_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn decode_attention_cost() {
        let (p, kv) = smollm2_heads_and_cache();
        let q: Vec<f32> = (0..9 * 64).map(|i| (i as f32 * 0.3).cos()).collect();
        let mut out = vec![0f32; q.len()];
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            for n_kv in [16, 64, 256, 2048] {
                let calls = 20_000;
                let start = std::time::Instant::now();
                for _ in 0..calls {
                    let pos = [n_kv as u32 - 1];
                    attention(&pool, &q, &kv, &kv, n_kv, &pos, &p, &mut out).unwrap();
                }
                let us = start.elapsed().as_secs_f64() * 1e6 / calls as f64;
                println!("{threads} threads, {n_kv} keys: {us:.2} us per call");
            }
        }
    }

    /// Microseconds per attention call of 2-16 query rows (draft verification) for SmolLM2's
    /// heads, 2 threads:
    /// `cargo test --release -p ishizuki-cpu verification_attention_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn verification_attention_cost() {
        let (p, kv) = smollm2_heads_and_cache();
        let pool = ThreadPool::new(2);
        for rows in [2usize, 4, 8, 16] {
            let q: Vec<f32> = (0..rows * 9 * 64).map(|i| (i as f32 * 0.3).cos()).collect();
            let mut out = vec![0f32; q.len()];
            for n_kv in [64usize, 512, 2048] {
                let pos: Vec<u32> = (n_kv - rows..n_kv).map(|x| x as u32).collect();
                let calls = 3000;
                let start = std::time::Instant::now();
                for _ in 0..calls {
                    attention(&pool, &q, &kv, &kv, n_kv, &pos, &p, &mut out).unwrap();
                }
                let us = start.elapsed().as_secs_f64() * 1e6 / calls as f64;
                println!("{rows} rows, {n_kv} keys: {us:.2} us per call");
            }
        }
    }

    /// Milliseconds per prefill attention call of 512 query rows for SmolLM2's heads, from
    /// depth 0 and 2048, 1 and 2 threads:
    /// `cargo test --release -p ishizuki-cpu prefill_attention_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn prefill_attention_cost() {
        let (p, kv) = smollm2_heads_and_cache();
        let rows = 512;
        let q: Vec<f32> = (0..rows * 9 * 64).map(|i| (i as f32 * 0.3).cos()).collect();
        let mut out = vec![0f32; q.len()];
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            for depth in [0usize, 2048] {
                let pos: Vec<u32> = (depth..depth + rows).map(|x| x as u32).collect();
                let best = (0..10)
                    .map(|_| {
                        let start = std::time::Instant::now();
                        attention(&pool, &q, &kv, &kv, depth + rows, &pos, &p, &mut out).unwrap();
                        start.elapsed().as_secs_f64() * 1e3
                    })
                    .fold(f64::MAX, f64::min);
                println!("{threads} threads, {rows} rows from depth {depth}: {best:.2} ms");
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        let p = AttnParams {
            n_head: 3,
            n_head_kv: 2,
            head_dim: 4,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let pool = ThreadPool::new(1);
        let mut out = vec![0f32; 12];
        assert!(attention(
            &pool,
            &[0.0; 12],
            &[f16::ZERO; 8],
            &[f16::ZERO; 8],
            1,
            &[0],
            &p,
            &mut out
        )
        .is_err());
    }
}
