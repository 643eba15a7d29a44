//! Malformed-GGUF corpus (built in gguf_corpus/): every validation rule gets files that break
//! it, each asserting the specific error variant and the byte offset it names; then truncation
//! at every byte and byte mutations of a valid file, asserting typed errors and zero panics.
mod gguf_corpus;

use gguf_corpus::metadata::nested_headers;
use gguf_corpus::*;
use ishizuki_core::dtype::ALL_TYPES;
use ishizuki_formats::gguf::MAX_ARRAY_DEPTH;
use ishizuki_formats::{GgufFile, GgufWriter, Value};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Parses with panics caught: Err(()) means the parser panicked.
fn parse(bytes: &[u8]) -> Result<Result<GgufFile, E>, ()> {
    catch_unwind(AssertUnwindSafe(|| GgufFile::from_bytes(bytes.to_vec()))).map_err(|_| ())
}

#[test]
fn every_malformed_case_gets_its_specific_error() {
    let cases = all_cases();
    let names: HashSet<&str> = cases.iter().map(|c| c.name).collect();
    assert_eq!(names.len(), cases.len(), "case names must be distinct");
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        match parse(&case.bytes) {
            Err(()) => failures.push(format!("{}: PANICKED", case.name)),
            Ok(Ok(_)) => failures.push(format!("{}: parsed without error", case.name)),
            Ok(Err(e)) if !(case.check)(&e) => {
                failures.push(format!("{}: wrong error: {e:?}", case.name))
            }
            Ok(Err(e)) if e.offset() != Some(case.at) => failures.push(format!(
                "{}: offset {:?}, want {}: {e}",
                case.name,
                e.offset(),
                case.at
            )),
            Ok(Err(e)) => {
                // The message names the byte offset and the rule.
                let msg = e.to_string();
                if !msg.contains(&format!("byte {}:", case.at)) || msg.len() < 30 {
                    failures.push(format!("{}: message lacks offset: {msg}", case.name));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Near-misses of the rules above that are valid and must load.
#[test]
fn valid_edge_cases_load() {
    let v2 = Raw::header(2, 0, 1).kv("k", U8).u8(7);
    assert_eq!(GgufFile::from_bytes(v2.0).unwrap().version, 2);
    let deepest = nested_headers(MAX_ARRAY_DEPTH - 1).array(U8, 1).u8(9);
    let f = GgufFile::from_bytes(deepest.0).unwrap();
    assert_eq!(f.get("k").map(Value::nesting_depth), Some(MAX_ARRAY_DEPTH));
    // Adjacent tensors touch without overlapping; alignment 1 allows any offset.
    let touching = Raw::gguf(2, 1).kv("general.alignment", U32).u32(1);
    let touching = touching
        .tensor("a", &[3], F32_T, 0)
        .tensor("b", &[1], F32_T, 12);
    let data_offset = touching.len();
    let f = GgufFile::from_bytes(touching.zeros(16).0).unwrap();
    assert_eq!((f.alignment, f.data_offset), (1, data_offset));
    let four = Raw::gguf(1, 0)
        .tensor("t", &[256, 1, 2, 3], Q4_K_T, 0)
        .pad(32);
    let f = GgufFile::from_bytes(four.zeros(6 * 144).0).unwrap();
    assert_eq!(f.tensors[0].n_bytes, 6 * 144);
    let bools = Raw::gguf(0, 1).kv("k", ARRAY).array(BOOL, 2).u8(0).u8(1);
    let f = GgufFile::from_bytes(bools.0).unwrap();
    assert_eq!(f.get("k"), Some(&Value::from(vec![false, true])));
}

/// Types without kernels (IQ*, TQ*, MXFP4, ...) are valid files; only kernels refuse them.
#[test]
fn every_known_tensor_type_loads() {
    let mut w = GgufWriter::new();
    let datas: Vec<Vec<u8>> = ALL_TYPES
        .iter()
        .map(|ty| vec![ty.id() as u8; ty.type_size() * 2])
        .collect();
    for (ty, data) in ALL_TYPES.iter().zip(&datas) {
        let dims = [ty.block_size() as u64, 2];
        w.add_tensor(format!("t.{ty}"), &dims, *ty, data.as_slice())
            .unwrap();
    }
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(f.tensors.len(), ALL_TYPES.len());
    for ((info, ty), data) in f.tensors.iter().zip(ALL_TYPES).zip(&datas) {
        assert_eq!(info.ty, ty);
        assert_eq!(f.tensor_data(info), data.as_slice());
    }
}

/// A small valid file with every section: string array, nested array, three tensors.
fn small_valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("general.alignment", 32u32).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["<s>", "a", "bc"])
        .unwrap();
    w.add_metadata("t.scores", vec![0.5f32, -1.0]).unwrap();
    w.add_metadata("t.flag", true).unwrap();
    let nested = Value::Array(vec![Value::from(vec![1u16, 2]), Value::from(vec!["x"])]);
    w.add_metadata("t.nested", nested).unwrap();
    w.add_tensor("a", &[8], ishizuki_core::GgmlType::F32, vec![1u8; 32])
        .unwrap();
    w.add_tensor("b", &[32, 2], ishizuki_core::GgmlType::Q4_0, vec![2u8; 36])
        .unwrap();
    w.add_tensor("c", &[3], ishizuki_core::GgmlType::F16, vec![3u8; 6])
        .unwrap();
    w.to_bytes()
}

#[test]
fn truncation_at_every_byte_is_a_typed_error() {
    let full = small_valid_file();
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    let data_end = f
        .tensors
        .iter()
        .map(|t| f.data_offset + t.offset + t.n_bytes)
        .max()
        .unwrap();
    assert!(data_end < full.len() as u64, "the file ends in padding");
    let mut errors = 0;
    for cut in 0..full.len() {
        let result = parse(&full[..cut]).unwrap_or_else(|()| panic!("panicked at cut {cut}"));
        match result {
            Err(e) => {
                assert!(e.is_truncation(), "cut {cut}: {e:?}");
                assert!(
                    e.offset().is_some_and(|o| o <= cut as u64),
                    "cut {cut}: {e}"
                );
                errors += 1;
            }
            // Only cuts in the last tensor's trailing padding leave a complete file.
            Ok(_) => assert!(cut as u64 >= data_end, "cut {cut} parsed"),
        }
    }
    assert_eq!(errors, data_end);
}

/// xorshift64: deterministic, dependency-free mutation source.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn byte_mutations_never_panic() {
    let full = small_valid_file();
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    let header_end = f.data_offset as usize;
    // Every header byte set to each of a few telling values.
    for i in 0..header_end {
        for v in [0x00, 0x01, 0x7f, 0x80, 0xff] {
            let mut b = full.clone();
            b[i] = v;
            assert!(parse(&b).is_ok(), "panic with byte {i} = {v:#x}");
        }
    }
    // Random multi-byte mutations, some with truncation.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..20_000 {
        let mut b = full.clone();
        for _ in 0..1 + next(&mut state) % 4 {
            let i = (next(&mut state) % header_end as u64) as usize;
            b[i] = next(&mut state) as u8;
        }
        if round % 3 == 0 {
            b.truncate((next(&mut state) % full.len() as u64) as usize);
        }
        assert!(parse(&b).is_ok(), "panic in round {round}");
    }
}
