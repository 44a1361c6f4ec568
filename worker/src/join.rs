//! `studio worker join`: a key pair made here (the key never leaves this home), a CSR
//! sent with the one-time token over a connection that pins the authority the token
//! names, and the certificate studiod issues, kept 0600 in the worker's home.

use std::{
    fs,
    path::{Path, PathBuf},
};

use studio_proto::worker::v1::{JoinRequest, worker_client::WorkerClient};

use crate::{
    WorkerError, connect,
    home::{Identity, WorkerHome},
};

/// What to join with.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// studiod's worker listener, `HOST:PORT`.
    pub server: String,
    pub token: String,
    pub home: PathBuf,
    /// A name for listings (default: this machine's host name).
    pub name: Option<String>,
}

/// A finished join.
#[derive(Debug, Clone)]
pub struct Joined {
    pub worker_id: String,
    pub labels: Vec<String>,
    pub home: PathBuf,
}

/// This worker home's enrolment with `server`, when it has one whose certificate is valid
/// for longer than [`studio_pki::RENEW_WITHIN_MS`] (`studio worker join --unless-enrolled`
/// keeps it and spends no token); `None` when it has none, one with another server, or
/// one due for renewal. The identity is written last, so a home that has one has the rest.
pub fn kept(home: &Path, server: &str) -> Result<Option<Joined>, WorkerError> {
    let home = WorkerHome::new(home);
    if !home.joined() {
        return Ok(None);
    }
    let identity = home.identity()?;
    if identity.server != server
        || !studio_pki::valid_beyond_renewal(&home.read(&home.cert_file())?)?
    {
        return Ok(None);
    }
    Ok(Some(Joined {
        worker_id: identity.worker_id,
        labels: identity.labels,
        home: home.root().to_path_buf(),
    }))
}

/// Enrols this worker with studiod.
pub async fn join(opts: &JoinOptions) -> Result<Joined, WorkerError> {
    let token = studio_pki::JoinToken::parse(opts.token.trim())
        .map_err(|e| WorkerError::Usage(format!("--token: {e}")))?;
    if !opts.server.contains(':') {
        return Err(WorkerError::Usage(format!(
            "--server {:?} is not HOST:PORT",
            opts.server
        )));
    }
    let home = WorkerHome::new(&opts.home);
    home.prepare()?;
    let _lock = home.lock()?;
    let name = opts
        .name
        .clone()
        .or_else(|| {
            fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "worker".to_owned());
    let (key_pem, csr_pem) = studio_pki::key_and_csr(&name)?;
    let tls = studio_pki::joining_client_config(&token.ca_fingerprint)?;
    let channel = connect::channel(&opts.server, tls, connect::CONNECT).await?;
    let reply = WorkerClient::new(channel)
        .join(JoinRequest {
            token: token.to_string(),
            csr_pem,
            name: name.clone(),
        })
        .await
        .map_err(|s| WorkerError::Remote(format!("studiod refused the join: {}", s.message())))?
        .into_inner();
    // The certificate must be for the key made here, under the pinned authority.
    let ca_der = studio_pki::first_cert_der(&reply.ca_pem)?;
    if studio_pki::fingerprint_der(&ca_der) != token.ca_fingerprint.to_ascii_lowercase() {
        return Err(WorkerError::Tls(
            "studiod answered with another authority than the token pins".into(),
        ));
    }
    let identity = Identity {
        server: opts.server.clone(),
        worker_id: reply.worker_id.clone(),
        name,
        labels: reply.labels.clone(),
    };
    home.store_join(&identity, &key_pem, &reply.cert_pem, &reply.ca_pem)?;
    Ok(Joined {
        worker_id: reply.worker_id,
        labels: reply.labels,
        home: home.root().to_path_buf(),
    })
}
