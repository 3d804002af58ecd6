//! Which URLs a browser may be sent to by a task that came from elsewhere (a client of
//! `guirl serve`), so a spec cannot read the server's files (`file:`), its browser's
//! internals (`chrome:`), or the hosts only the server can reach (a cloud metadata
//! service, an internal dashboard). The CLI's own runs use no policy: a user's spec may
//! point anywhere.
//!
//! A URL passes when its scheme is `http` or `https` and its host passes the [`HostRule`]:
//!
//! - [`HostRule::LoopbackAndPublic`] (a server bound to loopback, by default): every
//!   address the host resolves to is loopback or public, not private (10/8, 172.16/12,
//!   192.168/16, fc00::/7), link-local (169.254/16, fe80::/10), a metadata service's
//!   (169.254.169.254, fd00:ec2::254, 100.100.100.200), shared (100.64/10), unspecified,
//!   multicast or broadcast.
//! - [`HostRule::Only`] (`--allow-hosts`; a server bound off loopback allows nothing else):
//!   an IP address must match an address pattern; a name must match a name pattern, and
//!   every address it resolves to must be public or match an address pattern (so a name
//!   that resolves to loopback or an internal address needs that address listed too).
//! - [`HostRule::Any`] (`--allow-any-host`): any host.
//!
//! Names are resolved when checked, and refused when they do not resolve. Ports are not
//! checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One `--allow-hosts` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// A name, matched whole and without case (`example.com`).
    Name(String),
    /// Any subdomain of a name, not the name itself (`*.example.com`).
    Subdomains(String),
    /// An address block (`10.1.2.3`, `10.0.0.0/8`, `::1`, `fd00::/8`).
    Net(IpAddr, u8),
}

impl HostPattern {
    /// Read a pattern: `example.com`, `*.example.com`, an IP address, or `ADDR/BITS`.
    pub fn parse(s: &str) -> Result<HostPattern, String> {
        let p = s.trim().trim_end_matches('.').to_ascii_lowercase();
        let bad = |why: &str| {
            Err(format!(
                "--allow-hosts {s:?}: {why}; use a name (example.com), its subdomains (*.example.com), \
                 an address (10.1.2.3, ::1) or a block (10.0.0.0/8)"
            ))
        };
        if p.is_empty() {
            return bad("empty pattern");
        }
        if let Some((addr, bits)) = p.split_once('/') {
            let Ok(ip) = addr.trim_matches(['[', ']']).parse::<IpAddr>() else {
                return bad("not an address");
            };
            let max = if ip.is_ipv4() { 32 } else { 128 };
            return match bits.parse::<u8>() {
                Ok(b) if b <= max => Ok(HostPattern::Net(ip, b)),
                _ => bad(&format!("the prefix length must be 0 to {max}")),
            };
        }
        if let Ok(ip) = p.trim_matches(['[', ']']).parse::<IpAddr>() {
            return Ok(HostPattern::Net(ip, if ip.is_ipv4() { 32 } else { 128 }));
        }
        let (name, sub) = match p.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (p.as_str(), false),
        };
        let label_ok =
            |l: &str| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name.split('.').all(label_ok) {
            return bad("not a host name");
        }
        Ok(if sub { HostPattern::Subdomains(name.into()) } else { HostPattern::Name(name.into()) })
    }

    fn matches_name(&self, host: &str) -> bool {
        match self {
            HostPattern::Name(n) => host == n,
            HostPattern::Subdomains(n) => host.strip_suffix(n.as_str()).is_some_and(|h| h.ends_with('.')),
            HostPattern::Net(..) => false,
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let HostPattern::Net(net, bits) = *self else { return false };
        match (net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), bits),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), bits),
            _ => false,
        }
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPattern::Name(n) => write!(f, "{n}"),
            HostPattern::Subdomains(n) => write!(f, "*.{n}"),
            HostPattern::Net(ip, b) if (ip.is_ipv4() && *b == 32) || *b == 128 => write!(f, "{ip}"),
            HostPattern::Net(ip, b) => write!(f, "{ip}/{b}"),
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (whole, rest) = ((bits / 8) as usize, bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || (a[whole] ^ b[whole]) >> (8 - rest) == 0
}

/// Which hosts a URL may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRule {
    /// Loopback and public addresses only (the default of a loopback-bound server).
    LoopbackAndPublic,
    /// Only hosts matching these patterns (empty: none).
    Only(Vec<HostPattern>),
    /// Any host.
    Any,
}

/// The policy for URLs from elsewhere: http(s) only, hosts by [`HostRule`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPolicy {
    /// Which hosts pass.
    pub hosts: HostRule,
}

impl Default for UrlPolicy {
    fn default() -> Self {
        UrlPolicy { hosts: HostRule::LoopbackAndPublic }
    }
}

/// Why a URL was refused, in words that say what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Why an address is never reached under the default rule (None: loopback or public).
pub fn internal_kind(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(a) => v4_kind(a),
        IpAddr::V6(a) => v6_kind(a),
    }
}

/// An IPv4 address written as IPv6 (`::ffff:a.b.c.d`, `64:ff9b::a.b.c.d`) as the IPv4 it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => {
            let s = a.segments();
            if let Some(v4) = a.to_ipv4_mapped() {
                IpAddr::V4(v4)
            } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let o = a.octets();
                IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15]))
            } else {
                ip
            }
        }
        v4 => v4,
    }
}

fn v4_kind(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    if a == Ipv4Addr::new(169, 254, 169, 254) || a == Ipv4Addr::new(100, 100, 100, 200) {
        Some("a cloud metadata service's address")
    } else if a.is_link_local() {
        Some("a link-local address")
    } else if a.is_private() {
        Some("a private address")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("a shared (carrier-grade NAT) address")
    } else if o[0] == 0 {
        Some("an unspecified address")
    } else if a.is_multicast() || a.is_broadcast() || o[0] >= 240 {
        Some("a multicast, broadcast or reserved address")
    } else {
        None
    }
}

fn v6_kind(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    if s == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] {
        Some("a cloud metadata service's address")
    } else if (s[0] & 0xffc0) == 0xfe80 {
        Some("a link-local address")
    } else if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        Some("a private address")
    } else if a.is_unspecified() {
        Some("an unspecified address")
    } else if a.is_multicast() {
        Some("a multicast address")
    } else {
        None
    }
}

impl UrlPolicy {
    /// A policy allowing only hosts matching `patterns`.
    pub fn only(patterns: Vec<HostPattern>) -> UrlPolicy {
        UrlPolicy { hosts: HostRule::Only(patterns) }
    }

    /// One line for a server's start: what clients' specs may reach.
    pub fn describe(&self) -> String {
        match &self.hosts {
            HostRule::LoopbackAndPublic => {
                "task specs may use http(s) URLs on loopback and public hosts (not private, link-local \
                 or metadata addresses)"
                    .into()
            }
            HostRule::Only(p) if p.is_empty() => {
                "task specs may use guirl's own pages only (paths like /fixtures/...): name the hosts \
                 they may reach with --allow-hosts"
                    .into()
            }
            HostRule::Only(p) => format!(
                "task specs may use http(s) URLs on these hosts only: {}",
                p.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ),
            HostRule::Any => "--allow-any-host: task specs may use http(s) URLs on ANY host this machine \
                              reaches, private and metadata addresses included"
                .into(),
        }
    }

    /// Check `url`, resolving its host's name; Err says why not and what to do.
    pub async fn check(&self, url: &str) -> Result<(), Refused> {
        let u = url::Url::parse(url).map_err(|e| Refused(format!("{url:?} is not a URL ({e})")))?;
        self.check_scheme(&u)?;
        let host = u.host().ok_or_else(|| Refused(format!("{url:?} has no host")))?;
        if self.hosts == HostRule::Any {
            return Ok(());
        }
        let (name, addrs) = match host {
            url::Host::Ipv4(a) => (None, vec![IpAddr::V4(a)]),
            url::Host::Ipv6(a) => (None, vec![IpAddr::V6(a)]),
            url::Host::Domain(d) => {
                let port = u.port_or_known_default().unwrap_or(80);
                let found = tokio::net::lookup_host((d, port)).await.map_err(|e| {
                    Refused(format!("the host {d:?} cannot be resolved ({e}), so it cannot be checked"))
                })?;
                let mut addrs: Vec<IpAddr> = found.map(|a| a.ip()).collect();
                addrs.dedup();
                (Some(d.to_ascii_lowercase()), addrs)
            }
        };
        self.check_host(name.as_deref(), &addrs)
    }

    fn check_scheme(&self, u: &url::Url) -> Result<(), Refused> {
        match u.scheme() {
            "http" | "https" => Ok(()),
            s => Err(Refused(format!(
                "the scheme \"{s}:\" is refused: a task sent to a server may only use http:// or https:// \
                 URLs, or a path on guirl's own task server (/fixtures/...)"
            ))),
        }
    }

    /// Check a host given its name (None for an IP literal) and the addresses it resolves to.
    pub fn check_host(&self, name: Option<&str>, addrs: &[IpAddr]) -> Result<(), Refused> {
        let shown = name
            .map(str::to_string)
            .unwrap_or_else(|| addrs.first().map(ToString::to_string).unwrap_or_default());
        if addrs.is_empty() {
            return Err(Refused(format!("the host {shown:?} resolves to no address")));
        }
        match &self.hosts {
            HostRule::Any => Ok(()),
            HostRule::LoopbackAndPublic => {
                for &ip in addrs {
                    if let Some(kind) = internal_kind(ip) {
                        return Err(Refused(format!(
                            "the host {shown:?}{} is {kind}, which this server does not reach for its clients; \
                             its operator can name hosts to allow with --allow-hosts",
                            via(name, ip)
                        )));
                    }
                }
                Ok(())
            }
            HostRule::Only(patterns) => {
                let listed = |ip: IpAddr| patterns.iter().any(|p| p.contains(ip));
                let refused = || {
                    Err(Refused(format!(
                        "the host {shown:?} is not one this server allows ({}); its operator can add it with \
                         --allow-hosts",
                        self.describe()
                    )))
                };
                match name {
                    None if addrs.iter().all(|&ip| listed(ip)) => Ok(()),
                    None => refused(),
                    Some(n) if !patterns.iter().any(|p| p.matches_name(n)) => refused(),
                    Some(n) => match addrs
                        .iter()
                        .find(|&&ip| !listed(ip) && (internal_kind(ip).is_some() || ip.is_loopback()))
                    {
                        Some(&ip) => Err(Refused(format!(
                            "the host {n:?} is allowed by name but resolves to {ip}, {}; to reach it, \
                             its operator must allow that address too (--allow-hosts {ip})",
                            internal_kind(ip).unwrap_or("a loopback address")
                        ))),
                        None => Ok(()),
                    },
                }
            }
        }
    }
}

fn via(name: Option<&str>, ip: IpAddr) -> String {
    if name.is_some() {
        format!(" resolves to {ip}, which")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_named() {
        for (a, kind) in [
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "metadata"),
            ("169.254.1.1", "link-local"),
            ("100.100.100.200", "metadata"),
            ("100.64.0.1", "shared"),
            ("0.0.0.0", "unspecified"),
            ("fe80::1", "link-local"),
            ("fd12::1", "private"),
            ("fd00:ec2::254", "metadata"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("::", "unspecified"),
        ] {
            let k = internal_kind(ip(a)).unwrap_or_else(|| panic!("{a} is internal"));
            assert!(k.contains(kind), "{a}: {k}");
        }
        for a in ["127.0.0.1", "::1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1"] {
            assert_eq!(internal_kind(ip(a)), None, "{a}");
        }
    }

    #[test]
    fn patterns_parse_and_match() {
        let p = |s: &str| HostPattern::parse(s).unwrap();
        assert_eq!(p("Example.COM."), HostPattern::Name("example.com".into()));
        assert!(p("*.example.com").matches_name("a.b.example.com"));
        assert!(!p("*.example.com").matches_name("example.com"));
        assert!(!p("*.example.com").matches_name("badexample.com"));
        assert!(p("10.0.0.0/8").contains(ip("10.200.1.1")));
        assert!(!p("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(p("192.168.4.0/22").contains(ip("192.168.7.255")));
        assert!(!p("192.168.4.0/22").contains(ip("192.168.8.0")));
        assert!(p("10.1.2.3").contains(ip("::ffff:10.1.2.3")));
        assert!(p("[::1]").contains(ip("::1")));
        assert_eq!(p("fd00::/8").to_string(), "fd00::/8");
        for bad in ["", "10.0.0.0/33", "exa mple.com", "http://x.com", "*"] {
            let e = HostPattern::parse(bad).unwrap_err();
            assert!(e.contains("--allow-hosts"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_rules_decide_by_name_and_address() {
        let default = UrlPolicy::default();
        assert!(default.check_host(None, &[ip("127.0.0.1")]).is_ok());
        assert!(default.check_host(Some("example.com"), &[ip("93.184.216.34")]).is_ok());
        let e = default.check_host(Some("evil.test"), &[ip("93.184.216.34"), ip("10.0.0.1")]).unwrap_err();
        assert!(e.0.contains("resolves to 10.0.0.1") && e.0.contains("private"), "{e}");
        let only = UrlPolicy::only(vec![
            HostPattern::parse("*.corp.test").unwrap(),
            HostPattern::parse("localhost").unwrap(),
            HostPattern::parse("10.9.0.0/16").unwrap(),
        ]);
        assert!(only.check_host(Some("wiki.corp.test"), &[ip("10.9.1.1")]).is_ok());
        assert!(only.check_host(None, &[ip("10.9.1.1")]).is_ok());
        let e = only.check_host(Some("wiki.corp.test"), &[ip("10.8.1.1")]).unwrap_err();
        assert!(e.0.contains("resolves to 10.8.1.1"), "{e}");
        let e = only.check_host(Some("localhost"), &[ip("127.0.0.1")]).unwrap_err();
        assert!(e.0.contains("loopback"), "{e}");
        assert!(only.check_host(Some("example.com"), &[ip("93.184.216.34")]).is_err());
        assert!(only.check_host(None, &[ip("93.184.216.34")]).is_err());
        assert!(UrlPolicy::only(vec![]).check_host(None, &[ip("127.0.0.1")]).is_err());
        let any = UrlPolicy { hosts: HostRule::Any };
        assert!(any.check_host(None, &[ip("169.254.169.254")]).is_ok());
    }

    #[tokio::test]
    async fn schemes_other_than_http_are_refused_under_every_rule() {
        for policy in [UrlPolicy::default(), UrlPolicy { hosts: HostRule::Any }] {
            for url in [
                "file:///etc/passwd",
                "data:text/html,hi",
                "chrome://version",
                "view-source:http://a.b/",
                "javascript:1",
                "ftp://a.b/",
            ] {
                let e = policy.check(url).await.unwrap_err();
                assert!(e.0.contains("scheme"), "{url}: {e}");
            }
        }
        // Odd spellings of an address are read as the browser reads them.
        let e = UrlPolicy::default().check("http://0xA9.0xFE.0xA9.0xFE/latest").await.unwrap_err();
        assert!(e.0.contains("metadata"), "{e}");
        let e = UrlPolicy::default().check("http://user@[::ffff:192.168.0.1]:8080/").await.unwrap_err();
        assert!(e.0.contains("private"), "{e}");
        assert!(UrlPolicy::default().check("http://127.0.0.1:9/x").await.is_ok());
        let e = UrlPolicy::default().check("http://no-such-host.invalid/").await.unwrap_err();
        assert!(e.0.contains("cannot be resolved"), "{e}");
    }
}
