use super::*;

fn stream(syntax: ToolSyntax, pieces: &[&str]) -> Vec<ToolOutput> {
    let mut s = ToolCallStream::new(syntax);
    let mut out = Vec::new();
    for p in pieces {
        s.push(p, &mut out);
    }
    s.finish(&mut out);
    // merge adjacent content the way a client concatenates deltas
    let mut merged: Vec<ToolOutput> = Vec::new();
    for o in out {
        match (merged.last_mut(), o) {
            (Some(ToolOutput::Content(a)), ToolOutput::Content(b)) => a.push_str(&b),
            (_, o) => merged.push(o),
        }
    }
    merged
}

fn call(name: &str, arguments: &str) -> ToolOutput {
    ToolOutput::Call(ParsedCall {
        name: name.into(),
        arguments: arguments.into(),
    })
}

fn content(s: &str) -> ToolOutput {
    ToolOutput::Content(s.into())
}

#[test]
fn hermes_calls_split_anywhere_parse_whole() {
    let text = "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    let want = vec![
        content("Sure."),
        call("get_weather", r#"{"city":"Paris"}"#),
        call("get_time", "{}"),
    ];
    for cut in 1..text.len() {
        if !text.is_char_boundary(cut) {
            continue;
        }
        let got = stream(ToolSyntax::Hermes, &[&text[..cut], &text[cut..]]);
        assert_eq!(got, want, "cut at {cut}");
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let pieces: Vec<&str> = chars.iter().map(|s| s.as_str()).collect();
    assert_eq!(stream(ToolSyntax::Hermes, &pieces), want);
}

#[test]
fn a_malformed_call_comes_back_as_content() {
    let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {oops}\n</tool_call>";
    assert_eq!(stream(ToolSyntax::Hermes, &[text]), vec![content(text)]);
    let unterminated = "<tool_call>\n{\"name\": \"f\"";
    assert_eq!(
        stream(ToolSyntax::Hermes, &[unterminated]),
        vec![content(unterminated)]
    );
}

#[test]
fn an_unterminated_call_that_parses_is_a_call() {
    let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n";
    assert_eq!(
        stream(ToolSyntax::Hermes, &[text]),
        vec![call("f", r#"{"a":1}"#)]
    );
}

#[test]
fn plain_text_passes_through_and_lookalikes_are_released() {
    assert_eq!(
        stream(ToolSyntax::Hermes, &["a <tool", "_cal", "l? no"]),
        vec![content("a <tool_call? no")]
    );
}

#[test]
fn llama3_json_replies_are_calls_and_other_replies_content() {
    let got = stream(
        ToolSyntax::Llama3Json,
        &[
            " {\"name\": \"f\", \"parameters\": {\"x\": \"1\"}}; ",
            "{\"name\": \"g\", \"parameters\": {}}",
        ],
    );
    assert_eq!(got, vec![call("f", r#"{"x":"1"}"#), call("g", "{}")]);
    let got = stream(
        ToolSyntax::Llama3Json,
        &["<|python_tag|>{\"name\": \"f\", \"parameters\": {}}"],
    );
    assert_eq!(got, vec![call("f", "{}")]);
    assert_eq!(
        stream(ToolSyntax::Llama3Json, &["Hello {x}"]),
        vec![content("Hello {x}")]
    );
    assert_eq!(
        stream(ToolSyntax::Llama3Json, &["{\"not\": \"a call\"}"]),
        vec![content("{\"not\": \"a call\"}")]
    );
}

#[test]
fn mistral_both_forms() {
    let got = stream(
        ToolSyntax::Mistral,
        &["[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}, {\"name\": \"g\", \"arguments\": {}}]"],
    );
    assert_eq!(got, vec![call("f", r#"{"a":[1,2]}"#), call("g", "{}")]);
    let got = stream(
        ToolSyntax::Mistral,
        &["[TOOL_CALLS]f[ARGS]{\"a\": 1}[TOOL_CALLS]g[ARGS]{}"],
    );
    assert_eq!(got, vec![call("f", r#"{"a":1}"#), call("g", "{}")]);
}

#[test]
fn string_arguments_are_parsed_and_must_be_objects() {
    let v = serde_json::json!({"name": "f", "arguments": "{\"a\": 1}"});
    assert_eq!(call_from_json(&v).unwrap().arguments, r#"{"a":1}"#);
    assert!(call_from_json(&serde_json::json!({"name": "f", "arguments": 3})).is_none());
    assert!(call_from_json(&serde_json::json!({"name": "", "arguments": {}})).is_none());
}

#[test]
fn syntax_is_read_from_the_template() {
    assert_eq!(
        ToolSyntax::detect("{{ '<tool_call>' }}"),
        ToolSyntax::Hermes
    );
    assert_eq!(ToolSyntax::detect("[TOOL_CALLS]"), ToolSyntax::Mistral);
    assert_eq!(ToolSyntax::detect("<|python_tag|>"), ToolSyntax::Llama3Json);
    assert_eq!(ToolSyntax::detect("plain"), ToolSyntax::Hermes);
}

#[test]
fn bare_and_fenced_json_replies_to_known_tools_are_calls() {
    let fenced =
        "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```";
    let known = |s: ToolCallStream| s.with_known_tools(vec!["get_weather".into()]);
    for cut in 1..fenced.len() {
        let mut s = known(ToolCallStream::new(ToolSyntax::Hermes));
        let mut out = Vec::new();
        s.push(&fenced[..cut], &mut out);
        s.push(&fenced[cut..], &mut out);
        s.finish(&mut out);
        assert_eq!(
            out,
            vec![call("get_weather", r#"{"city":"Paris"}"#)],
            "cut {cut}"
        );
    }
    let unknown = "{\"name\": \"rm_rf\", \"arguments\": {}}";
    let mut s = known(ToolCallStream::new(ToolSyntax::Hermes));
    let mut out = Vec::new();
    s.push(unknown, &mut out);
    s.finish(&mut out);
    assert_eq!(out, vec![content(unknown)]);
    let code = "```python\nprint(1)\n```";
    assert_eq!(
        stream(ToolSyntax::Hermes, &["``", "`py", "thon\nprint(1)\n```"]),
        vec![content(code)]
    );
}
