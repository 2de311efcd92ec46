//! The running account the hooks keep: the formula
//! estimate of the conversation a rebuild would carry and of the current
//! window, brought up to date from the bytes appended since the last call,
//! at most [`STEP_BYTES`] per call, so a hook never reads the whole file at
//! once. `ktr dirty`/`plan` compute the same numbers exactly; this is the
//! cheap approximation (it does not apply carry caps or drop abandoned
//! branches) that the Stop hook and the statusline use.
//!
//! The pipeline keeps it (`window/<session>.running.json` in the state dir);
//! here it is only brought up to date from the transcript.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::options::EngineOptions;
use crate::scan::{Markers, Options, Scan, Speech};
use ktr_base::error::{Error, Result};
use ktr_base::open::{Links, open_regular};

/// The most a hook reads per call while catching up.
pub const STEP_BYTES: u64 = 8 * 1024 * 1024;

/// What [`Running::format`] is now: an account kept in an older form is
/// started over (1: without the turn count; 2: its window estimate
/// counted the `toolUseResult` copies Claude Code never sends).
pub const FORMAT: u32 = 3;

/// The account as kept on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    pub transcript: PathBuf,
    /// Bytes of the transcript accounted for (always at a line end).
    pub offset: u64,
    /// Formula estimate of the carried conversation.
    pub carried_estimate: u64,
    /// Formula estimate of the current window (since the last boundary).
    pub window_estimate: u64,
    /// [`FORMAT`] (0 for an account written before the turns were counted).
    #[serde(default)]
    pub format: u32,
    /// Turns so far, counted as selection counts them (SPEC §6) in file
    /// order: a real user record after assistant speech starts one, a slash
    /// command counts once it is answered. Branches abandoned by `/rewind`
    /// are counted too (the cheap approximation).
    #[serde(default)]
    pub turns: u64,
    /// The last speech was the assistant's (the next user record starts a
    /// turn).
    #[serde(default)]
    pub after_assistant: bool,
    /// A slash command waits for an answer (then it opens a turn).
    #[serde(default)]
    pub pending_slash: bool,
    /// The newest compaction boundary: its uuid (`line N` without one).
    #[serde(default)]
    pub boundary: Option<String>,
    /// The turns before that boundary: the turns Claude Code now has only
    /// in its summary, which a rebuild carries word for word.
    #[serde(default)]
    pub summarised_turns: u64,
    /// Context Claude Code dropped without a boundary ([`super::cleared`]).
    #[serde(default)]
    pub clearing: super::cleared::Clearing,
}

impl Running {
    /// Count one speech event (file order) into the turns.
    fn count(&mut self, speech: Speech) {
        let mut user = || {
            if self.turns == 0 || self.after_assistant {
                self.turns += 1;
            }
            self.after_assistant = false;
        };
        match speech {
            Speech::User => {
                user();
                self.pending_slash = false;
            }
            Speech::Slash => self.pending_slash = true,
            Speech::Assistant => {
                if std::mem::take(&mut self.pending_slash) {
                    user();
                }
                if self.turns == 0 {
                    self.turns = 1; // a leading assistant turn
                }
                self.after_assistant = true;
            }
            Speech::Summary | Speech::Expansion | Speech::StartupContext | Speech::Injected => {}
        }
    }
}

/// Bring `running` up to date by at most `step` bytes of `transcript`
/// (started over when it names another file or the file is shorter).
/// Returns the account and whether it caught up with the file (every whole
/// line; a line Claude Code is still writing waits for the next call).
///
/// # Errors
/// When the transcript cannot be read.
pub fn advance<'o>(
    options: impl Into<EngineOptions<'o>>,
    running: Option<Running>,
    transcript: &Path,
    step: u64,
) -> Result<(Running, bool)> {
    let options = &options.into();
    let fresh = || Running {
        transcript: transcript.to_path_buf(),
        format: FORMAT,
        ..Running::default()
    };
    let mut running = running
        .filter(|r| r.transcript == transcript && r.format == FORMAT)
        .unwrap_or_else(fresh);
    let mut file = open_regular(transcript, Links::Refuse)
        .map_err(|e| Error::io_at("open", transcript, &e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io_at("stat", transcript, &e))?
        .len();
    if running.offset > len {
        // The file was replaced or truncated: start over.
        running = fresh();
    }
    if running.offset == len {
        return Ok((running, true));
    }
    file.seek(SeekFrom::Start(running.offset))
        .map_err(|e| Error::io_at("seek", transcript, &e))?;
    let mut chunk = Vec::new();
    file.take(step.min(len - running.offset))
        .read_to_end(&mut chunk)
        .map_err(|e| Error::io_at("read", transcript, &e))?;
    let reached_end = running.offset + chunk.len() as u64 >= len;
    // Only whole lines. A line longer than a step is skipped as one
    // oversized record (it cannot be speech a hook needs to count).
    let whole = match memchr::memrchr(b'\n', &chunk) {
        Some(i) => i + 1,
        None if reached_end => 0,
        None => chunk.len(),
    };
    if whole == 0 {
        return Ok((running, true));
    }
    let part = account(options, &chunk[..whole], &mut running)?;
    for line in chunk[..whole]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
    {
        running.clearing.line(line);
    }
    running.offset += whole as u64;
    running.carried_estimate += part.carried;
    running.window_estimate = if part.boundary {
        part.window
    } else {
        running.window_estimate + part.window
    };
    Ok((running, reached_end))
}

/// What one stretch of lines adds.
struct Part {
    carried: u64,
    window: u64,
    boundary: bool,
}

/// What `bytes` add to the estimates; the turns and the newest boundary
/// are counted into `running` as they go.
fn account(options: &EngineOptions<'_>, bytes: &[u8], running: &mut Running) -> Result<Part> {
    let markers = Markers::new(options.stamp_template, options.startup_header_template);
    let opts = Options {
        reply_tool: options.reply_tool_pattern,
        markers: &markers,
        command_expansions: options.carry_command_expansions,
    };
    let scan = Scan::read(BufReader::new(bytes), &opts).map_err(|e| Error::io(e.to_string()))?;
    let boundary = scan.window_start_line > 1;
    let at_boundary = scan.last_boundary.as_ref().map(|(_, at)| *at);
    for (i, e) in scan.events.iter().enumerate() {
        if Some(i) == at_boundary {
            running.summarised_turns = running.turns;
        }
        running.count(e.speech());
    }
    if let Some((uuid, at)) = scan.last_boundary {
        if at == scan.events.len() {
            running.summarised_turns = running.turns;
        }
        running.boundary = Some(uuid);
    }
    let carried = scan
        .events
        .iter()
        .map(|e| match e.speech() {
            Speech::User
            | Speech::Slash
            | Speech::Assistant
            | Speech::Expansion
            | Speech::StartupContext => e.text().counts.tokens(),
            Speech::Summary | Speech::Injected => 0,
        })
        .sum();
    Ok(Part {
        carried,
        window: super::window_estimate(&scan.window),
        boundary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ktr_base::config::Config;

    /// Two compactions (b1, b2), a turn before each and one after.
    const TWICE: &str = include_str!("../../../../tests/fixtures/rules/compaction_twice.jsonl");

    /// A config for `dir` and the transcript `text` written there.
    fn transcript(dir: &Path, text: &str) -> (Config, PathBuf) {
        let path = dir.join("s.jsonl");
        std::fs::write(&path, text).unwrap();
        let config =
            Config::from_toml(&format!("project_dir = {:?}", dir.display().to_string())).unwrap();
        (config, path)
    }

    fn follow(text: &str, step: u64) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let (config, path) = transcript(dir.path(), text);
        let mut running = None;
        for _ in 0..100 {
            let (now, caught_up) = advance(&config, running, &path, step).unwrap();
            if caught_up {
                return now;
            }
            running = Some(now);
        }
        panic!("never caught up");
    }

    #[test]
    fn the_turns_before_the_newest_boundary_are_counted_whatever_the_steps() {
        // Whole, and a line or two per call (a step can end between a
        // boundary and its summary, or right after the boundary).
        for step in [1 << 20, 1000, 700] {
            let r = follow(TWICE, step);
            assert_eq!(r.turns, 3, "step {step}");
            assert_eq!(r.boundary.as_deref(), Some("b2"), "step {step}");
            assert_eq!(r.summarised_turns, 2, "step {step}");
        }
    }

    #[test]
    fn no_boundary_no_summarised_turns_and_an_old_account_starts_over() {
        let before: String = TWICE.lines().take(2).map(|l| format!("{l}\n")).collect();
        let r = follow(&before, 1 << 20);
        assert_eq!((r.turns, r.boundary, r.summarised_turns), (1, None, 0));
        // An account kept before the turns were counted is read again.
        let dir = tempfile::tempdir().unwrap();
        let (config, path) = transcript(dir.path(), TWICE);
        let old = Running {
            transcript: path.clone(),
            offset: std::fs::metadata(&path).unwrap().len(),
            format: 0,
            ..Running::default()
        };
        let (now, _) = advance(&config, Some(old), &path, 1 << 20).unwrap();
        assert_eq!((now.turns, now.summarised_turns), (3, 2));
    }

    #[test]
    fn what_claude_code_never_sends_adds_nothing_to_the_window_estimate() {
        let head: String = TWICE.lines().take(2).map(|l| format!("{l}\n")).collect();
        let window = |more: &str| follow(&format!("{head}{more}\n"), 1 << 20).window_estimate;
        let bare = window("");
        let system = |subtype: &str| {
            format!(
                r#"{{"type":"system","subtype":"{subtype}","uuid":"s1","content":"{}"}}"#,
                "x".repeat(3000)
            )
        };
        assert_eq!(window(&system("turn_duration")), bare);
        assert_eq!(window(&system("stop_hook_summary")), bare);
        assert!(
            window(&system("local_command")) > bare + 1900,
            "a local command's output is sent"
        );
        let result = |ui_copy: &str| {
            format!(
                r#"{{"type":"user","uuid":"r1","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":"a 2 KB preview"}}]}}{ui_copy}}}"#
            )
        };
        let ui_copy = format!(r#","toolUseResult":{{"stdout":"{}"}}"#, "y".repeat(40_000));
        assert_eq!(window(&result(&ui_copy)), window(&result("")));
        assert!(window(&result("")) > bare);
    }
}
