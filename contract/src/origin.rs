//! Origins: normalisation and the allow-list both processes check.
//!
//! An origin is `scheme://host[:port]`, lowercased, default port elided, nothing else.
//! `null` and anything with a path, userinfo or query is not an origin.

use crate::host::{HostName, parse_authority};

/// Normalises an Origin header value; `None` when it is not a plain http(s) origin.
pub fn normalize(value: &str) -> Option<String> {
    let (scheme, rest) = value.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let auth = parse_authority(rest)?;
    let host = match auth.host {
        HostName::Name(n) => n,
        HostName::Ip(std::net::IpAddr::V4(a)) => a.to_string(),
        HostName::Ip(std::net::IpAddr::V6(a)) => format!("[{a}]"),
    };
    Some(match auth.port {
        Some(p) if p != default => format!("{scheme}://{host}:{p}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// The origins a loopback listener on `port` is reached by.
pub fn loopback_origins(scheme: &str, port: u16) -> Vec<String> {
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .filter_map(|h| normalize(&format!("{scheme}://{h}:{port}")))
        .collect()
}

/// Parses a comma-separated list (as in `STUDIO_ALLOWED_ORIGINS`), refusing bad entries.
pub fn parse_list(list: &str) -> Result<Vec<String>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| normalize(s).ok_or_else(|| format!("not an http(s) origin: {s:?}")))
        .collect()
}

/// An explicit allow-list (never `*`).
#[derive(Debug, Clone, Default)]
pub struct AllowedOrigins(Vec<String>);

impl AllowedOrigins {
    pub fn new(origins: impl IntoIterator<Item = String>) -> Self {
        let mut list: Vec<String> = Vec::new();
        for o in origins {
            if let Some(n) = normalize(&o).filter(|n| !list.contains(n)) {
                list.push(n);
            }
        }
        Self(list)
    }

    /// Whether a presented Origin header value is on the list.
    pub fn allows(&self, origin: &str) -> bool {
        normalize(origin).is_some_and(|n| self.0.contains(&n))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_case_and_default_ports() {
        assert_eq!(
            normalize("HTTP://LocalHost:80").as_deref(),
            Some("http://localhost")
        );
        assert_eq!(
            normalize("https://[0:0:0:0:0:0:0:1]:8443").as_deref(),
            Some("https://[::1]:8443")
        );
        assert_eq!(normalize("null"), None);
        assert_eq!(normalize("http://a.example/path"), None);
        assert_eq!(normalize("ftp://a.example"), None);
        assert_eq!(normalize("http://user@a.example"), None);
    }

    #[test]
    fn allow_list_is_exact() {
        let list = AllowedOrigins::new(loopback_origins("http", 8765));
        assert!(list.allows("http://127.0.0.1:8765"));
        assert!(list.allows("http://[::1]:8765"));
        assert!(!list.allows("http://127.0.0.1:8766"));
        assert!(!list.allows("http://evil.example"));
        assert!(!list.allows("*"));
        assert_eq!(
            parse_list("http://a.example, https://b.example:8443").expect("valid"),
            vec!["http://a.example", "https://b.example:8443"]
        );
        assert!(parse_list("*").is_err());
    }
}
