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
        ..Running::default()
    };
    let mut running = running
        .filter(|r| r.transcript == transcript)
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
    let part = account(options, &chunk[..whole])?;
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

fn account(options: &EngineOptions<'_>, bytes: &[u8]) -> Result<Part> {
    let markers = Markers::new(options.stamp_template, options.startup_header_template);
    let opts = Options {
        reply_tool: options.reply_tool_pattern,
        markers: &markers,
        command_expansions: options.carry_command_expansions,
    };
    let scan = Scan::read(BufReader::new(bytes), &opts).map_err(|e| Error::io(e.to_string()))?;
    let boundary = scan.window_start_line > 1;
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
