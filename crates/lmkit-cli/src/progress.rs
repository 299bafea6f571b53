//! Progress that works both on a terminal and in a log: an indicatif bar
//! (rate, ETA) when stderr is a terminal; otherwise plain lines with the
//! elapsed time, at most one every [`LOG_EVERY`] for updates (none for a
//! job shorter than that), always for events (`line`). indicatif alone prints nothing when stderr is not a
//! terminal, not even the lines given to `println`.

use std::cell::Cell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub mod pretrain;

/// Shortest interval between two progress lines in a log.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

pub struct Progress {
    pb: ProgressBar,
    terminal: bool,
    start: Instant,
    last: Cell<Option<Instant>>,
}

impl Progress {
    /// A bar drawn with `template` (indicatif's syntax) on a terminal.
    pub fn new(template: &str) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let pb = if terminal {
            ProgressBar::new(0)
        } else {
            ProgressBar::hidden()
        };
        pb.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Progress {
            pb,
            terminal,
            start: Instant::now(),
            last: Cell::new(None),
        }
    }

    fn stamp(&self) -> String {
        let s = self.start.elapsed().as_secs();
        format!("[{:02}:{:02}:{:02}]", s / 3600, s / 60 % 60, s % 60)
    }

    pub fn set_length(&self, n: u64) {
        self.pb.set_length(n);
    }

    /// Position `pos` with a message (built only when it will be shown).
    pub fn update(&self, pos: u64, msg: impl FnOnce() -> String) {
        if self.terminal {
            self.pb.set_position(pos);
            self.pb.set_message(msg());
            return;
        }
        // The first line after LOG_EVERY: a short job prints none.
        let now = Instant::now();
        if now - self.last.get().unwrap_or(self.start) < LOG_EVERY {
            return;
        }
        self.last.set(Some(now));
        let len = self.pb.length().unwrap_or(0);
        eprintln!("{} {pos}/{len} {}", self.stamp(), msg());
    }

    /// An event line: above the bar on a terminal (plain while the bar has
    /// not started, so that no empty bar is drawn), timestamped in a log.
    pub fn line(&self, msg: &str) {
        if self.terminal {
            if self.pb.length().unwrap_or(0) == 0 || self.pb.is_finished() {
                eprintln!("{msg}");
            } else {
                self.pb.println(msg);
            }
        } else {
            eprintln!("{} {msg}", self.stamp());
        }
    }

    pub fn finish(&self) {
        self.pb.finish_and_clear();
    }

    /// Ends the bar with the run's summary line: `n` `unit` `done` in the
    /// elapsed time, the rate, then `rest` (e.g. where the output went).
    pub fn summary(&self, n: u64, unit: &str, done: &str, rest: &str) {
        self.finish();
        let secs = self.start.elapsed().as_secs_f64();
        self.line(&format!(
            "{n} {unit} {done} in {secs:.1} s ({:.1} {unit}/s){rest}",
            n as f64 / secs.max(1e-9)
        ));
    }
}
