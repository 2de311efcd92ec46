//! Recall: a verbatim search over a session's history — the transcripts
//! and frozen backups the caller names — with the source of every hit.
//! No index, no scoring, no summaries: one streaming pass per file, a
//! literal prefilter over the raw bytes, texts decoded only for lines that
//! may match. Read-only; the caller decides which files may be read (the
//! pipeline's lineage, through the one path rule).

mod calls;
pub mod context;
mod fold;
pub mod get;
pub mod lines;
pub mod query;
mod raw;
mod raw_regex;
pub mod record;
mod resolve;
mod search;
pub mod snippet;
mod turn;
pub mod window;

use std::path::PathBuf;
use std::time::SystemTime;

use serde::Serialize;

pub use get::{PAGE_BYTES, Page};
pub use query::Query;
pub use record::Kind;
pub use search::search;
pub use window::Window;

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
    /// What of this file the current window carries.
    pub window: Window,
}

/// What to keep.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Empty: every kind.
    pub kinds: Vec<Kind>,
    /// A tool's exact name (`Bash`, `mcp__x__y`): its calls and results.
    pub tool: Option<String>,
    /// A path: the tool calls whose input names it, and their results.
    pub file: Option<String>,
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
    /// Show the copies of what the window carries as hits of their own
    /// (by default each is folded into one line that does not use the limit).
    pub all_copies: bool,
    /// Records shown before and after each hit.
    pub context: usize,
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
    /// A tool result's call, or a tool call's result (linked by
    /// `tool_use_id`): one hit, the other record named here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<Linked>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Linked>,
    /// The typed prompt of the turn the hit belongs to (its start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The records around the hit, when asked for (`context`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<context::Nearby>,
    /// The record's byte offset in its transcript.
    #[serde(skip)]
    pub(crate) offset: u64,
    /// The window copy this hit's text stands for, if the window carries it.
    #[serde(skip)]
    pub(crate) window: Option<String>,
    /// Where the typed prompt of its turn starts.
    #[serde(skip)]
    pub(crate) prompt_at: Option<u64>,
    /// Its source's index in the search.
    #[serde(skip)]
    pub(crate) source: usize,
    #[serde(skip)]
    pub(crate) tool_use_id: Option<String>,
    /// The offloaded file's name (`tool-results/<name>`), to cite it.
    #[serde(skip)]
    pub(crate) via: Option<String>,
}

/// The other record of a tool call and its result.
#[derive(Debug, Clone, Serialize)]
pub struct Linked {
    /// Its id for `get`.
    pub id: String,
    pub line: u64,
}

/// A match on text the current window carries, folded into one line with
/// its older copies (it does not use the limit).
#[derive(Debug, Clone, Serialize)]
pub struct Carried {
    #[serde(flatten)]
    pub hit: Hit,
    /// Copies of the same record in older sessions of the lineage found.
    pub older_copies: u32,
}

/// What a search found.
#[derive(Debug, Serialize)]
pub struct Found {
    pub hits: Vec<Hit>,
    /// Matches on text the window carries, one line each (newest copy).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
    /// Carried texts found past the limit.
    #[serde(skip_serializing_if = "is_zero")]
    pub carried_more: u64,
    /// Matches past the limit seen before stopping (the search stops once
    /// it has seen one: there may be more).
    pub more_at_least: u64,
    /// Every match, when counting was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Whether every file was read to its end.
    pub complete: bool,
    pub files_searched: u32,
    pub bytes_searched: u64,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}
