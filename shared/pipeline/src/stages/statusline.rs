//! `ktr-statusline`: a Claude Code `statusLine` command.
//!
//! Claude Code pipes it a JSON object after every change (at most every
//! 300 ms) and shows its first line. It prints one short segment such as
//! `ktr 78% of 1M · rebuild→4%` (how full the window is, its size, and
//! where a rebuild would bring it, when a rebuild frees something; after a
//! compaction `ktr 9% of 1M · 11 turns only in summary · rebuild→6%`: the
//! turns Claude Code has only in its summary, which the rebuild restores),
//! and remembers the session's `context_window_size` in the state dir for
//! the ledger. Fast: what Claude Code reports, the
//! running account (bytes appended since the last call) and small caches;
//! never the whole transcript. Never fails: a problem shows as `ktr ?`.

use crate::window_cache;
use std::path::Path;

use crate::hook::{Invocation, Reply, StatuslineInput};
use crate::operation::{Status, Store, locate_state_dir};
use crate::window_cache::{Reported, remembered};
use ktr_base::config::Config;
use ktr_base::ids::SessionId;
use ktr_base::open::{Exists, confine};
use ktr_base::text::printable;
use ktr_engine::window::usage::Usage;
use ktr_engine::window::{Compaction, CompactionSetting, UsedSource};

/// `ktr-statusline --help`.
pub const HELP: &str = "ktr-statusline: Claude Code's statusLine command for ktr.
Usage: ktr-statusline [--config PATH] [--segment] [--color]   (Claude Code's JSON on stdin)
Prints the model, the folder and ktr's segment, e.g. `Opus · work · ktr 78% of 1M · rebuild→4%`.
--segment prints only ktr's part (to embed in a statusline you already have);
--color colors it (never when NO_COLOR is set).";

/// The flags `ktr-statusline` takes (besides `--config`).
pub const FLAGS: &[&str] = &["segment", "color"];

/// How to print.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    /// Only ktr's segment (to embed in an existing statusline).
    pub segment_only: bool,
    /// ANSI colors (asked for with `--color`, and `NO_COLOR` unset).
    pub color: bool,
}

/// The statusline command: the line for this invocation.
pub fn statusline(call: Invocation) -> Reply {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let style = Style {
        segment_only: call.has("segment"),
        color: call.has("color") && !no_color,
    };
    Reply::Line(match call.input {
        Some(input) => line(call.config.as_deref(), &input, style),
        None => "ktr ? (input over 1 MiB)".into(),
    })
}

/// The line to print for Claude Code's JSON `input`.
pub fn line(config_arg: Option<&Path>, input: &[u8], style: Style) -> String {
    let Ok(inp) = serde_json::from_slice::<StatuslineInput>(input) else {
        return "ktr ?".into();
    };
    let (segment, level) = segment(config_arg, &inp);
    let segment = paint(&segment, level, style.color);
    if style.segment_only {
        return segment;
    }
    let mut parts = Vec::new();
    if let Some(name) = inp.model.as_ref().and_then(|m| m.display_name.clone()) {
        parts.push(name);
    }
    if let Some(dir) = inp
        .workspace
        .as_ref()
        .and_then(|w| w.current_dir.as_deref())
    {
        let base = Path::new(dir)
            .file_name()
            .map_or(dir.into(), |n| n.to_string_lossy());
        parts.push(base.into_owned());
    }
    parts.push(segment);
    // The model name and the folder come from outside: never an escape
    // sequence on the person's screen (the segment's own colors stay).
    let last = parts.len() - 1;
    for part in &mut parts[..last] {
        *part = printable(part).into_owned();
    }
    parts.join(" · ")
}

/// How urgent the segment is (its color).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Calm,
    Advise,
    Urgent,
}

fn segment(config_arg: Option<&Path>, inp: &StatuslineInput) -> (String, Level) {
    let window = inp.context_window.as_ref();
    let size = window
        .and_then(|w| w.context_window_size)
        .filter(|s| *s > 0);
    let used = window.and_then(|w| w.current_usage.as_ref()).and_then(|u| {
        Some(
            u.input_tokens?
                + u.cache_creation_input_tokens.unwrap_or(0)
                + u.cache_read_input_tokens.unwrap_or(0),
        )
    });
    let session = inp
        .session_id
        .as_deref()
        .and_then(|s| SessionId::parse(s).ok());
    let model = inp.model.as_ref().and_then(|m| m.id.clone());
    let state_dir = locate_state_dir(config_arg).ok();
    if let (Some(dir), Some(sid), Some(tokens)) = (&state_dir, &session, size)
        && Store::open(dir).is_ok()
    {
        remembered::remember(dir, sid, tokens, model.as_deref());
    }
    // After a compaction Claude Code 2.1.328 reports a zeroed
    // `current_usage` until the next reply (measured: every field 0); the
    // figure is then what `ktr dirty` shows — the transcript's last usage,
    // or after the boundary the overhead plus the estimate of the window —
    // marked as an estimate (`ktr 0%` while `dirty` said
    // 13 %).
    let compaction = window_cache::compaction::setting();
    let (used, approx) = match used {
        Some(0) => match estimated(config_arg, inp, session.as_ref(), size, &compaction) {
            Some((tokens, estimate)) => (Some(tokens), estimate),
            None => (Some(0), false),
        },
        other => (other, false),
    };
    let Some(used) = used else {
        return ("ktr –".into(), Level::Calm);
    };
    #[allow(clippy::cast_precision_loss)]
    let percent = size.map_or(0.0, |s| used as f64 * 100.0 / s as f64);
    let mut text = format!("ktr {}{percent:.0}%", if approx { "≈" } else { "" });
    if let Some(s) = size {
        text.push_str(&format!(" of {}", ktr_engine::window::short(s)));
    }
    // The colour measures the window against where Claude Code compacts
    // (its setting: CLAUDE_AUTOCOMPACT_PCT_OVERRIDE, autoCompactEnabled);
    // a moved or absent point is named.
    let point_percent = size.map_or(0.0, |s| {
        used as f64 * 100.0 / compaction.point(s).0.max(1) as f64
    });
    match (&compaction.compaction, size) {
        (Compaction::Off, _) => text.push_str(" · no auto-compact"),
        (Compaction::Percent(_), Some(s)) => text.push_str(&format!(
            " · compacts at {}",
            ktr_engine::window::short(compaction.point(s).0)
        )),
        _ => {}
    }
    let level = match point_percent {
        p if p >= 90.0 => Level::Urgent,
        p if p >= 70.0 => Level::Advise,
        _ => Level::Calm,
    };
    if let Some(dir) = &state_dir {
        let store = Store::at(dir);
        if let Some((id, status)) = session.as_ref().and_then(|s| store.active_for(s)) {
            match status {
                Status::Pending => text.push_str(" · rebuild pending"),
                Status::RollbackPending => text.push_str(" · rollback pending"),
                Status::Offered | Status::RollbackOffered => {
                    text.push_str(&offered(&store, &id, status));
                    return (text, Level::Advise);
                }
                _ => match store.progress(&id) {
                    Some(p) => text.push_str(&format!(" · rebuilding {}%", p.percent())),
                    None => text.push_str(" · rebuilding"),
                },
            }
            return (text, level);
        }
    }
    let (Some(sid), Some(transcript)) = (&session, inp.transcript_path.as_deref()) else {
        return (text, level);
    };
    let Ok(config) = Config::for_transcript(config_arg, transcript) else {
        return (text, level);
    };
    // Claude Code's word for the transcript is taken only by the one path
    // rule: a FIFO, a device or a file outside the project is never opened.
    let Ok(transcript) = confine(transcript, &config.project_dir, "transcript", Exists::Must)
    else {
        return (text, level);
    };
    let reported = Reported {
        usage: Some(Usage {
            tokens: used,
            at: None,
            model: model.clone(),
        }),
        size,
        model,
    };
    let w = window_cache::for_hook(&config, sid, &transcript, Some(reported), None, &compaction);
    if let Ok(Some(w)) = &w {
        text.push_str(&summarised(w));
        if w.cleared.is_some() {
            text.push_str(" · context cleared");
        }
    }
    // The rebuild figure only when a rebuild frees something (right after
    // one it would not).
    match w {
        Ok(Some(w)) if w.after_rebuild_tokens >= w.used_tokens => {}
        Ok(Some(w)) if w.fits() => {
            text.push_str(&format!(" · rebuild→{:.0}%", w.after_rebuild_percent));
        }
        Ok(Some(_)) => text.push_str(" · rebuild won't fit"),
        Ok(None) => text.push_str(" · measuring…"),
        Err(_) => {}
    }
    (text, level)
}

/// ` · to switch type /resume <id> (old session kept)` while an offer of
/// the hand target stands.
fn offered(store: &Store, id: &ktr_base::ids::OperationId, status: Status) -> String {
    let session = store
        .load(id)
        .ok()
        .and_then(|op| super::hand::offered_session(&op));
    match (session, status) {
        (Some(s), Status::RollbackOffered) => {
            format!(" · to roll back type /resume {s} (rebuilt session kept)")
        }
        (Some(s), _) => format!(" · to switch type /resume {s} (old session kept)"),
        (None, _) => format!(" · {status}"),
    }
}

/// ` · 11 turns only in summary` when the window begins after a compaction
/// that summarised turns a rebuild restores (else nothing).
fn summarised(w: &ktr_engine::window::Window) -> String {
    match w.summarised_turns {
        0 => String::new(),
        1 => " · 1 turn only in summary".into(),
        n => format!(" · {n} turns only in summary"),
    }
}

/// What `ktr dirty` says the window holds when Claude Code reports a
/// zeroed usage, for a transcript inside the config's project folder: the
/// tokens, and whether they are an estimate (no usage since the last
/// compaction boundary) rather than a reply's usage.
fn estimated(
    config_arg: Option<&Path>,
    inp: &StatuslineInput,
    session: Option<&SessionId>,
    size: Option<u64>,
    compaction: &CompactionSetting,
) -> Option<(u64, bool)> {
    let config = Config::for_transcript(config_arg, inp.transcript_path.as_deref()?).ok()?;
    let transcript = confine(
        inp.transcript_path.as_deref()?,
        &config.project_dir,
        "transcript",
        Exists::Must,
    )
    .ok()?;
    let reported = Reported {
        usage: None,
        size,
        model: inp.model.as_ref().and_then(|m| m.id.clone()),
    };
    let window = window_cache::for_hook(
        &config,
        session?,
        &transcript,
        Some(reported),
        None,
        compaction,
    )
    .ok()??;
    Some((
        window.used_tokens,
        window.used_source == UsedSource::Estimate,
    ))
}

fn paint(text: &str, level: Level, color: bool) -> String {
    if !color {
        return text.to_string();
    }
    let code = match level {
        Level::Calm => "32",
        Level::Advise => "33",
        Level::Urgent => "31",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_the_first_reply_the_segment_says_so_and_colors_only_when_asked() {
        let input = br#"{"session_id":"x","model":{"display_name":"Opus"},"workspace":{"current_dir":"/w/proj"},"context_window":{"context_window_size":1000000,"current_usage":null}}"#;
        let plain = Style::default();
        let cfg = Path::new("/nonexistent/ktr-statusline-test.toml");
        assert_eq!(line(Some(cfg), input, plain), "Opus · proj · ktr –");
        let seg = Style {
            segment_only: true,
            color: true,
        };
        assert_eq!(line(Some(cfg), input, seg), "\x1b[32mktr –\x1b[0m");
        assert_eq!(line(Some(cfg), b"not json", plain), "ktr ?");
    }
}
