//! `ishizuki demo` driven in tmux on the real Qwen2.5-Coder-0.5B as a person would: type, read the
//! screen. The reply must be rendered (a titled code box, no raw fences or bold markers), the
//! rates line must follow it, the second turn must reuse the first one's KV, and `/stats`, `/new`,
//! Ctrl-C mid-reply and `/quit` (exit status 0) must work.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const MODEL: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
/// Generous: CI runs a debug build on two shared cores.
const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

fn required() -> bool {
    std::env::var_os("ISHIZUKI_REQUIRE_MODELS").is_some()
}

fn model_path() -> Option<PathBuf> {
    let dir = std::env::var_os("ISHIZUKI_TEST_MODELS")
        .map_or_else(|| "/work/cache/models".into(), PathBuf::from);
    let path = dir.join(MODEL);
    if path.exists() {
        return Some(path);
    }
    assert!(!required(), "{} is missing", path.display());
    eprintln!("skipping: {} not found", path.display());
    None
}

fn have_tmux() -> bool {
    let ok = Command::new("tmux").arg("-V").output().is_ok();
    assert!(
        ok || !required(),
        "tmux is missing (the demo's test drives it)"
    );
    ok
}

/// A tmux server of our own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str, width: u16, height: u16) -> Tmux {
        let tmux = Tmux {
            socket: format!("ishizuki-demo-test-{}", std::process::id()),
        };
        let (w, h) = (width.to_string(), height.to_string());
        tmux.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "demo",
            "-x",
            &w,
            "-y",
            &h,
        ]);
        // keep the pane (and the exit status the shell printed) after the program exits
        tmux.run(&["set-option", "-g", "remain-on-exit", "on"]);
        tmux.run(&["respawn-pane", "-k", "-t", "demo", command]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The whole pane with its scrollback, wrapped lines joined.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-S", "-", "-t", "demo"])
    }

    fn type_line(&self, text: &str) {
        self.run(&["send-keys", "-t", "demo", "-l", text]);
        self.run(&["send-keys", "-t", "demo", "Enter"]);
    }

    fn key(&self, key: &str) {
        self.run(&["send-keys", "-t", "demo", key]);
    }

    /// Waits until `done` holds for the screen; returns that screen.
    fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                started.elapsed() < timeout,
                "timed out waiting for {what}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// Every rates line on the screen: (prompt tokens, cached tokens, the whole line).
fn rates_lines(screen: &str) -> Vec<(usize, usize, String)> {
    screen
        .lines()
        .filter_map(|line| {
            let (prompt, rest) = line.trim().split_once(" prompt tokens (")?;
            let (cached, _) = rest.split_once(" cached)")?;
            Some((prompt.parse().ok()?, cached.parse().ok()?, line.to_string()))
        })
        .collect()
}

fn after<'s>(screen: &'s str, marker: &str) -> &'s str {
    screen.rfind(marker).map_or("", |i| &screen[i..])
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[test]
fn the_demo_chats_renders_markdown_and_keeps_its_cache_warm() {
    let (Some(model), true) = (model_path(), have_tmux()) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let command = format!(
        // the shell reports the exit status: tmux's own (#{pane_dead_status}) is lost when its
        // server misses the SIGCHLD, as it does in some containers
        "env -u NO_COLOR TERM=xterm-256color ISHIZUKI_CACHE={} {} demo -m {} --temp 0 -t 2; \\
         echo \"demo exited with status $?\"",
        shell_quote(home.path()),
        shell_quote(Path::new(env!("CARGO_BIN_EXE_ishizuki"))),
        shell_quote(&model)
    );
    let tmux = Tmux::start(&command, 100, 40);
    let screen = tmux.wait_for("the prompt", REPLY_TIMEOUT, |s| s.contains("❯"));
    assert!(screen.contains("qwen2 · Q4_K_M"), "{screen}");

    let question = "Write a Python function is_prime(n). Answer with one code block.";
    tmux.type_line(question);
    let screen = tmux.wait_for("the first reply", REPLY_TIMEOUT, |s| {
        rates_lines(after(s, question)).len() == 1
    });
    let reply = after(&screen, question);
    assert!(reply.contains("╭─ python"), "no titled code box:\n{reply}");
    assert!(reply.contains("def is_prime"), "{reply}");
    assert!(!reply.contains("```"), "a raw fence on screen:\n{reply}");
    // `**` is Python's power operator inside the box; outside it, a bold marker left raw
    let prose: Vec<&str> = reply.lines().filter(|l| !l.starts_with('│')).collect();
    assert!(
        !prose.iter().any(|l| l.contains("**")),
        "a raw bold marker on screen:\n{reply}"
    );
    let (first_prompt, first_cached, _) = rates_lines(reply)[0].clone();
    assert_eq!(first_cached, 0, "{reply}");

    let follow_up = "Now add type hints.";
    tmux.type_line(follow_up);
    let screen = tmux.wait_for("the second reply", REPLY_TIMEOUT, |s| {
        rates_lines(after(s, follow_up)).len() == 1
    });
    let (second_prompt, second_cached, line) = rates_lines(after(&screen, follow_up))[0].clone();
    // the second turn prefills only what the first did not leave in the cache
    assert!(second_cached >= first_prompt, "{line}");
    assert!(second_prompt - second_cached < 64, "{line}");

    tmux.type_line("/stats");
    let screen = tmux.wait_for("/stats", Duration::from_secs(30), |s| {
        after(s, "/stats").contains("sampling")
    });
    let stats = after(&screen, "/stats");
    assert!(stats.contains("2 replies"), "{stats}");
    assert!(stats.contains("tokens warm"), "{stats}");
    assert!(!stats.contains(" 0 of "), "{stats}");

    tmux.type_line("/new");
    tmux.wait_for("/new", Duration::from_secs(30), |s| {
        after(s, "/new").contains("new conversation")
    });
    tmux.type_line("/stats");
    tmux.wait_for("/stats after /new", Duration::from_secs(30), |s| {
        after(s, "/stats").contains("· 0 messages")
    });

    let story = "Write a 2000-word essay on the history of the printing press.";
    tmux.type_line(story);
    tmux.wait_for("the story to start", REPLY_TIMEOUT, |s| {
        after(s, story).lines().count() > 5
    });
    tmux.key("C-c");
    let screen = tmux.wait_for("the stopped reply", Duration::from_secs(60), |s| {
        rates_lines(after(s, story)).len() == 1
    });
    let (_, _, line) = rates_lines(after(&screen, story))[0].clone();
    assert!(line.ends_with("stopped"), "{line}");

    tmux.type_line("/quit");
    let screen = tmux.wait_for("the demo to exit", Duration::from_secs(30), |s| {
        s.contains("demo exited with status")
    });
    assert!(
        screen.contains("demo exited with status 0"),
        "/quit did not exit 0:\n{}",
        after(&screen, "/quit")
    );
}
