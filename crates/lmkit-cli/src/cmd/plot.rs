//! `lmkit plot DIR`: draws the loss and learning-rate curves of a training
//! run (`DIR/metrics.jsonl`) into a PNG.
//!
//! A small rasterizer of our own (lines, an 8×8 bitmap font from `font8x8`,
//! PNG through the `png` crate): plotting libraries need a TrueType font
//! stack (font-kit / system fonts) to draw any text, which a headless
//! machine may not have.

use anyhow::{bail, Context, Result};
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

type Rgb = [u8; 3];
const BLACK: Rgb = [0, 0, 0];
const GREY: Rgb = [225, 225, 225];
const BLUE: Rgb = [31, 119, 180];
const ORANGE: Rgb = [255, 127, 14];
const GREEN: Rgb = [44, 160, 44];

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn new(w: usize, h: usize) -> Self {
        Canvas {
            w,
            h,
            px: vec![255; w * h * 3],
        }
    }

    fn set(&mut self, x: i64, y: i64, c: Rgb) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let o = (y as usize * self.w + x as usize) * 3;
            self.px[o..o + 3].copy_from_slice(&c);
        }
    }

    fn dot(&mut self, x: i64, y: i64, r: i64, c: Rgb) {
        for dy in -r..=r {
            for dx in -r..=r {
                if dx * dx + dy * dy <= r * r {
                    self.set(x + dx, y + dy, c);
                }
            }
        }
    }

    /// Bresenham line, `width` pixels thick.
    fn line(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: Rgb, width: i64) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        let r = (width - 1) / 2;
        loop {
            for oy in -r..=(width - 1 - r) {
                for ox in -r..=(width - 1 - r) {
                    self.set(x + ox, y + oy, c);
                }
            }
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Text in the 8×8 font, `scale` pixels per font pixel; (x, y) is the top left.
    fn text(&mut self, x: i64, y: i64, s: &str, c: Rgb, scale: i64) {
        use font8x8::UnicodeFonts;
        for (i, ch) in s.chars().enumerate() {
            let glyph = font8x8::BASIC_FONTS.get(ch).unwrap_or([0; 8]);
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits >> col & 1 == 1 {
                        for sy in 0..scale {
                            for sx in 0..scale {
                                self.set(
                                    x + (i as i64 * 8 + col) * scale + sx,
                                    y + row as i64 * scale + sy,
                                    c,
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    fn write_png(&self, path: &Path) -> Result<()> {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut enc =
            png::Encoder::new(std::io::BufWriter::new(file), self.w as u32, self.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc
            .write_header()
            .with_context(|| format!("writing {}", path.display()))?;
        writer
            .write_image_data(&self.px)
            .with_context(|| format!("writing {}", path.display()))?;
        writer
            .finish()
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

struct Panel {
    x0: usize,
    y0: usize,
    x1: usize,
    y1: usize,
}

impl Panel {
    fn map(&self, (x, y): (f64, f64), xr: (f64, f64), yr: (f64, f64)) -> (i64, i64) {
        let fx = (x - xr.0) / (xr.1 - xr.0).max(1e-300);
        let fy = (y - yr.0) / (yr.1 - yr.0).max(1e-300);
        (
            self.x0 as i64 + (fx * (self.x1 - self.x0) as f64).round() as i64,
            self.y1 as i64 - (fy * (self.y1 - self.y0) as f64).round() as i64,
        )
    }

    fn axes(&self, cv: &mut Canvas, xr: (f64, f64), yr: (f64, f64), label: &str) {
        let (x0, y0, x1, y1) = (
            self.x0 as i64,
            self.y0 as i64,
            self.x1 as i64,
            self.y1 as i64,
        );
        for i in 0..=5 {
            let fy = yr.0 + (yr.1 - yr.0) * i as f64 / 5.0;
            let (_, py) = self.map((xr.0, fy), xr, yr);
            cv.line(x0, py, x1, py, GREY, 1);
            let s = fmt_num(fy);
            cv.text(x0 - 6 - 8 * s.len() as i64, py - 4, &s, BLACK, 1);
        }
        for i in 0..=8 {
            let fx = xr.0 + (xr.1 - xr.0) * i as f64 / 8.0;
            let (px, _) = self.map((fx, yr.0), xr, yr);
            cv.line(px, y1, px, y1 + 4, BLACK, 1);
            let s = format!("{}", fx.round());
            cv.text(px - 4 * s.len() as i64, y1 + 8, &s, BLACK, 1);
        }
        cv.line(x0, y0, x0, y1, BLACK, 1);
        cv.line(x0, y1, x1, y1, BLACK, 1);
        cv.text(x0, y0 - 14, label, BLACK, 1);
    }

    fn series(&self, cv: &mut Canvas, pts: &[(f64, f64)], xr: (f64, f64), yr: (f64, f64), c: Rgb) {
        let mut prev: Option<(i64, i64)> = None;
        for &p in pts {
            let q = self.map(p, xr, yr);
            if let Some(pp) = prev {
                cv.line(pp.0, pp.1, q.0, q.1, c, 2);
            } else {
                cv.dot(q.0, q.1, 1, c);
            }
            prev = Some(q);
        }
    }
}

fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(0.01..10000.0).contains(&a) {
        format!("{v:.2e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
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
