//! f32 vector primitives with a runtime-chosen AVX2+FMA path and a portable fallback.
use std::sync::OnceLock;

/// Instruction-set tiers, lowest first; each includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL/DQ with VNNI.
    Avx512,
    /// AVX-512 VNNI plus AMX-BF16 tiles (with the kernel's permission) for the prefill GEMM.
    Amx,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Scalar => "scalar",
            Tier::Avx2 => "avx2",
            Tier::Avx512 => "avx512-vnni",
            Tier::Amx => "amx-bf16",
        }
    }

    /// The highest tier at or below this one with its own row kernels: AMX adds only the GEMM
    /// microkernel and keeps the AVX-512 ones for everything else.
    pub fn vector_tier(self) -> Tier {
        self.min(Tier::Avx512)
    }
}

/// The best tier this CPU supports.
pub fn detected_tier() -> Tier {
    static DETECTED: OnceLock<Tier> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            let avx512 = avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vnni");
            // the AMX kernel converts its weights with AVX512-BF16
            if avx512 && is_x86_feature_detected!("avx512bf16") && crate::amx::usable() {
                return Tier::Amx;
            }
            if avx512 {
                return Tier::Avx512;
            }
            if avx2 {
                return Tier::Avx2;
            }
        }
        Tier::Scalar
    })
}

/// The tier kernels run at: the detected one, lowered by `ISHIZUKI_CPU_TIER=scalar|avx2|avx512`.
pub fn tier() -> Tier {
    static TIER: OnceLock<Tier> = OnceLock::new();
    *TIER.get_or_init(|| {
        let forced = match std::env::var("ISHIZUKI_CPU_TIER").as_deref() {
            Ok("scalar") => Tier::Scalar,
            Ok("avx2") => Tier::Avx2,
            Ok("avx512") => Tier::Avx512,
            _ => Tier::Amx,
        };
        forced.min(detected_tier())
    })
}

/// Every tier this CPU can run, for tests that compare each against the scalar reference.
pub fn available_tiers() -> Vec<Tier> {
    [Tier::Scalar, Tier::Avx2, Tier::Avx512, Tier::Amx]
        .into_iter()
        .filter(|t| *t <= detected_tier())
        .collect()
}

/// Dot products of one vector `a` with four vectors `b0..b3` of the same length.
#[inline]
pub fn dot4(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier check guarantees AVX2 and FMA.
        return unsafe { dot4_avx2(a, b) };
    }
    b.map(|bi| dot_scalar(a, bi))
}

#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier check guarantees AVX2 and FMA.
        return unsafe { dot_avx2(a, b) };
    }
    dot_scalar(a, b)
}

pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0f32; 8];
    let (a8, b8) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    let (ra, rb) = (a8.remainder(), b8.remainder());
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut i = 0;
    while i + 16 <= n {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
        acc1 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 8)),
            _mm256_loadu_ps(pb.add(i + 8)),
            acc1,
        );
        i += 16;
    }
    while i + 8 <= n {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
        i += 8;
    }
    let mut s = hsum(_mm256_add_ps(acc0, acc1));
    while i < n {
        s += a[i] * b[i];
        i += 1;
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot4_avx2(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let n = b.iter().fold(a.len(), |m, bi| m.min(bi.len()));
    let pa = a.as_ptr();
    let pb = b.map(|bi| bi.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 8 <= n {
        let va = _mm256_loadu_ps(pa.add(i));
        for j in 0..4 {
            acc[j] = _mm256_fmadd_ps(va, _mm256_loadu_ps(pb[j].add(i)), acc[j]);
        }
        i += 8;
    }
    let mut out = [0f32; 4];
    for j in 0..4 {
        out[j] = hsum(acc[j]);
        for k in i..n {
            out[j] += a[k] * b[j][k];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_paths_agree() {
        let a: Vec<f32> = (0..77).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..77).map(|i| (i as f32 * 0.11).cos()).collect();
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert!((dot(&a, &b) as f64 - exact).abs() < 1e-4);
        assert!((dot_scalar(&a, &b) as f64 - exact).abs() < 1e-4);
        let d4 = dot4(&a, [&b, &a, &b, &a]);
        assert!((d4[0] as f64 - exact).abs() < 1e-4);
        assert!((d4[1] - dot_scalar(&a, &a)).abs() < 1e-3);
    }
}
