//! `lmkit serve --prefix-cache-mb`: completions (echo and logprobs
//! included) answered the same with the prefix cache as without it, and
//! its hit and miss tokens and pool bytes in `/metrics`. Over real HTTP on
//! loopback; bf16 weights, whose results do not depend on how many rows a
//! forward call holds (see `crates/lmkit/tests/gpt2_prefix_cache.rs`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{gpt2_tiny, tmpdir};
use serde_json::{json, Value};

/// A running `lmkit serve`, killed when dropped.
struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(model: &str, prefix_cache_mb: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .args(["serve", "--addr", "127.0.0.1:0", "--dtype", "bf16"])
        .args(["--model", model, "--prefix-cache-mb", prefix_cache_mb])
        .env("RAYON_NUM_THREADS", "2")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lmkit serve");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("lmkit serve: listening on http://")
                .map(str::to_string)
        })
        .expect("the server printed its address");
    std::thread::spawn(move || for _ in lines {});
    Server(child, addr)
}

/// One HTTP/1.0 request (no chunked answer): status and body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("headers end");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}{{model=\"tiny\"}} ")))
        .map(|v| v.parse().expect("a number"))
}

#[test]
fn prefix_cache_serves_the_same_completions_and_counts_hits() {
    let dir = tmpdir("serve-prefix-cache");
    let model = format!("tiny={}", gpt2_tiny(&dir).display());
    let (on, off) = (serve(&model, "1"), serve(&model, "0"));
    // One byte per token; 32 positions. Blocks of 16 tokens; a prompt
    // reuses whole blocks and feeds at least 5 tokens itself.
    let head = "abcdefghijklmnopqrstu";
    let prompts = [
        (format!("{head}vwxyz"), None),      // 26 tokens, a miss
        (format!("{head}vwxyz"), None),      // the same: 16 from the cache
        (format!("{head}12345"), Some(3)),   // diverges after 21: 16 hit, seeded
        ("abcdefghijklmnopqr".into(), None), // 18: nothing reusable
        (format!("{head}vwxyz"), Some(9)),   // 16 hit, seeded
    ];
    let mut total = 0;
    for (i, (prompt, seed)) in prompts.iter().enumerate() {
        total += prompt.len();
        let mut body = json!({"model": "tiny", "prompt": prompt, "max_tokens": 4,
                              "echo": true, "logprobs": 2, "temperature": 0});
        if let Some(s) = seed {
            body["temperature"] = json!(0.9);
            body["seed"] = json!(s);
        }
        let answers: Vec<Value> = [&on, &off]
            .iter()
            .map(|s| {
                let (st, b) = http(&s.1, "POST", "/v1/completions", &body.to_string());
                assert_eq!(st, 200, "request {i}: {b}");
                serde_json::from_str(&b).expect("JSON")
            })
            .collect();
        assert_eq!(answers[0]["choices"], answers[1]["choices"], "request {i}");
        assert_eq!(answers[0]["usage"], answers[1]["usage"], "request {i}");
    }
    let (st, text) = http(&on.1, "GET", "/metrics", "");
    assert_eq!(st, 200);
    let hit = metric(&text, "lmkit_prefix_cache_hit_tokens_total").expect("hit tokens");
    let miss = metric(&text, "lmkit_prefix_cache_miss_tokens_total").expect("miss tokens");
    let bytes = metric(&text, "lmkit_prefix_cache_bytes").expect("pool bytes");
    assert_eq!((hit, hit + miss), (48.0, total as f64), "{text}");
    assert!(bytes > 0.0 && bytes <= (1 << 20) as f64, "{text}");
    assert!(text.contains("# TYPE lmkit_prefix_cache_hit_tokens_total counter"));
    let (_, text) = http(&off.1, "GET", "/metrics", "");
    assert_eq!(metric(&text, "lmkit_prefix_cache_hit_tokens_total"), None);
}
