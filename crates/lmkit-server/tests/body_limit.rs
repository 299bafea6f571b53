//! A body over `--body-limit` gets a readable 413 (status and error JSON)
//! over raw TCP, whatever the client does with the rest of its body: sends it
//! all before reading (Python's `requests`), sends it slowly in chunks, or
//! waits for `100 Continue` (curl); and the server goes on serving.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{connect, response, root};

const LIMIT: usize = 4096;

/// A server on loopback with the tiny BERT fixture; its address.
fn start() -> String {
    let model = root().join("tests/fixtures/bert-tiny-rerank");
    common::start(&[format!("m={}", model.display())], LIMIT)
}

fn head(addr: &str, extra: &str) -> String {
    format!("POST /embed HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{extra}\r\n")
}

fn assert_413(status: u16, head: &str, json: &serde_json::Value) {
    assert_eq!(status, 413, "{head}\n{json}");
    assert!(head.contains("connection: close"), "{head}");
    let msg = json["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(&LIMIT.to_string()), "{json}");
}

#[test]
fn a_body_over_the_limit_gets_a_readable_413() {
    let addr = start();
    // 1. A big body sent whole before reading, as Python's requests does:
    // more than loopback's socket buffers hold, so a server that closed
    // without draining would fail the writes (broken pipe / reset).
    let big = 32usize << 20;
    let mut s = connect(&addr);
    s.write_all(head(&addr, &format!("Content-Length: {big}\r\n")).as_bytes())
        .unwrap();
    let chunk = vec![b' '; 1 << 16];
    for _ in 0..big / chunk.len() {
        s.write_all(&chunk)
            .expect("the server drains the body it refused");
    }
    let (status, h, json) = response(&mut s);
    assert_413(status, &h, &json);
    assert!(json["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&big.to_string()));

    // 2. Expect: 100-continue (curl): the 413 comes at once, no 100, no body sent.
    let mut s = connect(&addr);
    let extra = format!("Content-Length: {big}\r\nExpect: 100-continue\r\n");
    s.write_all(head(&addr, &extra).as_bytes()).unwrap();
    let (status, h, json) = response(&mut s);
    assert!(!h.contains("100 continue"), "{h}");
    assert_413(status, &h, &json);

    // 3. A chunked body with no length that grows past the limit, slowly:
    // refused when it does, and the client may go on sending a while.
    let mut s = connect(&addr);
    s.write_all(head(&addr, "Transfer-Encoding: chunked\r\n").as_bytes())
        .unwrap();
    let piece = format!("{:x}\r\n{}\r\n", 1024, " ".repeat(1024));
    for _ in 0..4 * LIMIT / 1024 {
        s.write_all(piece.as_bytes()).expect("slow chunks");
        std::thread::sleep(Duration::from_millis(20));
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    let (status, h, json) = response(&mut s);
    assert_eq!(status, 413, "{h}\n{json}");
    assert!(h.contains("connection: close"), "{h}");

    // 4. The server still serves, and a body under the limit is answered.
    let mut s = connect(&addr);
    let body = r#"{"inputs": "hello there"}"#;
    let extra = format!("Content-Length: {}\r\nConnection: close\r\n", body.len());
    s.write_all(format!("{}{body}", head(&addr, &extra)).as_bytes())
        .unwrap();
    let (status, h, json) = response(&mut s);
    assert_eq!(status, 200, "{h}\n{json}");
    assert!(json[0].as_array().is_some_and(|v| !v.is_empty()), "{json}");
}
