//! Advice at the right time: what the Stop hook says about
//! the window when nothing is pending. It never requests anything.
//!
//! Also the hand-over of lines other hooks could not show: Claude Code
//! 2.1.328 does not display a `PreCompact` hook's message, so
//! `ktr-precompact` leaves it in `<state_dir>/window/<session>.notice` and
//! the next Stop hook of that session shows it once.

use crate::window_cache;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use super::next::Next;
use crate::hook::StopInput;
use crate::operation::Store;
use ktr_base::config::Config;
use ktr_base::ids::SessionId;
use ktr_base::open::{Links, cap, read_capped};
use ktr_engine::window;
use ktr_engine::window::usage::Tail;

/// How long the advice waits for Claude Code to flush the turn, at most.
const FLUSH_WAIT: Duration = Duration::from_millis(1500);
/// How often it looks.
const FLUSH_POLL: Duration = Duration::from_millis(25);
/// A reading this many points below `advise_at_percent` is not waited on:
/// one turn does not add a fifth of the window (if it does, the next Stop
/// advises).
const FAR_BELOW: f64 = 20.0;

fn window_file(state_dir: &Path, session: &SessionId, suffix: &str) -> PathBuf {
    state_dir.join("window").join(format!("{session}.{suffix}"))
}

/// Write a small state file under `<state_dir>/window/` (best effort: a
/// lost marker only means a line is shown again, or not at all).
fn put(path: &Path, text: &str) -> bool {
    window_cache::write_cache(path, text.as_bytes()).is_ok()
}

/// Leave `line` for the next Stop hook of `session` (best effort).
pub(crate) fn leave_notice(state_dir: &Path, session: &SessionId, line: &str) {
    put(&window_file(state_dir, session, "notice"), line);
}

/// The line left for this session, taken (shown once).
pub(crate) fn take_notice(state_dir: &Path, session: &SessionId) -> Option<String> {
    let path = window_file(state_dir, session, "notice");
    let bytes = read_capped(&path, cap::CACHE, Links::Refuse).ok()??;
    std::fs::remove_file(&path).ok()?;
    let line = String::from_utf8_lossy(&bytes);
    Some(line.chars().take(2000).collect())
}

/// What the Stop hook says when nothing is pending: a line another hook
/// left for this session, else the window advice; then, after a
/// compaction, the offer ([`super::offer`]); else nothing.
pub(crate) fn idle_line(
    config_arg: Option<&Path>,
    state_dir: &Path,
    hook: &StopInput,
) -> Option<String> {
    let session = SessionId::parse(&hook.session_id).ok()?;
    let notice = take_notice(state_dir, &session);
    // Without a notice the advice brings the running account up to date
    // (one step a call); with one, the offer does.
    let offer_reads = notice.is_some();
    let said = notice.or_else(|| {
        advice(
            config_arg,
            &session,
            &hook.transcript_path,
            &Reply {
                prompt_id: hook.prompt_id.as_deref(),
                last_message: hook.last_assistant_message.as_deref(),
            },
        )
    });
    // After a compaction, the offer (once per boundary), on its own line.
    let offer = super::offer::offer(config_arg, &session, &hook.transcript_path, offer_reads);
    match (said, offer) {
        (Some(said), Some(offer)) => Some(format!("{said}\n{offer}")),
        (said, offer) => said.or(offer),
    }
}

/// The advice line for a finished reply, or None. Reads only
/// the transcript's tail and the bytes appended since the last call; never
/// requests anything. One line per band per session: the band shown is kept
/// in `<state_dir>/window/<session>.advised`, lowered again when the window
/// shrinks (Claude Code compacted it), so a refill advises again.
pub fn advice(
    config_arg: Option<&Path>,
    session: &SessionId,
    transcript: &Path,
    reply: &Reply<'_>,
) -> Option<String> {
    let config = Config::for_transcript(config_arg, transcript).ok()?;
    if config.advise_at_percent == 0 {
        return None;
    }
    let advise = window_cache::advise_of(&config);
    // Bands are measured against where Claude Code compacts (its setting).
    let compaction = window_cache::compaction::setting();
    let percent_of = |tail: &Tail| {
        let used = tail.usage.as_ref()?.tokens;
        let size = window_cache::size_for(&config, session, None, tail.model.as_deref());
        let point = compaction.point(size.tokens).0.max(1);
        Some((window::percent(used, point), point))
    };
    // A reading far below the first band cannot cross it in one turn.
    let far = |tail: &Tail| {
        percent_of(tail).is_none_or(|(p, _)| p + FAR_BELOW < f64::from(advise.at_percent))
    };
    let tail = wait_for_reply(transcript, reply, far)?;
    // Only the API's own count advises (an estimate errs high).
    let (percent, point) = percent_of(&tail)?;
    // The state dir is created as the store creates it.
    Store::open(&config.state_dir).ok()?;
    let marker = window_file(&config.state_dir, session, "advised");
    let shown: u8 = read_capped(&marker, cap::CACHE, Links::Refuse)
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8_lossy(&b).trim().parse().ok())
        .unwrap_or(0);
    // Cheap first: the band from the usage and the size alone.
    let level = advise.band(percent, point).unwrap_or(0);
    if level < shown {
        put(&marker, &level.to_string());
    }
    if level <= shown {
        // Nothing new to say; keep the running account current (cheap:
        // only the bytes appended since the last call).
        let _ = window_cache::running::advance(
            &config,
            session,
            transcript,
            ktr_engine::window::running::STEP_BYTES,
        );
        return None;
    }
    let w = window_cache::for_hook(&config, session, transcript, None, Some(tail), &compaction)
        .ok()??;
    let band = w.band(advise).filter(|b| *b > shown)?;
    let next = Next::of(&config, session, &w);
    put(&marker, &band.to_string()).then(|| advice_line(&w, next))
}

/// `ktr: ≈ 12k tokens until Claude Code compacts (155k of 167k); a
/// lossless rebuild would bring it to ≈ 24k — say REBUILD to ask for it`,
/// with the window size's source when it was assumed; what follows the
/// distance is what will happen ([`Next`]).
pub(crate) fn advice_line(w: &window::Window, next: Next) -> String {
    let point = w.compaction_point_tokens;
    let distance = match point.checked_sub(w.used_tokens) {
        Some(left) if !w.auto_compaction => format!(
            "≈ {} tokens until the window's hard limit ({} of {}; auto-compaction is off: {})",
            window::short(left),
            window::short(w.used_tokens),
            window::short(point),
            setting_of(w)
        ),
        None if !w.auto_compaction => format!(
            "the window is at its hard limit ({} of {}; auto-compaction is off: {})",
            window::short(w.used_tokens),
            window::short(point),
            setting_of(w)
        ),
        Some(left) => format!(
            "≈ {} tokens until Claude Code compacts ({} of {}{})",
            window::short(left),
            window::short(w.used_tokens),
            window::short(point),
            w.point_moved_by
                .as_ref()
                .map(|setting| format!(", {setting}"))
                .unwrap_or_default()
        ),
        None => format!(
            "past the point where Claude Code compacts ({} of {}): the next prompt may compact this window",
            window::short(w.used_tokens),
            window::short(point)
        ),
    };
    let assumed = if w.size_assumed {
        format!(" (window size: {})", w.size_source)
    } else {
        String::new()
    };
    let after = window::short(w.after_rebuild_tokens);
    match next {
        Next::Offer => format!(
            "ktr: {distance}{assumed}; a lossless rebuild would bring it to ≈ {after} — say REBUILD to ask for it"
        ),
        Next::OfferByHand => format!(
            "ktr: {distance}{assumed}; a lossless rebuild would bring it to ≈ {after} — say REBUILD to ask for it (outside tmux you then type the line ktr offers, /resume <id>)"
        ),
        Next::Rebuild => format!("ktr: {distance}{assumed}; ktr will rebuild instead (≈ {after})"),
        Next::NotSwitched => format!(
            "ktr: {distance}{assumed}; this session is not the one ktr switches (see ktr status)"
        ),
        Next::NoTarget => format!(
            "ktr: {distance}{assumed}; a rebuild would not be switched: this Claude Code runs in no tmux pane (see ktr status)"
        ),
    }
}

/// The setting named in the point's derivation (`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60`,
/// `autoCompactEnabled false in …`).
fn setting_of(w: &window::Window) -> &str {
    w.compaction_point_source
        .split(':')
        .next()
        .unwrap_or(&w.compaction_point_source)
}

/// The reply a Stop hook is about, as its input names it.
pub struct Reply<'a> {
    /// The prompt it answered (`prompt_id`): the proof.
    pub prompt_id: Option<&'a str>,
    /// Its text (`last_assistant_message`): only when there is no id.
    pub last_message: Option<&'a str>,
}

/// Claude Code 2.1.328 starts the Stop hook before it has flushed the
/// turn to the transcript (measured: the prompt and the reply can both be
/// missing when the hook starts, and arrive within a second). Wait (at
/// most [`FLUSH_WAIT`]) until the file holds the reply to the prompt the
/// hook names (`prompt_id`, see [`window::usage::read_reply_to`]); if it
/// does not arrive in time, say nothing this time (the next Stop will)
/// rather than read an earlier reply. Without a `prompt_id` (an older
/// Claude Code): until the end of the file holds the reply's text, or,
/// when it names none, until no user record is newer than the newest
/// reply; there, a transcript whose tail holds no reply at all, or whose
/// reading is `far` below advice, has nothing to wait for.
fn wait_for_reply(
    transcript: &Path,
    reply: &Reply<'_>,
    far: impl Fn(&Tail) -> bool,
) -> Option<Tail> {
    let deadline = std::time::Instant::now() + FLUSH_WAIT;
    if let Some(id) = reply.prompt_id {
        loop {
            // No shortcut on an earlier reading here: a jump from far below
            // into a band is exactly what must not be missed.
            if let Some(tail) = window::usage::read_reply_to(transcript, id).ok()? {
                return Some(tail);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(FLUSH_POLL);
        }
    }
    let last_message = reply.last_message;
    // The end of the reply's last line (within one text block: Claude Code
    // writes each block as its own record), as JSON writes it: UTF-8 as
    // is, or with every non-ASCII character escaped.
    let needles = last_message
        .map(|m| reply_needles(&reply_end(m)))
        .unwrap_or_default();
    let needles: Vec<&[u8]> = needles.iter().map(String::as_bytes).collect();
    loop {
        let (tail, found) = window::usage::read_tail_seeking(transcript, &needles).ok()?;
        let arrived = if needles.is_empty() {
            !tail.reply_pending
        } else {
            found
        };
        if arrived || tail.model.is_none() || far(&tail) || std::time::Instant::now() >= deadline {
            return Some(tail);
        }
        std::thread::sleep(FLUSH_POLL);
    }
}

/// The end of a reply as the transcript shows it once flushed: the last
/// (at most) 40 characters of its last line (within one text block: Claude
/// Code writes each block as its own record).
pub(crate) fn reply_end(message: &str) -> String {
    let last_line = message.trim_end().rsplit('\n').next().unwrap_or_default();
    let chars: Vec<char> = last_line.chars().collect();
    chars[chars.len().saturating_sub(40)..].iter().collect()
}

/// `end` as JSON writes it: UTF-8 as is, or with every non-ASCII character
/// escaped (both when they differ; none for an empty end).
pub(crate) fn reply_needles(end: &str) -> Vec<String> {
    let quoted = serde_json::to_string(end).unwrap_or_default();
    let raw = quoted.trim_matches('"').to_string();
    if raw.is_empty() {
        return Vec::new();
    }
    let ascii = ascii_escaped(&raw);
    if ascii == raw {
        vec![raw]
    } else {
        vec![raw, ascii]
    }
}

/// `text` with every non-ASCII character as a JSON `\uXXXX` escape
/// (surrogate pairs above U+FFFF), as JSON writers that escape them do.
fn ascii_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply of `used` tokens on `model`'s window, with `compaction`.
    fn inputs(used: u64, model: &str, compaction: window::CompactionSetting) -> window::Inputs {
        window::Inputs {
            used: Some(window::usage::Usage {
                tokens: used,
                at: None,
                model: None,
            }),
            missing: None,
            window_estimate: used,
            carried_estimate: 10_000,
            size: window::size::from_model(Some(model)),
            overhead: window::Sourced {
                tokens: 14_000,
                source: "test".into(),
            },
            advise: window::Advise {
                at_percent: 70,
                min_free_percent: 50,
            },
            compaction,
        }
    }

    #[test]
    fn the_advice_line_says_how_far_the_compaction_point_is_and_an_assumed_size() {
        let inputs = |used, model| inputs(used, model, window::CompactionSetting::default());
        let line = advice_line_offer(&window::derive(&inputs(155_000, "claude-new-9")));
        assert!(
            line.starts_with(
                "ktr: ≈ 12k tokens until Claude Code compacts (155k of 167k) (window size: model claude-new-9 (not known to have 1M; assumed 200k)); a lossless rebuild would bring it to ≈ "
            ),
            "{line}"
        );
        let line = advice_line_offer(&window::derive(&inputs(990_000, "claude-opus-5-5")));
        assert!(
            line.starts_with(
                "ktr: past the point where Claude Code compacts (990k of 967k): the next prompt may compact this window; a lossless"
            ),
            "{line}"
        );
    }

    #[test]
    fn the_advice_line_names_the_setting_claude_code_uses() {
        let with = |used, compaction, source: &str| {
            let setting = window::CompactionSetting {
                compaction,
                source: source.into(),
                ..window::CompactionSetting::default()
            };
            window::derive(&inputs(used, "claude-opus-5-5", setting))
        };
        // 60 % of (1M − 20k) = 588k.
        let w = with(
            500_000,
            window::Compaction::Percent(60.0),
            "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60",
        );
        assert_eq!(w.compaction_point_tokens, 588_000);
        assert_eq!(w.advice, "rebuild", "85 % of the moved point");
        assert!(
            advice_line(&w, Next::Offer).starts_with(
                "ktr: ≈ 88k tokens until Claude Code compacts (500k of 588k, CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60); "
            ),
            "{}",
            advice_line(&w, Next::Offer)
        );
        // Off: the hard limit (1M − 23k), and no band at 500k of it.
        let off = |used| {
            with(
                used,
                window::Compaction::Off,
                "autoCompactEnabled false in /h/.claude/settings.json",
            )
        };
        let w = off(500_000);
        assert_eq!(w.compaction_point_tokens, 977_000);
        assert!(!w.auto_compaction);
        assert_eq!(w.advice, "none");
        let w = off(960_000);
        assert_eq!(w.advice, "rebuild");
        assert!(
            advice_line(&w, Next::Offer).starts_with(
                "ktr: ≈ 17k tokens until the window's hard limit (960k of 977k; auto-compaction is off: autoCompactEnabled false in /h/.claude/settings.json); "
            ),
            "{}",
            advice_line(&w, Next::Offer)
        );
    }

    fn advice_line_offer(w: &window::Window) -> String {
        advice_line(w, Next::Offer)
    }

    #[test]
    fn the_advice_line_says_what_will_happen() {
        // 155k of a 200k window (Claude Code compacts at 167k); a rebuild
        // starts at 10k carried + 14k overhead.
        let mut i = inputs(
            155_000,
            "claude-sonnet-4-6",
            window::CompactionSetting::default(),
        );
        i.window_estimate = 155_000 - 14_000;
        // As Claude Code's statusline reported it.
        i.size = window::size::Size {
            tokens: 200_000,
            source: "context_window_size reported by Claude Code".into(),
            assumed: false,
        };
        let w = window::derive(&i);
        assert_eq!(w.after_rebuild_tokens, 24_000);
        assert_eq!(
            advice_line(&w, Next::Rebuild),
            "ktr: ≈ 12k tokens until Claude Code compacts (155k of 167k); ktr will rebuild instead (≈ 24k)"
        );
        assert_eq!(
            advice_line(&w, Next::Offer),
            "ktr: ≈ 12k tokens until Claude Code compacts (155k of 167k); a lossless rebuild would bring it to ≈ 24k — say REBUILD to ask for it"
        );
        let line = advice_line(&w, Next::NotSwitched);
        assert_eq!(
            line,
            "ktr: ≈ 12k tokens until Claude Code compacts (155k of 167k); this session is not the one ktr switches (see ktr status)"
        );
        assert!(!line.contains("REBUILD"), "{line}");
        // No pane found and none configured: said as plainly.
        let line = advice_line(&w, Next::NoTarget);
        assert_eq!(
            line,
            "ktr: ≈ 12k tokens until Claude Code compacts (155k of 167k); a rebuild would not be switched: this Claude Code runs in no tmux pane (see ktr status)"
        );
    }

    #[test]
    fn non_ascii_is_escaped_as_json_writers_do() {
        assert_eq!(ascii_escaped("ok 好 🌙"), "ok \\u597d \\ud83c\\udf19");
    }
}
