//! Progress of the command line's long stages, for a person at a terminal and for a log.
//!
//! On a terminal a stage shows an indicatif spinner or bar that is cleared when it ends. When
//! standard error is not a terminal (a log file, a pipeline, a CI job) an animation would
//! write carriage returns and nothing readable, so a stage prints plain lines instead: one
//! every [`plain_interval`] while it runs (with its latest message), every message passed to
//! [`Progress::log`] at once, and a closing line with its duration when it took a second or
//! more. `--quiet` hides both.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// Nothing (`--quiet`, or a command printing JSON).
    Hidden,
    /// An animated spinner or bar on standard error.
    Terminal,
    /// Plain lines on standard error.
    Plain,
}

impl ProgressMode {
    /// `Hidden` when `quiet`, else `Terminal` when standard error is a terminal, else `Plain`.
    pub fn detect(quiet: bool) -> Self {
        if quiet {
            ProgressMode::Hidden
        } else if std::io::stderr().is_terminal() {
            ProgressMode::Terminal
        } else {
            ProgressMode::Plain
        }
    }
}

/// Whether log lines may carry ANSI colour codes: standard error is a terminal and `NO_COLOR`
/// (<https://no-color.org>) is unset or empty.
pub fn colors_enabled() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

/// Seconds between plain progress lines: `GRADFEM_PROGRESS_INTERVAL` (a positive number of
/// seconds) or 5.
pub fn plain_interval() -> Duration {
    std::env::var("GRADFEM_PROGRESS_INTERVAL")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(Duration::from_secs(5), Duration::from_secs_f64)
}

/// The state a plain-mode stage shares with its ticker thread.
struct Plain {
    label: String,
    start: Instant,
    /// The latest message and position, and whether the stage ended.
    state: Mutex<PlainState>,
    wake: Condvar,
}

#[derive(Default)]
struct PlainState {
    message: String,
    position: Option<(u64, u64)>,
    done: bool,
    /// A line of this stage has been printed (the log shows the stage running).
    printed: bool,
}

impl Plain {
    /// One line: elapsed time, label, position and message.
    fn line(&self, state: &PlainState, message: &str) -> String {
        let mut text = format!("[{:>8.1} s] {}", self.start.elapsed().as_secs_f64(), self.label);
        if let Some((pos, len)) = state.position {
            text.push_str(&format!(" {pos}/{len}"));
        }
        if !message.is_empty() {
            text.push_str(": ");
            text.push_str(message);
        }
        text
    }

    fn print(line: &str) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        let _ = err.flush();
    }
}

/// One stage's progress display; ends (and clears its bar) on [`Progress::finish`] or drop.
pub struct Progress {
    bar: ProgressBar,
    plain: Option<Arc<Plain>>,
    ticker: Option<JoinHandle<()>>,
}

impl Progress {
    /// A display that shows nothing.
    pub fn hidden() -> Self {
        Progress { bar: ProgressBar::hidden(), plain: None, ticker: None }
    }

    /// A stage without a known length: a spinner with `label` and the elapsed time.
    pub fn spinner(mode: ProgressMode, label: &str) -> Self {
        match mode {
            ProgressMode::Hidden => Self::hidden(),
            ProgressMode::Terminal => {
                let bar = ProgressBar::new_spinner();
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {prefix}{msg} [{elapsed}]")
                        .expect("valid template"),
                );
                bar.set_prefix(label.to_string());
                bar.enable_steady_tick(Duration::from_millis(100));
                Progress { bar, plain: None, ticker: None }
            }
            ProgressMode::Plain => Self::plain(label, None),
        }
    }

    /// A stage of `len` units: a bar with `label`, the position and the elapsed time.
    pub fn bar(mode: ProgressMode, label: &str, len: u64) -> Self {
        match mode {
            ProgressMode::Hidden => Self::hidden(),
            ProgressMode::Terminal => {
                let bar = ProgressBar::new(len);
                bar.set_style(
                    ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} {msg} [{elapsed}]")
                        .expect("valid template"),
                );
                bar.set_prefix(label.to_string());
                Progress { bar, plain: None, ticker: None }
            }
            ProgressMode::Plain => Self::plain(label, Some((0, len))),
        }
    }

    fn plain(label: &str, position: Option<(u64, u64)>) -> Self {
        let plain = Arc::new(Plain {
            label: label.to_string(),
            start: Instant::now(),
            state: Mutex::new(PlainState { position, ..Default::default() }),
            wake: Condvar::new(),
        });
        let shared = Arc::clone(&plain);
        let interval = plain_interval();
        let ticker = std::thread::Builder::new()
            .name("gradfem-progress".into())
            .spawn(move || {
                let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    // The stage may have ended before this thread first took the lock.
                    if state.done {
                        return;
                    }
                    let (next, timeout) = shared
                        .wake
                        .wait_timeout(state, interval)
                        .unwrap_or_else(|e| e.into_inner());
                    state = next;
                    if state.done {
                        return;
                    }
                    if timeout.timed_out() {
                        let message = state.message.clone();
                        Plain::print(&shared.line(&state, &message));
                        state.printed = true;
                    }
                }
            })
            .ok();
        Progress { bar: ProgressBar::hidden(), plain: Some(plain), ticker }
    }

    /// Replaces the stage's message (shown by the next tick or periodic line).
    pub fn set_message(&self, message: impl Into<String>) {
        let message = message.into();
        match &self.plain {
            Some(p) => p.state.lock().unwrap_or_else(|e| e.into_inner()).message = message,
            None => self.bar.set_message(message),
        }
    }

    /// Replaces the message and, in plain mode, prints it at once (an optimizer iteration, a
    /// fit's start): events a log should hold every one of.
    pub fn log(&self, message: impl Into<String>) {
        let message = message.into();
        match &self.plain {
            Some(p) => {
                let mut state = p.state.lock().unwrap_or_else(|e| e.into_inner());
                Plain::print(&p.line(&state, &message));
                state.message = message;
                state.printed = true;
            }
            None => self.bar.set_message(message),
        }
    }

    /// Sets the position of a bar.
    pub fn set_position(&self, position: u64) {
        match &self.plain {
            Some(p) => {
                let mut state = p.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((pos, _)) = &mut state.position {
                    *pos = position;
                }
            }
            None => self.bar.set_position(position),
        }
    }

    /// Ends the stage: clears the bar; in plain mode, a closing line with the duration when
    /// the stage took a second or more or printed a line (a log that shows a stage running
    /// also shows it end).
    pub fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.bar.finish_and_clear();
        if let Some(p) = self.plain.take() {
            let mut state = p.state.lock().unwrap_or_else(|e| e.into_inner());
            state.done = true;
            p.wake.notify_all();
            let elapsed = p.start.elapsed().as_secs_f64();
            if elapsed >= 1.0 || state.printed {
                let done = format!("done in {elapsed:.1} s");
                Plain::print(&p.line(&state, &done));
            }
            drop(state);
            if let Some(t) = self.ticker.take() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_line_names_time_label_position_and_message() {
        let p = Plain {
            label: "Taylor test".into(),
            start: Instant::now(),
            state: Mutex::new(PlainState::default()),
            wake: Condvar::new(),
        };
        let state = PlainState { position: Some((3, 6)), ..Default::default() };
        let line = p.line(&state, "solve");
        assert!(line.starts_with('['), "{line}");
        assert!(line.ends_with("] Taylor test 3/6: solve"), "{line}");
        assert!(!line.contains('\x1b'), "no escape codes: {line}");
    }

    #[test]
    fn hidden_progress_accepts_every_call() {
        let p = Progress::spinner(ProgressMode::Hidden, "solving");
        p.set_message("x");
        p.log("y");
        p.set_position(2);
        p.finish();
    }

    /// A stage that printed a line closes it, however short it was; a silent short one does
    /// not.
    #[test]
    fn a_plain_stage_that_printed_closes_with_its_duration() {
        let p = Progress::spinner(ProgressMode::Plain, "fitting");
        let printed = |p: &Progress| {
            p.plain.as_ref().unwrap().state.lock().unwrap_or_else(|e| e.into_inner()).printed
        };
        assert!(!printed(&p));
        p.log("iteration 1");
        assert!(printed(&p));
        p.finish();
    }

    #[test]
    fn a_plain_stage_stops_its_ticker_when_it_ends() {
        let p = Progress::spinner(ProgressMode::Plain, "solving");
        p.set_message("iteration 1");
        let started = Instant::now();
        p.finish();
        assert!(started.elapsed() < Duration::from_secs(1), "the ticker wakes on finish");
    }
}
