//! `ktr recall QUERY`: search the lineage verbatim; `ktr recall
//! --get HIT_ID [--page N]`: one hit whole. Its own words are parsed
//! here (the command has many filters no other command shares).

use std::ffi::OsString;
use std::path::PathBuf;

use ktr_base::Error;
use ktr_base::config::Config;
use ktr_engine::recall::context::Nearby;
use ktr_engine::recall::{Carried, Found, Hit};
use ktr_pipeline::operation::Store;
use ktr_pipeline::recall::{Answer, Ask, Scope, parse_turns};
use lexopt::prelude::*;

use crate::out;

pub const HELP: &str = "\
ktr recall — find anything the session's history held, verbatim, with its source

Usage: ktr recall QUERY [options]
       ktr recall --get HIT_ID [--page N]

The query is a literal (ASCII letters in either case, other scripts exactly);
--regex makes it a regex. Searched: the current session and every session it
was rebuilt from (their live transcripts, else ktr's frozen backups), newest
first, with their offloaded tool-results/ files and their subagents'
transcripts.

Options:
  --regex                 the query is a regex (Rust syntax)
  --kind K[,K…]           user, assistant, tool_use, tool_result, thinking, injection, image
  --tool NAME             only this tool's calls and results (Bash, Read, mcp__…)
  --session ID            only this session (an id or its first characters; repeatable)
  --since T / --until T   2026-05-01 or 2026-05-01T12:00:00Z (UTC)
  --turns A-B             turn range (5, 5-9, 5-, -9)
  --limit N               hits to show (default 20, at most 500)
  --count                 read everything and count every match
  --all-copies            list each copy of text the window already holds as a hit
                          (by default: one line each, not counted against --limit)
  --context N             show N records before and after each hit (at most 20)
  --scope lineage|project|all
                          project: every transcript of the project; all: every
                          project's sessions and ktr's backups of them, grouped by
                          session, each with the line that resumes it
  --project P             with --scope all: only this project (its working folder,
                          or its folder name under ~/.claude/projects; repeatable)
  --file PATH             only tool calls whose input names PATH, and their results
  --current ID            the session whose lineage is searched (default: the newest)
  --get HIT_ID            print one hit whole, page by page (--page N, from 0)
  --json                  machine-readable output
  --config PATH           config file
";

/// `ktr recall`'s arguments.
#[derive(Debug, Default)]
pub struct RecallArgs {
    pub config: Option<PathBuf>,
    pub json: bool,
    pub ask: Ask,
    pub get: Option<String>,
    pub page: u32,
    pub help: bool,
}

/// Parse the words after `recall` (`config` came before it).
pub fn parse(config: Option<PathBuf>, args: Vec<OsString>) -> Result<RecallArgs, Error> {
    parse_raw(config, args).map_err(|e| Error::usage(format!("{e}; see ktr recall --help")))?
}

fn parse_raw(
    config: Option<PathBuf>,
    args: Vec<OsString>,
) -> Result<Result<RecallArgs, Error>, lexopt::Error> {
    let mut a = RecallArgs {
        config,
        ask: Ask {
            limit: 20,
            ..Ask::default()
        },
        ..RecallArgs::default()
    };
    let mut query: Vec<String> = Vec::new();
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => a.help = true,
            Long("config") => a.config = Some(parser.value()?.into()),
            Long("json") => a.json = true,
            Long("regex") => a.ask.regex = true,
            Long("count") => a.ask.count = true,
            Long("all-copies") => a.ask.all_copies = true,
            Long("context") => a.ask.context = number(&parser.value()?.string()?, "--context")?,
            Long("kind") => a.ask.kinds.extend(
                parser
                    .value()?
                    .string()?
                    .split(',')
                    .map(|k| k.trim().to_string()),
            ),
            Long("tool") => a.ask.tool = Some(parser.value()?.string()?),
            Long("file") => a.ask.file = Some(parser.value()?.string()?),
            Long("project") => a.ask.projects.push(parser.value()?.string()?),
            Long("session") => a.ask.sessions.push(parser.value()?.string()?),
            Long("since") => a.ask.since = Some(parser.value()?.string()?),
            Long("until") => a.ask.until = Some(parser.value()?.string()?),
            Long("current") => a.ask.current = Some(parser.value()?.string()?),
            Long("get") => a.get = Some(parser.value()?.string()?),
            Long("turns") => match parse_turns(&parser.value()?.string()?) {
                Ok(t) => a.ask.turns = Some(t),
                Err(e) => return Ok(Err(e)),
            },
            Long("scope") => match Scope::parse(&parser.value()?.string()?) {
                Ok(s) => a.ask.scope = s,
                Err(e) => return Ok(Err(e)),
            },
            Long("limit") => a.ask.limit = number(&parser.value()?.string()?, "--limit")?,
            Long("page") => a.page = number(&parser.value()?.string()?, "--page")? as u32,
            Value(v) => query.push(v.string()?),
            _ => return Err(arg.unexpected()),
        }
    }
    if query.len() > 1 {
        return Ok(Err(Error::usage(format!(
            "ktr recall takes one query; quote it: ktr recall {:?}",
            query.join(" ")
        ))));
    }
    a.ask.query = query.pop().unwrap_or_default();
    if a.get.is_none() && a.ask.query.is_empty() && !a.help {
        return Ok(Err(Error::usage(
            "ktr recall needs a query (or --get HIT_ID); see ktr recall --help",
        )));
    }
    Ok(Ok(a))
}

fn number(text: &str, flag: &str) -> Result<usize, lexopt::Error> {
    text.trim().parse::<u32>().map(|n| n as usize).map_err(|_| {
        lexopt::Error::Custom(format!("{flag} takes a whole number, not {text:?}").into())
    })
}

pub fn run(args: &RecallArgs) -> Result<u8, Error> {
    if args.help {
        out::print(HELP);
        return Ok(0);
    }
    let config = Config::here(args.config.as_deref())?;
    if let Some(id) = &args.get {
        let store = Store::at(&config.state_dir);
        let page = ktr_pipeline::recall::get(&store, &config.project_dir, id, args.page)?;
        if args.json {
            out::json(&page);
        } else {
            out::print(&format!(
                "{}\n── page {} of {}{}\n",
                page.text,
                page.page,
                page.pages,
                if page.page + 1 < page.pages {
                    format!(" (next: --page {})", page.page + 1)
                } else {
                    String::new()
                }
            ));
        }
        return Ok(0);
    }
    let answer = ktr_pipeline::recall::recall(&config, &args.ask)?;
    if args.json {
        out::json(&answer);
    } else {
        out::print(&human(&answer));
    }
    Ok(0)
}

fn human(a: &Answer) -> String {
    let mut s = String::new();
    let mut last: Option<&str> = None;
    for h in &a.found.hits {
        if last != Some(h.session.as_str())
            && let Some(info) = a.sessions.iter().find(|i| i.session == h.session)
        {
            s.push_str(&format!(
                "── session {} ({}) · {}\n",
                info.session,
                info.cwd.as_deref().unwrap_or(&info.project),
                info.resume
            ));
        }
        last = Some(h.session.as_str());
        s.push_str(&hit_line(h));
    }
    for c in &a.found.carried {
        s.push_str(&carried_line(c));
    }
    s.push_str(&summary(&a.found));
    for lost in &a.lost {
        s.push_str(&format!(
            "not searched: session {}: {}\n",
            lost.session, lost.why
        ));
    }
    s
}

fn head(h: &Hit) -> String {
    let mut head = format!(
        "{} line {} turn {} {} {}",
        h.session_short,
        h.line,
        h.turn,
        h.timestamp.as_deref().unwrap_or("-"),
        h.kind.name()
    );
    if let Some(t) = &h.tool {
        head.push_str(&format!(" {t}"));
    }
    if let Some(i) = &h.input {
        head.push_str(&format!(" ({i})"));
    }
    head
}

fn hit_line(h: &Hit) -> String {
    let mut head = head(h);
    if let Some(o) = &h.offloaded {
        head.push_str(&format!(" in tool-results/{o}"));
        if let Some(p) = h.page {
            head.push_str(&format!(" (--page {p})"));
        }
    }
    let mut s = format!("{head}  [{}]\n", h.origin);
    if let Some(p) = &h.prompt {
        s.push_str(&format!("  asked: {p}\n"));
    }
    for n in h.context.iter().filter(|n| n.line < h.line) {
        s.push_str(&nearby_line(n));
    }
    s.push_str(&format!("  {}\n", h.snippet));
    for n in h.context.iter().filter(|n| n.line > h.line) {
        s.push_str(&nearby_line(n));
    }
    if let Some(c) = &h.call {
        s.push_str(&format!("  call line {} id {}\n", c.line, c.id));
    }
    if let Some(r) = &h.result {
        s.push_str(&format!("  result line {} id {}\n", r.line, r.id));
    }
    s.push_str(&format!("  id {}\n", h.id));
    s
}

fn nearby_line(n: &Nearby) -> String {
    let tool = n
        .tool
        .as_deref()
        .map(|t| format!(" {t}"))
        .unwrap_or_default();
    format!("    line {} {}{tool}: {}\n", n.line, n.kind.name(), n.text)
}

fn carried_line(c: &Carried) -> String {
    let copies = match c.older_copies {
        0 => String::new(),
        1 => "; 1 older copy".into(),
        n => format!("; {n} older copies"),
    };
    format!(
        "{} — also carried in the window{copies} (--all-copies)\n  {}\n",
        head(&c.hit),
        c.hit.snippet
    )
}

fn summary(f: &Found) -> String {
    let more = match f.total {
        Some(total) => format!("{total} matches in all"),
        None if f.more_at_least > 0 => format!(
            "at least {} more (--limit, a narrower query or filter, or --count for the exact total)",
            f.more_at_least
        ),
        None if !f.complete => {
            "older sessions not searched: the limit was reached (--limit or --count to go on)"
                .into()
        }
        None => "no more".into(),
    };
    let carried = if f.carried.is_empty() {
        String::new()
    } else {
        format!(
            " (+{} carried in the window{})",
            f.carried.len(),
            if f.carried_more > 0 {
                format!(", {} more", f.carried_more)
            } else {
                String::new()
            }
        )
    };
    format!(
        "{} hits{carried}; {more}; {} files, {} read\n",
        f.hits.len(),
        f.files_searched,
        out::bytes(f.bytes_searched)
    )
}
