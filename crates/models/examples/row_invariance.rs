//! Measures how far a k-row forward's logits are from k one-row forwards (draft verification
//! needs them equal). `cargo run --release -p ishizuki-models --example row_invariance MODEL`
use ishizuki_models::{Logits, Model};

fn main() {
    let path = std::env::args().nth(1).expect("MODEL");
    let be = std::sync::Arc::new(ishizuki_cpu::CpuBackend::new(2));
    let model = Model::load(&path, be).unwrap();
    let n_vocab = model.config.n_vocab;
    let prompt: Vec<u32> = (0..40u32).map(|i| 100 + i * 37).collect();
    let next: Vec<u32> = (0..17u32).map(|i| 2000 + i * 91).collect();
    let mut single = Vec::new();
    let mut c = model.new_cache(512).unwrap();
    model.forward(&prompt, &mut c, Logits::None).unwrap();
    for &t in &next {
        single.extend(model.forward(&[t], &mut c, Logits::Last).unwrap());
    }
    for k in [1usize, 2, 3, 4, 7, 8, 9, 12, 16, 17] {
        let mut c = model.new_cache(512).unwrap();
        model.forward(&prompt, &mut c, Logits::None).unwrap();
        let multi = model.forward(&next[..k], &mut c, Logits::All).unwrap();
        let max = multi
            .iter()
            .zip(&single[..k * n_vocab])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!("rows {k:2}: max |logit difference| vs one-row forwards {max:.6}");
    }
}
