//! Decoder tests: tiny random configs against transformers, and the real models against the
//! fp32 reference fixtures.
mod real_models;
mod tiny;

use ishizuki_models::Model;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub fn models_dir() -> PathBuf {
    std::env::var_os("ISHIZUKI_TEST_MODELS")
        .map_or_else(|| "/work/cache/models".into(), PathBuf::from)
}

pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("ISHIZUKI_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
        PathBuf::from,
    )
}

pub fn load_real(file: &str) -> Option<Model> {
    let path = models_dir().join(file);
    if !path.exists() {
        eprintln!(
            "skipping: {} not found (set ISHIZUKI_TEST_MODELS)",
            path.display()
        );
        return None;
    }
    Some(Model::load(&path).expect("model loads"))
}

pub fn reference(name: &str) -> Value {
    read_json(&fixtures_dir().join(format!("ref-{name}.json")))
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture json")
}
