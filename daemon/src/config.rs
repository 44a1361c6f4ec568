//! studiod's configuration: the flags (each with an env equivalent) and the plain
//! [`Config`] the daemon runs on. Environment reads happen only here, behind a lookup
//! function, so tests build a `Config` (or inject an environment) without `set_var`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Parser;
use studio_contract::{
    home::{self, Home},
    origin,
    secret::AppKey,
};

use crate::scheduling::{CrashPoint, SchedulerConfig, allowlist};

/// Flags, as documented in `docs/ARCHITECTURE.md` ("Launch protocol").
#[derive(Debug, Clone, Parser)]
#[command(
    name = "studiod",
    version,
    about = "Studio daemon: pairing, principals, verifier"
)]
pub struct Args {
    /// Studio home directory.
    #[arg(long, env = "STUDIO_HOME")]
    pub home: Option<PathBuf>,
    /// Loopback address of the HTTP API.
    #[arg(long, env = "STUDIO_DAEMON_ADDR", default_value = "127.0.0.1:8766")]
    pub addr: SocketAddr,
    /// An origin the app serves browsers from (repeatable).
    #[arg(long = "app-origin", env = "STUDIO_APP_ORIGINS", value_delimiter = ',')]
    pub app_origins: Vec<String>,
    /// A port the Host header may name besides the listening one.
    #[arg(long, env = "STUDIO_DAEMON_PUBLIC_PORT")]
    pub public_port: Option<u16>,
    /// Lifetime of a pairing code, in seconds.
    #[arg(long, env = "STUDIO_PAIRING_TTL_SECS", default_value_t = 120)]
    pub pairing_ttl_secs: u64,
    /// Read the launch's app key (one hex line) from stdin.
    #[arg(
        long,
        env = "STUDIO_APP_KEY_STDIN",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub app_key_stdin: bool,
    /// The supervisor's pid: die with it.
    #[arg(long, env = "STUDIO_SUPERVISOR_PID")]
    pub supervisor_pid: Option<u32>,
    /// Where remote workers connect, over mutual TLS (`off`: no worker listener).
    #[arg(long, env = "STUDIO_WORKER_ADDR", default_value = "127.0.0.1:8767")]
    pub worker_addr: String,
    /// Where studio-apps on other hosts connect, over mutual TLS (the verifier, the API
    /// and `studio app join`); unset: apps reach this studiod only on its own host.
    #[arg(long, env = "STUDIO_APPS_ADDR")]
    pub apps_addr: Option<String>,
    /// Keep the state in this PostgreSQL database (`postgres://…`) instead of the home's
    /// `state.db`. The URL may hold a password: it is never shown.
    #[arg(
        long,
        env = "STUDIO_DATABASE_URL",
        hide_env_values = true,
        value_parser = DatabaseUrlParser
    )]
    pub database_url: Option<studio_store::DatabaseUrl>,
}

/// Reads `--database-url`; a refusal names the flag and why, never the value (which may
/// hold a password: clap's own message would quote it).
#[derive(Clone)]
struct DatabaseUrlParser;

impl clap::builder::TypedValueParser for DatabaseUrlParser {
    type Value = studio_store::DatabaseUrl;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        value
            .to_str()
            .ok_or_else(|| "is not UTF-8".to_owned())
            .and_then(studio_store::DatabaseUrl::parse)
            .map_err(|why| {
                clap::Error::raw(
                    clap::error::ErrorKind::InvalidValue,
                    format!("--database-url (STUDIO_DATABASE_URL) {why}\n"),
                )
            })
    }
}

/// What the daemon runs on; tests build one directly.
#[derive(Debug, Clone)]
pub struct Config {
    pub home: Home,
    /// Where the HTTP API listens (port 0 picks a free one).
    pub addr: SocketAddr,
    /// The daemon token from `STUDIO_TOKEN`; `None`: `run/token`, else a minted one.
    pub token: Option<String>,
    /// Normalised origins allowed on `/api` and for pairing, besides the loopback ones.
    pub extra_origins: Vec<String>,
    pub public_port: Option<u16>,
    pub pairing_ttl: Duration,
    pub app_key: AppKey,
    pub supervisor_pid: Option<u32>,
    pub scheduler: SchedulerConfig,
    /// How long to wait for a previous studiod to release the home (`run/daemon.lock`).
    pub lock_wait: Duration,
    /// Where the worker listener binds (mutual TLS; port 0 picks a free one); `None`:
    /// no remote worker can connect.
    pub worker_addr: Option<SocketAddr>,
    /// Where the apps listener binds (mutual TLS; port 0 picks a free one); `None`: no
    /// studio-app on another host can reach this studiod.
    pub apps_addr: Option<SocketAddr>,
    /// `NOTIFY_SOCKET`: a service manager (systemd's `Type=notify`) told `READY=1` once
    /// studiod serves.
    pub notify_socket: Option<String>,
    /// Where the state is kept when not in the home's `state.db`.
    pub database: Option<studio_store::DatabaseUrl>,
}

impl Config {
    /// A daemon-only configuration for `home` on a free loopback port.
    pub fn for_home(home: impl Into<PathBuf>) -> Self {
        Self {
            home: Home::new(home),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            extra_origins: Vec::new(),
            public_port: None,
            pairing_ttl: Duration::from_secs(120),
            app_key: AppKey::generate(),
            supervisor_pid: None,
            scheduler: SchedulerConfig::default(),
            lock_wait: home::DAEMON_LOCK_WAIT,
            worker_addr: None,
            apps_addr: None,
            notify_socket: None,
            database: None,
        }
    }
}

/// Bad configuration: the binary prints it as one line and exits 64.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot read the app key from stdin")]
    AppKey(#[source] std::io::Error),
}

impl Args {
    /// Resolves the flags into a [`Config`]; `env` looks up variables that have no flag.
    pub fn into_config(
        self,
        env: impl Fn(&str) -> Option<String>,
        read_app_key: impl FnOnce() -> std::io::Result<AppKey>,
    ) -> Result<Config, ConfigError> {
        if !self.addr.ip().is_loopback() {
            return Err(ConfigError::Invalid(format!(
                "--addr {} is not a loopback address",
                self.addr
            )));
        }
        if self.pairing_ttl_secs == 0 || self.pairing_ttl_secs > 3600 {
            return Err(ConfigError::Invalid(
                "--pairing-ttl-secs must be between 1 and 3600".into(),
            ));
        }
        let mut extra_origins = Vec::new();
        for o in self
            .app_origins
            .iter()
            .map(|o| o.trim())
            .filter(|o| !o.is_empty())
        {
            let n = origin::normalize(o).ok_or_else(|| {
                ConfigError::Invalid(format!("--app-origin {o:?} is not an http(s) origin"))
            })?;
            extra_origins.push(n);
        }
        if let Some(list) = env("STUDIO_ALLOWED_ORIGINS") {
            extra_origins.extend(
                origin::parse_list(&list)
                    .map_err(|e| ConfigError::Invalid(format!("STUDIO_ALLOWED_ORIGINS: {e}")))?,
            );
        }
        let worker_addr = match self.worker_addr.trim() {
            "off" => None,
            addr => Some(addr.parse::<SocketAddr>().map_err(|_| {
                ConfigError::Invalid(format!(
                    "--worker-addr {addr:?} is not an address (HOST:PORT, or off)"
                ))
            })?),
        };
        let apps_addr = match self.apps_addr.as_deref().map(str::trim) {
            None | Some("" | "off") => None,
            Some(addr) => Some(addr.parse::<SocketAddr>().map_err(|_| {
                ConfigError::Invalid(format!(
                    "--apps-addr {addr:?} is not an address (HOST:PORT, or off)"
                ))
            })?),
        };
        let app_key = if self.app_key_stdin {
            read_app_key().map_err(ConfigError::AppKey)?
        } else {
            // Daemon-only mode: no app holds this key, so nobody can use the verifier.
            AppKey::generate()
        };
        Ok(Config {
            home: Home::resolve(self.home),
            addr: self.addr,
            token: env("STUDIO_TOKEN")
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
            extra_origins,
            public_port: self.public_port,
            pairing_ttl: Duration::from_secs(self.pairing_ttl_secs),
            app_key,
            supervisor_pid: self.supervisor_pid,
            scheduler: scheduler_config(&env)?,
            lock_wait: lock_wait(&env)?,
            worker_addr,
            apps_addr,
            notify_socket: env("NOTIFY_SOCKET").filter(|s| !s.is_empty()),
            database: self.database_url,
        })
    }
}

/// `STUDIO_DAEMON_LOCK_WAIT_MS`, else the default wait for a previous studiod.
fn lock_wait(env: &impl Fn(&str) -> Option<String>) -> Result<Duration, ConfigError> {
    let Some(value) = env(home::DAEMON_LOCK_WAIT_ENV) else {
        return Ok(home::DAEMON_LOCK_WAIT);
    };
    home::parse_lock_wait(&value).ok_or_else(|| {
        ConfigError::Invalid(format!(
            "{}: must be 0 to 600000 milliseconds",
            home::DAEMON_LOCK_WAIT_ENV
        ))
    })
}

/// The scheduler's settings from the environment.
fn scheduler_config(env: &impl Fn(&str) -> Option<String>) -> Result<SchedulerConfig, ConfigError> {
    let mut c = SchedulerConfig {
        host_env: studio_runner::env::inheritable(std::env::vars()),
        ..SchedulerConfig::default()
    };
    let bad = |name: &str, why: &str| ConfigError::Invalid(format!("{name}: {why}"));
    if let Some(list) = env("STUDIO_COMMAND_ALLOWLIST") {
        c.allowlist_seed = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if let Some((entry, why)) = c
            .allowlist_seed
            .iter()
            .find_map(|e| allowlist::entry_problem(e).map(|why| (e, why)))
        {
            return Err(bad("STUDIO_COMMAND_ALLOWLIST", &format!("{entry:?} {why}")));
        }
    }
    if let Some(path) = env("PATH").filter(|p| !p.is_empty()) {
        c.search_path = path;
    }
    if let Some(cmd) = env("STUDIO_AGENT_COMMAND") {
        c.agent_command = cmd.split_whitespace().map(str::to_owned).collect();
        if c.agent_command.is_empty() {
            return Err(bad("STUDIO_AGENT_COMMAND", "must name a program"));
        }
    }
    if let Some(n) = env("STUDIO_MAX_CONCURRENT_RUNS") {
        c.max_concurrent = n
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=4096).contains(n))
            .ok_or_else(|| {
                bad(
                    "STUDIO_MAX_CONCURRENT_RUNS",
                    "must be a number from 1 to 4096",
                )
            })?;
    }
    if let Some(n) = env("STUDIO_RUN_LOG_CAP") {
        c.log_cap = n
            .trim()
            .parse()
            .map_err(|_| bad("STUDIO_RUN_LOG_CAP", "must be a number of bytes"))?;
    }
    if let Some(n) = env("STUDIO_MISSED_FIRE_GRACE_SECS") {
        let secs: i64 = n
            .trim()
            .parse()
            .ok()
            .filter(|s| (1..=86_400).contains(s))
            .ok_or_else(|| {
                bad(
                    "STUDIO_MISSED_FIRE_GRACE_SECS",
                    "must be 1 to 86400 seconds",
                )
            })?;
        c.missed_fire_grace_ms = secs * 1_000;
    }
    if let Some(labels) = env("STUDIO_LOCAL_LABELS") {
        c.local_labels = labels
            .split(',')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        let label = |l: &String| {
            l.len() <= 64
                && l.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        };
        if !c.local_labels.iter().all(label) {
            return Err(bad(
                "STUDIO_LOCAL_LABELS",
                "must be comma-separated labels of letters, digits, '.', '_' or '-'",
            ));
        }
    }
    if let Some(n) = env("STUDIO_LEASE_TTL_SECS") {
        let secs: u64 = n
            .trim()
            .parse()
            .ok()
            .filter(|s| (1..=3_600).contains(s))
            .ok_or_else(|| bad("STUDIO_LEASE_TTL_SECS", "must be 1 to 3600 seconds"))?;
        c.lease_ttl = Duration::from_secs(secs);
    }
    if let Some(n) = env("STUDIO_FAILOVER_SECS") {
        let secs: u64 = n
            .trim()
            .parse()
            .ok()
            .filter(|s| (3..=600).contains(s))
            .ok_or_else(|| bad("STUDIO_FAILOVER_SECS", "must be 3 to 600 seconds"))?;
        c.failover = Duration::from_secs(secs);
    }
    if let Some(list) = env("STUDIO_NOTIFY_BACKOFF_MS").filter(|s| !s.trim().is_empty()) {
        let waits: Option<Vec<Duration>> = list
            .split(',')
            .map(|w| {
                w.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| (1..=86_400_000).contains(ms))
                    .map(Duration::from_millis)
            })
            .collect();
        c.notify_backoff = crate::scheduling::notify::Backoff(
            waits.filter(|w| w.len() <= 20).ok_or_else(|| {
                bad(
                    "STUDIO_NOTIFY_BACKOFF_MS",
                    "must be up to 20 comma-separated waits of 1 to 86400000 ms",
                )
            })?,
        );
    }
    if let Some(text) = env("STUDIO_RETENTION").filter(|s| !s.trim().is_empty()) {
        let policy: studio_api::types::RetentionPolicy =
            serde_json::from_str(&text).map_err(|e| {
                bad(
                    "STUDIO_RETENTION",
                    &format!("is not a retention policy: {e}"),
                )
            })?;
        if let Some(e) = crate::scheduling::retention::check_policy(&policy).first() {
            return Err(bad(
                "STUDIO_RETENTION",
                &format!("{}: {}", e.path, e.reason),
            ));
        }
        c.retention = Some(policy);
    }
    c.default_timezone = env("STUDIO_SCHEDULER_TZ").filter(|s| !s.trim().is_empty());
    if let Some(point) = env("STUDIO_TEST_CRASH_AT").filter(|s| !s.is_empty()) {
        c.crash_at = Some(CrashPoint::parse(&point).ok_or_else(|| {
            bad(
                "STUDIO_TEST_CRASH_AT",
                "must be after_claim, after_grant, after_spawn, after_dispatch, before_finish or before_delivery",
            )
        })?);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["studiod", "--home", "/tmp/h"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).expect("parse")
    }

    fn no_key() -> std::io::Result<AppKey> {
        Err(std::io::Error::other("not asked"))
    }

    #[test]
    fn defaults_and_injected_environment() {
        let env = |k: &str| match k {
            "STUDIO_TOKEN" => Some("tok".to_owned()),
            "STUDIO_ALLOWED_ORIGINS" => Some("https://b.example, http://c.example:81".to_owned()),
            _ => None,
        };
        let c = args(&["--app-origin", "HTTP://127.0.0.1:8765"])
            .into_config(env, no_key)
            .expect("config");
        assert_eq!(c.addr.to_string(), "127.0.0.1:8766");
        assert_eq!(c.pairing_ttl, Duration::from_secs(120));
        assert_eq!(c.token.as_deref(), Some("tok"));
        assert_eq!(
            c.extra_origins,
            vec![
                "http://127.0.0.1:8765",
                "https://b.example",
                "http://c.example:81"
            ]
        );
        assert_eq!(c.home.root(), std::path::Path::new("/tmp/h"));
        assert_eq!(c.lock_wait, Duration::from_secs(15));
        let env = |k: &str| (k == "STUDIO_DAEMON_LOCK_WAIT_MS").then(|| "250".to_owned());
        let c = args(&[]).into_config(env, no_key).expect("config");
        assert_eq!(c.lock_wait, Duration::from_millis(250));
        let env = |k: &str| (k == "STUDIO_DAEMON_LOCK_WAIT_MS").then(|| "soon".to_owned());
        assert!(args(&[]).into_config(env, no_key).is_err());
    }

    #[test]
    fn a_bad_database_url_is_refused_without_quoting_it() {
        let err = Args::try_parse_from([
            "studiod",
            "--database-url",
            "mysql://studio:s3cret@db/studio",
        ])
        .expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains("--database-url") && text.contains("postgres://"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
        let ok = Args::try_parse_from([
            "studiod",
            "--database-url",
            "postgres://studio:s3cret@db/studio",
        ])
        .expect("a URL");
        assert!(!format!("{ok:?}").contains("s3cret"));
    }

    #[test]
    fn refuses_bad_values() {
        assert!(
            args(&["--app-origin", "*"])
                .into_config(|_| None, no_key)
                .is_err()
        );
        assert!(
            args(&["--addr", "0.0.0.0:1"])
                .into_config(|_| None, no_key)
                .is_err()
        );
        assert!(
            args(&["--pairing-ttl-secs", "0"])
                .into_config(|_| None, no_key)
                .is_err()
        );
        let env = |_: &str| Some("not an origin".to_owned());
        assert!(args(&[]).into_config(env, no_key).is_err());
        assert!(matches!(
            args(&["--app-key-stdin"]).into_config(|_| None, no_key),
            Err(ConfigError::AppKey(_))
        ));
        let key = AppKey::generate();
        let hex = key.to_hex();
        let c = args(&["--app-key-stdin"])
            .into_config(|_| None, || Ok(key))
            .expect("config");
        assert!(c.app_key.matches_hex(&hex));
    }

    #[test]
    fn the_allow_list_seed_and_the_search_path() {
        let env = |k: &str| match k {
            "STUDIO_COMMAND_ALLOWLIST" => Some(" echo, /opt/tools/run ,,".to_owned()),
            "PATH" => Some("/usr/bin:/bin".to_owned()),
            _ => None,
        };
        let c = args(&[]).into_config(env, no_key).expect("config");
        assert_eq!(c.scheduler.allowlist_seed, ["echo", "/opt/tools/run"]);
        assert_eq!(c.scheduler.search_path, "/usr/bin:/bin");
        // A seed entry that could never be added by `studio allow add` is bad configuration.
        for bad in ["bin/echo", "./echo", "/usr/../bin/sh"] {
            let env = |k: &str| (k == "STUDIO_COMMAND_ALLOWLIST").then(|| bad.to_owned());
            let err = args(&[]).into_config(env, no_key).expect_err(bad);
            assert!(
                err.to_string().contains("STUDIO_COMMAND_ALLOWLIST"),
                "{err}"
            );
        }
    }
}
