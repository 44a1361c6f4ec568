//! HTTPS for the browser listener: loads a PEM certificate chain and key into a rustls
//! acceptor. The ring provider is installed by `main` before anything else.

use std::{fs::File, io::BufReader, path::Path, sync::Arc};

use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        ServerConfig,
        pki_types::{CertificateDer, PrivateKeyDer},
    },
};

use crate::config::{ConfigError, TlsFiles};

/// Builds the acceptor; any unreadable or unusable file is a configuration error.
pub(crate) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, ConfigError> {
    let certs = load_certs(&files.cert)?;
    let key = load_key(&files.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ConfigError::Tls(format!("certificate and key do not fit: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn open(path: &Path) -> Result<BufReader<File>, ConfigError> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|e| ConfigError::Tls(format!("{}: {e}", path.display())))
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = rustls_pemfile::certs(&mut open(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::Tls(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ConfigError::Tls(format!(
            "{}: no PEM certificate found",
            path.display()
        )));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, ConfigError> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|e| ConfigError::Tls(format!("{}: {e}", path.display())))?
        .ok_or_else(|| ConfigError::Tls(format!("{}: no PEM private key found", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_configuration_errors() {
        let files = TlsFiles {
            cert: "/nonexistent/cert.pem".into(),
            key: "/nonexistent/key.pem".into(),
        };
        assert!(matches!(acceptor(&files), Err(ConfigError::Tls(_))));
    }
}
