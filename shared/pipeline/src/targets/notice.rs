//! What ktr tells a person at the tmux pane while it switches or waits for
//! them (SPEC §12): a line on the pane's top border.
//!
//! A status-line message (`display-message`) is cleared by the next key a
//! client receives, so a person who is typing never sees it (0 of
//! N screen samples). The pane border stays: ktr turns it on for this pane
//! only (`pane-border-status top`, pane option) with its own text as the
//! border's format (so no program in the pane can overwrite it, unlike the
//! pane title), and marks the pane (`@ktr-notice`) so that only a notice of
//! ktr's is ever taken down (the pane options are unset again: the pane
//! falls back to the window's and the server's settings). Measured on tmux
//! 3.3a with one pane: an attached client shows the line above the pane,
//! also while keys arrive. The pane is one line shorter meanwhile.

use super::CONTROL_TIMEOUT;
use super::tmux::Tmux;
use crate::process;

/// The pane option marking a notice of ktr's.
const MARK: &str = "@ktr-notice";

impl Tmux {
    /// Put `text` on the pane's top border (replacing an earlier notice).
    pub(super) fn show_notice(&self, text: &str) -> bool {
        let format = format!("#[reverse] {} #[default]", text.replace('#', "##"));
        let argv = self.pane_options(&[
            (MARK, Some("1")),
            ("pane-border-format", Some(&format)),
            ("pane-border-status", Some("top")),
        ]);
        process::run_checked(&argv, CONTROL_TIMEOUT).is_ok()
    }

    /// Take ktr's notice down, if the pane shows one.
    pub(super) fn clear_notice(&self) {
        if !self.marked() {
            return;
        }
        let argv = self.pane_options(&[
            ("pane-border-status", None),
            ("pane-border-format", None),
            (MARK, None),
        ]);
        let _ = process::run_checked(&argv, CONTROL_TIMEOUT);
    }

    /// The text of ktr's notice on the pane, if one is shown.
    pub(super) fn notice(&self) -> Option<String> {
        if !self.marked() {
            return None;
        }
        let format =
            process::run_checked(&self.pane_option("pane-border-format"), CONTROL_TIMEOUT).ok()?;
        Some(
            format
                .trim()
                .trim_start_matches("#[reverse] ")
                .trim_end_matches(" #[default]")
                .replace("##", "#"),
        )
    }

    /// Whether the pane carries ktr's mark.
    fn marked(&self) -> bool {
        process::run_checked(&self.pane_option(MARK), CONTROL_TIMEOUT)
            .is_ok_and(|v| v.trim() == "1")
    }

    /// `show-options` for one of the pane's own options.
    fn pane_option(&self, name: &str) -> Vec<String> {
        self.argv(&["show-options", "-p", "-v", "-t", &self.target, name])
    }

    /// One tmux command setting (`Some`) or unsetting (`None`) pane options
    /// in order, chained with tmux's `;`.
    fn pane_options(&self, options: &[(&str, Option<&str>)]) -> Vec<String> {
        let mut words: Vec<&str> = Vec::new();
        for (n, (name, value)) in options.iter().enumerate() {
            if n > 0 {
                words.push(";");
            }
            words.extend(["set-option", "-p"]);
            if value.is_none() {
                words.push("-u");
            }
            words.extend(["-t", &self.target, name]);
            words.extend(value.iter());
        }
        self.argv(&words)
    }
}
