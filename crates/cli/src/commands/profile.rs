//! `bench --profile`: a backend that times every op of the one it wraps, so a run shows where
//! its time goes (by op, matmuls by weight type and row count) on machines without a profiler.
use half::f16;
use ishizuki_core::backend::{Activation, AttnParams, NormKind, RopeKind};
use ishizuki_core::{Backend, GgmlType, PackedWeight, Result, WeightView};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What one line of the profile sums: the op, the weight type of a matmul with its inputs and
/// outputs per row (all its weights' outputs), and its row class.
type Key = (&'static str, Option<(GgmlType, usize, usize)>, &'static str);

pub struct Profiled<'a> {
    inner: &'a dyn Backend,
    ops: Mutex<HashMap<Key, (Duration, u64)>>,
}

fn rows_class(rows: usize) -> &'static str {
    match rows {
        1 => "1 row",
        2..=16 => "2-16 rows",
        _ => "17+ rows",
    }
}

impl<'a> Profiled<'a> {
    pub fn new(inner: &'a dyn Backend) -> Profiled<'a> {
        Profiled {
            inner,
            ops: Mutex::new(HashMap::new()),
        }
    }

    fn time<T>(&self, key: Key, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let e = ops.entry(key).or_default();
        e.0 += start.elapsed();
        e.1 += 1;
        out
    }

    /// The table, longest first, with each line's share of `wall` (the timed runs' total).
    pub fn print(&self, wall: Duration) {
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines: Vec<_> = ops.iter().collect();
        lines.sort_by_key(|line| std::cmp::Reverse(line.1 .0));
        let pct = |d: Duration| 100.0 * d.as_secs_f64() / wall.as_secs_f64().max(1e-9);
        eprintln!("\n| op | weight | rows | calls | ms | % of wall |");
        eprintln!("| --- | --- | --- | ---: | ---: | ---: |");
        let mut total = Duration::ZERO;
        for ((op, ty, rows), (d, n)) in lines {
            let ty = ty.map_or(String::new(), |(t, k, n)| format!("{t} {k} to {n}"));
            let ms = d.as_secs_f64() * 1e3;
            eprintln!("| {op} | {ty} | {rows} | {n} | {ms:.1} | {:.1} |", pct(*d));
            total += *d;
        }
        let rest = wall.saturating_sub(total);
        eprintln!(
            "| outside the backend | | | | {:.1} | {:.1} |",
            rest.as_secs_f64() * 1e3,
            pct(rest)
        );
    }
}

impl Backend for Profiled<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn pack(&self, w: &WeightView, consumed: &mut dyn FnMut(&[u8])) -> Option<PackedWeight> {
        self.inner.pack(w, consumed)
    }

    fn matmul(&self, w: &WeightView, x: &[f32], rows: usize, out: &mut [f32]) -> Result<()> {
        let key = ("matmul", Some((w.ty, w.n_in, w.n_out)), rows_class(rows));
        self.time(key, || self.inner.matmul(w, x, rows, out))
    }

    fn matmul_multi(
        &self,
        ws: &[WeightView],
        x: &[f32],
        rows: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        let n_out = ws.iter().map(|w| w.n_out).sum();
        let key = (
            "matmul_multi",
            ws.first().map(|w| (w.ty, w.n_in, n_out)),
            rows_class(rows),
        );
        self.time(key, || self.inner.matmul_multi(ws, x, rows, outs))
    }

    fn embed(&self, table: &WeightView, ids: &[u32], out: &mut [f32]) -> Result<()> {
        self.time(("embed", None, ""), || self.inner.embed(table, ids, out))
    }

    fn rms_norm(&self, x: &mut [f32], w: &[f32], eps: f32, kind: NormKind) {
        self.time(("rms_norm", None, ""), || {
            self.inner.rms_norm(x, w, eps, kind)
        })
    }

    fn add_rms_norm(
        &self,
        x: &mut [f32],
        delta: Option<&[f32]>,
        out: &mut [f32],
        w: &[f32],
        eps: f32,
        kind: NormKind,
    ) {
        self.time(("add_rms_norm", None, ""), || {
            self.inner.add_rms_norm(x, delta, out, w, eps, kind)
        })
    }

    fn rope(
        &self,
        x: &mut [f32],
        n_head: usize,
        head_dim: usize,
        positions: &[u32],
        theta: f32,
        freq_scale: f32,
        kind: RopeKind,
    ) {
        self.time(("rope", None, ""), || {
            self.inner
                .rope(x, n_head, head_dim, positions, theta, freq_scale, kind)
        })
    }

    fn attention(
        &self,
        q: &[f32],
        k: &[f16],
        v: &[f16],
        n_kv: usize,
        positions: &[u32],
        p: &AttnParams,
        out: &mut [f32],
    ) -> Result<()> {
        let key = ("attention", None, rows_class(positions.len()));
        self.time(key, || {
            self.inner.attention(q, k, v, n_kv, positions, p, out)
        })
    }

    fn glu(&self, gate: &mut [f32], up: &[f32], act: Activation) {
        self.time(("glu", None, ""), || self.inner.glu(gate, up, act))
    }

    fn matmul_glu(
        &self,
        ws: &[WeightView; 2],
        x: &[f32],
        rows: usize,
        gate: &mut [f32],
        up: &mut [f32],
        act: Activation,
    ) -> Result<()> {
        let [w, _] = ws;
        let key = (
            "matmul_glu",
            Some((w.ty, w.n_in, w.n_out)),
            rows_class(rows),
        );
        self.time(key, || self.inner.matmul_glu(ws, x, rows, gate, up, act))
    }
}
