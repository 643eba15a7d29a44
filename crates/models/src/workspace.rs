//! A forward's intermediates: backend buffers allocated once and reused by every layer and
//! every later forward of no more rows (stable addresses, which a captured graph replays).
use crate::config::TransformerConfig;
use ishizuki_core::{Backend, Buffer, Result};

pub struct Workspace {
    /// Rows each buffer holds.
    pub rows: usize,
    /// Output rows `head_in` and `logits` hold.
    pub out_rows: usize,
    pub x: Buffer,         // (rows, n_embd): the residual stream
    pub attn_norm: Buffer, // (rows, n_embd)
    pub q: Buffer,         // (rows, n_head * head_dim)
    pub k: Buffer,         // (rows, n_head_kv * head_dim)
    pub v: Buffer,         // (rows, n_head_kv * head_dim)
    pub kqv: Buffer,       // (rows, n_head * head_dim)
    pub attn_out: Buffer,  // (rows, n_embd), then the FFN output, added to x by the next layer
    pub ffn_inp: Buffer,   // (rows, n_embd)
    pub gate: Buffer,      // (rows, n_ff)
    pub up: Buffer,        // (rows, n_ff)
    pub head_in: Buffer,   // (out_rows, n_embd): the rows whose output is read back
    pub logits: Buffer,    // (out_rows, n_vocab)
}

impl Workspace {
    pub fn new(
        be: &dyn Backend,
        c: &TransformerConfig,
        rows: usize,
        out_rows: usize,
    ) -> Result<Workspace> {
        let rows = rows.max(1);
        let out_rows = out_rows.max(1);
        let a = |width: usize| be.alloc(rows * width);
        Ok(Workspace {
            rows,
            out_rows,
            x: a(c.n_embd)?,
            attn_norm: a(c.n_embd)?,
            q: a(c.q_dim())?,
            k: a(c.kv_dim())?,
            v: a(c.kv_dim())?,
            kqv: a(c.q_dim())?,
            attn_out: a(c.n_embd)?,
            ffn_inp: a(c.n_embd)?,
            gate: a(c.n_ff)?,
            up: a(c.n_ff)?,
            head_in: be.alloc(out_rows * c.n_embd)?,
            logits: be.alloc(out_rows * c.n_vocab)?,
        })
    }

    /// Whether it holds a forward of `rows` rows reading back `out_rows`.
    pub fn fits(&self, rows: usize, out_rows: usize) -> bool {
        rows <= self.rows && out_rows <= self.out_rows
    }
}

/// The workspace kept between forwards, replaced by a larger one when a forward needs more
/// (every buffer is written before it is read, so old contents never leak into a forward).
pub fn fit<'a>(
    kept: &'a mut Option<Workspace>,
    be: &dyn Backend,
    c: &TransformerConfig,
    rows: usize,
    out_rows: usize,
) -> Result<&'a mut Workspace> {
    if !kept.as_ref().is_some_and(|w| w.fits(rows, out_rows)) {
        let (r0, o0) = kept.as_ref().map_or((0, 0), |w| (w.rows, w.out_rows));
        // drop the old buffers first: a device may not hold both
        *kept = None;
        let fresh = Workspace::new(be, c, rows.max(r0), out_rows.max(o0))?;
        return Ok(kept.insert(fresh));
    }
    kept.as_mut()
        .ok_or_else(|| ishizuki_core::Error::Backend("no workspace".into()))
}
