//! The chat's slash commands: what a line starting with `/` asks for.
use super::ThinkLevel;

#[derive(Clone, Debug, PartialEq)]
pub enum Slash {
    New,
    System(String),
    Think(ThinkLevel),
    Stats,
    Save(String),
    Help,
    Quit,
}

/// Names for completion and `/help`, with what each takes.
pub const COMMANDS: &[(&str, &str)] = &[
    (
        "/new",
        "start a new conversation (the system message stays)",
    ),
    ("/system", "TEXT  set the system message (empty clears it)"),
    (
        "/think",
        "off|low|medium|high  reasoning for models that think",
    ),
    ("/stats", "cache, memory, rates and drafting"),
    ("/save", "FILE  write the conversation as JSON"),
    ("/help", "this list"),
    ("/quit", "leave (Ctrl-D too)"),
];

/// `None` for a line that is not a command (the user's message); `Err` explains a bad one.
pub fn parse(line: &str) -> Option<Result<Slash, String>> {
    let line = line.trim();
    let rest = line.strip_prefix('/')?;
    // `//text` sends text that starts with a slash
    if rest.starts_with('/') {
        return None;
    }
    let (name, arg) = match rest.split_once(char::is_whitespace) {
        Some((name, arg)) => (name, arg.trim()),
        None => (rest, ""),
    };
    Some(command(name, arg))
}

fn command(name: &str, arg: &str) -> Result<Slash, String> {
    let no_arg = |slash: Slash| {
        if arg.is_empty() {
            Ok(slash)
        } else {
            Err(format!("/{name} takes no argument"))
        }
    };
    match name {
        "new" | "clear" => no_arg(Slash::New),
        "system" => Ok(Slash::System(arg.to_string())),
        "think" => ThinkLevel::parse(arg).map(Slash::Think),
        "stats" => no_arg(Slash::Stats),
        "save" if arg.is_empty() => Err("/save needs a file name".into()),
        "save" => Ok(Slash::Save(arg.to_string())),
        "help" | "?" => no_arg(Slash::Help),
        "quit" | "exit" | "q" => no_arg(Slash::Quit),
        _ => Err(format!("unknown command /{name}; /help lists them")),
    }
}

/// The `/help` text.
pub fn help() -> String {
    let mut s = String::new();
    for (name, what) in COMMANDS {
        s.push_str(&format!("  {name:<8} {what}\n"));
    }
    s.push_str("  a line ending in \\ continues on the next; Ctrl-C stops a reply\n");
    s
}

/// Commands that start with what is typed, for tab completion.
pub fn complete(prefix: &str) -> Vec<String> {
    if !prefix.starts_with('/') || prefix.contains(char::is_whitespace) {
        return Vec::new();
    }
    COMMANDS
        .iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(name, _)| name.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_with_their_arguments() {
        assert_eq!(parse("/new"), Some(Ok(Slash::New)));
        assert_eq!(
            parse("  /system  be brief "),
            Some(Ok(Slash::System("be brief".into())))
        );
        assert_eq!(
            parse("/think high"),
            Some(Ok(Slash::Think(ThinkLevel::High)))
        );
        assert_eq!(
            parse("/save chat.json"),
            Some(Ok(Slash::Save("chat.json".into())))
        );
        assert_eq!(parse("/quit"), Some(Ok(Slash::Quit)));
        assert_eq!(parse("hello /new"), None);
        assert_eq!(parse("//etc/hosts is a file"), None);
    }

    #[test]
    fn bad_commands_say_why() {
        assert!(parse("/frobnicate").unwrap().unwrap_err().contains("/help"));
        assert!(parse("/think loud").unwrap().is_err());
        assert!(parse("/save").unwrap().is_err());
        assert!(parse("/new now").unwrap().is_err());
    }

    #[test]
    fn completion_lists_matching_commands() {
        assert_eq!(complete("/s"), vec!["/system", "/stats", "/save"]);
        assert_eq!(complete("/q"), vec!["/quit"]);
        assert!(complete("hello").is_empty());
        assert!(complete("/save x").is_empty());
    }
}
