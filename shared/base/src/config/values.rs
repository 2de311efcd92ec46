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
