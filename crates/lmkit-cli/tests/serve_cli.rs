//! `lmkit serve` end to end, over real HTTP on loopback: the OpenAI routes
//! give what the CLI gives (greedy completion = `lmkit generate --greedy`,
//! embeddings = `lmkit embed`), SSE framing, TEI routes, every class of bad
//! request answered 4xx with the server still serving, concurrency, a full
//! queue answered 429, an API key, and SIGTERM.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{byte_tokenizer, lmkit, tmpdir};
use serde_json::{json, Value};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tiny GPT-2 fixture with a byte-level tokenizer beside it.
/// A running `lmkit serve`, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .arg("serve")
        .args(["--addr", "127.0.0.1:0"])
        .args(args)
        .env("RAYON_NUM_THREADS", "2")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lmkit serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut addr = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(a) = line.strip_prefix("lmkit serve: listening on http://") {
            addr = Some(a.to_string());
            break;
        }
    }
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Server {
        child,
        addr: addr.expect("the server printed its address"),
    }
}

/// One HTTP/1.1 request; the status, the headers (lower-cased) and the
/// body (de-chunked).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    extra: &[(&str, &str)],
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    if let Some(b) = body {
        s.write_all(b.as_bytes()).unwrap();
    }
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers end");
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let mut rest = &raw[split + 4..];
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        loop {
            let nl = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap().trim(), 16)
                .unwrap();
            rest = &rest[nl + 2..];
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[..n]);
            rest = &rest[n + 2..];
        }
        out
    } else {
        rest.to_vec()
    };
    (status, head, String::from_utf8(body).unwrap())
}

fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let (st, _, b) = http(addr, "POST", path, Some(&body.to_string()), &[]);
    (
        st,
        serde_json::from_str(&b).unwrap_or_else(|_| panic!("{path}: not JSON: {b}")),
    )
}

fn cli_json(args: &[&str]) -> String {
    let o = lmkit(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn openai_and_tei_routes_match_the_cli() {
    let dir = tmpdir("serve");
    let _cleanup = common::Cleanup(dir.clone());
    let tiny = common::gpt2_tiny(&dir);
    let minilm = root().join("assets/minilm");
    let srv = serve(&[
        "--model",
        tiny.to_str().unwrap(),
        "--model",
        &format!("minilm={}", minilm.display()),
        "--max-tokens",
        "24",
    ]);
    let a = srv.addr.as_str();

    let (st, _, b) = http(a, "GET", "/health", None, &[]);
    assert_eq!(st, 200, "{b}");
    let (st, _, b) = http(a, "GET", "/v1/models", None, &[]);
    let models: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(st, 200);
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["minilm", "tiny"]);

    // Greedy completion = `lmkit generate --greedy`.
    let prompt = "Hello, wor";
    let want: Value = serde_json::from_str(
        cli_json(&[
            "generate",
            "--model",
            tiny.to_str().unwrap(),
            "--prompt",
            prompt,
            "--greedy",
            "--max-new-tokens",
            "12",
            "--json",
        ])
        .trim(),
    )
    .unwrap();
    let req = json!({"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0});
    let (st, got) = post(a, "/v1/completions", &req);
    assert_eq!(st, 200, "{got}");
    assert_eq!(got["object"], "text_completion");
    assert_eq!(got["choices"][0]["text"], want["text"], "{got}");
    assert_eq!(got["usage"]["completion_tokens"], want["new_tokens"]);
    assert_eq!(got["usage"]["prompt_tokens"], want["prompt_tokens"]);
    let finish = if want["finish_reason"] == "length" {
        "length"
    } else {
        "stop"
    };
    assert_eq!(got["choices"][0]["finish_reason"], finish);

    // The same as Server-Sent Events: `data: {json}` events, a final chunk
    // with the finish reason, then `data: [DONE]`.
    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    let (st, head, body) = http(a, "POST", "/v1/completions", Some(&sreq.to_string()), &[]);
    assert_eq!(st, 200, "{body}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    let mut text = String::new();
    let mut finishes = Vec::new();
    for e in &events[..events.len() - 1] {
        let data = e
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not an SSE data event: {e:?}"));
        let c: Value = serde_json::from_str(data).unwrap();
        text.push_str(c["choices"][0]["text"].as_str().unwrap());
        if !c["choices"][0]["finish_reason"].is_null() {
            finishes.push(c["choices"][0]["finish_reason"].clone());
        }
    }
    assert_eq!(text, want["text"].as_str().unwrap());
    assert_eq!(finishes, [json!(finish)]);
    // stream_options.include_usage: a last chunk with no choices and the usage.
    sreq["stream_options"] = json!({"include_usage": true});
    let (st, _, body) = http(a, "POST", "/v1/completions", Some(&sreq.to_string()), &[]);
    assert_eq!(st, 200, "{body}");
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    let last: Value =
        serde_json::from_str(events[events.len() - 2].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(last["choices"], json!([]), "{last}");
    assert_eq!(last["usage"], got["usage"], "{last}");

    // n choices and a list of prompts; echo; stop strings.
    let (st, got) = post(
        a,
        "/v1/completions",
        &json!({
            "model": "tiny", "prompt": [prompt, "abc"], "n": 2, "max_tokens": 5, "temperature": 0.8, "seed": 7,
        }),
    );
    assert_eq!(st, 200, "{got}");
    let idx: Vec<u64> = got["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, [0, 1, 2, 3]);
    let (_, again) = post(
        a,
        "/v1/completions",
        &json!({
            "model": "tiny", "prompt": [prompt, "abc"], "n": 2, "max_tokens": 5, "temperature": 0.8, "seed": 7,
        }),
    );
    assert_eq!(
        got["choices"], again["choices"],
        "a seed makes sampling reproducible"
    );
    let (_, echo) = post(
        a,
        "/v1/completions",
        &json!({"model": "tiny", "prompt": prompt, "max_tokens": 3, "temperature": 0, "echo": true}),
    );
    assert!(
        echo["choices"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with(prompt),
        "{echo}"
    );

    // Penalties = `lmkit generate` with the same flags.
    let want: Value = serde_json::from_str(
        cli_json(&[
            "generate",
            "--model",
            tiny.to_str().unwrap(),
            "--prompt",
            prompt,
            "--greedy",
            "--max-new-tokens",
            "12",
            "--presence-penalty",
            "1.5",
            "--frequency-penalty",
            "-0.5",
            "--json",
        ])
        .trim(),
    )
    .unwrap();
    let (st, got) = post(
        a,
        "/v1/completions",
        &json!({"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0,
                "presence_penalty": 1.5, "frequency_penalty": -0.5}),
    );
    assert_eq!(st, 200, "{got}");
    assert_eq!(got["choices"][0]["text"], want["text"], "{got}");

    // Choices decoded together in one continuous batch (4 prompts × n 2)
    // equal each one asked for alone: greedy, and seeded (choice k of a
    // request is seeded seed + k).
    let prompts = ["Hello, wor", "abc", "The quick brown", "x"];
    for (temperature, seed) in [(0.0, 1), (0.9, 11)] {
        let (st, all) = post(
            a,
            "/v1/completions",
            &json!({"model": "tiny", "prompt": prompts, "n": 2, "max_tokens": 10,
                    "temperature": temperature, "seed": seed, "presence_penalty": 0.3}),
        );
        assert_eq!(st, 200, "{all}");
        for (p, text) in prompts.iter().enumerate() {
            for k in 0..2 {
                let (_, one) = post(
                    a,
                    "/v1/completions",
                    &json!({"model": "tiny", "prompt": text, "max_tokens": 10,
                            "temperature": temperature, "seed": seed + k, "presence_penalty": 0.3}),
                );
                let i = p * 2 + k as usize;
                assert_eq!(all["choices"][i]["index"], json!(i));
                assert_eq!(
                    all["choices"][i]["text"], one["choices"][0]["text"],
                    "prompt {p} choice {k} at temperature {temperature}"
                );
            }
        }
    }
    let (_, _, m) = http(a, "GET", "/metrics", None, &[]);
    let stat = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {m}"))
    };
    assert!(
        stat("lmkit_decode_batch_size_sum") > stat("lmkit_decode_batch_size_count"),
        "some decode steps advanced several completions at once: {m}"
    );

    // logprobs with echo: the prompt's tokens (the first without a
    // logprob), then the new ones; greedy picks each position's most likely.
    let (st, got) = post(
        a,
        "/v1/completions",
        &json!({"model": "tiny", "prompt": "abc", "max_tokens": 5, "temperature": 0,
                "logprobs": 2, "echo": true}),
    );
    assert_eq!(st, 200, "{got}");
    let lp = &got["choices"][0]["logprobs"];
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let (pt, ct) = (
        got["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
        got["usage"]["completion_tokens"].as_u64().unwrap() as usize,
    );
    assert_eq!(tokens.len(), pt + ct, "{lp}");
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null());
    for i in 1..tokens.len() {
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!((2..=3).contains(&top.len()), "{lp}");
        assert!(chosen <= 0.0 && top[tokens[i]].as_f64() == Some(chosen));
        if i >= pt {
            let best = top
                .values()
                .map(|v| v.as_f64().unwrap())
                .fold(f64::MIN, f64::max);
            assert_eq!(chosen, best, "greedy token {i} is the most likely");
        }
    }
    let offsets: Vec<u64> = serde_json::from_value(lp["text_offset"].clone()).unwrap();
    assert_eq!(offsets[0], 0);
    assert_eq!(
        offsets[pt] as usize,
        "abc".len(),
        "new tokens start after the echo"
    );
    // Streamed: one chunk per token, each with that token's logprobs.
    let (st, _, body) = http(
        a,
        "POST",
        "/v1/completions",
        Some(
            &json!({"model": "tiny", "prompt": "abc", "max_tokens": 5, "temperature": 0,
                    "logprobs": 2, "stream": true})
            .to_string(),
        ),
        &[],
    );
    assert_eq!(st, 200, "{body}");
    let streamed: Vec<Value> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .filter(|c: &Value| c["choices"][0]["finish_reason"].is_null())
        .collect();
    assert_eq!(streamed.len(), ct);
    for (i, c) in streamed.iter().enumerate() {
        assert_eq!(
            c["choices"][0]["logprobs"]["tokens"],
            json!([tokens[pt + i]]),
            "{c}"
        );
    }

    // Embeddings = `lmkit embed`, float and base64.
    let texts = ["A man is eating food.", "Someone is having a meal.", ""];
    let input = dir.join("texts.txt");
    std::fs::write(&input, texts.join("\n") + "\n").unwrap();
    let cli: Vec<Vec<f64>> = cli_json(&[
        "embed",
        "--model",
        minilm.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
    ])
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    assert_eq!(cli.len(), 3);
    let (st, got) = post(
        a,
        "/v1/embeddings",
        &json!({"model": "minilm", "input": texts}),
    );
    assert_eq!(st, 200, "{got}");
    for (i, want) in cli.iter().enumerate() {
        let v: Vec<f64> = serde_json::from_value(got["data"][i]["embedding"].clone()).unwrap();
        assert_eq!(v.len(), want.len());
        let diff = v
            .iter()
            .zip(want)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(diff < 1e-5, "text {i}: max difference {diff}");
    }
    assert!(got["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let (_, b64) = post(
        a,
        "/v1/embeddings",
        &json!({"model": "minilm", "input": texts[0], "encoding_format": "base64"}),
    );
    let s = b64["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(s.len(), (384 * 4usize).div_ceil(3) * 4);

    // TEI: /embed (normalized by default), /tokenize, /decode.
    let (st, got) = post(a, "/embed", &json!({"inputs": texts[0]}));
    assert_eq!(st, 200, "{got}");
    let v: Vec<f64> = serde_json::from_value(got[0].clone()).unwrap();
    let norm: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    let (st, got) = post(
        a,
        "/tokenize",
        &json!({"inputs": "hello world", "model": "minilm"}),
    );
    assert_eq!(st, 200, "{got}");
    let toks: Vec<&str> = got[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert_eq!(toks, ["[CLS]", "hello", "world", "[SEP]"]);
    let ids: Vec<u64> = got[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    let (st, got) = post(a, "/decode", &json!({"ids": ids, "model": "minilm"}));
    assert_eq!((st, got), (200, json!(["hello world"])));

    // The page is served, with no build step.
    let (st, head, page) = http(a, "GET", "/", None, &[]);
    assert_eq!(st, 200);
    assert!(head.contains("text/html") && page.contains("/v1/completions"));

    // Prometheus metrics count what was served.
    let (st, _, m) = http(a, "GET", "/metrics", None, &[]);
    assert_eq!(st, 200);
    assert!(
        m.contains("lmkit_requests_total{route=\"/v1/completions\",code=\"200\"}"),
        "{m}"
    );
    assert!(m.contains("lmkit_embed_batch_size_count"), "{m}");
    assert!(m.contains("lmkit_queue_depth{model=\"tiny\"} 0"), "{m}");
}

#[test]
fn bad_requests_are_4xx_and_the_server_keeps_serving() {
    let dir = tmpdir("serve-bad");
    let _cleanup = common::Cleanup(dir.clone());
    let tiny = common::gpt2_tiny(&dir);
    let minilm = root().join("assets/minilm");
    let srv = serve(&[
        "--model",
        &format!("tiny={}", tiny.display()),
        "--model",
        &format!("minilm={}", minilm.display()),
        "--max-tokens",
        "16",
        "--body-limit",
        "4096",
    ]);
    let a = srv.addr.as_str();
    let cases: Vec<(&str, String, u16, Option<&str>)> = vec![
        ("/v1/completions", "{not json".into(), 400, None),
        (
            "/v1/completions",
            json!({"model": "nope", "prompt": "x"}).to_string(),
            404,
            None,
        ),
        (
            "/v1/completions",
            json!({"model": "minilm", "prompt": "x"}).to_string(),
            400,
            Some("model"),
        ),
        (
            "/v1/embeddings",
            json!({"model": "tiny", "input": "x"}).to_string(),
            400,
            Some("model"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "max_tokens": 17}).to_string(),
            400,
            Some("max_tokens"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x".repeat(30), "max_tokens": 8}).to_string(),
            400,
            Some("prompt"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "temperature": 3}).to_string(),
            400,
            Some("temperature"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "top_p": 0}).to_string(),
            400,
            Some("top_p"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "n": 100}).to_string(),
            400,
            Some("n"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": [1, 2, 999]}).to_string(),
            400,
            Some("prompt"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": ""}).to_string(),
            400,
            Some("prompt"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}).to_string(),
            400,
            Some("stop"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "logprobs": 6}).to_string(),
            400,
            Some("logprobs"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "presence_penalty": 2.5}).to_string(),
            400,
            Some("presence_penalty"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "frequency_penalty": -3}).to_string(),
            400,
            Some("frequency_penalty"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "bogus": 1}).to_string(),
            400,
            None,
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x", "stream_options": {"include_usage": true}})
                .to_string(),
            400,
            Some("stream_options"),
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "x".repeat(5000)}).to_string(),
            413,
            None,
        ),
        (
            "/v1/embeddings",
            json!({"model": "minilm", "input": [1, 2]}).to_string(),
            400,
            Some("input"),
        ),
        (
            "/v1/embeddings",
            json!({"model": "minilm", "input": "x", "encoding_format": "hex"}).to_string(),
            400,
            Some("encoding_format"),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": []}).to_string(),
            400,
            None,
        ),
        ("/nowhere", "{}".into(), 404, None),
    ];
    for (path, body, want, param) in &cases {
        let (st, _, b) = http(a, "POST", path, Some(body), &[]);
        assert_eq!(st, *want, "{path} {body:.80}: {b}");
        let e: Value = serde_json::from_str(&b).unwrap_or_else(|_| panic!("{path}: not JSON: {b}"));
        let msg = e["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: no error.message: {b}"));
        assert!(!msg.is_empty());
        assert!(e["error"]["type"].is_string(), "{b}");
        if let Some(p) = param {
            assert_eq!(e["error"]["param"], *p, "{path} {body:.80}: {b}");
        }
        let (st, _, _) = http(a, "GET", "/health", None, &[]);
        assert_eq!(st, 200, "still serving after {path}");
    }
    let (st, ok) = post(
        a,
        "/v1/completions",
        &json!({"model": "tiny", "prompt": "x", "max_tokens": 4}),
    );
    assert_eq!(st, 200, "{ok}");
}

#[test]
fn concurrency_queue_limit_api_key_and_sigterm() {
    let dir = tmpdir("serve-load");
    let _cleanup = common::Cleanup(dir.clone());
    let tiny = common::gpt2_tiny(&dir);
    let minilm = root().join("assets/minilm");
    let srv = serve(&[
        "--model",
        &format!("tiny={}", tiny.display()),
        "--model",
        &format!("minilm={}", minilm.display()),
        "--api-key",
        "sekret",
    ]);
    let a = srv.addr.clone();
    let auth = [("Authorization", "Bearer sekret")];
    let (st, _, _) = http(&a, "GET", "/v1/models", None, &[]);
    assert_eq!(st, 401);
    let (st, _, _) = http(
        &a,
        "GET",
        "/v1/models",
        None,
        &[("Authorization", "Bearer wrong!")],
    );
    assert_eq!(st, 401);
    let (st, _, _) = http(&a, "GET", "/health", None, &[]);
    assert_eq!(st, 200, "/health needs no key");

    // 64 concurrent clients, completions and embeddings: all served.
    let handles: Vec<_> = (0..64)
        .map(|i| {
            let a = a.clone();
            std::thread::spawn(move || {
                let body = if i % 2 == 0 {
                    json!({"model": "tiny", "prompt": format!("client {i}"), "max_tokens": 8, "temperature": 0})
                } else {
                    json!({"model": "minilm", "input": format!("client number {i}")})
                };
                let path = if i % 2 == 0 { "/v1/completions" } else { "/v1/embeddings" };
                http(&a, "POST", path, Some(&body.to_string()), &[("Authorization", "Bearer sekret")]).0
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let (st, _, m) = http(&a, "GET", "/metrics", None, &auth);
    assert_eq!(st, 200);
    // Concurrent embedding requests shared forward passes.
    let batches: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("lmkit_embed_batch_size_count "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(batches <= 32.0, "32 requests in {batches} batches");

    // SIGTERM: stops accepting, exits cleanly.
    let mut srv = srv;
    let pid = srv.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = srv.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(TcpStream::connect(&a).is_err(), "no longer listening");
}

#[test]
fn a_full_queue_is_429() {
    let dir = tmpdir("serve-queue");
    let _cleanup = common::Cleanup(dir.clone());
    let tiny = common::gpt2_tiny(&dir);
    let srv = serve(&[
        "--model",
        &format!("tiny={}", tiny.display()),
        "--max-queue",
        "1",
    ]);
    let a = srv.addr.clone();
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || {
                let body = json!({"model": "tiny", "prompt": "queue", "max_tokens": 16, "n": 16});
                http(&a, "POST", "/v1/completions", Some(&body.to_string()), &[]).0
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 429),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&429),
        "a queue of 1 never filled: {statuses:?}"
    );
    // Jobs of refused requests leave the queue (skipped: nobody waits for them).
    for _ in 0..200 {
        let (_, _, h) = http(&a, "GET", "/health", None, &[]);
        if h.contains("\"queued\":0") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, ok) = post(
        &a,
        "/v1/completions",
        &json!({"model": "tiny", "prompt": "x", "max_tokens": 2}),
    );
    assert_eq!(st, 200, "{ok}");
}

#[test]
fn bert_task_routes_match_the_cli() {
    let dir = tmpdir("serve-tasks");
    let _cleanup = common::Cleanup(dir.clone());
    let fx = |n: &str| root().join("tests/fixtures").join(n).display().to_string();
    let minilm = root().join("assets/minilm");
    let srv = serve(&[
        "--model",
        &format!("cls={}", fx("bert-tiny-classify")),
        "--model",
        &format!("mlm={}", fx("bert-tiny-mlm")),
        "--model",
        &format!("qa={}", fx("bert-tiny-qa")),
        "--model",
        &format!("rr={}", fx("bert-tiny-rerank")),
        "--model",
        &format!("minilm={}", minilm.display()),
    ]);
    let a = srv.addr.as_str();

    // /predict = lmkit classify --json (all labels, best first).
    let texts = ["the dog was very old", "paris is in france"];
    let input = dir.join("in.txt");
    std::fs::write(&input, texts.join("\n") + "\n").unwrap();
    let cli: Vec<Value> = cli_json(&[
        "classify",
        "--model",
        &fx("bert-tiny-classify"),
        "--input",
        input.to_str().unwrap(),
        "--json",
    ])
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    let (st, got) = post(a, "/predict", &json!({"inputs": texts, "model": "cls"}));
    assert_eq!(st, 200, "{got}");
    for (g, c) in got.as_array().unwrap().iter().zip(&cli) {
        assert_eq!(g, &c["scores"], "{got}");
    }
    // Alone, the text is not padded: the same scores within float rounding.
    let (st, one) = post(a, "/predict", &json!({"inputs": texts[0], "model": "cls"}));
    assert_eq!(st, 200, "{one}");
    for (g, c) in one
        .as_array()
        .unwrap()
        .iter()
        .zip(cli[0]["scores"].as_array().unwrap())
    {
        assert_eq!(g["label"], c["label"]);
        assert!((g["score"].as_f64().unwrap() - c["score"].as_f64().unwrap()).abs() < 1e-5);
    }

    // /v1/fill-mask = lmkit fill-mask --json, in HF's pipeline shape.
    let text = "the dog was [MASK] old";
    let cli: Value = serde_json::from_str(
        cli_json(&[
            "fill-mask",
            "--model",
            &fx("bert-tiny-mlm"),
            "--text",
            text,
            "--json",
        ])
        .trim(),
    )
    .unwrap();
    let (st, got) = post(
        a,
        "/v1/fill-mask",
        &json!({"inputs": text, "model": "mlm", "top_k": 5}),
    );
    assert_eq!(st, 200, "{got}");
    let preds = got.as_array().unwrap();
    assert_eq!(preds.len(), 5);
    // The CLI's JSON is the HF pipeline's shape too, and the same values.
    assert_eq!(&got, &cli, "server and CLI fill-mask");
    for g in preds {
        assert!(g["token"].is_u64() && g["token_str"].is_string(), "{g}");
        assert!(
            g["sequence"].as_str().unwrap().starts_with("the dog was "),
            "{g}"
        );
    }
    let (st, e) = post(
        a,
        "/v1/fill-mask",
        &json!({"inputs": "no mask here", "model": "mlm"}),
    );
    assert_eq!(st, 400, "{e}");
    let (st, e) = post(
        a,
        "/v1/fill-mask",
        &json!({"inputs": "a [MASK]", "model": "cls"}),
    );
    assert_eq!(
        (st, e["error"]["param"].clone()),
        (400, json!("model")),
        "{e}"
    );

    // /v1/qa = lmkit qa --json.
    let ctx = dir.join("ctx.txt");
    let context = "the dog was in paris with a very old cat";
    std::fs::write(&ctx, context).unwrap();
    let cli: Value = serde_json::from_str(
        cli_json(&[
            "qa",
            "--model",
            &fx("bert-tiny-qa"),
            "--question",
            "where was the dog",
            "--context",
            ctx.to_str().unwrap(),
            "--json",
        ])
        .trim(),
    )
    .unwrap();
    let (st, got) = post(
        a,
        "/v1/qa",
        &json!({"question": "where was the dog", "context": context, "model": "qa"}),
    );
    assert_eq!(st, 200, "{got}");
    assert_eq!(got["answer"], cli["answer"]);
    assert_eq!(
        (got["start"].clone(), got["end"].clone()),
        (cli["start"].clone(), cli["end"].clone())
    );

    // /rerank with a bi-encoder: cosine, best first.
    let (st, got) = post(
        a,
        "/rerank",
        &json!({
            "query": "What do people eat?", "model": "minilm", "return_text": true,
            "texts": ["The stock market fell.", "A man is eating food.", "Someone is having a meal."],
        }),
    );
    assert_eq!(st, 200, "{got}");
    let order: Vec<u64> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(order.last(), Some(&0), "{got}");
    assert!(got[0]["text"].is_string());
    // A three-label classifier is no cross-encoder.
    let (st, e) = post(
        a,
        "/rerank",
        &json!({"query": "q", "texts": ["a"], "model": "cls"}),
    );
    assert_eq!(st, 400, "{e}");

    // /rerank with a cross-encoder: sigmoid of each (query, text) pair's
    // logit (the library's score_pairs, itself checked against HF), best
    // first; raw_scores gives the logits.
    let query = "where is the old dog";
    let texts = [
        "the old dog is by the river",
        "paris is in france",
        "a dog",
        "she found the red book",
    ];
    let p = lmkit::models::bert::BertPipeline::from_dir(fx("bert-tiny-rerank")).unwrap();
    let pairs: Vec<(&str, &str)> = texts.iter().map(|t| (query, *t)).collect();
    let logits: Vec<f64> = p
        .score_pairs(&pairs, 8, false)
        .unwrap()
        .iter()
        .map(|l| l[0] as f64)
        .collect();
    for raw in [false, true] {
        let (st, got) = post(
            a,
            "/rerank",
            &json!({"query": query, "texts": texts, "model": "rr", "raw_scores": raw}),
        );
        assert_eq!(st, 200, "{got}");
        let got = got.as_array().unwrap();
        assert_eq!(got.len(), 4);
        for w in got.windows(2) {
            assert!(
                w[0]["score"].as_f64() >= w[1]["score"].as_f64(),
                "best first"
            );
        }
        for g in got {
            let l = logits[g["index"].as_u64().unwrap() as usize];
            let want = if raw { l } else { 1.0 / (1.0 + (-l).exp()) };
            assert!(
                (g["score"].as_f64().unwrap() - want).abs() < 1e-5,
                "{g} vs {want}"
            );
        }
    }

    // TEI's truncate: off by default, an over-long input is a 413; on, it
    // is cut to the model's length.
    let long = "dog ".repeat(40);
    for (route, body) in [
        (
            "/rerank",
            json!({"query": query, "texts": [long], "model": "rr"}),
        ),
        ("/predict", json!({"inputs": long, "model": "cls"})),
        (
            "/embed",
            json!({"inputs": "word ".repeat(600), "model": "minilm"}),
        ),
    ] {
        let (st, e) = post(a, route, &body);
        assert_eq!(st, 413, "{route}: {e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tokens. Given: "),
            "{e}"
        );
        let mut body = body;
        body["truncate"] = json!(true);
        let (st, got) = post(a, route, &body);
        assert_eq!(st, 200, "{route} with truncate: {got}");
    }
}

/// The `lmkit_generated_tokens_total` counter of the server at `a`.
fn generated_tokens(a: &str) -> u64 {
    let (_, _, m) = http(a, "GET", "/metrics", None, &[]);
    m.lines()
        .find_map(|l| l.strip_prefix("lmkit_generated_tokens_total "))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn a_client_that_leaves_a_stream_frees_its_slot() {
    let dir = tmpdir("serve-leave");
    let _cleanup = common::Cleanup(dir.clone());
    let tok = byte_tokenizer(&dir);
    let text = dir.join("text.txt");
    std::fs::write(&text, "some text to train on, once.\n".repeat(40)).unwrap();
    let run = dir.join("run");
    // A model with a long context, so a long generation takes a while.
    cli_json(&[
        "pretrain",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--data",
        text.to_str().unwrap(),
        "--output",
        run.to_str().unwrap(),
        "--preset",
        "mini",
        "--n-positions",
        "1024",
        "--seq-len",
        "32",
        "--batch-size",
        "1",
        "--max-steps",
        "1",
        "--eval-every",
        "0",
        "--sample-every",
        "0",
        "--val-fraction",
        "0",
    ]);
    let srv = serve(&[
        "--model",
        &format!("m={}", run.display()),
        "--max-tokens",
        "1000",
    ]);
    let a = srv.addr.as_str();
    let long = json!({"model": "m", "prompt": "once", "max_tokens": 1000, "temperature": 0,
                      "ignore_eos": true, "stream": true});
    let t0 = std::time::Instant::now();
    let (st, _, body) = http(a, "POST", "/v1/completions", Some(&long.to_string()), &[]);
    let full = t0.elapsed();
    assert_eq!(st, 200);
    assert!(body.ends_with("data: [DONE]\n\n"));
    assert_eq!(generated_tokens(a), 1000);

    // Read the first event, then hang up.
    let mut s = TcpStream::connect(a).unwrap();
    let b = long.to_string();
    write!(s, "POST /v1/completions HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}", b.len()).unwrap();
    let mut first = [0u8; 512];
    let n = s.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).contains("200 OK"));
    drop(s);
    let t1 = std::time::Instant::now();
    // Its generation stops early: the worker is free for the next request.
    let (st, ok) = post(
        a,
        "/v1/completions",
        // Exactly 2 tokens: a sampled end of text would leave the count short.
        &json!({"model": "m", "prompt": "x", "max_tokens": 2, "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(st, 200, "{ok}");
    let waited = t1.elapsed();
    let left = generated_tokens(a) - 1000 - 2;
    eprintln!("abandoned stream: {left} of 1000 tokens; next answer after {waited:?}; a full generation {full:?}");
    assert!(left < 500, "the abandoned stream generated {left} tokens");
    assert!(
        waited < full / 2,
        "waited {waited:?}, a full generation takes {full:?}"
    );
}

/// A fine-tuned GPT-2 classifier (`GPT2ForSequenceClassification`) is served
/// at `/predict` with `lmkit classify`'s scores; the completion route says
/// it is a classifier; `/tokenize` uses its BPE tokenizer.
#[test]
fn gpt2_classifier_predicts_as_the_cli_classifies() {
    let dir = tmpdir("serve-gpt2-cls");
    let _cleanup = common::Cleanup(dir.clone());
    let train = dir.join("train.jsonl");
    let rows: String = [
        "the dog ran",
        "paris is big",
        "a cat sat",
        "london at night",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| {
        let label = ["animal", "place"][i % 2];
        json!({"text": t, "label": label}).to_string() + "\n"
    })
    .collect();
    std::fs::write(&train, rows).unwrap();
    let out = dir.join("cls");
    cli_json(&[
        "finetune",
        "--task",
        "classify",
        "--model",
        root()
            .join("tests/fixtures/gpt2-zeroshot")
            .to_str()
            .unwrap(),
        "--train",
        train.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--epochs",
        "1",
        "--batch-size",
        "4",
    ]);
    let srv = serve(&["--model", &format!("cls={}", out.display())]);
    let a = srv.addr.as_str();
    let texts = ["the dog was very old", "paris is in france"];
    let input = dir.join("in.txt");
    std::fs::write(&input, texts.join("\n") + "\n").unwrap();
    let cli: Vec<Value> = cli_json(&[
        "classify",
        "--model",
        out.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--json",
    ])
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    // The one classifier served: no "model" needed.
    let (st, got) = post(a, "/predict", &json!({"inputs": texts}));
    assert_eq!(st, 200, "{got}");
    assert_eq!(got.as_array().unwrap().len(), 2);
    for (g, c) in got.as_array().unwrap().iter().zip(&cli) {
        assert_eq!(g, &c["scores"], "{got}");
    }
    let (st, e) = post(
        a,
        "/v1/completions",
        &json!({"model": "cls", "prompt": "the", "max_tokens": 2}),
    );
    assert_eq!(st, 400, "{e}");
    assert!(e.to_string().contains("a GPT-2 sequence classifier"), "{e}");
    let (st, toks) = post(a, "/tokenize", &json!({"inputs": "the dog"}));
    assert_eq!(st, 200, "{toks}");
    assert!(!toks[0].as_array().unwrap().is_empty(), "{toks}");
}
