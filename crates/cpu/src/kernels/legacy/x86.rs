//! Pieces shared by the AVX2 and AVX-512 tiers: scale collection, nibble unpacking and the block
//! loop. The loop is a macro so that each tier's unpack and dot instructions inline into one
//! `target_feature` function.
use std::arch::x86_64::*;

/// Blocks whose f16 scales are collected and converted together.
pub(super) const GROUP: usize = 8;

/// The first 4 bytes (f16 `d` and the next f16) of each of `count` <= GROUP blocks of
/// `stride` bytes at `p`, one block per dword lane; lanes at or past `count` hold 0.
/// (Scalar loads and inserts: a hardware gather is several times slower here.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn heads_vector(p: *const u8, stride: usize, count: usize) -> __m256i {
    let at = |k: usize| p.add(k * stride).cast::<i32>().read_unaligned();
    if count == GROUP {
        let (h0, h1, h2, h3) = (at(0), at(1), at(2), at(3));
        return _mm256_setr_epi32(h0, h1, h2, h3, at(4), at(5), at(6), at(7));
    }
    // lanes built in registers: a stack array read back as a vector stalls on store forwarding
    let head = |k: usize| {
        if k < count {
            p.add(k * stride).cast::<i32>().read_unaligned()
        } else {
            0
        }
    };
    let (h0, h1, h2, h3) = (head(0), head(1), head(2), head(3));
    _mm256_setr_epi32(h0, h1, h2, h3, head(4), head(5), head(6), head(7))
}

/// Makes the compiler treat `*p` as read and written elsewhere, so values stored there are
/// loaded back from memory (folded into the FMA as a broadcast operand, a load-port uop)
/// rather than broadcast from a register by port-5 shuffles.
#[inline(always)]
pub(super) fn opaque<T>(p: &mut T) {
    std::hint::black_box(p);
}

/// f32 values of the f16 in the low half and in the high half of each dword lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn f16_halves(heads: __m256i) -> (__m256, __m256) {
    // per 128-bit lane: the four low halves, then the four high halves
    let split = _mm256_setr_epi8(
        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, //
        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
    );
    let t = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(heads, split));
    let low = _mm256_cvtph_ps(_mm256_castsi256_si128(t));
    let high = _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(t));
    (low, high)
}

/// The 16 bytes at `p` as 32 values: their low nibbles, then their high nibbles.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()));
    let shifted = _mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
}

/// Byte j is 0xFF where bit j of the little-endian u32 at `p` is set, else 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn bit_bytes(p: *const u8) -> __m256i {
    let bits = _mm256_set1_epi32(p.cast::<i32>().read_unaligned());
    let spread = _mm256_shuffle_epi8(
        bits,
        _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    // byte k of the probe has every bit but bit k
    let probe = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, probe), _mm256_set1_epi64x(-1))
}

/// 16 IQ4_NL levels in each 128-bit lane, for `_mm256_shuffle_epi8`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn iq4nl_table() -> __m256i {
    let table = ishizuki_core::quant::KVALUES_IQ4NL;
    _mm256_broadcastsi128_si256(_mm_loadu_si128(table.as_ptr().cast()))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Defines `$entry: VecDot` for one weight type: per group of 8 blocks the f16 scales of the
/// weights and of every activation row are collected and multiplied as vectors; per block the
/// weights are unpacked once (`$unpack`: block pointer -> 32 values, u8 or with `signed` i8)
/// and multiplied with each row's 32 activation bytes by `$dot` (u8 x i8 -> 8 i32 lanes).
/// Signed weights go through the sign trick: |w| x (y with w's sign).
/// With `min`, activations are Q8_1 and each block adds `m * s` to the row sum.
/// The caller imports `std::arch::x86_64::*` and this module's helpers.
macro_rules! block_kernel {
    ($entry:ident, $feature:literal, weight_bytes: $wb:literal, min: $min:literal,
     signed: $signed:literal, unpack: $unpack:path, dot: $dot:path) => {
        #[target_feature(enable = $feature)]
        pub(super) unsafe fn $entry(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]) {
            const XB: usize = if $min { 36 } else { 34 };
            let Some(nb) = super::blocks_per_row(n, w, xs, out, $wb, XB) else {
                return super::poison(out);
            };

            #[target_feature(enable = $feature)]
            #[inline]
            unsafe fn rows<const R: usize>(
                nb: usize,
                w: *const u8,
                xs: [*const u8; R],
            ) -> [f32; R] {
                // independent sums per row, so one row does not wait on FMA latency per block;
                // as many whatever R, so a row sums in the same order alone or with others
                // (draft verification equals decode bit for bit)
                const CHAINS: usize = 2;
                let mut acc = [[_mm256_setzero_ps(); CHAINS]; R];
                let mut acc_min = [_mm256_setzero_ps(); R];
                let mut scales = [[0f32; GROUP]; R];
                let mut g = 0;
                while g < nb {
                    let count = (nb - g).min(GROUP);
                    let wg = w.add(g * $wb);
                    let (dw, mw) = f16_halves(heads_vector(wg, $wb, count));
                    for r in 0..R {
                        let (dy, sy) = f16_halves(heads_vector(xs[r].add(g * XB), XB, count));
                        _mm256_storeu_ps(scales[r].as_mut_ptr(), _mm256_mul_ps(dw, dy));
                        if $min {
                            acc_min[r] = _mm256_fmadd_ps(mw, sy, acc_min[r]);
                        }
                    }
                    opaque(&mut scales);
                    for k in 0..count {
                        let q = $unpack(wg.add(k * $wb));
                        let qa = if $signed { _mm256_sign_epi8(q, q) } else { q };
                        for r in 0..R {
                            let yp = xs[r].add((g + k) * XB + XB - 32);
                            let y = _mm256_loadu_si256(yp.cast());
                            let y = if $signed { _mm256_sign_epi8(y, q) } else { y };
                            let sum = _mm256_cvtepi32_ps($dot(qa, y));
                            let scale = _mm256_set1_ps(*scales.get_unchecked(r).get_unchecked(k));
                            let a = &mut acc[r][k % CHAINS];
                            *a = _mm256_fmadd_ps(scale, sum, *a);
                        }
                    }
                    g += GROUP;
                }
                let mut res = [0f32; R];
                for r in 0..R {
                    let [a0, a1] = acc[r];
                    let sum = _mm256_add_ps(a0, a1);
                    res[r] = hsum(_mm256_add_ps(sum, acc_min[r]));
                }
                res
            }

            let w = w.as_ptr();
            let x = |i: usize| xs[i].as_ptr();
            match xs.len() {
                1 => out[..1].copy_from_slice(&rows::<1>(nb, w, [x(0)])),
                2 => out[..2].copy_from_slice(&rows::<2>(nb, w, [x(0), x(1)])),
                3 => out[..3].copy_from_slice(&rows::<3>(nb, w, [x(0), x(1), x(2)])),
                _ => out[..4].copy_from_slice(&rows::<4>(nb, w, [x(0), x(1), x(2), x(3)])),
            }
        }
    };
}
pub(super) use block_kernel;
