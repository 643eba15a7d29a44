//! `ishizuki` end to end on the real models against the repo's fixtures/ref-*.json: greedy
//! tokens up to the first step whose reference margin is below 0.3, and passage perplexity within
//! 1%. Models come from ISHIZUKI_TEST_MODELS; with ISHIZUKI_REQUIRE_MODELS=1 (CI) a missing model
//! fails instead of skipping.
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The CPU pool spins; two engines at once on two cores would only slow each other down.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const MARGIN: f64 = 0.3;

fn model_path(file: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("ISHIZUKI_TEST_MODELS")
        .map_or_else(|| "/work/cache/models".into(), PathBuf::from);
    let path = dir.join(file);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("ISHIZUKI_REQUIRE_MODELS").is_none(),
        "{} is missing",
        path.display()
    );
    eprintln!(
        "skipping: {} not found (set ISHIZUKI_TEST_MODELS)",
        path.display()
    );
    None
}

fn fixtures_dir() -> PathBuf {
    std::env::var_os("ISHIZUKI_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"),
        PathBuf::from,
    )
}

fn ishizuki(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ishizuki"))
        .args(args)
        .output()
        .expect("ishizuki runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ishizuki {args:?} failed: {stderr}");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout}"))
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// How many leading tokens must agree: up to the end, or up to the first low-margin step.
fn steps_to_compare(margins: &[f64], n: usize) -> usize {
    margins
        .iter()
        .take(n)
        .position(|m| *m < MARGIN)
        .unwrap_or(n)
}

fn check_greedy_cases(model: &str, reference: &Value) {
    for (i, case) in reference["cases"].as_array().unwrap().iter().enumerate() {
        let want = u32s(&case["output_ids"]);
        let margins: Vec<f64> = case["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap())
            .collect();
        let n = want.len().to_string();
        let mut args = vec!["run", "-m", model, "--temp", "0", "--json", "-n", &n];
        let (prompt, system);
        if case["kind"] == "chat" {
            let messages = case["messages"].as_array().unwrap();
            let find = |role: &str| {
                messages
                    .iter()
                    .find(|m| m["role"] == role)
                    .map(|m| m["content"].as_str().unwrap().to_string())
            };
            prompt = find("user").expect("a user message");
            args.extend(["--chat", "-p", &prompt]);
            system = find("system");
            if let Some(s) = &system {
                args.extend(["--system", s]);
            }
        } else {
            prompt = case["prompt"].as_str().unwrap().to_string();
            args.extend(["-p", &prompt]);
        }
        let got = ishizuki(&args);
        assert_eq!(
            got["n_prompt"].as_u64().unwrap() as usize,
            case["prompt_ids"].as_array().unwrap().len(),
            "case {i}: prompt length"
        );
        let tokens = u32s(&got["tokens"]);
        let k = steps_to_compare(&margins, want.len());
        assert!(
            tokens.len() >= k,
            "case {i}: {} tokens generated, {k} to compare",
            tokens.len()
        );
        assert_eq!(
            tokens[..k],
            want[..k],
            "case {i}: greedy tokens differ before the first margin < {MARGIN}"
        );
        assert_eq!(got["n_gen"].as_u64().unwrap() as usize, tokens.len());
        eprintln!(
            "{model} case {i}: {k} of {} tokens compared and equal",
            want.len()
        );
    }
}

fn check_perplexity(model: &str, name: &str, reference: &Value) {
    for (i, p) in reference["passages"].as_array().unwrap().iter().enumerate() {
        let file = fixtures_dir().join(format!("ref-{name}-passage{i}.txt"));
        let got = ishizuki(&[
            "perplexity",
            "-m",
            model,
            "-f",
            file.to_str().unwrap(),
            "--ctx",
            "1024",
            "--json",
        ]);
        let (ppl, want) = (got["ppl"].as_f64().unwrap(), p["ppl"].as_f64().unwrap());
        eprintln!("{name} passage {i}: ppl {ppl:.4}, reference {want:.4}");
        assert_eq!(
            got["tokens"].as_u64().unwrap() as usize,
            p["ids"].as_array().unwrap().len() - 1,
            "passage {i}: tokens scored"
        );
        assert!(
            (ppl / want - 1.0).abs() < 0.01,
            "{name} passage {i}: ppl {ppl} vs reference {want}"
        );
    }
}

fn check_model(file: &str, name: &str) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = model_path(file) else { return };
    let text = std::fs::read_to_string(fixtures_dir().join(format!("ref-{name}.json")))
        .expect("reference fixture");
    let reference: Value = serde_json::from_str(&text).unwrap();
    let model = path.to_str().unwrap();
    check_greedy_cases(model, &reference);
    check_perplexity(model, name, &reference);
}

#[test]
fn smollm2_135m_matches_reference() {
    check_model("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m");
}

#[test]
fn gemma3_270m_matches_reference() {
    check_model("gemma-3-270m-q4_k_m.gguf", "gemma3-270m");
}

#[test]
fn qwen2_5_coder_0_5b_matches_reference() {
    check_model(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-0.5b",
    );
}

/// Runs `ishizuki` expecting failure; returns stderr.
fn ishizuki_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ishizuki"))
        .args(args)
        .output()
        .expect("ishizuki runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "ishizuki {args:?} should fail cleanly: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn tiny_llama() -> String {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny-llama.gguf");
    p.to_str().unwrap().to_string()
}

#[test]
fn same_seed_same_output() {
    let model = tiny_llama();
    let args = [
        "run",
        "-m",
        &model,
        "-p",
        "hello world",
        "-n",
        "24",
        "--temp",
        "1.0",
        "--seed",
        "42",
        "--json",
        "-t",
        "1",
    ];
    let (a, b) = (ishizuki(&args), ishizuki(&args));
    assert_eq!(a["tokens"], b["tokens"]);
    assert_eq!(u32s(&a["tokens"]).len(), 24);
    let other = ishizuki(&[
        "run",
        "-m",
        &model,
        "-p",
        "hello world",
        "-n",
        "24",
        "--temp",
        "1.0",
        "--seed",
        "7",
        "--json",
        "-t",
        "1",
    ]);
    assert_ne!(
        a["tokens"], other["tokens"],
        "a different seed gives a different sample"
    );
}

#[test]
fn stdout_carries_only_the_text() {
    let model = tiny_llama();
    let json = ishizuki(&[
        "run", "-m", &model, "-p", "hello", "-n", "8", "--temp", "0", "--json", "-t", "1",
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_ishizuki"))
        .args([
            "run", "-m", &model, "-p", "hello", "-n", "8", "--temp", "0", "-t", "1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{}\n", json["text"].as_str().unwrap())
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("tok/s"));
}

#[test]
fn prompt_longer_than_the_context_is_an_error() {
    let model = tiny_llama();
    let err = ishizuki_fails(&[
        "run",
        "-m",
        &model,
        "-p",
        &"hello ".repeat(50),
        "--ctx",
        "16",
        "-t",
        "1",
    ]);
    assert!(
        err.contains("does not fit the context of 16 tokens"),
        "{err}"
    );
}

#[test]
fn bad_inputs_get_clear_errors() {
    let err = ishizuki_fails(&["run", "-m", "no-such-model", "-p", "x"]);
    assert!(err.contains("no-such-model"), "{err}");
    let dir = std::env::temp_dir().join(format!("ishizuki-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let truncated = dir.join("truncated.gguf");
    let bytes = std::fs::read(tiny_llama()).unwrap();
    std::fs::write(&truncated, &bytes[..1000]).unwrap();
    let err = ishizuki_fails(&["inspect", truncated.to_str().unwrap()]);
    assert!(err.contains("gguf: byte"), "{err}");
    let err = ishizuki_fails(&["run", "-m", truncated.to_str().unwrap(), "-p", "x"]);
    assert!(err.contains("gguf: byte"), "{err}");
    let err = ishizuki_fails(&["run", "-m", &tiny_llama(), "-p", "x", "--temp", "-1"]);
    assert!(err.contains("--temp"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn inspect_lists_metadata_and_tensors() {
    let out = Command::new(env!("CARGO_BIN_EXE_ishizuki"))
        .args(["inspect", &tiny_llama()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("general.architecture = \"llama\""), "{text}");
    assert!(
        text.contains("blk.1.ffn_down.weight") && text.contains("Q4_K"),
        "{text}"
    );
}

#[test]
fn tokenize_and_chat_on_the_real_models() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = model_path("SmolLM2-135M-Instruct.Q4_1.gguf") {
        let got = ishizuki(&[
            "tokenize",
            "-m",
            path.to_str().unwrap(),
            "-p",
            "Hello world",
            "--json",
        ]);
        assert_eq!(u32s(&got["ids"]), [19556, 905]);
    }
    if let Some(path) = model_path("gemma-3-270m-q4_k_m.gguf") {
        let got = ishizuki(&[
            "tokenize",
            "-m",
            path.to_str().unwrap(),
            "-p",
            "Hello world",
            "--json",
        ]);
        assert_eq!(u32s(&got["ids"])[0], 2, "gemma adds BOS");
        let got = ishizuki(&[
            "tokenize",
            "-m",
            path.to_str().unwrap(),
            "-p",
            "Hello world",
            "--json",
            "--no-bos",
        ]);
        assert_ne!(u32s(&got["ids"])[0], 2);
        let err = ishizuki_fails(&["run", "-m", path.to_str().unwrap(), "-p", "hi", "--chat"]);
        assert!(err.contains("no chat template"), "{err}");
    }
}

/// 20 prompts through `run` on SmolLM2, greedy: drafting on (the default) gives the tokens
/// `--no-draft` gives, and reports what it did in `--json`.
#[test]
fn run_output_is_the_same_with_drafting_on_and_off() {
    let Some(path) = model_path("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let model = path.to_str().unwrap();
    let code = "def area(width, height):\n    if width < 0 or height < 0:\n        raise ValueError(\"negative\")\n    return width * height\n";
    let prompts = [
        format!("Rename width to w in this function and reply with the code only:\n{code}"),
        format!("Rename height to h in this function and reply with the code only:\n{code}"),
        format!("Add a docstring to this function:\n{code}"),
        format!("Repeat this code exactly:\n{code}"),
        "Write a Python function that reverses a string.".into(),
        "Write a JavaScript function that sums an array.".into(),
        "What is the capital of France?".into(),
        "Tell me a short story about a robot.".into(),
        "Explain photosynthesis in two sentences.".into(),
        "Why is the sky blue?".into(),
        "List five colors, one per line.".into(),
        "List the days of the week.".into(),
        "Give three tips for sleeping well as bullet points.".into(),
        "Count from 1 to 20 separated by commas.".into(),
        "Repeat 'hello world' ten times.".into(),
        "Traduis en français : I like apples.".into(),
        "¿Cuál es la capital de España?".into(),
        "Schreibe einen Satz über Hunde.".into(),
        "用中文说你好。".into(),
        "Write a haiku about the sea.".into(),
    ];
    let (mut drafted, mut kept) = (0, 0);
    for p in &prompts {
        let args = [
            "run", "-m", model, "--chat", "-p", p, "--temp", "0", "-n", "64", "--json",
        ];
        let on = ishizuki(&args);
        let off = ishizuki(&[&args[..], &["--no-draft"]].concat());
        assert_eq!(u32s(&on["tokens"]), u32s(&off["tokens"]), "{p}");
        assert_eq!(on["text"], off["text"], "{p}");
        assert!(off["draft"].is_null(), "{p}: {off}");
        let d = &on["draft"];
        assert_eq!(d["source"], "lookup", "{p}: {on}");
        drafted += d["drafted_tokens"].as_u64().unwrap();
        kept += d["accepted_tokens"].as_u64().unwrap();
    }
    assert!(kept > 50 && kept <= drafted, "kept {kept} of {drafted}");
}

/// A draft model of another vocabulary is refused at load, naming the difference.
#[test]
fn a_draft_model_of_another_vocabulary_is_an_error() {
    let (Some(smol), Some(gemma)) = (
        model_path("SmolLM2-135M-Instruct.Q4_1.gguf"),
        model_path("gemma-3-270m-q4_k_m.gguf"),
    ) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (smol, gemma) = (smol.to_str().unwrap(), gemma.to_str().unwrap());
    let err = ishizuki_fails(&[
        "run",
        "-m",
        smol,
        "--draft-model",
        gemma,
        "-p",
        "Hi",
        "-n",
        "2",
    ]);
    assert!(
        err.contains("the draft model's vocabulary differs from the model's"),
        "{err}"
    );
    // the same vocabulary loads and drafts (SmolLM2 for itself)
    let prompt = "1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3,";
    let args = [
        "run", "-m", smol, "-p", prompt, "--temp", "0", "-n", "16", "--json",
    ];
    let out = ishizuki(&[&args[..], &["--draft-model", smol]].concat());
    let plain = ishizuki(&[&args[..], &["--no-draft"]].concat());
    assert_eq!(u32s(&out["tokens"]), u32s(&plain["tokens"]));
    assert_eq!(out["draft"]["source"], "model", "{out}");
}
