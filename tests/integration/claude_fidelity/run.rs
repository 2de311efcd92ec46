//! Resuming both sessions, the table, and the tests.

use super::*;
use crate::claude_resume::residue_sent;
use crate::support::claude::ClaudeEnv;
use crate::support::claude_bin;
use crate::support::fake_api::{FakeApi, last_user_text};
use crate::support::plan::fixture_path as fixture;
use crate::support::sid;
use ktr_base::config::Config;
use ktr_engine::plan::{self, Plan};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Resume `session` with `probe`; the request the model got.
pub(super) fn resume(
    env: &ClaudeEnv,
    api: &FakeApi,
    session: &str,
    probe: &str,
) -> Result<Vec<Unit>, String> {
    let before = api.turns().len();
    let run = env.resume(session, probe);
    if !run.status.success() {
        return Err(format!(
            "claude --resume exited {}: {}",
            run.status,
            run.stderr
                .lines()
                .chain(run.stdout.lines())
                .last()
                .unwrap_or("")
        ));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let turns = api.turns();
        if let Some(request) = turns[before.min(turns.len())..]
            .iter()
            .rev()
            .find(|r| last_user_text(r.messages()).contains(probe))
        {
            return Ok(history(request, probe));
        }
        if std::time::Instant::now() > deadline {
            return Err("no request carried the probe".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Plan `case`, resume its original and its candidate, compare.
pub(super) fn differential(env: &ClaudeEnv, api: &FakeApi, case: &Case) -> Row {
    let mut row = Row {
        file: case.name.clone(),
        ..Row::default()
    };
    let config = env.config("");
    let id = fixed_id(&format!("rebuilt:{}", case.name));
    let mut plan = plan::build(&config, &case.source, Some(&sid(&id))).unwrap();
    if plan.report.malformed_lines > 0 {
        plan = plan::build(
            &env.config("on_malformed_line = \"skip\""),
            &case.source,
            Some(&sid(&id)),
        )
        .unwrap();
    }
    if let Some(why) = &plan.report.blocked_reason {
        row.status = format!("not planned: {why}");
        return row;
    }
    let original_id = fixed_id(&format!("original:{}", case.name));
    fs::create_dir_all(&env.sandbox.project).unwrap();
    fs::copy(&case.source, env.transcript(&original_id)).unwrap();
    fs::write(env.transcript(&id), plan.candidate.bytes()).unwrap();
    let probe = format!(
        "FIDELITY-PROBE {}: what did we talk about?",
        fixed_id(&case.name)
    );
    let original = match resume(env, api, &original_id, &probe) {
        Ok(units) => units,
        Err(e) => {
            row.status = format!("original does not resume: {e}");
            return row;
        }
    };
    let rebuilt = match resume(env, api, &id, &probe) {
        Ok(units) => units,
        Err(e) => {
            row.status = "compared".into();
            row.unexplained
                .push(format!("the rebuilt candidate does not resume: {e}"));
            return row;
        }
    };
    row.status = "compared".into();
    // What `claude_resume`'s residue check sees: no tool result, tool input
    // or thinking text of the source anywhere in the rebuilt request.
    let sent: String = rebuilt.iter().map(|u| u.text.as_str()).collect();
    for piece in residue_sent(&case.source, &config, &plan.candidate.lines, &sent) {
        row.unexplained
            .push(format!("source residue reached the model: {piece:?}"));
    }
    compare(&original, rebuilt, &case.source, &plan, &config, &mut row);
    row
}

pub(super) fn print_table(rows: &[Row]) {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nfidelity: original vs rebuilt resume in claude 2.1.328, text by text"
    );
    let _ = writeln!(
        out,
        "{:<44} {:>5} {:>5} {:>5} {:<26} {:>5}  residue by category",
        "file", "orig", "rebuilt", "conv", "startup", "unexp"
    );
    for r in rows {
        let name: String = if r.file.chars().count() > 44 {
            let chars: Vec<char> = r.file.chars().collect();
            let tail: String = chars[chars.len() - 23..].iter().collect();
            format!("{}…{tail}", chars[..20].iter().collect::<String>())
        } else {
            r.file.clone()
        };
        if r.status != "compared" {
            let _ = writeln!(out, "{name:<44} {}", r.status);
            continue;
        }
        let residue: Vec<String> = r.residue.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "{name:<44} {:>5} {:>5} {:>5} {:<26} {:>5}  {}",
            r.original_texts,
            r.rebuilt_texts,
            r.conversation,
            r.startup,
            r.unexplained.len(),
            residue.join(", ")
        );
        for u in &r.unexplained {
            let _ = writeln!(out, "    UNEXPLAINED {u}");
        }
    }
    crate::support::report("fidelity", &out);
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN) and the corpus (KTR_CORPUS, default ../shared/corpus)"]
pub(super) fn the_rebuilt_window_shows_what_the_original_resume_shows_minus_residue() {
    let bin = claude_bin();
    let cases = cases();
    let next = AtomicUsize::new(0);
    let rows = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                let api = FakeApi::start(Vec::new());
                let env = ClaudeEnv::new(&bin, &api);
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(case) = cases.get(i) else { break };
                    let row = differential(&env, &api, case);
                    rows.lock().unwrap().push(row);
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by(|a, b| a.file.cmp(&b.file));
    print_table(&rows);
    // Only files without a conversation of their own (subagent transcripts,
    // sidechain-only fixtures) may be refused; every original must resume.
    let skipped: Vec<String> = rows
        .iter()
        .filter(|r| {
            r.status != "compared" && r.status != "not planned: no conversation turns to carry"
        })
        .map(|r| format!("{}: {}", r.file, r.status))
        .collect();
    assert!(skipped.is_empty(), "files not compared: {skipped:?}");
    let compared: Vec<&Row> = rows.iter().filter(|r| r.status == "compared").collect();
    let bad: Vec<&Row> = compared
        .iter()
        .copied()
        .filter(|r| !r.unexplained.is_empty())
        .collect();
    assert!(
        bad.is_empty(),
        "{} file(s) with unexplained differences",
        bad.len()
    );
    // Every own fixture and most of the corpus must really be compared.
    for own in [
        "session_start_context",
        "command_expansions",
        "broken_timestamps",
    ] {
        assert!(
            compared.iter().any(|r| r.file == format!("{own}.jsonl")),
            "{own} was not compared"
        );
    }
    assert!(
        compared.len() >= 20,
        "only {} files compared",
        compared.len()
    );
}

/// Plan `source` into a candidate file `<dir>/<name>.jsonl`; its path.
pub(super) fn rebuild_into(
    config: &Config,
    source: &Path,
    dir: &Path,
    name: &str,
) -> (PathBuf, Plan) {
    let id = fixed_id(name);
    let plan = plan::build(config, source, Some(&sid(&id))).unwrap();
    assert!(!plan.is_blocked(), "{:?}", plan.report.blocked_reason);
    let path = dir.join(format!("{id}.jsonl"));
    fs::write(&path, plan.candidate.bytes()).unwrap();
    (path, plan)
}

/// The texts of a request's history, for an exact comparison.
pub(super) fn texts(units: &[Unit]) -> Vec<(String, String)> {
    units
        .iter()
        .map(|u| (u.role.clone(), u.text.trim_end().to_string()))
        .collect()
}

/// Rebuilding a rebuilt session changes nothing the model sees: no second
/// `SessionStart` context, header or stamp, the command expansion once.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
pub(super) fn a_rebuild_of_a_rebuild_shows_the_model_the_same_window() {
    let bin = claude_bin();
    let api = FakeApi::start(Vec::new());
    let env = ClaudeEnv::new(&bin, &api);
    fs::create_dir_all(&env.sandbox.project).unwrap();
    let config = env.config("");
    let dir = env.sandbox.project.clone();
    for fixture_name in [
        "session_start_context",
        "command_expansions",
        "startup_meta_reminder",
    ] {
        let (first, first_plan) = rebuild_into(
            &config,
            &fixture(fixture_name),
            &dir,
            &format!("first:{fixture_name}"),
        );
        let (_, second_plan) =
            rebuild_into(&config, &first, &dir, &format!("second:{fixture_name}"));
        assert_eq!(
            first_plan.report.startup_sha256, second_plan.report.startup_sha256,
            "{fixture_name}: the frozen startup text changed"
        );
        let probe = format!("REBUILD-TWICE-PROBE {fixture_name}");
        let once = resume(&env, &api, &first_plan.candidate.session_id, &probe).unwrap();
        let twice = resume(&env, &api, &second_plan.candidate.session_id, &probe).unwrap();
        // Claude Code's own per-start reminders aside, the windows are equal.
        let own = |units: &[Unit]| -> Vec<(String, String)> {
            texts(units)
                .into_iter()
                .filter(|(role, text)| !(role == "user" && text.starts_with("<system-reminder>")))
                .collect()
        };
        assert_eq!(
            own(&once),
            own(&twice),
            "{fixture_name}: the second rebuild differs"
        );
        let all: String = texts(&twice).into_iter().map(|(_, t)| t + "\n").collect();
        assert!(
            all.matches("[续窗启动快照").count() <= 1,
            "{fixture_name}: stacked header"
        );
        assert!(
            !all.contains("]\n[发生时间:"),
            "{fixture_name}: stacked stamps"
        );
        assert!(
            all.matches(SESSION_START).count() <= 2,
            "{fixture_name}: stacked contexts"
        );
        eprintln!(
            "{fixture_name}: {} texts, identical after a second rebuild",
            own(&twice).len()
        );
    }
}
