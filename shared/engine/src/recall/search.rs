//! The search itself: sources newest first, each file in one pass, hits in
//! file order, stopping at the limit (the rest of the file read on only to
//! count what lies past it).

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::lines::{self, Flow, Line};
use super::record::{self, Kind, Part};
use super::{Found, Hit, Search, Source, resolve, snippet, turn};
use ktr_base::open::{Links, open_regular};
use ktr_base::time::parse_rfc3339;
use ktr_base::{Error, Result};

/// The ids of a filtered tool's calls kept at most (oldest forgotten).
const TOOL_IDS_KEPT: usize = 100_000;
/// Bytes of a huge line shown around its match.
const RAW_AROUND: u64 = 200;

/// Search `sources` (newest first) for `s`.
pub fn search(sources: &[Source], s: &Search) -> Result<Found> {
    if s.limit == 0 || s.limit > super::MAX_LIMIT {
        return Err(Error::usage(format!(
            "limit {} is out of range: give 1 to {} and page with a narrower query or filter",
            s.limit,
            super::MAX_LIMIT
        )));
    }
    let mut found = Found {
        hits: Vec::new(),
        more_at_least: 0,
        total: None,
        complete: true,
        files_searched: 0,
        bytes_searched: 0,
    };
    for (i, source) in sources.iter().enumerate() {
        if !s.count && found.hits.len() >= s.limit {
            found.complete = i == sources.len();
            break;
        }
        if older_than_since(source, s) {
            continue;
        }
        let mut hits = scan_transcript(source, s, &mut found)?;
        hits.extend(scan_offloaded(source, s, &mut found)?);
        resolve::cite(source, &mut hits)?;
        for hit in hits {
            if !keeps_tool(s, &hit) || !keeps_cited(s, &hit) {
                continue;
            }
            if found.hits.len() < s.limit {
                found.hits.push(hit);
            } else {
                found.more_at_least += 1;
            }
        }
    }
    if s.count {
        found.total = Some(found.hits.len() as u64 + found.more_at_least);
    }
    Ok(found)
}

/// A file last written before `since` holds nothing newer.
fn older_than_since(source: &Source, s: &Search) -> bool {
    let Some(since) = s.filter.since else {
        return false;
    };
    std::fs::metadata(&source.path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t < since)
}

/// Offloaded results and resolved results are checked against the tool
/// filter once their call is known.
fn keeps_tool(s: &Search, hit: &Hit) -> bool {
    match &s.filter.tool {
        None => true,
        Some(tool) => hit.tool.as_deref() == Some(tool.as_str()),
    }
}

/// An offloaded hit is filtered by time and turn once its citing record
/// is known.
fn keeps_cited(s: &Search, hit: &Hit) -> bool {
    if hit.via.is_none() {
        return true;
    }
    let f = &s.filter;
    let at = hit.timestamp.as_deref().and_then(parse_rfc3339);
    let in_time = (f.since.is_none() && f.until.is_none())
        || at.is_some_and(|at| f.since.is_none_or(|s| at >= s) && f.until.is_none_or(|u| at <= u));
    in_time
        && f.turns
            .is_none_or(|(from, to)| (from..=to).contains(&hit.turn))
}

fn open(path: &std::path::Path) -> Result<File> {
    open_regular(path, Links::Refuse).map_err(|e| Error::io_at("read", path, &e))
}

/// The transcript in one pass: every hit of the file (those past the
/// limit are counted by the caller).
fn scan_transcript(source: &Source, s: &Search, found: &mut Found) -> Result<Vec<Hit>> {
    let mut file = open(&source.path)?;
    found.files_searched += 1;
    let mut scan = Scan {
        source,
        s,
        file: file
            .try_clone()
            .map_err(|e| Error::io_at("read", &source.path, &e))?,
        hits: Vec::new(),
        line: 0,
        turn: 0,
        bytes: 0,
        tool_ids: ToolIds::new(s.filter.tool.as_deref()),
    };
    let find = |b: &[u8]| s.query.raw_find(b);
    lines::each_line(&mut file, &find, s.query.raw_overlap(), |line| {
        scan.line(line);
        Flow::Go
    })
    .map_err(|e| Error::io_at("read", &source.path, &e))?;
    found.bytes_searched += scan.bytes;
    Ok(scan.hits)
}

struct Scan<'a> {
    source: &'a Source,
    s: &'a Search,
    file: File,
    hits: Vec<Hit>,
    line: u64,
    turn: u32,
    bytes: u64,
    tool_ids: ToolIds,
}

impl Scan<'_> {
    fn line(&mut self, line: Line<'_>) {
        self.line += 1;
        match line {
            Line::Whole { offset, bytes } => {
                self.bytes += bytes.len() as u64 + 1;
                if turn::is_prompt(bytes, bytes) {
                    self.turn += 1;
                }
                self.tool_ids.note(bytes);
                if self.s.query.may_match(bytes) {
                    self.record(offset, bytes);
                }
            }
            Line::Long {
                offset,
                len,
                head,
                first_match,
            } => {
                self.bytes += len + 1;
                if turn::is_prompt(head, &[]) {
                    self.turn += 1;
                }
                if let Some(at) = first_match {
                    self.raw_hit(offset, head, at);
                }
            }
        }
    }

    /// Decode a line that may match and keep each part that does.
    fn record(&mut self, offset: u64, bytes: &[u8]) {
        let Some(value) = record::decode(bytes) else {
            return;
        };
        let timestamp = record::timestamp(&value);
        if !self.in_time(timestamp) || !self.in_turns() {
            return;
        }
        for part in record::parts(&value) {
            if !self.keeps(&part) {
                continue;
            }
            if let Some((start, end)) = self.s.query.find(&part.text) {
                let hit = self.hit(
                    offset,
                    timestamp,
                    &part,
                    snippet::around(&part.text, start, end),
                );
                self.hits.push(hit);
            }
        }
    }

    fn keeps(&self, part: &Part<'_>) -> bool {
        let f = &self.s.filter;
        if !f.kinds.is_empty() && !f.kinds.contains(&part.kind) {
            return false;
        }
        match (&f.tool, part.kind) {
            (None, _) => true,
            (Some(t), Kind::ToolUse) => part.tool == Some(t.as_str()),
            (Some(_), Kind::ToolResult | Kind::Image) => {
                part.tool_use_id.is_some_and(|id| self.tool_ids.has(id))
            }
            (Some(_), _) => false,
        }
    }

    fn in_time(&self, timestamp: Option<&str>) -> bool {
        let f = &self.s.filter;
        if f.since.is_none() && f.until.is_none() {
            return true;
        }
        let Some(at) = timestamp.and_then(parse_rfc3339) else {
            return false;
        };
        f.since.is_none_or(|s| at >= s) && f.until.is_none_or(|u| at <= u)
    }

    fn in_turns(&self) -> bool {
        self.s
            .filter
            .turns
            .is_none_or(|(from, to)| (from..=to).contains(&self.turn))
    }

    fn hit(&self, offset: u64, timestamp: Option<&str>, part: &Part<'_>, snippet: String) -> Hit {
        let session = &self.source.session;
        Hit {
            id: format!("{}@{offset}", self.source.token),
            session: session.clone(),
            session_short: session.chars().take(8).collect(),
            origin: self.source.origin.clone(),
            line: self.line,
            timestamp: timestamp.map(str::to_string),
            turn: self.turn,
            kind: part.kind,
            tool: part.tool.map(str::to_string),
            input: part.input.map(record::input_summary),
            offloaded: None,
            page: None,
            raw: false,
            snippet,
            tool_use_id: part.tool_use_id.map(str::to_string),
            via: None,
        }
    }

    /// A line too large to decode here: its kind told from its start, the
    /// snippet raw JSON around the match.
    fn raw_hit(&mut self, offset: u64, head: &[u8], (at, len): (u64, usize)) {
        let f = &self.s.filter;
        let kind = raw_kind(head);
        let wanted = f.kinds.is_empty() || f.kinds.contains(&kind);
        if !wanted || f.tool.is_some() || f.since.is_some() || f.until.is_some() || !self.in_turns()
        {
            return;
        }
        let from = at.saturating_sub(RAW_AROUND).max(offset);
        let mut window = vec![0u8; (at - from) as usize + len + RAW_AROUND as usize];
        let n = self.file.read_at(&mut window, from).unwrap_or(0);
        window.truncate(n);
        let text = String::from_utf8_lossy(&window);
        let start = floor_char(&text, (at - from) as usize);
        let end = floor_char(&text, start + len);
        let part = Part {
            kind,
            tool: None,
            tool_use_id: None,
            input: None,
            text: "".into(),
        };
        let mut hit = self.hit(offset, None, &part, snippet::around(&text, start, end));
        hit.raw = true;
        self.hits.push(hit);
    }
}

fn floor_char(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A huge record's kind from its first bytes.
fn raw_kind(head: &[u8]) -> Kind {
    let has = |key: &str, value: &str| {
        turn::pair(key, value)
            .iter()
            .any(|n| memchr::memmem::find(head, n.as_bytes()).is_some())
    };
    if has("type", "\"assistant\"") {
        Kind::Assistant
    } else if has("type", "\"tool_result\"") {
        Kind::ToolResult
    } else if has("type", "\"user\"") && !has("isMeta", "true") {
        Kind::User
    } else {
        Kind::Injection
    }
}

/// The calls of the filtered tool seen so far (their results follow them).
struct ToolIds {
    /// The tool's name, and `"name":"<it>"` as raw JSON (compact, spaced).
    tool: Option<(String, [String; 2])>,
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl ToolIds {
    fn new(tool: Option<&str>) -> ToolIds {
        ToolIds {
            tool: tool.map(|t| {
                let quoted = format!("\"{}\"", super::query::json_escaped(t));
                (t.to_string(), turn::pair("name", &quoted))
            }),
            ids: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    fn note(&mut self, line: &[u8]) {
        let Some((tool, needles)) = &self.tool else {
            return;
        };
        if !needles
            .iter()
            .any(|n| memchr::memmem::find(line, n.as_bytes()).is_some())
        {
            return;
        }
        let Some(value) = record::decode(line) else {
            return;
        };
        for part in record::parts(&value) {
            if part.kind == Kind::ToolUse
                && part.tool == Some(tool.as_str())
                && let Some(id) = part.tool_use_id
            {
                if self.order.len() >= TOOL_IDS_KEPT
                    && let Some(old) = self.order.pop_front()
                {
                    self.ids.remove(&old);
                }
                self.ids.insert(id.to_string());
                self.order.push_back(id.to_string());
            }
        }
    }

    fn has(&self, id: &str) -> bool {
        self.ids.contains(id)
    }
}

/// The session's offloaded tool results, each file line by line; every
/// matching line is a hit cited (by [`resolve::cite`]) by the record that
/// referenced the file.
fn scan_offloaded(source: &Source, s: &Search, found: &mut Found) -> Result<Vec<Hit>> {
    let mut hits = Vec::new();
    if !s.filter.kinds.is_empty() && !s.filter.kinds.contains(&Kind::ToolResult) {
        return Ok(hits);
    }
    for (token, name, path) in &source.tool_results {
        let mut file = open(path)?;
        found.files_searched += 1;
        let find = |b: &[u8]| {
            std::str::from_utf8(b)
                .ok()
                .and_then(|t| s.query.find(t))
                .map(|(a, e)| (a, e - a))
        };
        let mut bytes = 0u64;
        lines::each_line(&mut file, &find, s.query.raw_overlap(), |line| {
            if let Line::Whole { offset, bytes: b } = line {
                bytes += b.len() as u64 + 1;
                let text = String::from_utf8_lossy(b);
                if let Some((start, end)) = s.query.find(&text) {
                    hits.push(offloaded_hit(
                        source, token, name, offset, &text, start, end,
                    ));
                }
            }
            Flow::Go
        })
        .map_err(|e| Error::io_at("read", path, &e))?;
        found.bytes_searched += bytes;
    }
    Ok(hits)
}

fn offloaded_hit(
    source: &Source,
    token: &str,
    name: &str,
    offset: u64,
    text: &str,
    start: usize,
    end: usize,
) -> Hit {
    Hit {
        id: format!("{token}@0"),
        session: source.session.clone(),
        session_short: source.session.chars().take(8).collect(),
        origin: source.origin.clone(),
        line: 0,
        timestamp: None,
        turn: 0,
        kind: Kind::ToolResult,
        tool: None,
        input: None,
        offloaded: Some(name.to_string()),
        page: u32::try_from((offset + start as u64) / super::PAGE_BYTES as u64).ok(),
        raw: false,
        snippet: snippet::around(text, start, end),
        tool_use_id: None,
        via: Some(name.to_string()),
    }
}
