//! Tool calls in model output, in the call syntax of the model family (read from its chat
//! template): Hermes / Qwen `<tool_call>{json}</tool_call>`, Llama 3.x bare JSON objects, and
//! Mistral `[TOOL_CALLS]`. [`ToolCallStream`] separates streamed text into content and complete
//! calls; a call that does not parse comes back as content, never dropped.
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolSyntax {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per call.
    Hermes,
    /// A reply that is one or more `{"name": ..., "parameters": {...}}` objects (`;`-separated),
    /// optionally after `<|python_tag|>`.
    Llama3Json,
    /// `[TOOL_CALLS] [{"name": ..., "arguments": {...}}]` or `[TOOL_CALLS]name[ARGS]{...}`.
    Mistral,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const MISTRAL_MARK: &str = "[TOOL_CALLS]";
const PYTHON_TAG: &str = "<|python_tag|>";

impl ToolSyntax {
    /// The syntax a chat template teaches its model; Hermes where the template says nothing.
    pub fn detect(template_source: &str) -> ToolSyntax {
        if template_source.contains(MISTRAL_MARK) {
            ToolSyntax::Mistral
        } else if template_source.contains(HERMES_OPEN) {
            ToolSyntax::Hermes
        } else if template_source.contains(PYTHON_TAG)
            || (template_source.contains("\"parameters\"")
                && template_source.contains("<|eot_id|>"))
        {
            ToolSyntax::Llama3Json
        } else {
            ToolSyntax::Hermes
        }
    }

    /// How an assistant's earlier call is written back into a prompt for templates that do not
    /// render `tool_calls` themselves.
    pub fn format_call(self, name: &str, arguments: &Value) -> String {
        let call = serde_json::json!({ "name": name, "arguments": arguments });
        match self {
            ToolSyntax::Hermes => format!("{HERMES_OPEN}\n{call}\n{HERMES_CLOSE}"),
            ToolSyntax::Llama3Json => {
                serde_json::json!({ "name": name, "parameters": arguments }).to_string()
            }
            ToolSyntax::Mistral => format!("{MISTRAL_MARK}[{call}]"),
        }
    }
}

/// Tool instructions for a system prompt, for templates that do not render `tools` (Hermes
/// wording, the syntax [`ToolSyntax::Hermes`] parses).
pub fn hermes_tool_prompt(tools: &[Value]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools {
        s.push('\n');
        s.push_str(&tool.to_string());
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// One parsed call; `arguments` is compact JSON text of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// A `{"name", "arguments" | "parameters"}` object as a call; arguments given as a JSON string
/// are parsed.
pub fn call_from_json(value: &Value) -> Option<ParsedCall> {
    let name = value.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let args = value
        .get("arguments")
        .or_else(|| value.get("parameters"))
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    let args = match args {
        Value::String(s) => serde_json::from_str::<Value>(&s).ok()?,
        other => other,
    };
    args.is_object().then(|| ParsedCall {
        name: name.to_string(),
        arguments: args.to_string(),
    })
}

/// JSON values one after another, separated by whitespace, `,` or `;`; `None` unless all of
/// `text` is such values.
fn json_sequence(text: &str) -> Option<Vec<Value>> {
    let mut values = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let value = stream.next()?.ok()?;
        let used = stream.byte_offset();
        values.push(value);
        rest = rest[used..].trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
    }
    Some(values)
}

fn calls_from_values(values: Vec<Value>) -> Option<Vec<ParsedCall>> {
    let flat: Vec<Value> = values
        .into_iter()
        .flat_map(|v| match v {
            Value::Array(items) => items,
            other => vec![other],
        })
        .collect();
    let calls: Option<Vec<ParsedCall>> = flat.iter().map(call_from_json).collect();
    calls.filter(|c| !c.is_empty())
}

/// The calls in a captured span (the text after the opening marker), by syntax.
fn parse_span(syntax: ToolSyntax, span: &str) -> Option<Vec<ParsedCall>> {
    match syntax {
        ToolSyntax::Hermes => {
            let body = span.strip_suffix(HERMES_CLOSE).unwrap_or(span);
            calls_from_values(json_sequence(body)?)
        }
        ToolSyntax::Llama3Json => {
            let body = span.trim_start().strip_prefix(PYTHON_TAG).unwrap_or(span);
            calls_from_values(json_sequence(body)?)
        }
        ToolSyntax::Mistral => {
            if let Some(calls) = json_sequence(span).and_then(calls_from_values) {
                return Some(calls);
            }
            // v11+: name[ARGS]{...} per call, each after its own marker
            span.split(MISTRAL_MARK)
                .map(|part| {
                    let (name, args) = part.split_once("[ARGS]")?;
                    let value = serde_json::json!({ "name": name.trim(), "arguments": serde_json::from_str::<Value>(args.trim()).ok()? });
                    call_from_json(&value)
                })
                .collect()
        }
    }
}

/// What one piece of streamed text turned into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolOutput {
    Content(String),
    Call(ParsedCall),
}

/// What the stream is capturing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Capture {
    None,
    /// After an opening marker (`<tool_call>`, `[TOOL_CALLS]`).
    Marked,
    /// A reply that opened with bare JSON (or ```json): calls if it all parses as calls.
    WholeReply,
}

/// How a whole-reply call may open.
const FENCE: &str = "```json";

/// Splits streamed model text into content and tool calls.
#[derive(Clone, Debug)]
pub struct ToolCallStream {
    syntax: ToolSyntax,
    /// Text not yet decided: a possible prefix of an opening marker, or a call being captured.
    held: String,
    capture: Capture,
    /// Whether any non-whitespace content has been seen (bare calls are whole replies).
    started: bool,
    calls_seen: usize,
    /// Tool names a bare-JSON reply must call to count as calls; empty = any.
    known: Vec<String>,
}

impl ToolCallStream {
    pub fn new(syntax: ToolSyntax) -> ToolCallStream {
        ToolCallStream {
            syntax,
            held: String::new(),
            capture: Capture::None,
            started: false,
            calls_seen: 0,
            known: Vec::new(),
        }
    }

    /// Small models often answer a tool request with a bare (or fenced) JSON call instead of
    /// their family's markup; such a reply counts as calls only when it names these tools.
    pub fn with_known_tools(mut self, names: Vec<String>) -> ToolCallStream {
        self.known = names;
        self
    }

    pub fn push(&mut self, text: &str, out: &mut Vec<ToolOutput>) {
        self.held.push_str(text);
        loop {
            match self.capture {
                Capture::WholeReply => return,
                Capture::Marked => {
                    if self.try_close(out) {
                        continue;
                    }
                    return;
                }
                Capture::None => {}
            }
            if let Some(at) = self.whole_reply_at() {
                self.held.drain(..at);
                self.capture = Capture::WholeReply;
                return;
            }
            match self.open_marker_at() {
                Some((at, len)) => {
                    self.emit_content(at, out);
                    self.held.drain(..len);
                    self.capture = Capture::Marked;
                }
                None => {
                    let keep = self.partial_open_len();
                    let release = self.held.len() - keep;
                    self.emit_content(release, out);
                    return;
                }
            }
        }
    }

    /// End of generation: an unterminated call that parses is still a call; otherwise its text.
    pub fn finish(&mut self, out: &mut Vec<ToolOutput>) {
        let span = std::mem::take(&mut self.held);
        let (parsed, raw) = match self.capture {
            Capture::Marked => (
                parse_span(self.syntax, &span),
                format!("{}{span}", self.marker()),
            ),
            Capture::WholeReply => (self.parse_whole_reply(&span), span),
            Capture::None => {
                self.held = span;
                let len = self.held.len();
                self.emit_content(len, out);
                return;
            }
        };
        self.capture = Capture::None;
        match parsed {
            Some(calls) => {
                self.calls_seen += calls.len();
                out.extend(calls.into_iter().map(ToolOutput::Call));
            }
            None => out.push(ToolOutput::Content(raw)),
        }
    }

    pub fn calls_seen(&self) -> usize {
        self.calls_seen
    }

    fn marker(&self) -> &'static str {
        match self.syntax {
            ToolSyntax::Hermes => HERMES_OPEN,
            ToolSyntax::Mistral => MISTRAL_MARK,
            ToolSyntax::Llama3Json => "",
        }
    }

    /// Calls in a whole reply: JSON after an optional python tag or ```json fence, naming
    /// known tools.
    fn parse_whole_reply(&self, span: &str) -> Option<Vec<ParsedCall>> {
        let body = span.trim();
        let body = body.strip_prefix(PYTHON_TAG).unwrap_or(body);
        let body = match body.strip_prefix(FENCE) {
            Some(rest) => rest.trim_end().strip_suffix("```")?,
            None => body,
        };
        let calls = calls_from_values(json_sequence(body)?)?;
        let known = |c: &ParsedCall| self.known.is_empty() || self.known.contains(&c.name);
        calls.iter().all(known).then_some(calls)
    }

    /// Where a whole-reply call starts: the reply's first text is `{`, the python tag or a
    /// ```json fence.
    fn whole_reply_at(&self) -> Option<usize> {
        if self.started {
            return None;
        }
        let at = self.held.len() - self.held.trim_start().len();
        let rest = &self.held[at..];
        let opens =
            rest.starts_with('{') || rest.starts_with(PYTHON_TAG) || rest.starts_with(FENCE);
        opens.then_some(at)
    }

    /// Where a marked call starts in `held` and the marker's length.
    fn open_marker_at(&self) -> Option<(usize, usize)> {
        match self.syntax {
            ToolSyntax::Hermes | ToolSyntax::Mistral => {
                let m = self.marker();
                self.held.find(m).map(|at| (at, m.len()))
            }
            ToolSyntax::Llama3Json => None,
        }
    }

    /// Bytes at the end of `held` that may still open a call.
    fn partial_open_len(&self) -> usize {
        let trimmed = self.held.trim_start();
        if !self.started
            && (trimmed.is_empty() || PYTHON_TAG.starts_with(trimmed) || FENCE.starts_with(trimmed))
        {
            return self.held.len();
        }
        match self.syntax {
            ToolSyntax::Llama3Json => 0,
            _ => crate::stops::partial_suffix_len(&self.held, self.marker()),
        }
    }

    /// Hermes: a complete `...</tool_call>` in `held` becomes calls (or content). Returns whether
    /// it consumed one.
    fn try_close(&mut self, out: &mut Vec<ToolOutput>) -> bool {
        if self.syntax != ToolSyntax::Hermes {
            return false;
        }
        let Some(end) = self.held.find(HERMES_CLOSE) else {
            return false;
        };
        let span: String = self.held.drain(..end + HERMES_CLOSE.len()).collect();
        match parse_span(self.syntax, &span) {
            Some(calls) => {
                self.calls_seen += calls.len();
                out.extend(calls.into_iter().map(ToolOutput::Call));
            }
            None => out.push(ToolOutput::Content(format!("{HERMES_OPEN}{span}"))),
        }
        self.capture = Capture::None;
        true
    }

    /// Releases `held[..n]` as content; whitespace between calls is dropped.
    fn emit_content(&mut self, n: usize, out: &mut Vec<ToolOutput>) {
        let text: String = self.held.drain(..n).collect();
        if text.is_empty() || (self.calls_seen > 0 && text.trim().is_empty()) {
            return;
        }
        if !text.trim().is_empty() {
            self.started = true;
        } else if !self.started {
            // leading whitespace before a possible whole-reply call: hold it with the rest
            self.held.insert_str(0, &text);
            return;
        }
        match out.last_mut() {
            Some(ToolOutput::Content(last)) => last.push_str(&text),
            _ => out.push(ToolOutput::Content(text)),
        }
    }
}

#[cfg(test)]
mod tests;
