//! `studio evidence export [--since T]`: the evidence log as a bundle on standard output
//! (`GET /api/evidence`).
//!
//! `studio evidence verify BUNDLE [--key FILE]`: checks an exported evidence bundle
//! offline (docs/DECISIONS.md) — no studiod, no database, no home. A bundle that
//! verifies prints one line saying how many rows and from which chain hash; one that
//! does not names its first broken row and exits 1; a file that cannot be read or is no
//! bundle, or a key file that is no key, is bad input (exit 2).

use std::{
    io::{BufReader, Write},
    path::Path,
};

use studio_contract::secret::{hex, unhex};
use studio_evidence::{Key, verify_bundle};

use studio_contract::home::Home;

use super::{
    EvidenceCommand, Remote,
    client::{connect, encode},
};
use crate::Error;

pub(crate) async fn run(home: &Home, command: EvidenceCommand) -> Result<u8, Error> {
    match command {
        EvidenceCommand::Verify { bundle, key } => verify(&bundle, key.as_deref()).map(|()| 0),
        EvidenceCommand::Export { since, daemon } => export(home, since, daemon).await.map(|()| 0),
    }
}

/// Streams the bundle studiod writes to standard output, as it arrives.
async fn export(home: &Home, since: Option<String>, daemon: Option<String>) -> Result<(), Error> {
    if let Some(t) = &since
        && t.parse::<jiff::Timestamp>().is_err()
    {
        return Err(Error::Usage(format!(
            "--since {t:?} is not an RFC 3339 instant (like 2026-12-01T00:00:00Z)"
        )));
    }
    let remote = Remote {
        daemon,
        json: false,
    };
    let client = connect(home, &remote).await?;
    let path = match &since {
        Some(t) => format!("/api/evidence?since={}", encode(t)),
        None => "/api/evidence".to_owned(),
    };
    let mut resp = client.get_raw(&path).await?;
    let mut out = std::io::stdout().lock();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Error::Failed(format!("the bundle was cut short: {e}")))?
    {
        out.write_all(&chunk).map_err(Error::Output)?;
    }
    out.flush().map_err(Error::Output)
}

/// The key in `path`: 64 hex digits (surrounding whitespace ignored).
fn read_key(path: &Path) -> Result<Key, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("cannot read the key {}: {e}", path.display())))?;
    match unhex(text.trim()) {
        Some(bytes) if bytes.len() == 32 => Ok(Key::new(&bytes)),
        _ => Err(Error::Usage(format!(
            "{} is not an evidence key (64 hex digits)",
            path.display()
        ))),
    }
}

pub(crate) fn verify(bundle: &Path, key: Option<&Path>) -> Result<(), Error> {
    let key = key.map(read_key).transpose()?;
    let file = std::fs::File::open(bundle)
        .map_err(|e| Error::Usage(format!("cannot read {}: {e}", bundle.display())))?;
    match verify_bundle(BufReader::new(file), key.as_ref()) {
        Ok(v) => {
            let macs = if v.signed {
                "hashes and MACs checked"
            } else {
                "hashes checked; pass --key to check the MACs too"
            };
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{}: {} rows verified, ending at chain hash {} ({macs})",
                bundle.display(),
                v.rows,
                hex(&v.head)
            )
            .map_err(Error::Output)
        }
        Err(b) if b.not_a_bundle => Err(Error::Usage(format!("{}: {b}", bundle.display()))),
        Err(b) => Err(Error::Failed(format!("{}: {b}", bundle.display()))),
    }
}
