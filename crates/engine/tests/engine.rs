//! Generation stop conditions and perplexity windows on the tiny llama fixture.
use ishizuki_cpu::CpuBackend;
use ishizuki_engine::perplexity::neg_log_softmax;
use ishizuki_engine::{perplexity, GenerateParams, SamplerConfig, Session, StopReason};
use ishizuki_models::{Logits, Model};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

fn tiny() -> Model {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny-llama.gguf");
    Model::load(p).unwrap()
}

const PROMPT: [u32; 5] = [5, 17, 99, 3, 250];

fn params(max_tokens: Option<usize>) -> GenerateParams {
    GenerateParams {
        max_tokens,
        sampler: SamplerConfig::greedy(),
        prefill_chunk: 2,
    }
}

#[test]
fn stop_conditions() {
    let (model, be) = (tiny(), CpuBackend::new(1));
    let no = AtomicBool::new(false);
    let never = |_: u32| false;
    let mut s = Session::new(&model, &be, 64);
    let g = s
        .generate(&PROMPT, &params(Some(5)), &never, &no, &mut |_| true)
        .unwrap();
    assert_eq!((g.tokens.len(), g.stop), (5, StopReason::MaxTokens));
    let first = g.tokens[0];

    let g = s
        .generate(&PROMPT, &params(Some(0)), &never, &no, &mut |_| true)
        .unwrap();
    assert_eq!((g.tokens.len(), g.stop), (0, StopReason::MaxTokens));

    let g = s
        .generate(&PROMPT, &params(None), &|id| id == first, &no, &mut |_| {
            true
        })
        .unwrap();
    assert_eq!(
        (g.tokens, g.stop),
        (vec![first], StopReason::EndOfGeneration)
    );

    let g = s
        .generate(&PROMPT, &params(None), &never, &no, &mut |_| false)
        .unwrap();
    assert_eq!((g.tokens.len(), g.stop), (1, StopReason::Callback));

    let cancelled = AtomicBool::new(true);
    let g = s
        .generate(&PROMPT, &params(None), &never, &cancelled, &mut |_| true)
        .unwrap();
    assert_eq!((g.tokens.len(), g.stop), (0, StopReason::Cancelled));

    // The last token is sampled from the final cached position and is not stored.
    let mut s = Session::new(&model, &be, PROMPT.len() + 3);
    let g = s
        .generate(&PROMPT, &params(None), &never, &no, &mut |_| true)
        .unwrap();
    assert_eq!((g.tokens.len(), g.stop), (4, StopReason::ContextFull));

    let mut s = Session::new(&model, &be, PROMPT.len() - 1);
    assert!(s
        .generate(&PROMPT, &params(None), &never, &no, &mut |_| true)
        .is_err());
    assert!(s
        .generate(&[], &params(None), &never, &no, &mut |_| true)
        .is_err());
}

#[test]
fn greedy_generation_is_the_argmax_chain_and_chunking_does_not_matter() {
    let (model, be) = (tiny(), CpuBackend::new(2));
    let no = AtomicBool::new(false);
    let mut s = Session::new(&model, &be, 64);
    let a = s
        .generate(&PROMPT, &params(Some(6)), &|_| false, &no, &mut |_| true)
        .unwrap();
    let mut whole = params(Some(6));
    whole.prefill_chunk = 512;
    let b = s
        .generate(&PROMPT, &whole, &|_| false, &no, &mut |_| true)
        .unwrap();
    assert_eq!(a.tokens, b.tokens);
    let mut cache = model.new_cache(64);
    let mut ids = PROMPT.to_vec();
    for want in &a.tokens {
        let logits = model.forward(&be, &ids, &mut cache, Logits::Last).unwrap();
        cache.clear();
        assert_eq!(ishizuki_engine::sampler::argmax(&logits), *want);
        ids.push(*want);
    }
}

#[test]
fn perplexity_scores_every_token_after_the_first_of_each_window() {
    // The exact backend computes each row alone, so chunking cannot change a single bit.
    let (model, be) = (tiny(), CpuBackend::exact(1));
    let text: Vec<u32> = (0..23).map(|i| (i * 37 % 500) as u32 + 4).collect();
    let bos = Some(1u32);
    // Windows of 8 = BOS + 7 text tokens: 7 + 7 + 7 + (BOS + 2) -> 7 * 3 + 2 scored.
    let p = perplexity(&model, &be, &text, bos, 8, None, 3).unwrap();
    assert_eq!(p.tokens, 23);
    let mut nll = 0.0;
    for window in text.chunks(7) {
        let ids: Vec<u32> = bos.into_iter().chain(window.iter().copied()).collect();
        let mut cache = model.new_cache(8);
        let logits = model.forward(&be, &ids, &mut cache, Logits::All).unwrap();
        for (row, next) in logits.chunks_exact(model.config.n_vocab).zip(&ids[1..]) {
            nll += neg_log_softmax(row, *next as usize);
        }
    }
    assert!(
        (p.mean_nll - nll / 23.0).abs() < 1e-9,
        "{} vs {}",
        p.mean_nll,
        nll / 23.0
    );
    assert!((p.ppl - p.mean_nll.exp()).abs() < 1e-9);
    let limited = perplexity(&model, &be, &text, None, 8, Some(2), 512).unwrap();
    assert_eq!(limited.tokens, 14);
    assert!(perplexity(&model, &be, &text[..1], None, 8, None, 8).is_err());
    assert!(perplexity(&model, &be, &text, bos, 1, None, 8).is_err());
}
