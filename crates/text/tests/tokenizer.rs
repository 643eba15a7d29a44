//! Tokenizers against the Hugging Face reference ids in the repo's fixtures/ (real GGUF
//! vocabularies, found through ISHIZUKI_TEST_MODELS; ISHIZUKI_FIXTURES overrides the directory),
//! plus tiny synthetic vocabularies built with `from_spec`.
use ishizuki_formats::GgufFile;
use ishizuki_text::{
    SpmFlavor, StreamDecoder, TokenType, Tokenizer, TokenizerError, TokenizerModel, TokenizerSpec,
};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

fn fixtures_dir() -> PathBuf {
    std::env::var_os("ISHIZUKI_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"))
}

fn models_dir() -> PathBuf {
    std::env::var_os("ISHIZUKI_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/cache/models"))
}

fn read_json(name: &str) -> Value {
    let path = fixtures_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

struct Model {
    /// Fixture name stem: `smollm2-135m`, `gemma3-270m`, `qwen2.5-coder-0.5b`.
    stem: &'static str,
    tokenizer: Tokenizer,
}

fn load(stem: &'static str, file: &str) -> Option<Model> {
    let path = models_dir().join(file);
    if !path.exists() {
        println!(
            "skipping: {} not found (set ISHIZUKI_TEST_MODELS)",
            path.display()
        );
        return None;
    }
    let gguf = GgufFile::open(&path).unwrap();
    let tokenizer = Tokenizer::from_gguf(&gguf).unwrap();
    Some(Model { stem, tokenizer })
}

fn smollm() -> Option<&'static Model> {
    static M: OnceLock<Option<Model>> = OnceLock::new();
    M.get_or_init(|| load("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf"))
        .as_ref()
}

fn gemma() -> Option<&'static Model> {
    static M: OnceLock<Option<Model>> = OnceLock::new();
    M.get_or_init(|| load("gemma3-270m", "gemma-3-270m-q4_k_m.gguf"))
        .as_ref()
}

fn qwen() -> Option<&'static Model> {
    static M: OnceLock<Option<Model>> = OnceLock::new();
    M.get_or_init(|| {
        load(
            "qwen2.5-coder-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        )
    })
    .as_ref()
}

fn models() -> Vec<&'static Model> {
    [smollm(), gemma(), qwen()].into_iter().flatten().collect()
}

/// `(text, ids)` of tok-<model>.json: no BOS/EOS, special-token text parsed.
fn tok_cases(m: &Model) -> Vec<(String, Vec<u32>)> {
    let doc = read_json(&format!("tok-{}.json", m.stem));
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["text"].as_str().unwrap().to_owned(), ids(&c["ids"])))
        .collect()
}

fn assert_all_equal(what: &str, failures: Vec<String>, total: usize) {
    assert!(
        failures.is_empty(),
        "{what}: {} of {total} differ:\n{}",
        failures.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn tok_fixtures_match_exactly() {
    for m in models() {
        let cases = tok_cases(m);
        let failures: Vec<String> = cases
            .iter()
            .filter_map(|(text, want)| {
                let got = m.tokenizer.encode(text, false, true);
                (&got != want).then(|| format!("{text:?}\n  want {want:?}\n  got  {got:?}"))
            })
            .collect();
        assert_all_equal(m.stem, failures, cases.len());
    }
}

#[test]
fn reference_prompts_match_exactly() {
    for m in models() {
        let doc = read_json(&format!("ref-{}.json", m.stem));
        let cases = doc["cases"].as_array().unwrap();
        let mut failures = Vec::new();
        for c in cases {
            let want = ids(&c["prompt_ids"]);
            let got = match c["kind"].as_str().unwrap() {
                "chat" => m
                    .tokenizer
                    .encode(c["rendered"].as_str().unwrap(), false, true),
                _ => m
                    .tokenizer
                    .encode(c["prompt"].as_str().unwrap(), true, true),
            };
            if got != want {
                failures.push(format!("{}\n  want {want:?}\n  got  {got:?}", c["kind"]));
            }
        }
        assert_all_equal(m.stem, failures, cases.len());
    }
}

#[test]
fn reference_passages_match_exactly() {
    for m in models() {
        let doc = read_json(&format!("ref-{}.json", m.stem));
        let passages = doc["passages"].as_array().unwrap();
        for (i, p) in passages.iter().enumerate() {
            let path = fixtures_dir().join(format!("ref-{}-passage{i}.txt", m.stem));
            let text = std::fs::read_to_string(&path).unwrap();
            let want = ids(&p["ids"]);
            let got = m.tokenizer.encode(&text, true, true);
            let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
            assert_eq!(
                got.len(),
                want.len(),
                "{} passage {i}: length (first difference at {first_diff:?})",
                m.stem
            );
            assert_eq!(first_diff, None, "{} passage {i}", m.stem);
        }
    }
}

#[test]
fn decode_round_trips_fixture_texts() {
    for m in models() {
        for (text, want) in tok_cases(m) {
            assert_eq!(m.tokenizer.decode(&want, false), text, "{}", m.stem);
        }
    }
}

#[test]
fn decode_skips_special_tokens_on_request() {
    let Some(m) = smollm() else { return };
    let t = &m.tokenizer;
    let ids = t.encode("<|im_start|>user\nhi<|im_end|>", false, true);
    assert_eq!(ids[0], t.token_to_id("<|im_start|>").unwrap());
    assert_eq!(t.decode(&ids, true), "user\nhi");
    assert_eq!(t.decode(&ids, false), "<|im_start|>user\nhi<|im_end|>");
    // Without parse_special the spelling is ordinary text.
    let plain = t.encode("<|im_start|>", false, false);
    assert!(plain.len() > 1);
    assert_eq!(t.decode(&plain, true), "<|im_start|>");
}

#[test]
fn stream_decoder_matches_decode_and_never_splits_a_character() {
    for m in models() {
        for (text, want) in tok_cases(m) {
            let mut stream = StreamDecoder::new(&m.tokenizer, false);
            let mut joined = String::new();
            for &id in &want {
                let chunk = stream.push(&m.tokenizer, id);
                assert!(
                    !chunk.contains(char::REPLACEMENT_CHARACTER),
                    "{}: {text:?} chunk {chunk:?}",
                    m.stem
                );
                joined.push_str(&chunk);
            }
            joined.push_str(&stream.finish());
            assert_eq!(
                joined,
                m.tokenizer.decode(&want, false),
                "{}: {text:?}",
                m.stem
            );
        }
    }
}

#[test]
fn stream_decoder_holds_split_characters_until_complete() {
    for m in models() {
        let t = &m.tokenizer;
        // 𠜎 and 𓀀 are not in Gemma's vocabulary: they come out as byte tokens.
        let text = "한국어 텍스트 👩‍👩‍👧‍👦 𠜎𓀀";
        let ids = t.encode(text, false, false);
        let mut stream = StreamDecoder::new(t, false);
        let mut held_back = false;
        let mut joined = String::new();
        for &id in &ids {
            joined.push_str(&stream.push(t, id));
            held_back |= stream.has_pending();
        }
        assert!(!stream.has_pending());
        assert_eq!(joined, text, "{}", m.stem);
        // Both vocabularies spell some of these characters with more than one token.
        assert!(
            held_back,
            "{}: no character was split across tokens",
            m.stem
        );
        // A cut-off character is flushed as U+FFFD.
        let mut lone = StreamDecoder::new(t, false);
        let first_split = ids.iter().position(|&id| {
            lone = StreamDecoder::new(t, false);
            lone.push(t, id);
            lone.has_pending()
        });
        if first_split.is_some() {
            assert_eq!(lone.finish(), "\u{fffd}");
        }
    }
}

#[test]
fn special_ids_and_end_of_generation() {
    if let Some(m) = smollm() {
        let t = &m.tokenizer;
        assert_eq!(t.model(), TokenizerModel::Bpe);
        assert_eq!(t.n_vocab(), 49152);
        assert_eq!(
            (t.bos_id(), t.eos_id(), t.add_bos()),
            (Some(1), Some(2), false)
        );
        let im_end = t.token_to_id("<|im_end|>").unwrap();
        let eot = t.token_to_id("<|endoftext|>").unwrap();
        assert!(t.is_eog(im_end) && t.is_eog(eot));
        assert!(!t.is_eog(t.token_to_id("<|im_start|>").unwrap()));
        assert_eq!(t.token_bytes(t.token_to_id("Ġthe").unwrap()), b" the");
    }
    if let Some(m) = gemma() {
        let t = &m.tokenizer;
        assert_eq!(t.model(), TokenizerModel::Spm);
        assert_eq!(t.n_vocab(), 262144);
        assert_eq!(
            (t.bos_id(), t.eos_id(), t.add_bos()),
            (Some(2), Some(1), true)
        );
        assert!(t.is_eog(1) && t.is_eog(t.token_to_id("<end_of_turn>").unwrap()));
        assert!(!t.is_eog(t.token_to_id("<start_of_turn>").unwrap()));
        assert_eq!(t.token_type(107), Some(TokenType::UserDefined));
        assert_eq!(t.token_bytes(t.token_to_id("<0x0A>").unwrap()), b"\n");
        assert_eq!(t.token_bytes(t.token_to_id("▁the").unwrap()), b" the");
        assert_eq!(t.encode("hi", true, false)[0], 2);
    }
    if let Some(m) = qwen() {
        let t = &m.tokenizer;
        assert_eq!(t.model(), TokenizerModel::Bpe);
        assert_eq!(t.n_vocab(), 151936);
        assert_eq!(
            (t.bos_id(), t.eos_id(), t.add_bos()),
            (Some(151643), Some(151645), false)
        );
        // <|im_end|> is the eos; <|endoftext|> ends a completion too.
        assert!(t.is_eog(151645) && t.is_eog(151643));
        assert!(!t.is_eog(t.token_to_id("<|im_start|>").unwrap()));
        let tool_call = t.token_to_id("<tool_call>").unwrap();
        assert_eq!(t.token_type(tool_call), Some(TokenType::UserDefined));
        assert_eq!(t.encode("hi", true, false), t.encode("hi", false, false));
    }
}

// ---- synthetic vocabularies -------------------------------------------------------------

fn tiny_bpe() -> Tokenizer {
    // Byte-level spellings: "Ġ" is the space byte.
    let tokens = [
        "<|end|>", "a", "b", "c", "Ġ", "ab", "Ġa", "Ġab", "abc", "<s>",
    ];
    let types = [3, 1, 1, 1, 1, 1, 1, 1, 1, 3];
    Tokenizer::from_spec(TokenizerSpec {
        model: TokenizerModel::Bpe,
        pre: "gpt2".into(),
        tokens: tokens.iter().map(|s| s.to_string()).collect(),
        token_types: types.iter().map(|&c| TokenType::from_code(c)).collect(),
        merges: ["Ġ a", "a b", "Ġa b", "ab c"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        bos_id: Some(9),
        eos_id: Some(0),
        ..TokenizerSpec::default()
    })
    .unwrap()
}

#[test]
fn bpe_merges_by_rank_within_pre_tokens() {
    let t = tiny_bpe();
    // "abc ab" -> pre-tokens "abc", " ab"; "Ġ a" outranks "a b", and "ab c" follows "a b".
    assert_eq!(t.encode("abc ab", false, false), [8, 7]);
    assert_eq!(t.encode("cab", false, false), [3, 5]);
    assert_eq!(t.encode("ab<|end|>", false, true), [5, 0]);
    assert!(t.is_eog(0));
    // BPE adds no BOS unless asked.
    assert_eq!(t.encode("a", true, false), [1]);
    assert_eq!(t.decode(&[8, 7, 0], true), "abc ab");
}

fn tiny_spm(add_space_prefix: bool) -> Tokenizer {
    let mut tokens: Vec<String> = [
        "<unk>", "<s>", "</s>", "▁", "h", "i", "▁h", "▁hi", "hi", "  ",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut types = vec![2, 3, 3, 1, 1, 1, 1, 1, 1, 4];
    let mut scores = vec![0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -3.0, -1.5, -5.0, 0.0];
    for b in 0..=255u32 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    Tokenizer::from_spec(TokenizerSpec {
        model: TokenizerModel::Spm,
        tokens,
        token_types: types.into_iter().map(TokenType::from_code).collect(),
        scores,
        bos_id: Some(1),
        eos_id: Some(2),
        unk_id: Some(0),
        add_space_prefix: Some(add_space_prefix),
        ..TokenizerSpec::default()
    })
    .unwrap()
}

#[test]
fn spm_merges_by_score_and_falls_back_to_bytes() {
    let t = tiny_spm(false);
    // "▁h"+"i" (score -1.5) beats "h"+"i" (-5): "▁hi" forms from "▁h" first (-3) then "▁hi".
    assert_eq!(t.encode(" hi", false, false), [7]);
    assert_eq!(t.encode("hi", false, false), [8]);
    // "é" is not in the vocabulary: its two UTF-8 bytes.
    let byte = |b: u32| 10 + b;
    assert_eq!(t.encode("é", false, false), [byte(0xC3), byte(0xA9)]);
    assert_eq!(t.decode(&t.encode("é hi", false, false), false), "é hi");
    // The user-defined "  " is matched before the model runs.
    assert_eq!(t.encode("hi  hi", false, false), [8, 9, 8]);
    // SentencePiece adds BOS by default.
    assert_eq!(t.encode("hi", true, false), [1, 8]);
}

#[test]
fn spm_space_prefix_is_added_and_dropped_again() {
    let t = tiny_spm(true);
    let ids = t.encode("hi", true, false);
    assert_eq!(ids, [1, 7]);
    assert_eq!(t.decode(&ids, true), "hi");
    let mut stream = StreamDecoder::new(&t, true);
    let text: String = ids.iter().map(|&id| stream.push(&t, id)).collect();
    assert_eq!(text, "hi");
    let mut continuing = StreamDecoder::continuation(true);
    assert_eq!(continuing.push(&t, 7), " hi");
    // Metaspace's "first" scheme: no second space, and none after a leading special token.
    assert_eq!(t.encode(" hi", false, false), [7]);
    assert_eq!(t.encode("<s>hi", false, true), [1, 8]);
}

#[test]
fn tokenizer_and_stream_decoder_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Tokenizer>();
    shareable::<StreamDecoder>();
}

fn tiny_flavored(flavor: SpmFlavor) -> Tokenizer {
    let tokens = ["<unk>", "  ", "▁", "a", "▁a", "ab", "b"];
    let types = [2, 4, 1, 1, 1, 1, 1];
    let scores = [0.0, -1.0, -2.0, -3.0, -10.0, 0.0, -3.0];
    Tokenizer::from_spec(TokenizerSpec {
        model: TokenizerModel::Spm,
        tokens: tokens.iter().map(|s| s.to_string()).collect(),
        token_types: types.into_iter().map(TokenType::from_code).collect(),
        scores: scores.to_vec(),
        unk_id: Some(0),
        add_space_prefix: Some(false),
        spm_flavor: flavor,
        ..TokenizerSpec::default()
    })
    .unwrap()
}

#[test]
fn gemma_flavor_merges_by_position_and_respells_space_runs() {
    let by_score = tiny_flavored(SpmFlavor::Default);
    let by_position = tiny_flavored(SpmFlavor::Gemma);
    // "ab" scores best, but "▁a" comes first in the vocabulary.
    assert_eq!(by_score.encode(" ab", false, false), [2, 5]);
    assert_eq!(by_position.encode(" ab", false, false), [4, 6]);
    // The stored "  " is an ordinary entry spelled "▁▁" for Gemma, matched in raw text otherwise.
    assert_eq!(by_position.token_to_id("▁▁"), Some(1));
    assert_eq!(by_score.token_to_id("  "), Some(1));
    assert_eq!(by_position.encode("  b", false, false), [1, 6]);
    assert_eq!(by_position.decode(&[1, 6], false), "  b");
}

#[test]
fn generated_reference_outputs_decode_to_their_text() {
    for m in models() {
        let t = &m.tokenizer;
        let doc = read_json(&format!("ref-{}.json", m.stem));
        for c in doc["cases"].as_array().unwrap() {
            let out = ids(&c["output_ids"]);
            let want = c["output_text"].as_str().unwrap();
            let text = t.decode(&out, false);
            // The reference text sometimes leaves out the closing EOS spelling.
            let eos_text = t.token_text(t.eos_id().unwrap()).unwrap();
            let matches = text == want || text.strip_suffix(eos_text) == Some(want);
            assert!(matches, "{}: {text:?} vs {want:?}", m.stem);
        }
    }
}

#[test]
fn malformed_specs_are_typed_errors() {
    let base = TokenizerSpec {
        model: TokenizerModel::Bpe,
        tokens: vec!["a".into(), "b".into()],
        ..TokenizerSpec::default()
    };
    let cases = [
        TokenizerSpec {
            tokens: vec![],
            ..base.clone()
        },
        TokenizerSpec {
            scores: vec![0.0],
            ..base.clone()
        },
        TokenizerSpec {
            eos_id: Some(2),
            ..base.clone()
        },
        TokenizerSpec {
            merges: vec!["ab".into()],
            ..base.clone()
        },
    ];
    for spec in cases {
        let err = Tokenizer::from_spec(spec).err().expect("must fail");
        assert!(
            matches!(
                err,
                TokenizerError::Missing(_) | TokenizerError::Invalid { .. }
            ),
            "{err}"
        );
    }
    assert!(Tokenizer::from_spec(base).is_ok());
}
