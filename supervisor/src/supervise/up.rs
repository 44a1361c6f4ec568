//! `studio up`: one supervisor per home (the `run/studio.lock` advisory lock), the daemon
//! token and the per-launch app key, studiod then studio-app, the pairing link, the
//! control socket, and the ordered shutdown (app first, then daemon).
//!
//! Runs on the caller's thread: the children are spawned from it and tie their lives to
//! it (PR_SET_PDEATHSIG), so it must live as long as the supervisor. `main` uses a
//! current-thread runtime on the main thread for exactly this reason.

use std::{
    ffi::OsString,
    fs::{File, OpenOptions, TryLockError},
    future::Future,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::unix::fs::OpenOptionsExt,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use studio_contract::{
    error::Code,
    home::Home,
    secret::{self, AppKey},
    time,
};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

use crate::{
    Error,
    control::{self, ChildName, ChildStatus, Children, PairLink, Reply, Request, State},
    logs::{RotatingLog, Rotation, SharedLog},
    pairing,
    supervise::{
        child::Spec,
        discover,
        lifecycle::{Cmd, Options, Supervised},
        policy::Params,
    },
};

/// Everything `studio up` is configured with (built from flags and environment by `cli`).
#[derive(Debug, Clone)]
pub struct UpConfig {
    pub home: Home,
    pub app_addr: SocketAddr,
    pub daemon_addr: SocketAddr,
    pub open: bool,
    /// `STUDIO_DAEMON_BIN` / `STUDIO_APP_BIN`; else this executable as `studio daemon` / `studio app`.
    pub daemon_bin: Option<PathBuf>,
    pub app_bin: Option<PathBuf>,
    /// `STUDIO_PUBLIC_ORIGIN`, normalised: the origin browsers use, if not the loopback one.
    pub public_origin: Option<String>,
    /// The user set `STUDIO_TOKEN`: do not mint `run/token`, let the children inherit it.
    pub token_from_env: bool,
    pub stop_grace: Duration,
    pub ready_timeout: Duration,
    /// How long studiod may wait for a previous studiod of the home to finish
    /// (`STUDIO_DAEMON_LOCK_WAIT_MS`, which studiod reads too): its readiness may take
    /// this much longer than `ready_timeout`.
    pub daemon_lock_wait: Duration,
    pub log_max_bytes: u64,
    pub log_keep: u32,
}

impl UpConfig {
    /// The origin a browser reaches the app at on loopback, e.g. `http://127.0.0.1:8765`.
    pub fn app_origin(&self) -> String {
        let ip = match self.app_addr.ip() {
            IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("http://{}", SocketAddr::new(ip, self.app_addr.port()))
    }

    /// Where `studio up` sends the browser.
    pub fn app_url(&self) -> String {
        self.public_origin
            .clone()
            .unwrap_or_else(|| self.app_origin())
    }
}

/// One child as the control socket sees it.
struct Slot {
    status: watch::Receiver<ChildStatus>,
    cmds: mpsc::Sender<Cmd>,
}

/// What the control socket answers from.
struct Shared {
    home: Home,
    pid: u32,
    started_at: String,
    app_url: String,
    app_origin: String,
    daemon: Slot,
    app: Slot,
    stop: watch::Sender<bool>,
}

impl control::Handler for Shared {
    async fn handle(&self, req: Request) -> Reply {
        match req {
            Request::Status => Reply::Status(Box::new(control::Status {
                supervisor: control::SupervisorInfo {
                    pid: self.pid,
                    home: self.home.root().display().to_string(),
                    started_at: self.started_at.clone(),
                },
                app_url: self.app_url.clone(),
                app_origin: self.app_origin.clone(),
                children: Children {
                    daemon: self.daemon.status.borrow().clone(),
                    app: self.app.status.borrow().clone(),
                },
            })),
            Request::Restart { child } => self.restart(child),
            Request::Stop => {
                self.stop.send_replace(true);
                Reply::Ok(true)
            }
            Request::Pair { role } => {
                match pairing::daemon_code(self.home.daemon_socket(), role).await {
                    Ok(code) => Reply::Pair(PairLink {
                        url: pairing::link(&self.app_url, &code.code),
                        expires_at_ms: code.expires_at_ms,
                    }),
                    Err(e) => Reply::error(Code::DaemonUnavailable, e.to_string()),
                }
            }
        }
    }
}

impl Shared {
    fn restart(&self, child: ChildName) -> Reply {
        let slot = match child {
            ChildName::Daemon => &self.daemon,
            ChildName::App => &self.app,
        };
        if *self.stop.borrow() || slot.status.borrow().state == State::Stopped {
            return Reply::error(
                Code::NotRunning,
                format!("{} is not started", child.as_str()),
            );
        }
        match slot.cmds.try_send(Cmd::Restart) {
            Ok(()) => Reply::Ok(true),
            Err(_) => Reply::error(Code::Busy, "a restart is already pending"),
        }
    }
}

/// Runs the supervisor until `shutdown` resolves or `studio stop` asks; when another one
/// already runs in this home, prints a fresh pairing link from it instead.
pub async fn up(config: UpConfig, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    let home = config.home.clone();
    home.prepare()
        .map_err(|e| Error::io(format!("cannot prepare {}", home.root().display()), e))?;
    let lock = lock(&home)?;
    let Some(lock) = lock else {
        tracing::info!(home = %home.root().display(), "studio already runs here");
        let patience = config.ready_timeout + config.daemon_lock_wait;
        return link_from_running(&home, config.open, patience).await;
    };
    let own = discover::own_exe().map_err(|e| Error::Failed(e.to_string()))?;
    let bins = discover::find(&own, config.daemon_bin.clone(), config.app_bin.clone())
        .map_err(|e| Error::Failed(e.to_string()))?;
    if !config.token_from_env {
        Home::write_secret(&home.token_file(), &secret::mint::<32>("stk_"))
            .map_err(|e| Error::io("cannot write run/token", e))?;
    }
    // One key per launch: both children get it, and it survives their restarts.
    let key = AppKey::generate();
    let rotation = Rotation {
        max_bytes: config.log_max_bytes,
        keep: config.log_keep,
    };
    let open_log = |name: &str| {
        RotatingLog::open(home.log_file(name), rotation)
            .map(RotatingLog::shared)
            .map_err(|e| Error::io(format!("cannot open logs/{name}.log"), e))
    };
    let (daemon_log, app_log) = (open_log("daemon")?, open_log("app")?);

    let (daemon_status, daemon_status_rx) = watch::channel(ChildStatus::stopped());
    let (app_status, app_status_rx) = watch::channel(ChildStatus::stopped());
    let (daemon_cmds, daemon_cmds_rx) = mpsc::channel(4);
    let (app_cmds, app_cmds_rx) = mpsc::channel(4);
    let (stop, mut stop_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        home: home.clone(),
        pid: std::process::id(),
        started_at: time::rfc3339(time::now_ms()),
        app_url: config.app_url(),
        app_origin: config.app_origin(),
        daemon: Slot {
            status: daemon_status_rx,
            cmds: daemon_cmds,
        },
        app: Slot {
            status: app_status_rx,
            cmds: app_cmds,
        },
        stop,
    });
    let socket = home.supervisor_socket();
    let (listener, socket_file) = control::bind(&socket)
        .map_err(|e| Error::io(format!("cannot bind {}", socket.display()), e))?;
    let server = tokio::spawn(control::serve(listener, shared.clone()));

    let mut tasks = Tasks::default();
    let launch = Launch {
        config: &config,
        key: &key,
        bins: &bins,
        shared: &shared,
    };
    tokio::pin!(shutdown);
    let launched = tokio::select! {
        r = launch.run(
            (daemon_status, daemon_cmds_rx, daemon_log),
            (app_status, app_cmds_rx, app_log),
            &mut tasks,
        ) => Some(r),
        // Interrupted while launching: stop whatever already started.
        () = &mut shutdown => None,
        _ = stop_rx.wait_for(|s| *s) => None,
    };
    if let Some(Ok(())) = launched {
        tokio::select! {
            () = &mut shutdown => tracing::info!("signal received: stopping"),
            _ = stop_rx.wait_for(|s| *s) => tracing::info!("stop requested: stopping"),
        }
    }
    // Ordered: the app goes first so it never serves without its daemon behind it.
    stop_task(&shared.app, tasks.app.take()).await;
    stop_task(&shared.daemon, tasks.daemon.take()).await;
    server.abort();
    control::unbind(&socket_file);
    // Explicit, though closing the file would also release it: the lock says "done".
    let _ = lock.unlock();
    tracing::info!("studio stopped");
    launched.unwrap_or(Ok(()))
}

/// Prints a fresh link from the supervisor that holds the lock. It may still be binding
/// its socket, or waiting for studiod (which may wait for its predecessor), so both are
/// retried for as long as that supervisor would wait for studiod.
async fn link_from_running(home: &Home, open: bool, patience: Duration) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let last = match pairing::supervisor_link(home, None).await {
            Ok(url) => return pairing::print_link(&url, open).await,
            Err(e @ (Error::NotRunning(_) | Error::Remote(_))) => e,
            Err(e) => return Err(e),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(match last {
                Error::NotRunning(_) => Error::Failed(format!(
                    "another studio holds {} but does not answer on its control socket",
                    home.lock_file().display()
                )),
                other => other,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Takes the home's lock; `None` when another supervisor holds it.
fn lock(home: &Home) -> Result<Option<File>, Error> {
    let path = home.lock_file();
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(Error::io(format!("cannot lock {}", path.display()), e)),
    }
}

#[derive(Default)]
struct Tasks {
    daemon: Option<JoinHandle<()>>,
    app: Option<JoinHandle<()>>,
}

type ChildParts = (watch::Sender<ChildStatus>, mpsc::Receiver<Cmd>, SharedLog);

struct Launch<'a> {
    config: &'a UpConfig,
    key: &'a AppKey,
    bins: &'a discover::Binaries,
    shared: &'a Shared,
}

impl Launch<'_> {
    /// studiod, then studio-app, each once ready; then the pairing link on stdout.
    async fn run(
        &self,
        daemon: ChildParts,
        app: ChildParts,
        tasks: &mut Tasks,
    ) -> Result<(), Error> {
        let cfg = self.config;
        let home = cfg.home.root().as_os_str().to_owned();
        let pid = std::process::id().to_string();

        let mut args = self.bins.daemon.leading.clone();
        args.extend(["--home".into(), home.clone()]);
        args.extend(["--addr".into(), cfg.daemon_addr.to_string().into()]);
        args.extend(["--app-origin".into(), cfg.app_origin().into()]);
        if let Some(public) = &cfg.public_origin {
            args.extend(["--app-origin".into(), public.into()]);
        }
        args.extend([
            "--app-key-stdin".into(),
            "--supervisor-pid".into(),
            pid.clone().into(),
        ]);
        let spec = self.spec(self.bins.daemon.path.clone(), args, true);
        // studiod waits for a previous one on the home before it binds anything (a
        // supervisor killed with SIGKILL leaves its studiod draining): allow for it.
        let patience = cfg.ready_timeout + cfg.daemon_lock_wait;
        let pin = cfg.daemon_addr.port() == 0;
        let detach = Some(cfg.home.daemon_socket());
        tasks.daemon = Some(self.start("daemon", spec, pin, patience, detach, daemon));
        let ready = wait_ready(&self.shared.daemon.status, "daemon", &cfg.home).await?;
        // A `:0` daemon address is only known now; the app must dial the bound one.
        let daemon_addr = ready.addr.unwrap_or_else(|| cfg.daemon_addr.to_string());

        let mut args = self.bins.app.leading.clone();
        args.extend(["--home".into(), home]);
        args.extend(["--addr".into(), cfg.app_addr.to_string().into()]);
        args.extend(["--daemon-addr".into(), daemon_addr.into()]);
        // Same host: the API over studiod's own socket, not a loopback TCP hop.
        let socket = cfg.home.api_socket().into_os_string();
        args.extend(["--daemon-socket".into(), socket]);
        args.extend([
            "--app-key-stdin".into(),
            "--supervisor-pid".into(),
            pid.into(),
        ]);
        let spec = self.spec(self.bins.app.path.clone(), args, false);
        tasks.app = Some(self.start("app", spec, false, cfg.ready_timeout, None, app));
        wait_ready(&self.shared.app.status, "app", &cfg.home).await?;

        let url = self.shared.app_url.clone();
        let printed =
            match pairing::daemon_code_patiently(cfg.home.daemon_socket(), Duration::from_secs(3))
                .await
            {
                Ok(code) => pairing::print_link(&pairing::link(&url, &code.code), cfg.open).await,
                Err(error) => {
                    tracing::warn!(%error, "no pairing code; run `studio pair` for one");
                    outln!("Studio is ready: {url}/")
                }
            };
        // Nobody reading stdout is no reason to stop supervising.
        if let Err(error) = printed {
            tracing::warn!(%error, "cannot print the pairing link; run `studio pair` for one");
        }
        Ok(())
    }

    /// How to start a child. The daemon token is studiod's alone: it reaches studiod
    /// through `run/token`, or as the user's own `STUDIO_TOKEN` when one is set; the app
    /// holds no secret and never inherits it, nor the database URL (which may hold a
    /// password).
    fn spec(&self, program: PathBuf, args: Vec<OsString>, daemon: bool) -> Spec {
        Spec {
            program,
            args,
            app_key: Some(self.key.clone()),
            env_remove: match (daemon, self.config.token_from_env) {
                (true, true) => vec![],
                (true, false) => vec!["STUDIO_TOKEN"],
                (false, _) => vec!["STUDIO_TOKEN", "STUDIO_DATABASE_URL"],
            },
        }
    }

    fn start(
        &self,
        name: &'static str,
        spec: Spec,
        pin_addr: bool,
        ready_timeout: Duration,
        detach_socket: Option<PathBuf>,
        parts: ChildParts,
    ) -> JoinHandle<()> {
        let (status, cmds, log) = parts;
        let opts = Options {
            name,
            ready_timeout,
            grace: self.config.stop_grace,
            policy: Params::default(),
            pin_addr,
            detach_socket,
        };
        tokio::spawn(Supervised::new(spec, opts, log, status, cmds).run())
    }
}

/// Waits for a child's first readiness; a child that fails before it ends the launch.
async fn wait_ready(
    status: &watch::Receiver<ChildStatus>,
    name: &str,
    home: &Home,
) -> Result<ChildStatus, Error> {
    let mut status = status.clone();
    let seen = status
        .wait_for(|s| matches!(s.state, State::Running | State::Failed))
        .await
        .map_err(|_| Error::Failed(format!("the {name} supervisor ended")))?
        .clone();
    if seen.state == State::Failed {
        return Err(Error::Failed(format!(
            "{name} failed to start ({}); see {}",
            seen.last_exit.as_deref().unwrap_or("no reason"),
            home.log_file(name).display()
        )));
    }
    Ok(seen)
}

async fn stop_task(slot: &Slot, task: Option<JoinHandle<()>>) {
    let Some(task) = task else { return };
    // A send error means the task already ended; either way, wait for it.
    let _ = slot.cmds.send(Cmd::Stop).await;
    if let Err(error) = task.await {
        tracing::error!(%error, "a child's supervisor task failed");
    }
}

#[cfg(test)]
mod tests;
