//! The files a search reads, and the file a hit id names — every one
//! through the one path rule: a transcript directly inside `project_dir`,
//! a backup directly inside its `artifacts/<id>/`, an offloaded file
//! directly inside a real (not symlinked) `<session>/tool-results/` of
//! either.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::hit_id::{self, HitFile, HitId, confined, plain_name};
use super::lineage::{self, Member};
use crate::operation::Store;
use ktr_base::{Error, Result};
use ktr_engine::recall::{self, Page, Source, Window};

/// The most offloaded files read per session.
const OFFLOADED_MAX: usize = 10_000;

/// Which sessions a search reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// The current session and every session it was rebuilt from.
    #[default]
    Lineage,
    /// Every transcript in `project_dir`.
    Project,
}

impl Scope {
    pub fn parse(text: &str) -> Result<Scope> {
        match text {
            "lineage" => Ok(Scope::Lineage),
            "project" => Ok(Scope::Project),
            other => Err(Error::usage(format!(
                "scope {other:?} is not one recall knows; give lineage (default) or project"
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
    };
    match scope {
        Scope::Lineage => {
            out.lineage = lineage::lineage(store, &project, current)?;
            for m in out.lineage.iter().filter(|m| wanted(&m.session)) {
                match member_source(store, &project, m)? {
                    Some(s) => out.sources.push(s),
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
                    out.sources.push(live_source(&project, &session, &path)?);
                }
            }
        }
    }
    let lineage = match scope {
        Scope::Lineage => std::borrow::Cow::Borrowed(&out.lineage),
        Scope::Project => std::borrow::Cow::Owned(lineage::lineage(store, &project, current)?),
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
/// the backup's lines and what came after), else the frozen backup.
fn member_source(store: &Store, project: &Path, m: &Member) -> Result<Option<Source>> {
    if let Some(live) = &m.live {
        return live_source(project, &m.session, live).map(Some);
    }
    let (Some(op), Some(backup)) = (&m.rebuilt_by, &m.backup) else {
        return Ok(None);
    };
    let dir = store.dir().join("artifacts").join(op);
    let path = confined(backup, &dir, "backup")?;
    let file = |name: Option<String>| HitFile::Backup {
        operation: op.clone(),
        offloaded: name,
    };
    Ok(Some(Source {
        session: m.session.clone(),
        origin: format!("backup of operation {}", &op[..8.min(op.len())]),
        path,
        token: hit_id::token(&file(None)),
        tool_results: offloaded(&dir, &m.session, |n| {
            hit_id::token(&file(Some(n.to_string())))
        }),
        window: Window::default(),
    }))
}

fn live_source(project: &Path, session: &str, path: &Path) -> Result<Source> {
    let path = confined(path, project, "transcript")?;
    let file = |name: Option<String>| HitFile::Live {
        session: session.to_string(),
        offloaded: name,
    };
    Ok(Source {
        session: session.to_string(),
        origin: "live transcript".into(),
        path,
        token: hit_id::token(&file(None)),
        tool_results: offloaded(project, session, |n| {
            hit_id::token(&file(Some(n.to_string())))
        }),
        window: Window::default(),
    })
}

/// `<base>/<session>/tool-results/`, if both are real folders inside `base`.
fn tool_results_dir(base: &Path, session: &str) -> Option<PathBuf> {
    let dir = base.join(session).join("tool-results");
    let real = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let canonical = base.canonicalize().ok()?.join(session).join("tool-results");
    (real(&base.join(session)) && real(&dir) && dir.canonicalize().ok()? == canonical)
        .then_some(canonical)
}

/// The offloaded files of a session (regular files with plain names).
fn offloaded(
    base: &Path,
    session: &str,
    token: impl Fn(&str) -> String,
) -> Vec<(String, String, PathBuf)> {
    let Some(dir) = tool_results_dir(base, session) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let path = confined(&e.path(), &dir, "tool result").ok()?;
            plain_name(&name).then(|| (token(&name), name, path))
        })
        .take(OFFLOADED_MAX)
        .collect();
    files.sort_by(|a, b| a.1.cmp(&b.1));
    files
}

/// Every session transcript in the project, newest first.
fn project_transcripts(project: &Path) -> Result<Vec<(String, PathBuf)>> {
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
    let (base, session, offloaded) = match &id.file {
        HitFile::Live { session, offloaded } => {
            let live = project.join(format!("{session}.jsonl"));
            let base = match std::fs::symlink_metadata(&live) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    backup_of(store, session).unwrap_or_else(|| project.clone())
                }
                _ => project.clone(),
            };
            (base, session.clone(), offloaded)
        }
        HitFile::Backup {
            operation,
            offloaded,
        } => {
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
            (
                store.dir().join("artifacts").join(operation),
                session,
                offloaded,
            )
        }
    };
    match offloaded {
        None => {
            let path = confined(&base.join(format!("{session}.jsonl")), &base, "transcript")?;
            recall::get::record(&path, id.offset, page)
        }
        Some(name) => {
            let dir = tool_results_dir(&base, &session).ok_or_else(|| {
                Error::not_found(format!("session {session} has no tool-results folder here"))
            })?;
            let path = confined(&dir.join(name), &dir, "tool result")?;
            recall::get::text_file(&path, page)
        }
    }
}
