//! Progress bars of the `servesim` binary (not part of the library): drawn on stderr with
//! `indicatif`, only on a terminal and only once a run has taken a second (`auto`), always
//! (`always`, for logs and tests), or never (`never`, `--quiet`). Nothing reaches stdout.
//!
//! On a terminal the bar is redrawn at most [`TERMINAL_HZ`] times a second. With `always`
//! and a stderr that is not a terminal (a log file, a pipe), no bar is drawn: one plain line
//! (no cursor movement) every [`PLAIN_EVERY`], so an hour's log holds 360 lines, not 770 MB.
//! Rates are whole numbers from 10 up (`51697 requests/s`), below with a decimal or two
//! (`3.2 runs/s`, `0.08 runs/s`).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// On an interactive stderr, for runs longer than about a second.
    Auto,
    /// On stderr whatever it is, from the start.
    Always,
    /// Never.
    Never,
}

/// Runs shorter than this show no bar in `auto` mode.
const SHOW_AFTER: Duration = Duration::from_secs(1);
/// Redraws a second of a bar on a terminal.
pub const TERMINAL_HZ: u8 = 4;
/// Time between two plain progress lines when stderr is not a terminal (`always`).
pub const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// stderr as a terminal whatever it is connected to (`always`).
#[derive(Debug)]
struct Stderr;

impl TermLike for Stderr {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            write!(std::io::stderr(), "\x1b[{n}A")?;
        }
        Ok(())
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            write!(std::io::stderr(), "\x1b[{n}B")?;
        }
        Ok(())
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            write!(std::io::stderr(), "\x1b[{n}C")?;
        }
        Ok(())
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            write!(std::io::stderr(), "\x1b[{n}D")?;
        }
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        writeln!(std::io::stderr(), "{s}")
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        write!(std::io::stderr(), "{s}")
    }
    fn clear_line(&self) -> std::io::Result<()> {
        write!(std::io::stderr(), "\r\x1b[2K")
    }
    fn flush(&self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// What a bar counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counts {
    /// A run's requests done, of an estimated total (`~N`), with their rate.
    RequestsDone,
    /// A sweep's points, of an exact total.
    Points,
    /// A plan's configurations decided, of an exact total.
    Configurations,
    /// A capacity search's runs, with no total known (a bisection ends when it settles).
    Runs,
}

impl Counts {
    fn noun(self) -> &'static str {
        match self {
            Counts::RequestsDone => "requests done",
            Counts::Points => "points",
            Counts::Configurations => "configurations",
            Counts::Runs => "runs",
        }
    }
    fn about(self) -> &'static str {
        match self {
            Counts::RequestsDone => "~",
            Counts::Points | Counts::Configurations | Counts::Runs => "",
        }
    }
    fn rate_unit(self) -> Option<&'static str> {
        match self {
            Counts::RequestsDone => Some("requests"),
            Counts::Runs => Some("runs"),
            Counts::Points | Counts::Configurations => None,
        }
    }
}

/// A rate as the progress line shows it: whole from 10 up, below with a decimal or two (a
/// capacity search's runs of several seconds each read "0 runs/s").
fn rate(per_s: f64) -> String {
    let digits = match per_s {
        r if r >= 10.0 || r == 0.0 => 0,
        r if r >= 1.0 => 1,
        _ => 2,
    };
    format!("{per_s:.digits$}")
}

/// A bar that appears when its mode says so.
pub struct Bar {
    bar: ProgressBar,
    mode: Mode,
    started: Instant,
    shown: std::sync::atomic::AtomicBool,
    counts: Counts,
    /// `always` on a stderr that is not a terminal: plain lines, and when the last one was.
    plain: Option<std::sync::Mutex<Option<Instant>>>,
}

impl Bar {
    /// A bar of `total` steps (`None`: a spinner) counting `counts`.
    pub fn new(mode: Mode, total: Option<u64>, counts: Counts) -> Arc<Bar> {
        use std::io::IsTerminal;
        let (noun, about) = (counts.noun(), counts.about());
        let template = match total {
            Some(_) => format!(
                "{{elapsed_precise}} [{{bar:30}}] {{pos}}/{about}{{len}} {noun}, {{msg}} (ETA {{eta}})"
            ),
            None => format!("{{elapsed_precise}} {{spinner}} {{pos}} {noun}, {{msg}}"),
        };
        let template = template.as_str();
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "wall-clock timing goes to stderr only"
        )]
        let started = Instant::now();
        let plain = (mode == Mode::Always && !std::io::stderr().is_terminal())
            .then(|| std::sync::Mutex::new(None));
        let b = Arc::new(Bar {
            bar,
            mode,
            started,
            shown: false.into(),
            counts,
            plain,
        });
        if mode == Mode::Always {
            b.show();
        }
        b
    }

    fn show(&self) {
        use std::sync::atomic::Ordering;
        if self.shown.swap(true, Ordering::Relaxed) || self.plain.is_some() {
            return;
        }
        let target = match self.mode {
            Mode::Always => ProgressDrawTarget::term_like_with_hz(Box::new(Stderr), TERMINAL_HZ),
            // Hidden by indicatif itself when stderr is not a terminal.
            _ => ProgressDrawTarget::stderr(),
        };
        self.bar.set_draw_target(target);
    }

    /// Moves the bar; shows it once the run has taken [`SHOW_AFTER`] (`auto`).
    pub fn update(&self, position: u64, message: impl Into<std::borrow::Cow<'static, str>>) {
        if self.mode == Mode::Never {
            return;
        }
        let elapsed = self.started.elapsed();
        let mut message: String = message.into().into_owned();
        if let Some(unit) = self.counts.rate_unit() {
            let per_s = position as f64 / elapsed.as_secs_f64().max(1e-3);
            let comma = if message.is_empty() { "" } else { ", " };
            message += &format!("{comma}{} {unit}/s", rate(per_s));
        }
        if let Some(last) = &self.plain {
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
                *last = Some(self.started + elapsed);
                let about = self.counts.about();
                let total = self
                    .bar
                    .length()
                    .map_or(String::new(), |n| format!("/{about}{n}"));
                let s = elapsed.as_secs();
                noteln!(
                    "{:02}:{:02}:{:02} {position}{total} {}, {message}",
                    s / 3600,
                    s / 60 % 60,
                    s % 60,
                    self.counts.noun()
                );
            }
            return;
        }
        if self.mode == Mode::Auto
            && !self.shown.load(std::sync::atomic::Ordering::Relaxed)
            && elapsed >= SHOW_AFTER
        {
            self.show();
        }
        self.bar.set_position(position);
        self.bar.set_message(message);
    }

    /// Removes the bar from the screen.
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// Runs `work` while a thread moves `bar` to `counter` (what `work` has done so far) every
/// 1/[`TERMINAL_HZ`] s, for searches that report progress by counting: `plan`'s
/// configurations, `capacity`'s runs, with `message()` beside the count. The bar is cleared
/// when `work` returns.
pub fn while_counting<T: Send>(
    bar: &Bar,
    counter: &std::sync::atomic::AtomicUsize,
    message: impl Fn() -> String + Sync,
    work: impl FnOnce() -> T + Send,
) -> T {
    use std::sync::atomic::Ordering;
    if bar.mode == Mode::Never {
        return work();
    }
    // At once: the total (a plan's configurations) is known before anything has run.
    bar.update(counter.load(Ordering::Relaxed) as u64, message());
    let done = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|scope| {
        let ticker = scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                // Woken at once when `work` returns: a short search does not wait a tick.
                std::thread::park_timeout(Duration::from_millis(1000 / u64::from(TERMINAL_HZ)));
                bar.update(counter.load(Ordering::Relaxed) as u64, message());
            }
        });
        let out = work();
        done.store(true, Ordering::Relaxed);
        ticker.thread().unpark();
        out
    });
    bar.clear();
    out
}

#[cfg(test)]
mod tests {
    use super::rate;

    #[test]
    fn rates_keep_two_digits_below_ten() {
        let shown: Vec<String> = [0.0, 0.083, 3.24, 9.96, 10.0, 51697.4]
            .into_iter()
            .map(rate)
            .collect();
        assert_eq!(shown, ["0", "0.08", "3.2", "10.0", "10", "51697"]);
    }
}
