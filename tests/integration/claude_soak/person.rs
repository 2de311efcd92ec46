//! The person at the keyboard: a tmux client attached to the CLI's server,
//! run in a pane of a second private server; each key goes through it one
//! at a time, 30–150 ms apart (the typing test's typist). They send a
//! prompt and wait for its answer; what comes back into the input line
//! (ktr's gate refused it during a switch, the guard gave it back) they
//! send again with Enter; what visibly did not get through — nothing of it
//! in the input line, nothing sent — they type again, and that counts as
//! keys lost.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::TmuxServer;
use crate::support::claude::{PANE, Tmux};
use crate::support::fake_api::FakeApi;
use crate::support::rng::Rng;
use ktr_pipeline::pane::Input;

/// How long a prompt may take to be answered on a busy two-core machine
/// (a switch, a killed stage's recovery, the next Stop).
const ANSWERED: Duration = Duration::from_secs(180);

/// What the person had to do again.
#[derive(Debug, Default)]
pub(super) struct Effort {
    /// Prompts typed again because nothing of them got through.
    pub retyped: Vec<String>,
    /// Enter pressed again on a prompt that came back whole.
    pub resent: usize,
    /// What the input line held when it held something else than a
    /// prefix of what was being typed (garbled keys).
    pub garbled: Vec<String>,
}

pub(super) struct Person {
    outer: TmuxServer,
}

impl Person {
    /// A client of `cli`'s server, in a second private server's pane.
    pub(super) fn attach(cli: &Tmux) -> Person {
        let socket = &cli.server.socket;
        let attach = ["tmux", "-L", socket, "attach", "-t", "cc"];
        let mut args = vec!["-s", "out", "-x", "170", "-y", "56", "--"];
        args.extend(attach);
        let outer = TmuxServer::start_on(&TmuxServer::unique_socket("ktr-soak"), None, &args);
        Person { outer }
    }

    /// Type `prompt`, press Enter, and wait until the model answered it with
    /// `reply` (the fake API sent it).
    pub(super) fn say(
        &self,
        cli: &Tmux,
        api: &FakeApi,
        prompt: &str,
        reply: &str,
        rng: &mut Rng,
        effort: &mut Effort,
    ) -> Result<(), String> {
        self.type_keys(prompt, rng);
        self.enter();
        let deadline = Instant::now() + ANSWERED;
        let mut quiet_since = Instant::now();
        while !api.replied_with(reply) {
            if Instant::now() > deadline {
                return Err(format!(
                    "{prompt:?} was never answered; the screen:\n{}",
                    cli.screen_of(PANE)
                ));
            }
            thread::sleep(Duration::from_millis(250));
            let sent = api.turns_asking(prompt) > 0;
            match Input::of_screen(&cli.screen_of(PANE)) {
                Input::Draft(d)
                    if d == prompt && quiet_since.elapsed() > Duration::from_secs(3) =>
                {
                    effort.resent += 1;
                    self.enter();
                    quiet_since = Instant::now();
                }
                Input::Draft(d)
                    if !prompt.starts_with(&d) && !d.is_empty() && !effort.garbled.contains(&d) =>
                {
                    effort.garbled.push(d);
                }
                Input::Idle if !sent && quiet_since.elapsed() > Duration::from_secs(4) => {
                    effort.retyped.push(prompt.to_string());
                    self.type_keys(prompt, rng);
                    self.enter();
                    quiet_since = Instant::now();
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn type_keys(&self, words: &str, rng: &mut Rng) {
        self.outer.type_slowly("out:0.0", words, rng);
    }

    fn enter(&self) {
        self.outer.press_enter("out:0.0");
    }
}
