//! Progress bars of the `servesim` binary (not part of the library): drawn on stderr with
//! `indicatif`, only on a terminal and only once a run has taken a second (`auto`), always
//! (`always`, for logs and tests), or never (`never`, `--quiet`). Nothing reaches stdout.

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

/// A bar that appears when its mode says so.
pub struct Bar {
    bar: ProgressBar,
    mode: Mode,
    started: Instant,
    shown: std::sync::atomic::AtomicBool,
}

impl Bar {
    /// A bar of `total` steps (`None`: a spinner) in `style` (an indicatif template).
    pub fn new(mode: Mode, total: Option<u64>, template: &str) -> Arc<Bar> {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "wall-clock timing goes to stderr only"
        )]
        let started = Instant::now();
        let b = Arc::new(Bar {
            bar,
            mode,
            started,
            shown: false.into(),
        });
        if mode == Mode::Always {
            b.show();
        }
        b
    }

    fn show(&self) {
        use std::sync::atomic::Ordering;
        if self.shown.swap(true, Ordering::Relaxed) {
            return;
        }
        let target = match self.mode {
            Mode::Always => ProgressDrawTarget::term_like(Box::new(Stderr)),
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
        if self.mode == Mode::Auto
            && !self.shown.load(std::sync::atomic::Ordering::Relaxed)
            && self.started.elapsed() >= SHOW_AFTER
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
