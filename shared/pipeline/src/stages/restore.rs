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
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::Digest as _;

use super::appended::{Appended, appended_record};
use crate::operation::{CandidateFile, Operation, RestoreFile};
use crate::targets::Ran;
use ktr_base::digest::Sha256;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic_with};
use ktr_base::ids::SessionId;
use ktr_base::open::{Links, open_regular};
use ktr_engine::transcript::last_conversation_uuid;
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
    let old = open_regular(old_transcript, Links::Refuse)
        .map_err(|e| Error::io_at("read", old_transcript, &e))?;
    let id = SessionId::new_random();
    let dir = candidate.path.parent().unwrap_or(Path::new("/"));
    let path: PathBuf = dir.join(format!("{id}.jsonl"));
    // Streamed: the old transcript may be large; only a line at a time
    // and what was said since the switch are held.
    let composed = write_atomic_with(&path, 0o600, Existing::Refuse, |out| {
        compose(&mut &old, &said, &mut std::io::BufWriter::new(out))
    })?;
    let Some(composed) = composed else {
        let _ = std::fs::remove_file(&path);
        return Err(Error::refused(
            "the old transcript holds no record with a uuid to chain the turns said since the switch onto; the old session untouched",
        ));
    };
    let checked = open_regular(&path, Links::Refuse)
        .map_err(|e| Error::io_at("read", &path, &e))
        .map(|file| check(&file, &composed, &said));
    match checked {
        Ok(Ok(sha256)) => Ok(Some(RestoreFile {
            session_id: id,
            path,
            sha256,
            old_records: composed.old_records,
            new_records: said.records.len(),
            turns: said.turns,
        })),
        Ok(Err(why)) => {
            let _ = std::fs::remove_file(&path);
            Err(Error::refused(format!(
                "the restore session {id} did not check out ({why}); removed it, the old session untouched"
            )))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// The speech the rebuilt session `candidate` holds after what ktr wrote
/// (None when there is none). An error when its transcript no longer
/// begins with the bytes ktr wrote.
pub(super) fn said_since_switch(candidate: &CandidateFile) -> Result<Option<Said>> {
    let path = &candidate.path;
    let file = open_regular(path, Links::Refuse).map_err(|e| Error::io_at("read", path, &e))?;
    let after = after_written(file, &candidate.sha256)
        .map_err(|e| Error::io_at("read", path, &e))?
        .ok_or_else(|| {
            Error::refused(format!(
                "the rebuilt session's transcript {} no longer begins with the bytes ktr wrote (sha256 {}): what was said since the switch cannot be told apart",
                path.display(),
                candidate.sha256.short()
            ))
        })?;
    Ok(said_in(&after))
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

/// What follows the whole-line prefix of `input` whose digest is `want`
/// (None when no such prefix), read a buffer at a time (a long line is
/// never held).
fn after_written(input: impl Read, want: &Sha256) -> std::io::Result<Option<Vec<u8>>> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    let mut hasher = sha2::Sha256::new();
    loop {
        let (used, matched) = {
            let buf = input.fill_buf()?;
            if buf.is_empty() {
                return Ok(None);
            }
            if let Some(end) = memchr::memchr(b'\n', buf) {
                hasher.update(&buf[..=end]);
                (end + 1, Sha256::of_hasher(hasher.clone()) == *want)
            } else {
                hasher.update(buf);
                (buf.len(), false)
            }
        };
        input.consume(used);
        if matched {
            let mut rest = Vec::new();
            input.read_to_end(&mut rest)?;
            return Ok(Some(rest));
        }
    }
}

/// What the restore session was made of.
#[derive(Debug)]
struct Composed {
    /// How many bytes of the old transcript it begins with, and their digest.
    old_bytes: u64,
    old_sha256: Sha256,
    /// The old transcript's last line had no end: one was added.
    ended: bool,
    old_records: usize,
    /// The uuid of the old conversation's last record.
    last_old: String,
}

/// Write the old transcript's bytes (a last line without its end gets
/// one), then the said records, those whose parent is not another said
/// record chained onto the old conversation's last record. None when the
/// old transcript holds no record to chain onto. The old transcript is
/// read twice, a buffer at a time: copied, then walked for its last
/// record; no line of it is held whole.
fn compose<R: Read + Seek>(
    old: &mut R,
    said: &Said,
    out: &mut impl Write,
) -> std::io::Result<Option<Composed>> {
    let copied = copy_old(&mut *old, out)?;
    old.rewind()?;
    let Some(last_old) = last_conversation_uuid(BufReader::with_capacity(1 << 16, &mut *old))?
    else {
        return Ok(None);
    };
    let parent = Value::from(last_old.as_str()).to_string();
    let ours: HashSet<String> = said.records.iter().filter_map(|l| uuid_of(l)).collect();
    for record in &said.records {
        if relinked(record, &ours) {
            let chained = with_top_level(record, "parentUuid", &parent);
            out.write_all(chained.as_deref().unwrap_or(record).as_bytes())?;
        } else {
            out.write_all(record.as_bytes())?;
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(Some(Composed {
        old_bytes: copied.bytes,
        old_sha256: copied.sha256,
        ended: copied.ended,
        old_records: copied.records,
        last_old,
    }))
}

/// What [`copy_old`] copied.
struct Copied {
    bytes: u64,
    sha256: Sha256,
    /// Its non-empty lines.
    records: usize,
    /// Its last line had no end: one was written.
    ended: bool,
}

/// Copy `old` to `out` a buffer at a time, counting its non-empty lines
/// and ending its last line if it has no end.
fn copy_old(old: impl Read, out: &mut impl Write) -> std::io::Result<Copied> {
    let mut old = BufReader::with_capacity(1 << 16, old);
    let mut hasher = sha2::Sha256::new();
    let (mut bytes, mut records, mut open_line) = (0u64, 0usize, 0usize);
    loop {
        let used = {
            let buf = old.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            out.write_all(buf)?;
            hasher.update(buf);
            for line in buf.split_inclusive(|b| *b == b'\n') {
                if line.ends_with(b"\n") {
                    records += usize::from(open_line + line.len() > 1);
                    open_line = 0;
                } else {
                    open_line += line.len();
                }
            }
            buf.len()
        };
        bytes += used as u64;
        old.consume(used);
    }
    let ended = open_line > 0;
    if ended {
        records += 1;
        out.write_all(b"\n")?;
    }
    Ok(Copied {
        bytes,
        sha256: Sha256::of_hasher(hasher),
        records,
        ended,
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
/// record (now the old conversation's last record). Its digest when it does.
fn check(written: &File, composed: &Composed, said: &Said) -> std::result::Result<Sha256, String> {
    use std::os::unix::fs::FileExt;
    let unreadable = |e: std::io::Error| format!("it cannot be read back: {e}");
    let (prefix, n) = Sha256::of_prefix(written, composed.old_bytes).map_err(unreadable)?;
    if n != composed.old_bytes || prefix != composed.old_sha256 {
        return Err("it does not begin with the old transcript's bytes".into());
    }
    let len = written.metadata().map_err(unreadable)?.len();
    let mut after = vec![0; usize::try_from(len - composed.old_bytes).unwrap_or(0)];
    written
        .read_exact_at(&mut after, composed.old_bytes)
        .map_err(unreadable)?;
    let after = if composed.ended {
        after
            .strip_prefix(b"\n")
            .ok_or("the old transcript's last line was not ended")?
    } else {
        &after[..]
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
                    if now["parentUuid"].as_str() != Some(composed.last_old.as_str()) {
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
    let (whole, _) = Sha256::of_prefix(written, len).map_err(unreadable)?;
    Ok(whole)
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
        let after = after_written(file.as_bytes(), &digest).unwrap();
        assert_eq!(after.as_deref(), Some(appended().as_bytes()));
        assert_eq!(after_written(&b"{\"a\":1}\n"[..], &digest).unwrap(), None);
        assert_eq!(
            after_written(&b"{\"x\":1}\n{\"b\":2}\n"[..], &digest).unwrap(),
            None
        );
    }

    /// Compose a restore session from `old` into a file; its text, what
    /// it was made of, and the file.
    fn composed(old: &str, said: &Said) -> (String, Composed, tempfile::NamedTempFile) {
        let mut out = Vec::new();
        let c = compose(&mut std::io::Cursor::new(old), said, &mut out)
            .unwrap()
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        (text.clone(), c, written(&text))
    }

    fn written(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    #[test]
    fn the_restore_session_is_the_old_records_then_the_new_ones_chained_on() {
        let said = said_in(appended().as_bytes()).unwrap();
        let old = old_transcript();
        let (text, c, file) = composed(&old, &said);
        assert_eq!((c.old_records, c.last_old.as_str()), (4, "o3"));
        assert_eq!((c.old_bytes, c.ended), (old.len() as u64, false));
        // The old transcript's bytes as they are, then the new records.
        assert!(text.starts_with(&old));
        let lines: Vec<Value> = text
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
        assert_eq!(
            check(file.as_file(), &c, &said),
            Ok(Sha256::of_bytes(text.as_bytes()))
        );
        // An old record lost, a new one changed, one added, one unchained:
        // each is caught.
        let mut lost: Vec<&str> = text.lines().collect();
        lost.remove(1);
        let lost = lost.join("\n") + "\n";
        let why = check(written(&lost).as_file(), &c, &said).unwrap_err();
        assert_eq!(why, "it does not begin with the old transcript's bytes");
        let changed = text.replace("new answer", "other answer");
        let why = check(written(&changed).as_file(), &c, &said).unwrap_err();
        assert_eq!(why, "new record 3 differs from its original");
        let added = text.clone() + &line(&json!({"type": "user", "uuid": "x"}));
        let why = check(written(&added).as_file(), &c, &said).unwrap_err();
        assert_eq!(why, "4 records after the old ones, expected 3");
        let unchained = text.replace("\"parentUuid\":\"o3\"", "\"parentUuid\":\"c9\"");
        let why = check(written(&unchained).as_file(), &c, &said).unwrap_err();
        assert_eq!(why, "new record 1 is not chained onto the old conversation");
        // An old transcript whose last line has no end gets one.
        let cut = old.trim_end_matches('\n');
        let (text, c, file) = composed(cut, &said);
        assert!(c.ended && text.starts_with(&old));
        assert!(check(file.as_file(), &c, &said).is_ok());
        // Nothing to chain onto.
        let mut out = Vec::new();
        let none = compose(
            &mut std::io::Cursor::new(&b"{\"type\":\"last-prompt\"}\n"[..]),
            &said,
            &mut out,
        )
        .unwrap();
        assert!(none.is_none());
    }

    /// Lines far longer than a read buffer (a pasted log, a big tool
    /// result), blank lines and a sidechain record after the conversation's
    /// last one: every byte copied, the lines counted, the chain hung onto
    /// the last main record, whose uuid comes after a long text.
    #[test]
    fn long_lines_are_copied_in_pieces_and_the_chain_hangs_on_the_last_main_record() {
        let said = said_in(appended().as_bytes()).unwrap();
        let long = "x".repeat(300 << 10);
        let old = [
            line(
                &json!({"type": "user", "message": {"role": "user", "content": long},
                "uuid": "o1", "parentUuid": null, "sessionId": OLD}),
            ),
            "\n".to_string(),
            line(
                &json!({"type": "assistant", "message": {"role": "assistant",
                "content": [{"type": "text", "text": long}]}, "uuid": "o2", "parentUuid": "o1"}),
            ),
            line(
                &json!({"type": "user", "isSidechain": true, "uuid": "s1", "parentUuid": "o2",
                "message": {"role": "user", "content": long}}),
            ),
        ]
        .concat();
        let (text, c, file) = composed(&old, &said);
        assert!(text.starts_with(&old));
        assert_eq!((c.old_records, c.last_old.as_str()), (3, "o2"));
        assert_eq!((c.old_bytes, c.ended), (old.len() as u64, false));
        assert!(check(file.as_file(), &c, &said).is_ok());
        let digest = Sha256::of_bytes(old.as_bytes());
        let after = after_written(text.as_bytes(), &digest).unwrap().unwrap();
        assert_eq!(after, &text.as_bytes()[old.len()..]);
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
