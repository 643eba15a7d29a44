//! Vectorized transcendental loops: gated activations (`x * sigmoid(z)` covers SiLU and the
//! tanh GELU) and the softmax exponentials. AVX2+FMA (the gate also on AVX-512, with the same
//! bits) with a scalar fallback; `exp` is Cephes' degree-6 polynomial after range reduction by
//! ln 2 (about 1 ulp over the f32 range).
use crate::simd::{tier, Tier};

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_CUBIC: f32 = 0.044715;

/// `gate[i] = silu(gate[i]) * up[i]`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx512 {
        // SAFETY: the tier guarantees AVX-512F, AVX2 and FMA.
        return unsafe { x86::gated16::<false>(gate, up) };
    }
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2 and FMA.
        return unsafe { x86::gated::<false>(gate, up) };
    }
    gated_scalar::<false>(gate, up)
}

/// `gate[i] = gelu_tanh(gate[i]) * up[i]`.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx512 {
        // SAFETY: the tier guarantees AVX-512F, AVX2 and FMA.
        return unsafe { x86::gated16::<true>(gate, up) };
    }
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2 and FMA.
        return unsafe { x86::gated::<true>(gate, up) };
    }
    gated_scalar::<true>(gate, up)
}

/// `x[i] = exp(x[i] - max)`; returns the sum of the new values.
pub fn exp_shifted(x: &mut [f32], max: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2 and FMA.
        return unsafe { x86::exp_shifted(x, max) };
    }
    exp_shifted_scalar(x, max)
}

/// The largest of `x` (NaNs ignored, as `f32::max` does; -inf when empty): a vector of running
/// maxima where the fold's chain of dependent `max`es takes a cycle count per element.
pub fn max_of(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2.
        return unsafe { x86::max_of(x) };
    }
    x.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v))
}

/// The sigmoid's argument: x for SiLU, 2 sqrt(2/pi) (x + 0.044715 x^3) for the tanh GELU
/// (0.5 x (1 + tanh(u)) = x sigmoid(2u)).
#[inline(always)]
fn sigmoid_arg<const GELU: bool>(x: f32) -> f32 {
    if GELU {
        2.0 * SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)
    } else {
        x
    }
}

fn gated_scalar<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-sigmoid_arg::<GELU>(*g)).exp()) * u;
    }
}

fn exp_shifted_scalar(x: &mut [f32], max: f32) -> f32 {
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    sum
}

/// `exp` of 8 lanes (the softmax's polynomial). Unsafe: AVX2 and FMA must exist.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn exp8(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    x86::exp(x)
}

/// `exp` of 16 lanes, lane for lane `exp8`'s polynomial. Unsafe: AVX-512F must exist.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(crate) unsafe fn exp16(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let x = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(EXP_MIN)),
        _mm512_set1_ps(EXP_MAX),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_C7);
    for c in EXP_POLY {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let p = _mm512_fmadd_ps(
        p,
        _mm512_mul_ps(r, r),
        _mm512_add_ps(r, _mm512_set1_ps(1.0)),
    );
    let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    _mm512_mul_ps(p, _mm512_castsi512_ps(pow2))
}

/// exp's input range (below, the result is denormal or zero; above, infinite).
#[cfg(target_arch = "x86_64")]
const EXP_MIN: f32 = -87.3;
#[cfg(target_arch = "x86_64")]
const EXP_MAX: f32 = 88.7;
/// ln 2 split in two for precision (`r = x - n ln2`).
#[cfg(target_arch = "x86_64")]
const LN2_HI: f32 = 0.693_359_4;
#[cfg(target_arch = "x86_64")]
const LN2_LO: f32 = -2.121_944_4e-4;
/// The exp polynomial's first coefficient (Horner order).
#[cfg(target_arch = "x86_64")]
const EXP_C7: f32 = 1.987_569_1e-4;

/// The exp polynomial's coefficients after the first (Horner order, r^2 .. r^6 terms).
#[cfg(target_arch = "x86_64")]
const EXP_POLY: [f32; 5] = [
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) unsafe fn exp(x: __m256) -> __m256 {
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(EXP_MIN)),
            _mm256_set1_ps(EXP_MAX),
        );
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        // r = x - n ln2, with ln2 split in two for precision
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(EXP_C7);
        for c in EXP_POLY {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let p = _mm256_fmadd_ps(
            p,
            _mm256_mul_ps(r, r),
            _mm256_add_ps(r, _mm256_set1_ps(1.0)),
        );
        let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_mul_ps(p, _mm256_castsi256_ps(pow2))
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gated<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
        let n = gate.len().min(up.len());
        let (pg, pu) = (gate.as_mut_ptr(), up.as_ptr());
        let one = _mm256_set1_ps(1.0);
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_loadu_ps(pg.add(i));
            let z = if GELU {
                let x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
                let u = _mm256_fmadd_ps(x3, _mm256_set1_ps(GELU_CUBIC), x);
                _mm256_mul_ps(u, _mm256_set1_ps(2.0 * SQRT_2_OVER_PI))
            } else {
                x
            };
            let e = exp(_mm256_sub_ps(_mm256_setzero_ps(), z));
            let y = _mm256_div_ps(x, _mm256_add_ps(one, e));
            _mm256_storeu_ps(pg.add(i), _mm256_mul_ps(y, _mm256_loadu_ps(pu.add(i))));
            i += 8;
        }
        gated_scalar::<GELU>(&mut gate[i..n], &up[i..n]);
    }

    /// `gated` on 16 lanes, the tail masked rather than scalar: lane for lane the same
    /// operations as `gated`'s vectors (exp16 is exp8's bits), so every element matches them.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn gated16<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
        let n = gate.len().min(up.len());
        let (pg, pu) = (gate.as_mut_ptr(), up.as_ptr());
        let one = _mm512_set1_ps(1.0);
        for i in (0..n).step_by(16) {
            let mask: __mmask16 = if n - i >= 16 { !0 } else { (1 << (n - i)) - 1 };
            let x = _mm512_maskz_loadu_ps(mask, pg.add(i));
            let z = if GELU {
                let x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
                let u = _mm512_fmadd_ps(x3, _mm512_set1_ps(GELU_CUBIC), x);
                _mm512_mul_ps(u, _mm512_set1_ps(2.0 * SQRT_2_OVER_PI))
            } else {
                x
            };
            let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), z));
            let y = _mm512_div_ps(x, _mm512_add_ps(one, e));
            let u = _mm512_maskz_loadu_ps(mask, pu.add(i));
            _mm512_mask_storeu_ps(pg.add(i), mask, _mm512_mul_ps(y, u));
        }
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn max_of(x: &[f32]) -> f32 {
        let chunks = x.chunks_exact(16);
        let tail = chunks.remainder();
        let mut acc = [_mm256_set1_ps(f32::NEG_INFINITY); 2];
        for c in chunks {
            for (i, a) in acc.iter_mut().enumerate() {
                // a NaN in x yields the second operand: the running maximum
                *a = _mm256_max_ps(_mm256_loadu_ps(c.as_ptr().add(8 * i)), *a);
            }
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_max_ps(acc[0], acc[1]));
        lanes
            .iter()
            .chain(tail)
            .fold(f32::NEG_INFINITY, |m, v| m.max(*v))
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_shifted(x: &mut [f32], max: f32) -> f32 {
        let n = x.len();
        let p = x.as_mut_ptr();
        let m = _mm256_set1_ps(max);
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            let e = exp(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), m));
            _mm256_storeu_ps(p.add(i), e);
            acc = _mm256_add_ps(acc, e);
            i += 8;
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        lanes.iter().sum::<f32>() + exp_shifted_scalar(&mut x[i..], max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{gelu_tanh, silu};

    fn inputs() -> Vec<f32> {
        let mut x: Vec<f32> = (0..2000).map(|i| (i as f32 - 1000.0) * 0.013).collect();
        x.extend([-100.0, -88.0, -30.0, 0.0, -0.0, 30.0, 88.0, 100.0, 1e-30]);
        x
    }

    /// Relative 4e-6, plus the scalar tanh form's own cancellation (half an ulp of 1, times |x|).
    fn close(got: f32, want: f32, what: &str, x: f32) {
        let tol = 4e-6 * want.abs() + 1e-7 * x.abs() + 1e-30;
        assert!((got - want).abs() <= tol, "{what}({x}): {got} vs {want}");
    }

    /// The vector maximum is the fold's for any length, with NaNs ignored and -inf when empty.
    #[test]
    fn max_of_is_the_folded_max() {
        let x = inputs();
        for n in [0, 1, 7, 8, 15, 16, 17, 33, 100, x.len()] {
            for shift in [0usize, 5] {
                let mut v: Vec<f32> = x[..n].iter().map(|a| a - 0.37 * (shift as f32)).collect();
                v.rotate_left(shift.min(n));
                let want = v.iter().fold(f32::NEG_INFINITY, |m, a| m.max(*a));
                assert_eq!(max_of(&v).to_bits(), want.to_bits(), "{n} values");
                if n > 3 {
                    v[n / 2] = f32::NAN;
                    v[0] = f32::NAN;
                    let want = v.iter().fold(f32::NEG_INFINITY, |m, a| m.max(*a));
                    assert_eq!(max_of(&v).to_bits(), want.to_bits(), "{n} values with NaNs");
                }
            }
        }
        assert_eq!(max_of(&[f32::NAN; 20]), f32::NEG_INFINITY);
    }

    #[test]
    fn gated_activations_match_the_scalar_definitions() {
        let x = inputs();
        let up: Vec<f32> = (0..x.len()).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
        let (mut s, mut g) = (x.clone(), x.clone());
        silu_mul(&mut s, &up);
        gelu_tanh_mul(&mut g, &up);
        for i in 0..x.len() {
            close(s[i], silu(x[i]) * up[i], "silu", x[i]);
            close(g[i], gelu_tanh(x[i]) * up[i], "gelu", x[i]);
        }
    }

    #[test]
    fn shifted_exponentials_and_their_sum() {
        let x = inputs();
        let max = x.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v)); // softmax's shift
        let mut e = x.clone();
        let sum = exp_shifted(&mut e, max);
        let mut want_sum = 0f64;
        for (v, &xi) in e.iter().zip(&x) {
            let want = ((xi - max) as f64).exp();
            want_sum += want;
            assert!(
                (*v as f64 - want).abs() <= 4e-7 * want + 1e-37,
                "exp({xi} - {max}): {v} vs {want}"
            );
        }
        assert!((sum as f64 - want_sum).abs() <= 1e-5 * want_sum);
    }

    /// The AVX-512 gate gives the AVX2 vectors' bits, tail included (AVX-512 machines).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn gated16_is_gated_lane_for_lane() {
        use crate::simd::{tier, Tier};
        if tier() < Tier::Avx512 {
            return;
        }
        let x = inputs();
        let up: Vec<f32> = x.iter().map(|v| 0.5 - v * 0.25).collect();
        for n in [x.len() / 8 * 8, 8, 24] {
            let gate: Vec<f32> = x[..n].iter().map(|v| v * 0.1).collect();
            let (mut wide, mut narrow) = (gate.clone(), gate.clone());
            // SAFETY: the tier has AVX-512F, AVX2 and FMA.
            unsafe {
                x86::gated16::<false>(&mut wide, &up[..n]);
                x86::gated::<false>(&mut narrow, &up[..n]);
            }
            assert_eq!(bits(&wide), bits(&narrow), "silu, {n}");
            let (mut wide, mut narrow) = (gate.clone(), gate);
            // SAFETY: as above.
            unsafe {
                x86::gated16::<true>(&mut wide, &up[..n]);
                x86::gated::<true>(&mut narrow, &up[..n]);
            }
            assert_eq!(bits(&wide), bits(&narrow), "gelu, {n}");
        }
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    /// exp16 is exp8 on twice the lanes: the same bits for every input (AVX-512 machines).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp16_is_exp8_lane_for_lane() {
        use crate::simd::{tier, Tier};
        use std::arch::x86_64::*;
        if tier() < Tier::Avx512 {
            return;
        }
        let x = inputs();
        for c in x.chunks_exact(16) {
            let (mut wide, mut narrow) = ([0f32; 16], [0f32; 16]);
            // SAFETY: the tier has AVX-512F (and so AVX2 and FMA); the chunks hold 16 floats.
            unsafe {
                _mm512_storeu_ps(wide.as_mut_ptr(), exp16(_mm512_loadu_ps(c.as_ptr())));
                for h in 0..2 {
                    let e = exp8(_mm256_loadu_ps(c[8 * h..].as_ptr()));
                    _mm256_storeu_ps(narrow[8 * h..].as_mut_ptr(), e);
                }
            }
            assert_eq!(wide.map(f32::to_bits), narrow.map(f32::to_bits), "{c:?}");
        }
    }
}
