//! The PNG's text and curves, drawn here rather than by plotters' bitmap
//! backend (see [`GlyphText`]).

use ab_glyph::{point, Font, FontRef, GlyphId, PxScale, PxScaleFont, ScaleFont};
use anyhow::{anyhow, bail, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};
use plotters::style::FontStyle;
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind};

const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const FONT_BOLD: &[u8] = include_bytes!("../../assets/DejaVuSans-Bold.ttf");

/// Registers the embedded font as plotters' "sans-serif" (once per process).
pub(super) fn register_fonts() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
            && plotters::style::register_font("sans-serif", FontStyle::Bold, FONT_BOLD).is_ok()
    });
    if !ok {
        bail!("the embedded font could not be loaded");
    }
    Ok(())
}

pub(super) struct Fonts {
    normal: FontRef<'static>,
    bold: FontRef<'static>,
}

pub(super) fn fonts() -> Result<&'static Fonts> {
    static FONTS: std::sync::OnceLock<Option<Fonts>> = std::sync::OnceLock::new();
    FONTS
        .get_or_init(|| {
            Some(Fonts {
                normal: FontRef::try_from_slice(FONT).ok()?,
                bold: FontRef::try_from_slice(FONT_BOLD).ok()?,
            })
        })
        .as_ref()
        .ok_or_else(|| anyhow!("the embedded font could not be loaded"))
}

/// The bitmap backend with its text and curves drawn here: plotters' ab_glyph
/// path places each glyph at the pen position without its side bearing,
/// which leaves a gap after narrow glyphs ("1 0.5"), and its paths are not
/// anti-aliased. Everything else is delegated.
pub(super) struct GlyphText<B> {
    pub(super) inner: B,
    pub(super) fonts: &'static Fonts,
}

impl Fonts {
    /// The scaled font of `style`, and each glyph with its pen x; the width.
    fn layout<S: BackendTextStyle>(
        &'static self,
        text: &str,
        style: &S,
    ) -> (
        PxScaleFont<&'static FontRef<'static>>,
        Vec<(GlyphId, f32)>,
        f32,
    ) {
        let font = match style.style() {
            FontStyle::Bold => &self.bold,
            _ => &self.normal,
        };
        // plotters' ab_glyph scale: `size` pixels from descender to ascender.
        let sf = font.as_scaled(PxScale::from(style.size() as f32));
        let (mut pen, mut prev, mut glyphs) = (0.0f32, None, Vec::new());
        for c in text.chars() {
            let id = sf.glyph_id(c);
            if let Some(p) = prev {
                pen += sf.kern(p, id);
            }
            glyphs.push((id, pen));
            pen += sf.h_advance(id);
            prev = Some(id);
        }
        (sf, glyphs, pen)
    }
}

impl<B: DrawingBackend> DrawingBackend for GlyphText<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.present()
    }
    fn draw_pixel(
        &mut self,
        p: BackendCoord,
        c: BackendColor,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_pixel(p, c)
    }
    fn draw_line<S: plotters_backend::BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: plotters_backend::BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        style: &S,
        fill: bool,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_rect(a, b, style, fill)
    }
    /// Curves anti-aliased: each pixel covered by its distance to the
    /// nearest segment (round joins and caps), blended once per path.
    fn draw_path<S: plotters_backend::BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        let colour = style.color();
        let pts: Vec<BackendCoord> = path.into_iter().collect();
        if colour.alpha == 0.0 || pts.len() < 2 {
            return Ok(());
        }
        let half = f64::from(style.stroke_width().max(1)) / 2.0;
        let reach = half + 0.5;
        let (w, h) = self.inner.get_size();
        let clip = |v: f64, hi: u32| v.clamp(0.0, f64::from(hi.max(1) - 1)) as i64;
        let xs = pts.iter().map(|p| f64::from(p.0));
        let ys = pts.iter().map(|p| f64::from(p.1));
        let (x0, x1) = (
            clip(xs.clone().fold(f64::INFINITY, f64::min) - reach, w),
            clip(xs.fold(f64::NEG_INFINITY, f64::max) + reach, w),
        );
        let (y0, y1) = (
            clip(ys.clone().fold(f64::INFINITY, f64::min) - reach, h),
            clip(ys.fold(f64::NEG_INFINITY, f64::max) + reach, h),
        );
        let bw = (x1 - x0 + 1) as usize;
        let mut cover = vec![0f32; bw * (y1 - y0 + 1) as usize];
        for seg in pts.windows(2) {
            let (a, b) = (
                (f64::from(seg[0].0), f64::from(seg[0].1)),
                (f64::from(seg[1].0), f64::from(seg[1].1)),
            );
            let (sx0, sx1) = (clip(a.0.min(b.0) - reach, w), clip(a.0.max(b.0) + reach, w));
            let (sy0, sy1) = (clip(a.1.min(b.1) - reach, h), clip(a.1.max(b.1) + reach, h));
            let (dx, dy) = (b.0 - a.0, b.1 - a.1);
            let len2 = dx * dx + dy * dy;
            for y in sy0..=sy1 {
                for x in sx0..=sx1 {
                    let (px, py) = (x as f64 - a.0, y as f64 - a.1);
                    let t = if len2 > 0.0 {
                        ((px * dx + py * dy) / len2).clamp(0.0, 1.0)
                    } else {
                        0.0
                    };
                    let d = (px - t * dx).hypot(py - t * dy);
                    let k = (reach - d).clamp(0.0, 1.0) as f32;
                    let cell = &mut cover[(y - y0) as usize * bw + (x - x0) as usize];
                    *cell = cell.max(k);
                }
            }
        }
        for (i, &k) in cover.iter().enumerate() {
            if k > 0.0 {
                let p = ((x0 + (i % bw) as i64) as i32, (y0 + (i / bw) as i64) as i32);
                let c = BackendColor {
                    alpha: colour.alpha * f64::from(k),
                    rgb: colour.rgb,
                };
                self.inner.draw_pixel(p, c)?;
            }
        }
        Ok(())
    }
    fn draw_circle<S: plotters_backend::BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: plotters_backend::BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }
    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> std::result::Result<(u32, u32), DrawingErrorKind<B::ErrorType>> {
        let (sf, _, width) = self.fonts.layout(text, style);
        Ok((
            width.ceil() as u32,
            (sf.ascent() - sf.descent()).ceil() as u32,
        ))
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        let colour = style.color();
        if colour.alpha == 0.0 {
            return Ok(());
        }
        let (sf, glyphs, width) = self.fonts.layout(text, style);
        let height = sf.ascent() - sf.descent();
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let top = match anchor.v_pos {
            VPos::Top => 0.0,
            VPos::Center => -height / 2.0,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        for (id, x) in glyphs {
            let glyph = id.with_scale_and_position(sf.scale(), point(dx + x, top + sf.ascent()));
            let Some(outline) = sf.font().outline_glyph(glyph) else {
                continue;
            };
            let b = outline.px_bounds();
            let mut pixels = Vec::new();
            outline.draw(|gx, gy, cov| pixels.push((gx, gy, cov)));
            for (gx, gy, cov) in pixels {
                if cov <= 0.0 {
                    continue;
                }
                // Relative to the anchor, then rotated like plotters' text.
                let (rx, ry) =
                    trans.transform(b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32);
                let c = BackendColor {
                    alpha: colour.alpha * f64::from(cov.min(1.0)),
                    rgb: colour.rgb,
                };
                self.inner.draw_pixel((pos.0 + rx, pos.1 + ry), c)?;
            }
        }
        Ok(())
    }
}
