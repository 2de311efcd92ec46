//! The key keeper of a tmux in-place switch (SPEC §12): while ktr types
//! `/resume <id>` and waits for the resumed session, every tmux client
//! showing the pane gets a popup running `ktr-keep` ([`crate::recorder`]),
//! which holds that client's keyboard and records each key; when the
//! switch is over the recorders replay the keys into the pane, in order,
//! and close.
//!
//! Measured on tmux 3.3a: `display-popup -c CLIENT -E` run from a shell
//! opens the popup on that client at once (the recorder runs 13 ms after
//! the command starts) but returns only when the popup closes, so it is
//! started as a child and reaped at the end. Keys typed through the client
//! go to the popup's program. A popup that does not open, a client that
//! detaches, a recorder that dies: the switch goes on as without one, and
//! what a recorder wrote down but did not replay is replayed here.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::CONTROL_TIMEOUT;
use super::tmux::Tmux;
use crate::process::{self, ProcessId};
use crate::recorder::{self, Files};
use ktr_base::error::{Error, Result};

/// How long a popup may take to hold the keyboard (13 ms measured).
const OPEN: Duration = Duration::from_secs(2);
/// How long the recorders may take to replay and close once told: a
/// person typing on keeps a popup up until they pause (at most
/// [`recorder::PAUSE_WAIT`]), then it replays and closes.
const FINISH: Duration = Duration::from_secs(recorder::PAUSE_WAIT.as_secs() + 5);
/// The popup's widest, and its height (the border and three lines).
const WIDTH: u32 = 72;
const HEIGHT: u32 = 5;

/// The popups of one switch; finished (every recorded key replayed) when
/// [`Keeper::finish`] is called or when dropped.
#[must_use = "the keys are replayed when the keeper is finished or dropped"]
pub struct Keeper {
    /// The pane, on its server's socket path.
    tmux: Option<Tmux>,
    held: Vec<Held>,
    dir: Option<PathBuf>,
    /// Why a client got no popup.
    missed: Vec<String>,
}

/// One client's popup.
struct Held {
    client: String,
    files: Files,
    popup: Child,
    recorder: Option<ProcessId>,
}

impl Keeper {
    /// No popup: the target has no clients to hold, or no keeper is wanted.
    pub fn none() -> Keeper {
        Keeper {
            tmux: None,
            held: Vec::new(),
            dir: None,
            missed: Vec::new(),
        }
    }

    /// No popup, for `why` (said in the stage's log).
    fn without(why: String) -> Keeper {
        let mut keeper = Keeper::none();
        keeper.missed.push(why);
        keeper
    }

    /// How many clients' keyboards are held.
    pub fn holding(&self) -> usize {
        self.held.len()
    }

    /// Why clients got no popup (empty when each did).
    pub fn missed(&self) -> &[String] {
        &self.missed
    }

    /// Tell every recorder to finish and wait until each replayed its keys
    /// and closed; replay here what a recorder recorded but did not
    /// (killed, or its popup closed under it). Returns what happened, one
    /// line, empty when there were no popups.
    pub fn finish(&mut self) -> String {
        self.settle().0
    }

    /// [`Keeper::finish`], and whether anything went wrong (the line then
    /// says what).
    fn settle(&mut self) -> (String, bool) {
        let Some(tmux) = self.tmux.take() else {
            return (String::new(), false);
        };
        let held = std::mem::take(&mut self.held);
        let count = held.len();
        for h in &held {
            h.files.tell_stop();
        }
        let deadline = Instant::now() + FINISH;
        let (mut kept, mut problems, mut lost) = (0usize, Vec::new(), false);
        for mut h in held {
            if !ended_by(&mut h, deadline) {
                // Close the popup (the recorder replays on SIGHUP), then
                // make sure it is gone before its keys are replayed here.
                let close = tmux.argv(&["display-popup", "-C", "-c", &h.client]);
                let _ = process::run_checked(&close, CONTROL_TIMEOUT);
                if !ended_by(&mut h, Instant::now() + Duration::from_secs(1)) {
                    if let Some(r) = h.recorder.filter(|r| r.alive()) {
                        // The recorder checked to be alive.
                        process::kill(r.pid);
                    }
                    let _ = h.popup.kill();
                    let _ = h.popup.wait();
                    problems.push(format!("the popup on {} did not close; killed", h.client));
                }
            }
            if let Some(why) = h.files.said() {
                problems.push(format!("the recorder on {} said: {why}", h.client));
            }
            let (rest, len) = match recorder::unreplayed(&h.files) {
                Ok(keys) => keys,
                Err(e) => {
                    problems.push(format!(
                        "the keys typed on {} could not be replayed ({}); they are in {}",
                        h.client,
                        e.message,
                        h.files.keys().display()
                    ));
                    continue;
                }
            };
            kept += len;
            if !rest.is_empty() {
                match tmux.send_bytes(&rest) {
                    Ok(()) => {
                        let _ = recorder::mark_replayed(&h.files, len);
                        problems.push(format!(
                            "ktr replayed {} bytes the recorder on {} did not",
                            rest.len(),
                            h.client
                        ));
                    }
                    Err(e) => {
                        lost = true;
                        problems.push(format!(
                            "{} bytes typed on {} could not be replayed ({}); they are in {}",
                            rest.len(),
                            h.client,
                            e.message,
                            h.files.keys().display()
                        ));
                    }
                }
            }
        }
        if !lost && let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
            // The switch's folder, once no attempt is left in it.
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        if count == 0 {
            return (String::new(), false);
        }
        let mut line = format!("kept and replayed {kept} bytes typed during the switch");
        if !problems.is_empty() {
            line.push_str(&format!(" ({})", problems.join("; ")));
        }
        (line, !problems.is_empty())
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        let (said, troubled) = self.settle();
        if troubled {
            eprintln!("ktr: {said}");
        }
    }
}

/// The popup closed and its recorder is gone by `deadline` (the popup
/// closes with its client before the recorder has replayed; only then is
/// `replayed` final).
fn ended_by(h: &mut Held, deadline: Instant) -> bool {
    if !exited_by(&mut h.popup, deadline) {
        return false;
    }
    let Some(recorder) = h.recorder else {
        return true;
    };
    loop {
        if !recorder.alive() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// `child` exited by `deadline` (it is reaped).
fn exited_by(child: &mut Child, deadline: Instant) -> bool {
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// A tmux client as the key keeper sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    pub name: String,
    pub width: u32,
    pub height: u32,
    /// Why it gets no popup (None: it gets one).
    pub skipped: Option<String>,
}

/// The pane as its server names it, and the clients showing it.
#[derive(Debug, Clone)]
pub struct Clients {
    /// The pane on its server's socket path.
    pub pane: Tmux,
    pub shown_on: Vec<Client>,
}

impl Clients {
    /// Why no client gets a popup (None when one does).
    pub fn why_none(&self) -> Option<String> {
        if self.shown_on.iter().any(|c| c.skipped.is_none()) {
            return None;
        }
        if self.shown_on.is_empty() {
            return Some(format!(
                "no tmux client shows the pane {} (nobody watches it: their keys cannot be typed meanwhile)",
                self.pane.target
            ));
        }
        Some(
            self.shown_on
                .iter()
                .filter_map(|c| c.skipped.clone())
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}

impl Tmux {
    /// The clients that show this pane, as the key keeper opens popups on
    /// them. Formats print no control character and put the one free-form
    /// field last (a socket path, a client name may hold spaces), so no
    /// locale can change how they split.
    pub fn keeper_clients(&self) -> Result<Clients> {
        let here = self.argv(&[
            "display-message",
            "-p",
            "-t",
            &self.target,
            "#{pane_id} #{socket_path}",
        ]);
        let here = process::run_checked(&here, CONTROL_TIMEOUT)?;
        let here = here.trim_end_matches('\n');
        let Some((pane, socket)) = here
            .split_once(' ')
            .filter(|(p, s)| p.starts_with('%') && !s.is_empty())
        else {
            return Err(Error::io(format!(
                "tmux printed {here:?} for the pane's id and socket; is {} a tmux 3.2 or later?",
                self.program
            )));
        };
        let tmux = Tmux {
            program: self.program.clone(),
            socket: Some(socket.to_string()),
            target: pane.to_string(),
            bindings: None,
        };
        let list = tmux.argv(&[
            "list-clients",
            "-F",
            "#{pane_id} #{client_width} #{client_height} #{client_readonly} #{client_control_mode} #{client_name}",
        ]);
        let mut shown_on = Vec::new();
        for line in process::run_checked(&list, CONTROL_TIMEOUT)?.lines() {
            let f: Vec<&str> = line.splitn(6, ' ').collect();
            let [shows, width, height, readonly, control, name] = f[..] else {
                return Err(Error::io(format!(
                    "tmux listed a client as {line:?}, not as asked"
                )));
            };
            if shows != pane {
                continue;
            }
            let (width, height) = (width.parse().unwrap_or(0), height.parse().unwrap_or(0));
            let skipped = if readonly == "1" {
                Some(format!("{name} is read-only"))
            } else if control == "1" {
                Some(format!("{name} is a control-mode client"))
            } else if width < 24 || height < HEIGHT + 4 {
                Some(format!(
                    "{name} is too small for a popup ({width}x{height})"
                ))
            } else {
                None
            };
            shown_on.push(Client {
                name: name.to_string(),
                width,
                height,
                skipped,
            });
        }
        Ok(Clients {
            pane: tmux,
            shown_on,
        })
    }

    /// Open a key-keeping popup running `program` (`ktr-keep`) on each
    /// client that shows this pane; the recorders' files go under a fresh
    /// folder in `dir`, made for this attempt alone, and they finish by
    /// themselves after `max`. Clients whose popup did not open are left
    /// as they are (their keys go to the pane as always), with the reason
    /// in [`Keeper::missed`], as is why there is no popup at all.
    pub(super) fn keep_keys(&self, program: &Path, dir: &Path, max: Duration) -> Keeper {
        let clients = match self.keeper_clients() {
            Ok(clients) => clients,
            Err(e) => {
                return Keeper::without(format!("cannot list the pane's clients: {}", e.message));
            }
        };
        if let Some(why) = clients.why_none() {
            return Keeper::without(why);
        }
        let attempt = match fresh_dir(dir) {
            Ok(attempt) => attempt,
            Err(e) => return Keeper::without(format!("no folder for the keys: {}", e.message)),
        };
        let mut keeper = Keeper::none();
        let tmux = clients.pane;
        let (pane, socket) = (tmux.target.clone(), tmux.socket.clone().unwrap_or_default());
        let mut opening = Vec::new();
        for client in &clients.shown_on {
            if let Some(why) = &client.skipped {
                keeper.missed.push(why.clone());
                continue;
            }
            let files = Files {
                dir: attempt.join(opening.len().to_string()),
            };
            if let Err(e) = create_private_dir(&files.dir) {
                keeper.missed.push(format!(
                    "{}: cannot create {}: {e}",
                    client.name,
                    files.dir.display()
                ));
                continue;
            }
            let command = [
                program.to_string_lossy().into_owned(),
                "--dir".into(),
                files.dir.to_string_lossy().into_owned(),
                "--pane".into(),
                pane.clone(),
                "--socket".into(),
                socket.clone(),
                "--max-seconds".into(),
                format!("{:.1}", max.as_secs_f64()),
            ]
            .iter()
            .map(|w| sh_quote(w))
            .collect::<Vec<_>>()
            .join(" ");
            let (w, h) = (
                (client.width - 4).min(WIDTH).to_string(),
                HEIGHT.to_string(),
            );
            let argv = tmux.argv(&[
                "display-popup",
                "-c",
                &client.name,
                "-E",
                "-w",
                &w,
                "-h",
                &h,
                &command,
            ]);
            let spawned = Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match spawned {
                Ok(popup) => opening.push((client.name.clone(), files, popup)),
                Err(e) => keeper
                    .missed
                    .push(format!("{}: cannot run {}: {e}", client.name, argv[0])),
            }
        }
        let deadline = Instant::now() + OPEN;
        for (client, files, mut popup) in opening {
            if let Opened::Holding(recorder) = ready_by(&files, &mut popup, deadline) {
                keeper.held.push(Held {
                    client,
                    files,
                    popup,
                    recorder,
                });
                continue;
            }
            let close = tmux.argv(&["display-popup", "-C", "-c", &client]);
            let _ = process::run_checked(&close, CONTROL_TIMEOUT);
            let _ = popup.kill();
            let _ = popup.wait();
            // Whatever it recorded before it was closed.
            if let Ok((rest, len)) = recorder::unreplayed(&files)
                && tmux.send_bytes(&rest).is_ok()
            {
                let _ = recorder::mark_replayed(&files, len);
            }
            keeper
                .missed
                .push(format!("the popup on {client} did not open"));
        }
        keeper.dir = Some(attempt);
        keeper.tmux = Some(tmux);
        keeper
    }
}

/// A new, empty folder for one attempt's recorders in `dir` (the
/// switch's `keep/<op>-<stage>/`, which a deferred switch tries again):
/// `<dir>/<n>`, created here and now (`mkdir` fails on anything already
/// there), so no earlier attempt's `keys`, `stop` or `ready` is ever
/// taken for this one's.
fn fresh_dir(dir: &Path) -> Result<PathBuf> {
    if let Some(keep) = dir.parent() {
        ktr_base::fsutil::ensure_private_dir(keep, 0o700)?;
    }
    ktr_base::fsutil::ensure_private_dir(dir, 0o700)?;
    for n in 1..=1000u32 {
        let attempt = dir.join(n.to_string());
        match create_private_dir(&attempt) {
            Ok(()) => return Ok(attempt),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io_at("create directory", &attempt, &e)),
        }
    }
    Err(Error::io(format!(
        "{} holds 1000 earlier attempts; move it aside",
        dir.display()
    )))
}

/// Create `dir` (0700) only if nothing is there: a link or a folder left
/// by anyone else is an error, never used.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// Whether a popup's recorder holds the keyboard.
enum Opened {
    /// It does (the recorder, when its pid could be read).
    Holding(Option<ProcessId>),
    /// The popup ended first, or did not open in time.
    Not,
}

/// Wait until the recorder in `popup` holds the keyboard (its `ready` file
/// names its pid), at most until `deadline`.
fn ready_by(files: &Files, popup: &mut Child, deadline: Instant) -> Opened {
    loop {
        if let Some(pid) = files.ready_pid() {
            return Opened::Holding(pid.and_then(ProcessId::of));
        }
        if !matches!(popup.try_wait(), Ok(None)) || Instant::now() >= deadline {
            return Opened::Not;
        }
        thread::sleep(Duration::from_millis(3));
    }
}

/// `word` quoted for the popup's shell.
fn sh_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }
}
