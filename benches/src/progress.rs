//! The progress bar: on stdout, only when stdout is a terminal (and not with `--json`); it reads
//! its position from a probe ten times a second, so clients never touch it.

use crate::settings::Settings;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;
use tokio::task::JoinHandle;

pub struct Progress(Option<(ProgressBar, JoinHandle<()>)>);

impl Progress {
    /// Starts a bar of `total` steps (none for 0).
    pub fn start(settings: &Settings, total: u64, probe: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        if settings.json || !std::io::stdout().is_terminal() || total == 0 {
            return Self(None);
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
        Self(Some((bar, ticker)))
    }

    pub fn finish(self, position: u64) {
        if let Some((bar, ticker)) = self.0 {
            ticker.abort();
            bar.set_position(position);
            bar.finish();
        }
    }
}
