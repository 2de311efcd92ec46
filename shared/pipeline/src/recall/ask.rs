//! One recall request as the CLI and the MCP tool both take it (plain
//! words), checked into an engine search over the chosen sources.

use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;

use super::lineage::Member;
use super::sources::{Scope, sources};
use crate::operation::Store;
use ktr_base::config::Config;
use ktr_base::time::parse_rfc3339;
use ktr_base::{Error, Result};
use ktr_engine::recall::{self, Filter, Found, Kind, Query, Search};

/// The most records shown on each side of a hit.
pub const MAX_CONTEXT: usize = 20;

/// A recall request.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    pub query: String,
    pub regex: bool,
    /// Kind names (`user`, `assistant`, `tool_use`, `tool_result`,
    /// `thinking`, `injection`/`attachment`, `image`); empty: all.
    pub kinds: Vec<String>,
    pub tool: Option<String>,
    /// Session ids or their starts.
    pub sessions: Vec<String>,
    /// RFC 3339 (`2026-05-01T12:00:00Z`) or a day (`2026-05-01`).
    pub since: Option<String>,
    pub until: Option<String>,
    /// Inclusive turn range.
    pub turns: Option<(u32, u32)>,
    pub limit: usize,
    pub count: bool,
    /// Show each copy of what the window carries as a hit of its own.
    pub all_copies: bool,
    /// Records shown before and after each hit.
    pub context: usize,
    pub scope: Scope,
    /// `all`: only these projects (folder names or working folders).
    pub projects: Vec<String>,
    /// Only tool calls whose input names this path, and their results.
    pub file: Option<String>,
    /// The session whose lineage is searched (default: the newest transcript).
    pub current: Option<String>,
}

/// What recall answers.
#[derive(Debug, Serialize)]
pub struct Answer {
    pub query: String,
    pub scope: &'static str,
    pub current: String,
    pub lineage: Vec<Member>,
    /// Sessions of the lineage whose every copy is gone, with why.
    pub lost: Vec<super::Lost>,
    /// `all`: every session searched, with how to resume it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<super::SessionInfo>,
    #[serde(flatten)]
    pub found: Found,
}

/// Run `ask` against the configured project and state dir.
pub fn recall(config: &Config, ask: &Ask) -> Result<Answer> {
    let search = Search {
        query: if ask.regex {
            Query::regex(&ask.query)?
        } else {
            Query::literal(&ask.query)?
        },
        filter: filter(ask)?,
        limit: ask.limit,
        count: ask.count,
        all_copies: ask.all_copies,
        context: ask.context.min(MAX_CONTEXT),
    };
    let current = match &ask.current {
        Some(s) => ktr_base::ids::SessionId::parse(s)?.to_string(),
        None => newest_session(config)?,
    };
    let store = Store::at(&config.state_dir);
    let searched = sources(
        &store,
        &config.project_dir,
        &current,
        ask.scope,
        &ask.sessions,
        &ask.projects,
    )?;
    let found = recall::search(&searched.sources, &search)?;
    Ok(Answer {
        query: ask.query.clone(),
        scope: match ask.scope {
            Scope::Lineage => "lineage",
            Scope::Project => "project",
            Scope::All => "all",
        },
        current,
        lineage: searched.lineage,
        lost: searched.lost,
        sessions: searched.sessions,
        found,
    })
}

fn newest_session(config: &Config) -> Result<String> {
    let path = ktr_engine::plan::resolve_transcript(config, None)?;
    Ok(stem(&path))
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn filter(ask: &Ask) -> Result<Filter> {
    let kinds = ask
        .kinds
        .iter()
        .map(|k| {
            Kind::parse(k).ok_or_else(|| {
                Error::usage(format!(
                    "kind {:?} is not one recall knows; give user, assistant, tool_use, tool_result, thinking, injection (or attachment) or image",
                    k.chars().take(40).collect::<String>()
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if let Some(tool) = &ask.tool
        && (tool.is_empty() || tool.len() > 200)
    {
        return Err(Error::usage(
            "tool must be a tool's name, like Bash, Read or mcp__server__tool",
        ));
    }
    if let Some((from, to)) = ask.turns
        && from > to
    {
        return Err(Error::usage(format!(
            "turns {from}-{to} is empty: the first turn comes first"
        )));
    }
    if let Some(file) = &ask.file
        && (file.is_empty() || file.len() > 1000)
    {
        return Err(Error::usage(
            "file must be a path as a tool call names it, like src/main.rs or /etc/hosts",
        ));
    }
    Ok(Filter {
        kinds,
        tool: ask.tool.clone(),
        file: ask.file.clone(),
        since: ask
            .since
            .as_deref()
            .map(|t| time(t, "since", "T00:00:00Z"))
            .transpose()?,
        until: ask
            .until
            .as_deref()
            .map(|t| time(t, "until", "T23:59:59.999Z"))
            .transpose()?,
        turns: ask.turns,
    })
}

/// An RFC 3339 UTC time, or a day (its start for since, its end for until).
fn time(text: &str, what: &str, day_suffix: &str) -> Result<SystemTime> {
    let full = if text.len() == 10 {
        format!("{text}{day_suffix}")
    } else {
        text.to_string()
    };
    parse_rfc3339(&full).ok_or_else(|| {
        Error::usage(format!(
            "{what} {:?} is not a time; give 2026-05-01 or 2026-05-01T12:00:00Z (UTC)",
            text.chars().take(40).collect::<String>()
        ))
    })
}

/// A turn range as written: `5`, `5-9`, `5-` (to the end), `-9`.
pub fn parse_turns(text: &str) -> Result<(u32, u32)> {
    let bad = || {
        Error::usage(format!(
            "turns {text:?} is not a range; give 5, 5-9, 5- or -9"
        ))
    };
    let num = |s: &str, empty: u32| {
        if s.is_empty() {
            Ok(empty)
        } else {
            s.trim().parse().map_err(|_| bad())
        }
    };
    if let Some((a, b)) = text.split_once('-') {
        return Ok((num(a, 0)?, num(b, u32::MAX)?));
    }
    let n = num(text, 0)?;
    Ok((n, n))
}
