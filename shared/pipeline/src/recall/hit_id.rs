//! A hit id names a file and a byte offset: `live:<session>@<offset>`
//! (a transcript in `project_dir`, or in another project's folder beside
//! it), `backup:<operation>@<offset>` (an operation's frozen backup), with
//! `:<name>` for an offloaded `tool-results/<name>` file of either and
//! `:subagents:<name>` for a subagent's transcript `subagents/<name>`. Nothing else parses: ids and
//! names are checked before any path is made from them, and the path is
//! then put through the one path rule.

use std::path::{Path, PathBuf};

use ktr_base::ids::{OperationId, SessionId};
use ktr_base::open::{Exists, confine};
use ktr_base::{Error, Result};

/// Which file a hit is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HitFile {
    Live { session: String, part: Part },
    Backup { operation: OperationId, part: Part },
}

/// Which file of a session's transcript or folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// The transcript itself.
    Transcript,
    /// `<session>/tool-results/<name>`.
    Offloaded(String),
    /// `<session>/subagents/<name>`, a subagent's transcript.
    Subagent(String),
}

/// The name's prefix that says the file is a subagent's transcript.
const SUBAGENTS: &str = "subagents:";

/// A parsed hit id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitId {
    pub file: HitFile,
    pub offset: u64,
}

const NAME_MAX: usize = 200;

/// The hit id prefix of a file.
pub fn token(file: &HitFile) -> String {
    let (kind, id, part) = match file {
        HitFile::Live { session, part } => ("live", session.as_str(), part),
        HitFile::Backup { operation, part } => ("backup", operation.as_str(), part),
    };
    match part {
        Part::Transcript => format!("{kind}:{id}"),
        Part::Offloaded(n) => format!("{kind}:{id}:{n}"),
        Part::Subagent(n) => format!("{kind}:{id}:{SUBAGENTS}{n}"),
    }
}

/// Whether an offloaded file's name is one recall reads (letters, digits,
/// `.`, `_`, `-`; not starting with a dot).
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl HitId {
    /// Parse an id given back by the model or a person.
    pub fn parse(text: &str) -> Result<HitId> {
        let bad = |why: &str| {
            Error::usage(format!(
                "{:?} is not a recall hit id ({why}); pass the id field of a hit exactly as recall returned it",
                text.chars().take(120).collect::<String>()
            ))
        };
        let (token, offset) = text.rsplit_once('@').ok_or_else(|| bad("no @offset"))?;
        let offset: u64 = offset
            .parse()
            .map_err(|_| bad("the offset is not a number"))?;
        let mut parts = token.splitn(3, ':');
        let (kind, id, name) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts.next(),
        );
        let part = match name.map(|n| (n, n.strip_prefix(SUBAGENTS))) {
            None => Part::Transcript,
            Some((_, Some(agent))) if plain_name(agent) => Part::Subagent(agent.to_string()),
            Some((n, None)) if plain_name(n) => Part::Offloaded(n.to_string()),
            Some(_) => return Err(bad("the file name is not a plain name")),
        };
        let file = match kind {
            "live" => {
                SessionId::parse(id).map_err(|_| bad("not a session id"))?;
                HitFile::Live {
                    session: id.to_string(),
                    part,
                }
            }
            "backup" => HitFile::Backup {
                operation: OperationId::parse(id).map_err(|_| bad("not an operation id"))?,
                part,
            },
            _ => return Err(bad("it starts with neither live: nor backup:")),
        };
        Ok(HitId { file, offset })
    }
}

/// The file `path` in `dir`, through the one path rule.
pub fn confined(path: &Path, dir: &Path, what: &str) -> Result<PathBuf> {
    confine(path, dir, what, Exists::Must)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_hostile_ones_are_refused() {
        for part in [
            Part::Transcript,
            Part::Offloaded("b1.txt".into()),
            Part::Subagent("agent-a1.jsonl".into()),
        ] {
            let file = HitFile::Live {
                session: "0d15ea5e-0000-4000-8000-00000000beef".into(),
                part,
            };
            let id = format!("{}@42", token(&file));
            assert_eq!(HitId::parse(&id).unwrap(), HitId { file, offset: 42 });
        }
        for hostile in [
            "live:../../etc/passwd@0",
            "live:0d15ea5e-0000-4000-8000-00000000beef:../x@0",
            "live:0d15ea5e-0000-4000-8000-00000000beef:.hidden@0",
            "live:0d15ea5e-0000-4000-8000-00000000beef:subagents:../x@0",
            "backup:not-an-op@1",
            "file:/etc/passwd@0",
            "live:0d15ea5e-0000-4000-8000-00000000beef@-1",
            "no offset",
        ] {
            let e = HitId::parse(hostile).unwrap_err();
            assert!(e.message.contains("not a recall hit id"), "{e}");
        }
    }
}
