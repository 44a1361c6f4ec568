//! studiod's local control socket (`run/daemon.sock`): one JSON request line, one JSON
//! reply line. The daemon checks the peer's uid; the launcher (`studio pair`, the
//! supervisor) obtains fresh pairing codes here, and codes are never logged; the
//! supervisor asks the daemon to leave its jobs running before a restart (`detach`).

use std::{
    io::{self, BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::{error::ErrorBody, role::Role};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum DaemonRequest {
    /// Mint a fresh pairing code; the browser that redeems it gets `role` (absent:
    /// admin, what every browser was before roles).
    Pair {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<Role>,
    },
    /// Leave running jobs to their shims at the coming stop (`studio restart daemon`):
    /// the next studiod adopts them. Without it a stop cancels them.
    Detach,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PairingCode {
    pub code: String,
    pub epoch: String,
    pub expires_at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DaemonReply {
    Pair(PairingCode),
    /// The stop that follows leaves this many running jobs to their shims.
    Detached {
        running: usize,
    },
    Error(ErrorBody),
}

/// One request over a blocking connection, bounded by `timeout`.
pub fn request(socket: &Path, req: &DaemonRequest, timeout: Duration) -> io::Result<DaemonReply> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_forms_are_stable() {
        assert_eq!(
            serde_json::to_string(&DaemonRequest::Pair { role: None }).expect("ser"),
            r#"{"op":"pair"}"#
        );
        let reply = DaemonReply::Pair(PairingCode {
            code: "c".into(),
            epoch: "e".into(),
            expires_at_ms: 1,
        });
        let text = serde_json::to_string(&reply).expect("ser");
        assert_eq!(
            text,
            r#"{"pair":{"code":"c","epoch":"e","expires_at_ms":1}}"#
        );
        assert_eq!(
            serde_json::from_str::<DaemonReply>(&text).expect("de"),
            reply
        );
        assert_eq!(
            serde_json::to_string(&DaemonRequest::Detach).expect("ser"),
            r#"{"op":"detach"}"#
        );
        assert_eq!(
            serde_json::to_string(&DaemonReply::Detached { running: 2 }).expect("ser"),
            r#"{"detached":{"running":2}}"#
        );
    }
}
