//! The health watch of a process target (SPEC §12): one process keeps
//! running the new session, and Claude Code's own receipt says it loaded it.

use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::process;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;

/// How often health is sampled.
const HEALTH_POLL: Duration = Duration::from_millis(50);

/// Claude Code's own proof that it loaded the session: `received()` gives
/// the time `ktr-ack` recorded the `SessionStart` (resume) receipt, once it
/// did; the process must then stay alive for `min_life` from that time.
pub struct Receipt<'a> {
    pub received: &'a mut dyn FnMut() -> Result<Option<SystemTime>>,
    pub min_life: Duration,
}

/// Sample `pid_of` until `wait` ends. Healthy: one process kept running
/// `session_id` the whole time (replaced or gone → error). With a
/// `receipt`, healthy as soon as the receipt is in and the process stayed
/// alive `min_life` after it (counted from the receipt's own time, never
/// from before the process was first seen, up to the last sample that saw
/// it alive); no receipt by the end of `wait` is an error.
pub(super) fn watch_until(
    session_id: &SessionId,
    wait: Duration,
    pid_of: impl Fn() -> Result<u32>,
    mut receipt: Option<Receipt<'_>>,
) -> Result<String> {
    let deadline = Instant::now() + wait;
    let mut healthy_pid: Option<(u32, Instant)> = None;
    let mut received_at: Option<Instant> = None;
    loop {
        let looked = Instant::now();
        let observed = pid_of().and_then(|pid| runs_session(pid, session_id).map(|()| pid));
        match (observed, healthy_pid.map(|(pid, _)| pid)) {
            (Ok(pid), None) => healthy_pid = Some((pid, looked)),
            (Ok(pid), Some(first)) if pid != first => {
                return Err(Error::refused(format!(
                    "process {first} running {session_id} was replaced by {pid} during the health check"
                )));
            }
            (Err(e), Some(first)) => {
                return Err(Error::refused(format!(
                    "process {first} running {session_id} did not stay healthy: {}",
                    e.message
                )));
            }
            (Err(e), None) if Instant::now() >= deadline => {
                return Err(Error::refused(format!(
                    "{session_id} never became healthy within {:.1} s: {}",
                    wait.as_secs_f64(),
                    e.message
                )));
            }
            (Ok(_), Some(_)) | (Err(_), None) => {}
        }
        if let (Some((pid, seen)), Some(r)) = (healthy_pid, receipt.as_mut()) {
            if received_at.is_none() {
                received_at = (r.received)()?.map(|at| {
                    let ago = SystemTime::now().duration_since(at).unwrap_or_default();
                    Instant::now().checked_sub(ago).unwrap_or(seen).max(seen)
                });
            }
            if received_at.is_some_and(|at| looked.saturating_duration_since(at) >= r.min_life) {
                return Ok(pid.to_string());
            }
        }
        if Instant::now() >= deadline {
            return match (healthy_pid.map(|(pid, _)| pid), &receipt, received_at) {
                (Some(pid), None, _) => Ok(pid.to_string()),
                (Some(_), Some(_), None) => Err(Error::refused(format!(
                    "Claude Code did not report SessionStart (resume) for {session_id} within {:.1} s although ktr-ack is installed",
                    wait.as_secs_f64()
                ))),
                _ => Err(Error::refused(format!(
                    "{session_id} did not live healthcheck_min_seconds after its receipt within {:.1} s (healthcheck_seconds)",
                    wait.as_secs_f64()
                ))),
            };
        }
        // Wake up when the minimum life is over rather than up to a poll later.
        let life_over = match (received_at, &receipt) {
            (Some(at), Some(r)) => (at + r.min_life).saturating_duration_since(Instant::now()),
            _ => HEALTH_POLL,
        };
        thread::sleep(
            HEALTH_POLL
                .min(life_over)
                .min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
        );
    }
}

/// `pid` is alive and it (or a descendant, for wrapper scripts) has the
/// session id on its command line.
pub(super) fn runs_session(pid: u32, session_id: &SessionId) -> Result<()> {
    if !process::pid_alive(pid) {
        return Err(Error::refused(format!("process {pid} is not running")));
    }
    let found = process::with_descendants(pid)
        .into_iter()
        .filter_map(process::cmdline)
        .any(|argv| argv.iter().any(|a| a.contains(session_id.as_str())));
    if found {
        Ok(())
    } else {
        let shown = process::cmdline(pid).unwrap_or_default().join(" ");
        Err(Error::refused(format!(
            "process {pid} ({}) does not run session {session_id}",
            shown.chars().take(120).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: &str = "5e55e55e-0000-4000-8000-000000000001";

    fn session() -> SessionId {
        SessionId::parse(SESSION).unwrap()
    }

    /// A process with `SESSION` on its command line that lives `seconds`
    /// (reaped by a thread as soon as it exits); returns its pid.
    fn claude_for(seconds: f64) -> u32 {
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("sleep {seconds}; :"), SESSION])
            .spawn()
            .unwrap();
        let pid = child.id();
        thread::spawn(move || child.wait());
        pid
    }

    fn end(pid: u32) {
        let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }

    /// Watch `pid` for `wait` seconds with a receipt that arrives
    /// `receipt_after` seconds in (never when None) and a minimum life of
    /// `min_life` seconds after it; the result and how long it took.
    fn watch_pid(
        pid: u32,
        wait: f64,
        min_life: f64,
        receipt_after: Option<f64>,
    ) -> (Result<String>, Duration) {
        let (started, wall) = (Instant::now(), SystemTime::now());
        let mut received = || {
            Ok(receipt_after
                .filter(|s| started.elapsed().as_secs_f64() >= *s)
                .map(|s| wall + Duration::from_secs_f64(s)))
        };
        let result = watch_until(
            &session(),
            Duration::from_secs_f64(wait),
            || Ok(pid),
            Some(Receipt {
                received: &mut received,
                min_life: Duration::from_secs_f64(min_life),
            }),
        );
        end(pid);
        (result, started.elapsed())
    }

    #[test]
    fn a_receipt_and_the_minimum_life_end_the_health_check_early() {
        let pid = claude_for(10.0);
        let (result, took) = watch_pid(pid, 5.0, 0.3, Some(0.2));
        assert_eq!(result.unwrap(), pid.to_string());
        assert!(took < Duration::from_secs(2), "took {took:?}");
        assert!(took >= Duration::from_millis(500), "took {took:?}");
    }

    /// Watch a live claude whose receipt, recorded `at` seconds into the
    /// watch (negative: before it), is noticed `noticed` seconds in; how
    /// long the watch took.
    fn watch_receipt(at: f64, noticed: f64, min_life: f64) -> Duration {
        let pid = claude_for(10.0);
        let (started, wall) = (Instant::now(), SystemTime::now());
        let recorded = if at < 0.0 {
            wall - Duration::from_secs_f64(-at)
        } else {
            wall + Duration::from_secs_f64(at)
        };
        let mut received = || Ok((started.elapsed().as_secs_f64() >= noticed).then_some(recorded));
        let result = watch_until(
            &session(),
            Duration::from_secs(5),
            || Ok(pid),
            Some(Receipt {
                received: &mut received,
                min_life: Duration::from_secs_f64(min_life),
            }),
        );
        let took = started.elapsed();
        end(pid);
        assert_eq!(result.unwrap(), pid.to_string());
        took
    }

    #[test]
    fn the_minimum_life_counts_from_the_receipts_own_time_but_not_before_the_process_was_seen() {
        // Recorded at 0.1 s, noticed at 0.6 s: healthy at 0.7 s, not 1.2 s.
        let took = watch_receipt(0.1, 0.6, 0.6);
        assert!(took >= Duration::from_millis(700), "took {took:?}");
        assert!(took < Duration::from_secs(1), "took {took:?}");
        // A receipt time before the process was first seen counts from
        // then: the whole minimum life is watched.
        let took = watch_receipt(-10.0, 0.0, 0.4);
        assert!(took >= Duration::from_millis(400), "took {took:?}");
        assert!(took < Duration::from_millis(1500), "took {took:?}");
    }

    #[test]
    fn a_claude_that_exits_before_its_receipt_is_unhealthy() {
        // It dies at 0.2 s; the receipt would come at 0.6 s.
        let (result, _) = watch_pid(claude_for(0.2), 3.0, 0.1, Some(0.6));
        let err = result.unwrap_err();
        assert!(err.message.contains("did not stay healthy"), "{err}");
    }

    #[test]
    fn a_claude_that_exits_within_the_minimum_life_after_its_receipt_is_unhealthy() {
        let (result, took) = watch_pid(claude_for(0.4), 3.0, 1.0, Some(0.0));
        let err = result.unwrap_err();
        assert!(err.message.contains("did not stay healthy"), "{err}");
        assert!(took < Duration::from_secs(2), "noticed at once: {took:?}");
    }

    #[test]
    fn no_receipt_within_the_window_is_unhealthy_even_when_alive() {
        let (result, took) = watch_pid(claude_for(10.0), 0.5, 0.1, None);
        let err = result.unwrap_err();
        assert!(err.message.contains("did not report SessionStart"), "{err}");
        assert!(took >= Duration::from_millis(500), "took {took:?}");
    }

    #[test]
    fn a_receipt_without_the_minimum_life_inside_the_window_is_unhealthy() {
        let (result, _) = watch_pid(claude_for(10.0), 0.6, 1.0, Some(0.3));
        let err = result.unwrap_err();
        assert!(
            err.message.contains("did not live healthcheck_min_seconds"),
            "{err}"
        );
    }

    #[test]
    fn without_a_receipt_the_whole_window_is_watched() {
        let pid = claude_for(10.0);
        let started = Instant::now();
        let result = watch_until(&session(), Duration::from_millis(600), || Ok(pid), None);
        end(pid);
        assert_eq!(result.unwrap(), pid.to_string());
        assert!(started.elapsed() >= Duration::from_millis(600));
    }
}
