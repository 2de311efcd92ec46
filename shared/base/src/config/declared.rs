//! Every config key, declared once: its name, type (with its range or
//! choices), default and one line of doc. Parsing reads the type and the
//! default from here ([`super::keys::Keys`]), the unknown-key hint the
//! names; README's table is rendered from here, and a test holds SPEC's
//! and the Chinese README's tables and the install template to it
//! (`config/docs.rs`). A new key: one row here, plus its field in
//! [`super::Config`] and the line that reads it.

use super::ranges::{Range, Words, range};

/// One config key.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    pub ty: Type,
    pub default: Unset,
    /// The rule in words for README's table (Markdown, one line); a range
    /// or the choices are put before it.
    pub doc: &'static str,
}

/// What a key's value must be.
#[derive(Debug, Clone, Copy)]
pub enum Type {
    Text,
    /// A path; `~` is the home folder, a relative one is beside the config.
    Path,
    Bool,
    /// A regular expression, checked at load.
    Pattern {
        ignore_case: bool,
    },
    /// A command line: an array of words, or a string split shell-style.
    Argv,
    /// A table of environment variables.
    Env,
    /// `"auto"` or a number of tokens.
    Window,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// A whole number in this range.
    Whole(Range),
    /// A number (whole or not) in this range.
    Number(Range),
}

/// What an unset key is: its default.
#[derive(Debug, Clone, Copy)]
pub enum Unset {
    /// It must be set.
    Required,
    /// This value, as a person writes it (a string without its quotes).
    Is(&'static str),
    /// No value: this meaning, in words.
    Means(&'static str),
}

const fn key(name: &'static str, ty: Type, default: &'static str, doc: &'static str) -> Key {
    Key {
        name,
        ty,
        default: Unset::Is(default),
        doc,
    }
}

const fn above(min: f64, max: f64) -> Range {
    Range {
        min_exclusive: true,
        ..range(min, max)
    }
}

const fn off_or(min: f64, max: f64) -> Range {
    Range {
        zero_is_off: true,
        ..range(min, max)
    }
}

/// Every key, in the order README lists them.
pub const KEYS: &[Key] = &[
    Key {
        name: "project_dir",
        ty: Type::Path,
        default: Unset::Means("each session's own: the folder of its transcript"),
        doc: "Claude Code project folder holding `<session>.jsonl`; set, ktr serves that one project only (required for `systemd` and `pointer`); unset, every session whose transcript lies in Claude Code's projects folder",
    },
    key(
        "state_dir",
        Type::Path,
        "~/.local/state/ktr",
        "operations, lock, logs, artifacts; not empty; a folder of ktr's own: not your home, `/`, a folder holding your home or `project_dir`, nor a folder of other files; an existing one must be yours and not writable by others",
    ),
    key(
        "activation",
        Type::OneOf(&["tmux", "systemd", "pointer"]),
        "tmux",
        "",
    ),
    Key {
        name: "tmux_target",
        ty: Type::Text,
        default: Unset::Means("the pane the session's Claude Code runs in, found from its process"),
        doc: "non-empty, no control characters, not ending in `;` (tmux's command separator); set, it wins over the pane found",
    },
    Key {
        name: "tmux_socket",
        ty: Type::Text,
        default: Unset::Means("the default server"),
        doc: "the tmux server of a configured `tmux_target`: a name (`tmux -L NAME`) or a socket path (`tmux -S PATH`; inside tmux, `$TMUX` up to the first comma); `$KTR_TMUX_SOCKET` overrides it (the tests pin every process to a private server with it); a pane found is on its own server",
    },
    Key {
        name: "claude_workdir",
        ty: Type::Path,
        default: Unset::Means("the working directory of the session's Claude Code process"),
        doc: "must encode to `project_dir`'s name",
    },
    key("verify_workdir_matches_project", Type::Bool, "true", ""),
    key(
        "resume_command",
        Type::Argv,
        r#"["claude","--resume","{session_id}"]"#,
        "argv (a string is split shell-style); exactly one `{session_id}`",
    ),
    key(
        "resume_env",
        Type::Env,
        "{}",
        "extra environment for the resumed process",
    ),
    key(
        "systemd_unit",
        Type::Text,
        "claude-session.service",
        "must end in `.service` (systemd mode)",
    ),
    key(
        "resume_pointer_path",
        Type::Path,
        "~/.local/state/ktr/resume_session",
        "pointer file",
    ),
    key(
        "systemd_manager",
        Type::OneOf(&["system", "user"]),
        "system",
        "`systemctl --user`, `systemd-run --user`; a system unit needs root",
    ),
    key(
        "systemd_restart_timeout_seconds",
        Type::Number(range(10.0, 3600.0)),
        "180",
        "",
    ),
    key(
        "dirty_budget_bytes",
        Type::Whole(range(0.0, 1_099_511_627_776.0)),
        "524288",
        "0 disables the byte trigger",
    ),
    key(
        "rebuild_on_original_image_view",
        Type::Bool,
        "true",
        "an image shown through a tool (e.g. Read on a picture) advises a rebuild",
    ),
    key(
        "carry_max_tokens",
        Type::Whole(off_or(5000.0, 100_000_000.0)),
        "0",
        "0: no cap",
    ),
    key(
        "carry_overflow",
        Type::OneOf(&["drop_oldest", "block"]),
        "drop_oldest",
        "",
    ),
    key(
        "max_event_chars",
        Type::Whole(off_or(500.0, 1_000_000_000.0)),
        "0",
        "middle elision with a visible marker",
    ),
    key(
        "include_open_tail",
        Type::Bool,
        "true",
        "keep the final unanswered turn",
    ),
    key(
        "freeze_startup_snapshot",
        Type::Bool,
        "true",
        "carry the startup context (SessionStart hook context, or an older file's first `<system-reminder>` record) once",
    ),
    key(
        "carry_command_expansions",
        Type::Bool,
        "true",
        "carry a custom slash command's expansion with the command, as the model read it",
    ),
    key(
        "stamp_turns",
        Type::Bool,
        "true",
        "prefix each turn's first user item with its time (never from a broken timestamp: the nearest earlier parseable one, or none)",
    ),
    key(
        "stamp_template",
        Type::Text,
        "[发生时间: {timestamp}]",
        "`{timestamp}` required",
    ),
    key(
        "startup_header_template",
        Type::Text,
        "[续窗启动快照 · 冻结于 {timestamp}]",
        "",
    ),
    key(
        "poison_pattern",
        Type::Pattern { ignore_case: true },
        "(AUP|Acceptable Use|policy violation|policy blocked|refusal loop|毒上下文|中毒|拒绝循环)",
        "case-insensitive regex; ≥ 2 hits in the last 10 turns blocks",
    ),
    key(
        "reply_tool_pattern",
        Type::Pattern { ignore_case: false },
        r"^mcp__[\w.-]*(companion|telegram)[\w.-]*__reply$",
        "assistant speech sent through channel tools",
    ),
    key(
        "on_malformed_line",
        Type::OneOf(&["block", "skip"]),
        "block",
        "",
    ),
    key("history", Type::OneOf(&["chain", "file"]), "chain", ""),
    key(
        "activation_delay_seconds",
        Type::Number(range(0.0, 3600.0)),
        "0",
        "a pause before a rebuild is prepared; none is needed: prepare waits for the reply that asked to be written, and keys typed during the switch are kept",
    ),
    key(
        "stable_file_seconds",
        Type::Number(above(0.0, 600.0)),
        "1",
        "less than `stable_file_timeout_seconds`; how long the transcript must stay unchanged before it is copied when the reply that asked is not known (a request from the command line); otherwise that reply's closing record, or 0.2 s of quiet, is enough",
    ),
    key(
        "stable_file_timeout_seconds",
        Type::Number(above(0.0, 3600.0)),
        "10",
        "greater than `stable_file_seconds`",
    ),
    key(
        "healthcheck_seconds",
        Type::Number(above(0.0, 3600.0)),
        "5",
        "the upper bound of the health check",
    ),
    key(
        "healthcheck_min_seconds",
        Type::Number(range(0.0, 3600.0)),
        "1",
        "at most `healthcheck_seconds` (unset: half of a `healthcheck_seconds` below 2); tmux with ktr-ack: how long the new Claude Code must stay alive after its `SessionStart` (resume) receipt",
    ),
    key(
        "source_change_retries",
        Type::Whole(range(0.0, 100.0)),
        "2",
        "",
    ),
    key(
        "request_ttl_hours",
        Type::Number(above(0.0, 87_600.0)),
        "24",
        "a pending request older than this becomes `expired` (its session never stopped); so does an offer nobody typed (outside tmux), this long after it was made",
    ),
    key(
        "pointer_health_probe",
        Type::Bool,
        "true",
        "pointer mode, with ktr-ack and ktr-prompt installed: before `activated`, resume the new session once with `resume_command` (`-p` added) and a prompt ktr-prompt refuses (no model call); no `SessionStart` receipt → the old pointer is put back",
    ),
    key(
        "tmux_switch_in_place",
        Type::Bool,
        "true",
        "tmux: switch by typing `/resume <id>` into the running Claude Code (same process; the respawn only as the fallback); `false`: always respawn the pane with `resume_command` (e.g. to start with new launch flags)",
    ),
    key(
        "context_window_tokens",
        Type::Window,
        "auto",
        "`auto` (the statusline's last report for the session, else the model id) or a number ≥ 10000",
    ),
    key(
        "advise_at_percent",
        Type::Whole(range(0.0, 100.0)),
        "70",
        "the Stop hook advises at this share of Claude Code's compaction point (window − 33k), then at 80 and at 90 (88 on a 200k window: the last band leaves one long reply, 20k); 0 turns advice off",
    ),
    key(
        "advise_min_free_percent",
        Type::Whole(range(0.0, 100.0)),
        "50",
        "advise only when a rebuild would free at least this much",
    ),
    key(
        "on_auto_compaction",
        Type::OneOf(&["advise", "rebuild"]),
        "advise",
        "a standing approval: block Claude Code's auto-compaction and rebuild instead",
    ),
];

impl Key {
    /// The declaration of `name` (every key read has one).
    pub fn of(name: &str) -> &'static Key {
        KEYS.iter()
            .find(|k| k.name == name)
            .unwrap_or_else(|| unreachable!("config key {name} is not declared in KEYS"))
    }

    /// The default as a TOML value (`None`: required or unset).
    pub(super) fn default_value(&self) -> Option<toml::Value> {
        let Unset::Is(text) = self.default else {
            return None;
        };
        let literal = |text: &str| {
            format!("v = {text}")
                .parse::<toml::Table>()
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| unreachable!("the default of {} is not TOML", self.name))
        };
        Some(match self.ty {
            Type::Bool | Type::Whole(_) | Type::Number(_) | Type::Argv | Type::Env => literal(text),
            Type::Text | Type::Path | Type::Pattern { .. } | Type::Window | Type::OneOf(_) => {
                toml::Value::String(text.to_string())
            }
        })
    }

    /// The rule cell of README's table: the range or the choices, then the doc.
    pub fn rule(&self) -> String {
        let lead = match self.ty {
            Type::OneOf(words) => Some(
                words
                    .iter()
                    .map(|w| format!("`{w}`"))
                    .collect::<Vec<_>>()
                    .join(" \\| "),
            ),
            Type::Whole(r) | Type::Number(r) => Some(r.words(&Words::EN)),
            _ => None,
        };
        match (lead, self.doc) {
            (None, doc) => doc.to_string(),
            (Some(lead), "") => lead,
            (Some(lead), doc) if matches!(self.ty, Type::OneOf(_)) => format!("{lead} ({doc})"),
            (Some(lead), doc) => format!("{lead}; {doc}"),
        }
    }

    /// The default cell of README's table.
    #[cfg(test)]
    pub(crate) fn default_cell(&self) -> String {
        match self.default {
            Unset::Required => "required".into(),
            Unset::Means(means) => format!("({means})"),
            Unset::Is(text) => format!("`{}`", text.replace('|', "\\|")),
        }
    }
}
