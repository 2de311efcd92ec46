//! The household's second session: Claude Code in a pseudo-terminal outside
//! tmux (the hand target, SPEC §12 "By hand"), in the same project, so the
//! standing approval holds there too. ktr never types into it: when it
//! offers a line (`/resume <id>`: a rebuild the guard started, or a
//! rollback), the person types it — most times at once, sometimes only
//! after saying something first (the offer is then withdrawn and a new one
//! follows the next reply).

use std::thread;
use std::time::{Duration, Instant};

use super::person::Effort;
use crate::support::claude::ClaudeEnv;
use crate::support::fake_api::FakeApi;
use crate::support::rng::Rng;
use crate::support::terminal::Terminal;
use ktr_pipeline::operation::{Operation, Status, Store};
use ktr_pipeline::stages::hand::offered_session;

/// How long a prompt may take to be answered, or an offered line to be
/// taken, on a busy two-core machine.
const ANSWERED: Duration = Duration::from_secs(180);

/// What ktr's gate says of a prompt it refused during a switch.
const REFUSED: &str = "was not sent";

/// What happened to the offers.
#[derive(Debug, Default)]
pub(super) struct Offers {
    /// Lines typed and taken (`activated` / `rolled_back` on the receipt).
    pub taken: usize,
    /// Offers the person talked over first.
    pub spoken_over: usize,
}

pub(super) struct Hand {
    term: Terminal,
    /// The session the CLI started on.
    pub first: String,
}

impl Hand {
    pub(super) fn start(env: &ClaudeEnv) -> Hand {
        let first = uuid::Uuid::new_v4().to_string();
        let term = Terminal::start(env, &["--session-id", &first]);
        term.wait_quiet(Duration::from_millis(1500), ANSWERED);
        Hand { term, first }
    }

    /// The session the CLI serves now: its lineage followed through the
    /// operations the receipts ended (a hand switch is `activated` or
    /// `rolled_back` only on Claude Code's own receipt).
    pub(super) fn serving(&self, store: &Store) -> String {
        let mut ops = store.list().unwrap_or_default();
        ops.sort_by_key(|op| op.created_at.time());
        let mut now = self.first.clone();
        for op in &ops {
            let from = op.session_id.as_ref().map(ToString::to_string);
            let to = op.candidate.as_ref().map(|c| c.session_id.to_string());
            let reached = |s: Status| op.history.iter().any(|t| t.to == s);
            if from.as_deref() == Some(now.as_str())
                && reached(Status::Activated)
                && let Some(to) = &to
            {
                now.clone_from(to);
            }
            if to.as_deref() == Some(now.as_str()) && reached(Status::RolledBack) {
                now = op.restore.as_ref().map_or_else(
                    || from.clone().unwrap_or_default(),
                    |r| r.session_id.to_string(),
                );
            }
        }
        now
    }

    /// Type `prompt` (30–150 ms a key), Enter, and wait for `reply`. A
    /// prompt ktr's gate refused during a switch ("your message was not
    /// sent — send it again in a moment"; Claude Code gives it back to the
    /// input line) they send again with Enter, as the person in tmux does.
    pub(super) fn say(
        &mut self,
        api: &FakeApi,
        prompt: &str,
        reply: &str,
        rng: &mut Rng,
        effort: &mut Effort,
    ) -> Result<(), String> {
        let mark = self.term.mark();
        self.type_line(prompt, rng);
        let deadline = Instant::now() + ANSWERED;
        let (mut refused, mut last) = (0, Instant::now());
        while !api.replied_with(reply) {
            if Instant::now() > deadline {
                return Err(format!(
                    "{prompt:?} was never answered outside tmux; the terminal:\n{}",
                    self.term.tail()
                ));
            }
            thread::sleep(Duration::from_millis(200));
            let seen = self.term.text_since(mark).matches(REFUSED).count();
            if seen > refused && last.elapsed() > Duration::from_secs(3) {
                refused = seen;
                effort.resent += 1;
                self.term.type_keys("\r");
                last = Instant::now();
            }
        }
        self.term.wait_quiet(Duration::from_millis(1500), ANSWERED);
        Ok(())
    }

    /// If ktr offers this session a line, type it (four times in five, or
    /// `always`) and wait for Claude Code's receipt; else leave it standing
    /// (the person talks first).
    pub(super) fn take_offer(
        &mut self,
        store: &Store,
        rng: &mut Rng,
        offers: &mut Offers,
        always: bool,
    ) -> Result<(), String> {
        let serving = self.serving(store);
        let Some((op, line)) = offered(store, &serving) else {
            return Ok(());
        };
        if !always && !rng.percent(80.0) {
            offers.spoken_over += 1;
            return Ok(());
        }
        self.type_line(&line, rng);
        let deadline = Instant::now() + ANSWERED;
        loop {
            let now = store.load(&op.id).map_err(|e| e.to_string())?;
            if matches!(now.status, Status::Activated | Status::RolledBack)
                && now.status != op.status
            {
                offers.taken += 1;
                self.term.wait_quiet(Duration::from_millis(1500), ANSWERED);
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the typed {line:?} was never taken ({}); the terminal:\n{}",
                    now.status,
                    self.term.tail()
                ));
            }
            thread::sleep(Duration::from_millis(200));
        }
    }

    fn type_line(&mut self, text: &str, rng: &mut Rng) {
        for c in text.chars() {
            self.term.type_keys(&c.to_string());
            thread::sleep(Duration::from_millis(rng.between(30, 150).unsigned_abs()));
        }
        thread::sleep(Duration::from_millis(400));
        self.term.type_keys("\r");
    }
}

/// The operation offering `serving` a line, and the line (the session
/// offered as ktr names it).
fn offered(store: &Store, serving: &str) -> Option<(Operation, String)> {
    store.list().ok()?.into_iter().find_map(|op| {
        // The session the offer is made in: the one it switches away from.
        let made_in = match op.status {
            Status::Offered => op.session_id.as_ref().map(ToString::to_string),
            Status::RollbackOffered => op.candidate.as_ref().map(|c| c.session_id.to_string()),
            _ => None,
        }?;
        let to = offered_session(&op).filter(|_| made_in == serving)?;
        Some((op, format!("/resume {to}")))
    })
}
