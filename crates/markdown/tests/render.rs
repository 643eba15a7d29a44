//! Rendering tests: snapshots of whole documents and chunking invariance.

use ishizuki_markdown::{strip_ansi, ColorMode, Renderer};

const BLOCKS: &str = "# Title\n\nIntro paragraph.\n\n## Section two\n\n- first bullet\n- second bullet\n  - nested bullet\n* star bullet\n+ plus bullet\n\n1. one\n2. two\n10) ten\n\n> a quoted line\n> > nested quote\n>\n> - quoted bullet\n\n---\n\n### Third\n#not a heading\n***\n___\n";

const INLINE: &str = "Some **bold**, __also bold__, *italic*, _italic_ and `code` text.\n~~struck~~ and [a link](https://example.com) and [same](same).\nsnake_case_name and __init__ and 2 * 3 * 4.\n**unclosed bold goes back\n*unclosed italic and `unclosed code\n[unclosed link](http://x\n**bold with `code` inside** and *it **nested bold** ends*\nEscaped \\*not italic\\* and ***both***.\n";

const CODE: &str = "```python\ndef greet(name):\n\treturn f\"hi {name}\"  # comment\n```\n\n```rust\nfn main() {\n    println!(\"{}\", 1 + 2);\n}\n```\n\n```js\nconst x = [1, 2].map((v) => v * 2);\n```\n\n```ts\nlet n: number = 3;\n```\n\n```bash\nfor f in *.txt; do echo \"$f\"; done\n```\n\n```json\n{\"key\": [1, true, null]}\n```\n\n```brainfudge\n+++[>+<-]\n```\n\n~~~\nplain tilde fence with a very long line that must soft wrap inside the box nicely\n~~~\n\n  ```go\n  func main() {}\n  ```\n";

const TABLE: &str = "| Name | Qty | Price |\n|:-----|:---:|------:|\n| apple | 3 | 1.25 |\n| **banana** | 12 | `0.5` |\n| cherry with a fairly long description that wraps | 100 | 9.99 |\n\nAfter the table.\n| not | a table\nplain line\n";

const WRAP: &str = "This is a long paragraph that goes on and on so that it must wrap at forty columns without leaving trailing spaces.\n\n- A bullet item that is long enough to wrap onto a second line with a hanging indent.\n  1. A nested numbered item that also needs wrapping to show the deeper indent.\n> A quoted paragraph that is long enough to wrap, keeping the gutter on each line.\n\nsupercalifragilisticexpialidocious-and-an-unbreakable-word-that-is-longer-than-forty\n";

const CJK: &str = "# 日本語の見出し\n\n- 箇条書きの項目です。これは長い文章で、幅を超えると折り返されるはずです。\n- emoji 🎉🚀 party and **太字** text\n\n```\n漢字とemoji 🎉 inside code that is long enough to wrap around\n```\n\n| 名前 | 値 |\n|---|---|\n| 東京 | 🗼 |\n";

const THINKING: &str = "The user wants a greeting.\n\nI should be brief and mention **markdown** rendering, which is a fairly long sentence that wraps.\n\n";
const THINKING_REPLY: &str = "Hello! Here is *the* answer.\n";

struct Doc {
    name: &'static str,
    thinking: &'static str,
    reply: &'static str,
    width: usize,
}

const DOCS: &[Doc] = &[
    Doc {
        name: "blocks",
        thinking: "",
        reply: BLOCKS,
        width: 60,
    },
    Doc {
        name: "inline",
        thinking: "",
        reply: INLINE,
        width: 80,
    },
    Doc {
        name: "code",
        thinking: "",
        reply: CODE,
        width: 50,
    },
    Doc {
        name: "table",
        thinking: "",
        reply: TABLE,
        width: 40,
    },
    Doc {
        name: "wrap",
        thinking: "",
        reply: WRAP,
        width: 40,
    },
    Doc {
        name: "cjk",
        thinking: "",
        reply: CJK,
        width: 30,
    },
    Doc {
        name: "thinking",
        thinking: THINKING,
        reply: THINKING_REPLY,
        width: 40,
    },
];

/// Feeds the thinking bytes then the reply bytes, each cut at the given offsets.
fn render_split(
    doc: &Doc,
    mode: ColorMode,
    thinking_cuts: &[usize],
    reply_cuts: &[usize],
) -> String {
    let mut renderer = Renderer::new(mode, doc.width);
    let mut out = String::new();
    for chunk in chunks(doc.thinking.as_bytes(), thinking_cuts) {
        out += &renderer.push_thinking(chunk);
    }
    for chunk in chunks(doc.reply.as_bytes(), reply_cuts) {
        out += &renderer.push(chunk);
    }
    out + &renderer.finish()
}

fn render(doc: &Doc, mode: ColorMode) -> String {
    render_split(doc, mode, &[], &[])
}

fn chunks<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        let cut = cut.clamp(start, bytes.len());
        pieces.push(&bytes[start..cut]);
        start = cut;
    }
    pieces.push(&bytes[start..]);
    pieces
}

fn doc(name: &str) -> &'static Doc {
    DOCS.iter()
        .find(|doc| doc.name == name)
        .expect("known document")
}

fn readable(doc_name: &str) -> String {
    strip_ansi(&render(doc(doc_name), ColorMode::Ansi256))
}

/// Raw ANSI with ESC made visible.
fn visible_escapes(text: &str) -> String {
    text.replace('\x1b', "␛")
}

/// Deterministic pseudo-random numbers (no rand dependency needed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

#[test]
fn snapshot_blocks() {
    insta::assert_snapshot!(readable("blocks"));
}

#[test]
fn snapshot_inline_spans() {
    insta::assert_snapshot!(readable("inline"));
}

#[test]
fn snapshot_code_blocks() {
    insta::assert_snapshot!(readable("code"));
}

#[test]
fn snapshot_table() {
    insta::assert_snapshot!(readable("table"));
}

#[test]
fn snapshot_wrapping_at_forty() {
    insta::assert_snapshot!(readable("wrap"));
}

#[test]
fn snapshot_cjk_and_emoji() {
    insta::assert_snapshot!(readable("cjk"));
}

#[test]
fn snapshot_thinking_then_reply() {
    insta::assert_snapshot!(readable("thinking"));
}

#[test]
fn snapshot_raw_ansi_inline_spans() {
    insta::assert_snapshot!(visible_escapes(&render(doc("inline"), ColorMode::Ansi256)));
}

#[test]
fn snapshot_raw_ansi_truecolor_code() {
    let doc = Doc {
        name: "rust",
        thinking: "",
        reply: "```rs\nlet x = 1;\n```\n",
        width: 30,
    };
    insta::assert_snapshot!(visible_escapes(&render(&doc, ColorMode::TrueColor)));
}

#[test]
fn two_chunk_splits_match_whole() {
    for doc in DOCS {
        let whole = render(doc, ColorMode::Ansi256);
        for cut in 1..doc.reply.len() {
            let split = render_split(doc, ColorMode::Ansi256, &[], &[cut]);
            assert_eq!(split, whole, "{} split at reply byte {cut}", doc.name);
        }
        for cut in 1..doc.thinking.len() {
            let split = render_split(doc, ColorMode::Ansi256, &[cut], &[]);
            assert_eq!(split, whole, "{} split at thinking byte {cut}", doc.name);
        }
    }
}

#[test]
fn byte_at_a_time_matches_whole() {
    for mode in [ColorMode::Ansi256, ColorMode::TrueColor, ColorMode::None] {
        for doc in DOCS {
            let every_byte = |text: &str| (1..text.len()).collect::<Vec<_>>();
            let split = render_split(doc, mode, &every_byte(doc.thinking), &every_byte(doc.reply));
            assert_eq!(split, render(doc, mode), "{} in {mode:?}", doc.name);
        }
    }
}

#[test]
fn random_splits_match_whole() {
    let mut lcg = Lcg(7);
    for doc in DOCS {
        let whole = render(doc, ColorMode::Ansi256);
        for _ in 0..40 {
            let mut random_cuts = |len: usize| {
                let mut cuts: Vec<usize> = (0..lcg.below(12)).map(|_| lcg.below(len + 1)).collect();
                cuts.sort_unstable();
                cuts
            };
            let thinking_cuts = random_cuts(doc.thinking.len());
            let reply_cuts = random_cuts(doc.reply.len());
            let split = render_split(doc, ColorMode::Ansi256, &thinking_cuts, &reply_cuts);
            assert_eq!(
                split, whole,
                "{} cut at {thinking_cuts:?} / {reply_cuts:?}",
                doc.name
            );
        }
    }
}

#[test]
fn no_color_is_passthrough() {
    for doc in DOCS {
        let expected = format!("{}{}", doc.thinking, doc.reply);
        assert_eq!(render(doc, ColorMode::None), expected, "{}", doc.name);
    }
}

#[test]
fn control_chars_never_reach_the_terminal() {
    let mut renderer = Renderer::new(ColorMode::Ansi256, 40);
    let mut out =
        renderer.push(b"clear \x1b[2J now\r\n**bold \x1b]0;title\x07**\n\x07\x7f\xc2\x9b");
    out += &renderer.push_thinking(b"think \x1b[2J");
    out += &renderer.finish();
    assert!(!out.contains("\x1b[2J"), "{out:?}");
    assert!(!out.contains("\x1b]"), "{out:?}");
    assert!(!out.contains('\r') && !out.contains('\x07') && !out.contains('\x7f'));
    assert!(!out.contains('\u{9b}'));
    assert!(strip_ansi(&out).contains("clear \u{FFFD}[2J now"));
}

#[test]
fn multibyte_chars_split_across_chunks_render_intact() {
    let text = "héllo 日本 🎉 **太字**\n";
    let bytes = text.as_bytes();
    let mut renderer = Renderer::new(ColorMode::Ansi256, 40);
    let mut out = String::new();
    for byte in bytes {
        out += &renderer.push(std::slice::from_ref(byte));
    }
    out += &renderer.finish();
    assert_eq!(strip_ansi(&out), "héllo 日本 🎉 太字\n");
}

#[test]
fn invalid_utf8_becomes_replacement_char() {
    let mut renderer = Renderer::new(ColorMode::Ansi256, 40);
    let mut out = renderer.push(b"a\xffb\xe6\x97");
    out += &renderer.finish();
    assert_eq!(strip_ansi(&out), "a\u{FFFD}b\u{FFFD}\n");
}

#[test]
fn random_bytes_do_not_panic_and_stay_chunk_invariant() {
    let alphabet = b"#*-_`~|>[]() \n\t\\1.abc\xe6\x97\xa5\xff\x1b";
    let mut lcg = Lcg(42);
    for _ in 0..300 {
        let len = lcg.below(300);
        let bytes: Vec<u8> = (0..len)
            .map(|_| alphabet[lcg.below(alphabet.len())])
            .collect();
        let width = lcg.below(80);
        let mut whole = Renderer::new(ColorMode::Ansi256, width);
        let expected = whole.push(&bytes) + &whole.finish();
        let mut chunked = Renderer::new(ColorMode::Ansi256, width);
        let mut out = String::new();
        for chunk in bytes.chunks(1 + lcg.below(7)) {
            out += &chunked.push(chunk);
        }
        out += &chunked.finish();
        assert_eq!(out, expected, "input {bytes:?}");
        assert!(!out.contains("\x1b[2J"));
    }
}

#[test]
fn finish_closes_an_open_code_box_and_resets() {
    let mut renderer = Renderer::new(ColorMode::Ansi256, 30);
    let mut out = renderer.push(
        b"```py
x = 1",
    );
    out += &renderer.finish();
    let lines: Vec<String> = strip_ansi(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[2].starts_with('\u{2570}') && lines[2].ends_with('\u{256f}'));
    assert_eq!(strip_ansi(&renderer.push(b"# again\n")), "again\n");
}

#[test]
fn set_width_applies_from_the_next_line() {
    let mut renderer = Renderer::new(ColorMode::Ansi256, 20);
    let mut out = renderer.push(b"aaa bbb ccc ");
    renderer.set_width(40);
    out += &renderer.push(b"ddd eee fff ggg\nhhh iii jjj kkk lll mmm\n");
    out += &renderer.finish();
    assert_eq!(
        strip_ansi(&out),
        "aaa bbb ccc ddd eee\nfff ggg\nhhh iii jjj kkk lll mmm\n"
    );
}

#[test]
fn color_mode_from_env() {
    let mode = ColorMode::from_env;
    assert_eq!(
        mode(true, Some("1"), None, Some("truecolor")),
        ColorMode::None
    );
    assert_eq!(
        mode(true, Some(""), Some("xterm"), None),
        ColorMode::Ansi256
    );
    assert_eq!(mode(true, None, Some("dumb"), None), ColorMode::None);
    assert_eq!(mode(false, None, Some("xterm"), None), ColorMode::None);
    assert_eq!(
        mode(true, None, Some("xterm"), Some("24bit")),
        ColorMode::TrueColor
    );
    assert_eq!(
        mode(true, None, None, Some("truecolor")),
        ColorMode::TrueColor
    );
    assert_eq!(mode(true, None, None, None), ColorMode::Ansi256);
}

#[test]
fn strip_ansi_removes_csi_and_osc() {
    let text = "\x1b[1;38;5;12mbold\x1b[0m \x1b]8;;http://x\x1b\\link\x1b]8;;\x07 end";
    assert_eq!(strip_ansi(text), "bold link end");
}

#[test]
fn styles_are_reset_before_every_newline() {
    for doc in DOCS {
        let out = render(doc, ColorMode::Ansi256);
        for line in out.split_inclusive('\n') {
            let last_sgr = line.rfind("\x1b[");
            if let Some(at) = last_sgr {
                assert!(line[at..].starts_with("\x1b[0m"), "{}: {line:?}", doc.name);
            }
        }
    }
}

#[test]
fn thinking_after_reply_text_starts_on_a_fresh_line() {
    let mut renderer = Renderer::new(ColorMode::Ansi256, 40);
    let mut out = renderer.push(b"partial reply");
    out += &renderer.push_thinking(b"more thought\n");
    out += &renderer.push(b" continues\n");
    out += &renderer.finish();
    let expected = "partial reply\n╭ thinking\n│ more thought\n╰\n continues\n";
    assert_eq!(strip_ansi(&out), expected);
}

#[test]
fn oversized_table_is_shown_as_plain_text() {
    let mut doc = String::from("| h |\n|---|\n");
    for row in 0..250 {
        doc += &format!("| r{row} |\n");
    }
    doc += "after\n";
    let mut renderer = Renderer::new(ColorMode::Ansi256, 40);
    let out = strip_ansi(&(renderer.push(doc.as_bytes()) + &renderer.finish()));
    assert_eq!(out, doc);
}

#[test]
fn table_at_end_of_reply_is_drawn_by_finish() {
    let mut renderer = Renderer::new(ColorMode::Ansi256, 40);
    let mut out = renderer.push(b"| a | b |\n|--:|---|\n| 1 | 22 |");
    assert!(!out.contains('│'), "rows are held until the table ends");
    out += &renderer.finish();
    let expected = "┌───┬────┐\n│ a │ b  │\n├───┼────┤\n│ 1 │ 22 │\n└───┴────┘\n";
    assert_eq!(strip_ansi(&out), expected);
}
