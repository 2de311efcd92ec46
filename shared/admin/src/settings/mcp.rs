//! The MCP server registration in `~/.claude.json`.

/// Whether `~/.claude.json` text registers the MCP server `ktr` at user
/// scope running exactly `command args…` (what `claude mcp add --scope user
/// ktr -- command args…` writes).
pub fn mcp_registered(claude_json: &str, command: &str, args: &[String]) -> bool {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(claude_json) else {
        return false;
    };
    let Some(server) = doc.pointer("/mcpServers/ktr") else {
        return false;
    };
    let got_args: Vec<&str> = server
        .get("args")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    server.get("command").and_then(|c| c.as_str()) == Some(command)
        && got_args == args.iter().map(String::as_str).collect::<Vec<_>>()
}
