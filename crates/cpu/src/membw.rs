//! Memory read bandwidth, measured the way a decode step reads weights: every thread streams
//! one contiguous share of a huge-page buffer, asking for its lines `PREFETCH_BYTES` ahead as
//! the matmul kernels do (plain loads alone measure the prefetchers' latency, not the memory).
use crate::matmul::{prefetch_lines, PREFETCH_BYTES};
use crate::pool::ThreadPool;
use ishizuki_core::huge::HugeBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Best-of-`reps` read bandwidth in GB/s over a buffer of `bytes` (0 when it cannot be mapped).
pub fn read_bandwidth(pool: &ThreadPool, bytes: usize, reps: usize) -> f64 {
    let len = bytes.max(1 << 20).next_multiple_of(64);
    let Some(mut buf) = HugeBuf::zeroed(len) else {
        return 0.0;
    };
    // written, so every page is resident (an untouched page reads as the shared zero page)
    buf.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let n_tasks = pool.n_threads();
    let per = (len / n_tasks).next_multiple_of(64);
    let sink = AtomicU64::new(0);
    let mut best = 0f64;
    for _ in 0..reps.max(1) + 1 {
        let t0 = Instant::now();
        pool.run(n_tasks, &|t| {
            let part = &buf[(t * per).min(len)..((t + 1) * per).min(len)];
            let end = part.as_ptr_range().end;
            let s = part.chunks_exact(64).fold([0u64; 8], |mut acc, line| {
                prefetch_lines(line.as_ptr().wrapping_add(PREFETCH_BYTES), 64, end);
                for (a, w) in acc.iter_mut().zip(line.chunks_exact(8)) {
                    *a = a.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
                }
                acc
            });
            sink.fetch_add(s.iter().fold(0, |a, b| a ^ b), Ordering::Relaxed);
        });
        best = best.max(len as f64 / t0.elapsed().as_secs_f64() / 1e9);
    }
    std::hint::black_box(sink.load(Ordering::Relaxed));
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any size and thread count gives a figure: sizes below the floor, not whole lines, and
    /// not a multiple of the threads.
    #[test]
    fn any_size_and_thread_count_gives_a_figure() {
        for threads in [1, 3] {
            let pool = ThreadPool::new(threads);
            for bytes in [0, 1000, (3 << 20) + 17] {
                let gbs = read_bandwidth(&pool, bytes, 1);
                assert!(
                    gbs.is_finite() && gbs > 0.0,
                    "{bytes} bytes, {threads} threads: {gbs}"
                );
            }
        }
    }
}
