//! Memory read bandwidth, measured the way a decode step reads weights: every thread streams
//! its share of one large buffer.
use crate::pool::ThreadPool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Best-of-`reps` read bandwidth in GB/s over a buffer of `bytes`.
pub fn read_bandwidth(pool: &ThreadPool, bytes: usize, reps: usize) -> f64 {
    let words = (bytes / 8).max(1 << 16);
    let buf: Vec<u64> = (0..words as u64).collect();
    let n_tasks = pool.n_threads() * 4;
    let per = words.div_ceil(n_tasks);
    let sink = AtomicU64::new(0);
    let mut best = 0f64;
    for _ in 0..reps.max(1) + 1 {
        let t0 = Instant::now();
        pool.run(n_tasks, &|t| {
            let part = &buf[(t * per).min(words)..((t + 1) * per).min(words)];
            let s = part.chunks_exact(8).fold([0u64; 8], |mut acc, c| {
                for i in 0..8 {
                    acc[i] = acc[i].wrapping_add(c[i]);
                }
                acc
            });
            sink.fetch_add(s.iter().fold(0, |a, b| a ^ b), Ordering::Relaxed);
        });
        best = best.max((words * 8) as f64 / t0.elapsed().as_secs_f64() / 1e9);
    }
    std::hint::black_box(sink.load(Ordering::Relaxed));
    best
}
