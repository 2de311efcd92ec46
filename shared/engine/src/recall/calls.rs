//! The tool calls a filter keeps — by the tool's name (`tool`), by a path
//! their input names (`file`), or both — noted as the transcript is read,
//! so that their results (which follow them) are kept too.

use std::collections::{HashSet, VecDeque};

use memchr::memmem;

use super::query::json_escaped;
use super::record::{self, Kind, Part};
use super::{Filter, turn};

/// The ids of kept calls remembered at most (oldest forgotten).
const IDS_KEPT: usize = 100_000;

pub(crate) struct Calls {
    tool: Option<String>,
    /// The path as a JSON string holds it.
    file: Option<String>,
    /// Raw needles a line holding a kept call must contain (each group:
    /// one of its needles).
    needles: Vec<Vec<String>>,
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl Calls {
    pub(crate) fn new(f: &Filter) -> Calls {
        let mut needles = Vec::new();
        if let Some(t) = &f.tool {
            needles.push(turn::pair("name", &format!("\"{}\"", json_escaped(t))).to_vec());
        }
        let file = f.file.as_deref().map(json_escaped);
        if let Some(p) = &file {
            needles.push(vec![p.clone()]);
        }
        Calls {
            tool: f.tool.clone(),
            file,
            needles,
            ids: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// Whether the filter keeps only some calls (and their results).
    pub(crate) fn filters(&self) -> bool {
        !self.needles.is_empty()
    }

    /// Whether a tool call is one the filter keeps.
    pub(crate) fn wants(&self, part: &Part<'_>) -> bool {
        part.kind == Kind::ToolUse
            && self.tool.as_deref().is_none_or(|t| part.tool == Some(t))
            && self.file.as_deref().is_none_or(|p| part.text.contains(p))
    }

    /// Note the kept calls of a line.
    pub(crate) fn note(&mut self, line: &[u8]) {
        if !self.filters()
            || !self.needles.iter().all(|group| {
                group
                    .iter()
                    .any(|n| memmem::find(line, n.as_bytes()).is_some())
            })
        {
            return;
        }
        let Some(value) = record::decode(line) else {
            return;
        };
        for part in record::parts(&value) {
            if self.wants(&part)
                && let Some(id) = part.tool_use_id
            {
                if self.order.len() >= IDS_KEPT
                    && let Some(old) = self.order.pop_front()
                {
                    self.ids.remove(&old);
                }
                self.ids.insert(id.to_string());
                self.order.push_back(id.to_string());
            }
        }
    }

    /// Whether `id` is a kept call's.
    pub(crate) fn has(&self, id: &str) -> bool {
        self.ids.contains(id)
    }
}
