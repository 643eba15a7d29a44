//! Block (de)quantisation against gguf-py reference vectors, plus error bounds and bad input.
//! Vectors: crates/core/tests/data/quant_vectors.bin, made by scripts/gen_quant_vectors.py.
use ishizuki_core::quant::{dequantize_row, quantize_row};
use ishizuki_core::{Error, GgmlType};

const VECTORS: &[u8] = include_bytes!("data/quant_vectors.bin");

/// Every type whose dequantisation must match gguf-py bit for bit.
const DEQUANT_TYPES: [GgmlType; 16] = {
    use GgmlType::*;
    [
        F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL,
        IQ4_XS,
    ]
};

/// Types whose quantisation gguf-py implements with ggml's reference arithmetic.
const QUANT_TYPES: [GgmlType; 7] = {
    use GgmlType::*;
    [F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0]
};

#[derive(Debug)]
enum Entry<'a> {
    /// input block bytes, expected f32 output
    Dequant(GgmlType, &'a [u8], Vec<f32>),
    /// input f32, expected block bytes
    Quant(GgmlType, Vec<f32>, &'a [u8]),
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        assert!(self.0.len() >= n, "quant_vectors.bin is truncated");
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }

    fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.take(4 * n)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

fn load_vectors() -> Vec<Entry<'static>> {
    let mut r = Reader(VECTORS);
    assert_eq!(r.take(4), b"ISQV");
    assert_eq!(r.u32(), 1, "vector file version");
    let count = r.u32();
    let entries = (0..count)
        .map(|_| {
            let kind = r.take(4)[0];
            let id = r.u32();
            let ty = GgmlType::from_id(id).unwrap_or_else(|| panic!("unknown type id {id}"));
            let (n, m) = (r.u32() as usize, r.u32() as usize);
            match kind {
                0 => {
                    let bytes = r.take(m);
                    Entry::Dequant(ty, bytes, r.f32s(n))
                }
                1 => {
                    let x = r.f32s(n);
                    Entry::Quant(ty, x, r.take(m))
                }
                _ => panic!("unknown entry kind {kind}"),
            }
        })
        .collect();
    assert!(r.0.is_empty(), "trailing bytes in quant_vectors.bin");
    entries
}

fn first_bit_mismatch(got: &[f32], want: &[f32]) -> Option<(usize, f32, f32)> {
    got.iter()
        .zip(want)
        .enumerate()
        .find(|(_, (g, w))| g.to_bits() != w.to_bits())
        .map(|(i, (g, w))| (i, *g, *w))
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    let mut seen = Vec::new();
    for entry in load_vectors() {
        let Entry::Dequant(ty, bytes, want) = entry else {
            continue;
        };
        let mut got = vec![f32::NAN; want.len()];
        dequantize_row(ty, bytes, &mut got).unwrap_or_else(|e| panic!("{ty}: {e}"));
        if let Some((i, g, w)) = first_bit_mismatch(&got, &want) {
            panic!(
                "{ty}: element {i}: got {g:e} ({:#x}), want {w:e} ({:#x})",
                g.to_bits(),
                w.to_bits()
            );
        }
        // the same row split at a block boundary decodes identically (no hidden row state)
        let (bs, ts) = ty.block_layout();
        let half_blocks = want.len() / bs / 2;
        let mut split = vec![0.0f32; want.len()];
        let (a, b) = split.split_at_mut(half_blocks * bs);
        dequantize_row(ty, &bytes[..half_blocks * ts], a).unwrap();
        dequantize_row(ty, &bytes[half_blocks * ts..], b).unwrap();
        assert!(
            first_bit_mismatch(&split, &want).is_none(),
            "{ty}: split row differs"
        );
        seen.push(ty);
    }
    for ty in DEQUANT_TYPES {
        assert!(seen.contains(&ty), "no dequantisation vectors for {ty}");
    }
}

#[test]
fn dequantize_accepts_unaligned_bytes() {
    for entry in load_vectors() {
        let Entry::Dequant(ty, bytes, want) = entry else {
            continue;
        };
        // copy to an odd address so every multi-byte field is misaligned
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(bytes);
        let mut got = vec![0.0f32; want.len()];
        dequantize_row(ty, &shifted[1..], &mut got).unwrap();
        assert!(
            first_bit_mismatch(&got, &want).is_none(),
            "{ty}: unaligned input differs"
        );
    }
}

#[test]
fn quantize_matches_gguf_py_bit_for_bit() {
    let mut seen = Vec::new();
    for entry in load_vectors() {
        let Entry::Quant(ty, x, want) = entry else {
            continue;
        };
        let mut got = vec![0u8; want.len()];
        quantize_row(ty, &x, &mut got).unwrap_or_else(|e| panic!("{ty}: {e}"));
        if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
            let block = i / ty.type_size();
            panic!(
                "{ty}: byte {i} (block {block}): got {:#04x}, want {:#04x}",
                got[i], want[i]
            );
        }
        seen.push(ty);
    }
    for ty in QUANT_TYPES {
        assert!(seen.contains(&ty), "no quantisation vectors for {ty}");
    }
}

#[test]
fn dequantize_rejects_bad_input_without_panicking() {
    for ty in DEQUANT_TYPES {
        let (bs, ts) = ty.block_layout();
        let bytes = vec![0u8; 4 * ts];
        let mut out = vec![0.0f32; 4 * bs];
        assert!(
            dequantize_row(ty, &bytes, &mut out).is_ok(),
            "{ty}: zero blocks"
        );
        for wrong in [&bytes[..4 * ts - 1], &bytes[..3 * ts], &[][..]] {
            let err = dequantize_row(ty, wrong, &mut out).unwrap_err();
            assert!(matches!(err, Error::Shape(_)), "{ty}: {err}");
        }
        if bs > 1 {
            let err = dequantize_row(ty, &bytes, &mut out[..4 * bs - 1]).unwrap_err();
            assert!(matches!(err, Error::Shape(_)), "{ty}: partial block: {err}");
        }
    }
    let mut out = vec![0.0f32; 256];
    let bytes = vec![0u8; GgmlType::IQ2_XXS.type_size()];
    for ty in [
        GgmlType::IQ2_XXS,
        GgmlType::IQ1_S,
        GgmlType::Q8_1,
        GgmlType::I32,
    ] {
        match dequantize_row(ty, &bytes, &mut out) {
            Err(Error::UnsupportedType(t, "dequantize")) => assert_eq!(t, ty),
            other => panic!("{ty}: expected UnsupportedType, got {other:?}"),
        }
    }
}

#[test]
fn quantize_rejects_bad_input_without_panicking() {
    let x = vec![0.5f32; 256];
    let mut out = vec![0u8; 1024];
    let err = quantize_row(GgmlType::Q8_0, &x, &mut out).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
    let err = quantize_row(GgmlType::Q8_0, &x[..31], &mut out[..34]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
    let err = quantize_row(GgmlType::IQ2_XXS, &x, &mut out[..66]).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedType(GgmlType::IQ2_XXS, "quantize")),
        "{err}"
    );
}

#[test]
fn f16_conversion_is_exact_for_every_non_nan_value() {
    use ishizuki_core::quant::{f16_to_f32, f32_to_f16};
    for bits in 0..=u16::MAX {
        let h = half::f16::from_bits(bits);
        let got = f16_to_f32(bits.to_le_bytes());
        if h.is_nan() {
            assert!(got.is_nan(), "{bits:#06x}");
            continue;
        }
        assert_eq!(got.to_bits(), h.to_f32().to_bits(), "{bits:#06x}");
        assert_eq!(
            f32_to_f16(got),
            bits.to_le_bytes(),
            "{bits:#06x} round trip"
        );
    }
}

/// Deterministic standard-normal samples (xorshift64* + Box-Muller), scaled per 256 elements
/// so blocks see magnitudes from 1e-3 to 1e2.
fn gaussian_row(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut uniform = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        ((state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            let (u1, u2) = (uniform(), uniform());
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            let scale = [1e-3, 0.05, 1.0, 100.0][(i / 256) % 4];
            (z * scale) as f32
        })
        .collect()
}

/// Normalised mean squared error of `y` against `x`, per 256-element block (worst block),
/// so every magnitude must reconstruct well.
fn worst_block_nmse(x: &[f32], y: &[f32]) -> f64 {
    x.chunks(256)
        .zip(y.chunks(256))
        .map(|(xb, yb)| {
            let err: f64 = xb
                .iter()
                .zip(yb)
                .map(|(a, b)| ((a - b) as f64).powi(2))
                .sum();
            let norm: f64 = xb.iter().map(|a| (*a as f64).powi(2)).sum();
            err / norm
        })
        .fold(0.0, f64::max)
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let mut q = vec![0u8; ty.row_bytes(x.len() as u64).unwrap() as usize];
    quantize_row(ty, x, &mut q).unwrap_or_else(|e| panic!("{ty}: {e}"));
    let mut y = vec![0.0f32; x.len()];
    dequantize_row(ty, &q, &mut y).unwrap();
    y
}

#[test]
fn quantize_round_trip_error_is_bounded() {
    use GgmlType::*;
    // bounds sit ~1.5x above the measured worst block on gaussian data; an off-by-one in a
    // level, scale or packing raises the error by orders of magnitude
    let bounds = [
        (F16, 1e-7),
        (BF16, 5e-6),
        (Q8_0, 6e-5),
        (Q8_K, 1e-4),
        (Q6_K, 7e-4),
        (Q5_0, 3.3e-3),
        (Q5_1, 2.7e-3),
        (Q4_0, 1.3e-2),
        (Q4_1, 1.2e-2),
        (Q4_K, 9e-3),
    ];
    let x = gaussian_row(4096, 7);
    for (ty, bound) in bounds {
        let nmse = worst_block_nmse(&x, &round_trip(ty, &x));
        println!("{ty}: worst-block NMSE {nmse:.3e}");
        assert!(nmse < bound, "{ty}: NMSE {nmse:e} above {bound:e}");
    }
}

#[test]
fn q8_k_blocks_follow_the_reference_semantics() {
    use ishizuki_core::quant::{quantize_row_q8_k, BlockQ8K};
    let mut x = gaussian_row(1024, 11);
    x[256..512].fill(0.0); // an all-zero block
    let mut blocks = [bytemuck::Zeroable::zeroed(); 4];
    quantize_row_q8_k(&x, &mut blocks).unwrap();
    for (xb, b) in x.chunks_exact(256).zip(&blocks) {
        let b: &BlockQ8K = b;
        for i in 0..16 {
            let sum: i32 = b.qs[16 * i..16 * (i + 1)].iter().map(|&q| q as i32).sum();
            assert_eq!(b.bsum(i) as i32, sum, "bsums[{i}]");
        }
        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        if amax == 0.0 {
            assert_eq!(b.d(), 0.0);
            assert!(b.qs.iter().all(|&q| q == 0));
            continue;
        }
        // the largest-magnitude element maps to -127 (d carries its sign, negated)
        let imax = xb.iter().position(|v| v.abs() == amax).unwrap();
        assert_eq!(b.qs[imax], -127);
        assert_eq!(b.d().signum(), -xb[imax].signum());
        for (&v, &q) in xb.iter().zip(&b.qs) {
            assert!(
                (v - b.d() * q as f32).abs() <= b.d().abs() * 0.5001,
                "{v} vs {q}"
            );
        }
    }
    let mut too_few = [bytemuck::Zeroable::zeroed(); 3];
    assert!(quantize_row_q8_k(&x, &mut too_few).is_err());
}

#[test]
fn q8_1_blocks_carry_the_scaled_quant_sum() {
    use ishizuki_core::quant::{f16_to_f32, quantize_row_q8_0, quantize_row_q8_1, BlockQ8_0};
    use ishizuki_core::quant::{BlockQ8_1, QK8_1};
    let x = gaussian_row(512, 3);
    let mut q8_1: Vec<BlockQ8_1> = vec![bytemuck::Zeroable::zeroed(); x.len() / QK8_1];
    let mut q8_0: Vec<BlockQ8_0> = vec![bytemuck::Zeroable::zeroed(); x.len() / QK8_1];
    quantize_row_q8_1(&x, &mut q8_1).unwrap();
    quantize_row_q8_0(&x, &mut q8_0).unwrap();
    for (xb, (a, b)) in x.chunks_exact(QK8_1).zip(q8_1.iter().zip(&q8_0)) {
        assert_eq!((a.d, a.qs), (b.d, b.qs), "quants and scale as Q8_0");
        let sum: i32 = a.qs.iter().map(|&q| q as i32).sum();
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let want = half::f16::from_f32(sum as f32 * (amax / 127.0));
        assert_eq!(f16_to_f32(a.s).to_bits(), want.to_f32().to_bits());
    }
}

#[test]
fn byte_slices_cast_to_blocks_at_any_address() {
    use ishizuki_core::quant::{try_as_blocks, BlockQ4K, BlockQ6K};
    let bytes = vec![0u8; 2 * 144 + 1];
    let blocks: &[BlockQ4K] = try_as_blocks(&bytes[1..]).unwrap();
    assert_eq!(blocks.len(), 2);
    assert!(matches!(
        try_as_blocks::<BlockQ4K>(&bytes[..200]),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        try_as_blocks::<BlockQ6K>(&bytes[1..]),
        Err(Error::Shape(_))
    ));
}
