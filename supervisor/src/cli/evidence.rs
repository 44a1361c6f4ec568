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

use super::EvidenceCommand;
use crate::Error;

pub(crate) fn run(command: EvidenceCommand) -> Result<u8, Error> {
    match command {
        EvidenceCommand::Verify { bundle, key } => verify(&bundle, key.as_deref()).map(|()| 0),
    }
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

fn verify(bundle: &Path, key: Option<&Path>) -> Result<(), Error> {
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
