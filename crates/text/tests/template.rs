//! Chat-template rendering against transformers' `apply_chat_template` (goldens made by
//! scripts/gen_template_goldens.py), the real SmolLM2 GGUF template, and the sandbox limits.

use ishizuki_formats::GgufFile;
use ishizuki_text::{ChatMessage, ChatTemplate, TemplateError, TemplateLimits};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const GOLDENS: &str = include_str!("data/template_goldens.json");

fn goldens() -> Value {
    serde_json::from_str(GOLDENS).expect("golden file is JSON")
}

fn models_dir() -> PathBuf {
    std::env::var_os("ISHIZUKI_TEST_MODELS")
        .map_or_else(|| "/work/cache/models".into(), PathBuf::from)
}

fn fixtures_dir() -> PathBuf {
    std::env::var_os("ISHIZUKI_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"),
        PathBuf::from,
    )
}

fn compile_golden_templates(golden: &Value) -> HashMap<String, ChatTemplate> {
    let templates = golden["templates"].as_object().expect("templates object");
    templates
        .iter()
        .map(|(name, t)| {
            let source = t["source"].as_str().expect("source");
            let bos = t["bos_token"].as_str().expect("bos_token");
            let eos = t["eos_token"].as_str().expect("eos_token");
            let compiled =
                ChatTemplate::new(source, bos, eos).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name.clone(), compiled)
        })
        .collect()
}

/// Renders one golden case; `None` when it matches, else a description of the mismatch.
fn check_case(templates: &HashMap<String, ChatTemplate>, case: &Value) -> Option<String> {
    let name = case["name"].as_str().unwrap_or("?");
    let template = &templates[case["template"].as_str().expect("template name")];
    let messages = case["messages"].as_array().expect("messages");
    let add_generation_prompt = case["add_generation_prompt"].as_bool().expect("flag");
    let extra = Some(&case["extra"]).filter(|v| !v.is_null());
    let rendered = template.render(messages, add_generation_prompt, extra);
    match (case.get("expected"), case.get("error"), rendered) {
        (Some(expected), _, Ok(text)) if expected.as_str() == Some(text.as_str()) => None,
        (_, Some(error), Err(TemplateError::Raised(message)))
            if error.as_str() == Some(message.as_str()) =>
        {
            None
        }
        (None, None, Err(TemplateError::Render(_))) if case.get("engine_error").is_some() => None,
        (expected, error, got) => Some(format!(
            "{name}: expected {:?} / error {:?}\n  got {got:?}",
            expected.and_then(Value::as_str),
            error.and_then(Value::as_str),
        )),
    }
}

#[test]
fn goldens_match_transformers_byte_for_byte() {
    let golden = goldens();
    let templates = compile_golden_templates(&golden);
    let cases = golden["cases"].as_array().expect("cases");
    assert!(cases.len() >= 25, "golden file lost cases");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| check_case(&templates, case))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn long_conversations_fit_the_default_limits() {
    let golden = goldens();
    let templates = compile_golden_templates(&golden);
    let cases = golden["cases"].as_array().expect("cases");
    let with_tools = cases
        .iter()
        .find(|c| c["name"] == "llama3_tools_in_user")
        .expect("tools case");
    let tools = json!({ "tools": with_tools["extra"]["tools"] });
    let mut messages = vec![json!({"role": "system", "content": "sys"})];
    for turn in 0..2000 {
        messages.push(json!({"role": "user", "content": format!("question {turn}")}));
        messages.push(json!({"role": "assistant", "content": format!("answer {turn}")}));
    }
    for name in ["qwen3", "llama3_1", "qwen2_5", "smollm2"] {
        let rendered = templates[name].render(&messages, true, Some(&tools));
        let text = rendered.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains("answer 1999"), "{name}");
    }
}

#[test]
fn goldens_cover_every_template_and_raise_exception() {
    let golden = goldens();
    let cases = golden["cases"].as_array().expect("cases");
    for name in golden["templates"].as_object().expect("templates").keys() {
        let count = cases
            .iter()
            .filter(|c| c["template"] == name.as_str())
            .count();
        assert!(count > 0, "template {name} has no case");
    }
    let smollm2 = cases.iter().filter(|c| c["template"] == "smollm2").count();
    assert!(smollm2 >= 10, "only {smollm2} SmolLM2 cases");
    assert!(
        cases.iter().any(|c| c.get("error").is_some()),
        "no raise_exception case"
    );
}

fn smollm2_template_from_gguf() -> Option<ChatTemplate> {
    let path = models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        eprintln!(
            "skipping: {} not found (set ISHIZUKI_TEST_MODELS)",
            path.display()
        );
        return None;
    }
    let gguf = GgufFile::open(&path).expect("open SmolLM2 GGUF");
    let source = gguf
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .expect("chat template");
    let tokens = gguf
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .expect("token list");
    let token = |key: &str| {
        let id = gguf
            .get(key)
            .and_then(|v| v.as_u64())
            .expect("special token id") as usize;
        tokens[id].as_str().expect("token text").to_string()
    };
    let (bos, eos) = (
        token("tokenizer.ggml.bos_token_id"),
        token("tokenizer.ggml.eos_token_id"),
    );
    Some(ChatTemplate::new(source, &bos, &eos).expect("SmolLM2 template compiles"))
}

fn fixture_chat_cases() -> Vec<Value> {
    let path = fixtures_dir().join("ref-smollm2-135m.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fixture: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let cases = fixture["cases"].as_array().expect("fixture cases");
    cases
        .iter()
        .filter(|c| c["kind"] == "chat")
        .cloned()
        .collect()
}

#[test]
fn real_gguf_template_renders_reference_chat_cases() {
    let Some(template) = smollm2_template_from_gguf() else {
        return;
    };
    let chats = fixture_chat_cases();
    assert!(!chats.is_empty(), "fixture has no chat case");
    for chat in chats {
        let messages = chat["messages"].as_array().expect("messages");
        let rendered = template.render(messages, true, None).expect("render");
        assert_eq!(rendered, chat["rendered"].as_str().expect("rendered"));
    }
}

#[test]
fn real_gguf_template_equals_golden_source() {
    let Some(from_gguf) = smollm2_template_from_gguf() else {
        return;
    };
    let golden = goldens();
    let templates = compile_golden_templates(&golden);
    let messages = [
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": "yo"}),
    ];
    for prompt in [false, true] {
        let expected = templates["smollm2"]
            .render(&messages, prompt, None)
            .expect("golden render");
        assert_eq!(
            from_gguf
                .render(&messages, prompt, None)
                .expect("gguf render"),
            expected
        );
    }
}

fn simple(source: &str) -> ChatTemplate {
    ChatTemplate::new(source, "<s>", "</s>").expect("compiles")
}

fn user(content: &str) -> Vec<Value> {
    vec![ChatMessage::new("user", content).into()]
}

#[test]
fn runaway_loops_run_out_of_fuel_quickly() {
    let template =
        simple("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    let start = Instant::now();
    let result = template.render(&user("x"), false, None);
    assert!(
        matches!(result, Err(TemplateError::Fuel { limit }) if limit == TemplateLimits::DEFAULT.fuel),
        "{result:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
}

/// Templates that grow a value without printing or looping much: each must fail its render
/// with `MemoryExceeded`, and the next render must work.
#[test]
fn memory_bombs_fail_the_render_not_the_process() {
    let bombs = [
        "{% set ns = namespace(s='a') %}{% for i in range(36) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
        "{% set ns = namespace(s='x' * 90000000) %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s[:3] }}",
    ];
    for source in bombs {
        let result = simple(source).render(&user("x"), false, None);
        assert!(
            matches!(result, Err(TemplateError::MemoryExceeded { limit }) if Some(limit) == TemplateLimits::DEFAULT.max_memory_bytes),
            "{source}: {result:?}"
        );
    }
    let fine = simple("{{ messages[0].content }}!").render(&user("hi"), false, None);
    assert_eq!(fine.unwrap(), "hi!");
}

#[test]
fn errors_inside_the_sandbox_keep_their_kind() {
    let raised = simple("{{ raise_exception('no system role') }}").render(&user("x"), false, None);
    assert!(
        matches!(&raised, Err(TemplateError::Raised(m)) if m == "no system role"),
        "{raised:?}"
    );
    let unbounded = simple("{{ messages[0].content }}").with_limits(TemplateLimits {
        max_memory_bytes: None,
        ..TemplateLimits::DEFAULT
    });
    assert_eq!(
        unbounded.render(&user("in process"), false, None).unwrap(),
        "in process"
    );
}

#[test]
fn huge_output_hits_the_size_limit() {
    let template = simple("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    let result = template.render(&user("x"), false, None);
    assert!(
        matches!(result, Err(TemplateError::OutputTooLarge { limit }) if limit == TemplateLimits::DEFAULT.max_output_bytes),
        "{result:?}"
    );
}

#[test]
fn limits_are_configurable() {
    let limits = TemplateLimits {
        max_output_bytes: 10,
        fuel: 1_000,
        ..TemplateLimits::DEFAULT
    };
    let template = simple("{{ messages[0].content }}").with_limits(limits);
    assert_eq!(
        template
            .render(&user("0123456789"), false, None)
            .expect("fits"),
        "0123456789"
    );
    let too_long = template.render(&user("0123456789A"), false, None);
    assert!(
        matches!(too_long, Err(TemplateError::OutputTooLarge { limit: 10 })),
        "{too_long:?}"
    );
    let looping = simple("{% for i in range(2000) %}{% endfor %}").with_limits(limits);
    assert!(matches!(
        looping.render(&user("x"), false, None),
        Err(TemplateError::Fuel { limit: 1_000 })
    ));
}

#[test]
fn syntax_errors_are_typed() {
    let err = ChatTemplate::new("{% for m in messages %}", "", "").expect_err("unclosed for");
    assert!(matches!(err, TemplateError::Syntax(_)), "{err:?}");
}

#[test]
fn bad_inputs_are_typed_errors() {
    let template = simple("{{ messages | length }}");
    assert!(matches!(
        template.render(&[], false, None),
        Err(TemplateError::InvalidInput(_))
    ));
    assert!(matches!(
        template.render(&[json!("text")], false, None),
        Err(TemplateError::InvalidInput(_))
    ));
    let extra = json!(["not", "an", "object"]);
    assert!(matches!(
        template.render(&user("x"), false, Some(&extra)),
        Err(TemplateError::InvalidInput(_))
    ));
    let undefined_attr = simple("{{ nothing.here }}").render(&user("x"), false, None);
    assert!(
        matches!(undefined_attr, Err(TemplateError::Render(_))),
        "{undefined_attr:?}"
    );
}

#[test]
fn variables_and_extras_reach_the_template() {
    let template =
        simple("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ who }}");
    let extra = json!({"who": "me", "eos_token": "<END>"});
    let rendered = template
        .render(&user("x"), true, Some(&extra))
        .expect("render");
    assert_eq!(rendered, "<s>|<END>|True|None|me");
}

#[test]
fn strftime_now_formats_the_local_time() {
    let template = simple("{{ strftime_now('%Y') }}/{{ strftime_now('%d %b %Y') | length }}");
    let rendered = template.render(&user("x"), false, None).expect("render");
    let (year, date_len) = rendered.split_once('/').expect("two parts");
    let year: i32 = year.parse().expect("numeric year");
    assert!((2024..3000).contains(&year), "{year}");
    assert_eq!(date_len, "11");
    let bad = simple("{{ strftime_now('%Q') }}").render(&user("x"), false, None);
    assert!(matches!(bad, Err(TemplateError::Render(_))), "{bad:?}");
}

#[test]
fn chat_message_converts_to_a_message_object() {
    let value: Value = ChatMessage::new("user", "hi").into();
    assert_eq!(value, json!({"role": "user", "content": "hi"}));
    let parsed: ChatMessage = serde_json::from_value(value).expect("round trip");
    assert_eq!(parsed, ChatMessage::new("user", "hi"));
    let template = simple("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
    let chat = [
        ChatMessage::new("user", "a"),
        ChatMessage::new("assistant", "b"),
    ];
    assert_eq!(
        template.render_chat(&chat, false).expect("render"),
        "user:a;assistant:b;"
    );
}
