//! The matmul paths: few rows on 8-bit activations (the weights of one input sharing one
//! quantization and up to three a launch, the FFN's gated pair in one kernel), prefill through
//! cuBLAS, and the f32 kernel for the rest (the exact mode, the types without either).
use crate::device::{cuda_err, launch_1d, DevWeight};
use crate::kernels::Q8_ROW_VARIANTS;
use crate::step::Arg;
use crate::{kernels, CudaBackend, Q8Scratch, MATMUL_ROWS, MATMUL_WARPS, Q8_MAX_ROWS};
use cudarc::driver::{CudaFunction, LaunchConfig};
use ishizuki_core::backend::Activation;
use ishizuki_core::{Backend, Buffer, Error, LoadedWeight, Result};

/// Weights one 8-bit launch takes (q, k and v).
const Q8_GROUP: usize = 3;

impl CudaBackend {
    /// Grows the 8-bit activation scratch to hold rows of `n_in`.
    pub(crate) fn reserve_q8(&self, n_in: usize) -> Result<()> {
        let mut slot = self.q8_scratch.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|s| s.n_in >= n_in) {
            return Ok(());
        }
        let _hold = self.launcher.hold();
        let q = self
            .stream
            .alloc_zeros::<i8>(Q8_MAX_ROWS * n_in)
            .map_err(cuda_err)?;
        let d = self
            .stream
            .alloc_zeros::<f32>(Q8_MAX_ROWS * n_in / 32)
            .map_err(cuda_err)?;
        *slot = Some(Q8Scratch { q, d, n_in });
        Ok(())
    }

    /// Whether matmuls of `rows` rows run on 8-bit activations, for weights that have the
    /// kernels (the decode norm quantizes its output for them on this too).
    pub(crate) fn q8_rows(&self, rows: usize) -> bool {
        !self.exact && rows <= Q8_MAX_ROWS
    }

    /// Whether `w` runs on 8-bit activations at `rows`.
    fn takes_q8(&self, w: &LoadedWeight, rows: usize) -> bool {
        self.q8_rows(rows)
            && w.get::<DevWeight>()
                .is_ok_and(|d| d.kernels.matmul_q8.is_some())
    }

    /// `x` (rows, n_in) quantized into the scratch `s` (its lock held by the caller); the
    /// device addresses of the int8 values and their scales.
    fn quantize_q8(
        &self,
        s: &Option<Q8Scratch>,
        x: u64,
        rows: usize,
        n_in: usize,
    ) -> Result<(u64, u64)> {
        let s = s
            .as_ref()
            .filter(|s| s.n_in >= n_in)
            .ok_or_else(|| Error::Backend("cuda: no 8-bit activation scratch".into()))?;
        let (qp, dp) = (self.ptr(&s.q), self.ptr(&s.d));
        if self.launcher.take_quantized((x, rows, n_in)) {
            return Ok((qp, dp));
        }
        let n_blocks = (rows * n_in / 32) as u64;
        let args = [Arg::U64(x), Arg::U64(qp), Arg::U64(dp), Arg::U64(n_blocks)];
        // SAFETY: x holds rows x n_in f32s; the scratch Q8_MAX_ROWS >= rows rows of n_in
        unsafe { self.go(&self.ops.quantize_q8, launch_1d(n_blocks * 32), &args)? };
        Ok((qp, dp))
    }

    pub(crate) fn matmul_one(
        &self,
        w: &LoadedWeight,
        x: &Buffer,
        rows: usize,
        out: &mut Buffer,
    ) -> Result<()> {
        let xp = self.buf(x, rows * w.n_in, "matmul")?;
        let op = self.buf(out, rows * w.n_out, "matmul")?;
        if rows == 0 {
            return Ok(());
        }
        if self.takes_q8(w, rows) {
            let slot = self.q8_scratch.lock().unwrap_or_else(|e| e.into_inner());
            let (qp, dp) = self.quantize_q8(&slot, xp, rows, w.n_in)?;
            return self.launch_q8(&[(w, op)], qp, dp, rows);
        }
        let gemm = self.gemm.as_ref();
        if let Some(g) =
            gemm.filter(|_| !self.exact && rows > Q8_MAX_ROWS && kernels::f16_gemm_takes(w.ty))
        {
            let _hold = self.launcher.hold();
            return g.matmul(&self.stream, &self.ops.convert_f16, w, xp, rows, op);
        }
        self.matmul_f32(w, xp, rows, op)
    }

    /// Several weights of one input: on 8-bit activations, `x` is quantized once and
    /// consecutive weights of one type share a launch.
    pub(crate) fn matmul_many(
        &self,
        ws: &[&LoadedWeight],
        x: &Buffer,
        rows: usize,
        outs: &mut [&mut Buffer],
    ) -> Result<()> {
        ishizuki_core::backend::check_outputs(ws.len(), outs.len())?;
        let n_in = ws.first().map_or(0, |w| w.n_in);
        let shared = rows > 0 && ws.iter().all(|w| w.n_in == n_in && self.takes_q8(w, rows));
        if !shared {
            for (w, out) in ws.iter().zip(outs.iter_mut()) {
                self.matmul_one(w, x, rows, out)?;
            }
            return Ok(());
        }
        let xp = self.buf(x, rows * n_in, "matmul")?;
        let mut pairs = Vec::with_capacity(ws.len());
        for (w, out) in ws.iter().zip(outs.iter()) {
            pairs.push((*w, self.buf(out, rows * w.n_out, "matmul")?));
        }
        let slot = self.q8_scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (qp, dp) = self.quantize_q8(&slot, xp, rows, n_in)?;
        let mut rest = &pairs[..];
        while let Some(first) = rest.first() {
            let same = rest
                .iter()
                .take(Q8_GROUP)
                .take_while(|(w, _)| w.ty == first.0.ty)
                .count();
            self.launch_q8(&rest[..same], qp, dp, rows)?;
            rest = &rest[same..];
        }
        Ok(())
    }

    /// One 8-bit launch over `group` (weights of one type and width, at most Q8_GROUP, with
    /// their outputs' addresses), the activations already quantized at `qp`, `dp`.
    fn launch_q8(
        &self,
        group: &[(&LoadedWeight, u64)],
        qp: u64,
        dp: u64,
        rows: usize,
    ) -> Result<()> {
        let first = group[0].0;
        let dw = first.get::<DevWeight>()?;
        let variants = dw.kernels.matmul_q8.as_ref();
        let (f, per) = variants
            .and_then(|v| q8_variant(v, rows))
            .ok_or_else(|| Error::Backend(format!("cuda: {} has no 8-bit matmul", first.ty)))?;
        let (mut wp, mut op, mut n) = ([0u64; Q8_GROUP], [0u64; Q8_GROUP], [0i32; Q8_GROUP]);
        let (mut blocks, parts) = (0, kernels::q8_parts(first.ty, first.n_in));
        for (i, (w, out)) in group.iter().take(Q8_GROUP).enumerate() {
            let d = w.get::<DevWeight>()?;
            if w.ty != first.ty || w.n_in != first.n_in {
                return Err(Error::Shape("cuda: an 8-bit group of mixed weights".into()));
            }
            (wp[i], op[i], n[i]) = (self.ptr(&d.data), *out, w.n_out as i32);
            blocks += w.n_out.div_ceil(MATMUL_WARPS / parts);
        }
        let mut args: Vec<Arg> = wp.iter().chain(&op).map(|&p| Arg::U64(p)).collect();
        args.extend(n.map(Arg::I32));
        args.extend([
            Arg::U64(qp),
            Arg::U64(dp),
            Arg::I32(first.n_in as i32),
            Arg::I32(rows as i32),
            Arg::U64(dw.row_bytes as u64),
            Arg::I32(parts as i32),
        ]);
        let cfg = grid(blocks, rows, per);
        // SAFETY: each weight holds n_out rows of row_bytes (one type and width); the scratch
        // holds rows x n_in; each output rows x its n_out
        unsafe { self.go(f, cfg, &args) }
    }

    /// `gate = act(x . ws[0]^T) * (x . ws[1]^T)`: one kernel on 8-bit activations when both
    /// weights have it, else the two products then the activation.
    pub(crate) fn matmul_gated(
        &self,
        ws: [&LoadedWeight; 2],
        x: &Buffer,
        rows: usize,
        gate: &mut Buffer,
        up: &mut Buffer,
        act: Activation,
    ) -> Result<()> {
        let [wg, wu] = ws;
        let pair = (wg.ty, wg.n_out, wg.n_in) == (wu.ty, wu.n_out, wu.n_in);
        let glu = wg.get::<DevWeight>()?.kernels.matmul_glu_q8.as_ref();
        let glu = glu.filter(|_| pair && rows > 0 && self.takes_q8(wg, rows));
        let Some((f, per)) = glu.and_then(|v| q8_variant(v, rows)) else {
            self.matmul_many(&ws, x, rows, &mut [&mut *gate, &mut *up])?;
            return self.glu(gate, up, rows * wg.n_out, act);
        };
        let xp = self.buf(x, rows * wg.n_in, "matmul_glu")?;
        let gp = self.buf(gate, rows * wg.n_out, "matmul_glu")?;
        let slot = self.q8_scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (qp, dp) = self.quantize_q8(&slot, xp, rows, wg.n_in)?;
        let (dg, du) = (wg.get::<DevWeight>()?, wu.get::<DevWeight>()?);
        let args = [
            Arg::U64(self.ptr(&dg.data)),
            Arg::U64(self.ptr(&du.data)),
            Arg::U64(qp),
            Arg::U64(dp),
            Arg::U64(gp),
            Arg::I32(wg.n_out as i32),
            Arg::I32(wg.n_in as i32),
            Arg::I32(rows as i32),
            Arg::U64(dg.row_bytes as u64),
            Arg::I32(matches!(act, Activation::GeGluTanh) as i32),
        ];
        let cfg = grid(wg.n_out.div_ceil(MATMUL_WARPS), rows, per);
        // SAFETY: both weights hold n_out rows of row_bytes; the scratch rows x n_in; gate
        // rows x n_out
        unsafe { self.go(f, cfg, &args) }
    }

    /// The f32-activation kernel: `out = x . w^T`, MATMUL_ROWS rows a pass.
    fn matmul_f32(&self, w: &LoadedWeight, xp: u64, rows: usize, op: u64) -> Result<()> {
        let dw = w.get::<DevWeight>()?;
        let args = [
            Arg::U64(self.ptr(&dw.data)),
            Arg::U64(xp),
            Arg::U64(op),
            Arg::I32(w.n_out as i32),
            Arg::I32(w.n_in as i32),
            Arg::I32(rows as i32),
            Arg::U64(dw.row_bytes as u64),
        ];
        let cfg = grid(w.n_out.div_ceil(MATMUL_WARPS), rows, MATMUL_ROWS);
        // SAFETY: the weight holds n_out rows of row_bytes; x and out were checked by callers
        unsafe { self.go(&dw.kernels.matmul, cfg, &args) }
    }
}

/// The 8-bit kernel of `variants` (one per Q8_ROW_VARIANTS entry) for `rows`, and the rows
/// each of its blocks takes: the smallest that holds them all, else the largest.
fn q8_variant(variants: &[CudaFunction], rows: usize) -> Option<(&CudaFunction, usize)> {
    let i = Q8_ROW_VARIANTS
        .iter()
        .position(|&r| r >= rows)
        .unwrap_or(Q8_ROW_VARIANTS.len() - 1);
    Some((variants.get(i)?, Q8_ROW_VARIANTS[i]))
}

/// `blocks` of MATMUL_WARPS warps (one or a few per output row) for each `per` activation
/// rows.
fn grid(blocks: usize, rows: usize, per: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks as u32, rows.div_ceil(per) as u32, 1),
        block_dim: (32 * MATMUL_WARPS as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}
