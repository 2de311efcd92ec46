//! SIGKILL every stage at every step (the `KTR_TEST_PAUSE_AT` hook) and
//! check SPEC §0.6: the operation ends terminal at the next Stop hook, the
//! source is byte-identical, a candidate that never ran is gone, and a new
//! request then goes all the way through.

use std::process::Command;

use crate::support::rig::{Rig, SRC};
use ktr_pipeline::operation::Status;

/// Kill the stage paused at `at` and check the recovery; then prove the
/// next request works.
#[track_caller]
fn kill_at(rig: &mut Rig, at: &str, died_in: Status) {
    let source_sha = rig.source_sha();
    rig.pause_at = Some(at.to_string());
    let op = rig.request();
    assert!(rig.stop_current().contains("rebuild scheduled"), "{at}");
    let pid = rig.wait_paused();
    kill_paused(rig, pid, at);
    // Its watchdog may have failed it already.
    let paused = rig.store().load(&op.id).unwrap();
    assert!(
        paused.status == died_in || paused.worker_died_in == Some(died_in),
        "{at}: {} when killed, not {died_in}",
        paused.status
    );

    // The next Stop hook notices the dead worker and tells the human.
    rig.pause_at = None;
    let out = rig.stop_current();
    let why = format!("worker died during {died_in}");
    assert!(out.contains(&why), "{at}: {out}");
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!(op.status, Status::Failed, "{at}");
    assert_eq!(op.error.as_deref(), Some(why.as_str()), "{at}");
    assert_eq!(rig.store().active(), None, "{at}: nothing blocks");
    assert_eq!(rig.source_sha(), source_sha, "{at}: source untouched");
    if died_in == Status::Activating {
        assert!(op.needs_attention, "{at}: a human must look at the target");
        assert!(!rig.input_off(), "{at}: the pane's keyboard is back on");
        assert_eq!(
            op.target_after.as_deref(),
            Some(rig.pane_pid().as_str()),
            "{at}"
        );
    } else {
        assert!(!op.needs_attention, "{at}");
        assert_eq!(
            rig.transcripts()
                .iter()
                .filter(|n| !n.starts_with(SRC))
                .count(),
            rig.activated_candidates(),
            "{at}: the never-run candidate was discarded"
        );
    }

    // A new request goes all the way.
    let next = rig.request();
    assert!(rig.stop_current().contains("rebuild scheduled"), "{at}");
    let next = rig.wait_terminal(&next.id);
    assert_eq!(next.status, Status::Activated, "{at}: {:?}", next.error);
    let new_id = next.candidate.unwrap().session_id;
    assert_eq!(rig.resumed().as_deref(), Some(new_id.as_str()), "{at}");
    assert_eq!(rig.source_sha(), source_sha, "{at}: source untouched");
}

/// SIGKILL the stage paused at `at` (pid `pid`), wait until the kernel
/// has torn it down (`kill` returns once the signal is sent; longer under
/// load; only then does the next hook see it dead), and let the pause go.
#[track_caller]
pub(crate) fn kill_paused(rig: &Rig, pid: u32, at: &str) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "{at}: kill {pid}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ktr_pipeline::process::pid_alive(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "{at}: {pid} outlived SIGKILL"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::remove_file(&rig.pause_file).unwrap();
}

/// SIGKILL the watchdog of the stage `pid` (`ktr-watch … --pid PID`), as
/// if the machine had taken it too, and wait until it is gone.
#[track_caller]
pub(crate) fn kill_watchdog_of(pid: u32) {
    let watching = ["--pid".to_string(), pid.to_string()];
    let watchdogs = || -> Vec<u32> {
        let procs = std::fs::read_dir("/proc").unwrap().flatten();
        let pids = procs.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
        pids.filter(|p| {
            let argv = ktr_pipeline::process::cmdline(*p).unwrap_or_default();
            argv.first().is_some_and(|a| a.ends_with("/ktr-watch"))
                && argv.windows(2).any(|w| w == watching)
        })
        .collect()
    };
    let found = crate::support::wait_for(std::time::Duration::from_secs(10), || {
        !watchdogs().is_empty()
    });
    assert!(found, "no watchdog of {pid}");
    for p in watchdogs() {
        let killed = Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .status();
        assert!(killed.unwrap().success(), "kill {p}");
        while ktr_pipeline::process::pid_alive(p) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Nobody speaks after a stage was killed: its watchdog fails the
/// operation at once, with no hook or command run after it (the soak's
/// last turns found one "running" for good), discards the candidate that
/// never ran, and the session's next Stop says so, once.
#[test]
fn a_stage_killed_with_nothing_run_after_it_is_failed_by_its_watchdog() {
    let mut rig = Rig::tmux();
    // No hook could fail it within the test, whatever ran.
    rig.env.retain(|(k, _)| k != "KTR_WORKER_GRACE_SECONDS");
    rig.env
        .push(("KTR_WORKER_GRACE_SECONDS".into(), "3600".into()));
    rig.pause_at = Some("prepare:written".into());
    let op = rig.request();
    assert!(rig.stop_current().contains("rebuild scheduled"));
    let pid = rig.wait_paused();
    let written = rig.transcripts().len();
    kill_paused(&rig, pid, "prepare:written");
    rig.pause_at = None;
    let failed = crate::support::wait_for(std::time::Duration::from_secs(20), || {
        rig.store().load(&op.id).unwrap().status == Status::Failed
    });
    let op = rig.store().load(&op.id).unwrap();
    assert!(
        failed,
        "still {} with nothing run after the kill",
        op.status
    );
    assert_eq!(op.error.as_deref(), Some("worker died during running"));
    assert_eq!(
        rig.transcripts().len(),
        written - 1,
        "the candidate is discarded"
    );
    let out = rig.stop_current();
    assert!(out.contains("worker died during running"), "{out}");
    let again = rig.stop_current();
    assert!(!again.contains("worker died"), "told once: {again}");
}

trait Activated {
    fn activated_candidates(&self) -> usize;
}

impl Activated for Rig {
    /// Candidates of activated operations (kept: Claude Code ran them).
    fn activated_candidates(&self) -> usize {
        self.store()
            .list()
            .unwrap()
            .iter()
            .filter(|op| op.status == Status::Activated)
            .count()
    }
}

#[test]
#[ignore = "slow: kills ktr-prepare at each of its steps (~15 s)"]
fn killing_ktr_prepare_at_every_step() {
    let mut rig = Rig::tmux();
    for (step, status) in [
        ("delay", Status::Scheduled),
        ("running", Status::Running),
        ("frozen", Status::Running),
        ("written", Status::Running),
    ] {
        kill_at(&mut rig, &format!("prepare:{step}"), status);
    }
}

#[test]
fn killing_ktr_verify_at_every_step() {
    let mut rig = Rig::tmux();
    for step in ["start", "verified"] {
        kill_at(&mut rig, &format!("verify:{step}"), Status::Verifying);
    }
}

#[test]
#[ignore = "slow: kills ktr-activate at each of its steps (~20 s)"]
fn killing_ktr_activate_at_every_step() {
    let mut rig = Rig::tmux();
    for (step, status) in [
        ("start", Status::Verifying),
        ("checked", Status::Activating),
        ("switched", Status::Activating),
        ("healthy", Status::Activating),
    ] {
        kill_at(&mut rig, &format!("activate:{step}"), status);
    }
}

#[test]
fn killing_ktr_rollback_mid_switch_needs_attention() {
    let mut rig = Rig::tmux();
    let op = rig.rebuild();
    assert_eq!(op.status, Status::Activated, "{:?}", op.error);
    let candidate = op.candidate.clone().unwrap();
    rig.store().rollback_request(&op.id, "ROLLBACK").unwrap();
    rig.pause_at = Some("rollback:switched".into());
    rig.stop(&candidate.session_id, &candidate.path);
    let pid = rig.wait_paused();
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    std::fs::remove_file(&rig.pause_file).unwrap();
    rig.pause_at = None;
    let out = rig.stop_source();
    assert!(out.contains("worker died during rolling_back"), "{out}");
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!((op.status, op.needs_attention), (Status::Failed, true));
    assert_eq!(op.target_after.as_deref(), Some(rig.pane_pid().as_str()));
    assert!(
        candidate.path.exists(),
        "an activated candidate is never deleted"
    );
}

/// A switch whose stage died switches nothing: the gate does not refuse
/// the next prompt for it — that would leave no Stop to recover it, and
/// the person locked out of their session (the soak found this) — it fails
/// the operation and lets the prompt through, saying so.
#[test]
fn a_prompt_after_ktr_activate_was_killed_before_the_switch_fails_it_and_goes_through() {
    let mut rig = Rig::tmux();
    let source_sha = rig.source_sha();
    rig.pause_at = Some("activate:checked".into());
    let op = rig.request();
    assert!(rig.stop_current().contains("rebuild scheduled"));
    let pid = rig.wait_paused();
    // Its watchdog went too: only the hooks can fail it.
    kill_watchdog_of(pid);
    kill_paused(&rig, pid, "activate:checked");
    rig.pause_at = None;
    // The dead-worker grace as a person meets it: they send the prompt
    // again every half second; it goes through once the grace is over
    // (each refusal must not start the grace again).
    let grace = std::time::Duration::from_secs(2);
    rig.env.retain(|(k, _)| k != "KTR_WORKER_GRACE_SECONDS");
    rig.env.push((
        "KTR_WORKER_GRACE_SECONDS".into(),
        grace.as_secs().to_string(),
    ));
    let input = serde_json::json!({
        "session_id": SRC, "hook_event_name": "UserPromptSubmit", "prompt": "are you there?",
    });
    let killed = std::time::Instant::now();
    let out = loop {
        let (out, code) =
            rig.hook_from_claude(SRC, crate::support::exe("ktr-prompt"), &input.to_string());
        assert_eq!(code, 0, "{out}");
        if !out.contains("not sent") {
            break out;
        }
        assert!(
            killed.elapsed() < grace * 5,
            "still refused {:?} after the kill: {out}",
            killed.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert!(out.contains("worker died during activating"), "{out}");
    let op = rig.store().load(&op.id).unwrap();
    assert_eq!((op.status, op.needs_attention), (Status::Failed, true));
    assert!(!rig.input_off(), "the pane's keyboard is back on");
    assert_eq!(rig.source_sha(), source_sha, "source untouched");
}
