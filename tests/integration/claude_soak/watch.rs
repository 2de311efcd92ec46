//! The soak's eye on ktr's own processes (those whose `HOME` is the
//! household's): every 20 ms it looks at each one, keeps the highest
//! `VmHWM` any reached, and SIGKILLs a share of the stage runs
//! (`ktr-prepare`, `ktr-verify`, `ktr-activate`, `ktr-rollback`) at a
//! random moment of their run — as the machine would, at whatever step
//! they are in.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::support::rng::Rng;

/// The stages the watch may kill.
const STAGES: [&str; 4] = ["ktr-prepare", "ktr-verify", "ktr-activate", "ktr-rollback"];

/// What the watch saw.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Stage runs seen, and those killed (`name pid after ms`).
    pub stage_runs: usize,
    pub killed: Vec<String>,
    /// The highest `VmHWM` (KiB) of any ktr process, and whose.
    pub peak_kib: u64,
    pub peak_of: String,
}

pub(super) struct Watch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Seen>>,
}

impl Watch {
    /// Watch the processes whose `HOME` is `home`; kill `kill_percent` % of
    /// the stage runs.
    pub(super) fn start(home: &Path, kill_percent: f64, seed: u64) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, home) = (Arc::clone(&stop), home.to_path_buf());
            thread::spawn(move || watch(&home, kill_percent, &mut Rng::new(seed), &stop))
        };
        Watch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop watching; what was seen.
    pub(super) fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn watch(home: &Path, kill_percent: f64, rng: &mut Rng, stop: &AtomicBool) -> Seen {
    let mut seen = Seen::default();
    // pid → (name, first seen, when to kill it).
    let mut known: HashMap<u32, (String, Instant, Option<Duration>)> = HashMap::new();
    while !stop.load(Ordering::SeqCst) {
        let now = ours(home);
        known.retain(|pid, _| now.iter().any(|(p, _)| p == pid));
        for (pid, name) in now {
            if let Some(kib) = vm_hwm(pid)
                && kib > seen.peak_kib
            {
                seen.peak_kib = kib;
                seen.peak_of.clone_from(&name);
            }
            let entry = known.entry(pid).or_insert_with(|| {
                let stage = STAGES.contains(&name.as_str());
                seen.stage_runs += usize::from(stage);
                let kill = (stage && rng.percent(kill_percent))
                    .then(|| Duration::from_millis(rng.between(0, 700).unsigned_abs()));
                (name.clone(), Instant::now(), kill)
            });
            if let Some(after) = entry.2
                && entry.1.elapsed() >= after
            {
                let killed = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status()
                    .is_ok_and(|s| s.success());
                if killed {
                    seen.killed
                        .push(format!("{} {pid} after {} ms", entry.0, after.as_millis()));
                }
                entry.2 = None;
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    seen
}

/// ktr's processes of the household: pid and executable name.
pub(super) fn ours(home: &Path) -> Vec<(u32, String)> {
    let want = format!("HOME={}", home.display());
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let exe: PathBuf = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            let name = exe.file_name()?.to_str()?.to_string();
            if !name.starts_with("ktr") {
                return None;
            }
            let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
            environ
                .split(|b| *b == 0)
                .any(|v| v == want.as_bytes())
                .then_some((pid, name))
        })
        .collect()
}

/// The peak resident size of `pid` (KiB).
fn vm_hwm(pid: u32) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
