//! What the soak must show at its end, and what it prints: no lossy
//! compaction, no word lost (every prompt and every reply text exactly once
//! in the conversation the person ends in), no key lost or garbled, every
//! tool output found by `ktr recall` verbatim, every operation terminal.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::Household;
use super::hand::{Hand, Offers};
use super::model::{Kind, Turn};
use super::person::Effort;
use super::watch::Seen;
use crate::support::rng::Rng;
use ktr_pipeline::operation::Status;

/// The report and what failed.
#[derive(Default)]
pub(super) struct Verdict {
    pub report: Vec<String>,
    pub failures: Vec<String>,
}

impl Verdict {
    fn check(&mut self, what: &str, found: usize, wrong: &[String]) {
        self.report.push(format!("{what}: {found}"));
        if !wrong.is_empty() {
            let shown: Vec<&String> = wrong.iter().take(10).collect();
            self.failures.push(format!(
                "{what}: {} ({} in all): {shown:?}",
                found,
                wrong.len()
            ));
        }
    }
}

/// Judge the run: `anchor` maps the fake API's instants to wall time.
#[allow(clippy::too_many_arguments)]
pub(super) fn judge(
    h: &Household,
    hand: &Hand,
    turns: &[Turn],
    effort: &Effort,
    offers: &Offers,
    seen: &Seen,
    anchor: (Instant, SystemTime),
    rng: &mut Rng,
) -> Verdict {
    let mut v = Verdict::default();
    v.report.push(format!("turns: {}", turns.len()));

    // Lossy compactions: Claude Code never asked for a summary, never wrote
    // a boundary.
    let asked: Vec<String> = h
        .api
        .log()
        .iter()
        .filter(|l| l.compaction)
        .map(|l| format!("summary asked for session {:?}", l.session))
        .collect();
    let boundaries: Vec<String> = transcripts(&h.env.sandbox.project)
        .into_iter()
        .filter(|(_, text)| text.contains("\"subtype\":\"compact_boundary\""))
        .map(|(name, _)| format!("compact_boundary in {name}"))
        .collect();
    let lossy = [asked, boundaries].concat();
    v.check("lossy compactions", lossy.len(), &lossy);

    // Words: the conversation the person ends in, in each session.
    let serving = h.serving();
    let outside = hand.serving(&h.store);
    let (users, assistants) = texts(&h.env.transcript(&serving));
    let (users_out, assistants_out) = texts(&h.env.transcript(&outside));
    let mut lost = Vec::new();
    for t in turns {
        let (users, assistants) = if t.outside {
            (&users_out, &assistants_out)
        } else {
            (&users, &assistants)
        };
        for (said, all) in [(&t.prompt, users), (&t.reply, assistants)] {
            let times = all.iter().filter(|s| *s == said).count();
            if times != 1 {
                lost.push(format!("{times}× {}", cut(said)));
            }
        }
    }
    v.check("words lost", lost.len(), &lost);
    v.report.push(format!(
        "the person ends in session {serving} (tmux) and {outside} (outside tmux); \
         turns outside tmux: {}; offered lines typed: {}, talked over first: {}",
        turns.iter().filter(|t| t.outside).count(),
        offers.taken,
        offers.spoken_over
    ));

    // Keys: each prompt reached the model once, whole; nothing retyped or
    // garbled.
    let mut keys: Vec<String> = turns
        .iter()
        .filter_map(|t| {
            let times = h.api.turns_asking(&t.prompt);
            (times != 1).then(|| format!("{times}× sent: {}", cut(&t.prompt)))
        })
        .collect();
    keys.extend(
        effort
            .retyped
            .iter()
            .map(|p| format!("retyped: {}", cut(p))),
    );
    keys.extend(
        effort
            .garbled
            .iter()
            .map(|d| format!("garbled: {}", cut(d))),
    );
    v.check("keys lost or garbled", keys.len(), &keys);
    v.report
        .push(format!("prompts sent again with Enter: {}", effort.resent));

    // Recall: one line of every tool output that Claude Code recorded.
    let everything: String = files(&h.env.sandbox.project).concat();
    let (mut asked, mut missed) = (0, Vec::new());
    for t in turns.iter().filter(|t| t.kind == Kind::Tool) {
        let line = t.output_line(rng.between(1, t.output_lines as i64) as usize);
        if !everything.contains(&line) {
            continue;
        }
        asked += 1;
        // What the model of that session lacks: its lineage.
        let current = if t.outside { &outside } else { &serving };
        let out = h.ktr(&["recall", &line, "--current", current]);
        if !out.contains(&format!("⟦{line}⟧")) {
            missed.push(format!("{}: {}", cut(&line), cut(&out)));
        }
    }
    v.report
        .push(format!("tool outputs asked of recall: {asked}"));
    v.check("tool outputs recall did not find", missed.len(), &missed);

    // Operations.
    let ops = h.store.list().unwrap_or_default();
    let open: Vec<String> = ops
        .iter()
        .filter(|o| !o.status.is_terminal())
        .map(|o| format!("{} {}", o.id, o.status))
        .collect();
    v.check("operations not terminal", open.len(), &open);
    let reached = |s: Status| {
        ops.iter()
            .filter(|o| o.history.iter().any(|t| t.to == s))
            .count()
    };
    let rebuilt = reached(Status::Activated);
    if rebuilt == 0 {
        v.failures.push(
            "no rebuild was activated: the window never filled, the soak showed nothing".into(),
        );
    }
    v.report.push(format!(
        "operations: {}; rebuilds activated: {}; rolled back: {}; failed: {}",
        ops.len(),
        rebuilt,
        reached(Status::RolledBack),
        ops.iter().filter(|o| o.status == Status::Failed).count()
    ));
    v.report.push(format!(
        "stage runs: {}; killed: {} {:?}",
        seen.stage_runs,
        seen.killed.len(),
        seen.killed
    ));
    let ends: Vec<SystemTime> = h
        .api
        .reply_ends()
        .into_iter()
        .map(|i| anchor.1 + i.saturating_duration_since(anchor.0))
        .collect();
    let mut latency: Vec<Duration> = ops
        .iter()
        .flat_map(|o| o.history.iter().filter(|t| t.to == Status::Activated))
        .filter_map(|t| {
            let at = t.at.time();
            let end = ends.iter().filter(|e| **e <= at).max()?;
            at.duration_since(*end).ok()
        })
        .collect();
    latency.sort();
    if let (Some(median), Some(max)) = (latency.get(latency.len() / 2), latency.last()) {
        v.report.push(format!(
            "end of reply → activated: median {:.2} s, max {:.2} s ({} switches)",
            median.as_secs_f64(),
            max.as_secs_f64(),
            latency.len()
        ));
    }
    v.report.push(format!(
        "state dir: {} bytes; peak memory of a ktr process: {} KiB ({})",
        size(h.store.dir()),
        seen.peak_kib,
        seen.peak_of
    ));
    v
}

/// Each transcript of the project folder: name and text.
fn transcripts(project: &Path) -> Vec<(String, String)> {
    fs::read_dir(project)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| {
            let text = fs::read_to_string(e.path()).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), text))
        })
        .collect()
}

/// The text of every file below `dir` (transcripts, `tool-results/`,
/// subagents).
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else if let Ok(text) = fs::read_to_string(&path) {
            out.push(text);
        }
    }
    out
}

/// The main chain's user texts and assistant texts of a transcript.
fn texts(transcript: &Path) -> (Vec<String>, Vec<String>) {
    let (mut users, mut assistants) = (Vec::new(), Vec::new());
    let text = fs::read_to_string(transcript).unwrap_or_default();
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if record["isSidechain"] == Value::Bool(true) {
            continue;
        }
        let into = match record["type"].as_str() {
            Some("user") => &mut users,
            Some("assistant") => &mut assistants,
            _ => continue,
        };
        into.extend(
            crate::support::fake_api::content_texts(&record["message"]["content"])
                .into_iter()
                .map(|t| unstamped(&t).to_string()),
        );
    }
    (users, assistants)
}

/// `text` without the time stamp a rebuild puts before a turn's first
/// user item (`stamp_turns`, the default `stamp_template`).
fn unstamped(text: &str) -> &str {
    text.strip_prefix("[发生时间: ")
        .and_then(|rest| rest.split_once("]\n"))
        .map_or(text, |(_, said)| said)
}

/// Bytes below `dir`.
fn size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// At most 80 characters of `s`, for a report line.
fn cut(s: &str) -> String {
    s.chars().take(80).collect()
}
