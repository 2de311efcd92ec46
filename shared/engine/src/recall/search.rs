//! The search itself: sources newest first, each file in one pass, left
//! once the search has one hit past the limit (or read to its end when
//! counting); what the window carries folded aside (see [`super::fold`]).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::calls::Calls;
use super::fold::Folds;
use super::lines::{self, Flow, Line};
use super::record::{self, Kind, Part};
use super::{Found, Hit, Search, Source, context, raw, resolve, snippet, turn};
use ktr_base::open::{Links, open_regular};
use ktr_base::time::parse_rfc3339;
use ktr_base::{Error, Result};

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
        carried: Vec::new(),
        carried_more: 0,
        more_at_least: 0,
        total: None,
        complete: true,
        files_searched: 0,
        bytes_searched: 0,
    };
    let mut folds = Folds::default();
    let mut past = 0u64;
    for (i, source) in sources.iter().enumerate() {
        // The search stops once it has seen one hit past the limit.
        let seen = found.hits.len() + found.more_at_least as usize;
        if !s.count && seen > s.limit {
            found.complete = false;
            break;
        }
        if older_than_since(source, s) {
            continue;
        }
        let mut budget = Budget {
            left: (s.limit + 1).saturating_sub(seen),
            count: s.count,
            past: 0,
            stopped: false,
        };
        let mut hits = scan_offloaded(source, s, &mut budget, &mut found)?;
        if budget.left > 0 || s.count {
            hits.extend(scan_transcript(source, s, &mut budget, &mut found)?);
        } else {
            budget.stopped = true;
        }
        found.complete &= !budget.stopped;
        past += budget.past;
        resolve::cite(source, &mut hits)?;
        hits.retain(|hit| keeps_tool(s, hit) && keeps_cited(s, hit));
        for hit in &mut hits {
            hit.source = i;
        }
        folds.place(s, &mut found, hits);
    }
    if s.count {
        let copies: u64 = found
            .carried
            .iter()
            .map(|c| 1 + u64::from(c.older_copies))
            .sum();
        found.total = Some(
            found.hits.len() as u64 + found.more_at_least + copies + found.carried_more + past,
        );
    }
    context::fill(sources, s, &mut found);
    Ok(found)
}

/// How many more hits that use the limit a file may add before the search
/// stops (with `count`, past them matches are only counted).
struct Budget {
    left: usize,
    count: bool,
    /// Matches counted past the budget (never built into hits).
    past: u64,
    /// Whether the file was left before its end.
    stopped: bool,
}

/// The most hits on carried text one file builds (the rest are counted).
const CARRIED_BUILT: usize = 2_000;

impl Budget {
    /// Whether a match is built into a hit (else it is only counted).
    fn wants(&mut self, counted: bool, carried_built: usize) -> bool {
        if self.left > 0 && (counted || carried_built < CARRIED_BUILT) {
            return true;
        }
        self.past += 1;
        false
    }

    fn took(&mut self, counted: bool) {
        if counted {
            self.left = self.left.saturating_sub(1);
        }
    }

    /// Whether the file can be left (it has its hits, and nothing is
    /// counted).
    fn done(&self) -> bool {
        !self.count && self.left == 0
    }
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
/// filter once their call is known (an offloaded one against the file
/// filter too: its call's input as summed up).
fn keeps_tool(s: &Search, hit: &Hit) -> bool {
    let tool = s
        .filter
        .tool
        .as_ref()
        .is_none_or(|tool| hit.tool.as_deref() == Some(tool.as_str()));
    let file = s.filter.file.as_ref().is_none_or(|path| {
        hit.via.is_none()
            || hit
                .input
                .as_deref()
                .is_some_and(|i| i.contains(path.as_str()))
    });
    tool && file
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

/// The transcript in one pass, left once the budget is spent (unless
/// counting).
fn scan_transcript(
    source: &Source,
    s: &Search,
    budget: &mut Budget,
    found: &mut Found,
) -> Result<Vec<Hit>> {
    let mut file = open(&source.path)?;
    found.files_searched += 1;
    let mut scan = Scan {
        source,
        s,
        file: file
            .try_clone()
            .map_err(|e| Error::io_at("read", &source.path, &e))?,
        hits: Vec::new(),
        carried_built: 0,
        line: 0,
        turn: 0,
        prompt_at: None,
        bytes: 0,
        calls: Calls::new(&s.filter),
        budget,
    };
    let find = |b: &[u8]| s.query.raw_find(b);
    lines::each_line(&mut file, &find, s.query.raw_overlap(), |line| {
        scan.line(line);
        if scan.budget.done() {
            scan.budget.stopped = true;
            Flow::Stop
        } else {
            Flow::Go
        }
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
    carried_built: usize,
    line: u64,
    turn: u32,
    /// Where the current turn's typed prompt starts.
    prompt_at: Option<u64>,
    bytes: u64,
    calls: Calls,
    budget: &'a mut Budget,
}

impl Scan<'_> {
    fn line(&mut self, line: Line<'_>) {
        self.line += 1;
        match line {
            Line::Whole { offset, bytes } => {
                self.bytes += bytes.len() as u64 + 1;
                if self.counts_turns() && turn::is_prompt(bytes, bytes) {
                    self.turn += 1;
                    self.prompt_at = Some(offset);
                }
                self.calls.note(bytes);
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
                if self.counts_turns() && turn::is_prompt(head, &[]) {
                    self.turn += 1;
                    self.prompt_at = Some(offset);
                }
                if let Some(at) = first_match {
                    self.raw_hit(offset, head, at);
                }
            }
        }
    }

    /// Whether turns are still counted: for the hits yet to be built and
    /// for a turn filter (past the limit, counting, neither needs them).
    fn counts_turns(&self) -> bool {
        self.budget.left > 0 || self.s.filter.turns.is_some()
    }

    /// Decode a line that may match and keep each part that does. When
    /// no filter needs the decoded record, its texts are first matched
    /// where they lie in the raw line: a line with none is left undecoded,
    /// and past the limit (counting) its matches are only counted.
    fn record(&mut self, offset: u64, bytes: &[u8]) {
        let f = &self.s.filter;
        if !self.calls.filters() && f.since.is_none() && f.until.is_none() {
            match raw::count(bytes, &self.s.query, &f.kinds) {
                Some(0) => return,
                Some(n) if self.budget.left == 0 => {
                    if self.in_turns() {
                        self.budget.past += n;
                    }
                    return;
                }
                _ => {}
            }
        }
        let Some(value) = record::decode(bytes) else {
            return;
        };
        let timestamp = record::timestamp(&value);
        if !self.in_time(timestamp) || !self.in_turns() {
            return;
        }
        let window = self.source.window.key(record::uuid(&value));
        let counted = self.s.all_copies || window.is_none();
        let mut results: Vec<&str> = Vec::new();
        for part in record::parts(&value) {
            if !self.keeps(&part) {
                continue;
            }
            // A result matched once is one hit (its output, or what only
            // `toolUseResult` holds).
            if part.kind == Kind::ToolResult
                && part.tool_use_id.is_some_and(|id| results.contains(&id))
            {
                continue;
            }
            if let Some((start, end)) = self.s.query.find(&part.text) {
                if part.kind == Kind::ToolResult
                    && let Some(id) = part.tool_use_id
                {
                    results.push(id);
                }
                if !self.budget.wants(counted, self.carried_built) {
                    continue;
                }
                self.budget.took(counted);
                self.carried_built += usize::from(!counted);
                let mut hit = self.hit(
                    offset,
                    timestamp,
                    &part,
                    snippet::around(&part.text, start, end),
                );
                hit.window.clone_from(&window);
                if part.kind == Kind::ToolUse
                    && hit
                        .input
                        .as_deref()
                        .is_some_and(|i| self.s.query.find(i).is_some())
                {
                    // The snippet already shows the input where it matched.
                    hit.input = None;
                }
                self.hits.push(hit);
            }
        }
    }

    fn keeps(&self, part: &Part<'_>) -> bool {
        let f = &self.s.filter;
        if !f.kinds.is_empty() && !f.kinds.contains(&part.kind) {
            return false;
        }
        if !self.calls.filters() {
            return true;
        }
        match part.kind {
            Kind::ToolUse => self.calls.wants(part),
            Kind::ToolResult | Kind::Image => part.tool_use_id.is_some_and(|id| self.calls.has(id)),
            _ => false,
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
            call: None,
            result: None,
            prompt: None,
            context: Vec::new(),
            offset,
            window: None,
            prompt_at: self.prompt_at,
            source: 0,
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
        if !wanted
            || self.calls.filters()
            || f.since.is_some()
            || f.until.is_some()
            || !self.in_turns()
        {
            return;
        }
        let carried = self.source.window.key(None);
        let counted = self.s.all_copies || carried.is_none();
        if !self.budget.wants(counted, self.carried_built) {
            return;
        }
        self.budget.took(counted);
        self.carried_built += usize::from(!counted);
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
        hit.window = carried;
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

/// The session's offloaded tool results, each file line by line; every
/// matching line is a hit cited (by [`resolve::cite`]) by the record that
/// referenced the file.
fn scan_offloaded(
    source: &Source,
    s: &Search,
    budget: &mut Budget,
    found: &mut Found,
) -> Result<Vec<Hit>> {
    let mut hits = Vec::new();
    if !s.filter.kinds.is_empty() && !s.filter.kinds.contains(&Kind::ToolResult) {
        return Ok(hits);
    }
    for (token, name, path) in &source.tool_results {
        if budget.done() {
            budget.stopped = true;
            break;
        }
        let mut file = open(path)?;
        found.files_searched += 1;
        let find = |b: &[u8]| {
            // A long line's piece may start and end inside a character.
            let skip = b.iter().take(3).take_while(|&&c| c & 0xC0 == 0x80).count();
            let b = &b[skip..];
            let text = std::str::from_utf8(b)
                .unwrap_or_else(|e| std::str::from_utf8(&b[..e.valid_up_to()]).unwrap_or_default());
            s.query.find(text).map(|(a, e)| (skip + a, e - a))
        };
        let reread = file
            .try_clone()
            .map_err(|e| Error::io_at("read", path, &e))?;
        let mut bytes = 0u64;
        lines::each_line(&mut file, &find, s.query.raw_overlap(), |line| {
            if let Line::Long {
                len,
                first_match: Some((at, n)),
                offset,
                ..
            } = line
                && budget.wants(true, 0)
            {
                // A line too long to hold: cited around its first match.
                bytes += len + 1;
                budget.took(true);
                let from = at.saturating_sub(RAW_AROUND).max(offset);
                let mut window = vec![0u8; (at - from) as usize + n + RAW_AROUND as usize];
                let got = reread.read_at(&mut window, from).unwrap_or(0);
                window.truncate(got);
                let text = String::from_utf8_lossy(&window);
                let start = floor_char(&text, (at - from) as usize);
                let end = floor_char(&text, start + n);
                let mut hit = offloaded_hit(source, token, name, &text, start, end);
                hit.page = super::get::page_of(path, at);
                hits.push(hit);
            } else if let Line::Long { len, .. } = line {
                bytes += len + 1;
            }
            if let Line::Whole { offset, bytes: b } = line {
                bytes += b.len() as u64 + 1;
                let text = String::from_utf8_lossy(b);
                if let Some((start, end)) = s.query.find(&text)
                    && budget.wants(true, 0)
                {
                    budget.took(true);
                    let mut hit = offloaded_hit(source, token, name, &text, start, end);
                    hit.page = super::get::page_of(path, offset + start as u64);
                    hits.push(hit);
                }
            }
            if budget.done() { Flow::Stop } else { Flow::Go }
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
        page: None,
        raw: false,
        snippet: snippet::around(text, start, end),
        call: None,
        result: None,
        prompt: None,
        context: Vec::new(),
        offset: 0,
        window: None,
        prompt_at: None,
        source: 0,
        tool_use_id: None,
        via: Some(name.to_string()),
    }
}
