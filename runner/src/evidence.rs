//! A launch's evidence on disk, in the run's folder, and what a later daemon may conclude
//! from it (`docs/SHIMS.md`). Each file is written whole and durably (a temporary name,
//! `fsync`, `rename`, `fsync` of the folder), so a reader sees it complete or not at all:
//!
//! - `shim.json`: the job's supervising process, written before the job may start;
//! - `job.json`: the job's leader, written once it runs;
//! - `outcome.json`: how the job ended.

use std::{
    fs::{self, File},
    io::{self, Write},
    path::Path,
};

use serde::{Serialize, de::DeserializeOwned};

use crate::{identity::ProcessIdentity, job::Outcome};

pub const SHIM_FILE: &str = "shim.json";
pub const JOB_FILE: &str = "job.json";
pub const OUTCOME_FILE: &str = "outcome.json";

/// What the evidence in a run's folder says about its launch.
#[derive(Debug, Clone, PartialEq)]
pub enum Evidence {
    /// No supervisor ever recorded itself: the job never started, and (under the home
    /// lock, `docs/SHIMS.md`) none can start any more. Safe to launch again.
    NeverStarted,
    /// The job ended; its outcome is known.
    Ended(Box<Outcome>),
    /// The supervisor still lives (same pid, start time and boot): adopt it.
    Supervised { shim: ProcessIdentity },
    /// The job started, but its supervisor is gone without an outcome; `job` is its
    /// leader, to be signalled only while it still matches.
    SupervisorLost { job: ProcessIdentity },
    /// The supervisor died after recording itself and before recording the job: the job
    /// may or may not have started. Never launched again; reported as uncertain.
    Uncertain,
    /// Recorded on another boot and not ended: everything it started is gone.
    Rebooted,
}

/// Reads the evidence of `run_dir` on boot `boot_id`. A file that is unreadable or not
/// the expected JSON counts as present but unusable, never as absent: only the absence
/// of `shim.json` is evidence that nothing started.
pub fn classify(run_dir: &Path, boot_id: &str) -> io::Result<Evidence> {
    let shim: Option<Option<ProcessIdentity>> = read(&run_dir.join(SHIM_FILE))?;
    let Some(shim) = shim else {
        return Ok(Evidence::NeverStarted);
    };
    if let Some(Some(outcome)) = read::<Outcome>(&run_dir.join(OUTCOME_FILE))? {
        return Ok(Evidence::Ended(Box::new(outcome)));
    }
    let Some(shim) = shim else {
        return Ok(Evidence::Uncertain);
    };
    if shim.boot_id != boot_id {
        return Ok(Evidence::Rebooted);
    }
    if shim.is_running(boot_id) {
        return Ok(Evidence::Supervised { shim });
    }
    Ok(match read::<ProcessIdentity>(&run_dir.join(JOB_FILE))? {
        Some(Some(job)) => Evidence::SupervisorLost { job },
        _ => Evidence::Uncertain,
    })
}

/// The job leader recorded in `run_dir`, if its shim got that far.
pub fn job(run_dir: &Path) -> Option<ProcessIdentity> {
    read(&run_dir.join(JOB_FILE)).ok().flatten().flatten()
}

/// Writes `value` as `dir/name`, whole and durably.
pub fn record(dir: &Path, name: &str, value: &impl Serialize) -> io::Result<()> {
    let text = serde_json::to_vec(value).map_err(io::Error::other)?;
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut file = File::create(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// `None` when the file is absent; `Some(None)` when it is there but unusable.
fn read<T: DeserializeOwned>(path: &Path) -> io::Result<Option<Option<T>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).ok())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        identity::boot_id,
        job::{Ending, StreamSummary},
    };

    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(tag: &str) -> Self {
            let path = std::env::temp_dir().join(format!("runner-ev-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).expect("mkdir");
            Self(path)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn me(boot: &str) -> ProcessIdentity {
        ProcessIdentity::of(std::process::id(), boot).expect("identity")
    }

    fn gone(boot: &str) -> ProcessIdentity {
        ProcessIdentity {
            start_ticks: me(boot).start_ticks - 1,
            ..me(boot)
        }
    }

    fn outcome() -> Outcome {
        Outcome {
            ending: Ending::Exited,
            exit_code: Some(3),
            signal: None,
            stdout: StreamSummary {
                bytes: 5,
                logged: 5,
                tail: "hello".into(),
            },
            stderr: StreamSummary::default(),
            report: None,
            report_error: None,
            cancelled_by: None,
        }
    }

    #[test]
    fn each_state_of_a_launch_reads_as_what_it_proves() {
        let boot = boot_id().expect("boot id");
        let d = Dir::new("states");
        let dir = &d.0;
        assert_eq!(classify(dir, &boot).expect("read"), Evidence::NeverStarted);
        // A supervisor that lives (this test process stands in for it).
        record(dir, SHIM_FILE, &me(&boot)).expect("shim");
        assert_eq!(
            classify(dir, &boot).expect("read"),
            Evidence::Supervised { shim: me(&boot) }
        );
        // Recorded on another boot.
        assert_eq!(
            classify(dir, "other-boot").expect("read"),
            Evidence::Rebooted
        );
        // A supervisor gone before it recorded the job: uncertain, never "not started".
        record(dir, SHIM_FILE, &gone(&boot)).expect("shim");
        assert_eq!(classify(dir, &boot).expect("read"), Evidence::Uncertain);
        // ... and after it did.
        record(dir, JOB_FILE, &me(&boot)).expect("job");
        assert_eq!(
            classify(dir, &boot).expect("read"),
            Evidence::SupervisorLost { job: me(&boot) }
        );
        // An outcome settles it, whoever is alive.
        record(dir, OUTCOME_FILE, &outcome()).expect("outcome");
        assert_eq!(
            classify(dir, "other-boot").expect("read"),
            Evidence::Ended(Box::new(outcome()))
        );
        assert!(
            !dir.join(".outcome.json.tmp").exists(),
            "renamed into place"
        );
    }

    #[test]
    fn a_damaged_supervisor_record_is_uncertain_never_absent() {
        let boot = boot_id().expect("boot id");
        let d = Dir::new("damaged");
        fs::write(d.0.join(SHIM_FILE), b"{\"pid\": 1").expect("write");
        assert_eq!(classify(&d.0, &boot).expect("read"), Evidence::Uncertain);
    }
}
