//! `synth`: llama.cpp's Q4_K_M recipe against real Q4_K_M files, and synthetic models that load,
//! tokenize and decode, their quantized logits near the F16 model's.
use ishizuki_core::GgmlType;
use ishizuki_cpu::CpuBackend;
use ishizuki_formats::GgufFile;
use ishizuki_models::synth::{preset, synth, tensor_type, Recipe, Role, Slot, SynthOptions};
use ishizuki_models::{Logits, Model};
use ishizuki_text::Tokenizer;
use std::path::PathBuf;
use std::sync::Arc;

/// A real model from ISHIZUKI_TEST_MODELS; None (skip) unless ISHIZUKI_REQUIRE_MODELS is set.
fn real_model(file: &str, required: bool) -> Option<PathBuf> {
    let dir = std::env::var_os("ISHIZUKI_TEST_MODELS").map(PathBuf::from)?;
    let path = dir.join(file);
    if path.exists() {
        return Some(path);
    }
    assert!(
        !required || std::env::var_os("ISHIZUKI_REQUIRE_MODELS").is_none(),
        "{} is missing",
        path.display()
    );
    None
}

#[test]
fn q4_k_m_recipe_gives_every_tensor_the_type_llama_cpp_gave_it() {
    let files = [
        ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", true),
        ("gemma-3-270m-q4_k_m.gguf", true),
        ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", false),
    ];
    for (file, required) in files {
        let Some(path) = real_model(file, required) else {
            continue;
        };
        let f = GgufFile::open(&path).unwrap();
        let arch = f.architecture().unwrap().to_string();
        let n_layer = f.get_u64(&format!("{arch}.block_count")).unwrap() as usize;
        let tied = f.tensor("output.weight").is_none();
        // llama.cpp counts a role's tensors in file order (blk.10 may precede blk.2)
        let mut seen = std::collections::HashMap::new();
        for t in &f.tensors {
            let role = Role::of(&t.name, t.dims.len());
            let ordinal = seen.entry(format!("{role:?}")).or_insert(0usize);
            let slot = Slot {
                layer: *ordinal,
                n_layer,
                n_in: t.dims[0],
                tied_output: tied,
            };
            *ordinal += 1;
            let want = tensor_type(Recipe::Q4_K_M, role, slot);
            assert_eq!(t.ty, want, "{file}: {}", t.name);
        }
    }
}

fn synth_tiny(recipe: Recipe, threads: usize) -> (tempdir::Dir, PathBuf) {
    let dir = tempdir::Dir::new();
    let path = dir.0.join(format!("tiny-{recipe:?}.gguf"));
    let opts = SynthOptions {
        recipe,
        seed: 7,
        threads,
        n_layer: None,
    };
    synth(preset("llama-tiny").unwrap(), &opts, &path).unwrap();
    (dir, path)
}

mod tempdir {
    use std::path::PathBuf;
    pub struct Dir(pub PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("ishizuki-synth-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn the_file_does_not_depend_on_the_thread_count() {
    let (_a, one) = synth_tiny(Recipe::Q4_K_M, 1);
    let (_b, three) = synth_tiny(Recipe::Q4_K_M, 3);
    assert!(std::fs::read(one).unwrap() == std::fs::read(three).unwrap());
}

fn last_logits(path: &PathBuf, tokens: &[u32]) -> Vec<f32> {
    let model = Model::load(path, Arc::new(CpuBackend::exact(2))).unwrap();
    let mut cache = model.new_cache(tokens.len()).unwrap();
    model.forward(tokens, &mut cache, Logits::Last).unwrap()
}

#[test]
fn synthetic_models_load_tokenize_and_decode_near_the_f16_model() {
    let (_d16, f16) = synth_tiny(Recipe::F16, 2);
    let tokens = [1u32, 300, 301, 777, 5, 1000];
    let reference = last_logits(&f16, &tokens);
    let power = reference.iter().map(|v| v * v).sum::<f32>() / reference.len() as f32;
    assert!(power > 0.0 && power.is_finite());
    // NMSE of the logits against the F16 model's: quantization error, far below 1
    for (recipe, bound) in [(Recipe::Q8_0, 1e-3), (Recipe::Q4_K_M, 5e-2)] {
        let (_d, path) = synth_tiny(recipe, 2);
        let f = GgufFile::open(&path).unwrap();
        let tok = Tokenizer::from_gguf(&f).unwrap();
        let ids = tok.encode("hello world", false, false);
        assert!(!ids.is_empty());
        let want_ty = match recipe {
            Recipe::Q8_0 => GgmlType::Q8_0,
            _ => GgmlType::Q6_K, // the output head of Q4_K_M
        };
        assert_eq!(f.tensor("output.weight").unwrap().ty, want_ty);
        let got = last_logits(&path, &tokens);
        let err = got
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
            / reference.len() as f32;
        println!("{recipe:?}: logits NMSE {:.2e}", err / power);
        assert!(err / power < bound, "{recipe:?}: NMSE {}", err / power);
    }
}

#[test]
fn bad_requests_are_errors() {
    let dir = tempdir::Dir::new();
    let opts = SynthOptions {
        recipe: Recipe::Q8_0,
        seed: 1,
        threads: 1,
        n_layer: Some(99),
    };
    let err = synth(preset("llama-tiny").unwrap(), &opts, &dir.0.join("x.gguf")).unwrap_err();
    assert!(err.to_string().contains("layers"), "{err}");
    assert!(preset("no-such-model").is_none());
}
