//! The enumerated settings: how to switch, what to do on overflow, on a
//! malformed line, on Claude Code's auto-compaction, the window size.

/// How the running Claude Code is switched (SPEC §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Tmux,
    Systemd,
    Pointer,
}

/// What a token cap does when the conversation is larger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CarryOverflow {
    DropOldest,
    Block,
}

/// What prepare does with lines that are not JSON objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMalformed {
    Block,
    Skip,
}

/// How the conversation is found in the file (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryMode {
    Chain,
    File,
}

impl std::fmt::Display for HistoryMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HistoryMode::Chain => "chain",
            HistoryMode::File => "file",
        })
    }
}

/// What `ktr-precompact` does when Claude Code is about to auto-compact
/// and no rebuild is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAutoCompaction {
    /// Let it compact; say that a lossless rebuild was possible.
    Advise,
    /// The human's standing approval: block it and rebuild instead.
    Rebuild,
}

/// `context_window_tokens`: how large the window is taken to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WindowSetting {
    /// Statusline report, else model heuristics.
    #[default]
    Auto,
    /// A fixed size.
    Tokens(u64),
}

/// Where the tmux pane a session is switched in comes from (SPEC §12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaneChoice {
    /// `tmux_target` (and `tmux_socket`) as configured: it wins.
    Configured,
    /// Not configured: the pane the session's Claude Code runs in, still
    /// to be found from its process.
    Find,
    /// Found from the Claude Code process: `tmux_target` is the pane's id
    /// (`%N`), `tmux_socket` its server's socket path.
    Found,
    /// Not configured, and the session's Claude Code runs in no tmux pane
    /// that could be proven its own: why, in one line.
    NotFound(String),
    /// Not configured, no tmux pane, but the session's Claude Code (`pid`,
    /// `start_time`: `/proc/<pid>/stat` field 22) has a terminal: the
    /// person switches by typing the line ktr offers (the hand target).
    ByHand { pid: u32, start_time: u64 },
}
