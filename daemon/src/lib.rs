//! studiod: the only process that opens `state.db` or mints a credential.
//!
//! [`Daemon::build`] takes the home's lock, prepares the home, the store, the epoch and
//! binds every listener; [`Daemon::run_until`] serves them and owns the one shutdown
//! path. [`run`] is both.

mod admission;
mod apps;
mod audit;
pub mod config;
mod control;
pub mod entry;
mod epoch;
mod error;
mod home_lock;
mod http;
mod metrics;
mod pairing;
mod principals;
pub mod scheduling;
mod secrets;
mod socket;
mod store;
#[cfg(test)]
mod testing;
mod verifier;
mod workers;

use std::{future::Future, io::ErrorKind, net::SocketAddr, sync::Arc, time::Duration};
use studio_contract::lifecycle::Shutdown;

use serde_json::json;
use studio_contract::{
    home::Home,
    host::HostPolicy,
    origin::{self, AllowedOrigins},
    ready::Ready,
    secret,
    time::now_ms,
};
use tokio::net::TcpListener;

pub use config::{Args, Config, ConfigError};
pub use epoch::EpochCell;
pub use error::{DaemonError, chain};
pub use home_lock::LockError;
pub use scheduling::{CrashPoint, SchedulerConfig};
pub use store::StoreError;

use crate::{
    admission::Authority,
    audit::Kind as AuditKind,
    home_lock::HomeLock,
    http::{ApiState, FrontDoor},
    socket::Bound,
    store::Store,
    verifier::VerifierService,
};

/// How long in-flight requests, streams and the jobs' drain get after a stop is asked;
/// the last writes (sockets, the epoch's end, the store) follow within the supervisor's
/// TERM-to-KILL grace, which is longer.
const GRACE: Duration = studio_contract::lifecycle::DAEMON_DRAIN;

/// A daemon whose listeners are bound but not yet served.
pub struct Daemon {
    config: Config,
    /// This home's member id (`run/member`).
    member: String,
    store: Store,
    authority: Arc<Authority>,
    front: Arc<FrontDoor>,
    http: TcpListener,
    /// The same API on `run/api.sock`, for studio-app on this host.
    api: Bound,
    verifier: Bound,
    control: Bound,
    /// The worker listener (mutual TLS) and its authority, unless turned off.
    worker_listener: Option<(TcpListener, Arc<studio_pki::Authority>)>,
    /// The apps listener (mutual TLS) and its authority, when asked for.
    apps_listener: Option<(TcpListener, Arc<studio_pki::Authority>)>,
    addr: SocketAddr,
    default_zone: studio_schedule::Zone,
    /// When this studiod started (ms since the Unix epoch).
    started_at_ms: i64,
    /// Held from before the first bind until the very end of the stop.
    lock: HomeLock,
}

/// `STUDIO_TOKEN`, else `run/token`, else a fresh token written to `run/token`.
fn daemon_token(config: &Config) -> Result<String, DaemonError> {
    if let Some(token) = &config.token {
        return Ok(token.clone());
    }
    let path = config.home.token_file();
    let bad = |why: String| DaemonError::Config(ConfigError::Invalid(why));
    match Home::read_secret(&path) {
        Ok(token) if token.is_empty() => Err(bad(format!("{} is empty", path.display()))),
        Ok(token) => Ok(token),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Err(bad(e.to_string())),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let token = secret::hex(&secret::random_bytes::<32>());
            Home::write_secret(&path, &token).map_err(DaemonError::io("cannot write run/token"))?;
            tracing::info!(path = %path.display(), "minted a daemon token");
            Ok(token)
        }
        Err(e) => Err(DaemonError::io("cannot read run/token")(e)),
    }
}

/// This home's member id (`run/member`, made once): the name under which this studiod
/// joins the cluster of those sharing its database, and runs its own runs.
fn member_id(config: &Config) -> Result<String, DaemonError> {
    let path = config.home.run_dir().join("member");
    let bad = |why: String| DaemonError::Config(ConfigError::Invalid(why));
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            let fits = !id.is_empty()
                && id.len() <= 64
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if fits {
                Ok(id.to_owned())
            } else {
                Err(bad(format!(
                    "{} must hold one id of letters, digits and '-'",
                    path.display()
                )))
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let id = secret::hex(&secret::random_bytes::<8>());
            Home::write_secret(&path, &id).map_err(DaemonError::io("cannot write run/member"))?;
            Ok(id)
        }
        Err(e) => Err(DaemonError::io("cannot read run/member")(e)),
    }
}

/// On a shared database, every member must seal evidence and secrets with the same keys
/// and enrol workers under the same authority: the first member's are recorded (as
/// digests, never the keys) and a member that brings another is refused before it
/// writes anything.
async fn check_cluster_keys(
    config: &Config,
    store: &Store,
    worker_ca: Option<&studio_pki::Authority>,
) -> Result<(), DaemonError> {
    if config.database.is_none() {
        return Ok(());
    }
    let mut keys = Vec::new();
    for (path, name) in [
        (config.home.evidence_key_file(), "run/evidence.key"),
        (config.home.secrets_key_file(), "run/secrets.key"),
    ] {
        let bytes = home_key(&path, name)?;
        let digest = secret::hex(&secret::digest(&format!(
            "studio cluster key check:{}",
            secret::hex(&bytes)
        )));
        keys.push((name, digest));
    }
    // Workers and apps enrolled through one member reconnect to any: one authority for all.
    if let Some(ca) = worker_ca {
        keys.push(("run/ca", ca.fingerprint()));
    }
    match store.differing_key(&keys).await? {
        None => Ok(()),
        Some(name) => Err(DaemonError::Config(ConfigError::Invalid(format!(
            "{name} is not the one the other studiod sharing this database use: copy \
             run/evidence.key, run/secrets.key and run/ca/ from a member's home"
        )))),
    }
}

/// The home's evidence key (`run/evidence.key`).
fn evidence_key(config: &Config) -> Result<Arc<studio_evidence::Key>, DaemonError> {
    let bytes = home_key(&config.home.evidence_key_file(), "run/evidence.key")?;
    Ok(Arc::new(studio_evidence::Key::new(&bytes)))
}

/// The home's secrets key (`run/secrets.key`). Never in the database, so a copied
/// `state.db` or backup opens no secret alone.
fn secrets_key(config: &Config) -> Result<Arc<secrets::Sealer>, DaemonError> {
    let path = config.home.secrets_key_file();
    let bytes = home_key(&path, "run/secrets.key")?;
    secrets::Sealer::new(&bytes)
        .map(Arc::new)
        .map_err(|e| DaemonError::Config(ConfigError::Invalid(format!("{}: {e}", path.display()))))
}

/// A 32-byte key of the home at `path` (`name` in messages): read, or made once from
/// random bytes (0600, as 64 hex digits).
fn home_key(path: &std::path::Path, name: &'static str) -> Result<Vec<u8>, DaemonError> {
    let bad = |why: String| DaemonError::Config(ConfigError::Invalid(why));
    let text = match Home::key_or_make(path) {
        Ok((text, made)) => {
            if made {
                tracing::info!(path = %path.display(), "made a key");
            }
            text
        }
        Err(e) if e.kind() == ErrorKind::PermissionDenied => return Err(bad(e.to_string())),
        Err(e) => return Err(DaemonError::io(name)(e)),
    };
    secret::unhex(&text)
        .filter(|b| b.len() == 32)
        .ok_or_else(|| bad(format!("{} is not 64 hex digits", path.display())))
}

/// The ports of this studiod's own listeners and of its studio-app (its origins): a
/// notification endpoint on this machine at one of them is refused.
fn own_ports(config: &Config, api: SocketAddr, listeners: &[Option<SocketAddr>]) -> Vec<u16> {
    let mut ports = vec![api.port()];
    ports.extend(listeners.iter().flatten().map(SocketAddr::port));
    ports.extend(config.public_port);
    for o in &config.extra_origins {
        let port = o
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .unwrap_or(if o.starts_with("https:") { 443 } else { 80 });
        ports.push(port);
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

fn allowed_origins(config: &Config, port: u16) -> AllowedOrigins {
    let mut list = origin::loopback_origins("http", port);
    if let Some(public) = config.public_port {
        list.extend(origin::loopback_origins("http", public));
    }
    list.extend(config.extra_origins.iter().cloned());
    AllowedOrigins::new(list)
}

impl Daemon {
    /// Takes the home's lock (waiting up to `config.lock_wait` for a previous studiod),
    /// then [`Daemon::build_locked`].
    pub async fn build(config: Config) -> Result<Self, DaemonError> {
        let lock = lock_home(&config).await?;
        Self::build_locked(config, lock).await
    }

    /// Prepares the home, opens the store, starts a new epoch and binds every listener,
    /// under the home's lock.
    async fn build_locked(config: Config, lock: HomeLock) -> Result<Self, DaemonError> {
        let home = config.home.clone();
        let token = daemon_token(&config)?;
        let http = TcpListener::bind(config.addr)
            .await
            .map_err(DaemonError::io(format!("cannot listen on {}", config.addr)))?;
        let addr = http
            .local_addr()
            .map_err(DaemonError::io("no local address"))?;
        let api = socket::bind_private(&home.api_socket())
            .map_err(DaemonError::io("cannot bind run/api.sock"))?;
        let verifier = socket::bind_private(&home.verifier_socket())
            .map_err(DaemonError::io("cannot bind run/verifier.sock"))?;
        let control = socket::bind_private(&home.daemon_socket())
            .map_err(DaemonError::io("cannot bind run/daemon.sock"))?;
        // The authority behind both mutual-TLS listeners (workers' and apps').
        let ca = if config.worker_addr.is_some() || config.apps_addr.is_some() {
            let ca =
                studio_pki::Authority::load_or_create(&home.run_dir().join("ca")).map_err(|e| {
                    DaemonError::io("cannot set up the authority in run/ca")(std::io::Error::other(
                        e,
                    ))
                })?;
            Some(Arc::new(ca))
        } else {
            None
        };
        let worker_listener =
            match (config.worker_addr, &ca) {
                (Some(at), Some(ca)) => {
                    let listener = TcpListener::bind(at).await.map_err(DaemonError::io(format!(
                    "cannot listen for workers on {at} (STUDIO_WORKER_ADDR; `off` turns it off)"
                )))?;
                    Some((listener, ca.clone()))
                }
                _ => None,
            };
        let apps_listener = match (config.apps_addr, &ca) {
            (Some(at), Some(ca)) => {
                let listener = TcpListener::bind(at)
                    .await
                    .map_err(DaemonError::io(format!(
                        "cannot listen for apps on {at} (STUDIO_APPS_ADDR)"
                    )))?;
                Some((listener, ca.clone()))
            }
            _ => None,
        };

        let default_zone =
            studio_schedule::Zone::default_for(config.scheduler.default_timezone.as_deref())
                .map_err(|e| DaemonError::Config(ConfigError::Invalid(e)))?;
        let state_db = home.state_db();
        let store = Store::open_at(match &config.database {
            Some(url) => studio_store::Location::Postgres(url),
            None => studio_store::Location::File(&state_db),
        })
        .await?;
        check_cluster_keys(&config, &store, ca.as_deref()).await?;
        let member = member_id(&config)?;
        let started_at_ms = now_ms();
        let (epoch, new_epoch) = store
            .begin_epoch(
                &secret::hex(&secret::random_bytes::<16>()),
                std::process::id(),
                started_at_ms,
            )
            .await?;
        let past = store.past_epochs(&epoch).await?;
        let ttl_ms = i64::try_from(config.pairing_ttl.as_millis()).unwrap_or(i64::MAX);
        let authority = Arc::new(
            Authority::new(
                store.clone(),
                &epoch,
                &past,
                &token,
                allowed_origins(&config, addr.port()),
                ttl_ms,
            )
            .for_member(&member),
        );
        // Adopting the cluster's epoch is no new epoch: members come and go within one.
        if new_epoch {
            authority
                .audit()
                .record(
                    AuditKind::EpochStarted,
                    None,
                    json!({ "pid": std::process::id(), "addr": addr.to_string() }),
                )
                .await;
        }
        let front = Arc::new(FrontDoor {
            host: HostPolicy::new(addr.ip(), addr.port(), 80).allow(None, config.public_port),
            app_key: config.app_key.clone(),
        });
        tracing::info!(%addr, %epoch, "studiod started");
        Ok(Self {
            config,
            member,
            store,
            authority,
            front,
            http,
            api,
            verifier,
            control,
            worker_listener,
            apps_listener,
            addr,
            default_zone,
            started_at_ms,
            lock,
        })
    }

    /// The bound HTTP address (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound apps listener's address, when there is one.
    pub fn apps_addr(&self) -> Option<SocketAddr> {
        self.apps_listener
            .as_ref()
            .and_then(|(listener, _)| listener.local_addr().ok())
    }

    /// The epoch it admits under now.
    pub fn epoch(&self) -> String {
        self.authority.epoch()
    }

    /// Serves until `shutdown` resolves (or a server fails), then stops in one path:
    /// stop accepting, let in-flight work finish within [`GRACE`], remove the sockets,
    /// record the epoch's end and close the store. `on_ready` runs once all serve.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        on_ready: impl FnOnce(&Ready),
    ) -> Result<(), DaemonError> {
        let Daemon {
            config,
            member,
            store,
            authority,
            front,
            http,
            api,
            verifier,
            control,
            worker_listener,
            apps_listener,
            addr,
            default_zone,
            started_at_ms,
            lock,
        } = self;
        let stop = Shutdown::new();
        let mut scheduler_config = config.scheduler.clone();
        let worker_at = worker_listener
            .as_ref()
            .and_then(|(listener, _)| listener.local_addr().ok());
        let apps_at = apps_listener
            .as_ref()
            .and_then(|(listener, _)| listener.local_addr().ok());
        scheduler_config.own_ports = own_ports(&config, addr, &[worker_at, apps_at]);
        scheduler_config.epoch = authority.epoch_cell().clone();
        scheduler_config.addr = addr.to_string();
        let scheduler = scheduling::Scheduler::new(
            scheduling::store::SchedStore::new(
                &store,
                evidence_key(&config)?,
                secrets_key(&config)?,
            )
            .for_member(&member),
            scheduler_config,
            default_zone,
            config.home.runs_dir(),
            config.home.run_dir(),
            stop.clone(),
            Some(lock.raw_fd()),
        )
        .await?;
        let mut scheduler_task = tokio::spawn(scheduler.clone().run());
        if store.url().is_some() {
            tokio::spawn(
                authority
                    .clone()
                    .follow_cluster(scheduler.identity_notes(), stop.clone()),
            );
        }
        let mut worker_task = None;
        let mut door = None;
        if let Some((listener, ca)) = worker_listener {
            let at = listener
                .local_addr()
                .map_err(DaemonError::io("no worker listener address"))?;
            let tls = studio_pki::listener_server_config(&ca).map_err(|e| {
                DaemonError::io("cannot set up the worker listener's TLS")(std::io::Error::other(e))
            })?;
            door = Some(Arc::new(workers::JoinDoor {
                addr: at,
                ca_fingerprint: ca.fingerprint(),
            }));
            let service = workers::WorkerService::new(
                scheduler.clone(),
                ca,
                authority.epoch_cell().clone(),
                stop.clone(),
            );
            tracing::info!(addr = %at, "worker listener (mutual TLS) started");
            worker_task = Some(tokio::spawn({
                let stop = stop.clone();
                async move {
                    if let Err(error) =
                        workers::serve(listener, service, tls, stop.triggered()).await
                    {
                        tracing::error!(error = %chain(&error), "worker listener failed");
                    }
                }
            }));
        }
        let apps_door = match &apps_listener {
            Some((listener, ca)) => Some(Arc::new(workers::JoinDoor {
                addr: listener
                    .local_addr()
                    .map_err(DaemonError::io("no apps listener address"))?,
                ca_fingerprint: ca.fingerprint(),
            })),
            None => None,
        };
        let state = ApiState {
            authority: authority.clone(),
            front,
            scheduler: scheduler.clone(),
            started_at_ms,
            workers: door,
            apps: apps_door,
        };
        let mut apps_task = None;
        if let Some((listener, ca)) = apps_listener {
            let at = listener
                .local_addr()
                .map_err(DaemonError::io("no apps listener address"))?;
            let tls = studio_pki::apps_listener_server_config(&ca).map_err(|e| {
                DaemonError::io("cannot set up the apps listener's TLS")(std::io::Error::other(e))
            })?;
            // The API as this listener serves it: a Host naming it (an app dials any
            // member's address; it names the server `studiod`, as its certificate does).
            let host = HostPolicy::new(at.ip(), at.port(), at.port()).allow(
                studio_contract::host::HostName::parse(studio_pki::SERVER_NAME),
                None,
            );
            let api = http::router(ApiState {
                front: Arc::new(FrontDoor {
                    host,
                    app_key: config.app_key.clone(),
                }),
                ..state.clone()
            });
            let router = apps::router(
                api,
                VerifierService::new(authority.clone(), stop.clone())
                    .with_metrics(scheduler.metrics().clone()),
                apps::EnrolmentService::new(
                    ca,
                    store.clone(),
                    authority.audit().clone(),
                    authority.epoch_cell().clone(),
                ),
                store.clone(),
                stop.clone(),
            );
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
            let limits = studio_frontdoor::Limits::for_open_files(studio_frontdoor::open_files());
            tracing::info!(addr = %at, "apps listener (mutual TLS) started");
            apps_task = Some(tokio::spawn({
                let stop = stop.clone();
                async move {
                    let serving = studio_frontdoor::serve(
                        studio_frontdoor::Lanes::here(),
                        listener,
                        Some(acceptor),
                        router,
                        limits,
                        stop.triggered(),
                    );
                    if let Err(error) = serving.await {
                        tracing::error!(error = %error, "apps listener failed");
                    }
                }
            }));
        }
        let mut http_task = tokio::spawn({
            let stop = stop.clone();
            async move {
                if let Err(error) = http::serve(http, api.listener, state, stop.triggered()).await {
                    tracing::error!(error = %error, "http server failed");
                }
                stop.trigger();
            }
        });
        let service = VerifierService::new(authority.clone(), stop.clone())
            .with_metrics(scheduler.metrics().clone());
        let mut verifier_task = tokio::spawn({
            let (stop, key) = (stop.clone(), config.app_key.clone());
            async move {
                let done = stop.triggered();
                if let Err(error) = verifier::serve(verifier.listener, service, key, done).await {
                    tracing::error!(error = %chain(&error), "verifier failed");
                }
                stop.trigger();
            }
        });
        let mut control_task = tokio::spawn(control::serve(
            control.listener,
            authority.clone(),
            scheduler,
            stop.clone(),
        ));

        on_ready(&Ready {
            pid: std::process::id(),
            addr: addr.to_string(),
            epoch: Some(authority.epoch()),
            origin: None,
        });

        tokio::select! {
            () = shutdown => tracing::info!("stopping"),
            () = stop.triggered() => tracing::error!("a server stopped unexpectedly; stopping"),
        }
        stop.trigger();
        let drained = tokio::time::timeout(
            GRACE,
            futures_util::future::join4(
                &mut http_task,
                &mut verifier_task,
                &mut control_task,
                &mut scheduler_task,
            ),
        )
        .await;
        if let Some(task) = worker_task {
            // Open assignment streams end with the stop; what is left is aborted.
            let _ = tokio::time::timeout(Duration::from_millis(500), task).await;
        }
        // Watch streams end with the stop; an app's requests in flight get the grace.
        if let Some(task) = apps_task
            && tokio::time::timeout(GRACE, task).await.is_err()
        {
            tracing::warn!("the apps listener did not drain within the grace period");
        }
        if drained.is_err() {
            tracing::warn!("in-flight work did not finish within the grace period");
            http_task.abort();
            verifier_task.abort();
            control_task.abort();
            scheduler_task.abort();
        }
        // Only the files bound here: a successor may already have bound the paths.
        socket::remove(&api.file);
        socket::remove(&verifier.file);
        socket::remove(&control.file);
        // Alone, this studiod's stop ends its epoch; a member's leaves the cluster's.
        let recorded = if store.url().is_none() {
            let recorded = store.stop_epoch(&authority.epoch(), now_ms()).await;
            authority
                .audit()
                .record(AuditKind::EpochStopped, None, json!({}))
                .await;
            recorded
        } else {
            Ok(())
        };
        store.close().await;
        recorded?;
        tracing::info!("studiod stopped");
        // Last: a successor may take the home only once nothing of this one is left.
        drop(lock);
        Ok(())
    }
}

/// Prepares the home and takes its lock.
async fn lock_home(config: &Config) -> Result<HomeLock, DaemonError> {
    let home = &config.home;
    home.prepare().map_err(DaemonError::io(format!(
        "cannot prepare {}",
        home.root().display()
    )))?;
    Ok(HomeLock::acquire(home, config.lock_wait).await?)
}

/// Builds the daemon, announces readiness on stdout and serves until `shutdown`.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DaemonError> {
    let mut shutdown = Box::pin(shutdown);
    // A stop asked while a previous studiod still holds the home ends the wait: nothing
    // is bound or opened yet, so there is nothing to drain.
    let lock = tokio::select! {
        lock = lock_home(&config) => lock?,
        () = &mut shutdown => {
            tracing::info!("stopped while waiting for the home");
            return Ok(());
        }
    };
    let notify_socket = config.notify_socket.clone();
    let daemon = Daemon::build_locked(config, lock).await?;
    daemon
        .run_until(shutdown, |ready| {
            if let Err(error) = ready.announce() {
                tracing::error!(%error, "cannot print the readiness line");
            }
            if let Some(socket) = &notify_socket {
                tell_service_manager(socket);
            }
        })
        .await
}

/// `READY=1` to the service manager that started studiod (`Type=notify`).
fn tell_service_manager(socket: &str) {
    match studio_contract::service::notify(socket, "READY=1") {
        Ok(()) => tracing::info!("told the service manager studiod is ready"),
        Err(error) => tracing::error!(%error, socket, "cannot tell the service manager"),
    }
}

#[cfg(test)]
mod tests;
