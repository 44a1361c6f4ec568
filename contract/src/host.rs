//! Host-header validation: the DNS-rebinding defence both listeners run first.
//!
//! The authority must match a strict grammar (`name[:port]` or `[ipv6][:port]`), its host
//! (lowercased, IP-normalised) must be a loopback name or a configured host, and its port
//! must be the listening port or a configured public port. No lenient URL parser is used:
//! `127.0.0.1:8765.evil.com` and `[::1]evil.com` are refused, not "fixed".

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A validated host name or address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostName {
    Name(String),
    Ip(IpAddr),
}

impl HostName {
    /// Normalises a bare host (no port): names are lowercased, IPv6 may be bracketed.
    pub fn parse(host: &str) -> Option<Self> {
        let inner = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        if let Some(v6) = inner {
            return v6.parse::<Ipv6Addr>().ok().map(|a| Self::Ip(IpAddr::V6(a)));
        }
        if let Ok(v4) = host.parse::<Ipv4Addr>() {
            return Some(Self::Ip(IpAddr::V4(v4)));
        }
        let ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        ok.then(|| Self::Name(host.to_ascii_lowercase()))
    }
}

/// A parsed `Host` header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: HostName,
    pub port: Option<u16>,
}

/// Parses an authority with the strict grammar; `None` when it does not match.
pub fn parse_authority(value: &str) -> Option<Authority> {
    let (host_part, port_part) = if let Some(rest) = value.strip_prefix('[') {
        let close = rest.find(']')?;
        let addr = &rest[..close];
        if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return None;
        }
        let v6 = addr.parse::<Ipv6Addr>().ok()?;
        let after = &rest[close + 1..];
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (HostName::Ip(IpAddr::V6(v6)), port)
    } else {
        let (h, p) = match value.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (value, None),
        };
        if h.is_empty()
            || !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return None;
        }
        let host = match h.parse::<Ipv4Addr>() {
            Ok(v4) => HostName::Ip(IpAddr::V4(v4)),
            Err(_) => HostName::Name(h.to_ascii_lowercase()),
        };
        (host, p)
    };
    let port = match port_part {
        None => None,
        Some(p) => {
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(p.parse::<u16>().ok()?)
        }
    };
    Some(Authority {
        host: host_part,
        port,
    })
}

/// Which authorities a listener answers to.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    hosts: Vec<HostName>,
    ports: Vec<u16>,
    default_port: u16,
}

impl HostPolicy {
    /// Loopback names (`localhost`, `127.0.0.1`, `::1`) on `port`, plus the bind host when it
    /// is a specific address. `default_port` is what a Host without a port means (80 or 443).
    pub fn new(bind: IpAddr, port: u16, default_port: u16) -> Self {
        let mut hosts = vec![
            HostName::Name("localhost".into()),
            HostName::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            HostName::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        ];
        if !bind.is_unspecified() && !hosts.contains(&HostName::Ip(bind)) {
            hosts.push(HostName::Ip(bind));
        }
        Self {
            hosts,
            ports: vec![port],
            default_port,
        }
    }

    /// Also answer to `host` (a public name) and `port` (a public port, e.g. behind a proxy).
    pub fn allow(mut self, host: Option<HostName>, port: Option<u16>) -> Self {
        if let Some(h) = host.filter(|h| !self.hosts.contains(h)) {
            self.hosts.push(h);
        }
        if let Some(p) = port.filter(|p| !self.ports.contains(p)) {
            self.ports.push(p);
        }
        self
    }

    /// Whether a request names this listener, the one rule both listeners apply: exactly
    /// one `Host` header, acceptable, and the authority of an absolute-form request line
    /// (`GET http://host/…`), when there is one, acceptable too. Without a `Host` header
    /// (HTTP/2), the authority alone decides. Two `Host` headers are refused, whatever
    /// the first says (RFC 9112, section 3.2).
    pub fn accepts_request(&self, headers: &http::HeaderMap, uri: &http::Uri) -> bool {
        let mut hosts = headers.get_all(http::header::HOST).iter();
        let (header, second) = (hosts.next(), hosts.next());
        let authority = uri.authority().map(http::uri::Authority::as_str);
        match (header, second, authority) {
            (_, Some(_), _) => false,
            (Some(h), None, a) => h
                .to_str()
                .is_ok_and(|h| self.accepts(h) && a.is_none_or(|a| self.accepts(a))),
            (None, None, Some(a)) => self.accepts(a),
            (None, None, None) => false,
        }
    }

    /// Whether a `Host` header value is acceptable.
    pub fn accepts(&self, value: &str) -> bool {
        let Some(auth) = parse_authority(value) else {
            return false;
        };
        let port = auth.port.unwrap_or(self.default_port);
        self.hosts.contains(&auth.host) && self.ports.contains(&port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HostPolicy {
        HostPolicy::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8765, 80)
    }

    #[test]
    fn a_request_has_one_host_and_an_absolute_form_authority_is_checked_too() {
        let p = policy();
        let req = |hosts: &[&str], uri: &str| {
            let mut headers = http::HeaderMap::new();
            for h in hosts {
                headers.append(http::header::HOST, h.parse().expect("value"));
            }
            p.accepts_request(&headers, &uri.parse().expect("uri"))
        };
        assert!(req(&["127.0.0.1:8765"], "/health"));
        assert!(
            !req(&["127.0.0.1:8765", "evil.example"], "/health"),
            "two Host headers"
        );
        assert!(
            !req(&["127.0.0.1:8765", "127.0.0.1:8765"], "/health"),
            "two Host headers, even alike"
        );
        assert!(req(&["127.0.0.1:8765"], "http://localhost:8765/health"));
        assert!(
            !req(&["127.0.0.1:8765"], "http://evil.example/health"),
            "an absolute-form authority of another host"
        );
        assert!(
            req(&[], "http://127.0.0.1:8765/health"),
            "HTTP/2: :authority"
        );
        assert!(!req(&[], "/health"), "no host at all");
    }

    #[test]
    fn accepts_the_legitimate_forms() {
        for ok in [
            "127.0.0.1:8765",
            "localhost:8765",
            "LOCALHOST:8765",
            "[::1]:8765",
            "[0:0:0:0:0:0:0:1]:8765",
        ] {
            assert!(policy().accepts(ok), "{ok} should pass");
        }
    }

    #[test]
    fn refuses_rebinding_and_malformed_forms() {
        for bad in [
            "[::ffff:127.0.0.1]:8765",
            "127.0.0.2:8765",
            "127.1:8765",
            "2130706433:8765",
            "0x7f.0.0.1:8765",
            "localhost.:8765",
            "localhost.",
            "sub.localhost:8765",
            "localhost:",
            "::1",
            "[::1]:",
            "[::1",
            "[::1]evil.com",
            "127.0.0.1:8765.evil.com",
            "127.0.0.1:8765:evil",
            "localhost:badport",
            "localhost:123456",
            "evil.example.com",
            "0.0.0.0:8765",
            "[::]:8765",
            "user@localhost",
            "local_host",
            "[fe80::1%eth0]",
            "127.0.0.1/",
            "",
            "127.0.0.1:+80",
            "127.0.0.1: 8765",
            "127.0.0.1:99999",
            "127.0.0.1:8766",
            "127.0.0.1",
        ] {
            assert!(!policy().accepts(bad), "{bad:?} should be refused");
        }
    }

    #[test]
    fn public_host_and_port_can_be_added() {
        let p = HostPolicy::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8443, 443)
            .allow(HostName::parse("Studio.Example.com"), Some(443));
        assert!(p.accepts("studio.example.com"));
        assert!(p.accepts("studio.example.com:8443"));
        assert!(!p.accepts("0.0.0.0:8443"));
        assert!(!p.accepts("other.example.com"));
    }
}
