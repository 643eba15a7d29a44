//! Drafting on the tiny llama fixture, with prompt lookup and with a draft model (the fixture
//! with its final norm perturbed: the same vocabulary, other predictions); prompt lookup's
//! sampled test is on SmolLM2 (`sampled_lookup_keeps_the_distribution`), which copies. Greedy output equals
//! plain decoding token for token, through stops, token limits and a grammar inside accepted
//! blocks; sampled output keeps the plain sampler's distribution (chi-square).
use ishizuki_core::Backend;
use ishizuki_cpu::CpuBackend;
use ishizuki_engine::draft::DraftModel;
use ishizuki_engine::{
    Constraint, Done, DraftUsage, Engine, Event, Prompt, Request, SamplerConfig, TextModel,
};
use ishizuki_models::Model;
use ishizuki_text::Tokenizer;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const N_CTX: usize = 512;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny-llama.gguf")
}

/// The fixture with its final norm scaled unevenly, written to a temporary file.
fn perturbed_model(be: Arc<dyn Backend>) -> Model {
    let model = Model::load(fixture(), be.clone()).unwrap();
    let file = model.file();
    let t = file.tensor("output_norm.weight").expect("a final norm");
    let data = file.tensor_data(t);
    let at = data.as_ptr() as usize - file.bytes().as_ptr() as usize;
    let mut bytes = file.bytes().to_vec();
    for (i, v) in bytes[at..at + data.len()].chunks_exact_mut(4).enumerate() {
        let x = f32::from_le_bytes(v.try_into().unwrap());
        let scale = if i % 2 == 0 { 0.5 } else { 1.5 };
        v.copy_from_slice(&(x * scale).to_le_bytes());
    }
    let path = std::env::temp_dir().join(format!("ishizuki-draft-{}.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let draft = Model::load(&path, be).unwrap();
    let _ = std::fs::remove_file(&path);
    draft
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Drafter {
    Off,
    Lookup,
    Model,
}

fn engine(drafter: Drafter) -> Engine {
    let be: Arc<dyn Backend> = Arc::new(CpuBackend::new(2));
    let model = Model::load(fixture(), be.clone()).unwrap();
    let tokenizer = Tokenizer::from_gguf(model.file()).unwrap();
    let text = TextModel::new("tiny".into(), tokenizer, None, N_CTX).unwrap();
    // the draft model is the target's size here: it never pays, so the governor is told to draft
    let e = Engine::new(Arc::new(text), model, 2)
        .with_drafting(drafter != Drafter::Off)
        .with_drafting_always();
    match drafter {
        Drafter::Model => e.with_draft_model(DraftModel::new(perturbed_model(be), N_CTX).unwrap()),
        _ => e,
    }
}

fn run(e: &mut Engine, r: Request) -> (Done, String) {
    let prepared = e.text.prepare(r).expect("valid request");
    let (mut done, mut text) = (None, String::new());
    e.run(&prepared, &AtomicBool::new(false), 0.0, &mut |ev| {
        match ev {
            Event::Text { text: t, .. } => text.push_str(&t),
            Event::Done(d) => done = Some(d),
            Event::Failed { message, .. } => panic!("{message}"),
            _ => {}
        }
        true
    });
    (done.expect("a Done event"), text)
}

fn tokens(ids: &[u32], max_tokens: usize) -> Request {
    let mut r = Request::new(Prompt::Tokens(ids.to_vec()));
    r.max_tokens = Some(max_tokens);
    r.parse_tool_calls = false;
    r
}

/// A prompt that repeats itself, so prompt lookup finds what comes next.
fn repetitive(seed: u32, period: u32, len: u32) -> Vec<u32> {
    (0..len)
        .map(|i| (seed + (i % period) * 37) % 500 + 4)
        .collect()
}

/// Greedy requests: repetitive and plain prompts, many token limits, stops cut from the plain
/// output (so they land inside drafted blocks) and a grammar.
fn greedy_requests(plain: &mut Engine) -> Vec<Request> {
    let mut out = Vec::new();
    for (seed, period) in [(1, 5), (7, 9), (13, 3), (29, 17), (31, 60)] {
        let prompt = repetitive(seed, period, 60);
        for max in [1, 2, 7, 16, 17, 40] {
            out.push(tokens(&prompt, max));
        }
        let (_, whole) = run(plain, tokens(&prompt, 40));
        let chars: Vec<char> = whole.chars().collect();
        for at in [5, chars.len() / 2, chars.len().saturating_sub(3)] {
            if at + 2 <= chars.len() {
                let mut r = tokens(&prompt, 40);
                r.stop = vec![chars[at..at + 2].iter().collect()];
                out.push(r);
            }
        }
        let mut r = tokens(&prompt, 24);
        r.constraint = Some(Constraint::Regex("(ab|ba|a b )+".into()));
        out.push(r);
    }
    out
}

#[test]
fn greedy_output_is_the_same_with_drafting_on_and_off() {
    let mut plain = engine(Drafter::Off);
    let requests = greedy_requests(&mut plain);
    for drafter in [Drafter::Lookup, Drafter::Model] {
        let mut drafting = engine(drafter);
        let mut kept = DraftUsage::default();
        for r in &requests {
            let (want, want_text) = run(&mut plain, r.clone());
            let (got, got_text) = run(&mut drafting, r.clone());
            assert_eq!(got.tokens, want.tokens, "{drafter:?}: {r:?}");
            assert_eq!(
                (got_text, got.finish, got.stop_sequence.clone()),
                (want_text, want.finish, want.stop_sequence.clone()),
                "{drafter:?}: {r:?}"
            );
            assert!(want.usage.draft.is_none());
            let u = got.usage.draft.expect("drafting reported");
            kept.drafted_tokens += u.drafted_tokens;
            kept.accepted_tokens += u.accepted_tokens;
        }
        // the draft model makes the test mean something: drafts made, kept and rejected (this
        // random model never repeats itself, so lookup rarely drafts; the real models'
        // tests cover it)
        if drafter == Drafter::Model {
            assert!(
                kept.accepted_tokens > 100 && kept.accepted_tokens < kept.drafted_tokens,
                "{kept:?}"
            );
        }
    }
}

/// Greedy decoding reads back only each row's argmax unless something needs the logits;
/// asking for logprobs takes the logits path, which must pick the same tokens, drafted or not.
#[test]
fn greedy_argmax_ids_pick_the_tokens_the_logits_do() {
    let mut plain = engine(Drafter::Off);
    let requests = greedy_requests(&mut plain);
    for drafter in [Drafter::Off, Drafter::Model] {
        let mut e = engine(drafter);
        for r in requests.iter().filter(|r| r.constraint.is_none()) {
            let (ids, ids_text) = run(&mut e, r.clone());
            let mut with_logprobs = r.clone();
            with_logprobs.logprobs = Some(1);
            let (logits, logits_text) = run(&mut e, with_logprobs);
            assert_eq!(ids.tokens, logits.tokens, "{drafter:?}: {r:?}");
            assert_eq!(
                (ids_text, ids.finish),
                (logits_text, logits.finish),
                "{r:?}"
            );
        }
    }
}

#[test]
fn a_request_can_turn_drafting_off() {
    let mut e = engine(Drafter::Model);
    let mut r = tokens(&repetitive(1, 5, 60), 30);
    let (on, _) = run(&mut e, r.clone());
    r.draft = false;
    let (off, _) = run(&mut e, r);
    assert_eq!(on.tokens, off.tokens);
    assert!(on.usage.draft.is_some_and(|u| u.accepted_tokens > 0));
    assert!(off.usage.draft.is_none());
}

const SAMPLES: u64 = 2000;
const CONTINUATION: usize = 3;

fn sampled(seed: u64, temperature: f32) -> Request {
    let mut r = tokens(&repetitive(13, 3, 30), CONTINUATION);
    r.sampler = SamplerConfig {
        temperature,
        top_k: 3,
        seed,
        ..SamplerConfig::greedy()
    };
    r
}

/// Counts of each sampled continuation, and drafting's totals.
fn histogram(
    drafter: Drafter,
    seeds: u64,
    temperature: f32,
) -> (HashMap<Vec<u32>, u64>, DraftUsage) {
    let mut e = engine(drafter);
    let (mut counts, mut usage) = (HashMap::new(), DraftUsage::default());
    for seed in seeds..seeds + SAMPLES {
        let (d, _) = run(&mut e, sampled(seed, temperature));
        *counts.entry(d.tokens).or_insert(0) += 1;
        if let Some(u) = d.usage.draft {
            usage.drafted_tokens += u.drafted_tokens;
            usage.accepted_tokens += u.accepted_tokens;
        }
    }
    (counts, usage)
}

/// Chi-square statistic of two histograms being one distribution, cells with fewer than 10
/// pooled samples merged, and its critical value at p = 0.01 (Wilson-Hilferty).
fn chi_square(a: &HashMap<Vec<u32>, u64>, b: &HashMap<Vec<u32>, u64>) -> (f64, f64) {
    let mut cells: Vec<(u64, u64)> = Vec::new();
    let mut rare = (0, 0);
    let keys: std::collections::BTreeSet<&Vec<u32>> = a.keys().chain(b.keys()).collect();
    for k in keys {
        let (x, y) = (
            a.get(k).copied().unwrap_or(0),
            b.get(k).copied().unwrap_or(0),
        );
        if x + y < 10 {
            rare = (rare.0 + x, rare.1 + y);
        } else {
            cells.push((x, y));
        }
    }
    if rare.0 + rare.1 > 0 {
        cells.push(rare);
    }
    let (na, nb) = (
        cells.iter().map(|c| c.0).sum::<u64>() as f64,
        cells.iter().map(|c| c.1).sum::<u64>() as f64,
    );
    let stat: f64 = cells
        .iter()
        .map(|&(x, y)| {
            let pooled = (x + y) as f64 / (na + nb);
            let (ea, eb) = (pooled * na, pooled * nb);
            (x as f64 - ea).powi(2) / ea + (y as f64 - eb).powi(2) / eb
        })
        .sum();
    let df = (cells.len() - 1).max(1) as f64;
    let h = 2.0 / (9.0 * df);
    let critical = df * (1.0 - h + 2.326 * h.sqrt()).powi(3);
    (stat, critical)
}

#[test]
fn sampled_drafting_keeps_the_distribution() {
    let (plain, _) = histogram(Drafter::Off, 1_000_000, 1.0);
    assert!(plain.len() > 5, "the continuation varies: {plain:?}");
    {
        let drafter = Drafter::Model;
        let (got, usage) = histogram(drafter, 0, 1.0);
        let (stat, critical) = chi_square(&plain, &got);
        assert!(
            stat < critical,
            "{drafter:?}: chi-square {stat:.1} >= {critical:.1} (p < 0.01)\n{plain:?}\n{got:?}"
        );
        assert!(
            usage.accepted_tokens as u64 > SAMPLES / 4
                && usage.accepted_tokens < usage.drafted_tokens,
            "{drafter:?}: drafts kept and rejected: {usage:?}"
        );
    }
    // the test can tell distributions apart: a cooler sampler fails it
    let (cool, _) = histogram(Drafter::Off, 2_000_000, 0.7);
    let (stat, critical) = chi_square(&plain, &cool);
    assert!(
        stat > critical,
        "temperature 0.7 passed as 1.0: {stat:.1} < {critical:.1}"
    );
}

/// A real model from ISHIZUKI_TEST_MODELS; None (skip) unless ISHIZUKI_REQUIRE_MODELS is set.
fn real_model(file: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("ISHIZUKI_TEST_MODELS").map(PathBuf::from)?;
    let path = dir.join(file);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("ISHIZUKI_REQUIRE_MODELS").is_none(),
        "{} is missing",
        path.display()
    );
    None
}

fn smollm2(draft: bool) -> Option<Engine> {
    let path = real_model("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    let model = Model::load(path, Arc::new(CpuBackend::new(2))).unwrap();
    let tokenizer = Tokenizer::from_gguf(model.file()).unwrap();
    let text = TextModel::new("smollm2".into(), tokenizer, None, 1024).unwrap();
    // drafting whether it pays or not: the test holds the distribution, not the speed
    let e = Engine::new(Arc::new(text), model, 2).with_drafting(draft);
    Some(e.with_drafting_always())
}

/// Prompt lookup at temperature 1 on a prompt whose continuation copies it: 2,000 samples of
/// a short continuation with drafting on and off are one distribution.
#[test]
fn sampled_lookup_keeps_the_distribution() {
    let (Some(mut on), Some(mut off)) = (smollm2(true), smollm2(false)) else {
        return;
    };
    let prompt = "red, green, blue, yellow, red, green, blue, yellow, red, green,";
    let request = |seed| {
        let mut r = Request::new(Prompt::Text(prompt.into()));
        r.max_tokens = Some(4);
        r.parse_tool_calls = false;
        r.sampler = SamplerConfig {
            temperature: 1.0,
            top_k: 8,
            seed,
            ..SamplerConfig::greedy()
        };
        r
    };
    let histogram = |e: &mut Engine, seeds: std::ops::Range<u64>| {
        let (mut counts, mut usage) = (HashMap::new(), DraftUsage::default());
        for seed in seeds {
            let (d, _) = run(e, request(seed));
            *counts.entry(d.tokens).or_insert(0u64) += 1;
            if let Some(u) = d.usage.draft {
                usage.drafted_tokens += u.drafted_tokens;
                usage.accepted_tokens += u.accepted_tokens;
            }
        }
        (counts, usage)
    };
    let (plain, _) = histogram(&mut off, 1_000_000..1_000_000 + SAMPLES);
    let (got, usage) = histogram(&mut on, 0..SAMPLES);
    let (stat, critical) = chi_square(&plain, &got);
    assert!(
        stat < critical,
        "chi-square {stat:.1} >= {critical:.1} (p < 0.01)\n{plain:?}\n{got:?}"
    );
    assert!(
        usage.accepted_tokens as u64 > SAMPLES && usage.accepted_tokens < usage.drafted_tokens,
        "drafts kept and rejected: {usage:?}"
    );
}
