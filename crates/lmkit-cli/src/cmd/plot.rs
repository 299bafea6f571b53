//! `lmkit plot RUN...`: the curves of training runs (`RUN/metrics.jsonl`) as
//! a PNG or SVG: one panel per metric group (losses, MLM/NSP heads, eval
//! scores, learning rate, gradient norm, throughput), several runs compared
//! on one chart. The figure is made in `chart/metrics.rs` and drawn in `chart/`.

use crate::chart;
use crate::chart::metrics::{figure, load_run, metrics_file, run_name};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Training output folders holding metrics.jsonl, or metrics files; several runs share one chart.
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,
    /// Image to write (a new file), PNG or SVG by its extension, or `-` for stdout (default: RUN/metrics.png for one run, redrawn each time).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// png or svg [default: the --output extension; png for stdout].
    #[arg(long)]
    pub format: Option<Format>,
    /// Legend names of the runs, comma-separated (default: the runs' folder names).
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Panels, comma-separated: loss, mlm, nsp (or heads: both), accuracy, qa, ppl, lr, grad_norm, tokens_per_s, examples_per_s (or throughput: both), or any metric key (default: every group present but ppl).
    #[arg(long, value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Smoothing weight in [0, 1) of the training curves, as TensorBoard's (a debiased EMA); the raw curve stays faint behind.
    #[arg(long, default_value_t = 0.0)]
    pub smooth: f64,
    /// Logarithmic y axis on the loss and perplexity panels.
    #[arg(long)]
    pub log_y: bool,
}

pub fn run(args: Args) -> Result<()> {
    if !(0.0..1.0).contains(&args.smooth) {
        bail!(
            "--smooth must be in [0, 1) (0 = raw curves), got {}",
            args.smooth
        );
    }
    if !args.labels.is_empty() && args.labels.len() != args.runs.len() {
        bail!(
            "--labels has {} names for {} runs",
            args.labels.len(),
            args.runs.len()
        );
    }
    let files: Vec<PathBuf> = args.runs.iter().map(|p| metrics_file(p)).collect();
    let out = match &args.output {
        Some(o) => o.clone(),
        None if files.len() == 1 => files[0]
            .parent()
            .unwrap_or(Path::new("."))
            .join("metrics.png"),
        None => bail!("several runs: give the image to write with --output (a .png or .svg)"),
    };
    let format = Format::of(&out, args.format)?;
    // A file the user names is never overwritten (the docs/cli.md rule);
    // RUN/metrics.png is lmkit's own and redrawn on every call.
    let named = args.output.is_some();
    if named {
        super::check_new_output(&out)?;
    }
    let mut runs = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let label = args.labels.get(i).cloned().unwrap_or_else(|| run_name(f));
        runs.push(load_run(f, label)?);
    }
    let fig = figure(&runs, &args.metrics, args.smooth, args.log_y)?;
    let size = chart::figure_size(fig.panels.len());
    let bytes = match format {
        Format::Png => chart::render_png(&fig, size)?,
        Format::Svg => chart::render_svg(&fig, size)?.into_bytes(),
    };
    if named {
        super::write_output(&out, matches!(format, Format::Png), |w| w.write_all(&bytes))?;
    } else {
        lmkit::util::fs::atomic_write(&out, &bytes)?;
    }
    let rows: usize = runs.iter().map(|r| r.rows).sum();
    let panels: Vec<&str> = fig.panels.iter().map(|p| p.title.as_str()).collect();
    let to_stdout = out.as_os_str() == "-";
    let report = format!(
        "wrote {} ({}; {rows} rows from {})",
        if to_stdout {
            "the chart to stdout".to_string()
        } else {
            out.display().to_string()
        },
        panels.join(", "),
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The image owns stdout when it goes there.
    if to_stdout {
        eprintln!("{report}");
    } else {
        println!("{report}");
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Debug, clap::ValueEnum)]
pub enum Format {
    Png,
    Svg,
}

impl Format {
    /// `given`, else the extension of `path` (stdout: PNG); a given format
    /// that the extension contradicts is an error.
    fn of(path: &Path, given: Option<Format>) -> Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(given.unwrap_or(Format::Png));
        }
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        let by_ext = match ext.as_deref() {
            Some("png") => Format::Png,
            Some("svg") => Format::Svg,
            _ => bail!(
                "--output {}: give a .png or .svg file name (the format follows the extension), or - for stdout",
                path.display()
            ),
        };
        match given {
            Some(g) if g != by_ext => bail!(
                "--format {} but --output {} is a .{} file",
                if g == Format::Png { "png" } else { "svg" },
                path.display(),
                ext.unwrap_or_default()
            ),
            _ => Ok(by_ext),
        }
    }
}
