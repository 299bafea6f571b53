//! `lmkit probe` (hidden): the CPU's true arithmetic peak per instruction
//! ([`lmkit::kernels::probe`]) on one thread and on every worker thread at
//! once, for scripts/bench_probe.py's "% of limit".

use anyhow::{bail, Result};
use lmkit::kernels::probe::{cpu_identity, peaks, Peak};
use serde_json::json;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Timed runs per instruction and thread (the best counts).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let threads = rayon::current_num_threads();
    let found = peaks(threads, a.runs);
    let cpu = cpu_identity();
    // Intel AMX has no in-register loop here: say whether the bf16 gemm uses it.
    #[cfg(target_arch = "x86_64")]
    let amx = lmkit::kernels::bf16_gemm::amx_usable();
    #[cfg(not(target_arch = "x86_64"))]
    let amx = false;
    if a.json {
        let figure = |p: &Peak| {
            json!({
                "instruction": p.path.name(),
                "per_thread_gops": p.per_thread / 1e9,
                "all_threads_gops": p.all_threads / 1e9,
            })
        };
        let by_dtype: serde_json::Map<_, _> = found
            .iter()
            .map(|p| (p.op.dtype().to_string(), figure(p)))
            .collect();
        let doc = json!({ "cpu": cpu, "threads": threads, "peak": by_dtype, "amx": amx });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("{cpu}");
    println!(
        "{:<5} {:<24} {:>14} {:>16}",
        "dtype",
        "instruction",
        "1 thread",
        format!("{threads} thread{}", if threads == 1 { "" } else { "s" })
    );
    for p in &found {
        println!(
            "{:<5} {:<24} {:>8.1} GOP/s {:>10.1} GOP/s",
            p.op.dtype(),
            p.path.name(),
            p.per_thread / 1e9,
            p.all_threads / 1e9
        );
    }
    if amx {
        println!("bf16 gemm tiles run on Intel AMX (tdpbf16ps; not probed)");
    }
    if found.is_empty() {
        println!("(no vector multiply-add this probe knows on this CPU)");
    }
    Ok(())
}
