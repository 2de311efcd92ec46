//! What every Claude Code hook shares: the command line (`--config PATH`),
//! stdin read with a cap, the exact wire types of each event's stdin
//! (unknown fields ignored), and the reply printed on stdout.
//!
//! A hook never fails Claude Code: it always exits 0 with one JSON line on
//! stdout. The wire types stay apart from the domain: the conversion (e.g.
//! a session id that must validate) is where each hook's policy lives.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::pipeline::process;

/// Larger hook input than this is refused unread.
pub const STDIN_LIMIT: usize = 1 << 20;

/// The Stop hook's stdin as Claude Code 2.1.x writes it.
#[derive(Debug, Deserialize)]
pub struct StopInput {
    pub session_id: String,
    pub transcript_path: PathBuf,
}

/// The `SessionStart` hook's stdin.
#[derive(Debug, Deserialize)]
pub struct SessionStartInput {
    pub session_id: String,
    /// `startup`, `resume`, `clear` or `compact`.
    #[serde(default)]
    pub source: Option<String>,
    /// A number of tokens; tolerated as any JSON value.
    #[serde(default)]
    pub context_tokens: Option<serde_json::Value>,
}

/// The `UserPromptSubmit` hook's stdin.
#[derive(Debug, Deserialize)]
pub struct PromptInput {
    pub session_id: String,
    /// The prompt's text.
    #[serde(default)]
    pub prompt: Option<String>,
}

/// What a hook tells Claude Code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Nothing to show: `{"suppressOutput":true}`.
    Quiet,
    /// One line the human sees: `{"systemMessage":…}`.
    Message(String),
    /// `UserPromptSubmit` only: do not send the prompt; Claude Code shows the
    /// reason and gives the text back (`{"decision":"block","reason":…}`).
    Block(String),
}

impl Reply {
    /// The JSON line for stdout.
    pub fn to_json(&self) -> String {
        match self {
            Reply::Quiet => serde_json::json!({"suppressOutput": true}),
            Reply::Message(m) => serde_json::json!({"systemMessage": m}),
            Reply::Block(reason) => serde_json::json!({"decision": "block", "reason": reason}),
        }
        .to_string()
    }
}

/// A hook's invocation: its `--config`, and stdin (None when over
/// [`STDIN_LIMIT`]).
#[derive(Debug)]
pub struct Invocation {
    pub config: Option<PathBuf>,
    pub input: Option<Vec<u8>>,
}

/// How a hook was called.
#[derive(Debug, PartialEq, Eq)]
pub enum Call {
    /// `--help`: print the usage and exit 0.
    Help,
    /// `[--config PATH]`.
    Run { config: Option<PathBuf> },
}

/// Parse `[--config PATH] | --help` for the hook `name`.
pub fn parse_args(name: &str, args: impl IntoIterator<Item = OsString>) -> Result<Call> {
    use lexopt::prelude::*;
    let mut config = None;
    let mut parser = lexopt::Parser::from_iter(std::iter::once(OsString::from(name)).chain(args));
    let usage = |e: &dyn std::fmt::Display| Error::usage(format!("{name}: {e}"));
    while let Some(arg) = parser.next().map_err(|e| usage(&e))? {
        match arg {
            Long("help") | Short('h') => return Ok(Call::Help),
            Long("config") => config = Some(PathBuf::from(parser.value().map_err(|e| usage(&e))?)),
            other => {
                return Err(usage(&format!(
                    "unexpected {}; usage: {name} [--config PATH]",
                    other.unexpected()
                )));
            }
        }
    }
    Ok(Call::Run { config })
}

/// Run a hook binary: parse the command line, read stdin (before anything
/// else, so Claude Code never writes into a closed pipe), call `run`, print
/// its reply and exit 0. `help` is printed for `--help`.
pub fn main(name: &str, help: &str, run: impl FnOnce(Invocation) -> Reply) -> ! {
    let reply = match parse_args(name, std::env::args_os().skip(1)) {
        Ok(Call::Help) => {
            println!("{help}");
            std::process::exit(0);
        }
        Ok(Call::Run { config }) => match process::read_stdin_capped(STDIN_LIMIT) {
            Ok(input) => run(Invocation { config, input }),
            Err(e) => Reply::Message(format!("ktr: cannot read the {name} hook input: {e}")),
        },
        Err(e) => Reply::Message(format!("ktr: {e}")),
    };
    println!("{}", reply.to_json());
    std::process::exit(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn hooks_take_config_or_help_and_refuse_anything_else() {
        assert_eq!(
            parse_args("ktr-stop", args(&["--config", "/c.toml"])).unwrap(),
            Call::Run {
                config: Some("/c.toml".into())
            }
        );
        assert_eq!(
            parse_args("ktr-stop", args(&[])).unwrap(),
            Call::Run { config: None }
        );
        assert_eq!(
            parse_args("ktr-ack", args(&["--help"])).unwrap(),
            Call::Help
        );
        let err = parse_args("ktr-stop", args(&["--bogus"])).unwrap_err();
        assert!(
            err.message.contains("usage: ktr-stop [--config PATH]"),
            "{err}"
        );
    }

    #[test]
    fn replies_are_one_json_line() {
        assert_eq!(Reply::Quiet.to_json(), r#"{"suppressOutput":true}"#);
        assert_eq!(
            Reply::Message("a\nb".into()).to_json(),
            r#"{"systemMessage":"a\nb"}"#
        );
    }
}
