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

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::CONTROL_TIMEOUT;
use super::tmux::Tmux;
use crate::process::{self, ProcessId};
use crate::recorder::{self, Files};

/// How long a popup may take to hold the keyboard (13 ms measured).
const OPEN: Duration = Duration::from_secs(2);
/// How long the recorders may take to replay and close once told.
const FINISH: Duration = Duration::from_secs(5);
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
            let _ = std::fs::write(h.files.stop(), b"");
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
                        // SAFETY: kill(2) on the recorder checked to be alive.
                        unsafe { libc::kill(r.pid as libc::pid_t, libc::SIGKILL) };
                    }
                    let _ = h.popup.kill();
                    let _ = h.popup.wait();
                    problems.push(format!("the popup on {} did not close; killed", h.client));
                }
            }
            if let Ok(why) = std::fs::read_to_string(h.files.error()) {
                problems.push(format!("the recorder on {} said: {}", h.client, why.trim()));
            }
            let rest = recorder::unreplayed(&h.files);
            if !rest.is_empty() {
                match tmux.send_bytes(&rest) {
                    Ok(()) => {
                        let _ = recorder::mark_replayed(&h.files);
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
            kept += std::fs::metadata(h.files.keys()).map_or(0, |m| m.len() as usize);
        }
        if !lost && let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
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

impl Tmux {
    /// Open a key-keeping popup running `program` (`ktr-keep`) on each
    /// client that shows this pane; the recorders' files go under `dir`
    /// and they finish by themselves after `max`. Clients whose popup did
    /// not open are left as they are (their keys go to the pane as
    /// always), with the reason in [`Keeper::missed`].
    pub(super) fn keep_keys(&self, program: &Path, dir: &Path, max: Duration) -> Keeper {
        let mut keeper = Keeper::none();
        let here = self.argv(&[
            "display-message",
            "-p",
            "-t",
            &self.target,
            "#{socket_path}\t#{pane_id}",
        ]);
        let Ok(here) = process::run_checked(&here, CONTROL_TIMEOUT) else {
            return keeper;
        };
        let Some((socket, pane)) = here.trim_end().split_once('\t') else {
            return keeper;
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
            "#{client_name}\t#{pane_id}\t#{client_width}\t#{client_height}\t#{client_readonly}\t#{client_control_mode}",
        ]);
        let clients = process::run_checked(&list, CONTROL_TIMEOUT).unwrap_or_default();
        let mut opening = Vec::new();
        for line in clients.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let [client, shows, width, height, readonly, control] = f[..] else {
                continue;
            };
            if shows != pane || readonly == "1" || control == "1" {
                continue;
            }
            let (width, height) = (
                width.parse::<u32>().unwrap_or(0),
                height.parse::<u32>().unwrap_or(0),
            );
            if width < 24 || height < HEIGHT + 4 {
                keeper.missed.push(format!(
                    "{client} is too small for a popup ({width}x{height})"
                ));
                continue;
            }
            let files = Files {
                dir: dir.join(opening.len().to_string()),
            };
            if let Err(e) = ktr_base::fsutil::ensure_private_dir(&files.dir, 0o700) {
                keeper.missed.push(format!("{client}: {}", e.message));
                continue;
            }
            let command = [
                program.to_string_lossy().into_owned(),
                "--dir".into(),
                files.dir.to_string_lossy().into_owned(),
                "--pane".into(),
                pane.to_string(),
                "--socket".into(),
                socket.to_string(),
                "--max-seconds".into(),
                format!("{:.1}", max.as_secs_f64()),
            ]
            .iter()
            .map(|w| sh_quote(w))
            .collect::<Vec<_>>()
            .join(" ");
            let (w, h) = ((width - 4).min(WIDTH).to_string(), HEIGHT.to_string());
            let argv = tmux.argv(&[
                "display-popup",
                "-c",
                client,
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
                Ok(popup) => opening.push((client.to_string(), files, popup)),
                Err(e) => keeper
                    .missed
                    .push(format!("{client}: cannot run {}: {e}", argv[0])),
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
            let rest = recorder::unreplayed(&files);
            if tmux.send_bytes(&rest).is_ok() {
                let _ = recorder::mark_replayed(&files);
            }
            keeper
                .missed
                .push(format!("the popup on {client} did not open"));
        }
        keeper.dir = Some(dir.to_path_buf());
        keeper.tmux = Some(tmux);
        keeper
    }
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
        if let Ok(pid) = std::fs::read_to_string(files.ready()) {
            return Opened::Holding(pid.trim().parse().ok().and_then(ProcessId::of));
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
