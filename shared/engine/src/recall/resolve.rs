//! Citing what a match needs from elsewhere in its transcript: the tool
//! call a result answers (its name and input), and the record that
//! referenced an offloaded `tool-results/` file. One more pass over the
//! transcript for each, only when a hit needs it.

use aho_corasick::AhoCorasick;
use serde_json::Value;

use super::lines::{self, Flow, Line};
use super::record::{self, Kind};
use super::{Hit, Source, turn};
use ktr_base::open::{Links, open_regular};
use ktr_base::{Error, Result};

/// Fill in the citing record of offloaded hits, then the tool of results.
pub fn cite(source: &Source, hits: &mut [Hit]) -> Result<()> {
    let files: Vec<String> = unique(hits.iter().filter_map(|h| h.via.clone()));
    if !files.is_empty() {
        let needles: Vec<String> = files.iter().map(|f| format!("tool-results/{f}")).collect();
        // The citing record is the tool result that names the file. Claude
        // Code also logs records that only quote it (`api-request-blob`:
        // a request's body, written before or after the result's record as
        // the writes race): such a record cites a hit only until the
        // result's own record is found.
        let mut by_result = vec![false; hits.len()];
        pass(source, &needles, |i, at, value| {
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
                h.timestamp = record::timestamp(value).map(str::to_string);
                h.tool_use_id = result
                    .as_ref()
                    .and_then(|p| p.tool_use_id)
                    .map(str::to_string);
            }
        })?;
    }
    let ids: Vec<String> = unique(
        hits.iter()
            .filter(|h| h.kind != Kind::ToolUse && h.tool.is_none())
            .filter_map(|h| h.tool_use_id.clone()),
    );
    if ids.is_empty() {
        return Ok(());
    }
    // Each id twice: compact and spaced JSON (pattern i / 2 is id i).
    let needles: Vec<String> = ids
        .iter()
        .flat_map(|id| turn::pair("id", &format!("\"{id}\"")))
        .collect();
    pass(source, &needles, |i, _, value| {
        let i = i / 2;
        let call = record::parts(value)
            .into_iter()
            .find(|p| p.kind == Kind::ToolUse && p.tool_use_id == Some(ids[i].as_str()));
        if let Some(call) = call {
            for h in hits
                .iter_mut()
                .filter(|h| h.tool_use_id.as_deref() == Some(ids[i].as_str()))
            {
                h.tool = call.tool.map(str::to_string);
                h.input = call.input.map(record::input_summary);
            }
        }
    })
}

fn unique(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = items.collect();
    v.sort();
    v.dedup();
    v
}

/// Where a record is: its line and turn.
#[derive(Clone, Copy)]
struct At {
    line: u64,
    turn: u32,
}

/// One pass over the transcript: `on(needle, at, record)` for each decoded
/// line that holds a needle (huge lines are not decoded).
fn pass(source: &Source, needles: &[String], mut on: impl FnMut(usize, At, &Value)) -> Result<()> {
    let path = &source.path;
    let ac = AhoCorasick::new(needles).map_err(|e| Error::io(format!("cannot cite hits: {e}")))?;
    let mut file = open_regular(path, Links::Refuse).map_err(|e| Error::io_at("read", path, &e))?;
    let mut at = At { line: 0, turn: 0 };
    let find = |_: &[u8]| None;
    lines::each_line(&mut file, &find, 0, |line| {
        at.line += 1;
        if let Line::Whole { bytes, .. } = line {
            if turn::is_prompt(bytes, bytes) {
                at.turn += 1;
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
                    on(i, at, &value);
                }
            }
        } else if let Line::Long { head, .. } = line
            && turn::is_prompt(head, &[])
        {
            at.turn += 1;
        }
        Flow::Go
    })
    .map_err(|e| Error::io_at("read", path, &e))
}
