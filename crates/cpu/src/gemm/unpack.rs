//! Every supported weight type rewritten as one affine form per sub-block of `S` elements:
//! `x[k] = scale[k / S] * q[k] + min[k / S]` with unsigned 8-bit `q`, so one integer
//! microkernel (`vpdpbusd`: u8 weights x i8 activations) serves all of them. Signed types
//! become unsigned by an offset that moves into `min` (Q8_0: q + 128, min = -128 d).
use ishizuki_core::quant::{
    f16_to_f32, get_scale_min_k4, q3k_scale, try_as_blocks, BlockIQ4NL, BlockIQ4XS, BlockQ2K,
    BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0,
    KVALUES_IQ4NL, QK_K,
};
use ishizuki_core::GgmlType;

/// Elements per (scale, min) pair when `ty` has an unpacker.
pub fn sub_block(ty: GgmlType) -> Option<usize> {
    use GgmlType::*;
    match ty {
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4_NL | IQ4_XS | Q4_K | Q5_K => Some(32),
        Q2_K | Q3_K | Q6_K => Some(16),
        _ => None,
    }
}

/// Unpacks one weight row of `q.len()` elements; `scale` and `min` hold one entry per sub-block.
/// Returns false (leaving the outputs unspecified) when `src` is not exactly such a row.
pub fn unpack_row(
    ty: GgmlType,
    src: &[u8],
    q: &mut [u8],
    scale: &mut [f32],
    min: &mut [f32],
) -> bool {
    let Some(s) = sub_block(ty) else {
        return false;
    };
    let n = q.len();
    let whole = n.is_multiple_of(ty.block_size()) && scale.len() == n / s && min.len() == n / s;
    if !whole || ty.row_bytes(n as u64) != Some(src.len() as u64) {
        return false;
    }
    use GgmlType::*;
    let u = Unpacked { q, scale, min };
    match ty {
        Q4_0 => u.legacy(src, |b: &BlockQ4_0, q| {
            nibbles(&b.qs, q);
            let d = f16_to_f32(b.d);
            (d, -8.0 * d)
        }),
        Q4_1 => u.legacy(src, |b: &BlockQ4_1, q| {
            nibbles(&b.qs, q);
            (f16_to_f32(b.d), f16_to_f32(b.m))
        }),
        Q5_0 => u.legacy(src, |b: &BlockQ5_0, q| {
            nibbles(&b.qs, q);
            fifth_bits(b.qh, q);
            let d = f16_to_f32(b.d);
            (d, -16.0 * d)
        }),
        Q5_1 => u.legacy(src, |b: &BlockQ5_1, q| {
            nibbles(&b.qs, q);
            fifth_bits(b.qh, q);
            (f16_to_f32(b.d), f16_to_f32(b.m))
        }),
        Q8_0 => u.legacy(src, |b: &BlockQ8_0, q| {
            for (o, &v) in q.iter_mut().zip(&b.qs) {
                *o = (v as u8) ^ 0x80;
            }
            let d = f16_to_f32(b.d);
            (d, -128.0 * d)
        }),
        IQ4_NL => u.legacy(src, |b: &BlockIQ4NL, q| {
            nl_levels(&b.qs, q);
            let d = f16_to_f32(b.d);
            (d, -128.0 * d)
        }),
        IQ4_XS => u.super_blocks(src, iq4_xs),
        Q4_K => u.super_blocks(src, q4_k),
        Q5_K => u.super_blocks(src, q5_k),
        Q6_K => u.super_blocks(src, q6_k),
        Q3_K => u.super_blocks(src, q3_k),
        Q2_K => u.super_blocks(src, q2_k),
        _ => return false,
    }
    true
}

struct Unpacked<'a> {
    q: &'a mut [u8],
    scale: &'a mut [f32],
    min: &'a mut [f32],
}

impl Unpacked<'_> {
    /// 32-element blocks with one (scale, min) each.
    fn legacy<B: bytemuck::Pod>(self, src: &[u8], f: impl Fn(&B, &mut [u8]) -> (f32, f32)) {
        let blocks = try_as_blocks::<B>(src).expect("row length checked");
        let parts = self.q.chunks_exact_mut(32).zip(self.scale.iter_mut());
        for ((b, (q, s)), m) in blocks.iter().zip(parts).zip(self.min.iter_mut()) {
            (*s, *m) = f(b, q);
        }
    }

    /// 256-element super-blocks: `f(block, q[256], scale[256 / S], min[256 / S])`.
    fn super_blocks<B: bytemuck::Pod>(
        self,
        src: &[u8],
        f: impl Fn(&B, &mut [u8], &mut [f32], &mut [f32]),
    ) {
        let blocks = try_as_blocks::<B>(src).expect("row length checked");
        let per = self.scale.len() / blocks.len().max(1);
        let parts = self
            .q
            .chunks_exact_mut(QK_K)
            .zip(self.scale.chunks_exact_mut(per))
            .zip(self.min.chunks_exact_mut(per));
        for (b, ((q, s), m)) in blocks.iter().zip(parts) {
            f(b, q, s, m);
        }
    }
}

/// 16 bytes to 32 values: element j is the low nibble of byte j, element j + 16 the high one.
#[inline(always)]
fn nibbles(qs: &[u8; 16], q: &mut [u8]) {
    let (lo, hi) = q.split_at_mut(16);
    for ((l, h), &v) in lo.iter_mut().zip(hi).zip(qs) {
        *l = v & 0x0f;
        *h = v >> 4;
    }
}

/// Adds 16 to element j where bit j of the little-endian u32 `qh` is set.
#[inline(always)]
fn fifth_bits(qh: [u8; 4], q: &mut [u8]) {
    let bits = u32::from_le_bytes(qh);
    for (j, v) in q.iter_mut().enumerate() {
        *v |= (((bits >> j) & 1) as u8) << 4;
    }
}

/// IQ4 nibbles to their table levels + 128.
#[inline(always)]
fn nl_levels(qs: &[u8], q: &mut [u8]) {
    let (lo, hi) = q.split_at_mut(16);
    for ((l, h), &v) in lo.iter_mut().zip(hi).zip(qs) {
        *l = (KVALUES_IQ4NL[(v & 0x0f) as usize] as u8) ^ 0x80;
        *h = (KVALUES_IQ4NL[(v >> 4) as usize] as u8) ^ 0x80;
    }
}

fn iq4_xs(b: &BlockIQ4XS, q: &mut [u8], scale: &mut [f32], min: &mut [f32]) {
    let d = f16_to_f32(b.d);
    for (ib, (q, qs)) in q
        .chunks_exact_mut(32)
        .zip(b.qs.chunks_exact(16))
        .enumerate()
    {
        let dl = d * b.scale(ib) as f32;
        nl_levels(qs, q);
        (scale[ib], min[ib]) = (dl, -128.0 * dl);
    }
}

/// Q4_K / Q5_K (scale, min) of the 8 sub-blocks.
fn k4_affine(d: [u8; 2], dmin: [u8; 2], packed: &[u8; 12], scale: &mut [f32], min: &mut [f32]) {
    let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
    for (j, (s, m)) in scale.iter_mut().zip(min.iter_mut()).enumerate() {
        let (sc, mn) = get_scale_min_k4(j, packed);
        (*s, *m) = (d * sc as f32, -dmin * mn as f32);
    }
}

/// 64 elements per 32 bytes: low nibbles are sub-block 2j, high nibbles 2j + 1.
fn q4_k(b: &BlockQ4K, q: &mut [u8], scale: &mut [f32], min: &mut [f32]) {
    for (out, qs) in q.chunks_exact_mut(64).zip(b.qs.chunks_exact(32)) {
        let (lo, hi) = out.split_at_mut(32);
        for ((l, h), &v) in lo.iter_mut().zip(hi).zip(qs) {
            (*l, *h) = (v & 0x0f, v >> 4);
        }
    }
    k4_affine(b.d, b.dmin, &b.scales, scale, min);
}

fn q5_k(b: &BlockQ5K, q: &mut [u8], scale: &mut [f32], min: &mut [f32]) {
    for (j, (out, qs)) in q
        .chunks_exact_mut(64)
        .zip(b.qs.chunks_exact(32))
        .enumerate()
    {
        let (lo, hi) = out.split_at_mut(32);
        for (((l, h), &v), &hv) in lo.iter_mut().zip(hi).zip(qs).zip(&b.qh) {
            *l = (v & 0x0f) | (((hv >> (2 * j)) & 1) << 4);
            *h = (v >> 4) | (((hv >> (2 * j + 1)) & 1) << 4);
        }
    }
    k4_affine(b.d, b.dmin, &b.scales, scale, min);
}

/// Each half of 128: ql 64 bytes, qh 32 bytes; q in 0..64 with offset 32.
fn q6_k(b: &BlockQ6K, q: &mut [u8], scale: &mut [f32], min: &mut [f32]) {
    let halves = q
        .chunks_exact_mut(128)
        .zip(b.ql.chunks_exact(64))
        .zip(b.qh.chunks_exact(32));
    for ((out, ql), qh) in halves {
        for l in 0..32 {
            let (a, c, h) = (ql[l], ql[l + 32], qh[l]);
            out[l] = (a & 0x0f) | ((h & 3) << 4);
            out[l + 32] = (c & 0x0f) | (((h >> 2) & 3) << 4);
            out[l + 64] = (a >> 4) | (((h >> 4) & 3) << 4);
            out[l + 96] = (c >> 4) | (((h >> 6) & 3) << 4);
        }
    }
    let d = f16_to_f32(b.d);
    for ((s, m), &sc) in scale.iter_mut().zip(min.iter_mut()).zip(&b.scales) {
        let dl = d * sc as f32;
        (*s, *m) = (dl, -32.0 * dl);
    }
}

/// Element n*128 + j*32 + h*16 + l: bits 2j of qs[n*32 + h*16 + l], high bit (n*4 + j) of
/// hmask[h*16 + l], sub-block n*8 + j*2 + h; q = low + 4 * hbit with offset 4.
fn q3_k(b: &BlockQ3K, q: &mut [u8], scale: &mut [f32], min: &mut [f32]) {
    let d = f16_to_f32(b.d);
    for (i, out) in q.chunks_exact_mut(16).enumerate() {
        let (n, j, h) = (i / 8, (i / 2) % 4, i % 2);
        let qs = &b.qs[n * 32 + h * 16..][..16];
        let hm = &b.hmask[h * 16..][..16];
        for ((o, &qv), &hv) in out.iter_mut().zip(qs).zip(hm) {
            *o = ((qv >> (2 * j)) & 3) | (((hv >> (n * 4 + j)) & 1) << 2);
        }
        let dl = d * q3k_scale(i, &b.scales) as f32;
        (scale[i], min[i]) = (dl, -4.0 * dl);
    }
}

/// Same element order as Q3_K; x = d * (sc & 15) * q - dmin * (sc >> 4).
fn q2_k(b: &BlockQ2K, q: &mut [u8], scale: &mut [f32], min: &mut [f32]) {
    let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
    for (i, (out, &sc)) in q.chunks_exact_mut(16).zip(&b.scales).enumerate() {
        let (n, j, h) = (i / 8, (i / 2) % 4, i % 2);
        let qs = &b.qs[n * 32 + h * 16..][..16];
        for (o, &qv) in out.iter_mut().zip(qs) {
            *o = (qv >> (2 * j)) & 3;
        }
        (scale[i], min[i]) = (d * (sc & 0x0f) as f32, -dmin * (sc >> 4) as f32);
    }
}
