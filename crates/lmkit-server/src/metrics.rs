//! Prometheus metrics in the text exposition format: requests and errors
//! by route and status, latency histograms by route, queue depth by model,
//! embedding and decode batch sizes, generated tokens and time spent generating.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use lmkit::models::gpt2::PrefixCacheStats;

/// Upper bounds of the latency buckets, seconds.
const LATENCY: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds of the batch-size buckets.
const BATCH: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

#[derive(Default, Clone)]
struct Histogram {
    /// Cumulative counts per bucket bound, then +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (c, b) in self.counts.iter_mut().zip(bounds) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (c, b) in self.counts.iter().zip(bounds) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
struct Inner {
    /// (route, status) → count.
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    batch: Histogram,
    decode_batch: Histogram,
    generated_tokens: u64,
    generation_seconds: f64,
    embedded_texts: u64,
    /// model → its prefix cache's counters (the latest).
    prefix: BTreeMap<String, PrefixCacheStats>,
}

/// Shared by every handler and worker.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // A panic elsewhere must not silence the metrics.
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    pub fn request(&self, route: &str, status: u16, seconds: f64) {
        self.with(|m| {
            *m.requests.entry((route.to_string(), status)).or_default() += 1;
            m.latency
                .entry(route.to_string())
                .or_default()
                .observe(LATENCY, seconds);
        });
    }

    pub fn embed_batch(&self, texts: usize) {
        self.with(|m| {
            m.batch.observe(BATCH, texts as f64);
            m.embedded_texts += texts as u64;
        });
    }

    /// Sequences advanced together by one batched decode step.
    pub fn decode_batch(&self, seqs: usize) {
        self.with(|m| m.decode_batch.observe(BATCH, seqs as f64));
    }

    pub fn generated(&self, tokens: usize, seconds: f64) {
        self.with(|m| {
            m.generated_tokens += tokens as u64;
            m.generation_seconds += seconds;
        });
    }

    /// The latest counters of a model's prefix cache.
    pub fn prefix_cache(&self, model: &str, stats: PrefixCacheStats) {
        self.with(|m| {
            m.prefix.insert(model.to_string(), stats);
        });
    }

    /// The exposition text; `queues` is (model, requests waiting).
    pub fn render(&self, queues: &[(String, usize)]) -> String {
        self.with(|m| {
            let mut out = String::new();
            out.push_str("# HELP lmkit_requests_total HTTP requests by route and status code.\n");
            out.push_str("# TYPE lmkit_requests_total counter\n");
            for ((route, code), n) in &m.requests {
                let _ = writeln!(
                    out,
                    "lmkit_requests_total{{route=\"{route}\",code=\"{code}\"}} {n}"
                );
            }
            out.push_str("# HELP lmkit_request_duration_seconds Time to the full response, by route.\n");
            out.push_str("# TYPE lmkit_request_duration_seconds histogram\n");
            for (route, h) in &m.latency {
                h.write(
                    &mut out,
                    "lmkit_request_duration_seconds",
                    &format!("route=\"{route}\""),
                    LATENCY,
                );
            }
            out.push_str("# HELP lmkit_queue_depth Requests waiting for a model.\n");
            out.push_str("# TYPE lmkit_queue_depth gauge\n");
            for (model, n) in queues {
                let _ = writeln!(out, "lmkit_queue_depth{{model=\"{model}\"}} {n}");
            }
            out.push_str("# HELP lmkit_embed_batch_size Texts per embedding forward batch.\n");
            out.push_str("# TYPE lmkit_embed_batch_size histogram\n");
            if m.batch.count > 0 {
                m.batch.write(&mut out, "lmkit_embed_batch_size", "", BATCH);
            }
            out.push_str("# HELP lmkit_decode_batch_size Completions advanced together per decode step.\n");
            out.push_str("# TYPE lmkit_decode_batch_size histogram\n");
            if m.decode_batch.count > 0 {
                m.decode_batch
                    .write(&mut out, "lmkit_decode_batch_size", "", BATCH);
            }
            out.push_str("# HELP lmkit_embedded_texts_total Texts embedded.\n");
            out.push_str("# TYPE lmkit_embedded_texts_total counter\n");
            let _ = writeln!(out, "lmkit_embedded_texts_total {}", m.embedded_texts);
            out.push_str("# HELP lmkit_generated_tokens_total Tokens generated by completions.\n");
            out.push_str("# TYPE lmkit_generated_tokens_total counter\n");
            let _ = writeln!(out, "lmkit_generated_tokens_total {}", m.generated_tokens);
            out.push_str("# HELP lmkit_generation_seconds_total Time spent generating (tokens/s = tokens / seconds).\n");
            out.push_str("# TYPE lmkit_generation_seconds_total counter\n");
            let _ = writeln!(out, "lmkit_generation_seconds_total {}", m.generation_seconds);
            write_prefix_cache(&mut out, &m.prefix);
            out
        })
    }
}

/// The prefix caches' counters, one series per GPT-2 model that has one.
fn write_prefix_cache(out: &mut String, prefix: &BTreeMap<String, PrefixCacheStats>) {
    type Field = fn(&PrefixCacheStats) -> f64;
    let series: [(&str, &str, &str, Field); 4] = [
        (
            "lmkit_prefix_cache_hit_tokens_total",
            "counter",
            "Prompt tokens whose keys and values came from the prefix cache.",
            |s| s.hit_tokens as f64,
        ),
        (
            "lmkit_prefix_cache_miss_tokens_total",
            "counter",
            "Prompt tokens prefilled (not in the prefix cache).",
            |s| s.miss_tokens as f64,
        ),
        (
            "lmkit_prefix_cache_bytes",
            "gauge",
            "Bytes the prefix cache holds.",
            |s| s.bytes as f64,
        ),
        (
            "lmkit_prefix_cache_evicted_blocks_total",
            "counter",
            "Prefix cache blocks evicted to make room (least recently used).",
            |s| s.evicted_blocks as f64,
        ),
    ];
    for (name, kind, help, field) in series {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (model, s) in prefix {
            let _ = writeln!(out, "{name}{{model=\"{model}\"}} {}", field(s));
        }
    }
}
