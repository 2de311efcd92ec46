//! `ktr-keep`: the key recorder of a tmux in-place switch (SPEC §12).
//!
//! Claude Code 2.1.328 drops keys typed in the ~0.15 s after the `/resume`
//! Enter, while it loads the resumed session. While ktr switches, each
//! tmux client showing the pane gets a popup running this recorder
//! ([`crate::targets::Keeper`]): it owns that client's keyboard, puts its
//! tty in raw mode, shows a notice and what was typed, and appends every
//! byte it reads to `<dir>/keys` at once. When `<dir>/stop` appears (the
//! switch is over), after `--max-seconds`, on SIGHUP/SIGTERM or when its
//! tty goes away, it reads what is left without waiting, replays all the
//! bytes into the pane (`tmux send-keys -H`, in order, still holding the
//! keyboard), and goes on reading and replaying until the person has not
//! typed for [`QUIET_MS`], then exits, which closes the popup. A key that
//! reaches the popup after its recorder's last read is lost (tmux closes
//! the popup's tty with it), so the popup closes in a pause of the
//! person's typing, never between two keys of a word. `<dir>/replayed`
//! says how many bytes of `keys` are in the pane, so a switch whose
//! recorder was killed replays the rest itself.
//!
//! `<dir>` is a fresh folder the switch made for this recorder alone: the
//! recorder creates `keys` there (`O_EXCL`, never through a link) and
//! refuses a folder that already holds one, so it replays only what it
//! read itself. Every file here is read through [`ktr_base::open`]'s one
//! rule: never through a link, never a FIFO, never more than a cap.
//!
//! Usage: `ktr-keep --dir DIR --pane PANE [--socket SOCKET] [--max-seconds N]`

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::Stdin;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::termios::{self, OptionalActions, Termios};

use crate::targets::Tmux;
use ktr_base::cli::Call;
use ktr_base::error::{Error, Result};
use ktr_base::open::{Links, cap};

const PROGRAM: &str = "ktr-keep";

const USAGE: &str = "usage: ktr-keep --dir DIR --pane PANE [--socket SOCKET] [--max-seconds N]";

pub const HELP: &str = "\
ktr-keep: the key recorder of a tmux in-place switch.

usage: ktr-keep --dir DIR --pane PANE [--socket SOCKET] [--max-seconds N]

Run by ktr-activate / ktr-rollback in a tmux popup while they switch a Claude
Code in place: records the keys typed meanwhile and replays them into PANE
(tmux -S SOCKET send-keys -H) when DIR/stop appears or after N seconds
(default 30). Not meant to be run by hand.";

/// The notice at the top of the popup.
pub const NOTICE: &str = "ktr: switching session \u{2014} keep typing, your keys are kept";

/// How often the recorder looks for the stop file.
const POLL_MS: i32 = 40;
/// How long the person must not have typed before the popup closes: longer
/// than the gap between two keys of someone typing (measured 30–150 ms in
/// the typing test), so the popup closes when they pause.
const QUIET_MS: i32 = 400;
/// How long at most the popup waits for that pause after the switch is
/// over (a person who never pauses: the keys still go in as they come).
pub(crate) const PAUSE_WAIT: Duration = Duration::from_secs(10);
/// The most the recorder holds: past it, it stops holding the keyboard
/// (replays and closes), well below what the switch reads back.
const HOLD_MAX: usize = (ktr_base::open::cap::KEYS / 2) as usize;
/// How many bytes one `send-keys -H` carries.
const CHUNK: usize = 256;

/// The files one recorder shares with the switch that opened it.
#[derive(Debug, Clone)]
pub struct Files {
    pub dir: PathBuf,
}

impl Files {
    /// Every byte read from the keyboard, appended as it is read.
    pub fn keys(&self) -> PathBuf {
        self.dir.join("keys")
    }
    /// The recorder's pid, written once it holds the keyboard.
    pub fn ready(&self) -> PathBuf {
        self.dir.join("ready")
    }
    /// Created by the switch: finish.
    pub fn stop(&self) -> PathBuf {
        self.dir.join("stop")
    }
    /// Why the recorder stopped short (one line), if it did.
    pub fn error(&self) -> PathBuf {
        self.dir.join("error")
    }
    /// How many bytes of `keys` are in the pane (decimal).
    pub fn replayed(&self) -> PathBuf {
        self.dir.join("replayed")
    }

    /// The count in `replayed` (0 when there is none or it is not ours).
    pub fn replayed_count(&self) -> usize {
        note(&self.replayed())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The recorder's pid, once it holds the keyboard.
    pub fn ready_pid(&self) -> Option<Option<u32>> {
        note(&self.ready()).map(|s| s.trim().parse().ok())
    }

    /// Why the recorder stopped short, if it said.
    pub fn said(&self) -> Option<String> {
        note(&self.error()).map(|s| s.trim().to_string())
    }

    /// Tell the recorder to finish (the file is created once, never
    /// through a link).
    pub(crate) fn tell_stop(&self) {
        drop(ktr_base::open::create_new_private(&self.stop()));
    }

    /// The switch told it to finish.
    fn stopped(&self) -> bool {
        fs::symlink_metadata(self.stop()).is_ok()
    }

    fn write_replayed(&self, count: usize) -> Result<()> {
        ktr_base::fsutil::write_cache_atomic(&self.replayed(), count.to_string().as_bytes(), 0o600)
    }
}

/// What the command line says.
#[derive(Debug)]
pub struct Args {
    pub files: Files,
    pub pane: String,
    pub socket: Option<String>,
    pub max: Duration,
}

/// `ktr-keep`'s `main`: exits 0 when every recorded key is in the pane.
pub fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let code = match parse(args) {
        Ok(Call::Help) => ktr_base::cli::help(PROGRAM, HELP),
        Ok(Call::Version) => ktr_base::cli::version(PROGRAM),
        Ok(Call::Run(args)) => match record(&args) {
            Ok(()) => 0,
            Err(e) => {
                // The popup may be gone with its screen: the switch reads
                // it here (created once, never through a link).
                if let Ok(mut f) = ktr_base::open::create_new_private(&args.files.error()) {
                    let _ = f.write_all(e.message.as_bytes());
                }
                eprintln!("ktr-keep: {}", e.message);
                1
            }
        },
        Err(e) => ktr_base::cli::usage_error(PROGRAM, &format!("{}; {USAGE}", e.message)),
    };
    std::process::exit(code);
}

fn parse(args: Vec<OsString>) -> Result<Call<Args>> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let (mut dir, mut pane, mut socket, mut max) = (None, None, None, 30.0_f64);
    let bad = |e: lexopt::Error| Error::usage(e.to_string());
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Long("dir") => dir = Some(PathBuf::from(parser.value().map_err(bad)?)),
            Long("pane") => pane = Some(parser.value().map_err(bad)?.string().map_err(bad)?),
            Long("socket") => socket = Some(parser.value().map_err(bad)?.string().map_err(bad)?),
            Long("max-seconds") => {
                max = parser.value().map_err(bad)?.parse().map_err(bad)?;
            }
            Long("help") | Short('h') => return Ok(Call::Help),
            Long("version") | Short('V') => return Ok(Call::Version),
            _ => return Err(bad(arg.unexpected())),
        }
    }
    let (Some(dir), Some(pane)) = (dir, pane) else {
        return Err(Error::usage("--dir and --pane are required"));
    };
    if !max.is_finite() || max <= 0.0 {
        return Err(Error::usage("--max-seconds must be a positive number"));
    }
    Ok(Call::Run(Args {
        files: Files { dir },
        pane,
        socket,
        max: Duration::from_secs_f64(max.min(3600.0)),
    }))
}

/// Set by SIGHUP / SIGTERM: finish now.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// SIGHUP and SIGTERM set [`SIGNALLED`] instead of ending the process.
#[allow(unsafe_code)]
fn finish_on_hangup_or_term() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    // Neither std nor rustix installs a signal handler safely
    // (docs/ARCHITECTURE.md, "unsafe").
    unsafe {
        libc::signal(libc::SIGHUP, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// Record the keyboard (stdin, the popup's tty) until told to finish, then
/// replay everything into the pane.
pub fn record(args: &Args) -> Result<()> {
    let started = Instant::now();
    finish_on_hangup_or_term();
    let tmux = Tmux {
        program: "tmux".into(),
        socket: args.socket.clone(),
        target: args.pane.clone(),
        bindings: None,
    };
    let files = &args.files;
    let mut log = ktr_base::open::create_new_private(&files.keys()).map_err(|e| {
        Error::refused(format!(
            "{} is not a fresh folder for ktr-keep ({}); nothing was recorded",
            files.dir.display(),
            e.message
        ))
    })?;
    let raw = Raw::enter(std::io::stdin());
    let mut screen = std::io::stdout().lock();
    let _ = write!(screen, "\x1b[?25l{NOTICE}\r\n");
    let _ = screen.flush();
    ktr_base::fsutil::write_cache_atomic(
        &files.ready(),
        std::process::id().to_string().as_bytes(),
        0o600,
    )?;
    let mut keys: Vec<u8> = Vec::new();
    let mut gone = false;
    let full = |keys: &Vec<u8>| keys.len() >= HOLD_MAX;
    while !gone
        && !full(&keys)
        && !SIGNALLED.load(Ordering::SeqCst)
        && started.elapsed() < args.max
        && !files.stopped()
    {
        gone = read_into(POLL_MS, &mut keys, &mut log, &mut screen);
    }
    // What is left, without waiting, replayed while the popup still holds
    // the keyboard; then, still holding it, every key that comes, until
    // the person has not typed for QUIET_MS (or the tty is gone, or a
    // signal says to go now).
    let mut replayed = 0;
    let mut wait = 0;
    let pause_by = Instant::now() + PAUSE_WAIT;
    loop {
        let had = keys.len();
        if !gone {
            gone = read_into(wait, &mut keys, &mut log, &mut screen);
        }
        replayed = replay(&tmux, &keys, replayed, files)?;
        let came = keys.len() > had;
        // A signal (the switch closing the popup) leaves no time to wait.
        let hurried = SIGNALLED.load(Ordering::SeqCst);
        if gone || full(&keys) || Instant::now() >= pause_by {
            break;
        }
        if !came && (wait == QUIET_MS || hurried) {
            break;
        }
        // Keys came: look again at once; none: wait for the pause.
        wait = if came || hurried { 0 } else { QUIET_MS };
    }
    drop(raw);
    Ok(())
}

/// Wait up to `wait_ms` for keys and record what came: appended to `log`
/// at once, shown on `screen`. True when the tty is gone.
fn read_into(wait_ms: i32, keys: &mut Vec<u8>, log: &mut File, screen: &mut impl Write) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    // fd 0 itself: read(2) on it, never through std's buffered stdin.
    let stdin = std::io::stdin();
    let tty = stdin.as_fd();
    let mut fds = [PollFd::new(&tty, PollFlags::IN)];
    let wait = Timespec {
        tv_sec: i64::from(wait_ms / 1000),
        tv_nsec: i64::from(wait_ms % 1000) * 1_000_000,
    };
    // An error (EINTR among them) is "nothing yet", as no key came.
    if !matches!(rustix::event::poll(&mut fds, Some(&wait)), Ok(1..)) {
        return false;
    }
    let revents = fds[0].revents();
    if !revents.contains(PollFlags::IN) {
        return revents.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL);
    }
    let mut buf = [0u8; 4096];
    let n = match rustix::io::read(tty, &mut buf) {
        Ok(n) => n,
        // Interrupted: look again; any other error: the tty is gone.
        Err(e) => return e != rustix::io::Errno::INTR,
    };
    if n == 0 {
        return true;
    }
    let got = &buf[..n];
    // The keys are on disk before anything else happens to them.
    if let Err(e) = log.write_all(got) {
        let _ = write!(screen, "\r\nktr-keep: cannot record keys: {e}\r\n");
    }
    keys.extend_from_slice(got);
    let _ = screen.write_all(&shown(got));
    let _ = screen.flush();
    false
}

/// How typed bytes are shown: text as it is, Enter as ⏎ and a new line,
/// Backspace as ⌫, other control bytes as `^X`.
fn shown(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\r' | b'\n' => out.extend_from_slice("\u{23ce}\r\n".as_bytes()),
            0x7f | 0x08 => out.extend_from_slice("\u{232b}".as_bytes()),
            0..0x20 => out.extend_from_slice(&[b'^', b + 0x40]),
            _ => out.push(b),
        }
    }
    out
}

/// Send `keys[from..]` into the pane and record how far it got.
fn replay(tmux: &Tmux, keys: &[u8], from: usize, files: &Files) -> Result<usize> {
    let mut done = from;
    for chunk in keys[from..].chunks(CHUNK) {
        tmux.send_bytes(chunk)?;
        done += chunk.len();
        files.write_replayed(done)?;
    }
    Ok(done)
}

/// A tty in raw mode, put back as it was when dropped.
struct Raw {
    tty: Stdin,
    saved: Option<Termios>,
}

impl Raw {
    /// Raw mode on `tty` (`cfmakeraw`, set at once); nothing when it is not
    /// a tty (keys still recorded).
    fn enter(tty: Stdin) -> Raw {
        let Ok(saved) = termios::tcgetattr(&tty) else {
            return Raw { tty, saved: None };
        };
        let mut raw = saved.clone();
        raw.make_raw();
        let _ = termios::tcsetattr(&tty, OptionalActions::Now, &raw);
        Raw {
            tty,
            saved: Some(saved),
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = termios::tcsetattr(&self.tty, OptionalActions::Now, saved);
        }
    }
}

/// One of a recorder's small files, read by the one rule (None when it
/// is not there or not a small regular file of ours).
fn note(path: &std::path::Path) -> Option<String> {
    ktr_base::open::read_capped(path, cap::KEEP_NOTE, Links::Refuse)
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The keys of `files` not yet in the pane (`keys` past `replayed`), and
/// how many bytes `keys` holds.
pub fn unreplayed(files: &Files) -> Result<(Vec<u8>, usize)> {
    let keys =
        ktr_base::open::read_capped(&files.keys(), cap::KEYS, Links::Refuse)?.unwrap_or_default();
    let from = files.replayed_count().min(keys.len());
    Ok((keys[from..].to_vec(), keys.len()))
}

/// Mark `files`' keys as replayed up to `len` (a switch replayed the rest).
pub(crate) fn mark_replayed(files: &Files, len: usize) -> Result<()> {
    files.write_replayed(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes_are_shown_by_name_and_text_as_it_is() {
        assert_eq!(
            String::from_utf8(shown("a日\r\x7f\x01".as_bytes())).unwrap(),
            "a日\u{23ce}\r\n\u{232b}^A"
        );
    }

    #[test]
    fn the_command_line_needs_dir_and_pane() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(parse(args(&["--pane", "p"])).is_err());
        assert!(parse(args(&["--dir", "d", "--pane", "p", "--max-seconds", "0"])).is_err());
        let ok = parse(args(&[
            "--dir",
            "d",
            "--pane",
            "%1",
            "--max-seconds",
            "2.5",
        ]))
        .unwrap();
        let Call::Run(ok) = ok else { panic!("{ok:?}") };
        assert_eq!(ok.pane, "%1");
        assert_eq!(ok.max, Duration::from_millis(2500));
        assert!(matches!(parse(args(&["--help"])), Ok(Call::Help)));
        assert!(matches!(parse(args(&["--version"])), Ok(Call::Version)));
    }
}
