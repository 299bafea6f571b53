//! A small rasterizer for `lmkit plot`: lines, dots, an 8×8 bitmap font from
//! `font8x8`, PNG through the `png` crate. Plotting libraries need a TrueType
//! font stack (font-kit / system fonts) to draw any text, which a headless
//! machine may not have.

use anyhow::{Context, Result};
use std::path::Path;

pub type Rgb = [u8; 3];
pub const BLACK: Rgb = [0, 0, 0];
pub const GREY: Rgb = [225, 225, 225];
pub const BLUE: Rgb = [31, 119, 180];
pub const ORANGE: Rgb = [255, 127, 14];
pub const GREEN: Rgb = [44, 160, 44];

pub struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    pub fn new(w: usize, h: usize) -> Self {
        Canvas {
            w,
            h,
            px: vec![255; w * h * 3],
        }
    }

    pub fn set(&mut self, x: i64, y: i64, c: Rgb) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let o = (y as usize * self.w + x as usize) * 3;
            self.px[o..o + 3].copy_from_slice(&c);
        }
    }

    pub fn dot(&mut self, x: i64, y: i64, r: i64, c: Rgb) {
        for dy in -r..=r {
            for dx in -r..=r {
                if dx * dx + dy * dy <= r * r {
                    self.set(x + dx, y + dy, c);
                }
            }
        }
    }

    /// Bresenham line, `width` pixels thick.
    pub fn line(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: Rgb, width: i64) {
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
    pub fn text(&mut self, x: i64, y: i64, s: &str, c: Rgb, scale: i64) {
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

    pub fn write_png(&self, path: &Path) -> Result<()> {
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

pub struct Panel {
    pub x0: usize,
    pub y0: usize,
    pub x1: usize,
    pub y1: usize,
}

impl Panel {
    pub fn map(&self, (x, y): (f64, f64), xr: (f64, f64), yr: (f64, f64)) -> (i64, i64) {
        let fx = (x - xr.0) / (xr.1 - xr.0).max(1e-300);
        let fy = (y - yr.0) / (yr.1 - yr.0).max(1e-300);
        (
            self.x0 as i64 + (fx * (self.x1 - self.x0) as f64).round() as i64,
            self.y1 as i64 - (fy * (self.y1 - self.y0) as f64).round() as i64,
        )
    }

    pub fn axes(&self, cv: &mut Canvas, xr: (f64, f64), yr: (f64, f64), label: &str) {
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

    pub fn series(
        &self,
        cv: &mut Canvas,
        pts: &[(f64, f64)],
        xr: (f64, f64),
        yr: (f64, f64),
        c: Rgb,
    ) {
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

pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(0.01..10000.0).contains(&a) {
        format!("{v:.2e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}
