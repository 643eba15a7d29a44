//! AVX-512 attention for blocks of query rows (prefill, draft verification). A task takes
//! consecutive rows and one KV head and holds their queries transposed, one lane per (row,
//! head of the group), so a key costs `hd` FMAs for up to 32 queries and no horizontal sums.
//! Scores are kept keys x lanes, the softmax runs down the lanes, and each key and value row is
//! converted from f16 once per block rather than once per query row.
use half::f16;
use ishizuki_core::backend::AttnParams;
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::ops::Range;

/// Queries per task: two f32 vectors of lanes, so each converted key and value row serves
/// up to 32 queries.
const LANES: usize = 32;
/// f32 vectors of lanes.
const V: usize = LANES / 16;
/// Keys scored at once (independent FMA chains).
const KEYS: usize = 8;
/// f32 bytes of converted value rows held at once (stays in L1).
pub(super) const VALUE_CHUNK_BYTES: usize = 16 << 10;
/// Most lanes of any tier's blocks.
pub(super) const MAX_LANES: usize = 32;

/// One tier's passes over a block, which `attend` frames.
pub(super) trait Passes {
    /// Queries per task (at most `MAX_LANES`).
    const LANES: usize;
    /// Key rows the score pass converts at once.
    const KEYS: usize;
    /// Scores `s.qt` (`(HD, LANES)` queries) against the block's keys, softmaxes them, and
    /// adds the weighted values into `s.acc` (`(LANES, HD)`, zero) for its lanes; returns each
    /// lane's sum of weights. Unsafe: the tier's instructions must exist.
    unsafe fn run<const HD: usize>(s: &mut Scratch, a: &BlockInput) -> [f32; MAX_LANES];
}

/// The AVX-512 passes.
pub(super) struct Avx512;

impl_passes!(Avx512);

/// Whether `T`'s blocks take heads of `hd` dimensions and `group` query heads per KV head.
pub(super) fn fits<T: Passes>(hd: usize, group: usize) -> bool {
    matches!(hd, 32 | 64 | 128 | 256) && (1..=T::LANES).contains(&group)
}

/// A block task's buffers (either tier's, one at a time per thread).
#[derive(Default)]
pub(super) struct Scratch {
    /// `(hd, lanes)` queries.
    pub qt: Vec<f32>,
    /// `(keys, lanes)` scores, then softmax weights.
    pub scores: Vec<f32>,
    /// Converted key or value rows.
    pub rows: Vec<f32>,
    /// `(lanes, hd)` weighted sums of values.
    pub acc: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What a tier's passes take besides the scratch: the block's keys `k` and values `v`
/// (`(j_hi - j_lo, hd)`, from key `j_lo`), the keys lane `l` sees (`lo[l]..=hi[l]`; idle lanes
/// none), its active lanes and the heads' parameters.
pub(super) struct BlockInput<'a> {
    pub k: &'a [f16],
    pub v: &'a [f16],
    pub j_lo: usize,
    pub lo: [i32; MAX_LANES],
    pub hi: [i32; MAX_LANES],
    pub lanes: usize,
    pub p: &'a AttnParams,
}

/// A block around `T`'s passes: the lanes' keys and transposed queries go in, each lane's
/// output is its weighted sum of values over its sum of weights.
unsafe fn attend_hd<T: Passes, const HD: usize>(
    b: &Block,
    q: &[f32],
    k: &[f16],
    v: &[f16],
    p: &AttnParams,
    out: *mut f32,
) {
    let (lanes, width) = (b.lanes(), T::LANES);
    let first = |l: usize| p.window.map_or(0, |w| (b.pos(l) + 1).saturating_sub(w));
    let j_lo = (0..lanes).map(first).min().unwrap_or(0);
    let j_hi = (0..lanes).map(|l| b.pos(l) + 1).max().unwrap_or(0);
    let mut input = BlockInput {
        k: &k[j_lo * HD..j_hi * HD],
        v: &v[j_lo * HD..j_hi * HD],
        j_lo,
        lo: [i32::MAX; MAX_LANES],
        hi: [-1; MAX_LANES],
        lanes,
        p,
    };
    for l in 0..lanes {
        (input.lo[l], input.hi[l]) = (first(l) as i32, b.pos(l) as i32);
    }
    SCRATCH.with_borrow_mut(|s| {
        s.qt.resize(HD * width, 0.0);
        s.qt.fill(0.0);
        for l in 0..lanes {
            for (d, &x) in q[b.head_row(l) * HD..][..HD].iter().enumerate() {
                s.qt[d * width + l] = x;
            }
        }
        s.scores.resize((j_hi - j_lo) * width, 0.0);
        s.rows
            .resize(T::KEYS.max(VALUE_CHUNK_BYTES / 4 / HD) * HD, 0.0);
        s.acc.resize(width * HD, 0.0);
        s.acc.fill(0.0);
        let sums = T::run::<HD>(s, &input);
        for (l, sum) in sums.iter().enumerate().take(lanes) {
            let o = std::slice::from_raw_parts_mut(out.add(b.head_row(l) * HD), HD);
            let inv = 1.0 / sum;
            for (o, a) in o.iter_mut().zip(&s.acc[l * HD..][..HD]) {
                *o = a * inv;
            }
        }
    });
}

/// Where a block's lanes come from: lane `l` is row `rows.start + l / group`, query head
/// `kvh * group + l % group`.
pub(super) struct Block<'a> {
    pub rows: Range<usize>,
    pub kvh: usize,
    pub group: usize,
    pub n_head: usize,
    pub positions: &'a [u32],
}

impl Block<'_> {
    pub(super) fn lanes(&self) -> usize {
        self.rows.len() * self.group
    }

    /// Offset of lane `l`'s head row in `q` and `out`, in units of `hd`.
    pub(super) fn head_row(&self, l: usize) -> usize {
        (self.rows.start + l / self.group) * self.n_head + self.kvh * self.group + l % self.group
    }

    pub(super) fn pos(&self, l: usize) -> usize {
        self.positions[self.rows.start + l / self.group] as usize
    }
}

/// Attends the block's lanes to this KV head's keys and values `(capacity, hd)` with `T`'s
/// passes and writes their outputs. Unsafe: `T`'s instructions must exist, `fits::<T>(hd,
/// group)`, every lane's position is inside `k` and `v`, and `out` has room for every head row
/// (`(rows, n_head, hd)`).
pub(super) unsafe fn attend<T: Passes>(
    b: &Block,
    q: &[f32],
    k: &[f16],
    v: &[f16],
    hd: usize,
    p: &AttnParams,
    out: *mut f32,
) {
    by_hd!(hd, attend_hd::<T>(b, q, k, v, p, out))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,fma")]
unsafe fn passes<const HD: usize>(s: &mut Scratch, a: &BlockInput) -> [f32; MAX_LANES] {
    // per lane, the keys it sees as i32 vectors
    let lo: [__m512i; V] =
        std::array::from_fn(|i| _mm512_loadu_si512(a.lo[16 * i..].as_ptr().cast()));
    let hi: [__m512i; V] =
        std::array::from_fn(|i| _mm512_loadu_si512(a.hi[16 * i..].as_ptr().cast()));
    scores::<HD>(&s.qt, a.k, &mut s.rows, &mut s.scores);
    let sum = softmax(&mut s.scores, a.j_lo, lo, hi, a.p);
    values::<HD>(&s.scores, a.v, a.lanes, &mut s.rows, &mut s.acc);
    let mut sums = [0f32; MAX_LANES];
    for (i, s) in sum.iter().enumerate() {
        _mm512_storeu_ps(sums[16 * i..].as_mut_ptr(), *s);
    }
    sums
}

/// Converts `rows` f16 rows of `HD` at `src` into `dst`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,fma")]
unsafe fn convert<const HD: usize>(src: &[f16], dst: &mut [f32], rows: usize) {
    let (sp, dp) = (src.as_ptr().cast::<__m256i>(), dst.as_mut_ptr());
    for i in 0..rows * HD / 16 {
        _mm512_storeu_ps(
            dp.add(16 * i),
            _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(i))),
        );
    }
}

/// `scores[jj][l] = q_l . k_jj` for the keys `k (n, HD)`, `KEYS` keys at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,fma")]
unsafe fn scores<const HD: usize>(qt: &[f32], k: &[f16], rows: &mut [f32], scores: &mut [f32]) {
    let n = k.len() / HD;
    let (qp, rp) = (qt.as_ptr(), rows.as_ptr());
    for j0 in (0..n).step_by(KEYS) {
        let m = (n - j0).min(KEYS);
        convert::<HD>(&k[j0 * HD..], rows, m);
        let mut acc = [[_mm512_setzero_ps(); V]; KEYS];
        for d in 0..HD {
            let qd: [__m512; V] =
                std::array::from_fn(|h| _mm512_loadu_ps(qp.add(d * LANES + 16 * h)));
            for (i, a) in acc.iter_mut().enumerate() {
                // rows past `m` hold earlier keys: finite, and not stored
                let kd = _mm512_set1_ps(*rp.add(i * HD + d));
                for (a, q) in a.iter_mut().zip(qd) {
                    *a = _mm512_fmadd_ps(q, kd, *a);
                }
            }
        }
        for (i, a) in acc.iter().enumerate().take(m) {
            for (h, a) in a.iter().enumerate() {
                _mm512_storeu_ps(scores.as_mut_ptr().add((j0 + i) * LANES + 16 * h), *a);
            }
        }
    }
}

/// Scales, soft-caps and masks the scores of keys `j_lo..` (lane l sees `lo[l]..=hi[l]`),
/// then replaces them by `exp(score - max)` per lane; returns each lane's sum.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,fma")]
unsafe fn softmax(
    scores: &mut [f32],
    j_lo: usize,
    lo: [__m512i; V],
    hi: [__m512i; V],
    p: &AttnParams,
) -> [__m512; V] {
    let n = scores.len() / LANES;
    let sp = scores.as_mut_ptr();
    let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut max = [neg_inf; V];
    for jj in 0..n {
        let j = _mm512_set1_epi32((j_lo + jj) as i32);
        let row = sp.add(jj * LANES);
        for h in 0..V {
            let x = _mm512_mul_ps(_mm512_loadu_ps(row.add(16 * h)), _mm512_set1_ps(p.scale));
            _mm512_storeu_ps(row.add(16 * h), x);
        }
        if let Some(cap) = p.softcap {
            let row = std::slice::from_raw_parts_mut(row, LANES);
            row.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
        }
        for h in 0..V {
            let seen = _mm512_cmple_epi32_mask(lo[h], j) & _mm512_cmpge_epi32_mask(hi[h], j);
            let s = _mm512_mask_blend_ps(seen, neg_inf, _mm512_loadu_ps(row.add(16 * h)));
            _mm512_storeu_ps(row.add(16 * h), s);
            max[h] = _mm512_max_ps(max[h], s);
        }
    }
    // idle lanes saw no key: shift them by 0 rather than by -inf
    let max = max.map(|m| {
        let none = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(m, neg_inf);
        _mm512_mask_blend_ps(none, m, _mm512_setzero_ps())
    });
    let mut sum = [_mm512_setzero_ps(); V];
    for jj in 0..n {
        for h in 0..V {
            let at = sp.add(jj * LANES + 16 * h);
            let s = _mm512_loadu_ps(at);
            let seen = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(s, neg_inf);
            let x = _mm512_sub_ps(s, max[h]);
            let e = crate::vmath::exp16(x);
            // the polynomial's clamp leaves exp(-inf) at 1e-38: masked keys weigh exactly 0
            let e = _mm512_maskz_mov_ps(seen, e);
            _mm512_storeu_ps(at, e);
            sum[h] = _mm512_add_ps(sum[h], e);
        }
    }
    sum
}

/// `acc[l] += sum_jj w[jj][l] * v_jj` for the values `v (n, HD)`, converted a chunk at a time.
/// `256 / HD` lanes go together, so 16 independent sums share each value row's loads.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,fma")]
unsafe fn values<const HD: usize>(
    w: &[f32],
    v: &[f16],
    lanes: usize,
    rows: &mut [f32],
    acc: &mut [f32],
) {
    let (n, chunk, vecs, together) = (v.len() / HD, rows.len() / HD, HD / 16, 256 / HD);
    for j0 in (0..n).step_by(chunk) {
        let m = (n - j0).min(chunk);
        convert::<HD>(&v[j0 * HD..], rows, m);
        // lanes past `lanes` weigh every value 0 and have rows in `acc`
        for l0 in (0..lanes).step_by(together) {
            let ap = acc.as_mut_ptr().add(l0 * HD);
            // lane l0 + t's vector c at `t * vecs + c`, in registers over the chunk
            let mut a: [__m512; 16] = [_mm512_setzero_ps(); 16];
            for (i, a) in a.iter_mut().enumerate() {
                *a = _mm512_loadu_ps(ap.add(16 * i));
            }
            for i in 0..m {
                let wp = w.as_ptr().add((j0 + i) * LANES + l0);
                let r = rows.as_ptr().add(i * HD);
                for c in 0..vecs {
                    let x = _mm512_loadu_ps(r.add(16 * c));
                    for t in 0..together {
                        let at = t * vecs + c;
                        a[at] = _mm512_fmadd_ps(_mm512_set1_ps(*wp.add(t)), x, a[at]);
                    }
                }
            }
            for (i, a) in a.iter().enumerate() {
                _mm512_storeu_ps(ap.add(16 * i), *a);
            }
        }
    }
}
