//! Where things are: HOME, the config file and its folder, `~`, the
//! project folder's name; shell words of a command setting.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::open::{Links, cap, read_capped};

/// Split a command string the way a POSIX shell would split words (quotes,
/// backslashes and `#` comments), without expanding anything (the `shlex`
/// crate).
pub fn split_shell_words(s: &str) -> std::result::Result<Vec<String>, String> {
    shlex::split(s).ok_or_else(|| "has an unclosed quote or ends with a lone backslash".into())
}

/// The user's home directory (`$HOME`).
pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// The bytes of the config file at `path` (`None` when there is none): a
/// regular file (a FIFO or device there never blocks or floods the read),
/// at most [`cap::CONFIG`] bytes. A symlink is followed (dotfile managers).
pub fn read_config_file(path: &Path) -> Result<Option<Vec<u8>>> {
    read_capped(path, cap::CONFIG, Links::Follow).map_err(|e| {
        Error::config(format!(
            "config {}: {}; pass --config PATH to a regular file",
            path.display(),
            e.message
        ))
    })
}

/// The absolute folder holding `config_file`: relative paths in it are
/// taken from there ([`Config::load`], and the hooks' cheap state-dir look-up).
pub fn config_folder(config_file: &Path) -> PathBuf {
    let absolute = std::path::absolute(config_file).unwrap_or_else(|_| config_file.to_path_buf());
    absolute
        .parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
}

/// Expand a leading `~` or `~/` to `home`.
pub fn expand_home(s: &str, home: &Path) -> PathBuf {
    if s == "~" {
        home.to_path_buf()
    } else if let Some(rest) = s.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(s)
    }
}

/// Claude Code's project-folder name for a working directory: every
/// character outside `[A-Za-z0-9]` becomes `-`.
pub fn encode_project_name(workdir: &Path) -> String {
    workdir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}
