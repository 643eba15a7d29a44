//! The two real models against the fp32 transformers reference in ../shared/fixtures:
//! greedy tokens up to the first low-margin step, and passage perplexity within 1%.
use crate::{argmax, ids, load_real, reference};
use ishizuki_cpu::CpuBackend;
use ishizuki_models::{Logits, Model};
use serde_json::Value;

fn check_greedy(model: &Model, be: &CpuBackend, reference: &Value) {
    for (ci, case) in reference["cases"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&case["prompt_ids"]);
        let want = ids(&case["output_ids"]);
        let margins: Vec<f64> = case["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap())
            .collect();
        let mut cache = model.new_cache(prompt.len() + want.len() + 1);
        let mut logits = model
            .forward(be, &prompt, &mut cache, Logits::Last)
            .unwrap();
        for (step, &w) in want.iter().enumerate() {
            let got = argmax(&logits);
            if margins[step] < 0.3 {
                eprintln!(
                    "case {ci}: matched {step} tokens, then a margin of {:.3}",
                    margins[step]
                );
                break;
            }
            assert_eq!(
                got, w,
                "case {ci} step {step} (margin {:.3})",
                margins[step]
            );
            logits = model.forward(be, &[got], &mut cache, Logits::Last).unwrap();
        }
    }
}

fn check_perplexity(model: &Model, be: &CpuBackend, reference: &Value) {
    for (pi, p) in reference["passages"].as_array().unwrap().iter().enumerate() {
        let tokens = ids(&p["ids"]);
        let want_ppl = p["ppl"].as_f64().unwrap();
        let mut cache = model.new_cache(tokens.len());
        let n_vocab = model.config.n_vocab;
        let mut nll = 0f64;
        for chunk_start in (0..tokens.len()).step_by(256) {
            let chunk = &tokens[chunk_start..(chunk_start + 256).min(tokens.len())];
            let logits = model.forward(be, chunk, &mut cache, Logits::All).unwrap();
            for (r, row) in logits.chunks_exact(n_vocab).enumerate() {
                let next = chunk_start + r + 1;
                if next >= tokens.len() {
                    break;
                }
                let max = row.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v)) as f64;
                let lse = max
                    + row
                        .iter()
                        .map(|v| (*v as f64 - max).exp())
                        .sum::<f64>()
                        .ln();
                nll += lse - row[tokens[next] as usize] as f64;
            }
        }
        let ppl = (nll / (tokens.len() - 1) as f64).exp();
        eprintln!("passage {pi}: ppl {ppl:.4} vs reference {want_ppl:.4}");
        assert!(
            (ppl / want_ppl - 1.0).abs() < 0.01,
            "passage {pi}: ppl {ppl} vs {want_ppl}"
        );
    }
}

#[test]
fn smollm2_matches_reference() {
    let Some(model) = load_real("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let be = CpuBackend::new(0);
    let reference = reference("smollm2-135m");
    check_greedy(&model, &be, &reference);
    check_perplexity(&model, &be, &reference);
}

#[test]
fn gemma3_matches_reference() {
    let Some(model) = load_real("gemma-3-270m-q4_k_m.gguf") else {
        return;
    };
    let be = CpuBackend::new(0);
    let reference = reference("gemma3-270m");
    check_greedy(&model, &be, &reference);
    check_perplexity(&model, &be, &reference);
}
