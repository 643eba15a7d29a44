//! `ishizuki bench`: llama-bench's pp/tg tests on our engine, with weight bandwidth per
//! decoded token against measured read bandwidth, and peak memory.
use super::device::{self, Chosen, Device};
use super::profile::Profiled;
use super::CliResult;
use ishizuki::fetch::resolve_model;
use ishizuki_core::backend::TOP_K_MAX;
use ishizuki_core::Backend;
use ishizuki_models::{KvCache, Logits, Model};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Model path or curated name.
    #[arg(short = 'm', long)]
    model: String,
    /// Prompt lengths to prefill (pp tests), comma separated; 0 skips.
    #[arg(short = 'p', long, value_delimiter = ',', default_value = "512")]
    n_prompt: Vec<usize>,
    /// Tokens to decode (tg tests), comma separated; 0 skips.
    #[arg(short = 'n', long, value_delimiter = ',', default_value = "128")]
    n_gen: Vec<usize>,
    /// Rows of one forward to time (the cost of verifying drafts), comma separated, e.g.
    /// 1,2,4,8,16; each forward starts at the test's depth and returns every row's logits.
    #[arg(long, value_delimiter = ',')]
    rows: Vec<usize>,
    /// Context depths the tests start at, comma separated.
    #[arg(short = 'd', long, value_delimiter = ',', default_value = "0")]
    depth: Vec<usize>,
    /// Timed repetitions after one warm-up run.
    #[arg(short = 'r', long, default_value_t = 5)]
    reps: usize,
    /// Threads (default: all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Where the model runs: auto (the GPU when this build has CUDA and one is there), cpu, cuda.
    #[arg(long, value_enum, default_value_t = Device::Auto, env = "ISHIZUKI_DEVICE")]
    device: Device,
    /// Print a JSON array like llama-bench's `-o json`.
    #[arg(long)]
    json: bool,
    /// Time every backend op and print where the runs spent their time (stderr).
    #[arg(long)]
    profile: bool,
    /// What each decode step (tg) reads back: `logits` (the row, as llama-bench's decode copies
    /// it), `argmax` (the id greedy decoding reads) or `top-k:K` (what a top-k sampler reads).
    #[arg(long, default_value = "logits", value_parser = parse_read)]
    read: Read,
}

/// What a decode step reads back of its logits.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Read {
    Logits,
    Argmax,
    TopK(usize),
}

fn parse_read(s: &str) -> Result<Read, String> {
    match s {
        "logits" => return Ok(Read::Logits),
        "argmax" => return Ok(Read::Argmax),
        _ => {}
    }
    let k = s
        .strip_prefix("top-k:")
        .ok_or_else(|| format!("expected logits, argmax or top-k:K, got {s:?}"))?;
    match k.parse::<usize>() {
        Ok(k) if (1..=TOP_K_MAX).contains(&k) => Ok(Read::TopK(k)),
        _ => Err(format!("top-k:K needs K in 1..={TOP_K_MAX}, got {k:?}")),
    }
}

impl std::fmt::Display for Read {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Read::Logits => write!(f, "logits"),
            Read::Argmax => write!(f, "argmax"),
            Read::TopK(k) => write!(f, "top-k:{k}"),
        }
    }
}

struct Test {
    n_prompt: usize,
    n_gen: usize,
    /// Rows of one verification-shaped forward (a rows test when > 0).
    n_rows: usize,
    n_depth: usize,
    /// What a decode step reads back (tg tests).
    read: Read,
    samples_ts: Vec<f64>,
}

/// Forwards per timed repetition of a rows test.
const ROW_FORWARDS: usize = 8;

impl Test {
    fn avg(&self) -> f64 {
        self.samples_ts.iter().sum::<f64>() / self.samples_ts.len().max(1) as f64
    }

    fn stddev(&self) -> f64 {
        let n = self.samples_ts.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.avg();
        (self.samples_ts.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }

    fn name(&self) -> String {
        let base = if self.n_rows > 0 {
            format!("rows{}", self.n_rows)
        } else if self.n_prompt > 0 {
            format!("pp{}", self.n_prompt)
        } else if self.read != Read::Logits {
            format!("tg{} {}", self.n_gen, self.read)
        } else {
            format!("tg{}", self.n_gen)
        };
        if self.n_depth > 0 {
            format!("{base} @ d{}", self.n_depth)
        } else {
            base
        }
    }
}

/// Deterministic pseudo-random token ids (llama-bench feeds random tokens too).
fn tokens(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n_vocab as u64) as u32
        })
        .collect()
}

/// One timed run of a test from `depth`; returns tokens per second.
fn run_once(model: &Model, cache: &mut KvCache, t: &Test, rep: u64) -> CliResult<f64> {
    cache.truncate(t.n_depth);
    let n_vocab = model.config.n_vocab;
    let t0 = Instant::now();
    if t.n_rows > 0 {
        let ids = tokens(t.n_rows, n_vocab, rep + 1);
        for _ in 0..ROW_FORWARDS {
            cache.truncate(t.n_depth);
            model.forward(&ids, cache, Logits::All)?;
        }
        return Ok((ROW_FORWARDS * t.n_rows) as f64 / t0.elapsed().as_secs_f64());
    }
    if t.n_prompt > 0 {
        let ids = tokens(t.n_prompt, n_vocab, rep + 1);
        for chunk in ids.chunks(2048) {
            model.forward(chunk, cache, Logits::Last)?;
        }
        return Ok(t.n_prompt as f64 / t0.elapsed().as_secs_f64());
    }
    for id in tokens(t.n_gen, n_vocab, rep + 1) {
        decode_step(model, cache, id, t.read)?;
    }
    Ok(t.n_gen as f64 / t0.elapsed().as_secs_f64())
}

/// One decoded token, reading back what `read` names.
fn decode_step(model: &Model, cache: &mut KvCache, id: u32, read: Read) -> CliResult {
    match read {
        Read::Logits => drop(model.forward(&[id], cache, Logits::Last)?),
        Read::Argmax => drop(model.forward_argmax(&[id], cache, Logits::Last)?),
        Read::TopK(k) => drop(model.forward_top_k(&[id], cache, Logits::Last, k)?),
    }
    Ok(())
}

/// Fills the cache with `depth` tokens (untimed).
fn fill_depth(model: &Model, cache: &mut KvCache, depth: usize) -> CliResult {
    cache.clear();
    for chunk in tokens(depth, model.config.n_vocab, 999).chunks(512) {
        model.forward(chunk, cache, Logits::None)?;
    }
    Ok(())
}

fn plan(a: &BenchArgs) -> Vec<Test> {
    let mut tests = Vec::new();
    for &d in &a.depth {
        for &p in a.n_prompt.iter().filter(|p| **p > 0) {
            tests.push(Test {
                n_prompt: p,
                n_gen: 0,
                n_rows: 0,
                n_depth: d,
                read: Read::Logits,
                samples_ts: Vec::new(),
            });
        }
        for &n in a.n_gen.iter().filter(|n| **n > 0) {
            tests.push(Test {
                n_prompt: 0,
                n_gen: n,
                n_rows: 0,
                n_depth: d,
                read: a.read,
                samples_ts: Vec::new(),
            });
        }
        for &r in a.rows.iter().filter(|r| **r > 0) {
            tests.push(Test {
                n_prompt: 0,
                n_gen: 0,
                n_rows: r,
                n_depth: d,
                read: Read::Logits,
                samples_ts: Vec::new(),
            });
        }
    }
    tests
}

/// Peak resident memory of this process in bytes (VmHWM).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub fn run(a: BenchArgs) -> CliResult {
    if a.reps == 0 {
        return Err("-r must be at least 1".into());
    }
    let path = resolve_model(&a.model)?;
    let chosen = device::choose(a.device, a.threads)?;
    let profiled = a.profile.then(|| Arc::new(Profiled::new(chosen.backend())));
    let be: Arc<dyn Backend> = match &profiled {
        Some(p) => p.clone(),
        None => chosen.backend(),
    };
    let t_load = Instant::now();
    let model = Model::load(&path, be)?;
    let load_secs = t_load.elapsed().as_secs_f64();
    let packed = model.backend_bytes();
    let mut tests = plan(&a);
    let max_ctx = tests
        .iter()
        .map(|t| t.n_depth + t.n_prompt + t.n_gen + t.n_rows)
        .max()
        .unwrap_or(1);
    let mut cache = model.new_cache(max_ctx)?;
    let t0 = Instant::now();
    for t in &mut tests {
        fill_depth(&model, &mut cache, t.n_depth)?;
        run_once(&model, &mut cache, t, 0)?;
        // the timeline (a `trace` build) holds the last test's timed runs
        ishizuki_cpu::trace::clear();
        for rep in 1..=a.reps as u64 {
            let ts = run_once(&model, &mut cache, t, rep)?;
            t.samples_ts.push(ts);
        }
    }
    let wall = t0.elapsed();
    if let Some(path) = std::env::var_os("ISHIZUKI_TRACE") {
        if !ishizuki_cpu::trace::ENABLED {
            eprintln!(
                "ISHIZUKI_TRACE: this build records no timeline (build with --features trace)"
            );
        }
        ishizuki_cpu::trace::write(path.as_ref())?;
    }
    // Peak memory of the model and its cache, before the bandwidth probe allocates its buffer.
    let peak = peak_rss();
    let weight_bytes = model.weight_bytes();
    if a.json {
        let rows: Vec<_> = tests
            .iter()
            .map(|t| {
                serde_json::json!({
                    "n_prompt": t.n_prompt, "n_gen": t.n_gen, "n_rows": t.n_rows, "n_depth": t.n_depth,
                    "read": t.read.to_string(), "avg_ts": t.avg(), "stddev_ts": t.stddev(), "samples_ts": t.samples_ts,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        let (rows, others): (Vec<&Test>, Vec<&Test>) = tests.iter().partition(|t| t.n_rows > 0);
        if !others.is_empty() {
            print_table(&model, &chosen, &others, weight_bytes)?;
        }
        if !rows.is_empty() {
            print_rows_table(&model, &chosen, &rows);
        }
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    if let Some(peak) = peak {
        eprintln!("peak memory: {:.1} MiB", mib(peak));
    }
    eprintln!(
        "load {load_secs:.2} s; weights repacked or copied to huge pages at load: {:.1} MiB",
        mib(packed as u64)
    );
    if let Some(p) = profiled {
        p.print(wall);
    }
    Ok(())
}

fn print_table(model: &Model, be: &Chosen, tests: &[&Test], weight_bytes: usize) -> CliResult {
    let c = &model.config;
    let bw_model = be.bandwidth(weight_bytes)?;
    let bw_1g = be.bandwidth(1 << 30)?;
    let size = format!("{:.1} MiB", weight_bytes as f64 / (1 << 20) as f64);
    println!("| model | size | backend | threads | test | t/s | weights GB/s |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
    for t in tests {
        let gbs = if t.n_gen > 0 {
            format!("{:.1}", weight_bytes as f64 * t.avg() / 1e9)
        } else {
            "".into()
        };
        println!(
            "| {} | {size} | {} | {} | {} | {:.2} ± {:.2} | {gbs} |",
            c.arch,
            be.backend().name(),
            be.threads(),
            t.name(),
            t.avg(),
            t.stddev()
        );
    }
    println!(
        "\nmeasured {} bandwidth: {bw_model:.1} GB/s over the weights' size, {bw_1g:.1} GB/s over 1 GiB",
        be.bandwidth_kind()
    );
    Ok(())
}

/// Milliseconds per forward of each row count, and its cost in one-row forwards at that depth.
fn print_rows_table(model: &Model, be: &Chosen, tests: &[&Test]) {
    let ms = |t: &Test| 1e3 * t.n_rows as f64 / t.avg();
    println!("| model | backend | threads | depth | rows | ms/forward | x one row |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for t in tests {
        let one = tests
            .iter()
            .find(|o| o.n_rows == 1 && o.n_depth == t.n_depth)
            .map_or("".to_string(), |o| format!("{:.2}", ms(t) / ms(o)));
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {one} |",
            model.config.arch,
            be.backend().name(),
            be.threads(),
            t.n_depth,
            t.n_rows,
            ms(t)
        );
    }
}
