//! `ktr recall`: a verbatim search over the lineage — the
//! current session and every session it was rebuilt from, read from the
//! live transcripts or, once Claude Code deleted them, from ktr's backups.

use std::fs;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::Sandbox;
use ktr_base::ids::{OperationId, SessionId};
use ktr_pipeline::operation::{CandidateFile, Operation, Status};

pub(crate) const A: &str = "aaaaaaaa-0000-4000-8000-000000000001";
pub(crate) const B: &str = "bbbbbbbb-0000-4000-8000-000000000002";
pub(crate) const C: &str = "cccccccc-0000-4000-8000-000000000003";
pub(crate) const D: &str = "dddddddd-0000-4000-8000-000000000004";

pub(crate) fn line(v: &Value) -> String {
    format!("{v}\n")
}

pub(crate) fn user(text: &str, at: &str) -> String {
    line(&json!({"type": "user", "message": {"role": "user", "content": text}, "timestamp": at}))
}

pub(crate) fn said(blocks: &Value, at: &str) -> String {
    line(
        &json!({"type": "assistant", "message": {"role": "assistant", "content": blocks}, "timestamp": at}),
    )
}

pub(crate) fn call(id: &str, name: &str, input: &Value, at: &str) -> String {
    said(
        &json!([{"type": "tool_use", "id": id, "name": name, "input": input}]),
        at,
    )
}

pub(crate) fn result(id: &str, content: &str, at: &str) -> String {
    line(
        &json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": id, "content": content}]}, "timestamp": at}),
    )
}

/// A session that ran a command, read a file and thought, over two turns.
pub(crate) fn session(tag: &str, day: &str) -> String {
    let at = |t: &str| format!("{day}T{t}Z");
    [
        user(&format!("first question {tag}"), &at("10:00:00")),
        said(
            &json!([{"type": "thinking", "thinking": format!("thinking about THINK-{tag}")}]),
            &at("10:00:01"),
        ),
        call(
            &format!("toolu_{tag}_1"),
            "Bash",
            &json!({"command": format!("echo out-{tag}")}),
            &at("10:00:02"),
        ),
        result(
            &format!("toolu_{tag}_1"),
            &format!("OUTPUT-{tag} 中文标记 Straße"),
            &at("10:00:03"),
        ),
        said(
            &json!([{"type": "text", "text": format!("answer {tag}")}]),
            &at("10:00:04"),
        ),
        user(&format!("second question {tag}"), &at("11:00:00")),
        call(
            &format!("toolu_{tag}_2"),
            "Read",
            &json!({"file_path": format!("/src/{tag}.rs")}),
            &at("11:00:01"),
        ),
        result(
            &format!("toolu_{tag}_2"),
            &format!("fn file_{tag}() {{ ERR-{} }}", tag.len() * 111),
            &at("11:00:02"),
        ),
        said(
            &json!([{"type": "text", "text": format!("done {tag}")}]),
            &at("11:00:03"),
        ),
    ]
    .concat()
}

/// Record that `source` was rebuilt onto `candidate` (an activated
/// operation with the source's frozen backup).
/// An activated rebuild `source` → `candidate`, created at `created_at`.
/// Real operations follow one another (one in flight at a time); ones
/// made back to back here could share a millisecond, and the store orders
/// equal times by the random id, so each gets its own time.
pub(crate) fn rebuilt(
    sb: &Sandbox,
    source: &str,
    candidate: &str,
    created_at: std::time::SystemTime,
) -> String {
    let store = sb.store();
    let mut op = Operation::new("test", Some(SessionId::parse(source).unwrap()));
    op.created_at = ktr_base::time::Timestamp::parse(&ktr_base::time::rfc3339(created_at)).unwrap();
    let dir = store.artifacts_dir(&op.id).unwrap();
    let backup = dir.join(format!("{source}.jsonl"));
    fs::copy(sb.project.join(format!("{source}.jsonl")), &backup).unwrap();
    op.backup = Some(backup);
    op.candidate = Some(CandidateFile {
        session_id: SessionId::parse(candidate).unwrap(),
        path: sb.project.join(format!("{candidate}.jsonl")),
        sha256: ktr_base::digest::Sha256::default(),
    });
    op.status = Status::Activated;
    store.with_lock(|tx| tx.save(&mut op)).unwrap();
    op.id.to_string()
}

/// A → B → C → D, each with its own history; A's transcript deleted (as
/// Claude Code's cleanup does), its backup kept.
pub(crate) fn lineage() -> (Sandbox, Vec<String>) {
    let sb = Sandbox::new();
    let mut ops = Vec::new();
    for (i, (from, to)) in [(A, B), (B, C), (C, D)].into_iter().enumerate() {
        sb.add_transcript(
            from,
            session(&from[..1], &format!("2026-0{}-01", i + 1)).as_bytes(),
        );
        let created_at =
            std::time::SystemTime::now() - std::time::Duration::from_secs(10 - i as u64);
        ops.push(rebuilt(&sb, from, to, created_at));
    }
    sb.add_transcript(D, session("d", "2026-04-01").as_bytes());
    fs::remove_file(sb.project.join(format!("{A}.jsonl"))).unwrap();
    (sb, ops)
}

#[track_caller]
pub(crate) fn recall(sb: &Sandbox, args: &[&str]) -> Value {
    recall_in(sb, D, args)
}

/// `ktr recall --json` from session `current`.
#[track_caller]
pub(crate) fn recall_in(sb: &Sandbox, current: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json", "--current", current];
    all.extend_from_slice(args);
    let out = sb.run("recall", None, &all);
    assert_eq!(out.code, Some(0), "{} {}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

#[track_caller]
pub(crate) fn refused(sb: &Sandbox, args: &[&str]) -> String {
    let out = sb.run("recall", None, args);
    assert_ne!(out.code, Some(0), "{} {}", out.stdout, out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "one line: {}", out.stderr);
    out.stderr
}

pub(crate) fn hits(v: &Value) -> &Vec<Value> {
    v["hits"].as_array().unwrap()
}

pub(crate) fn sessions_of(v: &Value) -> Vec<String> {
    hits(v)
        .iter()
        .map(|h| h["session_short"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_lineage_of_three_rebuilds_is_searched_newest_first_down_to_the_deleted_first_session() {
    let (sb, ops) = lineage();
    let v = recall(&sb, &["output-"]);
    assert_eq!(
        sessions_of(&v),
        ["dddddddd", "cccccccc", "bbbbbbbb", "aaaaaaaa"]
    );
    let oldest = &hits(&v)[3];
    assert_eq!(
        oldest["origin"],
        format!("backup of operation {}", &ops[0][..8])
    );
    assert_eq!(oldest["kind"], "tool_result");
    assert_eq!(oldest["tool"], "Bash");
    assert_eq!(oldest["input"], "command: echo out-a");
    assert_eq!(oldest["line"], 4);
    assert_eq!(oldest["turn"], 1);
    assert_eq!(oldest["timestamp"], "2026-01-01T10:00:03Z");
    assert!(
        oldest["snippet"].as_str().unwrap().contains("⟦OUTPUT-⟧a"),
        "{oldest}"
    );
    assert_eq!(v["lineage"].as_array().unwrap().len(), 4);
    assert_eq!(hits(&v)[0]["origin"], "live transcript");
    // get reads the oldest hit whole from the backup.
    let out = sb.run("recall", None, &["--get", oldest["id"].as_str().unwrap()]);
    assert!(
        out.stdout
            .contains("── tool_result\nOUTPUT-a 中文标记 Straße"),
        "{} {}",
        out.stdout,
        out.stderr
    );
}

#[test]
fn each_filter_keeps_only_what_it_names() {
    let (sb, _) = lineage();
    let kinds = |v: &Value| -> Vec<String> {
        hits(v)
            .iter()
            .map(|h| h["kind"].as_str().unwrap().to_string())
            .collect()
    };
    let v = recall(&sb, &["think-", "--kind", "thinking"]);
    assert_eq!(kinds(&v), ["thinking"; 4]);
    assert!(hits(&recall(&sb, &["think-", "--kind", "user,assistant"])).is_empty());
    let v = recall(&sb, &["/src/", "--tool", "Read"]);
    assert_eq!(kinds(&v), ["tool_use"; 4]);
    let v = recall(&sb, &["fn file_", "--tool", "Read"]);
    assert_eq!(kinds(&v), ["tool_result"; 4]);
    assert!(hits(&recall(&sb, &["fn file_", "--tool", "Bash"])).is_empty());
    let v = recall(&sb, &["question", "--session", "bbbb"]);
    assert_eq!(sessions_of(&v), ["bbbbbbbb", "bbbbbbbb"]);
    let v = recall(
        &sb,
        &[
            "question",
            "--since",
            "2026-02-01",
            "--until",
            "2026-03-01T10:30:00Z",
        ],
    );
    assert_eq!(sessions_of(&v), ["cccccccc", "bbbbbbbb", "bbbbbbbb"]);
    let v = recall(&sb, &["question", "--turns", "2-", "--kind", "user"]);
    assert!(
        hits(&v)
            .iter()
            .all(|h| h["turn"] == 2 && h["snippet"].as_str().unwrap().contains("second")),
        "{v}"
    );
    assert_eq!(hits(&v).len(), 4);
    let v = recall(&sb, &["question", "--scope", "project"]);
    assert!(
        !sessions_of(&v).contains(&"aaaaaaaa".to_string()),
        "the project scope reads only live transcripts"
    );
}

#[test]
fn cjk_and_mixed_scripts_match_exactly_and_ascii_in_either_case() {
    let (sb, _) = lineage();
    assert_eq!(hits(&recall(&sb, &["中文标记"])).len(), 4);
    assert_eq!(hits(&recall(&sb, &["标记 Straße"])).len(), 4);
    assert_eq!(
        hits(&recall(&sb, &["标记 STRASSE"])).len(),
        0,
        "only ASCII folds"
    );
    assert_eq!(hits(&recall(&sb, &["output-D 中文"])).len(), 1);
    assert_eq!(hits(&recall(&sb, &["中文 标记"])).len(), 0);
}

#[test]
fn a_regex_on_request() {
    let (sb, _) = lineage();
    let v = recall(&sb, &["ERR-\\d{3}", "--regex"]);
    assert_eq!(hits(&v).len(), 4);
    assert!(
        hits(&v)[0]["snippet"]
            .as_str()
            .unwrap()
            .contains("⟦ERR-111⟧"),
        "{v}"
    );
    assert!(
        hits(&recall(&sb, &["ERR-\\d{3}"])).is_empty(),
        "literal by default"
    );
}

#[test]
fn the_limit_stops_the_search_and_says_more_exist_count_gives_the_total() {
    let (sb, _) = lineage();
    let v = recall(&sb, &["question", "--limit", "3"]);
    assert_eq!(hits(&v).len(), 3);
    assert!(v["more_at_least"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["complete"], false);
    assert!(v.get("total").is_none());
    let v = recall(&sb, &["question", "--limit", "3", "--count"]);
    assert_eq!(v["total"], 8);
    let human = sb.run(
        "recall",
        None,
        &["question", "--current", D, "--limit", "3"],
    );
    assert!(
        human.stdout.contains("3 hits; at least"),
        "{}",
        human.stdout
    );
}

#[test]
fn get_pages_a_large_result_in_16_kb_pieces_that_join_to_the_original() {
    let sb = Sandbox::new();
    let big: String = (0..3000).map(|i| format!("行{i} line {i}\n")).collect();
    let text = [
        call(
            "toolu_1",
            "Bash",
            &json!({"command": "seq"}),
            "2026-01-01T00:00:00Z",
        ),
        result("toolu_1", &big, "2026-01-01T00:00:01Z"),
    ]
    .concat();
    sb.add_transcript(D, text.as_bytes());
    let v = recall(&sb, &["行2999 line"]);
    let id = hits(&v)[0]["id"].as_str().unwrap().to_string();
    let page = |n: u32| -> Value {
        let out = sb.run(
            "recall",
            None,
            &["--json", "--get", &id, "--page", &n.to_string()],
        );
        serde_json::from_str(&out.stdout).unwrap()
    };
    let first = page(0);
    let pages = first["pages"].as_u64().unwrap() as u32;
    assert!(pages >= 3, "{pages}");
    let joined: String = (0..pages)
        .map(|n| page(n)["text"].as_str().unwrap().to_string())
        .collect();
    assert!(joined.contains(&big), "the pages hold the result verbatim");
    for n in 0..pages {
        assert!(page(n)["text"].as_str().unwrap().len() <= 16 * 1024);
    }
    assert!(
        refused(
            &sb,
            &[
                "--config",
                sb.config.to_str().unwrap(),
                "--get",
                &id,
                "--page",
                "99"
            ]
        )
        .contains("no page 99")
    );
}

/// A session whose `make big` output Claude Code offloaded to
/// `tool-results/b1x.txt`; `quoted` is written between the call and the
/// result that names the file (given that result's text).
fn offloaded_session(sb: &Sandbox, quoted: impl Fn(&str) -> String) {
    offloaded_session_holding(sb, "first\nthe OFFLOADED-MARKER line\n", quoted);
}

/// [`offloaded_session`] whose offloaded file holds `content`.
fn offloaded_session_holding(sb: &Sandbox, content: &str, quoted: impl Fn(&str) -> String) {
    let dir = sb.project.join(D).join("tool-results");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("b1x.txt"), content).unwrap();
    let reference = format!(
        "<persisted-output>\nOutput too large. Full output saved to: {}\n",
        dir.join("b1x.txt").display()
    );
    let text = [
        user("go", "2026-01-01T00:00:00Z"),
        call(
            "toolu_9",
            "Bash",
            &json!({"command": "make big"}),
            "2026-01-01T00:00:01Z",
        ),
        quoted(&reference),
        result("toolu_9", &reference, "2026-01-01T00:00:02Z"),
    ]
    .concat();
    sb.add_transcript(D, text.as_bytes());
}

#[test]
fn offloaded_tool_results_are_searched_and_cited_by_the_record_that_referenced_them() {
    let sb = Sandbox::new();
    offloaded_session(&sb, |_| String::new());
    let v = recall(&sb, &["offloaded-marker"]);
    let hit = &hits(&v)[0];
    assert_eq!(hit["kind"], "tool_result");
    assert_eq!(hit["line"], 3);
    assert_eq!(hit["tool"], "Bash");
    assert_eq!(hit["input"], "command: make big");
    assert_eq!(hit["timestamp"], "2026-01-01T00:00:02Z");
    assert_eq!(hit["offloaded"], "b1x.txt");
    assert_eq!(hit["page"], 0);
    let out = sb.run("recall", None, &["--get", hit["id"].as_str().unwrap()]);
    assert!(
        out.stdout.starts_with("first\nthe OFFLOADED-MARKER line\n"),
        "{} {}",
        out.stdout,
        out.stderr
    );
}

/// A line of an offloaded file too long to hold (1 MiB or more, the one
/// long-line rule) is still searched, a piece at a time, and cited around
/// its match.
#[test]
fn a_match_deep_in_a_long_line_of_an_offloaded_file_is_found() {
    let sb = Sandbox::new();
    let pad = "é0123456789".repeat(500_000);
    offloaded_session_holding(
        &sb,
        &format!("first\n{pad} the OFFLOADED-MARKER here {pad}\nlast\n"),
        |_| String::new(),
    );
    let v = recall(&sb, &["offloaded-marker"]);
    let hit = &hits(&v)[0];
    assert_eq!(hit["offloaded"], "b1x.txt", "{hit}");
    assert!(
        hit["snippet"]
            .as_str()
            .unwrap()
            .contains("OFFLOADED-MARKER⟧ here"),
        "{hit}"
    );
}

/// Claude Code 2.1.328 also logs a request's body (`api-request-blob`, no
/// timestamp), which quotes the result; whether it lands before or after
/// the result's own record is a race. The result's record is the citation
/// either way (a CI run once cited the blob: no tool, no time).
#[test]
fn an_offloaded_result_is_cited_by_its_result_not_by_a_request_that_quotes_it() {
    let sb = Sandbox::new();
    offloaded_session(&sb, |reference| {
        line(
            &json!({"type": "api-request-blob", "hash": "be68", "message": {"role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": reference}]}}),
        )
    });
    let v = recall(&sb, &["offloaded-marker"]);
    let hit = &hits(&v)[0];
    assert_eq!(hit["line"], 4, "{hit}");
    assert_eq!(hit["tool"], "Bash", "{hit}");
    assert_eq!(hit["timestamp"], "2026-01-01T00:00:02Z", "{hit}");
}

#[test]
fn hostile_arguments_get_one_clear_line() {
    let (sb, _) = lineage();
    let config = sb.config.to_str().unwrap();
    for (args, said) in [
        (vec!["x", "--limit", "1000000000"], "out of range"),
        (vec!["x", "--limit", "0"], "out of range"),
        (vec!["(unclosed", "--regex"], "does not compile"),
        (
            vec!["\\w{500}\\w{500}\\w{500}", "--regex"],
            "does not compile",
        ),
        (vec!["x", "--kind", "secrets"], "not one recall knows"),
        (vec!["x", "--session", "../../etc"], "not a session id"),
        (vec!["x", "--since", "yesterday"], "not a time"),
        (vec!["x", "--turns", "9-2"], "is empty"),
        (vec!["x", "--current", "../x"], "invalid session id"),
        (
            vec!["--get", "live:../../etc/passwd@0"],
            "not a recall hit id",
        ),
        (
            vec!["--get", "live:dddddddd-0000-4000-8000-000000000004@3"],
            "no record starts at byte 3",
        ),
    ] {
        let mut all = vec!["--config", config, "--current", D];
        all.extend(args.iter());
        let err = refused(&sb, &all[..]);
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let long = "q".repeat(5000);
    assert!(refused(&sb, &["--config", config, &long]).contains("at most 1000"));
}

#[test]
fn a_symlink_out_of_the_project_is_never_followed() {
    let (sb, _) = lineage();
    let outside = sb.root().join("secret.jsonl");
    fs::write(&outside, user("SECRET-WORDS", "2026-01-01T00:00:00Z")).unwrap();
    let linked = "eeeeeeee-0000-4000-8000-000000000005";
    std::os::unix::fs::symlink(&outside, sb.project.join(format!("{linked}.jsonl"))).unwrap();
    fs::create_dir_all(sb.project.join(D)).unwrap();
    std::os::unix::fs::symlink(sb.root(), sb.project.join(D).join("tool-results")).unwrap();
    assert!(hits(&recall(&sb, &["SECRET-WORDS", "--scope", "project"])).is_empty());
    assert!(hits(&recall(&sb, &["SECRET-WORDS"])).is_empty());
    let err = refused(
        &sb,
        &[
            "--config",
            sb.config.to_str().unwrap(),
            "--get",
            &format!("live:{linked}@0"),
        ],
    );
    assert!(err.contains("symlink"), "{err}");
}

/// A lineage session of `mb` MB (tool results of 2 KB) with one marker at its start.
fn big_history(sb: &Sandbox, mb: usize) -> PathBuf {
    let mut text = user("MARKER-AT-START", "2026-01-01T00:00:00Z");
    let chunk: String = "日志 log line with words ".repeat(80);
    let mut i = 0;
    while text.len() < mb << 20 {
        text.push_str(&result(
            &format!("toolu_{i}"),
            &chunk,
            "2026-01-01T00:00:01Z",
        ));
        i += 1;
    }
    sb.add_transcript(D, text.as_bytes())
}

#[test]
#[ignore = "slow: writes and searches 100 MB"]
fn a_100_mb_history_is_searched_within_32_mib() {
    let sb = Sandbox::new();
    big_history(&sb, 100);
    for query in ["nowhere-to-be-found", "MARKER-AT-START"] {
        let mut cmd = std::process::Command::new(crate::support::exe("ktr"));
        cmd.args([
            "recall",
            "--config",
            sb.config.to_str().unwrap(),
            "--current",
            D,
            "--count",
            "--json",
            query,
        ]);
        cmd.stdout(std::process::Stdio::piped());
        let (code, peak) = crate::memory::run_measured(&mut cmd, "ktr");
        assert_eq!(code, Some(0));
        assert!(peak <= 32 << 20, "{query}: peak RSS {} MiB", peak >> 20);
        eprintln!(
            "recall {query:?} over 100 MB: peak RSS {:.1} MiB",
            peak as f64 / f64::from(1 << 20)
        );
    }
}

#[test]
fn prune_keeps_the_last_copy_of_a_history_without_forget_and_keeps_every_link() {
    let (sb, ops) = lineage();
    let config = sb.config.to_str().unwrap();
    let out = sb.run("prune", None, &["--older-than", "0", "--yes"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("kept {}", ops[0])),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains(&format!("only copy left of session {A}")),
        "{}",
        out.stdout
    );
    assert!(
        sb.state
            .join("artifacts")
            .join(&ops[0])
            .join(format!("{A}.jsonl"))
            .is_file()
    );
    assert!(
        !sb.state
            .join("operations")
            .join(format!("{}.json", ops[1]))
            .exists(),
        "B's operation went: {}",
        out.stdout
    );
    // The lineage is still whole: B's link was kept.
    let v = recall(&sb, &["output-"]);
    assert_eq!(
        sessions_of(&v),
        ["dddddddd", "cccccccc", "bbbbbbbb", "aaaaaaaa"]
    );
    let wrong = sb.ktr(&[
        "prune".into(),
        "--config".into(),
        config.into(),
        "--older-than".into(),
        "0".into(),
        "--yes".into(),
        "--confirm".into(),
        "yes".into(),
    ]);
    assert!(wrong.stderr.contains("exactly FORGET"), "{}", wrong.stderr);
    let out = sb.run(
        "prune",
        None,
        &["--older-than", "0", "--yes", "--confirm", "FORGET"],
    );
    assert!(
        out.stdout
            .contains(&format!("deleted the last copy of session {A}'s history")),
        "{}",
        out.stdout
    );
    let v = recall(&sb, &["output-"]);
    assert_eq!(v["lost"][0]["session"], A);
    assert!(
        v["lost"][0]["why"].as_str().unwrap().contains("was pruned"),
        "{v}"
    );
}

/// The `transcript retention` check of `ktr doctor --json`.
#[track_caller]
fn retention_check(sb: &Sandbox) -> Value {
    let out = sb.run("doctor", None, &["--json"]);
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "transcript retention")
        .cloned()
        .unwrap()
}

#[test]
fn doctor_warns_when_claude_code_would_delete_the_oldest_ancestor() {
    let (sb, _) = lineage();
    let check = retention_check(&sb);
    assert_eq!(check["level"], "ok", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("cleanupPeriodDays 30 (Claude Code's default)"),
        "{check}"
    );
    let forty_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(40 * 86_400);
    fs::File::options()
        .write(true)
        .open(sb.project.join(format!("{B}.jsonl")))
        .unwrap()
        .set_modified(forty_days_ago)
        .unwrap();
    let check = retention_check(&sb);
    assert_eq!(check["level"], "warn", "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("({B}, unchanged for 40 days)")),
        "{detail}"
    );
    assert!(
        check["fix"]
            .as_str()
            .unwrap()
            .contains("raise cleanupPeriodDays")
    );
    fs::create_dir_all(sb.home.join(".claude")).unwrap();
    fs::write(
        sb.home.join(".claude/settings.json"),
        r#"{"cleanupPeriodDays": 90}"#,
    )
    .unwrap();
    let check = retention_check(&sb);
    assert_eq!(check["level"], "ok", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("cleanupPeriodDays 90 (in "),
        "{check}"
    );
}

/// ktr-ack's answer to Claude Code resuming `session`.
#[track_caller]
fn resumed(sb: &Sandbox, session: &str) -> Value {
    let input =
        json!({"session_id": session, "source": "resume", "hook_event_name": "SessionStart"})
            .to_string();
    let (out, code) = sb.hook(crate::support::exe("ktr-ack"), &input);
    assert_eq!(code, 0);
    serde_json::from_str(&out).unwrap()
}

/// Forget that Claude Code acknowledged operation `id` (so the next
/// resume is its first).
#[track_caller]
fn not_acked(sb: &Sandbox, id: &str) {
    sb.store()
        .with_lock(|tx| {
            let mut op = tx.load(&OperationId::parse(id).unwrap())?;
            op.ack = None;
            tx.save(&mut op)
        })
        .unwrap();
}

#[test]
fn the_rebuilt_session_is_told_once_that_recall_finds_what_its_window_lost() {
    let (sb, ops) = lineage();
    // The newest operation carried C's two turns onto D.
    let plan = sb.run(
        "plan",
        Some(&sb.project.join(format!("{C}.jsonl"))),
        &["--json"],
    );
    let stats: ktr_engine::PlanReport = serde_json::from_str(&plan.stdout).unwrap();
    assert_eq!(stats.selected_turns, 2);
    sb.store()
        .with_lock(|tx| {
            let mut op = tx.load(&OperationId::parse(&ops[2]).unwrap())?;
            op.stats = Some(stats);
            tx.save(&mut op)
        })
        .unwrap();
    // Without the MCP server there is no tool to name: nothing is added.
    assert_eq!(resumed(&sb, D)["hookSpecificOutput"], Value::Null);
    not_acked(&sb, &ops[2]);
    fs::write(
        sb.home.join(".claude.json"),
        r#"{"mcpServers": {"ktr": {"command": "ktr-mcp"}}}"#,
    )
    .unwrap();
    let answer = resumed(&sb, D);
    assert_eq!(
        answer["hookSpecificOutput"]["hookEventName"],
        "SessionStart"
    );
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(
        context.contains(&format!("2 turns of {C} were carried verbatim")),
        "{context}"
    );
    assert!(
        context.contains("mcp__ktr__thread_rebuild_recall finds them verbatim"),
        "{context}"
    );
    assert_eq!(context.lines().count(), 1);
    // A later resume of the same session is not told again.
    assert_eq!(resumed(&sb, D)["hookSpecificOutput"], Value::Null);

    // As the Claude Code plugin (no mcpServers.ktr, the plugin enabled):
    // the tool under the name the model sees then.
    not_acked(&sb, &ops[2]);
    fs::write(sb.home.join(".claude.json"), "{}").unwrap();
    fs::create_dir_all(sb.home.join(".claude")).unwrap();
    fs::write(
        sb.home.join(".claude/settings.json"),
        r#"{"enabledPlugins": {"ktr@ktr": true}}"#,
    )
    .unwrap();
    let answer = resumed(&sb, D);
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default();
    assert!(
        context.contains("mcp__plugin_ktr_ktr__thread_rebuild_recall finds them verbatim")
            && !context.contains("mcp__ktr__"),
        "{answer}"
    );
}

#[test]
fn the_rebuilt_session_is_told_when_recall_helps_and_to_load_its_tools_first() {
    let (sb, _) = lineage();
    fs::write(
        sb.home.join(".claude.json"),
        json!({"mcpServers": {"ktr": {"command": "ktr-mcp"}}}).to_string(),
    )
    .unwrap();
    let answer = resumed(&sb, D);
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    for said in [
        "before running a command again or re-reading a file whose output is no longer in this window",
        "load them with ToolSearch first",
    ] {
        assert!(context.contains(said), "{context}");
    }
}
