//! What the worker reads of its own environment, read here only: its home's default,
//! the `PATH` its allowed names are found on, the agent command, and the variables a
//! job may inherit.

use std::path::PathBuf;

/// The default home: `STUDIO_WORKER_HOME`, else `~/.studio-worker`.
pub fn default_home() -> PathBuf {
    if let Some(dir) = std::env::var_os("STUDIO_WORKER_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    std::env::var_os("HOME")
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
        .join(".studio-worker")
}

/// The worker's settings from its environment.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    /// Where allowed names are found: the worker's own `PATH`, never a job's.
    pub search_path: String,
    /// `STUDIO_AGENT_COMMAND` split on whitespace (default `li agent`).
    pub agent_command: Vec<String>,
    /// The variables of the worker's environment a job may inherit.
    pub host_env: Vec<(String, String)>,
    /// `NOTIFY_SOCKET`: the service manager (systemd's `Type=notify`) told `READY=1`
    /// once the worker runs.
    pub notify_socket: Option<String>,
}

impl Env {
    pub(crate) fn read() -> Self {
        Self {
            search_path: std::env::var("PATH")
                .ok()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| studio_runner::env::DEFAULT_PATH.to_owned()),
            agent_command: std::env::var("STUDIO_AGENT_COMMAND")
                .ok()
                .map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| vec!["li".into(), "agent".into()]),
            host_env: studio_runner::env::inheritable(std::env::vars()),
            notify_socket: std::env::var("NOTIFY_SOCKET")
                .ok()
                .filter(|s| !s.is_empty()),
        }
    }
}
