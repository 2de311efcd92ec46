//! The restore session of a rollback (SPEC §10): nothing said since the
//! rebuild is lost when the person goes back.
//!
//! The rebuilt session's transcript is the candidate ktr wrote (its bytes
//! are the prefix whose digest the operation recorded) followed by what
//! Claude Code appended since the switch. When that holds speech (the
//! rules of [`super::appended`]: user or assistant text, channel messages,
//! queued prompts), a rollback does not resume the old session as it was:
//! it writes a restore session — the old transcript's bytes as they are,
//! then the records appended to the rebuilt session, verbatim but for the
//! link (`parentUuid`) of the first ones, which hangs them onto the old
//! conversation's last record — checks it, and switches to it. The old
//! transcript is only read.
//!
//! Nothing in the old records needs changing for a session of another id:
//! Claude Code 2.1.328 takes the session from the file name and resumes a
//! file whose records name other sessions (`sessionId`) in place, its next
//! request carrying every turn (measured with the real CLI: a restore
//! session holding 58 records of the old session's id and 29 of the
//! rebuilt one's). Claude Code names the new session in what it appends.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::Digest as _;

use super::appended::{Appended, appended_record};
use crate::operation::{CandidateFile, Operation, RestoreFile};
use crate::targets::Ran;
use ktr_base::digest::Sha256;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic};
use ktr_base::ids::SessionId;
use ktr_base::open::{Links, open_regular};
use ktr_engine::with_top_level;

/// What the rebuilt session holds after what ktr wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Said {
    /// The records appended since the switch that are part of the
    /// conversation (they carry a `uuid`), raw, in file order.
    pub records: Vec<String>,
    /// The turns among them: prompts, channel messages, queued prompts.
    pub turns: usize,
}

/// Build and check the restore session of `op` beside its candidate, or
/// None when the rebuilt session holds no speech since the switch (the
/// old session itself is resumed then).
pub(super) fn build(op: &Operation, old_transcript: &Path) -> Result<Option<RestoreFile>> {
    let candidate = op
        .candidate
        .as_ref()
        .ok_or_else(|| Error::refused(format!("operation {} has no candidate recorded", op.id)))?;
    let Some(said) = said_since_switch(candidate)? else {
        return Ok(None);
    };
    let old = read(old_transcript)?;
    let id = SessionId::new_random();
    let composed = compose(&old, &said)?;
    let dir = candidate.path.parent().unwrap_or(Path::new("/"));
    let path: PathBuf = dir.join(format!("{id}.jsonl"));
    write_atomic(&path, composed.bytes.as_bytes(), 0o600, Existing::Refuse)?;
    let written = read(&path)?;
    if let Err(why) = check(&written, &old, &said, &composed.last_old) {
        let _ = std::fs::remove_file(&path);
        return Err(Error::refused(format!(
            "the restore session {id} did not check out ({why}); removed it, the old session untouched"
        )));
    }
    Ok(Some(RestoreFile {
        session_id: id,
        path,
        sha256: Sha256::of_bytes(&written),
        old_records: composed.old_records,
        new_records: said.records.len(),
        turns: said.turns,
    }))
}

/// The speech the rebuilt session `candidate` holds after what ktr wrote
/// (None when there is none). An error when its transcript no longer
/// begins with the bytes ktr wrote.
pub(super) fn said_since_switch(candidate: &CandidateFile) -> Result<Option<Said>> {
    let bytes = read(&candidate.path)?;
    let written = written_len(&bytes, &candidate.sha256).ok_or_else(|| {
        Error::refused(format!(
            "the rebuilt session's transcript {} no longer begins with the bytes ktr wrote (sha256 {}): what was said since the switch cannot be told apart",
            candidate.path.display(),
            candidate.sha256.short()
        ))
    })?;
    Ok(said_in(&bytes[written..]))
}

/// The speech in `appended` (whole lines only; a line still being written
/// is no turn yet).
fn said_in(appended: &[u8]) -> Option<Said> {
    let whole = appended
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(&appended[..0], |end| &appended[..=end]);
    let mut said = Said {
        records: Vec::new(),
        turns: 0,
    };
    let mut speech = false;
    for line in whole.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(text) = std::str::from_utf8(line) else {
            continue;
        };
        let Some(record) = serde_json::from_str::<Value>(text)
            .ok()
            .filter(|r| r["uuid"].is_string())
        else {
            continue;
        };
        if let Appended::Speech(_) = appended_record(&record) {
            speech = true;
            let queued = record["attachment"]["type"].as_str() == Some("queued_command");
            if record["type"].as_str() == Some("user") || queued {
                said.turns += 1;
            }
        }
        said.records.push(text.to_string());
    }
    speech.then_some(said)
}

/// The length of the whole-line prefix of `bytes` whose digest is `want`.
fn written_len(bytes: &[u8], want: &Sha256) -> Option<usize> {
    let mut hasher = sha2::Sha256::new();
    let mut at = 0;
    for end in memchr::memchr_iter(b'\n', bytes) {
        hasher.update(&bytes[at..=end]);
        at = end + 1;
        if Sha256::of_hasher(hasher.clone()) == *want {
            return Some(at);
        }
    }
    None
}

/// The restore session's text and what it was made of.
struct Composed {
    bytes: String,
    old_records: usize,
    /// The uuid of the old conversation's last record.
    last_old: String,
}

/// The old transcript's bytes (a last line without its end gets one),
/// then the said records, those whose parent is not another said record
/// chained onto the old conversation's last record.
fn compose(old: &[u8], said: &Said) -> Result<Composed> {
    let old_text = std::str::from_utf8(old).map_err(|e| {
        Error::refused(format!(
            "the old transcript is not UTF-8 ({e}); not rebuilt"
        ))
    })?;
    let mut out =
        String::with_capacity(old.len() + said.records.iter().map(String::len).sum::<usize>() + 1);
    out.push_str(old_text);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    let mut last_old = None;
    let mut old_records = 0;
    for line in old_text.split_terminator('\n').filter(|l| !l.is_empty()) {
        old_records += 1;
        if let Ok(v) = serde_json::from_str::<Value>(line)
            && let Some(uuid) = v["uuid"].as_str()
            && v["isSidechain"].as_bool() != Some(true)
        {
            last_old = Some(uuid.to_string());
        }
    }
    let last_old = last_old.ok_or_else(|| {
        Error::refused("the old transcript holds no record with a uuid to chain the new turns onto")
    })?;
    let parent = Value::from(last_old.as_str()).to_string();
    let ours: HashSet<String> = said.records.iter().filter_map(|l| uuid_of(l)).collect();
    for line in &said.records {
        if relinked(line, &ours) {
            out.push_str(
                &with_top_level(line, "parentUuid", &parent).unwrap_or_else(|| line.clone()),
            );
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    Ok(Composed {
        bytes: out,
        old_records,
        last_old,
    })
}

/// Whether a said record hangs onto a record outside the said ones (the
/// rebuilt session's carried turns): it is chained onto the old
/// conversation instead.
fn relinked(line: &str, ours: &HashSet<String>) -> bool {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v["parentUuid"].as_str().map(str::to_string))
        .is_some_and(|p| !ours.contains(&p))
}

fn uuid_of(line: &str) -> Option<String> {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v["uuid"].as_str().map(str::to_string))
}

/// The restore session as written begins with the old transcript's bytes
/// and holds after them every said record and nothing else, each as it
/// was but for the `parentUuid` of one whose parent is not another said
/// record (now `last_old`).
fn check(
    written: &[u8],
    old: &[u8],
    said: &Said,
    last_old: &str,
) -> std::result::Result<(), String> {
    let Some(after) = written.strip_prefix(old) else {
        return Err("it does not begin with the old transcript's bytes".into());
    };
    let after = if !old.is_empty() && !old.ends_with(b"\n") {
        after
            .strip_prefix(b"\n")
            .ok_or("the old transcript's last line was not ended")?
    } else {
        after
    };
    let got: Vec<&[u8]> = after
        .split(|c| *c == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    if got.len() != said.records.len() {
        return Err(format!(
            "{} records after the old ones, expected {}",
            got.len(),
            said.records.len()
        ));
    }
    let ours: HashSet<String> = said.records.iter().filter_map(|l| uuid_of(l)).collect();
    for (n, (line, was)) in got.iter().zip(&said.records).enumerate() {
        let same = if relinked(was, &ours) {
            match (
                serde_json::from_slice::<Value>(line),
                serde_json::from_str::<Value>(was),
            ) {
                (Ok(mut now), Ok(mut then)) => {
                    if now["parentUuid"].as_str() != Some(last_old) {
                        return Err(format!(
                            "new record {} is not chained onto the old conversation",
                            n + 1
                        ));
                    }
                    for v in [&mut now, &mut then] {
                        if let Some(o) = v.as_object_mut() {
                            o.remove("parentUuid");
                        }
                    }
                    now == then
                }
                _ => false,
            }
        } else {
            *line == was.as_bytes()
        };
        if !same {
            return Err(format!("new record {} differs from its original", n + 1));
        }
    }
    Ok(())
}

/// What the target runs after the rollback: what it ran before the switch,
/// with the restore session `to` in place of the old one (its command
/// line names `to` where it named the old session).
pub(super) fn ran_as(ran: &Ran, to: &SessionId) -> Ran {
    let old = ran.session.as_str();
    let argv = ran
        .argv
        .iter()
        .map(|word| {
            if word == old {
                return to.to_string();
            }
            for flag in ["--resume=", "--session-id="] {
                if word.strip_prefix(flag) == Some(old) {
                    return format!("{flag}{to}");
                }
            }
            word.clone()
        })
        .collect();
    Ran {
        session: to.clone(),
        argv,
        cwd: ran.cwd.clone(),
    }
}

/// A transcript's bytes, never through a link.
fn read(path: &Path) -> Result<Vec<u8>> {
    let mut file = open_regular(path, Links::Refuse).map_err(|e| Error::io_at("read", path, &e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io_at("read", path, &e))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OLD: &str = "5d1c9a8e-3b7f-4e2a-9c61-0f2b7d4e8a13";
    const NEW: &str = "0b7d2f4e-8a13-4c61-9e2a-3b7f5d1c9a8e";

    fn line(v: &Value) -> String {
        format!("{v}\n")
    }

    fn old_transcript() -> String {
        [
            json!({"type": "user", "uuid": "o1", "parentUuid": null, "sessionId": OLD,
                "timestamp": "2026-12-01T10:00:00Z", "message": {"role": "user", "content": "old question"}}),
            json!({"type": "assistant", "uuid": "o2", "parentUuid": "o1", "sessionId": OLD,
                "timestamp": "2026-12-01T10:00:01Z", "message": {"role": "assistant", "content": [{"type": "text", "text": "old answer"}]}}),
            json!({"type": "last-prompt", "lastPrompt": "old question", "sessionId": OLD}),
            json!({"type": "system", "subtype": "turn_duration", "uuid": "o3", "parentUuid": "o2", "sessionId": OLD}),
        ]
        .iter()
        .map(line)
        .collect()
    }

    /// Records Claude Code appends to the rebuilt session `NEW` after the
    /// switch: its resume attachment, a typed prompt and the reply.
    fn appended() -> String {
        [
            json!({"type": "attachment", "uuid": "n0", "parentUuid": "c9", "sessionId": NEW,
                "attachment": {"type": "hook_success"}}),
            json!({"type": "user", "uuid": "n1", "parentUuid": "n0", "sessionId": NEW,
                "timestamp": "2026-12-01T11:00:00Z", "message": {"role": "user", "content": "new question"}}),
            json!({"type": "assistant", "uuid": "n2", "parentUuid": "n1", "sessionId": NEW,
                "timestamp": "2026-12-01T11:00:01Z", "message": {"role": "assistant", "content": [{"type": "text", "text": "new answer"}]}}),
            json!({"type": "last-prompt", "lastPrompt": "new question", "sessionId": NEW}),
        ]
        .iter()
        .map(line)
        .collect()
    }

    #[test]
    fn speech_after_what_ktr_wrote_is_found_and_counted() {
        let said = said_in(appended().as_bytes()).expect("speech");
        assert_eq!(said.turns, 1);
        let uuids: Vec<String> = said.records.iter().filter_map(|l| uuid_of(l)).collect();
        assert_eq!(
            uuids,
            ["n0", "n1", "n2"],
            "records without a uuid stay behind"
        );
        // Only what no rebuild carries: no turn was said.
        let residue = line(&json!({"type": "system", "subtype": "stop_hook_summary", "uuid": "s"}))
            + &line(
                &json!({"type": "attachment", "uuid": "a", "attachment": {"type": "hook_success"}}),
            );
        assert_eq!(said_in(residue.as_bytes()), None);
        assert_eq!(said_in(b""), None);
        // A line still being written is no turn yet.
        let half = &appended()[..appended().find("\"n1\"").unwrap()];
        let last_whole = &half[..=half.rfind('\n').unwrap()];
        assert_eq!(said_in(half.as_bytes()), said_in(last_whole.as_bytes()));
    }

    #[test]
    fn what_ktr_wrote_is_found_by_its_digest() {
        let written = "{\"a\":1}\n{\"b\":2}\n";
        let digest = Sha256::of_bytes(written.as_bytes());
        let file = format!("{written}{}", appended());
        assert_eq!(written_len(file.as_bytes(), &digest), Some(written.len()));
        assert_eq!(written_len(b"{\"a\":1}\n", &digest), None);
        assert_eq!(written_len(b"{\"x\":1}\n{\"b\":2}\n", &digest), None);
    }

    #[test]
    fn the_restore_session_is_the_old_records_then_the_new_ones_chained_on() {
        let said = said_in(appended().as_bytes()).unwrap();
        let old = old_transcript();
        let composed = compose(old.as_bytes(), &said).unwrap();
        assert_eq!(
            (composed.old_records, composed.last_old.as_str()),
            (4, "o3")
        );
        // The old transcript's bytes as they are, then the new records.
        assert!(composed.bytes.starts_with(&old));
        let lines: Vec<Value> = composed
            .bytes
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 7);
        let sessions: Vec<&str> = lines
            .iter()
            .map(|l| l["sessionId"].as_str().unwrap())
            .collect();
        assert_eq!(sessions, [OLD, OLD, OLD, OLD, NEW, NEW, NEW]);
        let parents: Vec<&Value> = lines.iter().map(|l| &l["parentUuid"]).collect();
        assert_eq!(
            parents,
            [
                &Value::Null,
                &json!("o1"),
                &Value::Null,
                &json!("o2"),
                &json!("o3"),
                &json!("n0"),
                &json!("n1")
            ]
        );
        check(composed.bytes.as_bytes(), old.as_bytes(), &said, "o3").unwrap();
        // An old record lost, a new one changed, one added, one unchained:
        // each is caught.
        let mut lost: Vec<&str> = composed.bytes.lines().collect();
        lost.remove(1);
        let lost = lost.join("\n") + "\n";
        let why = check(lost.as_bytes(), old.as_bytes(), &said, "o3").unwrap_err();
        assert_eq!(why, "it does not begin with the old transcript's bytes");
        let changed = composed.bytes.replace("new answer", "other answer");
        let why = check(changed.as_bytes(), old.as_bytes(), &said, "o3").unwrap_err();
        assert_eq!(why, "new record 3 differs from its original");
        let added = composed.bytes.clone() + &line(&json!({"type": "user", "uuid": "x"}));
        let why = check(added.as_bytes(), old.as_bytes(), &said, "o3").unwrap_err();
        assert_eq!(why, "4 records after the old ones, expected 3");
        let unchained = composed
            .bytes
            .replace("\"parentUuid\":\"o3\"", "\"parentUuid\":\"c9\"");
        let why = check(unchained.as_bytes(), old.as_bytes(), &said, "o3").unwrap_err();
        assert_eq!(why, "new record 1 is not chained onto the old conversation");
        // An old transcript whose last line has no end gets one.
        let cut = old.trim_end_matches('\n');
        let composed = compose(cut.as_bytes(), &said).unwrap();
        assert!(composed.bytes.starts_with(&old));
        check(composed.bytes.as_bytes(), cut.as_bytes(), &said, "o3").unwrap();
    }

    #[test]
    fn the_command_line_names_the_restore_session() {
        let old = SessionId::parse(OLD).unwrap();
        let to = SessionId::parse(NEW).unwrap();
        let ran = Ran {
            session: old.clone(),
            argv: [
                "claude",
                "--model",
                "x",
                "--resume",
                OLD,
                &format!("--session-id={OLD}"),
            ]
            .map(String::from)
            .to_vec(),
            cwd: None,
        };
        let back = ran_as(&ran, &to);
        assert_eq!(back.session, to);
        assert_eq!(
            back.argv,
            [
                "claude",
                "--model",
                "x",
                "--resume",
                NEW,
                &format!("--session-id={NEW}")
            ]
        );
    }
}
