//! The prompt the compaction guard blocked comes back (SPEC §10).
//!
//! Claude Code 2.1.328 runs `UserPromptSubmit` with the prompt's text
//! **before** `PreCompact(auto)` (measured: the same `prompt_id` in both),
//! writes the prompt as a user record and, once the guard blocked the
//! compaction, a synthetic `Prompt is too long` reply; the screen keeps the
//! text nowhere to edit. So:
//!
//! 1. `ktr-prompt` keeps the last prompt's text of a session whose
//!    compaction the guard could block (`on_auto_compaction = "rebuild"`,
//!    or a rebuild pending) in `<state_dir>/prompts/<session>.last`
//!    (0600, atomic, at most [`CAP`] bytes of text; a longer one is
//!    recorded as too long, without its text);
//! 2. the guard, when it blocks, turns that file into
//!    `<session>.blocked`, naming its operation;
//! 3. prepare leaves the prompt's open turn out of the candidate (so the
//!    rebuilt session does not show it unanswered, nor gain Claude Code's
//!    `No response requested.`) when it can come back: tmux (pasted) or
//!    pointer (the runner sends it again);
//! 4. after a healthy switch of a tmux pane, activation pastes it into the
//!    input line as one bracketed paste (`tmux paste-buffer -p`: an
//!    embedded newline is not an Enter), never sent, and puts a one-line
//!    notice on the pane border; `ktr-prompt` takes the notice down at the
//!    person's next prompt. The file is claimed (renamed) before the paste,
//!    so nothing is ever pasted or sent twice.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::operation::{Operation, PromptBack};
use crate::pane::Input;
use crate::targets::Target;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, ensure_private_dir, write_atomic, write_cache_atomic};
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::open::{Links, read_capped};

/// The most prompt text kept, in bytes. A longer prompt is recorded
/// without its text (the notice says it was too long to keep).
pub(crate) const CAP: usize = 64 * 1024;
/// The largest file ktr writes here: the text JSON-escaped (≤ 6 bytes a
/// byte for control characters) and the fields around it.
const FILE_CAP: u64 = (CAP as u64) * 6 + 4096;
/// How long a paste takes to show in the input line before it is tried again.
const SHOWN: Duration = Duration::from_secs(2);
/// How long activation waits for an idle input line before pasting.
const IDLE_WAIT: Duration = Duration::from_secs(5);
/// How long the input line must stay empty right before ktr pastes.
const QUIET: Duration = Duration::from_millis(150);

/// A kept prompt (`<session>.last`), or a blocked one (`<session>.blocked`,
/// with `operation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    pub session_id: String,
    /// Claude Code's `prompt_id` (None from an older Claude Code).
    pub prompt_id: Option<String>,
    /// The text; None when it was longer than [`CAP`] bytes.
    pub text: Option<String>,
    /// Its length in characters.
    pub chars: usize,
    /// The operation the guard started instead of the compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
}

/// The prompts' directory's name in a state dir.
pub const DIR: &str = "prompts";

/// `<state_dir>/prompts`.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join(DIR)
}

fn path(state_dir: &Path, session: &SessionId, ext: &str) -> PathBuf {
    dir(state_dir).join(format!("{session}.{ext}"))
}

/// Where the blocked prompt of `session` is kept.
pub(crate) fn blocked_path(state_dir: &Path, session: &SessionId) -> PathBuf {
    path(state_dir, session, "blocked")
}

/// Keep `text`, the prompt `prompt_id` of `session`, as its last prompt
/// (replacing the one before; no fsync: a crash loses at most this one).
pub fn keep(
    state_dir: &Path,
    session: &SessionId,
    prompt_id: Option<&str>,
    text: &str,
) -> Result<()> {
    let kept = Kept {
        session_id: session.to_string(),
        prompt_id: prompt_id.map(str::to_string),
        text: (text.len() <= CAP).then(|| text.to_string()),
        chars: text.chars().count(),
        operation: None,
    };
    let dir = dir(state_dir);
    // One lstat on the hook's path; anything but a real folder (a link to
    // one elsewhere) goes through the full check, which refuses it.
    if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        ensure_private_dir(&dir, 0o700)?;
    }
    let json = serde_json::to_vec(&kept).map_err(|e| Error::io(e.to_string()))?;
    let last = path(state_dir, session, "last");
    // Renamed onto nothing: ext4 flushes a file renamed over another one
    // (auto_da_alloc), 2.5 ms of a hook that runs before every prompt. The
    // guard reads it only after this hook has returned.
    let _ = std::fs::remove_file(&last);
    write_cache_atomic(&last, &json, 0o600)
}

fn read(path: &Path) -> Result<Option<Kept>> {
    let Some(bytes) = read_capped(path, FILE_CAP, Links::Refuse)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::io(format!(
            "{} is not a prompt ktr kept ({e}); move it aside",
            path.display()
        ))
    })
}

/// The guard blocked the compaction that prompt `prompt_id` of `session`
/// triggered and started `operation`: mark the kept prompt blocked. None
/// when no prompt of that id was kept (nothing comes back then).
pub fn block(
    state_dir: &Path,
    session: &SessionId,
    prompt_id: Option<&str>,
    operation: &OperationId,
) -> Result<Option<Kept>> {
    let last = path(state_dir, session, "last");
    let Some(mut kept) = read(&last)? else {
        return Ok(None);
    };
    if prompt_id.is_some() && kept.prompt_id.as_deref() != prompt_id {
        return Ok(None);
    }
    kept.operation = Some(operation.to_string());
    let json = serde_json::to_vec(&kept).map_err(|e| Error::io(e.to_string()))?;
    write_atomic(
        &blocked_path(state_dir, session),
        &json,
        0o600,
        Existing::Replace,
    )?;
    let _ = std::fs::remove_file(last);
    Ok(Some(kept))
}

/// The blocked prompt of `session` kept for operation `operation`; None
/// when there is none, or it belongs to another operation.
pub fn blocked(
    state_dir: &Path,
    session: &SessionId,
    operation: &OperationId,
) -> Result<Option<Kept>> {
    Ok(read(&blocked_path(state_dir, session))?
        .filter(|k| k.operation.as_deref() == Some(operation.as_str())))
}

/// Forget the blocked prompt of `session` (it stays in the rebuilt
/// session's last turn, or the operation did not start).
pub fn forget(state_dir: &Path, session: &SessionId) {
    let _ = std::fs::remove_file(blocked_path(state_dir, session));
}

/// The open turn at the end of the frozen transcript `backup`: whether its
/// prompt is `prompt_id` (the last prompt record, with no real reply after
/// it: only Claude Code's synthetic `Prompt is too long`), and how many
/// image blocks its records hold. Reads at most the last 1 MiB.
pub(crate) fn open_turn_is(backup: &Path, prompt_id: &str) -> Result<Option<usize>> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 1 << 20;
    let mut file = ktr_base::open::open_regular(backup, Links::Refuse)
        .map_err(|e| Error::io_at("read", backup, &e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io_at("stat", backup, &e))?
        .len();
    let from = len.saturating_sub(TAIL);
    file.seek(SeekFrom::Start(from))
        .map_err(|e| Error::io_at("read", backup, &e))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)
        .map_err(|e| Error::io_at("read", backup, &e))?;
    let lines = tail.split(|b| *b == b'\n').skip(usize::from(from > 0));
    let mut last: Option<(String, usize)> = None;
    for line in lines {
        let Ok(record) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        match record["type"].as_str() {
            Some("user") if record["isMeta"] != true => {
                let content = &record["message"]["content"];
                let blocks = content.as_array();
                if blocks.is_some_and(|b| b.iter().any(|b| b["type"] == "tool_result")) {
                    continue;
                }
                let Some(id) = record["promptId"].as_str() else {
                    continue;
                };
                let images =
                    blocks.map_or(0, |b| b.iter().filter(|b| b["type"] == "image").count());
                match &mut last {
                    Some((p, n)) if p == id => *n += images,
                    _ => last = Some((id.to_string(), images)),
                }
            }
            Some("assistant") if record["message"]["model"] != "<synthetic>" => last = None,
            _ => {}
        }
    }
    Ok(last.filter(|(p, _)| p == prompt_id).map(|(_, n)| n))
}

/// The notice put on the pane border once the prompt is back.
pub(crate) fn back_notice(back: &PromptBack) -> String {
    let images = if back.images > 0 {
        format!(
            " ({} pasted image{} could not be put back)",
            back.images,
            if back.images == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    format!(
        "ktr: your last prompt is back in the input line, not sent \u{2014} press Enter to send it{images}"
    )
}

/// After a healthy switch of a tmux pane to the rebuilt session: paste the
/// prompt the guard blocked into its input line (bracketed, not sent) and
/// leave the notice up. Returns the line for the operation's history, None
/// when `op` has nothing to put back. The file is claimed before the paste
/// and removed after it; a paste that cannot be done (the person is
/// typing, tmux fails) gives the file back and says where the text is.
pub fn put_back(
    state_dir: &Path,
    op: &Operation,
    source: &SessionId,
    target: &Target,
) -> Option<String> {
    let back = op.prompt_back.as_ref()?;
    let Target::Tmux(_) = target else {
        return None;
    };
    let session = SessionId::parse(source).ok()?;
    let file = blocked_path(state_dir, &session);
    if back.carried {
        forget(state_dir, &session);
        target.show_lasting_notice(&format!(
            "ktr: your last prompt ({} characters) was too long for ktr to keep; it is the rebuilt session's last turn \u{2014} press \u{2191} then Enter to send it again",
            back.chars
        ));
        mark_notice(state_dir, op);
        return Some(format!(
            "the prompt the guard blocked ({} characters) was too long to keep: carried as the last turn",
            back.chars
        ));
    }
    let kept = match blocked(state_dir, &session, &op.id) {
        Ok(Some(k)) => k,
        Ok(None) => {
            return Some(format!(
                "the blocked prompt was not put back: {} no longer holds it",
                file.display()
            ));
        }
        Err(e) => {
            let line = format!(
                "ktr: your last prompt could not be put back ({}); it was not sent",
                e.message
            );
            target.show_lasting_notice(&line);
            mark_notice(state_dir, op);
            return Some(line);
        }
    };
    let Some(text) = kept.text.clone().filter(|t| !t.is_empty()) else {
        return Some("the blocked prompt had no text to put back".into());
    };
    // Claimed: whoever renamed it pastes it, once.
    let claimed = file.with_extension("pasting");
    if std::fs::rename(&file, &claimed).is_err() {
        return Some("the blocked prompt was already taken".into());
    }
    let give_back = |why: &str| {
        let _ = std::fs::rename(&claimed, &file);
        let line = format!(
            "ktr: your last prompt was not put back ({why}); it was not sent \u{2014} its text is in {}",
            file.display()
        );
        target.show_lasting_notice(&line);
        mark_notice(state_dir, op);
        line
    };
    match idle_input(target) {
        Ok(()) => {}
        Err(why) => return Some(give_back(&why)),
    }
    let raw = path(state_dir, &session, "paste");
    let text = typable(&unwrapped(&text));
    if let Err(e) = write_atomic(&raw, text.as_bytes(), 0o600, Existing::Replace) {
        return Some(give_back(&e.message));
    }
    let mut pasted = false;
    for _ in 0..2 {
        if let Err(e) = target.paste_file(&raw) {
            let _ = std::fs::remove_file(&raw);
            return Some(give_back(&format!("tmux: {}", e.message)));
        }
        if shows_draft(target) {
            pasted = true;
            break;
        }
    }
    let _ = std::fs::remove_file(&raw);
    if !pasted {
        return Some(give_back("the input line never showed it"));
    }
    let _ = std::fs::remove_file(&claimed);
    target.show_lasting_notice(&back_notice(back));
    mark_notice(state_dir, op);
    Some(format!(
        "the prompt the guard blocked ({} characters) is back in the input line, not sent{}",
        back.chars,
        if back.images > 0 {
            format!("; {} image(s) could not be put back", back.images)
        } else {
            String::new()
        }
    ))
}

/// The person's own text from what Claude Code handed `UserPromptSubmit`:
/// a collapsed paste (≥ 4 lines, `[Pasted text #1 +3 lines]` in the input
/// line) comes as `\n\n<pasted_content id="…">\n` + the pasted text +
/// `\n</pasted_content id="…">\n` (2.1.328, measured) where the paste
/// stood, its own tags escaped as `<\pasted_content` / `<\/pasted_content`.
/// Pasted back as it was, Claude Code would wrap it again around its own
/// wrapper; so each wrapper gives way to the text pasted, as the person's
/// input line held it. Anything that is not such a wrapper stays as it is.
fn unwrapped(text: &str) -> String {
    const OPEN: &str = "<pasted_content id=\"";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let after = &rest[at + OPEN.len()..];
        let Some((id, body)) = after
            .split_once("\">")
            .filter(|(id, _)| !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()))
        else {
            out.push_str(&rest[..at + OPEN.len()]);
            rest = after;
            continue;
        };
        let close = format!("</pasted_content id=\"{id}\">");
        let Some(end) = body.find(&close) else {
            out.push_str(&rest[..at + OPEN.len()]);
            rest = after;
            continue;
        };
        let before = &rest[..at];
        out.push_str(before.strip_suffix("\n\n").unwrap_or(before));
        let inner = &body[..end];
        let inner = inner.strip_prefix('\n').unwrap_or(inner);
        let inner = inner.strip_suffix('\n').unwrap_or(inner);
        out.push_str(
            &inner
                .replace("<\\/pasted_content", "</pasted_content")
                .replace("<\\pasted_content", "<pasted_content"),
        );
        let tail = &body[end + close.len()..];
        rest = tail.strip_prefix('\n').unwrap_or(tail);
    }
    out.push_str(rest);
    out
}

/// `text` as it may be pasted into a terminal program: C0 and C1 control
/// characters other than newline and tab removed, a carriage return as a
/// newline (`\r\n` as one). ESC above all: `ESC[201~` inside the text ends
/// tmux's bracketed paste early, and what follows (a CR: Enter) would be
/// typed as keys and send the prompt.
fn typable(text: &str) -> String {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    text.chars()
        .filter(|&c| c == '\n' || c == '\t' || !c.is_control())
        .collect()
}

/// The notice is taken down at the person's next prompt, which comes from
/// the new session ([`prompt_sent`]).
fn mark_notice(state_dir: &Path, op: &Operation) {
    if let Some(new) = &op.candidate {
        let marker = path(state_dir, &new.session_id, "back");
        let _ = write_cache_atomic(&marker, op.id.as_str().as_bytes(), 0o600);
    }
}

/// Wait (≤ [`IDLE_WAIT`]) until the input line is empty twice [`QUIET`]
/// apart; a draft (the person is typing) or no input box is a reason not
/// to paste.
fn idle_input(target: &Target) -> std::result::Result<(), String> {
    let deadline = Instant::now() + IDLE_WAIT;
    loop {
        let first = target.input();
        if matches!(first, Ok(Some(Input::Idle))) {
            thread::sleep(QUIET);
            if matches!(target.input(), Ok(Some(Input::Idle))) {
                return Ok(());
            }
        }
        let now = target.input();
        if let Ok(Some(Input::Draft(d))) = now {
            return Err(format!(
                "the input line holds {} characters typed meanwhile",
                d.chars().count()
            ));
        }
        if Instant::now() >= deadline {
            return Err(match now {
                Ok(Some(Input::Running)) => "a turn is running".into(),
                Err(e) => format!("cannot read the pane: {}", e.message),
                _ => "the pane does not show Claude Code's input box".into(),
            });
        }
        thread::sleep(Duration::from_millis(40));
    }
}

/// The pasted text shows in the input line within [`SHOWN`].
fn shows_draft(target: &Target) -> bool {
    let deadline = Instant::now() + SHOWN;
    while Instant::now() < deadline {
        if let Ok(Some(Input::Draft(_))) = target.input() {
            return true;
        }
        thread::sleep(Duration::from_millis(40));
    }
    false
}

/// `ktr-prompt`, at the person's next prompt of `session`: take down the
/// notice a put-back left (`<session>.back`). Cheap when there is none.
pub(crate) fn prompt_sent(
    state_dir: &Path,
    session: &SessionId,
    target: impl FnOnce() -> Option<Target>,
) {
    let marker = path(state_dir, session, "back");
    if std::fs::symlink_metadata(&marker).is_ok() {
        let _ = std::fs::remove_file(&marker);
        if let Some(target) = target() {
            target.clear_notice();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    use std::os::unix::fs::PermissionsExt;

    fn session() -> SessionId {
        SessionId::parse("0b0e8a52-6c47-4c3a-9f3e-1d2a3b4c5d6e").unwrap()
    }

    /// The operation a test blocks for (`"a"`), or another one.
    fn op(id: &str) -> OperationId {
        OperationId::parse(id).unwrap()
    }

    #[test]
    fn a_kept_prompt_is_blocked_once_for_its_operation() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        keep(state, &session(), Some("p1"), "line one\nline two;").unwrap();
        let last = path(state, &session(), "last");
        assert_eq!(
            std::fs::metadata(&last).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(dir.path().join("prompts"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        // Another prompt's compaction: nothing of this one comes back.
        assert_eq!(
            block(state, &session(), Some("p2"), &op("a")).unwrap(),
            None
        );
        let kept = block(state, &session(), Some("p1"), &op("a"))
            .unwrap()
            .unwrap();
        assert_eq!(kept.text.as_deref(), Some("line one\nline two;"));
        assert!(!last.exists());
        assert_eq!(blocked(state, &session(), &op("b")).unwrap(), None);
        assert_eq!(blocked(state, &session(), &op("a")).unwrap(), Some(kept));
        // Blocking again finds nothing: never twice.
        assert_eq!(
            block(state, &session(), Some("p1"), &op("a")).unwrap(),
            None
        );
        forget(state, &session());
        assert_eq!(blocked(state, &session(), &op("a")).unwrap(), None);
    }

    #[test]
    fn a_linked_prompts_folder_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink(&elsewhere, super::dir(&state)).unwrap();
        let e = keep(&state, &session(), Some("p"), "text").unwrap_err();
        assert!(e.message.contains("symlink"), "{}", e.message);
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    #[test]
    fn a_prompt_over_the_cap_is_kept_without_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let long = "é".repeat(CAP / 2 + 1);
        keep(dir.path(), &session(), Some("p"), &long).unwrap();
        let kept = block(dir.path(), &session(), Some("p"), &op("a"))
            .unwrap()
            .unwrap();
        assert_eq!(kept.text, None);
        assert_eq!(kept.chars, CAP / 2 + 1);
        // Exactly at the cap (JSON-escaped control characters too) still fits.
        let edge = "\u{1}".repeat(CAP);
        keep(dir.path(), &session(), Some("q"), &edge).unwrap();
        let kept = block(dir.path(), &session(), Some("q"), &op("a"))
            .unwrap()
            .unwrap();
        assert_eq!(kept.text.as_deref(), Some(edge.as_str()));
    }

    #[test]
    fn hostile_files_give_one_line_and_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        std::fs::create_dir_all(super::dir(state)).unwrap();
        let blocked_file = blocked_path(state, &session());
        // Damaged.
        std::fs::write(&blocked_file, b"{not json").unwrap();
        let e = blocked(state, &session(), &op("a")).unwrap_err();
        assert!(e.message.contains("not a prompt ktr kept"), "{}", e.message);
        assert!(!e.message.contains('\n'));
        assert!(blocked_file.exists(), "a damaged file must not be removed");
        // Huge.
        std::fs::write(&blocked_file, vec![b' '; FILE_CAP as usize + 1]).unwrap();
        let e = blocked(state, &session(), &op("a")).unwrap_err();
        assert!(e.message.contains("larger than"), "{}", e.message);
        // A FIFO (never blocks).
        std::fs::remove_file(&blocked_file).unwrap();
        mknodat(
            CWD,
            &blocked_file,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(blocked(state, &session(), &op("a")).is_err());
        // A symlink to a file elsewhere.
        std::fs::remove_file(&blocked_file).unwrap();
        let elsewhere = state.join("elsewhere");
        std::fs::write(&elsewhere, b"{}").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &blocked_file).unwrap();
        assert!(blocked(state, &session(), &op("a")).is_err());
    }

    #[test]
    fn control_characters_never_reach_the_paste() {
        assert_eq!(
            typable("a\x1b[201~\rb\tc\r\nd\u{9b}e\u{7f}\u{0}f 日"),
            "a[201~\nb\tc\nde\u{0}f 日".replace('\u{0}', "")
        );
    }

    #[test]
    fn a_collapsed_paste_is_the_text_pasted_once() {
        // As 2.1.328 stored "typed first " + a five-line paste.
        let stored = "typed first \n\n<pasted_content id=\"9a3b\">\nL1\nL2 <\\/pasted_content x>\nL3\nL4\nL5\n</pasted_content id=\"9a3b\">\n";
        assert_eq!(
            unwrapped(stored),
            "typed first L1\nL2 </pasted_content x>\nL3\nL4\nL5"
        );
        // Two pastes, text after them; a tag that is not Claude Code's
        // wrapper stays.
        let two = "\n\n<pasted_content id=\"a1\">\nA\n</pasted_content id=\"a1\">\n and \n\n<pasted_content id=\"b2\">\nB\n</pasted_content id=\"b2\">\n end";
        assert_eq!(unwrapped(two), "A and B end");
        for plain in [
            "no paste",
            "<pasted_content id=\"zz\"> never closed",
            "<pasted_content id=\"\">x</pasted_content id=\"\">",
        ] {
            assert_eq!(unwrapped(plain), plain);
        }
    }

    #[test]
    fn the_open_turn_is_the_blocked_prompt_only_when_nothing_answered_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t.jsonl");
        let user = |id: &str, content: serde_json::Value| {
            serde_json::json!({"type": "user", "promptId": id, "message": {"role": "user", "content": content}}).to_string()
        };
        let reply = |model: &str| {
            serde_json::json!({"type": "assistant", "message": {"model": model, "content": [{"type": "text", "text": "x"}]}}).to_string()
        };
        let write = |lines: &[String]| std::fs::write(&t, lines.join("\n") + "\n").unwrap();
        write(&[
            user("a", "first".into()),
            reply("m"),
            user(
                "b",
                serde_json::json!([{"type": "text", "text": "look"}, {"type": "image", "source": {}}]),
            ),
            reply("<synthetic>"),
        ]);
        assert_eq!(open_turn_is(&t, "b").unwrap(), Some(1));
        assert_eq!(open_turn_is(&t, "a").unwrap(), None);
        // Answered for real: not an open turn.
        write(&[user("b", "x".into()), reply("m")]);
        assert_eq!(open_turn_is(&t, "b").unwrap(), None);
        // A later prompt: the blocked one is not the open turn.
        write(&[user("b", "x".into()), user("c", "y".into())]);
        assert_eq!(open_turn_is(&t, "b").unwrap(), None);
    }
}
