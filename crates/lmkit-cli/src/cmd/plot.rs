//! `lmkit plot DIR`: draws the loss and learning-rate curves of a training
//! run (`DIR/metrics.jsonl`) into a PNG.
//! Drawn by the CLI's own rasterizer (`canvas.rs`).

use crate::canvas::{fmt_num, Canvas, Panel, BLACK, BLUE, GREEN, ORANGE};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Training output folder holding metrics.jsonl (or the metrics file itself).
    pub dir: PathBuf,
    /// Where to write the PNG (default: DIR/metrics.png).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let metrics = if args.dir.is_dir() {
        args.dir.join("metrics.jsonl")
    } else {
        args.dir.clone()
    };
    let out = args.output.unwrap_or_else(|| {
        metrics
            .parent()
            .unwrap_or(Path::new("."))
            .join("metrics.png")
    });
    let n = plot_metrics(&metrics, &out)?;
    println!(
        "wrote {} ({n} rows from {})",
        out.display(),
        metrics.display()
    );
    Ok(())
}

/// Series extracted from metrics rows: (step, value) pairs.
struct Curves {
    loss: Vec<(f64, f64)>,
    val: Vec<(f64, f64)>,
    lr: Vec<(f64, f64)>,
}

fn curves(rows: &[serde_json::Map<String, serde_json::Value>]) -> Curves {
    let get = |r: &serde_json::Map<String, serde_json::Value>, k: &str| {
        r.get(k).and_then(|v| v.as_f64()).filter(|v| v.is_finite())
    };
    let mut c = Curves {
        loss: vec![],
        val: vec![],
        lr: vec![],
    };
    for r in rows {
        let Some(step) = get(r, "step") else { continue };
        if let Some(v) = get(r, "loss") {
            c.loss.push((step, v));
        }
        if let Some(v) = get(r, "val_loss") {
            c.val.push((step, v));
        }
        if let Some(v) = get(r, "lr") {
            c.lr.push((step, v));
        }
    }
    c
}

/// Draws `metrics` into the PNG `out`; returns the number of rows read.
pub fn plot_metrics(metrics: &Path, out: &Path) -> Result<usize> {
    let rows = lmkit::train::read_metrics(metrics).map_err(anyhow::Error::msg)?;
    let c = curves(&rows);
    if c.loss.is_empty() && c.val.is_empty() {
        bail!(
            "{}: no `loss` or `val_loss` rows to plot",
            metrics.display()
        );
    }
    let (w, h) = (960, 720);
    let mut cv = Canvas::new(w, h);
    let title = format!(
        "{}  (last step {}, loss {})",
        metrics
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        c.loss.last().map_or(0.0, |p| p.0),
        c.loss.last().map_or("-".into(), |p| fmt_num(p.1)),
    );
    cv.text(80, 14, &title, BLACK, 2);
    let x_max = c
        .loss
        .iter()
        .chain(&c.val)
        .chain(&c.lr)
        .map(|p| p.0)
        .fold(1.0, f64::max);
    let loss_panel = Panel {
        x0: 80,
        y0: 50,
        x1: w - 30,
        y1: 440,
    };
    let ys: Vec<f64> = c.loss.iter().chain(&c.val).map(|p| p.1).collect();
    let (lo, hi) = ys
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    loss_panel.axes(&mut cv, (0.0, x_max), (lo, hi), "loss");
    loss_panel.series(&mut cv, &c.loss, (0.0, x_max), (lo, hi), BLUE);
    loss_panel.series(&mut cv, &c.val, (0.0, x_max), (lo, hi), ORANGE);
    for &(x, y) in &c.val {
        let (px, py) = loss_panel.map((x, y), (0.0, x_max), (lo, hi));
        cv.dot(px, py, 3, ORANGE);
    }
    let right = loss_panel.x1 as i64;
    cv.line(right - 230, 66, right - 200, 66, BLUE, 2);
    cv.text(right - 192, 62, "train loss", BLACK, 1);
    cv.line(right - 100, 66, right - 70, 66, ORANGE, 2);
    cv.text(right - 62, 62, "val loss", BLACK, 1);

    let lr_panel = Panel {
        x0: 80,
        y0: 500,
        x1: w - 30,
        y1: h - 50,
    };
    let lr_hi = c.lr.iter().map(|p| p.1).fold(0.0, f64::max);
    lr_panel.axes(&mut cv, (0.0, x_max), (0.0, lr_hi.max(1e-12)), "lr");
    lr_panel.series(&mut cv, &c.lr, (0.0, x_max), (0.0, lr_hi.max(1e-12)), GREEN);
    cv.text((w / 2) as i64 - 16, h as i64 - 22, "step", BLACK, 2);
    cv.write_png(out)?;
    Ok(rows.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_a_run() {
        let dir = std::env::temp_dir().join(format!("lmkit-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::new();
        for s in 1..=50 {
            text += &format!(
                "{{\"step\":{s},\"loss\":{},\"lr\":{},\"grad_norm\":1.0,\"tokens_per_s\":100}}\n",
                10.0 / s as f64,
                1e-3 * s as f64 / 50.0
            );
            if s % 10 == 0 {
                text += &format!("{{\"step\":{s},\"val_loss\":{}}}\n", 11.0 / s as f64);
            }
        }
        std::fs::write(dir.join("metrics.jsonl"), text).unwrap();
        let out = dir.join("m.png");
        assert_eq!(plot_metrics(&dir.join("metrics.jsonl"), &out).unwrap(), 55);
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        // The train curve (blue) was drawn.
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut buf).unwrap();
        assert!(buf.chunks(3).any(|p| p == BLUE));
        assert!(buf.chunks(3).any(|p| p == ORANGE));
        std::fs::write(dir.join("metrics.jsonl"), "{\"step\":1}\n").unwrap();
        assert!(plot_metrics(&dir.join("metrics.jsonl"), &out).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn number_format() {
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(0.0006), "6.00e-4");
        assert_eq!(fmt_num(0.0), "0");
    }
}
