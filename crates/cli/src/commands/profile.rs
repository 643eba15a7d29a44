//! `bench --profile`: a backend that times every op of the one it wraps, so a run shows where
//! its time goes (by op, matmuls by weight type and row count) on machines without a profiler.
use ishizuki_core::backend::{Activation, AttnParams, Candidate, NormKind, RopeKind, RopeParams};
use ishizuki_core::{
    Backend, Buffer, ForwardMeta, GgmlType, KvShape, KvStore, LoadedWeight, Result, WeightSource,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one line of the profile sums: the op, the weight type of a matmul with its inputs and
/// outputs per row (all its weights' outputs), and its row class.
type Key = (&'static str, Option<(GgmlType, usize, usize)>, &'static str);

pub struct Profiled {
    inner: Arc<dyn Backend>,
    ops: Mutex<HashMap<Key, (Duration, u64)>>,
}

fn rows_class(rows: usize) -> &'static str {
    match rows {
        1 => "1 row",
        2..=16 => "2-16 rows",
        _ => "17+ rows",
    }
}

impl Profiled {
    pub fn new(inner: Arc<dyn Backend>) -> Profiled {
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

impl Backend for Profiled {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn batch_invariant_rows(&self) -> usize {
        self.inner.batch_invariant_rows()
    }

    fn verify_rows(&self) -> usize {
        self.inner.verify_rows()
    }

    fn load_weight(
        &self,
        src: &WeightSource,
        consumed: &mut dyn FnMut(&[u8]),
    ) -> Result<LoadedWeight> {
        self.inner.load_weight(src, consumed)
    }

    fn load_vector(&self, data: &[f32]) -> Result<Buffer> {
        self.inner.load_vector(data)
    }

    fn alloc(&self, len: usize) -> Result<Buffer> {
        self.inner.alloc(len)
    }

    fn alloc_kv(&self, shape: KvShape) -> Result<KvStore> {
        self.inner.alloc_kv(shape)
    }

    fn prepare(&self, meta: &mut ForwardMeta) -> Result<()> {
        self.inner.prepare(meta)
    }

    fn matmul(&self, w: &LoadedWeight, x: &Buffer, rows: usize, out: &mut Buffer) -> Result<()> {
        let key = ("matmul", Some((w.ty, w.n_in, w.n_out)), rows_class(rows));
        self.time(key, || self.inner.matmul(w, x, rows, out))
    }

    fn matmul_multi(
        &self,
        ws: &[&LoadedWeight],
        x: &Buffer,
        rows: usize,
        outs: &mut [&mut Buffer],
    ) -> Result<()> {
        let n_out = ws.iter().map(|w| w.n_out).sum();
        let key = (
            "matmul_multi",
            ws.first().map(|w| (w.ty, w.n_in, n_out)),
            rows_class(rows),
        );
        self.time(key, || self.inner.matmul_multi(ws, x, rows, outs))
    }

    fn matmul_glu(
        &self,
        ws: [&LoadedWeight; 2],
        x: &Buffer,
        rows: usize,
        gate: &mut Buffer,
        up: &mut Buffer,
        act: Activation,
    ) -> Result<()> {
        let w = ws[0];
        let key = (
            "matmul_glu",
            Some((w.ty, w.n_in, w.n_out)),
            rows_class(rows),
        );
        self.time(key, || self.inner.matmul_glu(ws, x, rows, gate, up, act))
    }

    fn embed(&self, table: &LoadedWeight, meta: &ForwardMeta, out: &mut Buffer) -> Result<()> {
        self.time(("embed", None, ""), || self.inner.embed(table, meta, out))
    }

    fn rms_norm(
        &self,
        x: &mut Buffer,
        rows: usize,
        w: &Buffer,
        eps: f32,
        kind: NormKind,
    ) -> Result<()> {
        self.time(("rms_norm", None, ""), || {
            self.inner.rms_norm(x, rows, w, eps, kind)
        })
    }

    fn add_rms_norm(
        &self,
        x: &mut Buffer,
        delta: Option<&Buffer>,
        out: &mut Buffer,
        rows: usize,
        w: &Buffer,
        eps: f32,
        kind: NormKind,
    ) -> Result<()> {
        self.time(("add_rms_norm", None, ""), || {
            self.inner.add_rms_norm(x, delta, out, rows, w, eps, kind)
        })
    }

    fn add_bias(&self, x: &mut Buffer, rows: usize, b: &Buffer) -> Result<()> {
        self.time(("add_bias", None, ""), || self.inner.add_bias(x, rows, b))
    }

    fn add(&self, x: &mut Buffer, y: &Buffer, n: usize) -> Result<()> {
        self.time(("add", None, ""), || self.inner.add(x, y, n))
    }

    fn scale(&self, x: &mut Buffer, n: usize, s: f32) -> Result<()> {
        self.time(("scale", None, ""), || self.inner.scale(x, n, s))
    }

    fn softcap(&self, x: &mut Buffer, n: usize, cap: f32) -> Result<()> {
        self.time(("softcap", None, ""), || self.inner.softcap(x, n, cap))
    }

    fn rope_write_kv(
        &self,
        q: &mut Buffer,
        k: &mut Buffer,
        v: &Buffer,
        n_head: usize,
        kv: &mut KvStore,
        layer: usize,
        meta: &ForwardMeta,
        rope: RopeParams,
    ) -> Result<()> {
        self.time(("rope_write_kv", None, ""), || {
            self.inner
                .rope_write_kv(q, k, v, n_head, kv, layer, meta, rope)
        })
    }

    fn rope(
        &self,
        x: &mut Buffer,
        n_head: usize,
        head_dim: usize,
        meta: &ForwardMeta,
        theta: f32,
        freq_scale: f32,
        kind: RopeKind,
    ) -> Result<()> {
        self.time(("rope", None, ""), || {
            self.inner
                .rope(x, n_head, head_dim, meta, theta, freq_scale, kind)
        })
    }

    fn write_kv(
        &self,
        kv: &mut KvStore,
        layer: usize,
        k: &Buffer,
        v: &Buffer,
        meta: &ForwardMeta,
    ) -> Result<()> {
        self.time(("write_kv", None, ""), || {
            self.inner.write_kv(kv, layer, k, v, meta)
        })
    }

    fn attention(
        &self,
        q: &Buffer,
        kv: &KvStore,
        layer: usize,
        meta: &ForwardMeta,
        p: &AttnParams,
        out: &mut Buffer,
    ) -> Result<()> {
        let key = ("attention", None, rows_class(meta.rows()));
        self.time(key, || self.inner.attention(q, kv, layer, meta, p, out))
    }

    fn glu(&self, gate: &mut Buffer, up: &Buffer, n: usize, act: Activation) -> Result<()> {
        self.time(("glu", None, ""), || self.inner.glu(gate, up, n, act))
    }

    fn gather_rows(
        &self,
        src: &Buffer,
        width: usize,
        meta: &ForwardMeta,
        dst: &mut Buffer,
    ) -> Result<()> {
        self.time(("gather_rows", None, ""), || {
            self.inner.gather_rows(src, width, meta, dst)
        })
    }

    fn read(&self, x: &Buffer, out: &mut [f32]) -> Result<()> {
        self.time(("read", None, ""), || self.inner.read(x, out))
    }

    fn argmax(&self, x: &Buffer, rows: usize, width: usize) -> Result<Vec<u32>> {
        self.time(("argmax", None, ""), || self.inner.argmax(x, rows, width))
    }

    fn top_k(
        &self,
        x: &Buffer,
        rows: usize,
        width: usize,
        k: usize,
    ) -> Result<Vec<Vec<Candidate>>> {
        self.time(("top_k", None, ""), || self.inner.top_k(x, rows, width, k))
    }
}
