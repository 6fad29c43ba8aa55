//! The progress bar: on stdout, only when stdout is a terminal (and not with `--json`).

use crate::settings::Settings;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;
use tokio::task::JoinHandle;

/// A progress bar on stdout, only when stdout is a terminal (and not with `--json`); it reads
/// its position from `probe` ten times a second, so clients never touch it.
pub struct Progress {
    bar: Option<ProgressBar>,
    ticker: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts a bar of `total` steps.
    pub fn start(settings: &Settings, total: u64, probe: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        if settings.json || !std::io::stdout().is_terminal() || total == 0 {
            return Self { bar: None, ticker: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout());
        if let Ok(style) = ProgressStyle::with_template(
            "{pos:>7}/{len:7} [{bar:40}] {percent:>3}% {per_sec:>12} {elapsed_precise}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        let b = bar.clone();
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                b.set_position(probe());
            }
        });
        Self { bar: Some(bar), ticker: Some(ticker) }
    }

    /// Stops the bar at `position`.
    pub fn finish(self, position: u64) {
        if let Some(t) = self.ticker {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.set_position(position);
            b.finish();
        }
    }
}
