//! Persistent worker pool entered once per parallel op: workers spin briefly, then park.
//! A job is published through one atomic word (its address and a generation), so an op costs
//! a few cache-line transfers and no lock unless a worker had parked. Thread `i` (the caller
//! is 0) takes task `i` first, so a job of one task per thread puts the same share on the same
//! thread every time (a thread can go on streaming where its last task ended); tasks past
//! those, and any a thread has not claimed when another runs out of work, go to whoever asks.
//! A task that panics, on any thread, makes `run` panic on its caller once the job is over;
//! the workers live on.
use crate::matmul::prefetch_lines_l2;
use crate::trace;
use std::any::Any;
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One parallel op, on the stack of the thread in `run`, which returns only after every worker
/// that saw it published has let go of it.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n_tasks: usize,
    /// Tasks `0..own` belong to threads `0..own` first.
    own: usize,
    /// Bit `i`: own task `i` has been claimed (by thread `i`, or stolen).
    own_claimed: AtomicU64,
    /// The next task past the threads' own ones.
    next_task: AtomicUsize,
    done_tasks: AtomicUsize,
    /// The first panic of a task, resumed on the caller after the job.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// Tasks that belong to a thread first: one per thread, as many as `own_claimed` has bits.
const OWN_TASKS: usize = 64;

/// Bits of the published word that hold the job's address (x86-64 and AArch64 user space).
const ADDR_BITS: u32 = 48;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;

struct Shared {
    /// `generation << ADDR_BITS | address of the Job`, 0 as the address when none is published.
    published: AtomicU64,
    /// Workers between seeing a published job and letting go of it.
    active: AtomicUsize,
    /// Workers parked on `wake` (or about to), so `run` knows to notify.
    parked: AtomicUsize,
    shutdown: Mutex<bool>,
    wake: Condvar,
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<u64>,
}

const SPIN: Duration = Duration::from_micros(200);

/// Most bytes a thread fetches into its L2 while it waits (`prefetch_while_idle`).
pub const IDLE_PREFETCH_BYTES: usize = 256 << 10;
/// Lines asked for per spin while a worker waits: few, so a published job is seen at once.
const IDLE_LINES_PER_SPIN: usize = 4;

thread_local! {
    /// The lines this thread asks for while it waits: `(next, end)` addresses.
    static IDLE_PREFETCH: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Asks this thread to fetch the lines of `len` bytes at `at` (none at or past `end`) into its
/// L2 while it waits, a few per spin: a worker while it waits for the next job (a job of other
/// work leaves the rest for after it), the caller while it waits for the other threads' tasks.
/// A task that knows where its thread's next one reads (decode makes the same calls each
/// token) turns the wait for the caller's serial work into streaming.
pub fn prefetch_while_idle(at: *const u8, len: usize, end: *const u8) {
    let at = at as usize;
    let stop = (end as usize).min(at.saturating_add(len.min(IDLE_PREFETCH_BYTES)));
    IDLE_PREFETCH.set((at, stop));
}

impl ThreadPool {
    /// A pool of `n_threads` including the calling thread.
    pub fn new(n_threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            published: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            shutdown: Mutex::new(false),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("ishizuki-cpu-{i}"))
                    .spawn(move || worker_loop(&s, i))
                    .expect("spawning a worker thread")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            run_lock: Mutex::new(0),
        }
    }

    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(i)` for every `i in 0..n_tasks` across the pool; returns when all are done.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        if self.workers.is_empty() || n_tasks == 1 {
            (0..n_tasks).for_each(f);
            return;
        }
        let mut generation = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let _job = trace::span("run");
        let s = &*self.shared;
        let own = n_tasks.min(self.n_threads()).min(OWN_TASKS);
        let job = Job {
            f,
            n_tasks,
            own,
            own_claimed: AtomicU64::new(0),
            next_task: AtomicUsize::new(own),
            done_tasks: AtomicUsize::new(0),
            panic: Mutex::new(None),
        };
        let addr = &job as *const Job as u64;
        assert!(addr & !ADDR_MASK == 0, "a stack address above 2^48");
        *generation += 1;
        s.published
            .store(*generation << ADDR_BITS | addr, Ordering::SeqCst);
        if s.parked.load(Ordering::SeqCst) > 0 {
            let _guard = s.shutdown.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        run_tasks(&job, 0);
        trace::event("own_done");
        let (mut next, stop) = IDLE_PREFETCH.get();
        while job.done_tasks.load(Ordering::Acquire) < n_tasks {
            if next < stop {
                next = prefetch_step(next, stop);
            } else {
                std::hint::spin_loop();
            }
        }
        IDLE_PREFETCH.set((next, stop));
        trace::event("all_done");
        *generation += 1;
        s.published
            .store(*generation << ADDR_BITS, Ordering::SeqCst);
        // a worker that saw the job published before the store above holds `active`
        while s.active.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
        drop(generation);
        let panic = job.panic.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }
}

/// Thread `me`'s own task, then shared ones, then own tasks nobody has claimed yet.
fn run_tasks(job: &Job, me: usize) {
    let own = job.own;
    let run = |i: usize| {
        // a task that unwound still counts as done, or the caller would wait forever
        let task = trace::span("task");
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| (job.f)(i)));
        drop(task);
        if let Err(payload) = ran {
            let mut first = job.panic.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert(payload);
        }
        job.done_tasks.fetch_add(1, Ordering::Release);
    };
    let claim_own = |i: usize| job.own_claimed.fetch_or(1 << i, Ordering::Relaxed) & 1 << i == 0;
    if me < own && claim_own(me) {
        run(me);
    }
    loop {
        let i = job.next_task.fetch_add(1, Ordering::Relaxed);
        if i >= job.n_tasks {
            break;
        }
        run(i);
    }
    for i in (0..own).filter(|&i| i != me) {
        if job.own_claimed.load(Ordering::Relaxed) & 1 << i == 0 && claim_own(i) {
            run(i);
        }
    }
}

fn worker_loop(s: &Shared, me: usize) {
    let mut seen = 0u64;
    loop {
        let word = match wait_for_change(s, seen) {
            Some(word) => word,
            None => return,
        };
        seen = word;
        if word & ADDR_MASK == 0 {
            continue;
        }
        trace::event("seen");
        s.active.fetch_add(1, Ordering::SeqCst);
        // Still published after `active` went up: `run` has not unpublished it, so it waits
        // for this worker before its job leaves the stack.
        if s.published.load(Ordering::SeqCst) == word {
            // SAFETY: see above; the address came from `run`'s `&job`.
            run_tasks(unsafe { &*((word & ADDR_MASK) as *const Job) }, me);
        }
        s.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Asks for the next few idle lines at `next` (none at or past `stop`); returns where the
/// next step starts.
#[inline(always)]
fn prefetch_step(next: usize, stop: usize) -> usize {
    let lines = IDLE_LINES_PER_SPIN * 64;
    prefetch_lines_l2(next as *const u8, lines, stop as *const u8);
    next + lines
}

/// Spins, then parks, until the published word differs from `seen`; None on shutdown.
fn wait_for_change(s: &Shared, seen: u64) -> Option<u64> {
    let spin_start = Instant::now();
    let mut spins = 0u32;
    let (mut next, stop) = IDLE_PREFETCH.take();
    loop {
        let word = s.published.load(Ordering::Acquire);
        if word != seen {
            // a job that is not the one prefetched for (attention, a norm) leaves the rest
            // for after it; the task that is sets its next span anew
            IDLE_PREFETCH.set((next, stop));
            return Some(word);
        }
        if next < stop {
            next = prefetch_step(next, stop);
        } else {
            std::hint::spin_loop();
        }
        spins = spins.wrapping_add(1);
        // Reading the clock costs more than a spin: look at it every 256 spins.
        if spins.is_multiple_of(256) && spin_start.elapsed() >= SPIN {
            break;
        }
    }
    let mut shutdown = s.shutdown.lock().unwrap_or_else(|e| e.into_inner());
    s.parked.fetch_add(1, Ordering::SeqCst);
    let word = loop {
        let word = s.published.load(Ordering::SeqCst);
        if *shutdown || word != seen {
            break word;
        }
        shutdown = s.wake.wait(shutdown).unwrap_or_else(|e| e.into_inner());
    };
    s.parked.fetch_sub(1, Ordering::SeqCst);
    (!*shutdown).then_some(word)
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        *self
            .shared
            .shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub struct SharedMut<T>(pub *mut T);
// SAFETY: users guarantee disjoint writes per task.
unsafe impl<T> Send for SharedMut<T> {}
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// Going through a method makes closures capture the Sync wrapper, not the raw field.
    pub fn ptr(&self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once() {
        let pool = ThreadPool::new(3);
        for n in [0usize, 1, 2, 7, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    /// With a task per thread, the caller runs task 0 and the worker task 1. Each task waits
    /// until the other has started, so neither thread can finish its own and then take the
    /// other's while that one is still unclaimed (a slow caller would otherwise lose task 0).
    #[test]
    fn each_thread_takes_its_own_task_first() {
        let pool = ThreadPool::new(2);
        let ran_on: Vec<Mutex<String>> = (0..2).map(|_| Mutex::new(String::new())).collect();
        for _ in 0..3 {
            let started = [(); 2].map(|_| std::sync::atomic::AtomicBool::new(false));
            pool.run(2, &|i| {
                started[i].store(true, Ordering::Release);
                let start = Instant::now();
                while !started[1 - i].load(Ordering::Acquire)
                    && start.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                *ran_on[i].lock().unwrap() = std::thread::current().name().unwrap_or("").into();
            });
            let names: Vec<String> = ran_on.iter().map(|m| m.lock().unwrap().clone()).collect();
            let caller = std::thread::current().name().unwrap_or("").to_string();
            assert_eq!(names, [caller, "ishizuki-cpu-1".into()]);
        }
    }

    /// Jobs from two threads at once are serialized, and every worker lets go of each.
    #[test]
    fn concurrent_callers_and_many_tiny_jobs() {
        let pool = Arc::new(ThreadPool::new(4));
        let total = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let (pool, total) = (pool.clone(), total.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        pool.run(3, &|i| {
                            total.fetch_add(i + 1, Ordering::Relaxed);
                        });
                    }
                })
            })
            .collect();
        callers.into_iter().for_each(|c| c.join().unwrap());
        assert_eq!(total.load(Ordering::Relaxed), 2 * 20_000 * 6);
    }

    /// Nanoseconds per op of two trivial tasks (the pool's own cost per parallel op):
    /// `cargo test --release -p ishizuki-cpu pool_overhead -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn pool_overhead() {
        let pool = ThreadPool::new(2);
        let sink = AtomicUsize::new(0);
        let ops = 200_000;
        let start = Instant::now();
        for _ in 0..ops {
            pool.run(2, &|i| {
                sink.fetch_add(i, Ordering::Relaxed);
            });
        }
        let ns = start.elapsed().as_nanos() as f64 / ops as f64;
        println!("pool: {ns:.0} ns per op of 2 tasks");
    }

    /// A task that panics on a worker makes `run` panic on the caller after every other task
    /// has run, and the pool takes the next job as before.
    #[test]
    fn a_panicking_task_panics_the_caller_and_the_pool_lives_on() {
        let pool = ThreadPool::new(2);
        for round in 0..50 {
            let ran = AtomicUsize::new(0);
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                pool.run(8, &|i| {
                    ran.fetch_add(1, Ordering::Relaxed);
                    if i == round % 8 {
                        panic!("task {i} fails");
                    }
                })
            }));
            let payload = result.expect_err("the task's panic reaches the caller");
            assert_eq!(
                payload.downcast_ref::<String>().map(String::as_str),
                Some(&*format!("task {} fails", round % 8))
            );
            assert_eq!(ran.load(Ordering::Relaxed), 8, "every task ran");
            let total = AtomicUsize::new(0);
            pool.run(4, &|i| {
                total.fetch_add(i, Ordering::Relaxed);
            });
            assert_eq!(total.load(Ordering::Relaxed), 6);
        }
    }

    /// A worker left with lines to fetch while it waits still takes every job, at once: the
    /// caller's task waits for the worker's, so a worker stuck in its prefetching would hang
    /// the job until the timeout fails it. A caller left with lines returns as its job ends.
    #[test]
    fn workers_fetching_while_idle_take_every_job() {
        let pool = ThreadPool::new(2);
        let data = vec![1u8; 4 * IDLE_PREFETCH_BYTES];
        let (start, end) = (data.as_ptr() as usize, data.as_ptr() as usize + data.len());
        for round in 0..2000 {
            let worker_ran = std::sync::atomic::AtomicBool::new(false);
            let began = Instant::now();
            pool.run(2, &|i| {
                let at = start + round % 64 * 4096;
                prefetch_while_idle(at as *const u8, usize::MAX, end as *const u8);
                if i == 1 {
                    worker_ran.store(true, Ordering::Release);
                }
                while i == 0
                    && !worker_ran.load(Ordering::Acquire)
                    && began.elapsed() < Duration::from_secs(5)
                {
                    std::hint::spin_loop();
                }
            });
            assert!(
                worker_ran.into_inner(),
                "round {round}: the worker never ran its task"
            );
        }
    }

    #[test]
    fn many_rounds_after_parking() {
        let pool = ThreadPool::new(2);
        let total = AtomicUsize::new(0);
        for round in 0..200 {
            if round % 50 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            pool.run(4, &|i| {
                total.fetch_add(i, Ordering::Relaxed);
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 200 * 6);
    }
}
