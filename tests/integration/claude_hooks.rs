//! ktr's hooks as the real Claude Code CLI runs them: `ktr-stop` as the Stop
//! hook schedules a pending operation with the session and transcript the
//! CLI reports, and `ktr-ack` as the `SessionStart` hook records the CLI's
//! own receipt (with `context_tokens`) when it resumes a rebuilt session.
//! The next stages are the sandbox's stand-ins (`support/bin/fake-stage`)
//! that only record their argv.

use std::fs;
use std::time::Duration;

use ktr_pipeline::operation::{CandidateFile, Status, Store};
use serde_json::json;

use crate::support::claude::ClaudeEnv;
use crate::support::fake_api::FakeApi;
use crate::support::sid;
use crate::support::{claude_bin, wait_for};

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_real_cli_runs_ktr_stop_and_ktr_ack() {
    let bin = claude_bin();
    let api = FakeApi::start(Vec::new());
    let mut env = ClaudeEnv::new(&bin, &api);
    // The sandbox's config: its project (the CLI's), state dir and workdir.
    let sandbox = &env.sandbox;
    let (state, stages, records, config_path) = (
        sandbox.state.clone(),
        sandbox.bin.clone(),
        sandbox.records.clone(),
        sandbox.config.clone(),
    );
    let config = sandbox.load_config();
    let hook = |bin: &str| format!("{bin} --config {}", config_path.display());
    let settings = json!({"hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": hook(crate::support::exe("ktr-stop")), "timeout": 10}]}],
        "SessionStart": [{"matcher": "resume",
                          "hooks": [{"type": "command", "command": hook(crate::support::exe("ktr-ack")), "timeout": 10}]}],
    }});
    fs::create_dir_all(env.sandbox.home.join(".claude")).unwrap();
    fs::write(
        env.sandbox.home.join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    env.extra_env
        .push(("KTR_BIN_DIR".into(), stages.display().to_string()));
    env.extra_env
        .push(("KTR_TEST_RECORDS".into(), records.display().to_string()));

    // A pending request; the CLI finishes a turn; its Stop hook schedules it.
    let store = Store::open(&state).unwrap();
    let op = store
        .request("e2e: tidy the window", "REBUILD", None)
        .unwrap();
    let source_id = "5e55a0e0-0000-4000-8000-00000000e2e4";
    let run = env.run(
        &["-p", "--session-id", source_id, "USER-H1 你好"],
        Duration::from_secs(120),
    );
    assert!(run.status.success(), "{} {}", run.stdout, run.stderr);
    let source = env.transcript(source_id);
    let record = records.clone();
    assert!(
        wait_for(Duration::from_secs(30), || fs::read_dir(&record)
            .unwrap()
            .flatten()
            .any(|e| e
                .file_name()
                .to_string_lossy()
                .starts_with("ktr-prepare."))),
        "the Stop hook did not start ktr-prepare; operation: {:?}; worker.log: {:?}; ktr.log: {:?}; stdout: {}; stderr: {}",
        store.load(&op.id).map(|o| (o.status, o.error)),
        fs::read_to_string(state.join("worker.log")).unwrap_or_default(),
        fs::read_to_string(state.join("ktr.log")).unwrap_or_default(),
        run.stdout,
        run.stderr,
    );
    let scheduled = store.load(&op.id).unwrap();
    assert_eq!(scheduled.status, Status::Scheduled);
    assert_eq!(scheduled.session_id.as_deref(), Some(source_id));
    assert_eq!(
        scheduled
            .transcript_path
            .as_deref()
            .map(|p| p.canonicalize().unwrap()),
        Some(source.canonicalize().unwrap())
    );
    let argv: Vec<String> = fs::read_dir(&records)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("ktr-prepare."))
        .map(|e| {
            fs::read_to_string(e.path())
                .unwrap()
                .lines()
                .map(String::from)
                .collect()
        })
        .unwrap();
    assert!(argv.iter().any(|a| *a == op.id), "{argv:?}");
    assert!(
        argv.iter()
            .any(|a| a.ends_with(&format!("{source_id}.jsonl"))),
        "{argv:?}"
    );

    // Stand in for prepare/verify/activate: write the candidate and walk the
    // operation to `activating`; then the CLI resumes the candidate.
    let new_id = "5e55a0e0-0000-4000-8000-00000000e2e5";
    let plan = ktr_engine::plan::build(&config, &source, Some(&sid(new_id))).unwrap();
    let candidate = env.transcript(new_id);
    fs::write(&candidate, plan.candidate.bytes()).unwrap();
    store
        .with_lock(|tx| {
            let mut op = tx.load(&op.id)?;
            op.candidate = Some(CandidateFile {
                session_id: ktr_base::ids::SessionId::parse(new_id).unwrap(),
                path: candidate.clone(),
                sha256: ktr_base::digest::Sha256::parse(&plan.candidate.sha256()).unwrap(),
            });
            for to in [Status::Running, Status::Verifying, Status::Activating] {
                tx.transition(&mut op, to, "e2e stand-in")?;
            }
            Ok(())
        })
        .unwrap();
    let run = env.resume(new_id, "PROBE-ack");
    assert!(run.status.success(), "{} {}", run.stdout, run.stderr);
    assert!(
        wait_for(Duration::from_secs(10), || store
            .load(&op.id)
            .is_ok_and(|o| o.ack.is_some())),
        "ktr-ack recorded no receipt; stderr: {}",
        run.stderr
    );
    let ack = store.load(&op.id).unwrap().ack.unwrap();
    assert_eq!(ack.session_id, new_id);
    let tokens = ack.context_tokens.expect("context_tokens");
    assert!(tokens > 0);
    eprintln!("ktr-ack recorded context_tokens = {tokens} for the resumed candidate");
}
