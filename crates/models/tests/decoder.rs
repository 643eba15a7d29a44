//! Tiny random llama and gemma3 configs against Hugging Face transformers (fp32); fixtures
//! from scripts/gen_tiny_fixtures.py.
use ishizuki_cpu::CpuBackend;
use ishizuki_models::{Logits, Model};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture(arch: &str) -> (Model, Value) {
    fixture_on(arch, CpuBackend::new(2))
}

fn fixture_on(arch: &str, be: CpuBackend) -> (Model, Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let reference = read_json(&dir.join(format!("tiny-{arch}.json")));
    let path = dir.join(reference["gguf"].as_str().unwrap());
    let model = Model::load(path, Arc::new(be)).expect("tiny model loads");
    (model, reference)
}

/// The reference keeps K/V in f32, we keep an f16 cache: ~1e-3 of rounding on logits of
/// magnitude up to ~7; a wrong op shows up as errors of order 1.
const EXACT_TOLERANCE: f32 = 5e-3;
/// The fast path also quantizes activations to 8 bits per matmul (as llama.cpp does): about
/// 1e-2 of error per quantized layer on these random weights.
const FAST_TOLERANCE: f32 = 0.15;

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn check_against_transformers(arch: &str, backend: fn(usize) -> CpuBackend, tolerance: f32) {
    let (_, reference) = fixture(arch);
    let tokens = ids(&reference["tokens"]);
    let want: Vec<f32> = reference["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect();
    for threads in [1, 2] {
        let (model, _) = fixture_on(arch, backend(threads));
        let mut cache = model.new_cache(tokens.len()).unwrap();
        let all = model.forward(&tokens, &mut cache, Logits::All).unwrap();
        let err = max_abs_diff(&all, &want);
        assert!(
            err < tolerance,
            "{arch}: prefill logits differ from transformers by {err}"
        );

        // Decode one token at a time through the cache: the same logits as the full forward.
        let mut cache = model.new_cache(tokens.len()).unwrap();
        let n_vocab = model.config.n_vocab;
        for (i, t) in tokens.iter().enumerate() {
            let row = model.forward(&[*t], &mut cache, Logits::Last).unwrap();
            let err = max_abs_diff(&row, &want[i * n_vocab..(i + 1) * n_vocab]);
            assert!(err < tolerance, "{arch}: decode step {i} differs by {err}");
        }

        // Chunked prefill after a truncate: the cache rolls back and refills exactly.
        cache.truncate(3);
        let rest = model
            .forward(&tokens[3..], &mut cache, Logits::All)
            .unwrap();
        let err = max_abs_diff(&rest, &want[3 * n_vocab..]);
        assert!(
            err < tolerance,
            "{arch}: prefill after truncate differs by {err}"
        );
    }
}

#[test]
fn tiny_llama_matches_transformers() {
    check_against_transformers("llama", CpuBackend::exact, EXACT_TOLERANCE);
    check_against_transformers("llama", CpuBackend::new, FAST_TOLERANCE);
}

#[test]
fn tiny_gemma3_matches_transformers() {
    check_against_transformers("gemma3", CpuBackend::exact, EXACT_TOLERANCE);
    check_against_transformers("gemma3", CpuBackend::new, FAST_TOLERANCE);
}

/// A forward after a longer one runs in the buffers that one kept and gives the logits of a
/// freshly loaded model, bit for bit; so do two forwards at once on two threads (one keeps the
/// buffers, the other makes its own).
#[test]
fn kept_intermediates_change_no_result() {
    let (model, reference) = fixture("llama");
    let tokens = ids(&reference["tokens"]);
    let run = |m: &Model, n: usize| {
        let mut cache = m.new_cache(tokens.len()).unwrap();
        m.forward(&tokens[..n], &mut cache, Logits::All).unwrap()
    };
    let want = run(&fixture("llama").0, 3);
    run(&model, tokens.len());
    assert_eq!(run(&model, 3), want);
    std::thread::scope(|s| {
        let both = [s.spawn(|| run(&model, 3)), s.spawn(|| run(&model, 3))];
        for t in both {
            assert_eq!(t.join().unwrap(), want);
        }
    });
}

/// Draft verification: a forward of up to `verify_rows` rows gives each row the logits of a
/// one-row decode bit for bit, so drafting never changes a greedy token.
#[test]
fn verification_rows_equal_one_row_decodes() {
    for arch in ["llama", "gemma3"] {
        for threads in [1, 2, 3] {
            let (model, _) = fixture_on(arch, CpuBackend::new(threads));
            let n_vocab = model.config.n_vocab as u32;
            let prompt: Vec<u32> = (0..23).map(|i| (7 + i * 13) % n_vocab).collect();
            let next: Vec<u32> = (0..16).map(|i| (3 + i * 29) % n_vocab).collect();
            let rows = model.backend().verify_rows().min(next.len());
            let mut cache = model.new_cache(64).unwrap();
            model.forward(&prompt, &mut cache, Logits::None).unwrap();
            let alone: Vec<f32> = next[..rows]
                .iter()
                .flat_map(|&t| model.forward(&[t], &mut cache, Logits::Last).unwrap())
                .collect();
            for k in 2..=rows {
                cache.truncate(prompt.len());
                let together = model.forward(&next[..k], &mut cache, Logits::All).unwrap();
                let same = together
                    .iter()
                    .zip(&alone)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{arch}, {threads} threads: {k} rows differ from one-row decodes"
                );
            }
        }
    }
}

#[test]
fn prompt_longer_than_context_is_an_error() {
    let (model, reference) = fixture("llama");
    let tokens = ids(&reference["tokens"]);
    let mut cache = model.new_cache(tokens.len() - 1).unwrap();
    let err = model
        .forward(&tokens, &mut cache, Logits::Last)
        .unwrap_err();
    assert!(
        err.to_string().contains("does not fit the context"),
        "{err}"
    );
    assert_eq!(
        cache.len(),
        0,
        "a failed forward leaves the cache as it was"
    );
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture json")
}

/// A type the file format knows but no kernel implements is an error at load naming the tensor
/// and the type, never a forward that fails later.
#[test]
fn unsupported_weight_type_fails_at_load() {
    use ishizuki_core::GgmlType;
    use ishizuki_formats::{GgufFile, GgufWriter};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let src = GgufFile::open(dir.join("tiny-llama.gguf")).unwrap();
    let retyped = "blk.1.ffn_down.weight";
    let mut w = GgufWriter::new();
    for (k, v) in &src.metadata {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    let iq_bytes = vec![0u8; GgmlType::IQ2_XXS.row_bytes(256).unwrap() as usize * 64];
    for t in &src.tensors {
        if t.name == retyped {
            w.add_tensor(t.name.clone(), &t.dims, GgmlType::IQ2_XXS, iq_bytes.clone())
                .unwrap();
        } else {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, src.tensor_data(t))
                .unwrap();
        }
    }
    let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
    for be in [CpuBackend::new(1), CpuBackend::exact(1)] {
        let file = GgufFile::from_bytes(file.bytes().to_vec()).unwrap();
        let err = Model::from_gguf(file, Arc::new(be)).err().expect("refused");
        let msg = err.to_string();
        assert!(msg.contains("IQ2_XXS") && msg.contains(retyped), "{msg}");
    }
}
