//! The measured overhead of a fresh window, remembered per session
//! (`window/<session>.overhead.json`) so the transcript is read once, and
//! globally (`window/overhead.json`, the newest measurement of either
//! kind) for sessions that were measured neither way (e.g. resumed from
//! before ktr was installed); and Claude Code's receipt for a rebuilt
//! session (`window/<session>.receipt.json`, kept by `ktr-ack`). The
//! measurement itself is the engine's ([`ktr_engine::window::overhead`]).

use std::path::{Path, PathBuf};

use ktr_base::error::Result;
use ktr_base::ids::SessionId;
use ktr_base::open::{Links, cap, read_capped};
use ktr_engine::window::Sourced;
use ktr_engine::window::overhead::{Measured, Receipt, measure, pick};

fn session_path(state_dir: &Path, session_id: &SessionId) -> PathBuf {
    state_dir
        .join("window")
        .join(format!("{session_id}.overhead.json"))
}

fn global_path(state_dir: &Path) -> PathBuf {
    state_dir.join("window").join("overhead.json")
}

fn receipt_path(state_dir: &Path, session_id: &SessionId) -> PathBuf {
    state_dir
        .join("window")
        .join(format!("{session_id}.receipt.json"))
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&read_capped(path, cap::CACHE, Links::Refuse).ok()??).ok()
}

fn write(path: &Path, m: &Measured) {
    // A cache: failing to write it only means measuring again next time.
    if let Ok(bytes) = serde_json::to_vec(m) {
        let _ = super::write_cache(path, &bytes);
    }
}

/// Keep Claude Code's receipt for the rebuilt session `session_id`
/// (`ktr-ack`).
///
/// # Errors
/// When the state dir's `window/` folder or the file cannot be written.
pub(crate) fn remember_receipt(
    state_dir: &Path,
    session_id: &SessionId,
    receipt: &Receipt,
) -> Result<()> {
    let bytes = serde_json::to_vec(receipt).expect("a receipt serializes");
    super::write_cache(&receipt_path(state_dir, session_id), &bytes)
}

/// The overhead for `session_id`, and where it came from ([`pick`]). With
/// `remember`, a new measurement is kept in the state dir (the hooks);
/// without, nothing is written (`ktr plan`, `ktr dirty`).
pub fn resolve(
    state_dir: &Path,
    session_id: &SessionId,
    transcript: &Path,
    remember: bool,
) -> Sourced {
    // A session cached as "nothing to measure" before ktr-ack kept its
    // receipt (the statusline may run first) is measured again.
    let cached = read::<Measured>(&session_path(state_dir, session_id)).filter(|m| {
        m.tokens.is_some() || m.rebuilt.is_some() || !receipt_path(state_dir, session_id).exists()
    });
    let own = cached.or_else(|| {
        let receipt = read::<Receipt>(&receipt_path(state_dir, session_id));
        let mut m = measure(session_id, transcript, receipt)?;
        if let Some(why) = implausible(state_dir, &m) {
            // Kept as "nothing plausible measured" (its numbers stay, so the
            // account says why), and said once, where it was decided.
            m.tokens = None;
            if remember {
                let _ = crate::stages::append_log(&state_dir.join("worker.log"), &why);
            }
        }
        if remember {
            write(&session_path(state_dir, session_id), &m);
            if m.tokens.is_some() {
                write(&global_path(state_dir), &m);
            }
        }
        Some(m)
    });
    or_global(state_dir, own.as_ref())
}

/// An overhead is the system prompt, the tools and the per-start
/// attachments: a measurement above this (or above twice the household's
/// previous figure, when that is higher) measured something else — e.g. a
/// long first reply right after a switch — and would make every later
/// rebuild look as if it cannot fit.
pub(crate) const PLAUSIBLE_OVERHEAD: u64 = 60_000;

/// Why `m` is not taken as an overhead (a log line), or None when it is
/// plausible: at most max([`PLAUSIBLE_OVERHEAD`], 2 × the household's
/// previous figure).
fn implausible(state_dir: &Path, m: &Measured) -> Option<String> {
    let tokens = m.tokens?;
    let previous = read::<Measured>(&global_path(state_dir))
        .and_then(|g| g.tokens)
        .unwrap_or(ktr_engine::window::account::DEFAULT_OVERHEAD);
    let most = PLAUSIBLE_OVERHEAD.max(2 * previous);
    (tokens > most).then(|| {
        format!(
            "ktr: session {}: a measured overhead of {tokens} tokens is over {most} (max({PLAUSIBLE_OVERHEAD}, 2 × the previous {previous})); not kept, the previous figure stays\n",
            m.session_id
        )
    })
}

/// `own` measurement, else the newest of any session ([`pick`]).
fn or_global(state_dir: &Path, own: Option<&Measured>) -> Sourced {
    pick(own, || read::<Measured>(&global_path(state_dir)))
}

/// The overhead for a transcript whose name is not a session id, so no
/// cache or receipt can be its own: measured from the transcript (nothing
/// written), else the global measurement.
pub(crate) fn uncached(state_dir: &Path, transcript: &Path) -> Sourced {
    let name = transcript
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let own = measure(&name, transcript, None);
    or_global(state_dir, own.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ktr_engine::turns::estimate_tokens;
    use ktr_engine::window::account::DEFAULT_OVERHEAD;
    use serde_json::json;

    fn sid(id: &str) -> SessionId {
        SessionId::parse(id).unwrap()
    }

    fn reply(tokens: u64, at: &str) -> String {
        json!({"type": "assistant", "timestamp": at,
            "message": {"model": "claude-opus-5-5", "role": "assistant", "content": [],
                "usage": {"input_tokens": tokens, "output_tokens": 10}}})
        .to_string()
    }

    fn user(text: &str) -> String {
        json!({"type": "user", "message": {"content": text}}).to_string()
    }

    /// A state dir and a rebuilt transcript: carried records (no usage),
    /// then what Claude Code appended (`after`). Returns the offset.
    fn rebuilt(dir: &Path, after: &[String]) -> (PathBuf, PathBuf, u64) {
        let state = dir.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let path = dir.join("new.jsonl");
        let carried_reply = json!({"type": "assistant", "message": {"model": "m", "content": []}});
        let carried = format!("{}\n{carried_reply}\n", user("carried question"));
        let mut body = carried.clone();
        for line in after {
            body.push_str(line);
            body.push('\n');
        }
        std::fs::write(&path, body).unwrap();
        (state, path, carried.len() as u64)
    }

    fn receipt(offset: u64, context_tokens: u64) -> Receipt {
        Receipt {
            operation: "op-1".into(),
            context_tokens,
            carried_estimate: Some(9000),
            offset,
            at: "2026-11-30T10:00:00Z".into(),
        }
    }

    #[test]
    fn after_a_rebuild_the_first_reply_minus_the_receipt_is_the_overhead() {
        let dir = tempfile::tempdir().unwrap();
        let attachment = json!({"type": "attachment", "attachment": {"type": "skill_listing"}});
        let (state, path, offset) = rebuilt(
            dir.path(),
            &[
                attachment.to_string(),
                user("next prompt"),
                reply(20_000, "T2"),
                reply(25_000, "T3"),
            ],
        );
        // Before ktr-ack's receipt: nothing to measure, and that is cached.
        let before = resolve(&state, &sid("new"), &path, true);
        assert_eq!(before.tokens, DEFAULT_OVERHEAD);
        remember_receipt(&state, &sid("new"), &receipt(offset, 3000)).unwrap();
        let s = resolve(&state, &sid("new"), &path, true);
        let prompt = estimate_tokens("next prompt");
        assert_eq!(s.tokens, 20_000 - 3000 - prompt, "{}", s.source);
        assert_eq!(
            s.source,
            format!(
                "measured after the rebuild op-1: first reply of this session 20000 (T2) − Claude Code's context_tokens 3000 at resume (its count of the carried conversation; ktr estimated 9000) − prompt {prompt}"
            )
        );
        // Remembered for sessions measured neither way.
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, format!("{}\n", user("no reply yet"))).unwrap();
        let s = resolve(&state, &sid("other"), &other, false);
        assert_eq!(s.tokens, 20_000 - 3000 - prompt);
        assert!(
            s.source
                .starts_with("measured after the rebuild op-1: first reply of session new 20000"),
            "{}",
            s.source
        );
    }

    #[test]
    fn an_outlier_is_not_kept_as_the_households_overhead() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        // A fresh session measured at 20,000: the household's figure.
        let fresh = dir.path().join("fresh.jsonl");
        std::fs::write(&fresh, format!("{}\n{}\n", user("hi"), reply(20_000, "T1"))).unwrap();
        let first = resolve(&state, &sid("fresh"), &fresh, true);
        let kept = first.tokens;
        assert!(kept > 19_000 && kept <= 20_000, "{}", first.source);
        // Right after a switch, a first reply of 178,000 with a small
        // receipt: 177k "overhead" is over max(60,000, 2 × 20k).
        let (_, path, offset) = rebuilt(dir.path(), &[user("next prompt"), reply(178_000, "T2")]);
        remember_receipt(&state, &sid("new"), &receipt(offset, 270)).unwrap();
        let s = resolve(&state, &sid("new"), &path, true);
        assert_eq!(s.tokens, kept, "{}", s.source);
        assert!(
            s.source.contains("gave no plausible overhead (178000"),
            "{}",
            s.source
        );
        let log = std::fs::read_to_string(state.join("worker.log")).unwrap();
        assert!(log.contains("a measured overhead of 177"), "{log}");
        assert!(log.contains("not kept, the previous figure stays"), "{log}");
        // The household's figure stays what it was.
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, format!("{}\n", user("no reply yet"))).unwrap();
        assert_eq!(resolve(&state, &sid("other"), &other, false).tokens, kept);
        // 50,000 is plausible (under 60,000) and becomes the figure.
        let big = dir.path().join("big.jsonl");
        std::fs::write(&big, format!("{}\n{}\n", user("hi"), reply(50_000, "T3"))).unwrap();
        assert!(resolve(&state, &sid("big"), &big, true).tokens > 49_000);
        assert!(resolve(&state, &sid("other"), &other, false).tokens > 49_000);
    }

    #[test]
    fn no_reply_since_the_rebuild_or_implausible_numbers_fall_back_and_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let (state, path, offset) = rebuilt(dir.path(), &[]);
        remember_receipt(&state, &sid("new"), &receipt(offset, 3000)).unwrap();
        let s = resolve(&state, &sid("new"), &path, true);
        assert_eq!(s.tokens, DEFAULT_OVERHEAD);
        assert!(
            !session_path(&state, &sid("new")).exists(),
            "measured again later"
        );
        // A first reply smaller than the carried count: not an overhead.
        let mut body = std::fs::read_to_string(&path).unwrap();
        body.push_str(&format!("{}\n{}\n", user("p"), reply(3500, "T4")));
        std::fs::write(&path, body).unwrap();
        let s = resolve(&state, &sid("new"), &path, true);
        assert_eq!(s.tokens, DEFAULT_OVERHEAD);
        assert!(
            s.source.contains(
                "this session's first reply after the rebuild gave no plausible overhead (3500 − context_tokens 3000"
            ),
            "{}",
            s.source
        );
        assert!(!global_path(&state).exists());
    }
}
