//! What the Claude Code pane shows right now, read from `tmux capture-pane
//! -p` (measured on Claude Code 2.1.328, see docs/SPEC.md): whether the
//! input line holds a draft the human has not sent yet, and whether a turn
//! is running.
//!
//! The input box is a full-width line of `─`, then `❯` followed by a
//! no-break space (U+00A0) and the draft, continuation lines indented by two
//! spaces, then another full-width `─` line. Earlier prompts in the history
//! use `❯` followed by an ordinary space, so only the input line matches.
//! While a turn runs, the mode line under the box says `esc to interrupt`.

/// The prompt mark of the input line: `❯` and a no-break space.
const INPUT_MARK: &str = "\u{276f}\u{a0}";
/// What the mode line says while a turn runs.
const RUNNING_MARK: &str = "esc to interrupt";
/// Grey hints Claude Code puts into an empty input line (`capture-pane -p`
/// shows them as plain text): not drafts. After a `PreCompact` hook
/// blocked an auto-compaction (2.1.328): `Once fixed, resend your message`.
const PLACEHOLDERS: &[&str] = &["Once fixed, resend your message"];
/// A box border is at least this many `─`.
const MIN_BORDER: usize = 20;

/// The state of the pane's input area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// No turn running and nothing typed.
    Idle,
    /// Text typed but not sent (trimmed, lines joined with `\n`).
    Draft(String),
    /// A turn is running (`esc to interrupt`).
    Running,
    /// No input box on screen (a dialog, a starting or dead CLI).
    Unknown,
}

impl Input {
    /// Read `screen` (the plain text of `capture-pane -p`). A draft wins
    /// over a running turn: both defer a switch, the draft is the reason
    /// the human must hear about.
    pub fn of_screen(screen: &str) -> Input {
        let lines: Vec<&str> = screen.lines().collect();
        let Some(start) = lines.iter().rposition(|l| l.starts_with(INPUT_MARK)) else {
            return Input::Unknown;
        };
        if start == 0 || !is_border(lines[start - 1]) {
            return Input::Unknown;
        }
        let Some(len) = lines[start..].iter().position(|l| is_border(l)) else {
            return Input::Unknown;
        };
        let mut draft = Vec::with_capacity(len);
        for (i, line) in lines[start..start + len].iter().enumerate() {
            let text = if i == 0 {
                &line[INPUT_MARK.len()..]
            } else {
                line.strip_prefix("  ").unwrap_or(line)
            };
            draft.push(text.trim_end());
        }
        let draft = draft.join("\n");
        let draft = draft.trim();
        let below = &lines[start + len + 1..];
        if !draft.is_empty() && !PLACEHOLDERS.contains(&draft) {
            Input::Draft(draft.to_string())
        } else if below.iter().any(|l| l.contains(RUNNING_MARK)) {
            Input::Running
        } else {
            Input::Idle
        }
    }
}

/// A full-width box border: only `─`, at least [`MIN_BORDER`] of them.
fn is_border(line: &str) -> bool {
    let line = line.trim_end();
    line.chars().count() >= MIN_BORDER && line.chars().all(|c| c == '\u{2500}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn border() -> String {
        "\u{2500}".repeat(60)
    }

    /// A screen as Claude Code 2.1.328 draws it: history, box, mode line.
    fn screen(input: &[&str], mode: &str) -> String {
        let mut s = String::from(
            " \u{2590}\u{259b}\u{2588}  Claude Code v2.1.328\n\n\u{276f} hello one\n\n\u{25cf} REPLY[hello one]\n\n",
        );
        s.push_str(&border());
        s.push('\n');
        for (i, line) in input.iter().enumerate() {
            if i == 0 {
                s.push_str(&format!("{INPUT_MARK}{line}\n"));
            } else {
                s.push_str(&format!("  {line}\n"));
            }
        }
        s.push_str(&border());
        s.push('\n');
        s.push_str(mode);
        s.push('\n');
        s
    }

    #[test]
    fn an_empty_input_line_is_idle() {
        let s = screen(&[""], "  \u{23f8} manual mode on \u{b7} ? for shortcuts");
        assert_eq!(Input::of_screen(&s), Input::Idle);
        // The hint after a blocked auto-compaction is not a draft.
        let s = screen(
            &["Once fixed, resend your message"],
            "  \u{23f8} manual mode on",
        );
        assert_eq!(Input::of_screen(&s), Input::Idle);
    }

    #[test]
    fn typed_text_is_a_draft_over_several_lines() {
        let s = screen(
            &["draft line one \\", "second line xxx", "xxxx   "],
            "  \u{23f8} manual mode on",
        );
        assert_eq!(
            Input::of_screen(&s),
            Input::Draft("draft line one \\\nsecond line xxx\nxxxx".into())
        );
    }

    #[test]
    fn a_running_turn_is_seen_in_the_mode_line() {
        let s = screen(
            &[""],
            "  \u{23f8} manual mode on \u{b7} esc to interrupt \u{b7} \u{2190} for agents",
        );
        assert_eq!(Input::of_screen(&s), Input::Running);
        let typed = screen(&["next"], "  esc to interrupt");
        assert_eq!(Input::of_screen(&typed), Input::Draft("next".into()));
    }

    #[test]
    fn history_prompts_are_not_the_input_line() {
        // Only history (`❯ ` with an ordinary space), no box: unknown.
        let s = "\u{276f} hello one\n\u{25cf} REPLY\n";
        assert_eq!(Input::of_screen(s), Input::Unknown);
        assert_eq!(Input::of_screen(""), Input::Unknown);
    }

    #[test]
    fn a_box_without_borders_is_unknown() {
        let s = format!("{INPUT_MARK}text\n");
        assert_eq!(Input::of_screen(&s), Input::Unknown);
        let open = format!("{}\n{INPUT_MARK}text\n", border());
        assert_eq!(Input::of_screen(&open), Input::Unknown);
    }
}
