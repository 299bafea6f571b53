//! Line charts for `lmkit plot`, drawn with `plotters` into a PNG (RGB buffer
//! encoded by `png`) or an SVG. Text uses an embedded DejaVu Sans subset
//! through `ab_glyph`, so no system font or font-kit is needed.
//!
//! The axes are ours ([`Axis`], in `axis.rs`): "nice" 1-2-5 ticks, SI
//! suffixes (10k, 2M), scientific labels for tiny values (6e-4), and a log
//! scale. `raster.rs` draws the PNG's text and curves; `metrics.rs` makes a
//! [`Figure`] of training runs' metrics.

mod axis;
pub mod metrics;
mod raster;

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use axis::Axis;
use raster::{fonts, register_fonts, GlyphText};

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

#[cfg(test)]
mod tests;
