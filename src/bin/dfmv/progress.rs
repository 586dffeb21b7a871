//! The progress indicator of long CREATE / REFRESH work: a spinner with
//! the rows written so far and the time spent, on a terminal only, gone
//! when the work is done.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use datafusion_matview::ProgressListener;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Work shorter than this shows no indicator at all.
const SHOW_AFTER: Duration = Duration::from_millis(300);

/// One spinner per view being computed.
#[derive(Debug)]
pub struct ProgressBars {
    enabled: AtomicBool,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl ProgressBars {
    /// `enabled`: stdout is a terminal and dfmv is not quiet.
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled: AtomicBool::new(enabled),
            bars: Mutex::default(),
        }
    }

    /// Follows `\quiet`.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
        if !enabled {
            self.clear();
        }
    }

    /// Removes every indicator still shown (work that was cancelled).
    pub fn clear(&self) {
        let bars: Vec<ProgressBar> = self
            .bars
            .lock()
            .expect("progress lock")
            .drain()
            .map(|(_, bar)| bar)
            .collect();
        for bar in bars {
            bar.finish_and_clear();
        }
    }
}

/// `⠙ v: 1234567 rows so far, 3.2 s`
fn message(view: &str, rows: u64, elapsed: Duration) -> String {
    format!("{view}: {rows} rows so far, {:.1} s", elapsed.as_secs_f64())
}

impl ProgressListener for ProgressBars {
    fn progress(&self, view: &str, rows: u64, elapsed: Duration) {
        if !self.enabled.load(Ordering::Relaxed) || elapsed < SHOW_AFTER {
            return;
        }
        let mut bars = self.bars.lock().expect("progress lock");
        let bar = bars.entry(view.to_owned()).or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        bar.set_message(message(view, rows, elapsed));
    }

    fn finished(&self, view: &str) {
        let bar = self.bars.lock().expect("progress lock").remove(view);
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_bars_show_nothing() {
        let bars = ProgressBars::new(false);
        bars.progress("v", 10, Duration::from_secs(2));
        assert!(bars.bars.lock().unwrap().is_empty());
        let bars = ProgressBars::new(true);
        bars.progress("v", 10, Duration::from_millis(10));
        assert!(bars.bars.lock().unwrap().is_empty(), "too early to show");
        bars.progress("v", 10, Duration::from_secs(2));
        assert_eq!(bars.bars.lock().unwrap().len(), 1);
        bars.finished("v");
        assert!(bars.bars.lock().unwrap().is_empty());
    }

    #[test]
    fn message_names_rows_and_time() {
        assert_eq!(
            message("v", 1234, Duration::from_millis(3210)),
            "v: 1234 rows so far, 3.2 s"
        );
    }
}
