//! `lmkit plot` on the metrics.jsonl of real GPT-2 / BERT pretraining and
//! fine-tuning runs (tests/data/metrics): PNG and SVG outputs, one curve and
//! one legend entry per series, several runs on one chart, clear errors.

mod common;

use std::path::{Path, PathBuf};

use common::{lmkit, tmpdir};

/// Colours of the first curves of a panel (one run) or of the first runs.
const BLUE: &str = "#1F77B4";
const ORANGE: &str = "#FF7F0E";

/// `dir/NAME/metrics.jsonl`, a copy of tests/data/metrics/FIXTURE.jsonl.
fn run_dir(dir: &Path, name: &str, fixture: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/metrics")
        .join(format!("{fixture}.jsonl"));
    let run = dir.join(name);
    std::fs::create_dir_all(&run).unwrap();
    std::fs::copy(src, run.join("metrics.jsonl")).unwrap();
    run
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = lmkit(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(args: &[&str]) -> String {
    let o = lmkit(args);
    assert_eq!(o.status.code(), Some(1), "{args:?} should fail");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Polylines (curves and legend swatches) stroked in `colour`.
fn polylines(svg: &str, colour: &str) -> usize {
    svg.split("<polyline")
        .skip(1)
        .filter(|p| {
            p.split('>')
                .next()
                .unwrap_or("")
                .contains(&format!("stroke=\"{colour}\""))
        })
        .count()
}

/// Whether the SVG has a text element reading exactly `label`.
fn has_text(svg: &str, label: &str) -> bool {
    svg.split("<text").skip(1).any(|t| {
        t.split_once('>')
            .is_some_and(|(_, rest)| rest.split("</text>").next().unwrap_or("").trim() == label)
    })
}

/// Writes RUN/plot.png and RUN/plot.svg; checks the PNG and returns the SVG.
fn plot_both(run: &Path, extra: &[&str]) -> String {
    let png = run.join("plot.png");
    let mut args = vec!["plot", s(run), "--output", s(&png)];
    args.extend(extra);
    ok(&args);
    let bytes = std::fs::read(&png).unwrap();
    let dec = png::Decoder::new(std::io::Cursor::new(bytes));
    let info = dec.read_info().unwrap();
    let (w, h) = (info.info().width, info.info().height);
    assert!(w >= 600 && h >= 400, "{w}x{h}");
    let svg_path = run.join("plot.svg");
    args[3] = s(&svg_path);
    ok(&args);
    let svg = std::fs::read_to_string(svg_path).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    svg
}

#[test]
fn gpt2_pretrain_run() {
    let dir = tmpdir("plot-gpt2");
    let run = run_dir(&dir, "gpt2", "gpt2_pretrain");
    let svg = plot_both(&run, &[]);
    for t in ["loss", "learning rate", "gradient norm", "tokens / s"] {
        assert!(has_text(&svg, t), "panel {t}");
    }
    for key in ["loss", "val_loss", "lr", "grad_norm", "tokens_per_s"] {
        assert!(has_text(&svg, key), "legend {key}");
    }
    // Perplexity is exp(loss): a panel only when asked for.
    assert!(!has_text(&svg, "val_ppl"));
    // val_loss: its curve and its legend swatch.
    assert!(polylines(&svg, ORANGE) >= 2, "{}", polylines(&svg, ORANGE));
    // 4 panels of 1-2 curves, each with a swatch.
    assert!(polylines(&svg, BLUE) >= 8);

    // The default output is RUN/metrics.png; --metrics picks panels.
    let out = ok(&[
        "plot",
        s(&run),
        "--metrics",
        "loss,ppl",
        "--log-y",
        "--smooth",
        "0.9",
    ]);
    assert!(out.contains("(loss, perplexity;"), "{out}");
    assert!(std::fs::read(run.join("metrics.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));

    // `-o -`: the image on stdout (PNG, or `--format svg`), the report on stderr.
    let o = lmkit(&["plot", s(&run), "-o", "-"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.starts_with(b"\x89PNG"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("wrote the chart to stdout"));
    let o = lmkit(&["plot", s(&run), "-o", "-", "--format", "svg"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.starts_with(b"<svg"));
    let err = fails(&[
        "plot",
        s(&run),
        "-o",
        s(&dir.join("x.png")),
        "--format",
        "svg",
    ]);
    assert!(err.contains("--format svg but --output"), "{err}");
}

#[test]
fn bert_pretrain_run() {
    let dir = tmpdir("plot-bert");
    let run = run_dir(&dir, "bert", "bert_pretrain");
    let svg = plot_both(&run, &["--smooth", "0.6"]);
    for t in ["MLM loss", "NSP loss", "accuracy / F1"] {
        assert!(has_text(&svg, t), "panel {t}");
    }
    for key in [
        "loss",
        "val_loss",
        "mlm_loss",
        "val_mlm_loss",
        "nsp_loss",
        "val_nsp_loss",
        "nsp_accuracy",
        "val_nsp_accuracy",
    ] {
        assert!(has_text(&svg, key), "legend {key}");
    }
    // Smoothing: each training curve but lr drawn faint behind its EMA
    // (loss, mlm_loss, nsp_loss, nsp_accuracy, grad_norm, tokens_per_s);
    // evaluation points are not smoothed.
    assert_eq!(svg.matches("opacity=\"0.28\"").count(), 6);
}

#[test]
fn finetune_run_has_its_eval_curves() {
    let dir = tmpdir("plot-finetune");
    let run = run_dir(&dir, "clf", "finetune_classify");
    let svg = plot_both(&run, &[]);
    for key in [
        "loss",
        "eval_loss",
        "eval_accuracy",
        "eval_f1",
        "examples_per_s",
    ] {
        assert!(has_text(&svg, key), "legend {key}");
    }
    // eval_loss (second curve of the loss panel) and eval_f1: curve + swatch each.
    assert!(polylines(&svg, ORANGE) >= 4, "{}", polylines(&svg, ORANGE));
    // Eval points are marked.
    assert!(svg.contains("<circle"));
}

#[test]
fn several_runs_on_one_chart() {
    let dir = tmpdir("plot-compare");
    let a = run_dir(&dir, "a", "finetune_classify");
    let b = run_dir(&dir, "b", "gpt2_pretrain");
    let out = dir.join("cmp.svg");
    let msg = ok(&[
        "plot",
        s(&a),
        s(&b),
        "--labels",
        "clf,lm",
        "--output",
        s(&out),
        "--metrics",
        "loss",
    ]);
    assert!(msg.contains("(loss;"), "{msg}");
    let svg = std::fs::read_to_string(&out).unwrap();
    for key in ["clf: loss", "clf: eval_loss", "lm: loss", "lm: val_loss"] {
        assert!(has_text(&svg, key), "legend {key}");
    }
    assert!(has_text(&svg, "clf  vs  lm"));
    // One colour per run: run b's two curves are orange.
    assert!(polylines(&svg, ORANGE) >= 3);
    // Several runs need --output.
    let err = fails(&["plot", s(&a), s(&b)]);
    assert!(err.contains("--output"), "{err}");
    let err = fails(&["plot", s(&a), s(&b), "--labels", "x", "-o", s(&out)]);
    assert!(err.contains("--labels has 1 names for 2 runs"), "{err}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tmpdir("plot-bad");
    let run = dir.join("empty");
    std::fs::create_dir_all(&run).unwrap();
    let m = run.join("metrics.jsonl");
    std::fs::write(&m, "{\"step\": 1, \"loss\": null}\n{\"step\": 2}\n").unwrap();
    let err = fails(&["plot", s(&run)]);
    assert!(err.contains("no metrics to plot"), "{err}");
    std::fs::write(&m, "{\"step\": 1, \"loss\": 2.0}\nnot json\n").unwrap();
    let err = fails(&["plot", s(&run)]);
    assert!(err.contains("metrics.jsonl:2:"), "{err}");
    std::fs::write(&m, "{\"step\": 1, \"loss\": 2.0}\n").unwrap();
    let before = std::fs::read(&m).unwrap();
    // Never over the input; the format follows the extension.
    let err = fails(&["plot", s(&run), "-o", s(&m)]);
    assert!(err.contains(".png or .svg"), "{err}");
    let renamed = run.join("metrics.svg");
    std::fs::copy(&m, &renamed).unwrap();
    let err = fails(&["plot", s(&renamed), "-o", s(&renamed)]);
    assert!(err.contains("exists: choose a new file name"), "{err}");
    let png = dir.join("p.png");
    ok(&["plot", s(&run), "-o", s(&png)]);
    let err = fails(&["plot", s(&run), "-o", s(&png)]);
    assert!(err.contains("exists: choose a new file name"), "{err}");
    assert_eq!(std::fs::read(&m).unwrap(), before);
    let err = fails(&["plot", s(&run), "--smooth", "1"]);
    assert!(err.contains("--smooth"), "{err}");
    let err = fails(&["plot", s(&run), "--metrics", "eval_f1"]);
    assert!(err.contains("keys present: loss"), "{err}");
    let err = fails(&["plot", s(&dir.join("missing"))]);
    assert!(err.contains("missing"), "{err}");
    // Nothing but the inputs was written.
    let mut names: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["metrics.jsonl", "metrics.svg"]);
}
