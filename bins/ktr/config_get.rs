//! `ktr config KEY`: one setting as ktr resolves it (`~` expanded,
//! defaults applied), for scripts such as `examples/runner.sh`.

use ktr_base::Error;
use ktr_base::config::{Activation, Config};

use crate::cli::ConfigArgs;
use crate::out;

/// The keys `ktr config` prints.
pub const KEYS: &str = "activation, project_dir, state_dir, claude_workdir, resume_pointer_path, tmux_target, systemd_unit";

pub fn run(args: &ConfigArgs) -> Result<u8, Error> {
    let config = Config::here(args.common.config.as_deref())?;
    let path = |p: &std::path::Path| p.display().to_string();
    let value = match args.key.as_str() {
        "activation" => match config.activation {
            Activation::Tmux => "tmux".to_string(),
            Activation::Systemd => "systemd".to_string(),
            Activation::Pointer => "pointer".to_string(),
        },
        "project_dir" => path(&config.project_dir),
        "state_dir" => path(&config.state_dir),
        "claude_workdir" => path(&config.claude_workdir),
        "resume_pointer_path" => path(&config.resume_pointer_path),
        "tmux_target" => config.tmux_target.clone(),
        "systemd_unit" => config.systemd_unit.clone(),
        other => {
            return Err(Error::usage(format!(
                "config does not print {other:?}; it prints one of: {KEYS}"
            )));
        }
    };
    out::print(&format!("{value}\n"));
    Ok(0)
}
