//! Terminal concerns: colours, the confirmation prompt, the apply progress display.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gpushare_engine::apply::ProgressEvent;

/// Set by `-no-color`.
static NO_COLOR_FLAG: AtomicBool = AtomicBool::new(false);
/// Cleared by `-input=false`.
static INPUT: AtomicBool = AtomicBool::new(true);

/// `-no-color` and `-input=false` (called once by `main`).
pub fn set_flags(no_color: bool, input: bool) {
    NO_COLOR_FLAG.store(no_color, Ordering::Relaxed);
    INPUT.store(input, Ordering::Relaxed);
}

/// Colours only when stdout is a terminal, `-no-color` was not given and `NO_COLOR`
/// is unset or empty (<https://no-color.org>).
pub fn use_color() -> bool {
    !NO_COLOR_FLAG.load(Ordering::Relaxed)
        && color_allowed(
            std::env::var_os("NO_COLOR").as_deref(),
            std::io::stdout().is_terminal(),
        )
}

/// Colours for diagnostics and logs on stderr.
pub fn stderr_color() -> bool {
    !NO_COLOR_FLAG.load(Ordering::Relaxed)
        && color_allowed(
            std::env::var_os("NO_COLOR").as_deref(),
            std::io::stderr().is_terminal(),
        )
}

fn color_allowed(no_color: Option<&std::ffi::OsStr>, terminal: bool) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Ask "Do you want to perform these actions?" like Terraform. Only "yes" approves.
/// Refuses (error) when stdin is not a terminal: pass --auto-approve in scripts.
pub fn confirm(question: &str, detail: &str) -> anyhow::Result<bool> {
    if !INPUT.load(Ordering::Relaxed) {
        anyhow::bail!(
            "refusing to ask for confirmation: -input=false (pass -auto-approve to apply without asking)"
        );
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "refusing to ask for confirmation: stdin is not a terminal (pass --auto-approve to apply without asking)"
        );
    }
    let mut out = std::io::stdout().lock();
    write!(
        out,
        "\n{question}\n  {detail}\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: "
    )?;
    out.flush()?;
    drop(out);
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(is_yes(&line))
}

fn is_yes(answer: &str) -> bool {
    answer.trim() == "yes"
}

/// Progress of an apply on stderr: one line per finished step; on a terminal the
/// step in progress is also shown on a status line that is redrawn in place.
pub struct Progress {
    terminal: bool,
    color: bool,
    status_shown: bool,
}

impl Progress {
    pub fn new() -> Self {
        let terminal = std::io::stderr().is_terminal();
        let color = stderr_color();
        Self {
            terminal,
            color,
            status_shown: false,
        }
    }

    /// The step now running (redrawn in place on a terminal, nothing otherwise).
    pub fn begin(&mut self, index: usize, total: usize, what: &str) {
        if !self.terminal {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K[{}/{}] {what} ...", index + 1, total);
        let _ = err.flush();
        self.status_shown = true;
    }

    /// A finished step: one permanent line.
    pub fn done(&mut self, index: usize, total: usize, what: &str) {
        let mut err = std::io::stderr().lock();
        if self.status_shown {
            let _ = write!(err, "\r\x1b[2K");
            self.status_shown = false;
        }
        let mark = if self.color {
            "\x1b[32m✓\x1b[0m"
        } else {
            "ok"
        };
        let _ = writeln!(err, "[{}/{}] {mark} {what}", index + 1, total);
    }

    /// A plain message between steps (resuming a journal, skipping, ...).
    pub fn note(&mut self, what: &str) {
        let mut err = std::io::stderr().lock();
        if self.status_shown {
            let _ = write!(err, "\r\x1b[2K");
            self.status_shown = false;
        }
        let _ = writeln!(err, "{what}");
    }

    /// Clear the status line, if any.
    pub fn finish(&mut self) {
        if self.status_shown {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            self.status_shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Draws apply's progress events on stderr (nothing when `quiet`).
pub(crate) struct ProgressPrinter {
    inner: Option<Mutex<Progress>>,
}

impl ProgressPrinter {
    pub(crate) fn new(quiet: bool) -> Self {
        Self {
            inner: (!quiet).then(|| Mutex::new(Progress::new())),
        }
    }

    pub(crate) fn callback(&self) -> impl Fn(&ProgressEvent) + Send + Sync + '_ {
        move |e: &ProgressEvent| {
            let Some(m) = &self.inner else { return };
            let Ok(mut p) = m.lock() else { return };
            match e {
                ProgressEvent::Resuming { done, total } => p.note(&format!(
                    "Resuming an interrupted apply: {done} of {total} steps were done."
                )),
                ProgressEvent::StepStarted {
                    index,
                    total,
                    description,
                } => p.begin(*index - 1, *total, description),
                ProgressEvent::StepDone {
                    index,
                    total,
                    description,
                    changed,
                } => {
                    let d = if *changed {
                        description.clone()
                    } else {
                        format!("{description} (already done)")
                    };
                    p.done(*index - 1, *total, &d)
                }
                ProgressEvent::Note(line) => p.note(line),
                ProgressEvent::Finished { .. } => p.finish(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_needs_a_terminal_and_no_no_color() {
        assert!(color_allowed(None, true));
        assert!(!color_allowed(None, false));
        assert!(!color_allowed(Some(std::ffi::OsStr::new("1")), true));
        // An empty NO_COLOR does not disable colour (no-color.org).
        assert!(color_allowed(Some(std::ffi::OsStr::new("")), true));
    }

    #[test]
    fn only_yes_approves() {
        assert!(is_yes("yes\n"));
        assert!(is_yes("  yes  "));
        assert!(!is_yes("y\n"));
        assert!(!is_yes("YES"));
        assert!(!is_yes(""));
    }
}
