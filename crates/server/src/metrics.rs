//! `GET /metrics`: Prometheus text with vLLM's metric names under an `ishizuki:` prefix.
use ishizuki_engine::stats::EngineStats;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Clone, Debug, Default)]
pub struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, secs: f64) {
        if let Some(i) = BUCKETS.iter().position(|&b| secs <= b) {
            self.counts[i] += 1;
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, c) in BUCKETS.iter().zip(self.counts) {
            cumulative += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// (endpoint, status) -> count
    requests: BTreeMap<(String, u16), u64>,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    /// Requests whose client went away before the end.
    cancelled: u64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn request(&self, endpoint: &str, status: u16) {
        self.with(|m| {
            *m.requests
                .entry((endpoint.to_string(), status))
                .or_default() += 1
        });
    }

    pub fn time_to_first_token(&self, secs: f64) {
        self.with(|m| m.ttft.observe(secs));
    }

    pub fn inter_token(&self, secs: f64) {
        self.with(|m| m.itl.observe(secs));
    }

    pub fn e2e(&self, secs: f64) {
        self.with(|m| m.e2e.observe(secs));
    }

    pub fn cancelled(&self) {
        self.with(|m| m.cancelled += 1);
    }

    pub fn render(&self, engine: Option<&EngineStats>) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP ishizuki:{name} {help}\n# TYPE ishizuki:{name} counter\nishizuki:{name} {v}");
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP ishizuki:{name} {help}\n# TYPE ishizuki:{name} gauge\nishizuki:{name} {v}"
            );
        };
        self.with(|m| {
            let _ = writeln!(out, "# HELP ishizuki:requests_total HTTP requests by endpoint and status.\n# TYPE ishizuki:requests_total counter");
            for ((endpoint, status), n) in &m.requests {
                let _ = writeln!(out, "ishizuki:requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}");
            }
            counter(&mut out, "request_cancelled_total", "Requests whose client disconnected before they finished.", m.cancelled);
            m.ttft.render("ishizuki:time_to_first_token_seconds", "Time to the first generated token.", &mut out);
            m.itl.render("ishizuki:inter_token_latency_seconds", "Time between generated tokens.", &mut out);
            m.e2e.render("ishizuki:e2e_request_latency_seconds", "Request latency from arrival to the last byte.", &mut out);
        });
        if let Some(s) = engine {
            let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            counter(
                &mut out,
                "prompt_tokens_total",
                "Prompt tokens processed.",
                get(&s.prompt_tokens),
            );
            counter(
                &mut out,
                "generation_tokens_total",
                "Tokens generated.",
                get(&s.generation_tokens),
            );
            counter(
                &mut out,
                "prefix_cache_queries_total",
                "Prompt tokens looked up in the prefix cache.",
                get(&s.prefix_queries),
            );
            counter(
                &mut out,
                "prefix_cache_hits_total",
                "Prompt tokens found in the prefix cache.",
                get(&s.prefix_hits),
            );
            counter(
                &mut out,
                "engine_cancelled_total",
                "Requests the engine stopped or skipped because they were cancelled.",
                get(&s.cancelled),
            );
            counter(
                &mut out,
                "request_errors_total",
                "Requests that failed inside the engine.",
                get(&s.errors),
            );
            counter(
                &mut out,
                "spec_decode_num_draft_tokens_total",
                "Tokens drafted for verification.",
                get(&s.draft_tokens),
            );
            counter(
                &mut out,
                "spec_decode_num_accepted_tokens_total",
                "Drafted tokens the model kept.",
                get(&s.draft_accepted),
            );
            counter(
                &mut out,
                "decode_steps_total",
                "Decode forwards, plain or verifying drafts (tokens per step = generation tokens over these).",
                get(&s.decode_steps),
            );
            gauge(
                &mut out,
                "draft_model_active",
                "1 while a draft model drafts; 0 without one or once it turned itself off.",
                get(&s.draft_model_active),
            );
            gauge(
                &mut out,
                "num_requests_running",
                "Requests running in the engine.",
                get(&s.running),
            );
            gauge(
                &mut out,
                "num_requests_waiting",
                "Requests queued for the engine.",
                get(&s.waiting),
            );
        }
        out
    }
}
