//! `scope = "all"`: every project's sessions — each `<session>.jsonl`
//! directly in a project folder beside `project_dir` — and the sessions
//! ktr's backups alone still hold, newest first, grouped by session, each
//! with the line a person types to resume it. The folder comes from the
//! transcript's `cwd` (the folder-name encoding is lossy).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use super::sources::{backup_source, live_source, project_transcripts};
use crate::operation::Store;
use ktr_base::config::encode_project_name;
use ktr_base::open::{Links, open_regular};
use ktr_base::{Error, Result};
use ktr_engine::recall::{Source, record};

/// Bytes of a transcript's start read to find its `cwd`.
const HEAD_BYTES: usize = 256 << 10;
/// The most project folders read.
const PROJECTS_MAX: usize = 10_000;

/// A session of the search, and how to go back to it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionInfo {
    pub session: String,
    /// Its project folder's name (`~/.claude/projects/<name>`).
    pub project: String,
    /// The working folder its transcript names.
    pub cwd: Option<String>,
    /// The operation whose backup alone holds it (Claude Code deleted it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup_of: Option<String>,
    /// What a person types to resume it.
    pub resume: String,
}

/// One session found, before it is read.
struct Found {
    at: SystemTime,
    session: String,
    project: String,
    /// The live transcript, or the backup and its operation.
    live: Option<PathBuf>,
    backup: Option<(ktr_base::ids::OperationId, PathBuf)>,
}

/// The folder of another project beside `project` holding `session`.
pub(crate) fn project_of(project: &Path, session: &str) -> Option<PathBuf> {
    folders(project, &[])
        .ok()?
        .into_iter()
        .find(|dir| dir.join(format!("{session}.jsonl")).is_file())
}

/// The project folders beside (and including) `project`; `only` (folder
/// names or working folders) keeps those named.
fn folders(project: &Path, only: &[String]) -> Result<Vec<PathBuf>> {
    let Some(root) = project.parent() else {
        return Ok(vec![project.to_path_buf()]);
    };
    let entries = std::fs::read_dir(root).map_err(|e| Error::io_at("list", root, &e))?;
    let named = |name: &str| {
        only.is_empty()
            || only
                .iter()
                .any(|o| o == name || encode_project_name(Path::new(o)) == name)
    };
    Ok(entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.file_name().to_str().is_some_and(named))
        .map(|e| e.path())
        .take(PROJECTS_MAX)
        .collect())
}

/// Every session of every project (`only`: those projects), newest first,
/// with its sources; `wanted` keeps sessions by id.
pub(crate) fn all(
    store: &Store,
    project: &Path,
    only: &[String],
    wanted: impl Fn(&str) -> bool,
) -> Result<(Vec<Source>, Vec<SessionInfo>)> {
    let mut found = Vec::new();
    for dir in folders(project, only)? {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (session, path) in project_transcripts(&dir)? {
            let at = std::fs::metadata(&path).and_then(|m| m.modified());
            found.push(Found {
                at: at.unwrap_or(SystemTime::UNIX_EPOCH),
                session,
                project: name.clone(),
                live: Some(path),
                backup: None,
            });
        }
    }
    backups_only(store, only, &mut found)?;
    found.retain(|f| wanted(&f.session));
    found.sort_by_key(|f| std::cmp::Reverse(f.at));
    let (mut sources, mut sessions) = (Vec::new(), Vec::new());
    for f in found {
        let (read, path) = match (&f.live, &f.backup) {
            (Some(live), _) => {
                let dir = live.parent().unwrap_or(project);
                (live_source(dir, &f.session, live)?, live.clone())
            }
            (None, Some((op, backup))) => (
                backup_source(store, op, &f.session, backup)?,
                backup.clone(),
            ),
            (None, None) => continue,
        };
        sources.extend(read);
        let cwd = cwd_of(&path);
        sessions.push(SessionInfo {
            resume: resume_line(
                &f.session,
                cwd.as_deref(),
                f.backup.as_ref().map(|b| b.0.as_str()),
            ),
            session: f.session,
            project: f.project,
            cwd,
            backup_of: f.backup.map(|b| b.0.to_string()),
        });
    }
    Ok((sources, sessions))
}

/// The sessions whose transcript is gone from every project, from the
/// newest backup of each (in a project `only` names, if it says).
fn backups_only(store: &Store, only: &[String], found: &mut Vec<Found>) -> Result<()> {
    let live: std::collections::HashSet<String> = found.iter().map(|f| f.session.clone()).collect();
    let mut kept: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for op in store.list()? {
        let Some(backup) = op.backup.clone().filter(|b| b.is_file()) else {
            continue;
        };
        let Some(session) = backup.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        let project = op
            .transcript_path
            .as_deref()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let named = only.is_empty()
            || only
                .iter()
                .any(|o| *o == project || encode_project_name(Path::new(o)) == project);
        if live.contains(&session) || !named {
            continue;
        }
        let at = std::fs::metadata(&backup).and_then(|m| m.modified());
        let entry = Found {
            at: at.unwrap_or(SystemTime::UNIX_EPOCH),
            session: session.clone(),
            project,
            live: None,
            backup: Some((op.id.clone(), backup)),
        };
        // Operations come oldest first: a later backup of a session wins.
        if let Some(&i) = kept.get(&session) {
            found[i] = entry;
        } else {
            kept.insert(session, found.len());
            found.push(entry);
        }
    }
    Ok(())
}

/// The working folder the transcript's first records name.
fn cwd_of(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = open_regular(path, Links::Refuse).ok()?;
    let mut head = Vec::with_capacity(HEAD_BYTES);
    file.take(HEAD_BYTES as u64).read_to_end(&mut head).ok()?;
    head.split(|&b| b == b'\n')
        .filter(|l| memchr::memmem::find(l, b"\"cwd\"").is_some())
        .find_map(|l| {
            let v = record::decode(l)?;
            v.get("cwd")?.as_str().map(str::to_string)
        })
}

/// `cd '<cwd>' && claude --resume <session>`; a session only a backup
/// holds is first switched back to (its rebuild rolled back).
fn resume_line(session: &str, cwd: Option<&str>, backup_of: Option<&str>) -> String {
    let resume = match cwd {
        Some(cwd) => format!("cd {} && claude --resume {session}", quoted(cwd)),
        None => format!("claude --resume {session} (from its project's folder: no cwd recorded)"),
    };
    match backup_of {
        None => resume,
        Some(op) => format!(
            "only in ktr's backup: ktr rollback-request {op} --confirm ROLLBACK restores it (while that rebuild is activated), then {resume}"
        ),
    }
}

/// `text` as one shell word.
fn quoted(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@".contains(&b))
    {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}
