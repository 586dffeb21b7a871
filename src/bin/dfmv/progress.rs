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

/// Overrides [`SHOW_AFTER`], in milliseconds (`0`: show it at once).
const SHOW_AFTER_VAR: &str = "DFMV_PROGRESS_DELAY_MS";

/// One spinner per view being computed.
#[derive(Debug)]
pub struct ProgressBars {
    enabled: AtomicBool,
    show_after: Duration,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl ProgressBars {
    /// `enabled`: stdout is a terminal and dfmv is not quiet. The
    /// indicator shows once work has taken 300 ms, or what
    /// `DFMV_PROGRESS_DELAY_MS` says.
    pub fn new(enabled: bool) -> Self {
        let show_after = std::env::var(SHOW_AFTER_VAR)
            .ok()
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .map_or(SHOW_AFTER, Duration::from_millis);
        Self::with_delay(enabled, show_after)
    }

    /// Shows the indicator once work has taken `show_after`.
    pub fn with_delay(enabled: bool, show_after: Duration) -> Self {
        Self {
            enabled: AtomicBool::new(enabled),
            show_after,
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
        if !self.enabled.load(Ordering::Relaxed) || elapsed < self.show_after {
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
        let bars = ProgressBars::with_delay(true, SHOW_AFTER);
        bars.progress("v", 10, Duration::from_millis(10));
        assert!(bars.bars.lock().unwrap().is_empty(), "too early to show");
        bars.progress("v", 10, Duration::from_secs(2));
        assert_eq!(bars.bars.lock().unwrap().len(), 1);
        bars.finished("v");
        assert!(bars.bars.lock().unwrap().is_empty());
    }

    #[test]
    fn with_no_delay_the_first_report_shows() {
        let bars = ProgressBars::with_delay(true, Duration::ZERO);
        bars.progress("v", 0, Duration::ZERO);
        assert_eq!(bars.bars.lock().unwrap().len(), 1);
        bars.clear();
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
