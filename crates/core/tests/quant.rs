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
