//! studio-app's configuration: the command line (with env equivalents) and the validated,
//! plain [`Config`] the library runs on. Tests build a [`Config`] directly.
//!
//! Invariant: a [`Config`] that exists is coherent — a non-loopback bind has TLS or an
//! explicit `--insecure-http` and a public origin, and an app key is present.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{ArgAction, Parser, builder::BoolishValueParser};
use studio_contract::{home::Home, origin, secret::AppKey};

pub use crate::remote::{Daemons, Enrolment};

/// The verifier may never be waited on longer than this (fail closed, fast).
pub const MAX_VERIFIER_TIMEOUT_MS: u64 = 2000;

/// The command line of `studio-app`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "studio-app",
    version,
    about = "Studio's browser-facing front door and UI"
)]
pub struct Cli {
    /// Studio home directory.
    #[arg(long, env = "STUDIO_HOME")]
    pub home: Option<PathBuf>,
    /// Address the browser listener binds.
    #[arg(long, env = "STUDIO_APP_ADDR", default_value = "127.0.0.1:8765")]
    pub addr: SocketAddr,
    /// studiod's HTTP API address (loopback).
    #[arg(long, env = "STUDIO_DAEMON_ADDR", default_value = "127.0.0.1:8766")]
    pub daemon_addr: SocketAddr,
    /// Reach studiod's API over this Unix socket (its `run/api.sock`) instead of TCP;
    /// `studio up` passes it.
    #[arg(long, env = "STUDIO_DAEMON_SOCKET")]
    pub daemon_socket: Option<PathBuf>,
    /// The origin browsers use to reach this app (required for a non-loopback bind).
    #[arg(long, env = "STUDIO_PUBLIC_ORIGIN")]
    pub public_origin: Option<String>,
    /// Extra allowed origins, comma-separated.
    #[arg(long, env = "STUDIO_ALLOWED_ORIGINS")]
    pub allowed_origins: Option<String>,
    /// PEM certificate chain; serves HTTPS together with `--tls-key`.
    #[arg(long, env = "STUDIO_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key.
    #[arg(long, env = "STUDIO_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Allow plain HTTP on a non-loopback address (behind a TLS-terminating proxy).
    #[arg(long, env = "STUDIO_INSECURE_HTTP", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub insecure_http: bool,
    /// Bound on every verifier call, in milliseconds (at most 2000).
    #[arg(long, env = "STUDIO_VERIFIER_TIMEOUT_MS", default_value_t = 2000)]
    pub verifier_timeout_ms: u64,
    /// How long the daemon may take to send response headers, in milliseconds.
    #[arg(long, env = "STUDIO_UPSTREAM_TIMEOUT_MS", default_value_t = 5000)]
    pub upstream_timeout_ms: u64,
    /// studiod's apps listeners on other hosts, comma-separated `HOST:PORT`s: reach
    /// studiod there over mutual TLS with this home's enrolment (`studio app join`),
    /// trying the others when one does not answer, instead of this host's sockets.
    #[arg(long, env = "STUDIO_REMOTE_DAEMONS", value_name = "HOST:PORT,…")]
    pub studiod: Option<String>,
    /// Read the launch's app key (one hex line) from stdin.
    #[arg(long, env = "STUDIO_APP_KEY_STDIN", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub app_key_stdin: bool,
    /// The supervisor's pid: exit when it dies.
    #[arg(long, env = "STUDIO_SUPERVISOR_PID")]
    pub supervisor_pid: Option<u32>,
    /// The service manager's socket (systemd's `Type=notify`): told `READY=1` once the
    /// app serves.
    #[arg(long, env = "NOTIFY_SOCKET", hide = true)]
    pub notify_socket: Option<String>,
}

/// `HOST:PORT,…` as a list (each with a host and a port); `None` when any is not.
fn daemon_addrs(list: &str) -> Option<Vec<String>> {
    list.split(',')
        .map(str::trim)
        .map(|addr| {
            let (host, port) = addr.rsplit_once(':')?;
            (!host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0)).then(|| addr.to_owned())
        })
        .collect()
}

/// Certificate and key files for HTTPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The validated configuration `run` takes.
#[derive(Debug, Clone)]
pub struct Config {
    pub home: Home,
    pub addr: SocketAddr,
    pub daemon_addr: SocketAddr,
    /// When set, the API is reached over this Unix socket (`daemon_addr` still names it in
    /// `Host`).
    pub daemon_socket: Option<PathBuf>,
    /// Normalised (`scheme://host[:port]`).
    pub public_origin: Option<String>,
    /// Normalised extra origins.
    pub allowed_origins: Vec<String>,
    pub tls: Option<TlsFiles>,
    pub verifier_timeout: Duration,
    pub upstream_timeout: Duration,
    pub app_key: AppKey,
    /// studiod on other hosts (`--studiod`): when set, the verifier and the proxy go
    /// there, and `daemon_addr`, `daemon_socket` and the app key are not used.
    pub daemons: Option<Daemons>,
    /// `NOTIFY_SOCKET`, told `READY=1` once the app serves.
    pub notify_socket: Option<String>,
}

/// Why a configuration was refused; the binary exits 64 with this as its one stderr line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("studio-app needs the app key: start it with --app-key-stdin (the supervisor does)")]
    NoAppKey,
    #[error("could not read the app key from stdin: {0}")]
    AppKey(String),
    #[error("--tls-cert and --tls-key go together")]
    TlsHalf,
    #[error("binding the non-loopback address {0} needs --tls-cert/--tls-key or --insecure-http")]
    PlainNonLoopback(SocketAddr),
    #[error("binding the non-loopback address {0} needs --public-origin")]
    NoPublicOrigin(SocketAddr),
    #[error("--public-origin {0:?} is not an http(s) origin")]
    BadPublicOrigin(String),
    #[error("STUDIO_ALLOWED_ORIGINS: {0}")]
    BadAllowedOrigins(String),
    #[error("--verifier-timeout-ms must be between 1 and {MAX_VERIFIER_TIMEOUT_MS}, got {0}")]
    VerifierTimeout(u64),
    #[error("--upstream-timeout-ms must be at least 1")]
    UpstreamTimeout,
    #[error("tls: {0}")]
    Tls(String),
    #[error("--studiod {0:?} is not a list of HOST:PORT addresses")]
    BadDaemons(String),
    #[error("--studiod needs this home's enrolment in run/app/ (run `studio app join` first): {0}")]
    NotEnrolled(String),
}

impl Config {
    /// Validates the command line; `read_key` is called only with `--app-key-stdin`.
    pub fn from_cli(
        cli: Cli,
        read_key: impl FnOnce() -> std::io::Result<AppKey>,
    ) -> Result<Self, ConfigError> {
        let home = Home::resolve(cli.home);
        let daemons = match cli.studiod.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(list) => Some(Daemons {
                addrs: daemon_addrs(list).ok_or_else(|| ConfigError::BadDaemons(list.into()))?,
                enrolment: Enrolment::load(&home)
                    .map_err(|e| ConfigError::NotEnrolled(e.to_string()))?,
            }),
        };
        // On one host the app key proves the app to studiod; across hosts its certificate.
        if !cli.app_key_stdin && daemons.is_none() {
            return Err(ConfigError::NoAppKey);
        }
        let tls = match (cli.tls_cert, cli.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => return Err(ConfigError::TlsHalf),
        };
        let public_origin = cli
            .public_origin
            .filter(|o| !o.trim().is_empty())
            .map(|o| origin::normalize(o.trim()).ok_or(ConfigError::BadPublicOrigin(o)))
            .transpose()?;
        let allowed_origins = match cli.allowed_origins {
            Some(list) => origin::parse_list(&list).map_err(ConfigError::BadAllowedOrigins)?,
            None => Vec::new(),
        };
        if !(1..=MAX_VERIFIER_TIMEOUT_MS).contains(&cli.verifier_timeout_ms) {
            return Err(ConfigError::VerifierTimeout(cli.verifier_timeout_ms));
        }
        if cli.upstream_timeout_ms == 0 {
            return Err(ConfigError::UpstreamTimeout);
        }
        let partial = Self {
            home,
            addr: cli.addr,
            daemon_addr: cli.daemon_addr,
            daemon_socket: cli.daemon_socket,
            public_origin,
            allowed_origins,
            tls,
            verifier_timeout: Duration::from_millis(cli.verifier_timeout_ms),
            upstream_timeout: Duration::from_millis(cli.upstream_timeout_ms),
            // Replaced below, once everything else is known to be valid: a bad flag must
            // not consume the key the supervisor wrote.
            app_key: AppKey::generate(),
            daemons,
            notify_socket: cli.notify_socket.filter(|s| !s.is_empty()),
        };
        partial.check_exposure(cli.insecure_http)?;
        if !cli.app_key_stdin {
            return Ok(partial);
        }
        let app_key = read_key().map_err(|e| ConfigError::AppKey(e.to_string()))?;
        Ok(Self { app_key, ..partial })
    }

    /// A non-loopback listener is reachable by others: it must be encrypted (or the operator
    /// says a proxy does that) and browsers must have one origin to be checked against.
    pub fn check_exposure(&self, insecure_http: bool) -> Result<(), ConfigError> {
        if self.addr.ip().is_loopback() {
            return Ok(());
        }
        if self.tls.is_none() && !insecure_http {
            return Err(ConfigError::PlainNonLoopback(self.addr));
        }
        if self.public_origin.is_none() {
            return Err(ConfigError::NoPublicOrigin(self.addr));
        }
        Ok(())
    }

    /// A loopback configuration for tests and embedding.
    pub fn loopback(home: Home, app_key: AppKey) -> Self {
        Self {
            home,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            daemon_addr: SocketAddr::from(([127, 0, 0, 1], 8766)),
            daemon_socket: None,
            public_origin: None,
            allowed_origins: Vec::new(),
            tls: None,
            verifier_timeout: Duration::from_millis(MAX_VERIFIER_TIMEOUT_MS),
            upstream_timeout: Duration::from_millis(5000),
            app_key,
            daemons: None,
            notify_socket: None,
        }
    }

    /// `https` when this app terminates TLS itself.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        let mut argv = vec!["studio-app"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).expect("parses")
    }

    fn key() -> std::io::Result<AppKey> {
        Ok(AppKey::generate())
    }

    #[test]
    fn defaults_are_loopback() {
        let c =
            Config::from_cli(cli(&["--app-key-stdin", "--home", "/tmp/h"]), key).expect("valid");
        assert_eq!(c.addr.to_string(), "127.0.0.1:8765");
        assert_eq!(c.daemon_addr.to_string(), "127.0.0.1:8766");
        assert_eq!(c.verifier_timeout, Duration::from_millis(2000));
        assert_eq!(c.upstream_timeout, Duration::from_millis(5000));
        assert_eq!(c.scheme(), "http");
    }

    #[test]
    fn studiod_on_other_hosts_needs_an_enrolment_and_no_app_key() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!(
            "studio-app-config-{}-{}",
            std::process::id(),
            studio_contract::time::now_ms()
        ));
        let home = Home::new(&root);
        let h = root.to_str().expect("a path");
        let no_key = || -> std::io::Result<AppKey> { panic!("no app key is read") };
        let err = |args: &[&str]| Config::from_cli(cli(args), no_key).expect_err("refused");
        for list in ["host", "host:0", ":8767", "a:1,,b:2", "a:1,b:x"] {
            assert!(
                matches!(
                    err(&["--home", h, "--studiod", list]),
                    ConfigError::BadDaemons(_)
                ),
                "{list}"
            );
        }
        assert!(matches!(
            err(&["--home", h, "--studiod", "a:1"]),
            ConfigError::NotEnrolled(_)
        ));
        home.prepare().expect("home");
        std::fs::create_dir_all(home.app_tls_dir()).expect("run/app");
        for path in [
            home.app_ca_file(),
            home.app_cert_file(),
            home.app_key_file(),
        ] {
            Home::write_secret(&path, "PEM").expect("write");
        }
        let c = Config::from_cli(cli(&["--home", h, "--studiod", "a:1, [::1]:2"]), no_key)
            .expect("valid without an app key");
        let daemons = c.daemons.expect("daemons");
        assert_eq!(daemons.addrs, ["a:1", "[::1]:2"]);
        assert!(!format!("{:?}", daemons.enrolment).contains("PEM"));
        // A key others may read is no enrolment.
        std::fs::set_permissions(home.app_key_file(), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        assert!(matches!(
            err(&["--home", h, "--studiod", "a:1"]),
            ConfigError::NotEnrolled(_)
        ));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn refuses_what_cannot_be_served_safely() {
        let err = |args: &[&str]| Config::from_cli(cli(args), key).expect_err("refused");
        assert_eq!(err(&[]), ConfigError::NoAppKey);
        assert!(matches!(
            err(&["--app-key-stdin", "--addr", "0.0.0.0:8765"]),
            ConfigError::PlainNonLoopback(_)
        ));
        assert!(matches!(
            err(&[
                "--app-key-stdin",
                "--addr",
                "0.0.0.0:8765",
                "--insecure-http"
            ]),
            ConfigError::NoPublicOrigin(_)
        ));
        assert!(matches!(
            err(&["--app-key-stdin", "--verifier-timeout-ms", "2001"]),
            ConfigError::VerifierTimeout(2001)
        ));
        assert!(matches!(
            err(&[
                "--app-key-stdin",
                "--public-origin",
                "https://x.example/path"
            ]),
            ConfigError::BadPublicOrigin(_)
        ));
        assert!(matches!(
            err(&["--app-key-stdin", "--allowed-origins", "*"]),
            ConfigError::BadAllowedOrigins(_)
        ));
        assert_eq!(
            err(&["--app-key-stdin", "--tls-cert", "c.pem"]),
            ConfigError::TlsHalf
        );
    }

    #[test]
    fn exposed_bind_with_origin_passes_and_key_is_read_last() {
        let c = Config::from_cli(
            cli(&[
                "--app-key-stdin",
                "--addr",
                "0.0.0.0:8443",
                "--insecure-http",
                "--public-origin",
                "HTTPS://Studio.Example.com:443",
            ]),
            key,
        )
        .expect("valid");
        assert_eq!(
            c.public_origin.as_deref(),
            Some("https://studio.example.com")
        );
        let refused = Config::from_cli(cli(&["--app-key-stdin", "--addr", "0.0.0.0:1"]), || {
            panic!("the key must not be read for a refused configuration")
        });
        assert!(refused.is_err());
    }
}
