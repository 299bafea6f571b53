//! Line charts for `lmkit plot`, drawn with `plotters` into a PNG (RGB buffer
//! encoded by `png`) or an SVG. Text uses an embedded DejaVu Sans subset
//! through `ab_glyph`, so no system font or font-kit is needed.
//!
//! The axes are ours ([`Axis`]): "nice" 1-2-5 ticks, SI suffixes (10k, 2M),
//! scientific labels for tiny values (6e-4), and a log scale.

use ab_glyph::{point, Font, FontRef, GlyphId, PxScale, PxScaleFont, ScaleFont};
use anyhow::{anyhow, bail, Result};
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind};
use std::ops::Range;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FONT_BOLD: &[u8] = include_bytes!("../assets/DejaVuSans-Bold.ttf");

/// Matplotlib's tab10, colour-blind-friendlier than plotters' primaries.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of series `i` (the palette repeats after ten).
pub fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Most points drawn per line; longer series are thinned to per-bucket
/// minima and maxima, which keeps spikes (a 1M-row file stays a small SVG).
const MAX_DRAWN: usize = 4000;

/// One curve of a panel.
pub struct Line {
    pub label: String,
    /// (x, y) in x order; finite values only.
    pub points: Vec<(f64, f64)>,
    pub colour: RGBColor,
    /// Dashed (validation curves when several runs share a panel).
    pub dashed: bool,
    /// A dot on every point (sparse evaluation curves).
    pub markers: bool,
    /// EMA of `points`: drawn in full colour with `points` faint behind.
    pub smoothed: Option<Vec<(f64, f64)>>,
}

pub struct Panel {
    pub title: String,
    pub log_y: bool,
    pub lines: Vec<Line>,
}

pub struct Figure {
    pub title: String,
    pub x_label: String,
    pub panels: Vec<Panel>,
}

/// Pixel size of a figure: panels in a grid of at most 3 columns.
pub fn figure_size(panels: usize) -> (u32, u32) {
    let (cols, rows) = grid(panels);
    (cols as u32 * 600, 48 + rows as u32 * 380)
}

fn grid(panels: usize) -> (usize, usize) {
    let cols = match panels {
        0 | 1 => 1,
        2 | 4 => 2,
        _ => 3,
    };
    (cols, panels.max(1).div_ceil(cols))
}

/// Registers the embedded font as plotters' "sans-serif" (once per process).
fn register_fonts() -> Result<()> {
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

/// The figure as an encoded PNG of `size` pixels.
pub fn render_png(fig: &Figure, size: (u32, u32)) -> Result<Vec<u8>> {
    register_fonts()?;
    let (w, h) = size;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let fonts = fonts()?;
        let inner = BitMapBackend::with_buffer(&mut rgb, size);
        let root = GlyphText { inner, fonts }.into_drawing_area();
        draw(&root, fig)?;
        root.present()
            .map_err(|e| anyhow!("drawing the chart: {e}"))?;
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header()?;
    writer.write_image_data(&rgb)?;
    writer.finish()?;
    Ok(out)
}

/// The figure as an SVG document of `size` pixels.
pub fn render_svg(fig: &Figure, size: (u32, u32)) -> Result<String> {
    register_fonts()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root, fig)?;
        root.present()
            .map_err(|e| anyhow!("drawing the chart: {e}"))?;
    }
    Ok(svg)
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    fig: &Figure,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the chart: {e}");
    root.fill(&WHITE).map_err(err)?;
    let (w, _) = root.dim_in_pixel();
    let title_font = FontDesc::new(FontFamily::SansSerif, 22.0, FontStyle::Bold);
    root.draw(&Text::new(
        fig.title.clone(),
        (w as i32 / 2, 14),
        title_font
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top)),
    ))
    .map_err(err)?;
    let body = root.margin(48, 0, 0, 0);
    let (cols, rows) = grid(fig.panels.len());
    let x = x_axis(fig);
    for (panel, area) in fig.panels.iter().zip(body.split_evenly((rows, cols))) {
        draw_panel(&area, panel, &x, &fig.x_label).map_err(err)?;
    }
    Ok(())
}

/// The x axis shared by every panel, so that steps line up across panels.
fn x_axis(fig: &Figure) -> Axis {
    let (lo, hi) = bounds(fig.panels.iter().flat_map(|p| &p.lines), |p| p.0);
    Axis::new(lo, hi, false, 0.02)
}

fn bounds<'a>(lines: impl Iterator<Item = &'a Line>, f: impl Fn(&(f64, f64)) -> f64) -> (f64, f64) {
    lines
        .flat_map(|l| l.points.iter().chain(l.smoothed.iter().flatten()))
        .map(f)
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        })
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    x: &Axis,
    x_label: &str,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let y = y_axis(panel);
    let label_font = ("sans-serif", 14).into_font();
    let y_label_width = y
        .ticks
        .iter()
        .map(|&v| y.label(v).chars().count())
        .max()
        .unwrap_or(1) as u32
        * 8
        + 12;
    let mut chart = ChartBuilder::on(area)
        .caption(
            &panel.title,
            FontDesc::new(FontFamily::SansSerif, 17.0, FontStyle::Bold),
        )
        .margin_top(6)
        .margin_left(10)
        .margin_right(22)
        .margin_bottom(8)
        .x_label_area_size(42)
        .y_label_area_size(y_label_width.max(40))
        .build_cartesian_2d(x.clone(), y.clone())?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225).stroke_width(1))
        .axis_style(RGBColor(90, 90, 90).stroke_width(1))
        .x_label_style(label_font.clone())
        .y_label_style(label_font.clone())
        .x_desc(x_label)
        .axis_desc_style(("sans-serif", 14).into_font())
        .x_max_light_lines(0)
        .y_max_light_lines(0)
        .draw()?;

    for line in &panel.lines {
        let raw = thin(&line.points);
        let main_style = line.colour.stroke_width(2);
        let legend_style = main_style;
        let dash =
            |pts: Vec<(f64, f64)>, style: ShapeStyle| DashedLineSeries::new(pts, 7, 5, style);
        let anno = match &line.smoothed {
            Some(sm) => {
                chart.draw_series(LineSeries::new(raw, line.colour.mix(0.28).stroke_width(1)))?;
                if line.dashed {
                    chart.draw_series(dash(thin(sm), main_style))?
                } else {
                    chart.draw_series(LineSeries::new(thin(sm), main_style))?
                }
            }
            None if line.dashed => chart.draw_series(dash(raw, main_style))?,
            None => chart.draw_series(LineSeries::new(raw, main_style))?,
        };
        let dashed = line.dashed;
        anno.label(line.label.clone()).legend(move |(lx, ly)| {
            // Two dashes for a dashed curve, one stroke otherwise.
            let gap = if dashed { (9, 13) } else { (20, 20) };
            EmptyElement::at((lx, ly))
                + PathElement::new(vec![(0, 0), (gap.0, 0)], legend_style)
                + PathElement::new(vec![(gap.1, 0), (22, 0)], legend_style)
        });
        if line.markers && line.points.len() <= 200 {
            chart.draw_series(
                line.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, line.colour.filled())),
            )?;
        }
    }
    chart
        .configure_series_labels()
        .position(legend_corner(panel, x, &y))
        .margin(8)
        .legend_area_size(26)
        .label_font(("sans-serif", 13).into_font())
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .draw()?;
    Ok(())
}

fn y_axis(panel: &Panel) -> Axis {
    let log = panel.log_y;
    let lines = panel.lines.iter();
    let (lo, hi) = if log {
        let pos = |l: &Line| {
            l.points
                .iter()
                .chain(l.smoothed.iter().flatten())
                .map(|p| p.1)
                .filter(|v| *v > 0.0 && v.is_finite())
                .collect::<Vec<_>>()
        };
        lines
            .flat_map(pos)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(v), b.max(v))
            })
    } else {
        bounds(lines, |p| p.1)
    };
    Axis::new(lo, hi, log, 0.05)
}

/// Drops the x-sorted points down to about [`MAX_DRAWN`]: per bucket, its
/// lowest and highest point in x order.
fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_DRAWN {
        return points.to_vec();
    }
    let bucket = points.len().div_ceil(MAX_DRAWN / 2);
    let mut out = Vec::with_capacity(MAX_DRAWN + 2);
    for chunk in points.chunks(bucket) {
        let lo = chunk.iter().min_by(|a, b| a.1.total_cmp(&b.1));
        let hi = chunk.iter().max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(&lo), Some(&hi)) = (lo, hi) {
            if lo.0 <= hi.0 {
                out.extend([lo, hi]);
            } else {
                out.extend([hi, lo]);
            }
        }
    }
    out
}

/// The corner of the plot holding the fewest points, where the legend hides
/// the least of the curves.
fn legend_corner(panel: &Panel, x: &Axis, y: &Axis) -> SeriesLabelPosition {
    // (corner, x range, y range) in [0, 1]² of the plotting area, y up.
    let corners = [
        (SeriesLabelPosition::UpperRight, (0.55, 1.0), (0.6, 1.0)),
        (SeriesLabelPosition::UpperLeft, (0.0, 0.45), (0.6, 1.0)),
        (SeriesLabelPosition::LowerRight, (0.55, 1.0), (0.0, 0.4)),
        (SeriesLabelPosition::LowerLeft, (0.0, 0.45), (0.0, 0.4)),
    ];
    let mut counts = [0usize; 4];
    for l in &panel.lines {
        for &(px, py) in l.smoothed.as_ref().unwrap_or(&l.points) {
            let (fx, fy) = (x.fraction(px), y.fraction(py));
            for (c, (_, xr, yr)) in counts.iter_mut().zip(&corners) {
                if (xr.0..=xr.1).contains(&fx) && (yr.0..=yr.1).contains(&fy) {
                    // Each line weighs the same whatever its point count.
                    *c += 1_000_000 / l.points.len().max(1);
                }
            }
        }
    }
    let best = (0..4).min_by_key(|&i| counts[i]).unwrap_or(0);
    match best {
        1 => SeriesLabelPosition::UpperLeft,
        2 => SeriesLabelPosition::LowerRight,
        3 => SeriesLabelPosition::LowerLeft,
        _ => SeriesLabelPosition::UpperRight,
    }
}

/// TensorBoard's smoothing: an exponential moving average with weight
/// `w` in [0, 1), debiased (divided by 1 − wⁿ) so the curve starts at the
/// first value instead of rising from zero. `w = 0` is the raw curve.
pub fn ema(points: &[(f64, f64)], w: f64) -> Vec<(f64, f64)> {
    let mut last = 0.0;
    let mut n = 0;
    points
        .iter()
        .map(|&(x, v)| {
            last = last * w + (1.0 - w) * v;
            n += 1;
            (x, last / (1.0 - w.powi(n)))
        })
        .collect()
}

/// "Nice" tick positions for a linear axis over [lo, hi]: a step of 1, 2 or
/// 5 × 10^k giving about `target` ticks, ticks on its multiples.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let ticks = (first..=last.max(first))
        .map(|k| k as f64 * step)
        .filter(|v| *v <= hi + step * 1e-9)
        .collect();
    (ticks, step)
}

fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Ticks of a log axis over [lo, hi] (both > 0): decades when the range holds
/// at least three (every k-th when many), else 1-2-5 or 1…9 per decade, else
/// linear nice ticks.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (d0, d1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let with = |mantissas: &[f64]| -> Vec<f64> {
        (d0..=d1)
            .flat_map(|d| mantissas.iter().map(move |m| m * 10f64.powi(d)))
            .filter(|v| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9))
            .collect()
    };
    let decades = with(&[1.0]);
    if decades.len() >= 3 {
        let stride = decades.len().div_ceil(8);
        return decades.into_iter().step_by(stride).collect();
    }
    for mantissas in [
        &[1.0, 2.0, 5.0][..],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    ] {
        let ticks = with(mantissas);
        if ticks.len() >= 3 {
            return ticks;
        }
    }
    nice_ticks(lo, hi, 4).0
}

/// Tick label: `step` is the tick spacing (it sets the decimals); values of
/// 10 000 and up get an SI suffix, below 0.01 a mantissa and exponent.
/// `largest` is the axis' largest |tick|: one notation for the whole axis.
pub fn fmt_tick(v: f64, step: f64, largest: f64) -> String {
    if v.abs() < step.abs() * 1e-6 || v == 0.0 {
        return "0".into();
    }
    let decimals = |s: f64| (-(s.log10() + 1e-9).floor()).max(0.0) as usize;
    if largest >= 1e4 {
        let (div, suffix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
            .into_iter()
            .find(|(d, _)| largest >= *d)
            .unwrap_or((1e3, "k"));
        return format!("{:.*}{suffix}", decimals(step / div), v / div);
    }
    if largest < 1e-2 {
        let exp = (v.abs().log10() + 1e-9).floor() as i32;
        let mant = v / 10f64.powi(exp);
        let digits = (exp - (step.log10() + 1e-9).floor() as i32).max(0) as usize;
        let m = format!("{mant:.digits$}");
        let m = if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.')
        } else {
            &m
        };
        return format!("{m}e{exp}");
    }
    format!("{:.*}", decimals(step), v)
}

struct Fonts {
    normal: FontRef<'static>,
    bold: FontRef<'static>,
}

fn fonts() -> Result<&'static Fonts> {
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
struct GlyphText<B> {
    inner: B,
    fonts: &'static Fonts,
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

/// A plotters coordinate with our ticks and labels: linear or log.
#[derive(Clone)]
pub struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<f64>,
    step: f64,
    largest: f64,
}

impl Axis {
    /// An axis over the data range [lo, hi], widened by `pad` of its span on
    /// each side (a factor on a log axis); degenerate ranges get a span.
    pub fn new(lo: f64, hi: f64, log: bool, pad: f64) -> Self {
        let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
            (lo, hi)
        } else {
            (0.0, 1.0)
        };
        if log {
            lo = lo.max(f64::MIN_POSITIVE);
            hi = hi.max(lo);
            if hi / lo < 1.0 + 1e-9 {
                (lo, hi) = (lo / 1.5, hi * 1.5);
            }
            let f = (hi / lo).powf(pad);
            let (lo, hi) = (lo / f, hi * f);
            let ticks = log_ticks(lo, hi);
            let largest = ticks.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            return Axis {
                lo,
                hi,
                log,
                ticks,
                step: 0.0,
                largest,
            };
        }
        if hi - lo <= hi.abs().max(lo.abs()) * 1e-12 {
            let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo, hi) = (lo - d, hi + d);
        }
        let span = hi - lo;
        let (lo, hi) = (lo - span * pad, hi + span * pad);
        let (ticks, step) = nice_ticks(lo, hi, 5);
        let largest = ticks.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        Axis {
            lo,
            hi,
            log,
            ticks,
            step,
            largest,
        }
    }

    /// Position of `v` along the axis, 0 at `lo` and 1 at `hi`.
    pub fn fraction(&self, v: f64) -> f64 {
        if self.log {
            (v.max(f64::MIN_POSITIVE).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    pub fn label(&self, v: f64) -> String {
        // A log axis has no single step: each tick is formatted at its own decade.
        let step = if self.log {
            let k = self
                .ticks
                .windows(2)
                .map(|w| w[1] - w[0])
                .fold(f64::INFINITY, f64::min);
            let decade = 10f64.powf(v.abs().log10().floor());
            if k.is_finite() && k < decade {
                k.max(decade / 10.0)
            } else {
                decade
            }
        } else {
            self.step
        };
        // A log axis picks the notation per tick (10, 100, 1000, 10k).
        fmt_tick(v, step, if self.log { v.abs() } else { self.largest })
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = self.fraction(*v);
        // Saturating cast: a stray value lands off the plot, clipped.
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format_ext(&self, v: &f64) -> String {
        self.label(*v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ticks_are_1_2_5_multiples() {
        let (t, s) = nice_ticks(0.0, 300.0, 5);
        assert_eq!(s, 50.0);
        assert_eq!(t, vec![0.0, 50.0, 100.0, 150.0, 200.0, 250.0, 300.0]);
        let (t, s) = nice_ticks(5.87, 10.93, 5);
        assert_eq!(s, 1.0);
        assert_eq!(t, vec![6.0, 7.0, 8.0, 9.0, 10.0]);
        let (t, s) = nice_ticks(0.0, 6.3e-4, 5);
        assert!((s - 1e-4).abs() < 1e-18, "{s}");
        assert_eq!(t.len(), 7);
        let (t, s) = nice_ticks(0.0, 23_000.0, 5);
        assert_eq!(s, 5000.0);
        assert_eq!(t.last(), Some(&20_000.0));
        assert_eq!(nice_step(0.8), 1.0);
        assert_eq!(nice_step(0.6), 0.5);
        assert_eq!(nice_step(2.9), 2.0);
        assert_eq!(nice_step(3.1), 5.0);
        assert_eq!(nice_step(0.0), 1.0);
    }

    #[test]
    fn tick_labels() {
        // Decimals follow the step, so labels on one axis agree.
        assert_eq!(fmt_tick(0.2, 0.1, 1.0), "0.2");
        assert_eq!(fmt_tick(0.25, 0.05, 1.0), "0.25");
        assert_eq!(fmt_tick(0.3, 0.05, 1.0), "0.30");
        assert_eq!(fmt_tick(150.0, 50.0, 300.0), "150");
        assert_eq!(fmt_tick(3.0 * 0.1, 0.1, 1.0), "0.3");
        // SI suffixes from 10 000 on.
        assert_eq!(fmt_tick(10_000.0, 5000.0, 20_000.0), "10k");
        assert_eq!(fmt_tick(2500.0, 500.0, 10_000.0), "2.5k");
        assert_eq!(fmt_tick(2.0e6, 1.0e6, 4.0e6), "2M");
        assert_eq!(fmt_tick(1.5e6, 5.0e5, 4.0e6), "1.5M");
        assert_eq!(fmt_tick(2.0e7, 1.0e7, 4.0e7), "20M");
        // Small values: mantissa and exponent, no float noise.
        assert_eq!(fmt_tick(3.0 * 1e-4, 1e-4, 6e-4), "3e-4");
        assert_eq!(fmt_tick(1.5e-4, 5e-5, 6e-4), "1.5e-4");
        assert_eq!(fmt_tick(1e-18, 1e-4, 6e-4), "0");
        assert_eq!(fmt_tick(-0.5, 0.5, 1.0), "-0.5");
    }

    #[test]
    fn log_axis_ticks() {
        assert_eq!(log_ticks(0.05, 200.0), vec![0.1, 1.0, 10.0, 100.0]);
        assert_eq!(log_ticks(1.5, 30.0), vec![2.0, 5.0, 10.0, 20.0]);
        assert_eq!(log_ticks(5.5, 11.0), vec![6.0, 7.0, 8.0, 9.0, 10.0]);
        // Within one mantissa step: linear ticks.
        let t = log_ticks(6.1, 6.9);
        assert_eq!(t.len(), 4);
        for (g, w) in t.iter().zip([6.2, 6.4, 6.6, 6.8]) {
            assert!((g - w).abs() < 1e-12, "{t:?}");
        }
        assert_eq!(log_ticks(1.0, 1e30).len(), 8);
        let a = Axis::new(5.8, 10.9, true, 0.05);
        assert_eq!(a.label(6.0), "6");
        assert_eq!(a.label(10.0), "10");
    }

    #[test]
    fn ema_matches_hand_computation() {
        // w = 0.5: running sums 1·0.5 = 0.5; 0.5·0.5 + 0.5·3 = 1.75;
        // 1.75·0.5 + 0.5·2 = 1.875. Debiased by 1 − 0.5ⁿ: 1, 7/3, 15/7.
        let pts = [(1.0, 1.0), (2.0, 3.0), (5.0, 2.0)];
        let s = ema(&pts, 0.5);
        let want = [(1.0, 1.0), (2.0, 1.75 / 0.75), (5.0, 1.875 / 0.875)];
        for (g, w) in s.iter().zip(want) {
            assert_eq!(g.0, w.0);
            assert!((g.1 - w.1).abs() < 1e-12, "{g:?} vs {w:?}");
        }
        assert_eq!(ema(&pts, 0.0), pts.to_vec());
        // A constant curve stays constant.
        assert!(ema(&[(0.0, 4.0); 5], 0.9)
            .iter()
            .all(|p| (p.1 - 4.0).abs() < 1e-12));
    }

    #[test]
    fn png_renders_at_figure_size() {
        let fig = Figure {
            title: "t".into(),
            x_label: "step".into(),
            panels: vec![Panel {
                title: "loss".into(),
                log_y: false,
                lines: vec![Line {
                    label: "loss".into(),
                    points: (0..50).map(|i| (i as f64, (i * i) as f64)).collect(),
                    colour: colour(0),
                    dashed: false,
                    markers: false,
                    smoothed: None,
                }],
            }],
        };
        let size = figure_size(1);
        let bytes = render_png(&fig, size).unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut buf).unwrap();
        assert_eq!(buf.len(), (size.0 * size.1 * 3) as usize);
        // The curve is drawn in its colour (its core pixels fully covered).
        let RGBColor(r, g, b) = colour(0);
        assert!(buf.chunks(3).any(|p| p == [r, g, b]));
    }

    #[test]
    fn thinning_keeps_extremes() {
        let mut pts: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, 1.0)).collect();
        pts[54_321].1 = 9.0;
        pts[77_777].1 = -3.0;
        let t = thin(&pts);
        assert!(t.len() <= MAX_DRAWN + 2);
        assert!(t.contains(&(54_321.0, 9.0)) && t.contains(&(77_777.0, -3.0)));
        assert!(t.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
