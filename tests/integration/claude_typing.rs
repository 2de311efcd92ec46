//! A person typing through an attached tmux client while ktr switches.
//!
//! The real CLI runs in a private tmux server (`cc:0.0`); a second private
//! server's pane runs `tmux attach` to it: the person's keys go through that
//! client (`send-keys` into the outer pane, one character at a time, 30–150
//! ms apart), as a person's keyboard would, and the outer pane's screen is
//! what they see (the border notice included). Each trial: one exchange, a
//! request, then a prompt whose reply the fake model holds back; that
//! reply's end fires the switch — a rebuild, or (after one) a rollback — and
//! the person starts typing their next prompt at a random moment from −0.5 s
//! to +3 s around it, then presses Enter. They retype only what visibly did
//! not get through (nothing of it in the input line, nothing sent). A third
//! kind begins a draft during the reply (−1.5 s to −0.3 s) and leaves it
//! unsent. A fourth begins typing the moment ktr-keep's popup appears on
//! their screen, i.e. while Claude Code loads the resumed session (the keys
//! it would drop); the popup must have kept some of them. A fifth begins
//! the moment ktr's `/resume` line shows in the input line.
//!
//! Every trial runs once with a UTF-8 locale and once without any (no
//! `LANG`, `LC_*` for the CLI, its tmux server, ktr's hooks and stages: a
//! container, `env -i`, a service), where tmux 3.3a prints a format's
//! control characters as `_`.
//!
//! Pass: the fake API received each intended prompt exactly once and whole,
//! and answered it, and the session it was sent in holds it with its reply
//! (a rollback that waited for it switches away from that session after);
//! a draft is still in the input line (capture-pane); ktr's border notice
//! (or ktr-keep's popup, which starts with `ktr: ` too) was on the
//! person's screen in ≥ 90 % of the samples taken while they typed and ktr
//! had a notice up; and nothing was ever typed again: ktr-keep's popup
//! holds the keys Claude Code would drop while it loads the resumed
//! session and types them in after (before it, ~1 in 30 trials lost the
//! first keys). Each trial prints how many samples showed the popup and
//! how many bytes it kept (the stages' log).
//!
//! `KTR_TYPING_TRIALS` (default 5, one of each kind) trials in a row for
//! each locale in `KTR_TYPING_LOCALES` (default `utf8,none`), of the kinds
//! in `KTR_TYPING_KINDS` (default all, e.g. `InLoad,AtResume`),
//! `KTR_TYPING_SEED` (the seed, printed) — e.g. `KTR_TYPING_TRIALS=30
//! cargo test --test integration claude_typing -- --ignored --nocapture`.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::TmuxServer;
use crate::support::claude::{ClaudeEnv, PANE, Tmux};
use crate::support::fake_api::{FakeApi, Rule, last_user_text, text};
use crate::support::rng::{Rng, env_or};
use ktr_pipeline::operation::{Operation, Status, Store};
use ktr_pipeline::pane::Input;

/// How long the fake model holds back the reply that fires the switch.
const REPLY_DELAY: Duration = Duration::from_secs(2);
/// How long a trial's steps may take on a busy two-core machine.
const STEP: Duration = Duration::from_secs(90);

/// What a trial switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rebuild,
    Rollback,
    /// A draft typed during the reply and left unsent.
    Draft,
    /// A rebuild; typing begins when ktr-keep's popup appears.
    InLoad,
    /// A rebuild; typing begins when ktr's `/resume` line appears.
    AtResume,
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN) and tmux"]
fn a_person_typing_through_a_client_around_a_switch_loses_no_key() {
    let bin = crate::support::claude_bin();
    let trials: usize = env_or("KTR_TYPING_TRIALS", 5);
    let locales: String = env_or("KTR_TYPING_LOCALES", "utf8,none".to_string());
    let seed: u64 = env_or("KTR_TYPING_SEED", crate::support::rng::seed());
    eprintln!("typing: {trials} trials for each of {locales}, KTR_TYPING_SEED={seed}");
    let mut rng = Rng::new(seed);
    let (mut seen, mut shown, mut popup, mut retyped, mut failures) = (0, 0, 0, 0, Vec::new());
    // What the person's screen and the stages showed when a prompt was lost.
    let mut losses = Vec::new();
    let named: String = env_or("KTR_TYPING_KINDS", String::new());
    let kinds: Vec<Kind> = [
        Kind::Rebuild,
        Kind::Rollback,
        Kind::Draft,
        Kind::InLoad,
        Kind::AtResume,
    ]
    .into_iter()
    .filter(|k| named.is_empty() || named.split(',').any(|n| n == format!("{k:?}")))
    .collect();
    assert!(!kinds.is_empty(), "KTR_TYPING_KINDS={named} names no kind");
    let runs = locales
        .split(',')
        .flat_map(|l| (0..trials).map(move |n| (l, n)));
    for (locale, n) in runs {
        let kind = kinds[n % kinds.len()];
        // A draft is begun during the reply (before the switch).
        // InLoad's and AtResume's moment is what they wait for (offset 0
        // is printed).
        let offset_ms = if matches!(kind, Kind::InLoad | Kind::AtResume) {
            0
        } else if kind == Kind::Draft {
            rng.between(-1500, -300)
        } else {
            rng.between(-500, 3000)
        };
        let trial = Trial::start(&bin, n, locale == "none");
        let result = trial.run(kind, offset_ms, &mut rng);
        eprintln!(
            "typing: {locale} trial {n} {kind:?} offset {offset_ms} ms: {}",
            match &result {
                Ok(r) => format!(
                    "ok ({}/{} samples with the notice, {} with the key-keeping popup, {} retyped, {} bytes kept by the popup)",
                    r.shown,
                    r.seen,
                    r.popup,
                    r.retyped,
                    trial.kept()
                ),
                Err(e) => format!("LOST: {}", e.lines().next().unwrap_or("")),
            }
        );
        match result {
            Ok(r) => {
                seen += r.seen;
                shown += r.shown;
                popup += r.popup;
                retyped += r.retyped;
                if r.retyped > 0 {
                    losses.push(format!(
                        "{locale} trial {n} ({kind:?}): {}\n{}",
                        r.lost_at,
                        trial.diagnosis()
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "{locale} trial {n} ({kind:?}, {offset_ms} ms): {e}\n{}",
                trial.diagnosis()
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "seed {seed}: {}",
        failures.join("\n\n")
    );
    eprintln!(
        "typing: the notice was on the person's screen in {shown} of {seen} samples taken while ktr had one up ({popup} with the key-keeping popup); {retyped} prompts retyped"
    );
    // The popup holds every key typed while Claude Code loads the resumed
    // session and replays it after: nothing is ever to be typed again.
    assert_eq!(
        retyped,
        0,
        "seed {seed}: keys were lost: the person typed a prompt again {retyped} times\n{}",
        losses.join("\n\n")
    );
    assert!(
        seen == 0 || shown * 10 >= seen * 9,
        "seed {seed}: the notice was visible in only {shown} of {seen} samples"
    );
}

/// What a trial measured.
struct Typed {
    /// Samples of the person's screen taken while ktr had a notice up.
    seen: usize,
    /// Of those, how many showed it.
    shown: usize,
    /// Of those, how many showed ktr-keep's popup.
    popup: usize,
    /// How often the person typed the prompt again.
    retyped: usize,
    /// When and what the person saw the first time they typed it again.
    lost_at: String,
}

/// One installation: the CLI in server A, the person's client in server B.
/// Fields drop in order: the client, the CLI, the temp dir last.
struct Trial {
    outer: TmuxServer,
    tmux: Tmux,
    api: FakeApi,
    env: ClaudeEnv,
    store: Store,
    config: std::path::PathBuf,
    source_id: String,
    tag: String,
}

impl Trial {
    /// Trial `n`, with no locale at all when `without_locale`.
    fn start(bin: &Path, n: usize, without_locale: bool) -> Trial {
        let tag = format!("Y{n:03}");
        let rules = ["ONE", "TWO", "THREE", "FOUR", "FIVE", "DRAFT"]
            .iter()
            .map(|w| {
                Rule::new(
                    &format!("{tag}-{w}"),
                    vec![vec![text(&format!("{tag}-R-{w} done."))]],
                )
            })
            .collect();
        let api = FakeApi::start(rules);
        let mut env = ClaudeEnv::new(bin, &api);
        env.without_locale = without_locale;
        let socket = Tmux::unique_socket();
        env.extra_env
            .push(("KTR_TMUX_SOCKET".into(), socket.clone()));
        let (state, config) = (env.sandbox.state.clone(), env.sandbox.config.clone());
        fs::write(&config, crate::claude_loop::config_text(&env, &state)).unwrap();
        env.install_ktr(
            Path::new(env!("CARGO_MANIFEST_DIR")),
            Path::new(crate::support::exe("ktr")).parent().unwrap(),
            &config,
        );
        env.prepare_interactive(&[]);
        let source_id = uuid::Uuid::new_v4().to_string();
        let tmux = Tmux::start_on(&env, &socket, &["--session-id", &source_id]);
        // The person's terminal: a client of server A in server B's pane.
        let attach = ["tmux", "-L", &socket, "attach", "-t", "cc"];
        let mut outer_args = vec!["-s", "out", "-x", "170", "-y", "56", "--"];
        outer_args.extend(attach);
        let outer =
            TmuxServer::start_on(&TmuxServer::unique_socket("ktr-person"), None, &outer_args);
        Trial {
            outer,
            tmux,
            api,
            env,
            store: Store::open(&state).unwrap(),
            config,
            source_id,
            tag,
        }
    }

    fn run(&self, kind: Kind, offset_ms: i64, rng: &mut Rng) -> Result<Typed, String> {
        let tag = &self.tag;
        Self::wait(|| self.input() == Input::Idle, "an idle CLI")?;
        self.type_keys(&format!("{tag}-ONE hello"), rng);
        self.enter();
        Self::wait(|| self.answered(&format!("{tag}-ONE")), "ONE answered")?;
        // The request is for the reply that fires the switch: made before
        // ONE's Stop hook ran, that Stop would schedule it (and a prompt
        // typed during its prepare sends it back to `pending` until a later
        // Stop, not to a draft's wait).
        Self::wait(
            || self.stopped_after(&format!("{tag}-R-ONE")),
            "ONE's Stop hooks",
        )?;
        self.ktr(&[
            "request",
            "--confirm",
            "REBUILD",
            "--reason",
            "typing trial",
        ])?;
        let (fire, next) = if kind == Kind::Rollback {
            // First a rebuild (quietly), then the rollback around the reply.
            let op = self.rebuild_quietly(rng)?;
            Self::wait(|| self.input() == Input::Idle, "the rebuilt session idle")?;
            self.ktr(&["rollback-request", &op.id, "--confirm", "ROLLBACK"])?;
            (format!("{tag}-FOUR please"), format!("{tag}-FIVE go on"))
        } else {
            (format!("{tag}-TWO please"), format!("{tag}-THREE go on"))
        };
        self.api.set_turn_delay(REPLY_DELAY);
        self.type_keys(&fire, rng);
        self.enter();
        let asked = self
            .api
            .wait_turn(&fire, STEP)
            .ok_or("the prompt that fires the switch never reached the model")?;
        let reply_end = asked.at + REPLY_DELAY;
        let start = if offset_ms >= 0 {
            reply_end + Duration::from_millis(offset_ms.unsigned_abs())
        } else {
            reply_end
                .checked_sub(Duration::from_millis(offset_ms.unsigned_abs()))
                .unwrap()
        };
        if kind == Kind::InLoad {
            Self::wait(
                || {
                    self.person_screen()
                        .contains(ktr_pipeline::recorder::NOTICE)
                },
                "ktr-keep's popup",
            )?;
        } else if kind == Kind::AtResume {
            self.at_resume_line()?;
        } else {
            thread::sleep(start.saturating_duration_since(Instant::now()));
        }
        self.api.set_turn_delay(Duration::ZERO);
        let (draft, prompt) = match kind {
            Kind::Draft => (Some(format!("{tag}-DRAFT kept for later")), None),
            _ => (None, Some(next)),
        };
        let mut typed = Typed {
            seen: 0,
            shown: 0,
            popup: 0,
            retyped: 0,
            lost_at: String::new(),
        };
        let words = draft.as_ref().or(prompt.as_ref()).unwrap();
        self.type_watching(words, rng, &mut typed);
        if let Some(draft) = &draft {
            return self.draft_kept(draft, typed);
        }
        let prompt = prompt.unwrap();
        self.enter();
        self.until_answered(&prompt, rng, &mut typed)?;
        self.once_and_whole(&fire)?;
        self.once_and_whole(&prompt)?;
        let op = self.wait_op(
            |op| op.status.is_terminal() || op.status == Status::Pending,
            "the switch",
        )?;
        // The stage logs what the popups kept once they closed.
        if matches!(kind, Kind::InLoad | Kind::AtResume) && self.kept() == 0 {
            return Err("typed while the popup was up, but ktr-keep kept no key".into());
        }
        if !matches!(
            op.status,
            Status::Activated | Status::RolledBack | Status::Pending
        ) {
            return Err(format!("the operation ended {}: {:?}", op.status, op.error));
        }
        // Under the session it belongs to: the one it was sent in (a
        // rollback that waited for it then leaves that session) holds it
        // and its reply (and a rebuild after it carries both).
        let reply = prompt
            .split_whitespace()
            .next()
            .unwrap()
            .replacen('-', "-R-", 1);
        // Claude Code writes a turn to the transcript up to ~1 s after it.
        let held = crate::support::wait_for(Duration::from_secs(10), || {
            self.transcripts_holding(&prompt, &reply) > 0
        });
        if !held {
            return Err(format!(
                "no transcript holds {prompt} and its reply (the pane serves {})",
                self.pane_session()
            ));
        }
        Ok(typed)
    }

    /// A draft left unsent: the switch waits, the draft stays whole in the
    /// input line, the border says why.
    fn draft_kept(&self, draft: &str, typed: Typed) -> Result<Typed, String> {
        let op = self.wait_op(
            |op| op.status == Status::Pending && op.deferred.is_some() || op.status.is_terminal(),
            "the switch to wait for the draft",
        )?;
        if op.status != Status::Pending {
            return Err(format!(
                "the operation ended {} with a draft in the input line",
                op.status
            ));
        }
        if self.input() != Input::Draft(draft.to_string()) {
            return Err(format!(
                "the draft is not whole in the input line: {:?}",
                self.input()
            ));
        }
        if self
            .api
            .turns()
            .iter()
            .any(|t| last_user_text(t.messages()).contains(draft))
        {
            return Err("the unsent draft reached the model".into());
        }
        // The stage puts the waiting line up right after it recorded the
        // deferral; the client draws it a moment later.
        let told = crate::support::wait_for(Duration::from_secs(5), || {
            self.person_screen()
                .contains("ktr: the switch waits for you")
        });
        if !told {
            return Err(format!(
                "the person does not see why it waits:\n{}",
                self.person_screen()
            ));
        }
        Ok(typed)
    }

    /// Type `words` one character at a time through the client, sampling
    /// the person's screen at every key.
    fn type_watching(&self, words: &str, rng: &mut Rng, typed: &mut Typed) {
        for c in words.chars() {
            self.outer
                .tmux(&["send-keys", "-t", "out:0.0", "-l", &c.to_string()]);
            // A sample counts when ktr's notice was up before and after
            // the look: one taken as it came down (the popup closing, the
            // border notice removed) shows the client redrawing, not a
            // notice that was missing.
            let screen = self.notice_up().then(|| self.person_screen());
            if let Some(screen) = screen.filter(|_| self.notice_up()) {
                typed.seen += 1;
                typed.shown += usize::from(screen.contains("ktr: "));
                typed.popup += usize::from(screen.contains(ktr_pipeline::recorder::NOTICE));
            }
            thread::sleep(Duration::from_millis(rng.between(30, 150).unsigned_abs()));
        }
    }

    /// Wait until ktr's `/resume` line shows on the person's screen, looking
    /// as often as a capture allows (the line stays up ~0.15 s).
    fn at_resume_line(&self) -> Result<(), String> {
        let deadline = Instant::now() + STEP;
        while !self.person_screen().contains("/resume ") {
            if Instant::now() > deadline {
                return Err("ktr's /resume line never showed".into());
            }
        }
        Ok(())
    }

    /// Type `words` through the client at human speed (no sampling).
    fn type_keys(&self, words: &str, rng: &mut Rng) {
        self.outer.type_slowly("out:0.0", words, rng);
    }

    fn enter(&self) {
        self.outer.press_enter("out:0.0");
    }

    /// Talk until the requested rebuild is activated: a rebuild that went
    /// back to `pending` (a turn began after the Stop that scheduled it,
    /// e.g. ONE's Stop came after the request) waits for the next Stop,
    /// as a person's next message gives it.
    fn rebuild_quietly(&self, rng: &mut Rng) -> Result<Operation, String> {
        for round in 0..4 {
            let before = self
                .store
                .latest()
                .ok()
                .flatten()
                .map_or(0, |op| op.attempts);
            let line = format!("{}-TWO please {round}", self.tag);
            self.type_keys(&line, rng);
            self.enter();
            self.api
                .wait_turn(&line, STEP)
                .ok_or_else(|| format!("{line} never reached the model"))?;
            let op = self.wait_op(
                |op| {
                    op.status == Status::Activated
                        || op.status == Status::Pending
                            && op.attempts > before
                            && op.worker.as_ref().is_none_or(|w| !w.alive())
                },
                "the rebuild",
            )?;
            if op.status == Status::Activated {
                return Ok(op);
            }
            Self::wait(|| self.input() == Input::Idle, "an idle CLI")?;
        }
        Err("the rebuild never activated".into())
    }

    /// Wait until `prompt` is answered; what is left in the input line is
    /// sent again (Enter), what visibly did not get through is typed again.
    fn until_answered(&self, prompt: &str, rng: &mut Rng, typed: &mut Typed) -> Result<(), String> {
        let deadline = Instant::now() + STEP;
        let mut quiet_since = Instant::now();
        while !self.answered(prompt) {
            if Instant::now() > deadline {
                return Err(format!("{prompt} was never answered"));
            }
            thread::sleep(Duration::from_millis(250));
            let input = self.input();
            let sent = self.sent_times(prompt) > 0;
            match input {
                Input::Draft(d)
                    if d.contains(prompt) && quiet_since.elapsed() > Duration::from_secs(3) =>
                {
                    self.enter();
                    quiet_since = Instant::now();
                }
                Input::Idle if !sent && quiet_since.elapsed() > Duration::from_secs(4) => {
                    // Nothing of it on screen and nothing sent: type it again.
                    typed.retyped += 1;
                    if typed.lost_at.is_empty() {
                        typed.lost_at = format!(
                            "retyped at {}; the screen then:\n{}",
                            ktr_base::time::now_rfc3339(),
                            self.person_screen()
                        );
                    }
                    self.type_watching(prompt, rng, typed);
                    self.enter();
                    quiet_since = Instant::now();
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The model received `prompt` exactly once, whole.
    fn once_and_whole(&self, prompt: &str) -> Result<(), String> {
        let texts: Vec<String> = self
            .api
            .turns()
            .iter()
            .map(|t| last_user_text(t.messages()))
            .filter(|t| t.contains(prompt.split_whitespace().next().unwrap_or(prompt)))
            .collect();
        let whole = texts.iter().filter(|t| t.contains(prompt)).count();
        if whole != 1 || texts.len() != 1 {
            return Err(format!("{prompt:?} reached the model as {texts:?}"));
        }
        Ok(())
    }

    fn sent_times(&self, prompt: &str) -> usize {
        self.api
            .turns()
            .iter()
            .filter(|t| last_user_text(t.messages()).contains(prompt))
            .count()
    }

    /// The reply to `prompt` (its `R-` marker) was sent.
    fn answered(&self, prompt: &str) -> bool {
        let word = prompt.split_whitespace().next().unwrap_or(prompt);
        let marker = word.replacen('-', "-R-", 1);
        self.api.turns().iter().any(|t| {
            t.messages()
                .iter()
                .any(|m| m["role"] == "assistant" && m.to_string().contains(&marker))
        }) || self.tmux.screen_of(PANE).contains(&marker)
    }

    fn input(&self) -> Input {
        Input::of_screen(&self.tmux.screen_of(PANE))
    }

    /// What the person sees: the client's rendering (border, status line).
    fn person_screen(&self) -> String {
        self.outer.tmux(&["capture-pane", "-p", "-t", "out:0.0"])
    }

    /// Whether ktr has its notice up on the CLI's pane.
    fn notice_up(&self) -> bool {
        ktr_pipeline::targets::Target::Tmux(ktr_pipeline::targets::Tmux {
            program: "tmux".into(),
            socket: Some(self.tmux.server.socket.clone()),
            target: PANE.into(),
            bindings: None,
        })
        .shown_notice()
        .is_some()
    }

    /// Claude Code recorded that the Stop hooks ran after `reply` (its
    /// `stop_hook_summary`, written after every Stop, output or not).
    fn stopped_after(&self, reply: &str) -> bool {
        let source = self
            .env
            .sandbox
            .project
            .join(format!("{}.jsonl", self.source_id));
        fs::read_to_string(source).is_ok_and(|t| {
            t.find(reply)
                .is_some_and(|at| t[at..].contains(r#""subtype":"stop_hook_summary""#))
        })
    }

    /// How many transcripts of the project hold `prompt` and, after it,
    /// `reply`.
    fn transcripts_holding(&self, prompt: &str, reply: &str) -> usize {
        fs::read_dir(&self.env.sandbox.project).map_or(0, |entries| {
            entries
                .flatten()
                .filter_map(|e| fs::read_to_string(e.path()).ok())
                .filter(|t| t.find(prompt).is_some_and(|at| t[at..].contains(reply)))
                .count()
        })
    }

    /// The session the pane's Claude Code serves (ktr-ack's binding, else
    /// its command line, else the source).
    fn pane_session(&self) -> String {
        let bindings = ktr_pipeline::binding::dir(self.store.dir());
        ktr_pipeline::binding::of_pid(&bindings, self.tmux.pane_pid())
            .map(|b| b.session_id)
            .or_else(|| ktr_pipeline::targets::session_arg(&self.tmux.pane_argv()))
            .unwrap_or_else(|| self.source_id.clone())
    }

    fn wait(done: impl Fn() -> bool, what: &str) -> Result<(), String> {
        if crate::support::wait_for(STEP, done) {
            Ok(())
        } else {
            Err(format!("timed out waiting for {what}"))
        }
    }

    fn wait_op(&self, done: impl Fn(&Operation) -> bool, what: &str) -> Result<Operation, String> {
        let deadline = Instant::now() + STEP;
        loop {
            if let Some(op) = self.store.latest().map_err(|e| e.to_string())?
                && done(&op)
            {
                return Ok(op);
            }
            if Instant::now() > deadline {
                return Err(format!("timed out waiting for {what}"));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn ktr(&self, args: &[&str]) -> Result<String, String> {
        crate::support::ktr_as(&self.env.sandbox.home, &self.config, args)
    }

    /// The bytes ktr-keep's popups kept and replayed in this trial (the
    /// stages' log).
    fn kept(&self) -> usize {
        fs::read_to_string(self.store.worker_log())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split("ktr: kept and replayed ").nth(1))
            .filter_map(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
            .sum()
    }

    fn diagnosis(&self) -> String {
        let op = self.store.latest().ok().flatten().map_or_else(
            || "no operation".into(),
            |op| {
                op.history
                    .iter()
                    .map(|t| format!("  {} {} -> {}: {}", t.at, t.from, t.to, t.note))
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        );
        let log = fs::read_to_string(self.store.worker_log()).unwrap_or_default();
        let sent: Vec<String> = self
            .api
            .turns()
            .iter()
            .map(|t| last_user_text(t.messages()))
            .collect();
        format!(
            "history:\n{op}\nworker.log:\n{log}\nsent: {sent:?}\nthe person's screen:\n{}",
            self.person_screen()
        )
    }
}
