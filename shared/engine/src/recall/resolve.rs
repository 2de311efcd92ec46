//! Citing what a match needs from elsewhere in its transcript: the tool
//! call a result answers (its name and input), and the record that
//! referenced an offloaded `tool-results/` file. One more pass over the
//! transcript for each, only when a hit needs it.

use aho_corasick::AhoCorasick;
use serde_json::Value;

use super::lines::{self, Flow, Line};
use super::record::{self, Kind};
use super::{Hit, Linked, Source, turn};
use ktr_base::open::{Links, open_regular};
use ktr_base::{Error, Result};

/// Fill in the citing record of offloaded hits, then link tool calls and
/// their results (a result names its call's tool and input; a call and its
/// result found together are one hit).
pub fn cite(source: &Source, hits: &mut Vec<Hit>) -> Result<()> {
    let files: Vec<String> = unique(hits.iter().filter_map(|h| h.via.clone()));
    if !files.is_empty() {
        let needles: Vec<String> = files.iter().map(|f| format!("tool-results/{f}")).collect();
        // The citing record is the tool result that names the file. Claude
        // Code also logs records that only quote it (`api-request-blob`:
        // a request's body, written before or after the result's record as
        // the writes race): such a record cites a hit only until the
        // result's own record is found.
        let mut by_result = vec![false; hits.len()];
        pass(source, &needles, u64::MAX, |i, at, value| {
            let result = record::parts(value)
                .into_iter()
                .find(|p| p.kind == Kind::ToolResult);
            for (h, by_result) in hits
                .iter_mut()
                .zip(by_result.iter_mut())
                .filter(|(h, _)| h.via.as_deref() == Some(files[i].as_str()))
            {
                if *by_result || (h.line != 0 && result.is_none()) {
                    continue;
                }
                *by_result = result.is_some();
                h.line = at.line;
                h.turn = at.turn;
                h.offset = at.offset;
                h.prompt_at = at.prompt;
                h.timestamp = record::timestamp(value).map(str::to_string);
                h.tool_use_id = result
                    .as_ref()
                    .and_then(|p| p.tool_use_id)
                    .map(str::to_string);
            }
            false
        })?;
    }
    link_calls(source, hits)?;
    link_results(source, hits)?;
    merge(hits);
    Ok(())
}

/// Each result's call (it comes before the result): its tool, input and id.
fn link_calls(source: &Source, hits: &mut [Hit]) -> Result<()> {
    let wanted = |h: &&Hit| h.kind != Kind::ToolUse;
    let ids: Vec<String> = unique(
        hits.iter()
            .filter(wanted)
            .filter_map(|h| h.tool_use_id.clone()),
    );
    if ids.is_empty() {
        return Ok(());
    }
    let until = hits
        .iter()
        .filter(wanted)
        .map(|h| h.offset)
        .max()
        .unwrap_or(0);
    // Each id twice: compact and spaced JSON (pattern i / 2 is id i).
    let needles: Vec<String> = ids
        .iter()
        .flat_map(|id| turn::pair("id", &format!("\"{}\"", super::query::json_escaped(id))))
        .collect();
    let mut left = ids.len();
    pass(source, &needles, until, |i, at, value| {
        let id = ids[i / 2].as_str();
        let call = record::parts(value)
            .into_iter()
            .find(|p| p.kind == Kind::ToolUse && p.tool_use_id == Some(id));
        if let Some(call) = call {
            let mut first = true;
            for h in hits
                .iter_mut()
                .filter(|h| h.kind != Kind::ToolUse && h.tool_use_id.as_deref() == Some(id))
            {
                first &= h.call.is_none();
                h.tool = call.tool.map(str::to_string);
                h.input = call.input.map(record::input_summary);
                h.call = Some(Linked {
                    id: format!("{}@{}", source.token, at.offset),
                    line: at.line,
                });
            }
            left -= usize::from(first);
        }
        left == 0
    })
}

/// Each call's result (it comes after the call).
fn link_results(source: &Source, hits: &mut [Hit]) -> Result<()> {
    let ids: Vec<String> = unique(
        hits.iter()
            .filter(|h| h.kind == Kind::ToolUse)
            .filter_map(|h| h.tool_use_id.clone()),
    );
    if ids.is_empty() {
        return Ok(());
    }
    let needles: Vec<String> = ids
        .iter()
        .flat_map(|id| {
            turn::pair(
                "tool_use_id",
                &format!("\"{}\"", super::query::json_escaped(id)),
            )
        })
        .collect();
    let mut left = ids.len();
    pass(source, &needles, u64::MAX, |i, at, value| {
        let id = ids[i / 2].as_str();
        let answers = record::parts(value)
            .iter()
            .any(|p| p.kind == Kind::ToolResult && p.tool_use_id == Some(id));
        if answers {
            for h in hits
                .iter_mut()
                .filter(|h| h.kind == Kind::ToolUse && h.tool_use_id.as_deref() == Some(id))
            {
                if h.result.is_none() {
                    left -= 1;
                }
                h.result = Some(Linked {
                    id: format!("{}@{}", source.token, at.offset),
                    line: at.line,
                });
            }
        }
        left == 0
    })
}

/// A call whose result is a hit too is shown once: as the result, which
/// names the call.
fn merge(hits: &mut Vec<Hit>) {
    let answered: Vec<String> = unique(
        hits.iter()
            .filter(|h| h.kind != Kind::ToolUse && h.call.is_some())
            .filter_map(|h| h.tool_use_id.clone()),
    );
    hits.retain(|h| {
        h.kind != Kind::ToolUse
            || h.tool_use_id
                .as_ref()
                .is_none_or(|id| answered.binary_search(id).is_err())
    });
}

fn unique(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = items.collect();
    v.sort();
    v.dedup();
    v
}

/// Where a record is: its line, turn, byte offset, and where its turn's
/// typed prompt starts.
#[derive(Clone, Copy)]
struct At {
    line: u64,
    turn: u32,
    offset: u64,
    prompt: Option<u64>,
}

/// One pass over the transcript up to the line at byte `until`:
/// `on(needle, at, record)` for each decoded line that holds a needle
/// (huge lines are not decoded); `on` answers whether all it wanted is
/// found (the pass then stops).
fn pass(
    source: &Source,
    needles: &[String],
    until: u64,
    mut on: impl FnMut(usize, At, &Value) -> bool,
) -> Result<()> {
    let path = &source.path;
    let ac = AhoCorasick::new(needles).map_err(|e| Error::io(format!("cannot cite hits: {e}")))?;
    let mut file = open_regular(path, Links::Refuse).map_err(|e| Error::io_at("read", path, &e))?;
    let mut at = At {
        line: 0,
        turn: 0,
        offset: 0,
        prompt: None,
    };
    let find = |_: &[u8]| None;
    let mut done = false;
    lines::each_line(&mut file, &find, 0, |line| {
        at.line += 1;
        if let Line::Whole { bytes, offset } = line {
            if offset > until {
                return Flow::Stop;
            }
            at.offset = offset;
            if turn::is_prompt(bytes, bytes) {
                at.turn += 1;
                at.prompt = Some(offset);
            }
            let mut matched: Vec<usize> = ac
                .find_iter(bytes)
                .map(|m| m.pattern().as_usize())
                .collect();
            matched.sort_unstable();
            matched.dedup();
            if !matched.is_empty()
                && let Some(value) = record::decode(bytes)
            {
                for i in matched {
                    done |= on(i, at, &value);
                }
            }
        } else if let Line::Long { head, offset, .. } = line
            && turn::is_prompt(head, &[])
        {
            at.turn += 1;
            at.prompt = Some(offset);
        }
        if done { Flow::Stop } else { Flow::Go }
    })
    .map_err(|e| Error::io_at("read", path, &e))
}
