//! The text side of a loaded model: tokenizer, chat template and tool-call syntax. Turns a
//! [`Request`] into prompt ids, with only the template's own markup parsed for control tokens.
use crate::constraint::{grammar_of, tool_call_grammar, Grammars};
use crate::request::{InvalidRequest, Message, Prompt, Request, Tool, ToolChoice};
use ishizuki_text::prompt::plain_spans;
use ishizuki_text::tools::hermes_tool_prompt;
use ishizuki_text::{ChatTemplate, TemplateError, Tokenizer, ToolSyntax};
use llguidance::Matcher;
use serde_json::{json, Map, Value};
use std::sync::{Arc, OnceLock};

pub struct TextModel {
    /// The name clients use (`--alias`, else the file stem).
    pub name: String,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    /// Built on the first constrained request.
    grammars: OnceLock<Result<Grammars, String>>,
    pub tool_syntax: ToolSyntax,
    /// Whether the template renders `tools` / `tool_calls` itself.
    renders_tools: bool,
    renders_tool_calls: bool,
    /// Whether the template writes `<think>` blocks (reasoning models).
    thinks: bool,
    pub n_ctx: usize,
}

/// A compiled constraint, at its start state.
pub struct Compiled(pub Matcher);

impl Clone for Compiled {
    fn clone(&self) -> Compiled {
        Compiled(self.0.deep_clone())
    }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Compiled(..)")
    }
}

/// A request with its prompt tokenized and its limits resolved.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The output constraint (a schema, a grammar, or a required tool call).
    pub constraint: Option<Compiled>,
    pub request: Request,
    pub tokens: Vec<u32>,
    /// Tokens to generate at most (fits the context).
    pub max_tokens: usize,
    /// The generation prompt opens a reasoning block.
    pub starts_in_reasoning: bool,
    /// Output is split into reasoning and content at `<think>` / `</think>`.
    pub parse_reasoning: bool,
}

fn template_error(e: TemplateError) -> InvalidRequest {
    InvalidRequest::new("messages", e.to_string())
}

impl TextModel {
    pub fn new(
        name: String,
        tokenizer: Tokenizer,
        template_source: Option<&str>,
        n_ctx: usize,
    ) -> Result<TextModel, TemplateError> {
        let piece = |id: Option<u32>| {
            id.and_then(|i| tokenizer.token_text(i))
                .unwrap_or("")
                .to_string()
        };
        let template = template_source
            .map(|s| ChatTemplate::new(s, &piece(tokenizer.bos_id()), &piece(tokenizer.eos_id())))
            .transpose()?;
        let source = template_source.unwrap_or("");
        Ok(TextModel {
            name,
            tool_syntax: ToolSyntax::detect(source),
            renders_tools: source.contains("tools"),
            renders_tool_calls: source.contains("tool_calls"),
            thinks: source.contains("<think>"),
            template,
            tokenizer: Arc::new(tokenizer),
            grammars: OnceLock::new(),
            n_ctx,
        })
    }

    /// Whether the chat template writes reasoning (`<think>`) blocks.
    pub fn thinks(&self) -> bool {
        self.thinks
    }

    /// Validates `request`, renders and tokenizes its prompt, and fits its limit to the context.
    pub fn prepare(&self, request: Request) -> Result<Prepared, InvalidRequest> {
        request.validate()?;
        let mut prepared = Prepared {
            constraint: None,
            tokens: Vec::new(),
            max_tokens: 0,
            starts_in_reasoning: false,
            parse_reasoning: false,
            request,
        };
        prepared.tokens = match &prepared.request.prompt {
            Prompt::Text(text) => self.tokenizer.encode(text, true, true),
            Prompt::Tokens(ids) => self.check_ids(ids)?,
            Prompt::Chat { .. } => self.chat_tokens(&mut prepared)?,
        };
        let n_prompt = prepared.tokens.len();
        if n_prompt == 0 {
            return Err(InvalidRequest::new("prompt", "the prompt is empty"));
        }
        let room = self.n_ctx.saturating_sub(n_prompt);
        let wanted = prepared.request.max_tokens.unwrap_or(room);
        if n_prompt >= self.n_ctx || wanted > room {
            let mut e = InvalidRequest::new(
                "max_tokens",
                format!(
                    "the request needs {} tokens ({n_prompt} in the prompt, {wanted} to generate), which does not fit the context of {} tokens",
                    n_prompt + wanted.max(1),
                    self.n_ctx
                ),
            );
            e.context_exceeded = true;
            return Err(e);
        }
        prepared.max_tokens = wanted;
        if prepared.constraint.is_none() {
            if let Some(c) = &prepared.request.constraint {
                let param = match c {
                    crate::request::Constraint::Lark(_) | crate::request::Constraint::Regex(_) => {
                        "grammar"
                    }
                    _ => "response_format",
                };
                prepared.constraint =
                    Some(Compiled(self.grammars()?.matcher(grammar_of(c), param)?));
            }
        }
        Ok(prepared)
    }

    fn grammars(&self) -> Result<&Grammars, InvalidRequest> {
        self.grammars
            .get_or_init(|| Grammars::new(self.tokenizer.clone()))
            .as_ref()
            .map_err(|e| {
                InvalidRequest::new(
                    "",
                    format!("constrained decoding is unavailable for this model: {e}"),
                )
            })
    }

    /// The grammar that makes a required call (to `name`, if given) valid by construction.
    fn tool_constraint(
        &self,
        tools: &[Tool],
        name: Option<&str>,
        parallel: bool,
    ) -> Result<Compiled, InvalidRequest> {
        let marker = self.tokenizer.token_to_id("[TOOL_CALLS]");
        let grammar = tool_call_grammar(self.tool_syntax, tools, name, parallel, marker);
        Ok(Compiled(self.grammars()?.matcher(grammar, "tools")?))
    }

    fn check_ids(&self, ids: &[u32]) -> Result<Vec<u32>, InvalidRequest> {
        let n_vocab = self.tokenizer.n_vocab();
        match ids.iter().position(|&id| id as usize >= n_vocab) {
            Some(i) => Err(InvalidRequest::new(
                "prompt",
                format!(
                    "token id {} at position {i} is outside the vocabulary of {n_vocab}",
                    ids[i]
                ),
            )),
            None => Ok(ids.to_vec()),
        }
    }

    /// The chat prompt's ids; sets the forced output and reasoning flags on `p`.
    fn chat_tokens(&self, p: &mut Prepared) -> Result<Vec<u32>, InvalidRequest> {
        let Prompt::Chat {
            messages,
            tools,
            tool_choice,
            enable_thinking,
            template_kwargs,
        } = &p.request.prompt
        else {
            unreachable!("chat_tokens is only called for chat prompts")
        };
        let template = self.template.as_ref().ok_or_else(|| {
            InvalidRequest::new(
                "messages",
                "this model has no chat template; use the completions API",
            )
        })?;
        let tools: &[Tool] = if *tool_choice == ToolChoice::None {
            &[]
        } else {
            tools
        };
        let (rendered_messages, tool_defs) = self.template_messages(messages, tools);
        let mut extra = Map::new();
        if let Some(Value::Object(kw)) = template_kwargs {
            extra.extend(kw.clone());
        } else if let Some(other) = template_kwargs {
            return Err(InvalidRequest::new(
                "chat_template_kwargs",
                format!("chat_template_kwargs must be an object, got {other}"),
            ));
        }
        if !tool_defs.is_empty() && self.renders_tools {
            extra.insert("tools".into(), Value::Array(tool_defs.clone()));
        }
        if let Some(on) = enable_thinking {
            extra.insert("enable_thinking".into(), (*on).into());
        }
        let rendered = template
            .render(&rendered_messages, true, Some(&Value::Object(extra)))
            .map_err(template_error)?;
        p.starts_in_reasoning = self.thinks && rendered.trim_end().ends_with("<think>");
        p.parse_reasoning = self.thinks;
        let forced = match tool_choice {
            ToolChoice::Required if !tools.is_empty() => Some(None),
            ToolChoice::Named(name) => Some(Some(name.as_str())),
            _ => None,
        };
        if let Some(name) = forced {
            p.constraint =
                Some(self.tool_constraint(tools, name, p.request.parallel_tool_calls)?);
        }
        let texts = user_texts(messages, &tool_defs);
        let spans = plain_spans(&self.tokenizer, &rendered, &texts)
            .map_err(|e| InvalidRequest::new("messages", e.to_string()))?;
        let mut ids = self.tokenizer.encode_with_plain_spans(&rendered, &spans);
        if let Some(bos) = self.tokenizer.bos_id().filter(|_| self.tokenizer.add_bos()) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        Ok(ids)
    }

    /// Messages as the template sees them (HF's shape), and the tool definitions. For templates
    /// that render no tools, tools go into the system prompt and calls and results into text.
    fn template_messages(&self, messages: &[Message], tools: &[Tool]) -> (Vec<Value>, Vec<Value>) {
        let defs: Vec<Value> = tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description.clone().unwrap_or_default(), "parameters": t.parameters}}))
            .collect();
        let inline = !self.renders_tool_calls;
        let mut out: Vec<Value> = messages
            .iter()
            .map(|m| self.template_message(m, inline))
            .collect();
        if !defs.is_empty() && !self.renders_tools {
            let prompt = hermes_tool_prompt(&defs);
            match out.first_mut() {
                Some(first) if first["role"] == "system" => {
                    let content =
                        format!("{}\n\n{prompt}", first["content"].as_str().unwrap_or(""));
                    first["content"] = content.into();
                }
                _ => out.insert(0, json!({"role": "system", "content": prompt})),
            }
        }
        (out, defs)
    }

    fn template_message(&self, m: &Message, inline_calls: bool) -> Value {
        let role = if m.role == "developer" {
            "system"
        } else {
            m.role.as_str()
        };
        if inline_calls && role == "tool" {
            return json!({"role": "user", "content": format!("<tool_response>\n{}\n</tool_response>", m.content)});
        }
        let mut v = json!({"role": role, "content": m.content});
        if let Some(r) = &m.reasoning {
            v["reasoning_content"] = r.clone().into();
        }
        if let Some(id) = &m.tool_call_id {
            v["tool_call_id"] = id.clone().into();
        }
        if let Some(name) = &m.name {
            v["name"] = name.clone().into();
        }
        if m.tool_calls.is_empty() {
            return v;
        }
        let args = |a: &str| serde_json::from_str::<Value>(a).unwrap_or(Value::Object(Map::new()));
        if inline_calls {
            let calls: Vec<String> = m
                .tool_calls
                .iter()
                .map(|c| self.tool_syntax.format_call(&c.name, &args(&c.arguments)))
                .collect();
            let content = [m.content.as_str()]
                .into_iter()
                .chain(calls.iter().map(String::as_str))
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("\n");
            v["content"] = content.into();
            return v;
        }
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args(&c.arguments)}}))
            .collect();
        v
    }
}

/// Every piece of request text that may reach the rendering, labelled for errors.
fn user_texts(messages: &[Message], tool_defs: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, t) in tool_defs.iter().enumerate() {
        collect_strings(t, &format!("tools[{i}]"), &mut out);
    }
    for (i, m) in messages.iter().enumerate() {
        let label = format!("messages[{i}]");
        if let Some(r) = &m.reasoning {
            out.push((label.clone(), r.clone()));
        }
        out.push((label.clone(), m.content.clone()));
        for c in &m.tool_calls {
            out.push((label.clone(), c.name.clone()));
            out.push((label.clone(), c.arguments.clone()));
            if let Ok(args) = serde_json::from_str::<Value>(&c.arguments) {
                collect_strings(&args, &label, &mut out);
            }
        }
    }
    out
}

fn collect_strings(v: &Value, label: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((label.to_string(), s.clone())),
        Value::Array(items) => items.iter().for_each(|x| collect_strings(x, label, out)),
        Value::Object(map) => map.iter().for_each(|(k, x)| {
            out.push((label.to_string(), k.clone()));
            collect_strings(x, label, out)
        }),
        _ => {}
    }
}
