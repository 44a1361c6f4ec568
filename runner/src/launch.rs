//! What studiod sends the launcher and what a shim answers (`docs/SHIMS.md`): one JSON
//! object a line each way. A report line stays under `PIPE_BUF`, so the lines of shims
//! that answer at the same instant on the same pipe never interleave.

use std::{path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{identity::ProcessIdentity, job::JobSpec, redact::Redaction};

/// The largest write a pipe keeps whole among concurrent writers (POSIX minimum and
/// Linux value); a report line, newline included, is shorter.
pub const PIPE_BUF: usize = 4096;

/// A [`JobSpec`] as it crosses the pipe: durations in milliseconds. A shim's job always
/// dies with its shim, so there is no `die_with_parent` to choose. Never written to
/// disk (it may carry secrets); its `Debug` shows the environment's names only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub run_dir: PathBuf,
    pub log_cap: u64,
    pub deadline_ms: Option<u64>,
    pub grace_ms: u64,
    #[serde(default)]
    pub redact: Vec<Redaction>,
}

impl std::fmt::Debug for LaunchSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env", &crate::redact::names(&self.env))
            .field("run_dir", &self.run_dir)
            .field("log_cap", &self.log_cap)
            .field("deadline_ms", &self.deadline_ms)
            .field("grace_ms", &self.grace_ms)
            .field("redact", &self.redact)
            .finish()
    }
}

impl LaunchSpec {
    /// The wire form of `spec` (its `die_with_parent` is dropped: see the type).
    pub fn from_job_spec(spec: &JobSpec) -> Self {
        Self {
            program: spec.program.clone(),
            args: spec.args.clone(),
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            run_dir: spec.run_dir.clone(),
            log_cap: spec.log_cap,
            deadline_ms: spec.deadline.map(duration_ms),
            grace_ms: duration_ms(spec.grace),
            redact: spec.redact.clone(),
        }
    }

    /// The job a shim spawns: it dies with the shim's thread, so a killed shim leaves
    /// no unsupervised job.
    pub fn into_job_spec(self) -> JobSpec {
        JobSpec {
            program: self.program,
            args: self.args,
            cwd: self.cwd,
            env: self.env,
            run_dir: self.run_dir,
            log_cap: self.log_cap,
            deadline: self.deadline_ms.map(Duration::from_millis),
            grace: Duration::from_millis(self.grace_ms),
            die_with_parent: true,
            redact: self.redact,
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One job to launch under its own shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub run_id: String,
    /// The boot the identities in the run's evidence are recorded on.
    pub boot_id: String,
    pub spec: LaunchSpec,
    /// `on_daemon_loss: kill`: the shim cancels its job when this process (the daemon
    /// that launched it) is gone.
    #[serde(default)]
    pub daemon_pid: Option<u32>,
    /// The shim's inherited copy of the home lock, closed as soon as `shim.json` is
    /// durable (step 2 of the shim in `docs/SHIMS.md`).
    #[serde(default)]
    pub inherited_lock_fd: Option<i32>,
}

/// A shim's answer: who supervises the run, and its job's leader or why none started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchReport {
    pub run_id: String,
    /// `None` only when no shim recorded itself (no fork, or no `shim.json`): then
    /// nothing was started, nor can be.
    pub shim: Option<ProcessIdentity>,
    pub result: Result<ProcessIdentity, String>,
}

impl LaunchReport {
    /// The report as one line shorter than [`PIPE_BUF`], newline included: an error
    /// message is cut (on a character boundary, marked with `…`) until it fits.
    pub fn to_line(&self) -> Vec<u8> {
        let mut report = self.clone();
        loop {
            // Serializing plain strings and integers cannot fail; an empty object is
            // still a line the reader can refuse.
            let mut line = serde_json::to_vec(&report).unwrap_or_else(|_| b"{}".to_vec());
            line.push(b'\n');
            let excess = line.len().saturating_sub(PIPE_BUF - 1);
            match &mut report.result {
                Err(message) if excess > 0 && !message.is_empty() => {
                    // A character may take up to six bytes once escaped: cut in the
                    // message's own proportion of escaped to raw bytes, then measure again.
                    let escaped = serde_json::to_string(message)
                        .map_or(message.len(), |s| s.len().saturating_sub(2))
                        .max(1);
                    let room = escaped.saturating_sub(excess + '…'.len_utf8());
                    let mut keep = message.len() * room / escaped;
                    while !message.is_char_boundary(keep) {
                        keep -= 1;
                    }
                    message.truncate(keep);
                    message.push('…');
                    if keep == 0 {
                        message.clear();
                    }
                }
                _ => return line,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> ProcessIdentity {
        ProcessIdentity {
            pid: 42,
            start_ticks: 7,
            boot_id: "b".repeat(36),
        }
    }

    #[test]
    fn a_long_error_is_cut_to_one_atomic_line() {
        for filler in ["é", "\"", "x", "\u{1}"] {
            let report = LaunchReport {
                run_id: "r1".into(),
                shim: Some(me()),
                result: Err(filler.repeat(10_000)),
            };
            let line = report.to_line();
            assert!(line.len() < PIPE_BUF, "{} bytes", line.len());
            assert_eq!(line.last(), Some(&b'\n'));
            let back: LaunchReport = serde_json::from_slice(&line).expect("json");
            assert_eq!(back.run_id, "r1");
            assert!(back.result.expect_err("error").ends_with('…'));
        }
    }

    #[test]
    fn a_short_report_is_kept_whole() {
        let report = LaunchReport {
            run_id: "r1".into(),
            shim: Some(me()),
            result: Ok(me()),
        };
        let back: LaunchReport = serde_json::from_slice(&report.to_line()).expect("json");
        assert_eq!(back, report);
    }

    #[test]
    fn a_spec_crosses_the_pipe_and_always_dies_with_its_shim() {
        let spec = LaunchSpec {
            program: "/bin/true".into(),
            args: vec!["a".into()],
            cwd: None,
            env: vec![("PATH".into(), "/bin".into())],
            run_dir: "/tmp/r".into(),
            log_cap: 10,
            deadline_ms: Some(1500),
            grace_ms: 200,
            redact: vec![Redaction {
                name: "github".into(),
                value: "s3cret-value".into(),
            }],
        };
        let job = spec.clone().into_job_spec();
        assert!(job.die_with_parent);
        for debug in [format!("{spec:?}"), format!("{job:?}")] {
            assert!(
                !debug.contains("/bin\"") && !debug.contains("s3cret"),
                "no value in {debug}"
            );
            assert!(
                debug.contains("PATH") && debug.contains("github"),
                "{debug}"
            );
        }
        assert_eq!(job.deadline, Some(Duration::from_millis(1500)));
        assert_eq!(LaunchSpec::from_job_spec(&job), spec);
    }
}
