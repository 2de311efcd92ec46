//! Recall: a verbatim search over a session's history — the transcripts
//! and frozen backups the caller names — with the source of every hit.
//! No index, no scoring, no summaries: one streaming pass per file, a
//! literal prefilter over the raw bytes, texts decoded only for lines that
//! may match. Read-only; the caller decides which files may be read (the
//! pipeline's lineage, through the one path rule).

pub mod get;
pub mod lines;
pub mod query;
pub mod record;
mod resolve;
mod search;
pub mod snippet;
mod turn;

use std::path::PathBuf;
use std::time::SystemTime;

use serde::Serialize;

pub use get::{PAGE_BYTES, Page};
pub use query::Query;
pub use record::Kind;
pub use search::search;

/// The most hits one search returns.
pub const MAX_LIMIT: usize = 500;

/// A file to search: one session's transcript (live or a backup), with
/// its offloaded tool results.
#[derive(Debug, Clone)]
pub struct Source {
    /// The session it belongs to.
    pub session: String,
    /// Where its text comes from, for a person (`live`, `backup <op>`).
    pub origin: String,
    /// The transcript (already checked by the caller's path rule).
    pub path: PathBuf,
    /// The hit id's prefix for this file (the caller maps it back).
    pub token: String,
    /// `<session>/tool-results/` files: (hit id prefix, name, path).
    pub tool_results: Vec<(String, String, PathBuf)>,
}

/// What to keep.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Empty: every kind.
    pub kinds: Vec<Kind>,
    /// A tool's exact name (`Bash`, `mcp__x__y`): its calls and results.
    pub tool: Option<String>,
    pub since: Option<SystemTime>,
    pub until: Option<SystemTime>,
    /// Inclusive turn range.
    pub turns: Option<(u32, u32)>,
}

/// One search.
#[derive(Debug)]
pub struct Search {
    pub query: Query,
    pub filter: Filter,
    /// 1..=[`MAX_LIMIT`].
    pub limit: usize,
    /// Count every match (reads everything) instead of stopping at the limit.
    pub count: bool,
}

/// One match, with where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    /// `get` reads the record with it: the file and the byte offset.
    pub id: String,
    pub session: String,
    /// The first 8 characters of the session id.
    pub session_short: String,
    pub origin: String,
    /// 1-based line of the record in its transcript.
    pub line: u64,
    pub timestamp: Option<String>,
    /// Typed prompts up to this record in its file (the turn it belongs to).
    pub turn: u32,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// A tool call's input in one line (the command, the file…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The offloaded `tool-results/` file the match is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offloaded: Option<String>,
    /// The `get` page that holds the match (offloaded files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// A line of a huge record too large to decode: the snippet is raw JSON.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub raw: bool,
    pub snippet: String,
    #[serde(skip)]
    pub(crate) tool_use_id: Option<String>,
    /// The offloaded file's name (`tool-results/<name>`), to cite it.
    #[serde(skip)]
    pub(crate) via: Option<String>,
}

/// What a search found.
#[derive(Debug, Serialize)]
pub struct Found {
    pub hits: Vec<Hit>,
    /// Matches past the limit seen before stopping (there may be more).
    pub more_at_least: u64,
    /// Every match, when counting was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Whether every file was read to its end.
    pub complete: bool,
    pub files_searched: u32,
    pub bytes_searched: u64,
}
