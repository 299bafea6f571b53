use super::axis::{fmt_tick, log_ticks, nice_step, nice_ticks};
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
