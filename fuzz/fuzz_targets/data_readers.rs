//! Every reader of a user's data file never panics on any bytes: classify,
//! regression and SQuAD JSON(L), token tagging (CoNLL / JSONL), multiple choice
//! (JSONL choices or SWAG columns), LAMBADA, summarization,
//! CBT, translation pairs, zero-shot QA, BERT's documents, overlap's
//! evaluation documents, plain text / JSONL into token shards, and the gzip /
//! Zstandard decoders that
//! open compressed files.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use lmkit::data::classify_data::{read_classify_jsonl, read_regression_jsonl};
use lmkit::data::nsp::{read_bert_documents, read_documents};
use lmkit::data::squad::read_squad;
use lmkit::data::{prepare_shards, PrepareOptions};
use lmkit::eval::lambada::read_lambada;
use lmkit::eval::read_summarize;
use lmkit::eval::{read_cbt, read_qa, read_translation_jsonl, read_translation_texts};

fuzz_target!(|data: &[u8]| {
    let dir = common::scratch("readers");
    let (txt, jsonl, json) = (dir.join("d.txt"), dir.join("d.jsonl"), dir.join("d.json"));
    for p in [&txt, &jsonl, &json] {
        std::fs::write(p, data).expect("write");
    }
    // The same bytes as a compressed file: a clear error or its contents.
    for name in ["d.txt.gz", "d.jsonl.zst"] {
        let p = dir.join(name);
        std::fs::write(&p, data).expect("write");
        let _ = lmkit::data::source::read_source(&p);
        let _ = read_documents(&[p]);
    }
    let _ = read_classify_jsonl(&jsonl);
    let _ = read_regression_jsonl(&jsonl);
    let _ = lmkit::data::multiple_choice::read_multiple_choice(&jsonl);
    let _ = lmkit::data::tagging::read_tagging(&txt);
    let _ = lmkit::data::tagging::read_tagging(&jsonl);
    for p in [&txt, &jsonl, &json] {
        let _ = lmkit::data::overlap::read_eval_documents(std::slice::from_ref(p));
    }
    let _ = read_squad(&json);
    let _ = read_squad(&jsonl);
    let _ = read_lambada(&jsonl);
    let _ = read_lambada(&txt);
    let _ = read_summarize(&jsonl);
    let _ = read_cbt(&txt);
    let _ = read_translation_jsonl(&jsonl);
    let _ = read_translation_texts(&txt, &jsonl);
    let _ = read_qa(&jsonl);
    let _ = read_documents(&[txt.clone()]);
    let _ = read_bert_documents(&[txt.clone()], "text");
    let _ = read_bert_documents(&[jsonl.clone()], "text");
    let opts = PrepareOptions {
        vocab_size: 257,
        eos_id: 256,
        val_fraction: 0.1,
        tokenizer_id: "bytes".into(),
        text_field: "text".into(),
    };
    let enc = |s: &str| -> Result<Vec<u32>, String> { Ok(s.bytes().map(u32::from).collect()) };
    for src in [&txt, &jsonl] {
        let out = dir.join("shards");
        let _ = std::fs::remove_dir_all(&out);
        let _ = prepare_shards(&[src.clone()], &out, &opts, &enc, &mut |_, _| {});
    }
});
