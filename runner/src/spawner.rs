//! Launching from dedicated threads. `fork` blocks the calling thread until the child has
//! exec'd; done on the async runtime's few worker threads, a burst of launches stalls
//! every other task. The parent-death signal also belongs to the *thread* that forked:
//! these threads live as long as the [`Spawner`], so a job's leader dies with the daemon,
//! never with an idle worker thread.

use std::sync::{Arc, Mutex, PoisonError, mpsc};

use tokio::sync::oneshot;

use crate::job::{Job, JobSpec, SpawnError, spawn};

struct Request {
    spec: JobSpec,
    reply: oneshot::Sender<Result<Job, SpawnError>>,
}

/// A pool of launcher threads. Dropping it ends the threads once they are idle.
#[derive(Debug, Clone)]
pub struct Spawner {
    tx: mpsc::Sender<Request>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("program", &self.spec.program)
            .finish()
    }
}

impl Spawner {
    /// Starts `threads` launchers that run jobs' supervision on `runtime`.
    pub fn new(runtime: tokio::runtime::Handle, threads: usize) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Request>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let (rx, runtime) = (rx.clone(), runtime.clone());
            std::thread::Builder::new()
                .name(format!("job-launcher-{i}"))
                .spawn(move || {
                    let _entered = runtime.enter();
                    loop {
                        let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let Ok(Request { spec, reply }) = next else {
                            return;
                        };
                        let _ = reply.send(spawn(spec));
                    }
                })?;
        }
        Ok(Self { tx })
    }

    /// Launches a job; `Ok` means its child is confirmed running.
    pub async fn spawn(&self, spec: JobSpec) -> Result<Job, SpawnError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Request { spec, reply })
            .map_err(|_| SpawnError::LauncherGone)?;
        answer.await.map_err(|_| SpawnError::LauncherGone)?
    }
}
