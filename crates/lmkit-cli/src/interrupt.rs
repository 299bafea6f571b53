//! Ctrl-C for long-running commands: the first stops the run cleanly after the
//! current step (the library polls [`requested`] and saves a checkpoint; the
//! command then exits with [`EXIT_CODE`]), the second exits at once.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
pub const EXIT_CODE: i32 = 130;

/// Ctrl-C count: 1 = stop after this step with a checkpoint, 2 = exit now.
static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

/// Installs the handler (once per process).
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let r = ctrlc::set_handler(|| {
            if INTERRUPTS.fetch_add(1, Ordering::SeqCst) >= 1 {
                eprintln!("\ninterrupted twice: exiting without saving");
                std::process::exit(EXIT_CODE);
            }
            eprintln!(
                "\ninterrupt: finishing this step, saving a checkpoint (Ctrl-C again to quit now)"
            );
        });
        if let Err(e) = r {
            eprintln!("warning: cannot install the Ctrl-C handler: {e}");
        }
    });
}

/// Whether Ctrl-C was pressed since the handler was installed.
pub fn requested() -> bool {
    INTERRUPTS.load(Ordering::SeqCst) > 0
}
