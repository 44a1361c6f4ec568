//! The readiness line a child prints on stdout once it serves, for the supervisor to read.
//!
//! `STUDIO_READY {"pid":…,"addr":"127.0.0.1:8766","epoch":"…"}` — pushed, never guessed.
//! Logs go to stderr, so stdout carries nothing a parser could mistake for it.

use serde::{Deserialize, Serialize};

pub const PREFIX: &str = "STUDIO_READY ";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ready {
    pub pid: u32,
    /// The bound listener, `ip:port`.
    pub addr: String,
    /// studiod only: the epoch this start serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// studio-app only: the public origin browsers use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl Ready {
    /// The whole line, without the trailing newline.
    pub fn line(&self) -> String {
        format!(
            "{PREFIX}{}",
            serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
        )
    }

    pub fn parse(line: &str) -> Option<Self> {
        serde_json::from_str(line.trim_end().strip_prefix(PREFIX)?).ok()
    }

    /// Prints the line on stdout and flushes it.
    pub fn announce(&self) -> std::io::Result<()> {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", self.line())?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let r = Ready {
            pid: 7,
            addr: "127.0.0.1:1".into(),
            epoch: Some("e".into()),
            origin: None,
        };
        assert_eq!(Ready::parse(&format!("{}\n", r.line())), Some(r));
        assert_eq!(Ready::parse("hello"), None);
    }
}
