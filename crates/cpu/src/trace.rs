//! A per-thread timeline of the backend's ops and the pool's jobs, for finding where a decode
//! step's time goes between the matmuls (`bench/decode_timeline.py` reads it). Built only with
//! the `trace` feature; without it every call here is empty and inlines away.
//!
//! `cargo build --release --features trace` (the `ishizuki` crate forwards the feature), then
//! `ISHIZUKI_TRACE=FILE ishizuki bench ...` writes the events of the last test's timed runs to
//! FILE, one `thread nanoseconds event` line each.

/// Whether this build records a timeline.
pub const ENABLED: bool = cfg!(feature = "trace");

/// Records the point `event` on this thread's timeline.
#[inline(always)]
pub fn event(event: &'static str) {
    #[cfg(feature = "trace")]
    timeline::record(event, "");
    #[cfg(not(feature = "trace"))]
    let _ = event;
}

/// Records `name+` now and `name-` when the guard is dropped (an op's or a task's extent).
#[inline(always)]
#[must_use]
pub fn span(name: &'static str) -> Span {
    #[cfg(feature = "trace")]
    timeline::record(name, "+");
    Span { name }
}

pub struct Span {
    #[cfg_attr(not(feature = "trace"), allow(dead_code))]
    name: &'static str,
}

impl Drop for Span {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(feature = "trace")]
        timeline::record(self.name, "-");
    }
}

/// Forgets every thread's events so far.
pub fn clear() {
    #[cfg(feature = "trace")]
    timeline::clear();
}

/// Writes every thread's events to `path`; does nothing without the feature.
pub fn write(path: &std::path::Path) -> std::io::Result<()> {
    #[cfg(feature = "trace")]
    return timeline::write(path);
    #[cfg(not(feature = "trace"))]
    {
        let _ = path;
        Ok(())
    }
}

#[cfg(feature = "trace")]
mod timeline {
    use std::io::Write;
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::Instant;

    /// One thread's events: nanoseconds since the first event of the process, the name, and
    /// its mark (`+` a span's start, `-` its end, empty for a point).
    type Events = Arc<Mutex<Vec<(u64, &'static str, &'static str)>>>;

    fn epoch() -> Instant {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    /// Every thread's events, by thread name.
    fn threads() -> &'static Mutex<Vec<(String, Events)>> {
        static THREADS: OnceLock<Mutex<Vec<(String, Events)>>> = OnceLock::new();
        THREADS.get_or_init(Default::default)
    }

    thread_local! {
        static MINE: Events = {
            let events = Events::default();
            let name = std::thread::current().name().unwrap_or("caller").to_string();
            threads().lock().unwrap().push((name, events.clone()));
            events
        };
    }

    pub fn record(name: &'static str, mark: &'static str) {
        let ns = epoch().elapsed().as_nanos() as u64;
        // only the recording thread locks its own list, until `write`
        MINE.with(|m| m.lock().unwrap().push((ns, name, mark)));
    }

    pub fn clear() {
        for (_, events) in threads().lock().unwrap().iter() {
            events.lock().unwrap().clear();
        }
    }

    pub fn write(path: &std::path::Path) -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for (name, events) in threads().lock().unwrap().iter() {
            for (ns, event, mark) in events.lock().unwrap().iter() {
                writeln!(f, "{} {ns} {event}{mark}", name.replace(' ', "_"))?;
            }
        }
        f.flush()
    }
}

#[cfg(all(test, feature = "trace"))]
mod tests {
    use super::*;
    use crate::pool::ThreadPool;

    /// Spans and points come out in order per thread, workers' tasks under their own names,
    /// and `clear` forgets what came before.
    #[test]
    fn the_timeline_holds_each_threads_events_in_order() {
        event("before_clear");
        clear();
        {
            let _op = span("op");
            event("point");
            // both tasks wait for each other, so the worker runs one
            let started = std::sync::atomic::AtomicUsize::new(0);
            ThreadPool::new(2).run(2, &|_| {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let t0 = std::time::Instant::now();
                while started.load(std::sync::atomic::Ordering::SeqCst) < 2
                    && t0.elapsed() < std::time::Duration::from_secs(5)
                {
                    std::hint::spin_loop();
                }
            });
        }
        let path = std::env::temp_dir().join(format!("ishizuki-trace-{}", std::process::id()));
        write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let me = std::thread::current().name().unwrap().replace(' ', "_");
        let mine: Vec<(u64, &str)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split(' ');
                let (thread, ns, event) = (f.next()?, f.next()?, f.next()?);
                (thread == me).then(|| (ns.parse().unwrap(), event))
            })
            .collect();
        let events: Vec<&str> = mine.iter().map(|e| e.1).collect();
        assert_eq!(events.first(), Some(&"op+"), "{text}");
        assert_eq!(events.last(), Some(&"op-"));
        assert!(events.contains(&"point") && events.contains(&"task+"));
        assert!(!text.contains("before_clear"));
        assert!(mine.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(text
            .lines()
            .any(|l| l.starts_with("ishizuki-cpu-1 ") && l.ends_with(" task-")));
    }
}
