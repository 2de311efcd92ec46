//! The archive of record holds the whole session: Claude Code's cleanup
//! deletes a transcript with its folder `<session>/` (tool results,
//! subagent transcripts, workflows, titles…), so prepare keeps that
//! folder beside the frozen backup and a rollback to the deleted session
//! puts all of it back. A subagent's transcript is never a session.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::recall::hits;
use ktr_pipeline::operation::Status;

/// Files 2.1.328 writes in `<session>/` besides `tool-results/` (its
/// bundle's cleanup names them), each with a marker.
const SIDE: &[&str] = &[
    "tool-results/t1.txt",
    "subagents/agent-a1b2c3.jsonl",
    "subagents/agent-a1b2c3.meta.json",
    "subagents/workflows/run-1/agent-d4.jsonl",
    "workflows/run-1.json",
    "remote-agents/remote-agent-r1.meta.json",
    "mcp-tasks/mcp-task-t1.meta.json",
    "custom-title.json",
];

fn write_side(session_dir: &Path) {
    for rel in SIDE {
        let path = session_dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let text = if rel.ends_with(".jsonl") {
            format!(
                "{{\"type\":\"user\",\"isSidechain\":true,\"message\":{{\"role\":\"user\",\"content\":\"SIDE-MARKER of {rel}\"}}}}\n"
            )
        } else {
            format!("SIDE-MARKER of {rel}\n")
        };
        fs::write(path, text).unwrap();
    }
}

/// Every regular file below `root`, by its path under `root`, with its bytes.
fn contents(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, fs::read(&path).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_rollback_to_a_deleted_transcript_restores_it_and_its_whole_folder_from_the_backup() {
    use crate::support::rig::{Rig, SRC};
    let rig = Rig::tmux();
    let project = rig.sandbox.project.clone();
    let folder = project.join(SRC);
    write_side(&folder);
    let side_before = contents(&folder);
    assert_eq!(side_before.len(), SIDE.len());
    let original = fs::read(&rig.source).unwrap();
    let op = rig.rebuild();
    assert_eq!(op.status, Status::Activated, "{:?}", op.error);
    let artifacts = rig.sandbox.state.join("artifacts").join(&*op.id);
    assert_eq!(
        contents(&artifacts.join(SRC)),
        side_before,
        "prepare kept the whole session folder beside the backup"
    );
    // Nothing in it became a session: the lineage holds the two sessions.
    let found: Value =
        serde_json::from_str(&rig.ktr(&["recall", "side-marker", "--json"])).unwrap();
    let members: Vec<&str> = found["lineage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["session"].as_str().unwrap())
        .collect();
    assert_eq!(members.len(), 2, "{members:?}");
    assert!(members.iter().all(|m| !m.contains("agent")), "{members:?}");
    // Claude Code's cleanup deletes the old session and its folder.
    fs::remove_file(&rig.source).unwrap();
    fs::remove_dir_all(&folder).unwrap();
    let found: Value =
        serde_json::from_str(&rig.ktr(&["recall", "side-marker", "--json"])).unwrap();
    let hit = &hits(&found)[0];
    assert_eq!(hit["session"], SRC);
    assert!(
        hit["origin"]
            .as_str()
            .unwrap()
            .starts_with("backup of operation"),
        "{hit}"
    );
    // Roll back: the transcript comes back byte for byte, then is resumed.
    let candidate = op.candidate.clone().unwrap();
    rig.store().rollback_request(&op.id, "ROLLBACK").unwrap();
    rig.stop(&candidate.session_id, &candidate.path);
    let op = rig.wait_terminal(&op.id);
    assert_eq!(op.status, Status::RolledBack, "{:?}", op.error);
    assert_eq!(fs::read(&rig.source).unwrap(), original);
    assert_eq!(
        contents(&folder),
        side_before,
        "its whole folder came back too, subagents and all"
    );
    assert_eq!(rig.resume_history().last().map(String::as_str), Some(SRC));
    assert!(op.history.iter().any(|t| t.note.contains("rolled back")));
    let top: Vec<String> = fs::read_dir(&project)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        top.iter().all(|n| !n.starts_with("agent-")),
        "no subagent transcript put where sessions live: {top:?}"
    );
}

/// Measured with the real CLI: a subagent's transcript lands in
/// `<session>/subagents/`, and a rebuild keeps it beside the backup.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_subagents_transcript_from_the_real_cli_is_kept_beside_the_backup() {
    use crate::claude_loop::{Loop, TALK, serial};
    use crate::support::claude_bin;
    use crate::support::fake_api::{Rule, text, tool};
    let bin = claude_bin();
    let _serial = serial();
    let lp = Loop::start(&bin, &[]);
    lp.api.add_rules(vec![
        Rule::new(
            "SUBAGENT-ASK",
            vec![
                vec![tool(
                    "Agent",
                    serde_json::json!({
                        "description": "look around",
                        "prompt": "SUBAGENT-TASK say the word SUBAGENT-WORD",
                        "subagent_type": "general-purpose",
                    }),
                )],
                vec![text("ASSISTANT-S1 the helper answered")],
            ],
        ),
        Rule::new(
            "SUBAGENT-TASK",
            vec![vec![text("SUBAGENT-REPLY SUBAGENT-WORD")]],
        ),
    ]);
    lp.say("USER-S1 ask a helper SUBAGENT-ASK", "ASSISTANT-S1");
    let folder = lp.env.sandbox.project.join(&lp.source_id);
    let side = contents(&folder);
    let subagents: Vec<&PathBuf> = side
        .keys()
        .filter(|p| p.starts_with("subagents") && p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert!(
        !subagents.is_empty(),
        "2.1.328 wrote no subagent transcript under {}: {:?}",
        folder.display(),
        side.keys().collect::<Vec<_>>()
    );
    eprintln!(
        "2.1.328 wrote in <session>/: {:?}",
        side.keys().collect::<Vec<_>>()
    );
    let (ask, replied) = TALK[2];
    lp.say(ask, replied);
    let op = lp.wait_activated();
    let kept = contents(
        &lp.env
            .sandbox
            .state
            .join("artifacts")
            .join(&*op.id)
            .join(&lp.source_id),
    );
    for path in subagents {
        assert_eq!(kept.get(path), side.get(path), "{}", path.display());
    }
}
