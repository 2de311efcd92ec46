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
//! keyboard), reads and replays once more, and exits, which closes the
//! popup. `<dir>/replayed` says how many bytes of `keys` are in the pane,
//! so a switch whose recorder was killed replays the rest itself.
//!
//! Usage: `ktr-keep --dir DIR --pane PANE [--socket SOCKET] [--max-seconds N]`

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::targets::Tmux;
use ktr_base::cli::Call;
use ktr_base::error::{Error, Result};

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
/// How many times at most the recorder looks for keys that came while it
/// replayed.
const DRAIN_ROUNDS: usize = 8;
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

    /// The count in `replayed` (0 when there is none).
    pub fn replayed_count(&self) -> usize {
        fs::read_to_string(self.replayed())
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
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
                // The popup may be gone with its screen: the switch reads it here.
                let _ = fs::write(args.files.error(), &e.message);
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

/// Record the keyboard (stdin, the popup's tty) until told to finish, then
/// replay everything into the pane.
pub fn record(args: &Args) -> Result<()> {
    let started = Instant::now();
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGHUP, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let tmux = Tmux {
        program: "tmux".into(),
        socket: args.socket.clone(),
        target: args.pane.clone(),
        bindings: None,
    };
    let files = &args.files;
    let mut log = ktr_base::open::append_private(&files.keys())?;
    let raw = Raw::enter(0);
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
    while !gone
        && !SIGNALLED.load(Ordering::SeqCst)
        && started.elapsed() < args.max
        && !files.stop().exists()
    {
        gone = read_into(POLL_MS, &mut keys, &mut log, &mut screen);
    }
    // What is left, without waiting, replayed while the popup still holds
    // the keyboard; then again for keys that came meanwhile, until a
    // short wait brings none (a few rounds at most: a replay takes ~20 ms).
    let mut replayed = 0;
    for round in 0..=DRAIN_ROUNDS {
        let before = keys.len();
        for _ in 0..DRAIN_ROUNDS {
            if gone {
                break;
            }
            let had = keys.len();
            gone = read_into(
                if round == 0 { 0 } else { POLL_MS },
                &mut keys,
                &mut log,
                &mut screen,
            );
            if keys.len() == had {
                break;
            }
        }
        if round > 0 && keys.len() == before {
            break;
        }
        replayed = replay(&tmux, &keys, replayed, files)?;
    }
    drop(raw);
    Ok(())
}

/// Wait up to `wait_ms` for keys and record what came: appended to `log`
/// at once, shown on `screen`. True when the tty is gone.
fn read_into(wait_ms: i32, keys: &mut Vec<u8>, log: &mut File, screen: &mut impl Write) -> bool {
    let mut fds = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&raw mut fds, 1, wait_ms) };
    if ready <= 0 {
        return false;
    }
    if fds.revents & libc::POLLIN == 0 {
        return fds.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0;
    }
    let mut buf = [0u8; 4096];
    // SAFETY: reading into a buffer of the given length.
    let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
    let Ok(n) = usize::try_from(n) else {
        let interrupted = std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
        return !interrupted;
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
    fd: libc::c_int,
    saved: Option<libc::termios>,
}

impl Raw {
    /// Raw mode on `fd`; nothing when it is not a tty (keys still recorded).
    fn enter(fd: libc::c_int) -> Raw {
        let mut saved = std::mem::MaybeUninit::<libc::termios>::uninit();
        // SAFETY: tcgetattr fills the termios on success, checked.
        if unsafe { libc::tcgetattr(fd, saved.as_mut_ptr()) } != 0 {
            return Raw { fd, saved: None };
        }
        // SAFETY: initialised by the successful tcgetattr above.
        let saved = unsafe { saved.assume_init() };
        let mut raw = saved;
        // SAFETY: cfmakeraw edits the termios it is given; tcsetattr reads it.
        unsafe {
            libc::cfmakeraw(&raw mut raw);
            libc::tcsetattr(fd, libc::TCSANOW, &raw const raw);
        }
        Raw {
            fd,
            saved: Some(saved),
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            // SAFETY: putting back the termios read from this fd.
            unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, saved) };
        }
    }
}

/// The keys of `files` not yet in the pane: `keys` past `replayed`.
pub fn unreplayed(files: &Files) -> Vec<u8> {
    let keys = fs::read(files.keys()).unwrap_or_default();
    let from = files.replayed_count().min(keys.len());
    keys[from..].to_vec()
}

/// Mark `files`' keys as replayed up to their end (a switch replayed the rest).
pub fn mark_replayed(files: &Files) -> Result<()> {
    let len = fs::metadata(files.keys()).map_or(0, |m| m.len() as usize);
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
