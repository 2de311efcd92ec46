//! The hand target with the real CLI (SPEC §12, "By hand"): Claude Code in
//! a pseudo-terminal outside tmux (no `TMUX`, no config file), ktr
//! installed as a plugin with its statusline. A requested rebuild is
//! prepared and verified after the reply, then offered — `ktr status` and
//! the statusline show `/resume <candidate>` — and the test types that
//! line into the terminal: Claude Code switches in place, `ktr-ack`'s
//! receipt makes the operation `activated`, and the next request carries
//! the rebuilt history under the candidate's id. Before that, a stale
//! offer: the person speaks first, the offer is withdrawn (the late
//! `/resume <old offer>` finds nothing) and the next Stop offers a new
//! line. Then a rollback by hand, and an offer nobody takes expires.
//! Ignored by default: it needs the real CLI (`KTR_CLAUDE_BIN`).

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::claude_plugin::{copy_checkout, install};
use crate::support::claude::ClaudeEnv;
use crate::support::fake_api::{FakeApi, Rule, conversation, text};
use crate::support::terminal::Terminal;
use crate::support::{OptionOrPanic, claude_bin, exe, sid, wait_for};
use ktr_pipeline::operation::{Operation, Status, Store};

/// How long a turn of the CLI may take on a busy two-core machine.
const TURN: Duration = Duration::from_secs(60);
/// How long the pipeline may take from the Stop hook to the offer.
const PIPELINE: Duration = Duration::from_secs(90);

fn rules() -> Vec<Rule> {
    let mut rules = Vec::new();
    for n in 1..=6 {
        rules.push(Rule::new(
            &format!("USER-{n} "),
            vec![vec![text(&format!("ASSISTANT-{n} 好。"))]],
        ));
        rules.push(Rule::new(
            &format!("PROBE-{n} "),
            vec![vec![text(&format!("ANSWER-{n} 记得。"))]],
        ));
    }
    rules
}

struct Person {
    api: FakeApi,
    env: ClaudeEnv,
    term: Terminal,
    store: Store,
}

impl Person {
    /// Say `line` (a prompt whose reply carries `reply`) and wait until
    /// the reply is drawn and the CLI is quiet again.
    fn say(&mut self, line: &str, reply: &str) {
        self.term.type_line(line);
        let needle = line.split(' ').next().unwrap_or(line).to_string() + " ";
        self.api
            .wait_turn(&needle, TURN)
            .or_panic(|| format!("{line} never reached the model\n{}", self.diagnosis()));
        let shown = wait_for(TURN, || self.term.text().contains(reply));
        assert!(
            shown,
            "the reply {reply} never showed\n{}",
            self.diagnosis()
        );
        self.term.wait_quiet(Duration::from_millis(1500), TURN);
    }

    fn wait(&self, op: &Operation, what: &str, done: impl Fn(&Operation) -> bool) -> Operation {
        let mut last = None;
        let ok = wait_for(PIPELINE, || {
            last = self.store.load(&op.id).ok();
            last.as_ref().is_some_and(&done)
        });
        assert!(ok, "never {what}\n{}", self.diagnosis());
        last.unwrap()
    }

    /// A rebuild of `session` asked for, then `line` said: offered after
    /// its reply.
    fn rebuild_offered(&mut self, session: &str, line: &str, reply: &str) -> Operation {
        let op = self
            .store
            .request("tidy up", "REBUILD", Some(&sid(session)))
            .unwrap();
        self.say(line, reply);
        self.wait(&op, "offered", |o| o.status == Status::Offered)
    }

    fn ktr(&self, args: &[&str]) -> String {
        let out = Command::new(exe("ktr"))
            .env_clear()
            .envs(self.env.env())
            .args(args)
            .current_dir(&self.env.sandbox.work)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// What ktr's statusline says for `session`.
    fn statusline(&self, session: &str) -> String {
        let input = json!({
            "session_id": session,
            "transcript_path": self.env.transcript(session),
            "context_window": {"context_window_size": 200_000,
                "current_usage": {"input_tokens": 30_000}},
        })
        .to_string();
        let mut child = Command::new(exe("ktr-statusline"))
            .env_clear()
            .envs(self.env.env())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
        String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).into_owned()
    }

    fn diagnosis(&self) -> String {
        format!(
            "operation: {:?}\nworker.log:\n{}\nscreen:\n{}",
            self.store.latest().ok().flatten(),
            fs::read_to_string(self.store.worker_log()).unwrap_or_default(),
            self.term.tail()
        )
    }
}

fn candidate(op: &Operation) -> String {
    op.candidate.as_ref().unwrap().session_id.to_string()
}

/// Seconds between two steps of `op`'s history: into `from` and into `to`.
fn seconds(op: &Operation, from: Status, to: Status) -> f64 {
    let at = |s: Status| {
        op.history
            .iter()
            .rev()
            .find(|t| t.to == s)
            .map(|t| t.at.time())
            .unwrap()
    };
    at(to)
        .duration_since(at(from))
        .unwrap_or_default()
        .as_secs_f64()
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn outside_tmux_the_person_types_the_offered_line_and_claude_code_switches_in_place() {
    let api = FakeApi::start(rules());
    let env = ClaudeEnv::new(&claude_bin(), &api);
    env.prepare_interactive(&["mcp__plugin_ktr_ktr"]);
    let checkout = env.sandbox.root().join("checkout");
    copy_checkout(&checkout);
    install(&env, &checkout, &["--plugin", "--statusline"]);
    let config = env.sandbox.home.join(".config/ktr/config.toml");
    let _ = fs::remove_file(&config);
    assert!(
        !env.env()
            .iter()
            .any(|(k, _)| k.starts_with("TMUX") || k.starts_with("KTR_"))
    );
    let old = uuid::Uuid::new_v4().to_string();
    let term = Terminal::start(&env, &["--session-id", &old]);
    term.wait_quiet(Duration::from_secs(2), TURN);
    let store = Store::open(&env.sandbox.home.join(".local/state/ktr")).unwrap();
    let mut p = Person {
        api,
        env,
        term,
        store,
    };
    p.say("USER-1 你好。", "ASSISTANT-1");
    let old_path = p.env.transcript(&old);

    // Asked for, the rebuild runs after the next reply and is offered.
    let op = p.rebuild_offered(&old, "USER-2 继续。", "ASSISTANT-2");
    let first = candidate(&op);
    eprintln!(
        "figure: end of reply (Stop) → offer: {:.2} s",
        seconds(&op, Status::Scheduled, Status::Offered)
    );
    let line = format!("/resume {first}");
    let status = p.ktr(&["status"]);
    assert!(
        status.contains(&line),
        "ktr status offers the line: {status}"
    );
    assert!(p.statusline(&old).contains(&line), "{}", p.statusline(&old));
    let shown = wait_for(Duration::from_secs(10), || p.term.text().contains(&line));
    assert!(
        shown,
        "the statusline on the screen offers it\n{}",
        p.diagnosis()
    );

    // The person speaks first: the offer is withdrawn at once, its
    // candidate removed; the next Stop offers a new line.
    let mark = p.term.mark();
    p.say("USER-3 还有一件事。", "ASSISTANT-3");
    assert!(
        p.term
            .text_since(mark)
            .contains(&format!("`{line}` is withdrawn")),
        "the person is told at once\n{}",
        p.diagnosis()
    );
    let first_path = p.env.transcript(&first);
    assert!(
        !first_path.exists(),
        "the stale offer's candidate is removed"
    );
    let op = p.wait(&op, "offered again", |o| {
        o.status == Status::Offered && candidate(o) != first
    });
    let second = candidate(&op);
    let old_bytes = fs::read(&old_path).unwrap();
    // Typed late, the old line finds nothing and takes nothing.
    let mark = p.term.mark();
    p.term.type_line(&format!("/resume {first}"));
    let not_found = wait_for(Duration::from_secs(10), || {
        // Claude Code draws some spaces as cursor moves.
        p.term
            .text_since(mark)
            .replace(' ', "")
            .contains("wasnotfound")
    });
    assert!(not_found, "{}", p.diagnosis());
    assert_eq!(p.store.load(&op.id).unwrap().status, Status::Offered);
    p.term.wait_quiet(Duration::from_millis(1500), TURN);
    // `/resume`'s picker lists the offered candidate by its title (the
    // old session's first prompt, "rebuilt" and the date); Escape leaves.
    let mark = p.term.mark();
    p.term.type_line("/resume");
    let listed = wait_for(Duration::from_secs(15), || {
        p.term
            .text_since(mark)
            .replace(' ', "")
            .contains("USER-1你好。(rebuilt")
    });
    assert!(
        listed,
        "the picker lists the candidate by its title\n{}",
        p.diagnosis()
    );
    p.term.type_keys("\x1b");
    p.term.wait_quiet(Duration::from_millis(1500), TURN);
    assert_eq!(p.store.load(&op.id).unwrap().status, Status::Offered);

    // The line typed: the same Claude Code switches, the receipt activates.
    let typed = Instant::now();
    p.term.type_line(&format!("/resume {second}"));
    let op = p.wait(&op, "activated", |o| o.status == Status::Activated);
    eprintln!(
        "figure: line typed → activated: {:.2} s",
        typed.elapsed().as_secs_f64()
    );
    assert_eq!(
        op.ack.as_ref().map(|a| a.session_id.to_string()),
        Some(second.clone())
    );
    p.term.wait_quiet(Duration::from_millis(1500), TURN);
    p.say("PROBE-1 还记得吗？", "ANSWER-1");
    let request = p.api.wait_turn("PROBE-1 ", TURN).unwrap();
    assert_eq!(request.session.as_deref(), Some(second.as_str()));
    let carried = conversation(&request);
    for said in ["USER-1", "ASSISTANT-1", "USER-2", "USER-3", "ASSISTANT-3"] {
        assert!(carried.contains(said), "{said} not carried: {carried}");
    }
    // ktr never writes the old transcript: what it held at the offer is
    // still there as it was (Claude Code itself may append to it).
    assert!(
        fs::read(&old_path).unwrap().starts_with(&old_bytes),
        "the old transcript was rewritten"
    );

    // A rollback by hand: offered after the rebuilt session's next reply.
    p.store.rollback_request(&op.id, "ROLLBACK").unwrap();
    p.say("USER-4 回去吧。", "ASSISTANT-4");
    let op = p.wait(&op, "rollback offered", |o| {
        o.status == Status::RollbackOffered
    });
    let back = op
        .restore
        .as_ref()
        .map_or_else(|| old.clone(), |r| r.session_id.to_string());
    assert!(p.ktr(&["status"]).contains(&format!("/resume {back}")));
    p.term.type_line(&format!("/resume {back}"));
    let op = p.wait(&op, "rolled back", |o| o.status == Status::RolledBack);
    assert!(
        op.history
            .last()
            .unwrap()
            .note
            .contains("rolled back by hand")
    );
    p.term.wait_quiet(Duration::from_millis(1500), TURN);
    p.say("PROBE-2 现在呢？", "ANSWER-2");
    let request = p.api.wait_turn("PROBE-2 ", TURN).unwrap();
    assert_eq!(request.session.as_deref(), Some(back.as_str()));
    assert!(
        conversation(&request).contains("USER-4"),
        "the turns since the rebuild came along"
    );

    // An offer nobody takes expires: its candidate removed, one line.
    let op = p.rebuild_offered(&back, "USER-5 再来。", "ASSISTANT-5");
    let unanswered = p.env.transcript(&candidate(&op));
    assert!(unanswered.exists());
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(&config, "request_ttl_hours = 0.0001\n").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let said = p.ktr(&["status"]);
    assert!(
        said.lines()
            .any(|l| l.contains("expired") && l.contains("nobody typed")),
        "{said}"
    );
    assert_eq!(p.store.load(&op.id).unwrap().status, Status::Expired);
    assert!(
        !unanswered.exists(),
        "the expired offer's candidate is removed"
    );
}
