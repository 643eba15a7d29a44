//! Constrained decoding with llguidance: JSON Schema (any it accepts), JSON objects, Lark and
//! regex grammars, and the tool-call grammars that make a required call valid by construction.
use crate::request::{Constraint, InvalidRequest, Tool};
use ishizuki_text::{TokenType, Tokenizer, ToolSyntax};
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};

/// The tokenizer as llguidance sees it: each token's bytes, control tokens behind the 0xff marker.
struct Env {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        self.tokenizer
            .encode(&String::from_utf8_lossy(s), false, false)
    }
}

/// Grammar compilation for one tokenizer; built once per model, shared by every request.
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    pub fn new(tokenizer: Arc<Tokenizer>) -> Result<Grammars, String> {
        let n = tokenizer.n_vocab();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| match tokenizer.token_type(id) {
                Some(TokenType::Control | TokenType::Unknown) => {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tokenizer.token_text(id).unwrap_or("").as_bytes());
                    w
                }
                _ => tokenizer.token_bytes(id).to_vec(),
            })
            .collect();
        let eos = tokenizer
            .eog_ids()
            .first()
            .copied()
            .or(tokenizer.eos_id())
            .unwrap_or(0);
        let mut info = TokRxInfo::new(n as u32, eos);
        info.tok_bos = tokenizer.bos_id();
        info.tok_end_of_turn = Some(eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Env { tokenizer, trie });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.set_stderr_log_level(0);
        Ok(Grammars { factory })
    }

    /// A fresh matcher for `grammar`; a grammar llguidance rejects is a bad request saying why.
    pub fn matcher(
        &self,
        grammar: TopLevelGrammar,
        param: &str,
    ) -> Result<Matcher, InvalidRequest> {
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| InvalidRequest::new(param, format!("the {param} cannot be used: {e}")))?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(e) => Err(InvalidRequest::new(
                param,
                format!("the {param} cannot be used: {e}"),
            )),
            None => Ok(matcher),
        }
    }
}

/// The grammar of a request's `response_format` / `grammar` / `regex`.
pub fn grammar_of(c: &Constraint) -> TopLevelGrammar {
    match c {
        Constraint::JsonObject => {
            TopLevelGrammar::from_json_schema(serde_json::json!({"type": "object"}))
        }
        Constraint::JsonSchema(schema) => TopLevelGrammar::from_json_schema(schema.clone()),
        Constraint::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        Constraint::Regex(r) => TopLevelGrammar::from_regex(r),
    }
}

/// A Lark string literal holding `text` exactly.
fn literal(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// One or more calls (one when `parallel` is false) to `tools` (or only `named`), in the
/// model's call syntax, each call's arguments matching its tool's schema.
pub fn tool_call_grammar(
    syntax: ToolSyntax,
    tools: &[Tool],
    named: Option<&str>,
    parallel: bool,
    marker_token: Option<u32>,
) -> TopLevelGrammar {
    let chosen: Vec<&Tool> = tools
        .iter()
        .filter(|t| named.is_none_or(|n| n == t.name))
        .collect();
    let key = match syntax {
        ToolSyntax::Llama3Json => "parameters",
        _ => "arguments",
    };
    let mut rules = Vec::new();
    let mut alternatives = Vec::new();
    for (i, t) in chosen.iter().enumerate() {
        let head = format!("{{\"name\": {}, \"{key}\": ", literal(&t.name));
        rules.push(format!("call_{i}: {} args_{i} \"}}\"", literal(&head)));
        rules.push(format!("args_{i}: %json {}", t.parameters));
        alternatives.push(format!("call_{i}"));
    }
    let call = format!("call: {}", alternatives.join(" | "));
    let repeat = if parallel { "*" } else { "" };
    let start = match syntax {
        ToolSyntax::Hermes => format!("start: block (\"\\n\" block){repeat}\nblock: \"<tool_call>\\n\" call \"\\n</tool_call>\""),
        ToolSyntax::Llama3Json => format!("start: call (\"; \" call){repeat}"),
        ToolSyntax::Mistral => {
            let marker = marker_token.map_or_else(|| literal("[TOOL_CALLS]"), |id| format!("<[{id}]>"));
            format!("start: {marker} \"[\" call (\", \" call){repeat} \"]\"")
        }
    };
    TopLevelGrammar::from_lark(format!("{start}\n{call}\n{}", rules.join("\n")))
}
