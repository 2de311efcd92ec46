//! Recall across every session: `--scope all` reads every project's
//! sessions and the sessions only ktr's backups still hold, grouped by
//! session, each with the line a person types to resume it (its folder
//! from the transcript's `cwd`); subagents' transcripts are searched under
//! their parent session; `--file` keeps the tool calls that name a path;
//! `--project` keeps one project. The MCP tool still searches the lineage
//! unless asked.

use std::fs;

use serde_json::{Value, json};

use crate::recall::{A, B, C, D, call, hits, line, rebuilt, recall, result, user};
use crate::support::Sandbox;

const TERM: &str = "EVERYWHERE-TERM";
const OTHER_CWD: &str = "/srv/other proj";

fn with_cwd(mut record: Value, cwd: &str) -> String {
    record["cwd"] = json!(cwd);
    line(&record)
}

/// D (current, this project) with a subagent; C in another project; A
/// rebuilt onto B, then A's transcript deleted (only the backup holds it).
fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    let at = "2026-01-01T10:00:00Z";
    sb.add_transcript(
        A,
        user(&format!("{TERM} in the first session"), at).as_bytes(),
    );
    rebuilt(&sb, A, B, std::time::SystemTime::now());
    fs::remove_file(sb.project.join(format!("{A}.jsonl"))).unwrap();
    sb.add_transcript(B, user("nothing here", at).as_bytes());
    let here = [
        with_cwd(
            json!({"type": "user", "timestamp": at,
            "message": {"role": "user", "content": "read the config"}}),
            "/work/here",
        ),
        call(
            "toolu_1",
            "Read",
            &json!({"file_path": "/src/config.rs"}),
            at,
        ),
        result("toolu_1", &format!("{TERM} = 1 // config.rs"), at),
        call(
            "toolu_2",
            "Read",
            &json!({"file_path": "/src/other.rs"}),
            at,
        ),
        result("toolu_2", &format!("{TERM} = 2 // other.rs"), at),
    ]
    .concat();
    sb.add_transcript(D, here.as_bytes());
    let agents = sb.project.join(D).join("subagents");
    fs::create_dir_all(&agents).unwrap();
    fs::write(
        agents.join("agent-a1.jsonl"),
        user(&format!("subagent saw {TERM}"), at),
    )
    .unwrap();
    let other = sb.project.parent().unwrap().join("-srv-other-proj");
    fs::create_dir_all(&other).unwrap();
    fs::write(
        other.join(format!("{C}.jsonl")),
        with_cwd(
            json!({"type": "user", "timestamp": at,
            "message": {"role": "user", "content": format!("{TERM} elsewhere")}}),
            OTHER_CWD,
        ),
    )
    .unwrap();
    sb
}

fn sessions_hit(v: &Value) -> Vec<String> {
    let mut s: Vec<String> = hits(v)
        .iter()
        .map(|h| h["session"].as_str().unwrap().to_string())
        .collect();
    s.dedup();
    s
}

#[test]
fn scope_all_reads_every_project_and_the_sessions_only_a_backup_holds() {
    let sb = sandbox();
    let v = recall(&sb, &[TERM, "--scope", "all"]);
    let found = sessions_hit(&v);
    for s in [A, C, D] {
        assert!(found.contains(&s.to_string()), "{s} not searched: {v}");
    }
    let info = |s: &str| -> Value {
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["session"] == s)
            .cloned()
            .unwrap_or_else(|| panic!("no session {s}: {v}"))
    };
    assert_eq!(info(C)["cwd"], OTHER_CWD);
    assert_eq!(
        info(C)["resume"],
        format!("cd '{OTHER_CWD}' && claude --resume {C}"),
        "the folder comes from the transcript, not the lossy folder name"
    );
    assert_eq!(
        info(D)["resume"],
        format!("cd /work/here && claude --resume {D}")
    );
    let a = info(A);
    assert!(a["backup_of"].is_string(), "{a}");
    assert!(
        a["resume"]
            .as_str()
            .unwrap()
            .contains("ktr rollback-request"),
        "{a}"
    );
    // A person sees the hits grouped under each session's resume line.
    let human = sb.run("recall", None, &[TERM, "--current", D, "--scope", "all"]);
    assert!(
        human.stdout.contains(&format!(
            "── session {C} ({OTHER_CWD}) · cd '{OTHER_CWD}' && claude --resume {C}"
        )),
        "{}",
        human.stdout
    );
    // A hit in another project reads whole by its id.
    let other = hits(&v).iter().find(|h| h["session"] == C).unwrap();
    let got = sb.run("recall", None, &["--get", other["id"].as_str().unwrap()]);
    assert!(
        got.stdout.contains(&format!("{TERM} elsewhere")),
        "{}",
        got.stderr
    );
    // One project only.
    let v = recall(&sb, &[TERM, "--scope", "all", "--project", OTHER_CWD]);
    assert_eq!(sessions_hit(&v), [C], "{v}");
}

#[test]
fn a_subagents_transcript_is_searched_under_its_parent_session() {
    let sb = sandbox();
    let v = recall(&sb, &["subagent saw"]);
    assert_eq!(hits(&v).len(), 1, "{v}");
    let hit = &hits(&v)[0];
    assert_eq!(hit["session"], D);
    assert!(
        hit["origin"]
            .as_str()
            .unwrap()
            .contains("subagent agent-a1"),
        "{hit}"
    );
    let out = sb.run("recall", None, &["--get", hit["id"].as_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("subagent saw {TERM}")),
        "{}",
        out.stdout
    );
}

#[test]
fn file_keeps_the_tool_calls_that_name_the_path_and_their_results() {
    let sb = sandbox();
    let v = recall(&sb, &[TERM, "--file", "/src/config.rs"]);
    assert_eq!(hits(&v).len(), 1, "{v}");
    assert!(
        hits(&v)[0]["snippet"]
            .as_str()
            .unwrap()
            .contains("config.rs")
    );
    assert_eq!(hits(&v)[0]["input"], "file_path: /src/config.rs");
}

#[test]
fn the_mcp_tool_searches_the_lineage_unless_asked_for_all() {
    let sb = sandbox();
    let (mut c, _) = crate::mcp::Client::start(&sb, Some(D));
    let (err, found) = c.call("thread_rebuild_recall", json!({"query": TERM}));
    assert!(!err, "{found}");
    assert!(sessions_hit(&found).iter().all(|s| s == D), "{found}");
    let (err, found) = c.call(
        "thread_rebuild_recall",
        json!({"query": TERM, "scope": "all"}),
    );
    assert!(!err, "{found}");
    assert!(sessions_hit(&found).contains(&C.to_string()), "{found}");
}
