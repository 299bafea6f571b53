//! Every POST route of `lmkit serve` answers any request body with a
//! response below 500 (a 4xx for what it cannot take), never a panic, and
//! the server keeps serving. The first byte picks the route; the rest is
//! the body. Served: the tiny GPT-2 fixture with a byte-level tokenizer and
//! the tiny BERT QA fixture.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use lmkit_server::{ModelSpec, ServeOptions, Server};
use tower::ServiceExt;

const ROUTES: &[&str] = &[
    "/v1/completions",
    "/v1/embeddings",
    "/embed",
    "/tokenize",
    "/decode",
    "/predict",
    "/rerank",
    "/v1/fill-mask",
    "/v1/qa",
    "/v1/chat/completions",
    "/detokenize",
];

struct Fixture {
    rt: tokio::runtime::Runtime,
    router: axum::Router,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        let gpt2 = common::scratch("serve").join("tiny");
        std::fs::create_dir_all(&gpt2).expect("dir");
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(fx.join("gpt2-tiny").join(f), gpt2.join(f)).expect("copy");
        }
        // Byte-level vocabulary (GPT-2's bytes_to_unicode), no merges.
        std::fs::write(gpt2.join("vocab.json"), byte_vocab_json()).expect("write");
        std::fs::write(gpt2.join("merges.txt"), "#version: 0.2\n").expect("write");
        let opts = ServeOptions {
            models: vec![
                ModelSpec { name: "tiny".into(), source: gpt2.display().to_string() },
                ModelSpec { name: "bert".into(), source: fx.join("bert-tiny-qa").display().to_string() },
            ],
            max_tokens: 8,
            ..ServeOptions::default()
        };
        let server = Server::load(&opts).expect("fixtures load");
        Fixture {
            rt: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"),
            router: server.router(64 << 10),
        }
    })
}

/// `vocab.json` of a byte-level tokenizer: the 256 bytes (spelt with
/// GPT-2's bytes_to_unicode) and `<|endoftext|>` = 256.
fn byte_vocab_json() -> String {
    let printable = |b: u32| (33..=126).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    let mut extra = 0;
    let mut out = String::from("{");
    for b in 0..256u32 {
        let c = if printable(b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        let ch = char::from_u32(c).expect("char");
        let key = match ch {
            '"' => "\\\"".to_string(),
            '\\' => "\\\\".to_string(),
            ch => ch.to_string(),
        };
        out.push_str(&format!("\"{key}\": {b}, "));
    }
    out.push_str("\"<|endoftext|>\": 256}");
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let f = fixture();
    let route = ROUTES[pick as usize % ROUTES.len()];
    let req = Request::post(route)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("request");
    let status = f.rt.block_on(async {
        let resp = f.router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let _ = axum::body::to_bytes(resp.into_body(), 1 << 20).await;
        status
    });
    assert!(status.as_u16() < 500, "{route}: {status} for {:?}", String::from_utf8_lossy(body));
});
