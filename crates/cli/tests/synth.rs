//! `ishizuki synth` writes a model that `bench` and `run` load; bad arguments are clear errors.
use std::path::PathBuf;
use std::process::{Command, Output};

fn ishizuki(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ishizuki"))
        .args(args)
        .env("ISHIZUKI_DEVICE", "cpu")
        .output()
        .expect("ishizuki runs")
}

fn ok(args: &[&str]) -> String {
    let out = ishizuki(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ishizuki {args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_synthetic_model_benches_and_generates() {
    let dir = std::env::temp_dir().join(format!("ishizuki-synth-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("tiny.gguf");
    let f = file.to_str().unwrap();
    ok(&[
        "synth",
        "--preset",
        "llama-tiny",
        "--type",
        "q4_k_m",
        "-o",
        f,
        "-t",
        "2",
    ]);
    let json = ok(&[
        "bench", "-m", f, "-p", "16", "-n", "4", "-r", "1", "-t", "2", "--json",
    ]);
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{json}");
    assert!(
        rows.iter().all(|r| r["avg_ts"].as_f64().unwrap() > 0.0),
        "{json}"
    );
    for read in ["argmax", "top-k:40"] {
        let json = ok(&[
            "bench", "-m", f, "-p", "0", "-n", "4", "-r", "1", "-t", "2", "--json", "--read", read,
        ]);
        let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(rows[0]["read"], read, "{json}");
        assert!(rows[0]["avg_ts"].as_f64().unwrap() > 0.0, "{json}");
    }
    for bad in ["top-k:0", "top-k:5000", "top-k:x", "ids"] {
        let out = ishizuki(&["bench", "-m", f, "-p", "0", "-n", "4", "--read", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("--read"),
            "{bad}: {stderr}"
        );
    }
    let text = ok(&[
        "run", "-m", f, "-p", "hello", "-n", "4", "--temp", "0", "-t", "2",
    ]);
    assert!(!text.is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_synth_arguments_are_errors() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["synth", "--preset", "gpt5", "-o", "/tmp/x.gguf"],
            "unknown preset",
        ),
        (
            &[
                "synth",
                "--preset",
                "llama-tiny",
                "--type",
                "q3",
                "-o",
                "/tmp/x.gguf",
            ],
            "unknown type",
        ),
        (
            &[
                "synth",
                "--preset",
                "llama-tiny",
                "--arch",
                "gemma3",
                "-o",
                "/tmp/x.gguf",
            ],
            "not gemma3",
        ),
    ];
    for (args, want) in cases {
        let out = ishizuki(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(want) && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
}
