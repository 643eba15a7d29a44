//! Reference k-quant quantisers, transcribed from ggml's `quantize_row_{q4_K,q6_K,q8_K}_ref`
//! with the same float operation order (no fused multiply-add).
use super::kquants::{get_scale_min_k4, BlockQ4K, BlockQ6K, BlockQ8K, QK_K};
use super::{check_blocks, f16_to_f32, f32_to_f16};
use crate::Result;

/// ggml's GROUP_MAX_EPS: sub-blocks with a smaller absolute maximum count as all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, through the f32 mantissa (ggml `nearest_int`; valid for
/// |x| <= 4194303, which every caller guarantees for finite input).
#[inline(always)]
fn nearest_int(x: f32) -> i32 {
    let bits = (x + 12_582_912.0).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// ggml `make_qkx2_quants` for 32 elements with `use_mad = false`: fits x ~ scale * L - min (L in 0..=nmax)
/// minimising the weighted squared error over a sweep of `nstep + 1` trial scales.
/// Returns (scale, min) where the block is reconstructed as scale * L - min.
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32; 32],
    weights: &[f32; 32],
    l_out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..32 {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..32 {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..32 {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let (w, lf) = (weights[i], l as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..32 {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                l_out[..32].copy_from_slice(&laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Packs Q4_K's eight 6-bit (scale, min) pairs into 12 bytes (inverse of get_scale_min_k4).
fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

/// quantize_row_q4_K_ref: per 32-element sub-block an asymmetric 4-bit fit, then the
/// sub-block scales and mins quantised to 6 bits against the block maxima.
pub fn quantize_row_q4_k(x: &[f32], y: &mut [BlockQ4K]) -> Result<()> {
    check_blocks("Q4_K", x.len(), y.len(), QK_K)?;
    for (xb, b) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for (j, (xs, ls)) in xb
            .chunks_exact(32)
            .zip(levels.chunks_exact_mut(32))
            .enumerate()
        {
            let xs: &[f32; 32] = &std::array::from_fn(|l| xs[l]);
            let sum_x2 = xs.iter().fold(0.0f32, |s, &v| s + v * v);
            let av_x = (sum_x2 / 32.0).sqrt();
            let weights: [f32; 32] = std::array::from_fn(|l| av_x + xs[l].abs());
            (scales[j], mins[j]) = make_qkx2_quants(15, xs, &weights, ls, -1.0, 0.1, 20);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        // the C stores nearest_int into a uint8_t before clamping to 63
        let ls: [u8; 8] =
            std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
        let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
        b.scales = pack_scale_min_k4(&ls, &lm);
        b.d = f32_to_f16(max_scale / 63.0);
        b.dmin = f32_to_f16(max_min / 63.0);
        let (d_all, dmin_all) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        for (j, (xs, lv)) in xb
            .chunks_exact(32)
            .zip(levels.chunks_exact_mut(32))
            .enumerate()
        {
            let (sc, m) = get_scale_min_k4(j, &b.scales);
            let d = d_all * sc as f32;
            if d == 0.0 {
                continue; // keep the levels of the sub-block fit
            }
            let dm = dmin_all * m as f32;
            for (l, &v) in lv.iter_mut().zip(xs) {
                *l = nearest_int((v + dm) / d).clamp(0, 15) as u8;
            }
        }
        for (q, lv) in b.qs.chunks_exact_mut(32).zip(levels.chunks_exact(64)) {
            for (l, out) in q.iter_mut().enumerate() {
                *out = lv[l] | (lv[l + 32] << 4);
            }
        }
    }
    Ok(())
}

/// ggml `make_qx_quants` with rmse_type 1 and no importance weights (w = x^2): symmetric fit
/// x ~ scale * (L - nmax), L in 0..2*nmax, trying 19 scales around nmax / max.
fn make_qx_quants_16(nmax: i32, x: &[f32; 16], l_out: &mut [i8]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let (l, w) = (level(iscale, v) as f32, v * v);
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (l, &v) in l_out.iter_mut().zip(x) {
        *l = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l, &v) in l_out.iter_mut().zip(x) {
                *l = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// quantize_row_q6_K_ref: symmetric 6-bit levels per 16 elements with 8-bit sub-block scales.
pub fn quantize_row_q6_k(x: &[f32], y: &mut [BlockQ6K]) -> Result<()> {
    check_blocks("Q6_K", x.len(), y.len(), QK_K)?;
    for (xb, b) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let mut levels = [0i8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for (ib, (xs, ls)) in xb
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            let xs: &[f32; 16] = &std::array::from_fn(|l| xs[l]);
            let scale = make_qx_quants_16(32, xs, ls);
            scales[ib] = scale;
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }
        let iscale = -128.0 / max_scale;
        b.d = f32_to_f16(1.0 / iscale);
        for (s, &scale) in b.scales.iter_mut().zip(&scales) {
            *s = nearest_int(iscale * scale).min(127) as i8;
        }
        let d_all = f16_to_f32(b.d);
        for ((xs, lv), &sc) in xb
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .zip(&b.scales)
        {
            let d = d_all * sc as f32;
            if d == 0.0 {
                continue; // keep the levels of the sub-block fit
            }
            for (l, &v) in lv.iter_mut().zip(xs) {
                *l = (nearest_int(v / d).clamp(-32, 31) + 32) as i8;
            }
        }
        pack_q6_k(&levels, b);
    }
    Ok(())
}

/// Levels 0..64 into ql (low nibbles) and qh (high 2 bits), in dequantize_q6_k's order.
fn pack_q6_k(levels: &[i8; QK_K], b: &mut BlockQ6K) {
    let halves = levels
        .chunks_exact(128)
        .zip(b.ql.chunks_exact_mut(64))
        .zip(b.qh.chunks_exact_mut(32));
    for ((lv, ql), qh) in halves {
        for l in 0..32 {
            let q: [u8; 4] = std::array::from_fn(|k| lv[l + 32 * k] as u8);
            ql[l] = (q[0] & 0x0f) | ((q[2] & 0x0f) << 4);
            ql[l + 32] = (q[1] & 0x0f) | ((q[3] & 0x0f) << 4);
            qh[l] = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
        }
    }
}

/// quantize_row_q8_K_ref: d = max / -127 as an f32 (sign of the largest-magnitude element),
/// q = nearest_int(x / d), plus the sum of every 16 quants. An all-zero block gets d = 0 and
/// zero quants and sums.
pub fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8K]) -> Result<()> {
    check_blocks("Q8_K", x.len(), y.len(), QK_K)?;
    for (xb, b) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (sum, qs) in b.bsums.chunks_exact_mut(2).zip(b.qs.chunks_exact(16)) {
            let s: i32 = qs.iter().map(|&q| q as i32).sum();
            sum.copy_from_slice(&(s as i16).to_le_bytes());
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
    Ok(())
}
