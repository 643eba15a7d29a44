//! Portable reference kernels: per block an exact i32 sum, then f32 scaling in the order of
//! ggml's `ggml_vec_dot_*_generic`. The SIMD tiers are tested against these.
use super::{blocks_per_row, poison, QK};
use crate::kernels::{VecDot, MAX_ROWS};
use ishizuki_core::quant::{f16_to_f32, KVALUES_IQ4NL};
use ishizuki_core::GgmlType;

pub(super) fn dot(ty: GgmlType) -> Option<VecDot> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => q4_0,
        Q4_1 => q4_1,
        Q5_0 => q5_0,
        Q5_1 => q5_1,
        Q8_0 => q8_0,
        IQ4_NL => iq4_nl,
        _ => return None,
    })
}

/// How a block's integer sum `sumi` becomes its f32 term, as each generic ggml kernel writes it.
#[derive(Clone, Copy)]
enum Scaling {
    /// `sumi * dw * dy` (Q4_0).
    SumFirst,
    /// `(dw * dy) * sumi`.
    ScalesFirst,
    /// `(dw * dy) * sumi + mw * sy`: weight min `m` (bytes 2..4) times activation `s`.
    WithMin,
}

/// Q8_0 and Q8_1 blocks: f16 `d`, (Q8_1: f16 `s`), then 32 i8 values at the end.
const fn act_block(ty_has_min: bool) -> usize {
    if ty_has_min {
        36
    } else {
        34
    }
}

/// Shared loop: each weight block is unpacked once to its 32 integer values (element j of
/// the block at index j), then dotted with the same block of every activation row.
///
/// # Safety
/// None beyond the kernel contract; lengths are checked here.
#[inline(always)]
unsafe fn run<const WB: usize>(
    n: usize,
    w: &[u8],
    xs: &[&[u8]],
    out: &mut [f32],
    scaling: Scaling,
    unpack: impl Fn(&[u8; WB]) -> [i8; QK],
) {
    let xb = act_block(matches!(scaling, Scaling::WithMin));
    let Some(nb) = blocks_per_row(n, w, xs, out, WB, xb) else {
        return poison(out);
    };
    let mut sums = [0f32; MAX_ROWS];
    for b in 0..nb {
        // SAFETY: `blocks_per_row` checked that w holds nb blocks of WB bytes.
        let wblock = unsafe { &*w.as_ptr().add(b * WB).cast::<[u8; WB]>() };
        let dw = f16_to_f32([wblock[0], wblock[1]]);
        let mw = f16_to_f32([wblock[2], wblock[3]]);
        let q = unpack(wblock);
        for (sum, x) in sums.iter_mut().zip(xs) {
            // SAFETY: every activation row holds nb blocks of xb bytes.
            let xblock = unsafe { std::slice::from_raw_parts(x.as_ptr().add(b * xb), xb) };
            let dy = f16_to_f32([xblock[0], xblock[1]]);
            let sy = f16_to_f32([xblock[2], xblock[3]]);
            let y = &xblock[xb - QK..];
            let sumi: i32 = q
                .iter()
                .zip(y)
                .map(|(&a, &v)| a as i32 * v as i8 as i32)
                .sum();
            *sum += match scaling {
                Scaling::SumFirst => sumi as f32 * dw * dy,
                Scaling::ScalesFirst => (dw * dy) * sumi as f32,
                Scaling::WithMin => (dw * dy) * sumi as f32 + mw * sy,
            };
        }
    }
    out[..xs.len()].copy_from_slice(&sums[..xs.len()]);
}

/// Element j in the low nibble of qs[j], element j + 16 in its high nibble.
#[inline(always)]
fn nibbles(qs: &[u8]) -> [i8; QK] {
    let mut q = [0i8; QK];
    let (lo, hi) = q.split_at_mut(QK / 2);
    for ((l, h), &b) in lo.iter_mut().zip(hi).zip(qs) {
        *l = (b & 0x0f) as i8;
        *h = (b >> 4) as i8;
    }
    q
}

/// Adds bit j of the little-endian `qh` to element j as its fifth bit.
#[inline(always)]
fn with_fifth_bits(mut q: [i8; QK], qh: &[u8]) -> [i8; QK] {
    let bits = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (j, v) in q.iter_mut().enumerate() {
        *v |= (((bits >> j) & 1) << 4) as i8;
    }
    q
}

fn offset(mut q: [i8; QK], by: i8) -> [i8; QK] {
    q.iter_mut().for_each(|v| *v -= by);
    q
}

unsafe fn q4_0(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]) {
    run::<18>(n, w, xs, out, Scaling::SumFirst, |b| {
        offset(nibbles(&b[2..]), 8)
    });
}

unsafe fn q4_1(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]) {
    run::<20>(n, w, xs, out, Scaling::WithMin, |b| nibbles(&b[4..]));
}

unsafe fn q5_0(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]) {
    run::<22>(n, w, xs, out, Scaling::ScalesFirst, |b| {
        offset(with_fifth_bits(nibbles(&b[6..]), &b[2..6]), 16)
    });
}

unsafe fn q5_1(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]) {
    run::<24>(n, w, xs, out, Scaling::WithMin, |b| {
        with_fifth_bits(nibbles(&b[8..]), &b[4..8])
    });
}

unsafe fn q8_0(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]) {
    run::<34>(n, w, xs, out, Scaling::ScalesFirst, |b| {
        let mut q = [0i8; QK];
        q.iter_mut()
            .zip(&b[2..])
            .for_each(|(v, &byte)| *v = byte as i8);
        q
    });
}

unsafe fn iq4_nl(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]) {
    run::<18>(n, w, xs, out, Scaling::ScalesFirst, |b| {
        nibbles(&b[2..]).map(|i| KVALUES_IQ4NL[i as usize & 0x0f])
    });
}
