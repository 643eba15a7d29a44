//! The server over real sockets on SmolLM2-135M: clients that go away mid-prefill or at random
//! under load, auth, the loopback rule. Protocol shapes are checked with the official SDKs in
//! tests/python.
use ishizuki_cpu::CpuBackend;
use ishizuki_engine::{Engine, EngineHandle, TextModel};
use ishizuki_models::Model;
use ishizuki_server::{router, AppState, ServerConfig};
use ishizuki_text::Tokenizer;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The CPU pool spins: two engines at once on two cores only slow each other down.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn model_path() -> Option<PathBuf> {
    let dir = std::env::var_os("ISHIZUKI_TEST_MODELS")
        .map_or_else(|| "/work/cache/models".into(), PathBuf::from);
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("ISHIZUKI_REQUIRE_MODELS").is_none(),
        "{} is missing",
        path.display()
    );
    eprintln!("skipping: {} not found", path.display());
    None
}

fn config(api_key: Option<&str>) -> ServerConfig {
    ServerConfig {
        host: "127.0.0.1".parse().unwrap(),
        port: 0,
        api_key: api_key.map(str::to_string),
        insecure_no_auth: false,
        response_store_entries: 16,
    }
}

/// A server on an ephemeral loopback port, serving from a thread of its own.
fn start(path: &PathBuf, n_ctx: usize, api_key: Option<&str>) -> SocketAddr {
    let model = Model::load(path, Arc::new(CpuBackend::new(2))).unwrap();
    let tokenizer = Tokenizer::from_gguf(model.file()).unwrap();
    let template = model
        .file()
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let text = TextModel::new("smollm2".into(), tokenizer, template.as_deref(), n_ctx).unwrap();
    let engine = Engine::new(Arc::new(text), model, 2);
    let state = AppState::new(config(api_key));
    state.engine.set(EngineHandle::spawn(engine)).ok().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, router(state)).await.unwrap();
        });
    });
    addr
}

/// Sends one request (Connection: close) and reads the whole response: (status, body).
fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    )
}

/// The body of a chunked response, joined.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_string();
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = send(addr, "POST", path, &[], &body.to_string());
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Starts a request and walks away after `after`: with an RST when `reset`, else a FIN.
fn abandon(addr: SocketAddr, path: &str, body: &Value, after: Duration, reset: bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    let req = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).unwrap();
    std::thread::sleep(after);
    if reset {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: setting SO_LINGER on a socket we own; closing it then sends an RST.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as u32,
            );
        }
    }
    drop(s);
}

fn metric(addr: SocketAddr, name: &str) -> f64 {
    let (_, text) = send(addr, "GET", "/metrics", &[], "");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn long_prompt(n: usize, salt: u32) -> Value {
    let ids: Vec<u32> = (0..n as u32)
        .map(|i| 100 + (i * 7919 + salt) % 40000)
        .collect();
    json!({"prompt": ids, "max_tokens": 1, "temperature": 0})
}

#[test]
fn a_client_gone_during_prefill_stops_it_within_a_chunk() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = model_path() else { return };
    let addr = start(&path, 6144, None);
    let t0 = Instant::now();
    let (status, _) = post(addr, "/v1/completions", &long_prompt(5000, 1));
    let full = t0.elapsed();
    assert_eq!(status, 200);
    for (salt, reset) in [(2, true), (3, false)] {
        abandon(
            addr,
            "/v1/completions",
            &long_prompt(5000, salt),
            full / 5,
            reset,
        );
        let t1 = Instant::now();
        let (status, v) = post(
            addr,
            "/v1/completions",
            &json!({"prompt": "Hello", "max_tokens": 4, "temperature": 0}),
        );
        let next = t1.elapsed();
        assert_eq!(status, 200, "{v}");
        assert!(
            next < full / 2,
            "the next request took {next:?}; the full prefill takes {full:?} (reset {reset})"
        );
    }
    assert!(metric(addr, "ishizuki:engine_cancelled_total") >= 2.0);
    // the cancelled prefill left a reusable prefix: the same prompt again reuses it
    let (_, v) = post(addr, "/v1/completions", &long_prompt(5000, 3));
    assert!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            >= 512,
        "{v}"
    );
}

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib * 1024
}

#[test]
fn concurrent_clients_with_random_disconnects_get_the_same_answers() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = model_path() else { return };
    let addr = start(&path, 2048, None);
    let questions = [
        "What is the capital of France?",
        "Name a color.",
        "Count to five.",
        "Say hello.",
    ];
    let request = |q: &str, stream: bool| json!({"messages": [{"role": "user", "content": q}], "max_tokens": 12, "temperature": 0, "stream": stream});
    let solo: Vec<Value> = questions
        .iter()
        .map(|q| {
            post(addr, "/v1/chat/completions", &request(q, false)).1["choices"][0]["message"]
                ["content"]
                .clone()
        })
        .collect();
    // warm the buffers a load grows once, then take the baseline
    post(addr, "/v1/chat/completions", &request(questions[0], false));
    let before = rss_bytes();
    let solo = Arc::new(solo);
    let handles: Vec<_> = (0..16u64)
        .map(|client| {
            let solo = solo.clone();
            std::thread::spawn(move || {
                let mut rng = client.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for i in 0..10u64 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let q = (client + i) as usize % questions.len();
                    let body = request(questions[q], rng % 2 == 0);
                    if rng % 3 == 0 {
                        abandon(
                            addr,
                            "/v1/chat/completions",
                            &body,
                            Duration::from_millis(rng % 300),
                            rng % 2 == 1,
                        );
                        continue;
                    }
                    let (status, text) =
                        send(addr, "POST", "/v1/chat/completions", &[], &body.to_string());
                    assert_eq!(status, 200, "{text}");
                    let content = if body["stream"] == true {
                        Value::String(streamed_content(&text))
                    } else {
                        serde_json::from_str::<Value>(&text).unwrap()["choices"][0]["message"]
                            ["content"]
                            .clone()
                    };
                    assert_eq!(content, solo[q], "client {client} request {i}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("no client panicked");
    }
    let (status, _) = send(addr, "GET", "/health", &[], "");
    assert_eq!(status, 200);
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "memory grew by {} MiB under load",
        grown >> 20
    );
}

/// The content deltas of a chat SSE stream, joined.
fn streamed_content(body: &str) -> String {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn api_keys_are_required_where_set() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = model_path() else { return };
    let addr = start(&path, 512, Some("sekrit"));
    let chat =
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).to_string();
    let messages =
        json!({"max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let (s, body) = send(addr, "POST", "/v1/chat/completions", &[], &chat);
    assert_eq!(s, 401);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["type"],
        "authentication_error"
    );
    let (s, body) = send(
        addr,
        "POST",
        "/v1/messages",
        &[("x-api-key", "wrong")],
        &messages,
    );
    assert_eq!(s, 401);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["error"]["type"].as_str()),
        (Some("error"), Some("authentication_error"))
    );
    assert_eq!(
        send(
            addr,
            "POST",
            "/v1/chat/completions",
            &[("Authorization", "Bearer sekrit")],
            &chat
        )
        .0,
        200
    );
    assert_eq!(
        send(
            addr,
            "POST",
            "/v1/messages",
            &[("x-api-key", "sekrit")],
            &messages
        )
        .0,
        200
    );
    assert_eq!(send(addr, "GET", "/health", &[], "").0, 200);
}

#[test]
fn a_public_bind_needs_a_key() {
    let mut c = config(None);
    c.host = "0.0.0.0".parse().unwrap();
    assert!(c.check().unwrap_err().contains("--api-key"));
    c.insecure_no_auth = true;
    assert!(c.check().is_ok());
    c.insecure_no_auth = false;
    c.api_key = Some("k".into());
    assert!(c.check().is_ok());
    assert!(config(None).check().is_ok(), "loopback needs no key");
}
