//! Fuzz the config parser: any text must give a config or a one-line
//! error naming what is wrong — never a panic — and every accepted config
//! must be usable without overflow (every duration fits a `Duration`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ktr_base::config::Config::from_toml(text) {
        Ok(c) => {
            for s in [
                c.systemd_restart_timeout_seconds,
                c.activation_delay_seconds,
                c.stable_file_seconds,
                c.stable_file_timeout_seconds,
                c.healthcheck_seconds,
            ] {
                assert!(Duration::try_from_secs_f64(s).is_ok(), "{s} passed validation");
            }
            assert!(c.stable_file_seconds < c.stable_file_timeout_seconds);
            assert!(!c.state_dir.as_os_str().is_empty());
            let _ = c.resume_argv(&ktr_base::ids::SessionId::new_random());
        }
        Err(e) => assert!(!e.message.contains('\n'), "one line: {}", e.message),
    }
});
