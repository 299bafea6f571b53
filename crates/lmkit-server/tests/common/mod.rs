//! A server in this process on loopback, and a raw HTTP/1.1 client.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lmkit_server::{ServeOptions, Server};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Serves `models` (`NAME=DIR`) with a `body_limit` on a thread of its own;
/// the address.
pub fn start(models: &[String], body_limit: usize) -> String {
    let opts = ServeOptions {
        models: models.iter().map(|m| m.parse().unwrap()).collect(),
        body_limit,
        ..ServeOptions::default()
    };
    let server = Server::load(&opts).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap().to_string()).unwrap();
            let never = std::future::pending();
            server.serve(l, body_limit, never).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

pub fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

/// The status, lower-cased head and JSON body (`Null` if not JSON) of the
/// response on `s`, read to the server's close.
pub fn response(s: &mut TcpStream) -> (u16, String, serde_json::Value) {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("the response, not a reset");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("headers end");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let json = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    (status, head.to_lowercase(), json)
}

/// `POST path` with a JSON body; the status and the JSON answer.
pub fn post(addr: &str, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let body = body.to_string();
    let mut s = connect(addr);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let (status, _, json) = response(&mut s);
    (status, json)
}
