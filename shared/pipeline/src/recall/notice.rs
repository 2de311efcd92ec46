//! The one line a rebuilt session is told: ktr-ack's
//! first `SessionStart(resume)` answer for the candidate adds it as
//! `additionalContext`, so the model knows what the rebuild left out of its
//! window, that recall finds it verbatim, and when to use it (before running
//! a command again or re-reading a file whose output left the window).
//! Claude Code 2.1.328 defers MCP tools (it names them for `ToolSearch` to
//! load, measured by `claude_recall`), so the line says to load them first.
//! Only when the MCP server is registered (the tool must exist to be named).

use std::path::Path;

use crate::operation::Operation;
use ktr_base::open::{Links, cap, read_capped};

/// The line for the rebuilt session of `op`, if the tool is there to use.
/// The tool names are the ones the model sees: `mcp__ktr__…` for the server
/// registered in `~/.claude.json`, `mcp__plugin_ktr_ktr__…` for the plugin's.
pub fn context_for(op: &Operation, home: &Path) -> Option<String> {
    let prefix = if mcp_registered(home) {
        crate::plugin::TOOL_PREFIX
    } else if crate::plugin::enabled(home) {
        crate::plugin::PLUGIN_TOOL_PREFIX
    } else {
        return None;
    };
    let turns = op.stats.as_ref().map_or(0, |s| s.selected_turns);
    let source = op.session_id.as_deref().unwrap_or("the previous session");
    Some(format!(
        "ktr rebuilt this session: {turns} turns of {source} were carried verbatim; earlier tool output, files read, thinking and injections are not in this window — {prefix}thread_rebuild_recall finds them verbatim (with their session, line and time): call it before running a command again or re-reading a file whose output is no longer in this window; {prefix}thread_rebuild_recall_get reads one whole (both are deferred tools: load them with ToolSearch first)."
    ))
}

/// Whether `~/.claude.json` registers the ktr MCP server (`mcpServers.ktr`,
/// user scope or a project's).
pub fn mcp_registered(home: &Path) -> bool {
    let Ok(Some(bytes)) = read_capped(&home.join(".claude.json"), cap::SETTINGS, Links::Follow)
    else {
        return false;
    };
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return false;
    };
    doc.pointer("/mcpServers/ktr").is_some()
        || doc
            .get("projects")
            .and_then(|p| p.as_object())
            .is_some_and(|p| p.values().any(|v| v.pointer("/mcpServers/ktr").is_some()))
}
