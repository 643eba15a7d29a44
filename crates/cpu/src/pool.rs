//! Persistent worker pool entered once per parallel op: workers spin briefly, then park.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A lifetime-erased pointer to the caller's task closure; valid while `Shared::active` > 0
/// or the job is installed (the caller waits for both before returning).
#[derive(Clone, Copy)]
struct JobRef {
    f: *const (dyn Fn(usize) + Sync),
    n_tasks: usize,
}
// SAFETY: the closure is Sync and outlives every use (see `ThreadPool::run`).
unsafe impl Send for JobRef {}

struct State {
    job: Option<JobRef>,
    generation: u64,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    generation: AtomicUsize,
    next_task: AtomicUsize,
    done_tasks: AtomicUsize,
    active: AtomicUsize,
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

const SPIN: Duration = Duration::from_micros(200);

impl ThreadPool {
    /// A pool of `n_threads` including the calling thread.
    pub fn new(n_threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                job: None,
                generation: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            generation: AtomicUsize::new(0),
            next_task: AtomicUsize::new(0),
            done_tasks: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
        });
        let workers = (1..n_threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("ishizuki-cpu-{i}"))
                    .spawn(move || worker_loop(&s))
                    .expect("spawning a worker thread")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            run_lock: Mutex::new(()),
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
        let _serial = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        s.next_task.store(0, Ordering::Relaxed);
        s.done_tasks.store(0, Ordering::Relaxed);
        // SAFETY: erase the borrow's lifetime; we do not return before every worker lets go.
        let f_static: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
        {
            let mut st = s.state.lock().unwrap_or_else(|e| e.into_inner());
            st.job = Some(JobRef {
                f: f_static,
                n_tasks,
            });
            st.generation += 1;
            s.generation
                .store(st.generation as usize, Ordering::Release);
        }
        s.wake.notify_all();
        run_tasks(s, f, n_tasks);
        while s.done_tasks.load(Ordering::Acquire) < n_tasks {
            std::hint::spin_loop();
        }
        s.state.lock().unwrap_or_else(|e| e.into_inner()).job = None;
        while s.active.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
    }
}

fn run_tasks(s: &Shared, f: &(dyn Fn(usize) + Sync), n_tasks: usize) {
    loop {
        let i = s.next_task.fetch_add(1, Ordering::Relaxed);
        if i >= n_tasks {
            break;
        }
        f(i);
        s.done_tasks.fetch_add(1, Ordering::Release);
    }
}

fn worker_loop(s: &Shared) {
    let mut seen = 0u64;
    loop {
        let spin_start = Instant::now();
        let mut spins = 0u32;
        while s.generation.load(Ordering::Acquire) as u64 == seen {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            // Reading the clock costs more than a spin: look at it every 256 spins.
            if spins.is_multiple_of(256) && spin_start.elapsed() >= SPIN {
                break;
            }
        }
        let job = {
            let mut st = s.state.lock().unwrap_or_else(|e| e.into_inner());
            while st.generation == seen && !st.shutdown {
                st = s.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.shutdown {
                return;
            }
            seen = st.generation;
            if st.job.is_some() {
                s.active.fetch_add(1, Ordering::AcqRel);
            }
            st.job
        };
        if let Some(job) = job {
            // SAFETY: `run` keeps the closure alive until `active` drops back to 0.
            let f = unsafe { &*job.f };
            run_tasks(s, f, job.n_tasks);
            s.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown = true;
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
