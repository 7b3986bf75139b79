//! The progress bar of a training run: steps, loss, eval loss, tokens per second and the time
//! left. It is drawn on stderr only when stdout and stderr are both terminals, so a run piped
//! into a file or another program (and `--json`) prints no bar.

use crate::cli::out::{StdoutError, outln};
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar, and what its message shows.
pub struct Progress {
    bar: ProgressBar,
    loss: f64,
    eval: Option<f64>,
    tokens_per_second: f64,
}

impl Progress {
    /// A bar over steps `first..=last` (counted from 1), drawn only when `shown` (e.g. on the
    /// first rank of an MPI job) and on a terminal.
    pub fn new(first: u64, last: u64, shown: bool) -> Progress {
        let visible = shown && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let target = if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(last), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{bar:30.cyan/blue}] step {pos}/{len}  {msg}  {elapsed} elapsed, ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_position(first.saturating_sub(1));
        bar.reset_eta();
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress {
            bar,
            loss: f64::NAN,
            eval: None,
            tokens_per_second: f64::NAN,
        }
    }

    /// Records a finished step.
    pub fn step(&mut self, loss: f64, tokens_per_second: f64) {
        self.loss = loss;
        self.tokens_per_second = tokens_per_second;
        self.bar.inc(1);
        self.redraw();
    }

    /// Records an eval loss.
    pub fn eval(&mut self, loss: f64) {
        self.eval = Some(loss);
        self.redraw();
    }

    fn redraw(&self) {
        let eval = self
            .eval
            .map(|e| format!("  eval {e:.4}"))
            .unwrap_or_default();
        self.bar.set_message(format!(
            "loss {:.4}{eval}  {:.0} tokens/s",
            self.loss, self.tokens_per_second
        ));
    }

    /// Prints a line above the bar.
    pub fn println(&self, line: &str) -> Result<(), StdoutError> {
        self.bar.suspend(|| outln!("{line}"))
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
