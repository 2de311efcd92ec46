//! A session's folder `<base>/<session>/` as recall reads it: the
//! offloaded tool results in `tool-results/` and the subagents'
//! transcripts in `subagents/` (searched under their parent session) —
//! only real folders inside `base`, regular files with plain names.

use std::path::{Path, PathBuf};

use super::hit_id::{self, HitFile, Part, confined, plain_name};
use ktr_engine::recall::{Source, Window};

/// The most files of one folder read per session.
const FILES_MAX: usize = 10_000;

/// `<base>/<session>/<name>/`, if both are real folders inside `base`.
pub(crate) fn real_subdir(base: &Path, session: &str, name: &str) -> Option<PathBuf> {
    let dir = base.join(session).join(name);
    let real = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let canonical = base.canonicalize().ok()?.join(session).join(name);
    (real(&base.join(session)) && real(&dir) && dir.canonicalize().ok()? == canonical)
        .then_some(canonical)
}

/// The regular files with plain names directly in `dir`, by name.
fn plain_files(dir: &Path, what: &str) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let path = confined(&e.path(), dir, what).ok()?;
            plain_name(&name).then_some((name, path))
        })
        .take(FILES_MAX)
        .collect();
    files.sort();
    files
}

/// The transcript `path` of `session` and its subagents' transcripts, as
/// sources (the parent first); `file` names a file of the session for its
/// hit ids.
pub(crate) fn session_sources(
    base: &Path,
    session: &str,
    path: &Path,
    origin: &str,
    file: impl Fn(Part) -> HitFile,
) -> Vec<Source> {
    let tool_results = real_subdir(base, session, "tool-results")
        .map(|dir| plain_files(&dir, "tool result"))
        .unwrap_or_default()
        .into_iter()
        .map(|(name, path)| {
            let token = hit_id::token(&file(Part::Offloaded(name.clone())));
            (token, name, path)
        })
        .collect();
    let mut out = vec![Source {
        session: session.to_string(),
        origin: origin.to_string(),
        path: path.to_path_buf(),
        token: hit_id::token(&file(Part::Transcript)),
        tool_results,
        window: Window::default(),
    }];
    let agents = real_subdir(base, session, "subagents")
        .map(|dir| plain_files(&dir, "subagent transcript"))
        .unwrap_or_default();
    for (name, path) in agents.into_iter().filter(|(n, _)| n.ends_with(".jsonl")) {
        out.push(Source {
            session: session.to_string(),
            origin: format!("subagent {} ({origin})", name.trim_end_matches(".jsonl")),
            path,
            token: hit_id::token(&file(Part::Subagent(name))),
            tool_results: Vec::new(),
            window: Window::default(),
        });
    }
    out
}
