//! The engine thread: it owns the model and its caches and runs queued requests one at a time,
//! first come first served. Handlers submit from any thread and hold the cancellation flag.
use crate::engine::Engine;
use crate::events::Event;
use crate::prompt::{Prepared, TextModel};
use crate::stats::EngineStats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

pub type Sink = Box<dyn FnMut(Event) -> bool + Send>;

struct Job {
    prepared: Prepared,
    cancel: Arc<AtomicBool>,
    sink: Sink,
    queued_at: Instant,
}

#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Job>,
    pub text: Arc<TextModel>,
    pub stats: Arc<EngineStats>,
}

/// Cancels its request when dropped (a handler whose client went away is dropped).
pub struct CancelOnDrop(pub Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl EngineHandle {
    /// Starts the engine thread.
    pub fn spawn(mut engine: Engine) -> EngineHandle {
        let (tx, rx) = mpsc::channel::<Job>();
        let text = engine.text.clone();
        let stats = engine.stats.clone();
        let thread_stats = stats.clone();
        std::thread::Builder::new()
            .name("ishizuki-engine".into())
            .spawn(move || {
                for mut job in rx {
                    thread_stats.waiting.fetch_sub(1, Ordering::Relaxed);
                    if job.cancel.load(Ordering::Relaxed) {
                        thread_stats.cancelled.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    thread_stats.running.fetch_add(1, Ordering::Relaxed);
                    let queued = job.queued_at.elapsed().as_secs_f64();
                    engine.run(&job.prepared, &job.cancel, queued, &mut job.sink);
                    thread_stats.running.fetch_sub(1, Ordering::Relaxed);
                }
            })
            .expect("spawn the engine thread");
        EngineHandle { tx, text, stats }
    }

    /// Queues `prepared`; events go to `sink`. Setting the returned flag cancels it.
    pub fn submit(&self, prepared: Prepared, sink: Sink) -> Result<Arc<AtomicBool>, EngineGone> {
        let cancel = Arc::new(AtomicBool::new(false));
        self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            prepared,
            cancel: cancel.clone(),
            sink,
            queued_at: Instant::now(),
        };
        self.tx.send(job).map_err(|_| {
            self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
            EngineGone
        })?;
        Ok(cancel)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the engine thread has stopped")]
pub struct EngineGone;
