//! The title a rebuilt session shows in Claude Code's `/resume` picker
//! (SPEC §12, "By hand"; CLAUDE-CODE.md, "`/resume` picker and session
//! titles"): the picker never shows a session's id, and an untitled
//! candidate looks exactly like its source. ktr writes the title beside
//! the candidate, as `<project>/<candidate id>/custom-title.json`
//! (`{"customTitle": …}`), never into it: the candidate stays byte for
//! byte what the plan wrote (the same input and session id, the same
//! bytes), and a title never reaches the model. The file goes with the
//! candidate when ktr removes it.
//!
//! The title is the old session's own (its last `custom-title` or
//! `ai-title` record in the first or last 64 KiB, where the picker looks),
//! else its first prompt, shortened, then ` (rebuilt <date>)`, the date
//! prepare froze the source.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic};
use ktr_base::ids::SessionId;

/// How much of each end of the source is read (as the picker reads it).
const END: u64 = 64 * 1024;
/// The most characters taken from the old title or first prompt.
const SHORT: usize = 50;

/// `<folder of candidate>/<session>/custom-title.json`.
fn path(candidate: &Path, session: &SessionId) -> Option<PathBuf> {
    Some(
        candidate
            .parent()?
            .join(session.as_str())
            .join("custom-title.json"),
    )
}

/// The title for a rebuild of `source` frozen on `date` (`YYYY-MM-DD`).
pub fn for_source(source: &Path, date: &str) -> Result<String> {
    let (head, tail) = ends(source)?;
    let named = last_title(&tail).or_else(|| last_title(&head));
    let base = match named.or_else(|| first_prompt(&head)) {
        Some(text) => shorten(&text),
        None => "session".into(),
    };
    Ok(format!("{base} (rebuilt {date})"))
}

/// Write `title` for candidate `session` at `candidate`.
pub fn write(candidate: &Path, session: &SessionId, title: &str) -> Result<()> {
    let file = path(candidate, session)
        .ok_or_else(|| Error::refused(format!("{} has no folder", candidate.display())))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| Error::io_at("create", dir, &e))?;
    let mut bytes = serde_json::to_vec(&serde_json::json!({ "customTitle": title }))
        .map_err(|e| Error::io(e.to_string()))?;
    bytes.push(b'\n');
    write_atomic(&file, &bytes, 0o600, Existing::Replace)
}

/// Remove the title ktr wrote for candidate `session` at `candidate`, and
/// the session's folder when nothing else is in it.
pub fn remove(candidate: &Path, session: &SessionId) {
    if let Some(file) = path(candidate, session) {
        let _ = fs::remove_file(&file);
        if let Some(dir) = file.parent() {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// The first and the last [`END`] bytes of `source`.
fn ends(source: &Path) -> Result<(String, String)> {
    let mut file = fs::File::open(source).map_err(|e| Error::io_at("open", source, &e))?;
    let len = file.metadata().map_or(0, |m| m.len());
    let mut head = Vec::new();
    (&mut file)
        .take(END)
        .read_to_end(&mut head)
        .map_err(|e| Error::io_at("read", source, &e))?;
    let mut tail = Vec::new();
    if len > END {
        file.seek(SeekFrom::Start(len - END))
            .map_err(|e| Error::io_at("read", source, &e))?;
        file.read_to_end(&mut tail)
            .map_err(|e| Error::io_at("read", source, &e))?;
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok((text(&head), text(&tail)))
}

/// The records among `text`'s whole lines (a cut line at either end is
/// not JSON and is skipped).
fn records(text: &str) -> impl Iterator<Item = serde_json::Value> + '_ {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
}

/// The last title Claude Code would show: a `custom-title` or `ai-title`.
fn last_title(text: &str) -> Option<String> {
    records(text)
        .filter_map(|r| {
            let field = match r.get("type")?.as_str()? {
                "custom-title" => "customTitle",
                "ai-title" => "aiTitle",
                _ => return None,
            };
            Some(r.get(field)?.as_str()?.trim().to_string())
        })
        .filter(|t| !t.is_empty())
        .last()
}

/// The first prompt a person typed: a user record's text that is not
/// Claude Code's own (meta records, commands, reminders start with `<`).
fn first_prompt(text: &str) -> Option<String> {
    records(text).find_map(|r| {
        if r.get("type")?.as_str()? != "user" || r.get("isMeta").is_some_and(|m| m == true) {
            return None;
        }
        let content = r.get("message")?.get("content")?;
        let said = match content {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(parts) => parts
                .iter()
                .filter(|p| p.get("type").and_then(|t| t.as_str()) == Some("text"))
                .filter_map(|p| p.get("text")?.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            _ => return None,
        };
        let said = said.trim();
        (!said.is_empty() && !said.starts_with('<')).then(|| said.to_string())
    })
}

/// One line of at most [`SHORT`] characters (`…` when cut).
fn shorten(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= SHORT {
        return line;
    }
    let cut: String = line.chars().take(SHORT - 1).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_title_wins_else_the_first_prompt_shortened() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("s.jsonl");
        let prompt = r#"{"type":"user","message":{"role":"user","content":"<command-name>/x</command-name>"}}
{"type":"user","message":{"role":"user","content":[{"type":"text","text":"Fix the   parser so that every long line is read in one pass, please"}]}}
"#;
        fs::write(&source, prompt).unwrap();
        assert_eq!(
            for_source(&source, "2026-12-05").unwrap(),
            "Fix the parser so that every long line is read in… (rebuilt 2026-12-05)"
        );
        let titled = format!(
            "{prompt}{}\n{}\n",
            r#"{"type":"ai-title","aiTitle":"Parser work","sessionId":"x"}"#,
            r#"{"type":"custom-title","customTitle":"My parser","sessionId":"x"}"#
        );
        fs::write(&source, titled).unwrap();
        assert_eq!(
            for_source(&source, "2026-12-05").unwrap(),
            "My parser (rebuilt 2026-12-05)"
        );
    }

    #[test]
    fn the_title_file_goes_with_the_candidate_and_its_empty_folder() {
        let dir = tempfile::tempdir().unwrap();
        let session = SessionId::parse("0b0f7e4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b").unwrap();
        let candidate = dir.path().join(format!("{session}.jsonl"));
        write(&candidate, &session, "T (rebuilt 2026-12-05)").unwrap();
        let file = dir.path().join(session.as_str()).join("custom-title.json");
        assert_eq!(
            fs::read_to_string(&file).unwrap(),
            "{\"customTitle\":\"T (rebuilt 2026-12-05)\"}\n"
        );
        remove(&candidate, &session);
        assert!(!dir.path().join(session.as_str()).exists());
    }
}
