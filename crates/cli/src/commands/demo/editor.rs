//! The input line: rustyline with history, slash-command completion and multi-line input (a
//! trailing backslash continues; a paste keeps its newlines).
use rustyline::completion::Completer;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Config, Context, Editor, Helper};
use std::path::PathBuf;

pub struct ChatHelper;

impl Completer for ChatHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        Ok((0, super::slash::complete(&line[..pos])))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {}

impl Validator for ChatHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if continues(ctx.input()) {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Helper for ChatHelper {}

/// A line ending in a backslash asks for another line.
fn continues(input: &str) -> bool {
    input.ends_with('\\') && !input.ends_with("\\\\")
}

/// The message typed: continuation backslashes dropped, newlines kept.
pub fn message_text(input: &str) -> String {
    input.replace("\\\n", "\n")
}

pub type ChatEditor = Editor<ChatHelper, rustyline::history::FileHistory>;

pub fn editor() -> rustyline::Result<ChatEditor> {
    let config = Config::builder()
        .max_history_size(1000)?
        .auto_add_history(false)
        .build();
    let mut editor = ChatEditor::with_config(config)?;
    editor.set_helper(Some(ChatHelper));
    Ok(editor)
}

/// `~/.cache/ishizuki/demo_history` (next to the model cache).
pub fn history_path() -> Option<PathBuf> {
    ishizuki::fetch::cache_dir()
        .ok()
        .map(|dir| dir.join("demo_history"))
}

/// Saves history readable by the user only: it holds what they typed.
pub fn save_history(editor: &mut ChatEditor, path: &std::path::Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if editor.save_history(path).is_ok() {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_backslash_continues_the_message() {
        assert!(continues("first line \\"));
        assert!(!continues("a path C:\\\\"));
        assert!(!continues("done"));
        assert_eq!(message_text("one \\\ntwo"), "one \ntwo");
    }
}
