//! The files a search reads, and the file a hit id names — every one
//! through the one path rule: a transcript directly inside `project_dir`,
//! a backup directly inside its `artifacts/<id>/`, an offloaded file
//! directly inside a real (not symlinked) `<session>/tool-results/` of
//! either.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::everywhere::{self, SessionInfo};
use super::folder;
use super::hit_id::{HitFile, HitId, Part, confined};
use super::lineage::{self, Member};
use crate::operation::Store;
use ktr_base::ids::OperationId;
use ktr_base::{Error, Result};
use ktr_engine::recall::{self, Page, Source};

/// Which sessions a search reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// The current session and every session it was rebuilt from.
    #[default]
    Lineage,
    /// Every transcript in `project_dir`.
    Project,
    /// Every project's sessions and ktr's backups of them.
    All,
}

impl Scope {
    pub fn parse(text: &str) -> Result<Scope> {
        match text {
            "lineage" => Ok(Scope::Lineage),
            "project" => Ok(Scope::Project),
            "all" => Ok(Scope::All),
            other => Err(Error::usage(format!(
                "scope {other:?} is not one recall knows; give lineage (default), project or all"
            ))),
        }
    }
}

/// What a search will read.
#[derive(Debug, Serialize)]
pub struct Searched {
    #[serde(skip)]
    pub sources: Vec<Source>,
    /// The lineage, newest first (empty for the project scope).
    pub lineage: Vec<Member>,
    /// Sessions of the lineage no copy of which is left, with why.
    pub lost: Vec<Lost>,
    /// Every session searched, with how to resume it (`all`).
    pub sessions: Vec<SessionInfo>,
}

/// A session of the lineage recall cannot read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lost {
    pub session: String,
    pub why: String,
}

/// Why no copy of `m` can be read.
fn why_lost(store: &Store, project: &Path, m: &Member) -> String {
    let live = project.join(format!("{}.jsonl", m.session));
    if let Ok(meta) = std::fs::symlink_metadata(&live) {
        let ft = meta.file_type();
        let what = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_symlink() {
            "a symlink"
        } else if ft.is_dir() {
            "a folder"
        } else {
            "not a regular file"
        };
        return format!(
            "its transcript {} is {what}: recall reads only regular files",
            live.display()
        );
    }
    match &m.rebuilt_by {
        Some(op) if store.operation_path(op).exists() => {
            format!("Claude Code deleted its transcript and the backup of operation {op} is gone")
        }
        Some(op) => format!(
            "Claude Code deleted its transcript, and operation {op}, which kept its backup, was pruned (ktr prune --confirm FORGET)"
        ),
        None => format!("there is no transcript {}", live.display()),
    }
}

/// The sources of a search, newest first; `sessions` (ids or their
/// starts) keeps only those sessions.
pub fn sources(
    store: &Store,
    project: &Path,
    current: &str,
    scope: Scope,
    sessions: &[String],
    projects: &[String],
) -> Result<Searched> {
    for s in sessions {
        let plain =
            s.len() >= 4 && s.len() <= 36 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if !plain {
            return Err(Error::usage(format!(
                "session {:?} is not a session id or its start (at least 4 hex digits)",
                s.chars().take(60).collect::<String>()
            )));
        }
    }
    let project = project.canonicalize().map_err(|e| {
        Error::config(format!(
            "project_dir {} is not usable: {e}",
            project.display()
        ))
    })?;
    let wanted = |session: &str| {
        sessions.is_empty() || sessions.iter().any(|s| session.starts_with(s.as_str()))
    };
    let mut out = Searched {
        sources: Vec::new(),
        lineage: Vec::new(),
        lost: Vec::new(),
        sessions: Vec::new(),
    };
    match scope {
        Scope::Lineage => {
            out.lineage = lineage::lineage(store, &project, current)?;
            for m in out.lineage.iter().filter(|m| wanted(&m.session)) {
                match member_source(store, &project, m)? {
                    Some(s) => out.sources.extend(s),
                    None => out.lost.push(Lost {
                        session: m.session.clone(),
                        why: why_lost(store, &project, m),
                    }),
                }
            }
        }
        Scope::Project => {
            for (session, path) in project_transcripts(&project)? {
                if wanted(&session) {
                    out.sources.extend(live_source(&project, &session, &path)?);
                }
            }
        }
        Scope::All => {
            (out.sources, out.sessions) = everywhere::all(store, &project, projects, wanted)?;
        }
    }
    let lineage = match scope {
        Scope::Lineage => std::borrow::Cow::Borrowed(&out.lineage),
        Scope::Project | Scope::All => {
            std::borrow::Cow::Owned(lineage::lineage(store, &project, current)?)
        }
    };
    let windows = super::window::windows(store, &lineage);
    drop(lineage);
    for source in &mut out.sources {
        if let Some(w) = windows.get(&source.session) {
            source.window = w.clone();
        }
    }
    Ok(out)
}

/// A member's text: its live transcript if Claude Code kept it (it holds
/// the backup's lines and what came after), else the frozen backup; each
/// with its subagents' transcripts.
fn member_source(store: &Store, project: &Path, m: &Member) -> Result<Option<Vec<Source>>> {
    if let Some(live) = &m.live {
        return live_source(project, &m.session, live).map(Some);
    }
    let (Some(op), Some(backup)) = (&m.rebuilt_by, &m.backup) else {
        return Ok(None);
    };
    backup_source(store, op, &m.session, backup).map(Some)
}

/// A session's frozen backup in `artifacts/<op>/`, with its folder's files.
pub(crate) fn backup_source(
    store: &Store,
    op: &OperationId,
    session: &str,
    backup: &Path,
) -> Result<Vec<Source>> {
    let dir = store.dir().join("artifacts").join(op);
    let path = confined(backup, &dir, "backup")?;
    let file = |part: Part| HitFile::Backup {
        operation: op.clone(),
        part,
    };
    let origin = format!("backup of operation {}", &op[..8.min(op.len())]);
    Ok(folder::session_sources(&dir, session, &path, &origin, file))
}

/// A session's live transcript in `dir` (a project folder), with its
/// folder's files.
pub(crate) fn live_source(dir: &Path, session: &str, path: &Path) -> Result<Vec<Source>> {
    let path = confined(path, dir, "transcript")?;
    let file = |part: Part| HitFile::Live {
        session: session.to_string(),
        part,
    };
    Ok(folder::session_sources(
        dir,
        session,
        &path,
        "live transcript",
        file,
    ))
}

/// Every session transcript in the project, newest first.
pub(crate) fn project_transcripts(project: &Path) -> Result<Vec<(String, PathBuf)>> {
    let entries = std::fs::read_dir(project).map_err(|e| Error::io_at("list", project, &e))?;
    let mut found: Vec<(std::time::SystemTime, String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let session = name.strip_suffix(".jsonl")?;
            ktr_base::ids::SessionId::parse(session).ok()?;
            let meta = std::fs::symlink_metadata(e.path())
                .ok()
                .filter(std::fs::Metadata::is_file)?;
            Some((meta.modified().ok()?, session.to_string(), e.path()))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    Ok(found.into_iter().map(|(_, s, p)| (s, p)).collect())
}

/// The artifacts folder of the newest backup of `session` still on disk.
/// A `live:` id found before Claude Code deleted the transcript names the
/// same bytes there: a backup is a copy of the transcript's first bytes.
fn backup_of(store: &Store, session: &str) -> Option<PathBuf> {
    let name = format!("{session}.jsonl");
    store.list().ok()?.into_iter().rev().find_map(|op| {
        let dir = store.dir().join("artifacts").join(&op.id);
        let backup = op.backup?;
        (backup.file_name()? == name.as_str() && dir.join(&name).is_file()).then_some(dir)
    })
}

/// Page `page` of the hit `id`.
pub fn get(store: &Store, project: &Path, id: &str, page: u32) -> Result<Page> {
    let id = HitId::parse(id)?;
    let project = project.canonicalize().map_err(|e| {
        Error::config(format!(
            "project_dir {} is not usable: {e}",
            project.display()
        ))
    })?;
    let (base, session, part) = match &id.file {
        HitFile::Live { session, part } => {
            let live = project.join(format!("{session}.jsonl"));
            let base = match std::fs::symlink_metadata(&live) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    everywhere::project_of(&project, session)
                        .or_else(|| backup_of(store, session))
                        .unwrap_or_else(|| project.clone())
                }
                _ => project.clone(),
            };
            (base, session.clone(), part)
        }
        HitFile::Backup { operation, part } => {
            let op = store.load(operation)?;
            let backup = op.backup.ok_or_else(|| {
                Error::not_found(format!(
                    "operation {operation} keeps no backup (it was discarded or pruned)"
                ))
            })?;
            let session = backup
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            (store.dir().join("artifacts").join(operation), session, part)
        }
    };
    match part {
        Part::Transcript => {
            let path = confined(&base.join(format!("{session}.jsonl")), &base, "transcript")?;
            recall::get::record(&path, id.offset, page)
        }
        Part::Offloaded(name) => {
            let dir = folder::real_subdir(&base, &session, "tool-results").ok_or_else(|| {
                Error::not_found(format!("session {session} has no tool-results folder here"))
            })?;
            let path = confined(&dir.join(name), &dir, "tool result")?;
            recall::get::text_file(&path, page)
        }
        Part::Subagent(name) => {
            let dir = folder::real_subdir(&base, &session, "subagents").ok_or_else(|| {
                Error::not_found(format!("session {session} has no subagents folder here"))
            })?;
            let path = confined(&dir.join(name), &dir, "subagent transcript")?;
            recall::get::record(&path, id.offset, page)
        }
    }
}
