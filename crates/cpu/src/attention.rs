//! Causal (optionally sliding-window) attention over an f16 KV cache, one task per (row, head).
use crate::pool::{SharedMut, ThreadPool};
use crate::simd::{axpy, dot};
use half::{f16, slice::HalfFloatSliceExt};
use ishizuki_core::{backend::AttnParams, Error, Result};
use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
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
    let kv_stride = nkv * hd;
    if nkv == 0
        || !nh.is_multiple_of(nkv)
        || q.len() != rows * nh * hd
        || out.len() != q.len()
        || k.len() < n_kv * kv_stride
        || v.len() < n_kv * kv_stride
        || positions.iter().any(|&p| p as usize >= n_kv)
    {
        return Err(Error::Shape(format!(
            "attention: {rows} rows, {nh}/{nkv} heads of {hd}, {n_kv} cached positions"
        )));
    }
    let group = nh / nkv;
    let out_ptr = SharedMut(out.as_mut_ptr());
    pool.run(rows * nh, &|task| {
        let (row, head) = (task / nh, task % nh);
        let pos = positions[row] as usize;
        let first = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
        let kvh = head / group;
        let qv = &q[(row * nh + head) * hd..][..hd];
        SCRATCH.with_borrow_mut(|(scores, kf)| {
            kf.resize(hd, 0.0);
            scores.clear();
            let mut max = f32::NEG_INFINITY;
            for j in first..=pos {
                k[j * kv_stride + kvh * hd..][..hd].convert_to_f32_slice(kf);
                let mut s = dot(qv, kf) * p.scale;
                if let Some(cap) = p.softcap {
                    s = cap * (s / cap).tanh();
                }
                max = max.max(s);
                scores.push(s);
            }
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            // SAFETY: each (row, head) task writes only its own head_dim slice.
            let o = unsafe {
                std::slice::from_raw_parts_mut(out_ptr.ptr().add((row * nh + head) * hd), hd)
            };
            o.fill(0.0);
            for (j, s) in (first..=pos).zip(scores.iter()) {
                v[j * kv_stride + kvh * hd..][..hd].convert_to_f32_slice(kf);
                axpy(o, s / sum, kf);
            }
        });
    });
    Ok(())
}
