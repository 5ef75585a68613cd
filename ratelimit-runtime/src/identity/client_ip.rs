//! The client address, honest about proxies.
//!
//! Each trusted proxy appends the address it saw to `X-Forwarded-For` (or `Forwarded`), so
//! the entry a limiter may believe is the one `hops` places from the right; everything to
//! its left is whatever the client sent. With zero hops the headers are ignored. With the
//! proxies' networks given, a peer outside them is the client, whatever it sends.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
};

use ipnet::IpNet;

use actix_web::{
    dev::ServiceRequest,
    http::header::{HeaderMap, FORWARDED, X_FORWARDED_FOR},
};

/// Which forwarding header the trusted proxies write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// How many proxies the operator runs in front of the app, where they are, and how IPv6
/// clients are grouped.
///
/// `hops(n)` alone believes the forwarding header whoever connects: right when the app can
/// be reached only through those proxies. Where it can also be reached directly (an origin
/// a CDN fronts, a neighbour in the same network), name the proxies' own addresses with
/// [`only_from`](TrustedProxies::only_from), and a client that goes around them is counted
/// by its own address:
///
/// ```
/// use ratelimit_runtime::identity::TrustedProxies;
///
/// // Two load balancers, 10.0.0.5 and 10.0.0.6, append the client's address to
/// // X-Forwarded-For.
/// let proxies = TrustedProxies::hops(1).only_from(["10.0.0.5", "10.0.0.6"]);
/// # let _ = proxies;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedProxies {
    hops: usize,
    header: ForwardedHeader,
    ipv6_prefix: u8,
    /// The proxies' networks ([`TrustedProxies::only_from`]); `None`: every peer's
    /// forwarding header is read.
    networks: Option<Arc<[IpNet]>>,
    /// Values refused, for `RateLimiter::check_settings`.
    problems: crate::settings::Problems,
}

impl Default for TrustedProxies {
    /// No trusted proxy (the peer address is the client), IPv6 grouped by /64.
    fn default() -> Self {
        TrustedProxies {
            hops: 0,
            header: ForwardedHeader::XForwardedFor,
            ipv6_prefix: 64,
            networks: None,
            problems: crate::settings::Problems::default(),
        }
    }
}

impl TrustedProxies {
    /// `hops` proxies that the operator controls sit in front of the app.
    pub fn hops(hops: usize) -> Self {
        TrustedProxies {
            hops,
            ..Self::default()
        }
    }

    /// Reads `header` instead of `X-Forwarded-For`.
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Believes the forwarding header only from proxies in `networks` (one address,
    /// `"10.0.0.5"`, or a network, `"10.0.0.0/28"`, `"2001:db8:cd::/48"`): list every trusted
    /// proxy's, the load balancers' and, with two hops, the CDN's published ranges. Name
    /// only addresses the proxies alone hold: any other host in a network named here is
    /// believed too, and can name any client. IPv4 networks written IPv4-mapped
    /// (`::ffff:10.0.0.0/104`) are read as IPv4.
    ///
    /// The peer must be in one of them for the header to be read at all, else the peer is
    /// the client; with `hops(n)`, each of the `n - 1` entries right of the client's must be
    /// in one too, else that entry is the client (a client that reached the inner proxy
    /// without the outer one is counted by the address the inner proxy saw). An IPv4 peer
    /// that a dual-stack socket shows as `::ffff:a.b.c.d` is matched as IPv4. No networks at
    /// all: no peer is a proxy, and the header is never read.
    ///
    /// An entry that is neither an address nor a network (`address/prefix`) is refused
    /// ([`RateLimiter::check_settings`](crate::RateLimiter::check_settings)); the others
    /// are taken.
    #[must_use]
    pub fn only_from<I, S>(mut self, networks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut refused = Vec::new();
        let parsed: Vec<IpNet> = networks
            .into_iter()
            .filter_map(|text| {
                let text = text.as_ref().trim();
                let Ok(net) = text
                    .parse::<IpNet>()
                    .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                else {
                    refused.push(format!("`{text}`"));
                    return None;
                };
                // Peers are matched in canonical form (IPv4-mapped ones as IPv4).
                Some(match net {
                    IpNet::V6(v6) if v6.prefix_len() >= 96 => v6
                        .addr()
                        .to_ipv4_mapped()
                        .and_then(|v4| ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).ok())
                        .map_or(net, IpNet::V4),
                    net => net,
                })
            })
            .collect();
        let setting = "`TrustedProxies::only_from(..)`";
        let outcome = if refused.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{setting}: {} neither an address nor a network (`10.0.0.0/8`, `2001:db8::/32`)",
                if refused.len() == 1 {
                    format!("{} is", refused[0])
                } else {
                    format!("{} are", refused.join(", "))
                }
            ))
        };
        self.problems.record(setting, outcome);
        self.networks = Some(parsed.into());
        self
    }

    /// The prefix length IPv6 clients are grouped by.
    pub(crate) fn ipv6_bucket(&self) -> u8 {
        self.ipv6_prefix
    }

    /// Groups IPv6 clients by this prefix length (default 64), so one host cannot rotate
    /// through the addresses of its own /64 (a site delegated a /56 or /48 holds many /64s:
    /// 56 or 48 count it as one, with its neighbours).
    ///
    /// 0 (every IPv6 client in one bucket, `::/0`) or above 128 is refused
    /// ([`RateLimiter::check_settings`](crate::RateLimiter::check_settings)), and the
    /// prefix stays as it was.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        let setting = "`TrustedProxies::ipv6_prefix(..)`";
        if (1..=128).contains(&bits) {
            self.ipv6_prefix = bits;
            self.problems.record(setting, Ok(()));
        } else {
            let line = format!(
                "`TrustedProxies::ipv6_prefix({bits})`: an IPv6 prefix is 1 to 128 bits (0 would count every IPv6 client in one bucket)"
            );
            self.problems.record(setting, Err(line));
        }
        self
    }

    /// The values refused, one line each.
    pub(crate) fn problems(&self) -> impl Iterator<Item = &str> {
        self.problems.lines()
    }

    /// The configured number of trusted hops.
    pub fn trusted_hops(&self) -> usize {
        self.hops
    }

    /// The client address bucket for this request, as text (`203.0.113.7`, `2001:db8::/64`).
    pub fn client_ip(&self, req: &ServiceRequest) -> String {
        self.text(self.resolve_request(req))
    }

    /// The client address of this request: [`TrustedProxies::resolve`] on its peer and
    /// headers.
    pub fn resolve_request(&self, req: &ServiceRequest) -> Option<IpAddr> {
        self.resolve(req.peer_addr().map(|a| a.ip()), req.headers())
    }

    /// The bucket of a resolved client address, as text; `unknown` when there is none.
    pub(crate) fn text(&self, ip: Option<IpAddr>) -> String {
        match ip {
            Some(ip) => self.bucket(ip),
            None => "unknown".to_owned(),
        }
    }

    /// The client address: the trusted entry of the forwarding header, else the peer.
    pub fn resolve(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        if self.hops == 0 {
            return peer;
        }
        if let Some(networks) = &self.networks {
            let proxy = |ip: IpAddr| networks.iter().any(|net| net.contains(&ip.to_canonical()));
            if !peer.is_some_and(proxy) {
                return peer;
            }
            // Every entry the proxies wrote right of the client's is a proxy too; the first
            // that is not is the client, who went around the proxies further out.
            for n in 1..self.hops {
                match self.entry_from_right(headers, n) {
                    Some(ip) if proxy(ip) => {}
                    Some(ip) => return Some(ip),
                    None => return peer,
                }
            }
        }
        self.entry_from_right(headers, self.hops).or(peer)
    }

    /// The address of the forwarding header's `n`th entry from the right, if it is one.
    fn entry_from_right(&self, headers: &HeaderMap, n: usize) -> Option<IpAddr> {
        // Only the entry `hops` places from the right is read: a client can make the header
        // as long as the server's header limit allows, but never choose that entry.
        // Entries are split as bytes: a client's non-text bytes left of the trusted entry
        // must not discard the header (and move the client into the proxy's bucket); only
        // the trusted entry, which a proxy wrote, has to be text.
        let entry = match self.header {
            ForwardedHeader::XForwardedFor => forwarded_for_from_right(headers, n),
            ForwardedHeader::Forwarded => forwarded_from_right(headers, n),
        };
        entry
            .and_then(|entry| std::str::from_utf8(entry).ok())
            .and_then(parse_ip)
    }

    /// The text a limit counts: IPv4 as is, IPv6 as its network under the configured prefix.
    pub fn bucket(&self, ip: IpAddr) -> String {
        match ip {
            IpAddr::V4(v4) => ipv4_text(v4),
            IpAddr::V6(v6) => {
                if let Some(v4) = v6.to_ipv4_mapped() {
                    return ipv4_text(v4);
                }
                if self.ipv6_prefix >= 128 {
                    return v6.to_string();
                }
                let bits = u128::from(v6);
                let mask = if self.ipv6_prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.ipv6_prefix))
                };
                format!("{}/{}", Ipv6Addr::from(bits & mask), self.ipv6_prefix)
            }
        }
    }
}

/// `a.b.c.d`, as `Display` writes it, without the formatting machinery: this runs on every
/// limited request, the flood shield's included.
fn ipv4_text(ip: Ipv4Addr) -> String {
    let mut text = String::with_capacity(15);
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        if octet >= 100 {
            text.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            text.push(char::from(b'0' + octet / 10 % 10));
        }
        text.push(char::from(b'0' + octet % 10));
    }
    text
}

/// The `n`th `X-Forwarded-For` entry counted from the right (1 = the last), across
/// repeated header lines, read in one pass from the right: nothing left of it is split.
fn forwarded_for_from_right(headers: &HeaderMap, n: usize) -> Option<&[u8]> {
    headers
        .get_all(X_FORWARDED_FOR)
        .rev()
        .flat_map(|value| {
            value
                .as_bytes()
                .rsplit(|b| *b == b',')
                .map(<[u8]>::trim_ascii)
        })
        .nth(n.checked_sub(1)?)
}

/// The `for=` value of the `n`th element of RFC 7239 `Forwarded` counted from the right (1 =
/// the last), across repeated header lines; an element without `for=` is an empty entry.
///
/// Elements are read from the right, the way the trusted proxies wrote them, and split at `,`
/// only outside quoted strings: a proxy quotes a value holding `,` or `;` (the `host` it copies
/// from the client's `Host`, say), and a split inside it would let the client's text pose as
/// an element or a `for=` pair. Whatever the client wrote left of the trusted elements, an
/// open quote included, is never reached.
fn forwarded_from_right(headers: &HeaderMap, n: usize) -> Option<&[u8]> {
    let element = headers
        .get_all(FORWARDED)
        .rev()
        .flat_map(|line| split_unquoted_from_right(line.as_bytes(), b','))
        .nth(n.checked_sub(1)?)?;
    let value = split_unquoted_from_right(element, b';')
        .filter_map(|pair| {
            let equals = pair.iter().position(|b| *b == b'=')?;
            let (name, value) = (&pair[..equals], &pair[equals + 1..]);
            name.trim_ascii()
                .eq_ignore_ascii_case(b"for")
                .then(|| unquote(value.trim_ascii()))
        })
        // The element's first `for` pair (a proxy writes one).
        .last();
    Some(value.unwrap_or(b""))
}

/// `bytes` split at `separator` where it stands outside a quoted string (`"..."`, in which
/// `\` escapes the next byte), read from the right: the last piece first.
fn split_unquoted_from_right(bytes: &[u8], separator: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let text = rest?;
        let mut quoted = false;
        for i in (0..text.len()).rev() {
            let byte = text[i];
            if byte == b'"' && !escaped(&text[..i]) {
                quoted = !quoted;
            } else if byte == separator && !quoted {
                rest = Some(&text[..i]);
                return Some(&text[i + 1..]);
            }
        }
        rest = None;
        Some(text)
    })
}

/// Whether the byte after `before` is escaped: `before` ends in an odd run of `\`.
fn escaped(before: &[u8]) -> bool {
    before.iter().rev().take_while(|b| **b == b'\\').count() % 2 == 1
}

/// A `for` value without its quotes. A quoted value that does not end at its closing quote,
/// or holds an escape (an address never needs one), is returned as it is, and then reads as
/// no address.
fn unquote(value: &[u8]) -> &[u8] {
    match value.strip_prefix(b"\"") {
        Some(inner) => match inner.strip_suffix(b"\"") {
            Some(inner) if !inner.contains(&b'"') && !inner.contains(&b'\\') => inner,
            _ => value,
        },
        None => value,
    }
}

/// An address as proxies write it: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
/// `[2001:db8::1]:443`, `fe80::1%eth0`.
fn parse_ip(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = entry.strip_prefix('[') {
        let host = rest.split(']').next()?;
        return host
            .split('%')
            .next()?
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6);
    }
    if let Some((host, zone)) = entry.split_once('%') {
        if !zone.is_empty() {
            return host.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
        }
    }
    let (host, port) = entry.rsplit_once(':')?;
    if port.parse::<u16>().is_err() && !obfuscated_port(port) {
        return None;
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// RFC 7239's `obfport`: `_` and one or more of `A-Z a-z 0-9 . _ -`.
fn obfuscated_port(port: &str) -> bool {
    port.strip_prefix('_').is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    })
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderName, HeaderValue};

    use super::*;

    #[test]
    fn ipv4_text_is_what_display_writes() {
        for octet in 0..=255u8 {
            for ip in [
                Ipv4Addr::new(octet, 0, 9, 255),
                Ipv4Addr::new(10, octet, 99, 100),
                Ipv4Addr::new(192, 168, octet, 1),
                Ipv4Addr::new(1, 23, 45, octet),
            ] {
                assert_eq!(ipv4_text(ip), ip.to_string());
            }
        }
    }

    fn headers(name: &str, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    fn peer() -> Option<IpAddr> {
        Some("10.0.0.1".parse().unwrap())
    }

    #[test]
    fn only_the_named_proxies_forwarding_headers_are_read() {
        let ip = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        let lb = TrustedProxies::hops(1).only_from(["10.0.0.0/8", " 192.0.2.10 "]);
        let h = headers("x-forwarded-for", &["198.51.100.9"]);
        assert_eq!(lb.resolve(ip("10.1.2.3"), &h), ip("198.51.100.9"));
        assert_eq!(lb.resolve(ip("192.0.2.10"), &h), ip("198.51.100.9"));
        // Around the proxy: the peer is the client.
        assert_eq!(lb.resolve(ip("192.0.2.11"), &h), ip("192.0.2.11"));
        assert_eq!(lb.resolve(None, &h), None);
        // An IPv4 peer on a dual-stack socket, and a network written IPv4-mapped.
        assert_eq!(lb.resolve(ip("::ffff:10.0.0.7"), &h), ip("198.51.100.9"));
        let mapped = TrustedProxies::hops(1).only_from(["::ffff:10.0.0.0/104"]);
        assert_eq!(
            mapped.resolve(ip("::ffff:10.0.0.7"), &h),
            ip("198.51.100.9")
        );
        assert_eq!(mapped.resolve(ip("10.0.0.7"), &h), ip("198.51.100.9"));
        // A CDN (2001:db8:cd::/48) in front of the load balancer: a client that reached
        // the balancer without the CDN is the entry the balancer wrote.
        let cdn = TrustedProxies::hops(2).only_from(["10.0.0.0/8", "2001:db8:cd::/48"]);
        let through = headers(
            "x-forwarded-for",
            &["6.6.6.6, 198.51.100.9, 2001:db8:cd::5"],
        );
        let around = headers("x-forwarded-for", &["198.51.100.9, 203.0.113.4"]);
        assert_eq!(cdn.resolve(ip("10.0.0.1"), &through), ip("198.51.100.9"));
        assert_eq!(cdn.resolve(ip("10.0.0.1"), &around), ip("203.0.113.4"));
        // A short or malformed entry right of the client's falls back to the peer.
        let short = headers("x-forwarded-for", &["nonsense"]);
        assert_eq!(cdn.resolve(ip("10.0.0.1"), &short), ip("10.0.0.1"));
        // No networks: no peer is a proxy.
        let none = TrustedProxies::hops(1).only_from(Vec::<String>::new());
        assert_eq!(none.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn only_from_refuses_what_is_no_network() {
        let proxies = TrustedProxies::hops(1).only_from(["10.0.0.0/33", "10.0.0.5", "proxy"]);
        let problems: Vec<&str> = proxies.problems().collect();
        assert_eq!(
            problems,
            ["`TrustedProxies::only_from(..)`: `10.0.0.0/33`, `proxy` are neither an address nor a network (`10.0.0.0/8`, `2001:db8::/32`)"]
        );
        // The valid entry is taken.
        let h = headers("x-forwarded-for", &["203.0.113.7"]);
        let at = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        assert_eq!(proxies.resolve(at("10.0.0.5"), &h), at("203.0.113.7"));
        // Given again without the bad entries, the refusal is taken back.
        assert_eq!(proxies.only_from(["10.0.0.5"]).problems().count(), 0);
    }

    #[test]
    fn zero_hops_ignore_the_headers() {
        let h = headers("x-forwarded-for", &["203.0.113.7"]);
        assert_eq!(TrustedProxies::default().resolve(peer(), &h), peer());
    }

    #[test]
    fn one_hop_takes_the_rightmost_entry_whatever_the_client_prepends() {
        let t = TrustedProxies::hops(1);
        let honest = headers("x-forwarded-for", &["198.51.100.9"]);
        let spoofed = headers("x-forwarded-for", &["1.1.1.1, 2.2.2.2, 198.51.100.9"]);
        let expected: IpAddr = "198.51.100.9".parse().unwrap();
        assert_eq!(t.resolve(peer(), &honest), Some(expected));
        assert_eq!(t.resolve(peer(), &spoofed), Some(expected));
    }

    #[test]
    fn two_hops_count_from_the_right_across_header_lines() {
        let t = TrustedProxies::hops(2);
        let h = headers("x-forwarded-for", &["6.6.6.6, 198.51.100.9", "10.1.1.1"]);
        assert_eq!(t.resolve(peer(), &h), Some("198.51.100.9".parse().unwrap()));
    }

    #[test]
    fn short_or_malformed_headers_fall_back_to_the_peer() {
        let t = TrustedProxies::hops(2);
        assert_eq!(
            t.resolve(peer(), &headers("x-forwarded-for", &["198.51.100.9"])),
            peer()
        );
        let t = TrustedProxies::hops(1);
        assert_eq!(
            t.resolve(peer(), &headers("x-forwarded-for", &["not-an-ip"])),
            peer()
        );
        assert_eq!(t.resolve(peer(), &HeaderMap::new()), peer());
        let mut long = vec!["1.2.3.4"; 5000];
        long.push("198.51.100.9");
        let long = long.join(",");
        assert_eq!(
            t.resolve(peer(), &headers("x-forwarded-for", &[&long])),
            Some("198.51.100.9".parse().unwrap()),
            "a long chain is read from the right, like a short one"
        );
    }

    #[test]
    fn a_quoted_string_in_the_trusted_element_cannot_choose_the_client() {
        // A proxy quotes the `host` it copies from the client's `Host` (RFC 7239 §4), so
        // `,` and `;` inside quotes are the client's text, not elements or pairs.
        let t = TrustedProxies::hops(1).header(ForwardedHeader::Forwarded);
        let client: IpAddr = "203.0.113.7".parse().unwrap();
        let h = headers(
            "forwarded",
            &["for=203.0.113.7;host=\"x,for=6.6.6.6\";proto=https"],
        );
        assert_eq!(t.resolve(peer(), &h), Some(client), "`,` in a quoted host");
        let h = headers(
            "forwarded",
            &["proto=https;host=\"x;for=6.6.6.6\";for=203.0.113.7"],
        );
        assert_eq!(t.resolve(peer(), &h), Some(client), "`;` in a quoted host");
        let h = headers("forwarded", &[r#"for=203.0.113.7;host="x\",for=6.6.6.6""#]);
        assert_eq!(t.resolve(peer(), &h), Some(client), "an escaped quote");
        let h = headers("forwarded", &["for=\"[2001:db8::1]:443\";proto=https"]);
        assert_eq!(t.resolve(peer(), &h), Some("2001:db8::1".parse().unwrap()));
        // Two hops: the quoted `,` does not add an element either.
        let t2 = TrustedProxies::hops(2).header(ForwardedHeader::Forwarded);
        let h = headers(
            "forwarded",
            &["for=203.0.113.7;host=\"a,b,c\", for=10.1.1.1"],
        );
        assert_eq!(t2.resolve(peer(), &h), Some(client));
    }

    #[test]
    fn an_obfuscated_port_does_not_hide_the_client() {
        // RFC 7239 §6: `node-port = port / obfport`, as honest proxies may write.
        let t = TrustedProxies::hops(1).header(ForwardedHeader::Forwarded);
        let h = headers("forwarded", &["for=\"[2001:db8:cafe::17]:_p1\""]);
        assert_eq!(
            t.resolve(peer(), &h),
            Some("2001:db8:cafe::17".parse().unwrap())
        );
        let h = headers("forwarded", &["for=\"192.0.2.43:_p1\""]);
        assert_eq!(t.resolve(peer(), &h), Some("192.0.2.43".parse().unwrap()));
        // Not a port of either kind: no address.
        for value in [
            r#"for="192.0.2.43:_""#,
            r#"for="192.0.2.43:_p!""#,
            r#"for="192.0.2.43:p1""#,
        ] {
            assert_eq!(
                t.resolve(peer(), &headers("forwarded", &[value])),
                peer(),
                "{value}"
            );
        }
    }

    #[test]
    fn a_clients_open_quote_left_of_the_trusted_element_does_not_hide_it() {
        // Read from the left, the client's open quote would swallow the element the proxy
        // appended to the same line; read from the right, it is never reached.
        let t = TrustedProxies::hops(1).header(ForwardedHeader::Forwarded);
        let client: IpAddr = "203.0.113.7".parse().unwrap();
        let h = headers("forwarded", &["for=6.6.6.6;host=\"x, for=203.0.113.7"]);
        assert_eq!(t.resolve(peer(), &h), Some(client));
        let h = headers("forwarded", &["for=6.6.6.6;host=\"x", "for=203.0.113.7"]);
        assert_eq!(t.resolve(peer(), &h), Some(client));
        let t2 = TrustedProxies::hops(2).header(ForwardedHeader::Forwarded);
        let h = headers(
            "forwarded",
            &[
                "for=\"6.6.6.6, for=203.0.113.7;host=\"a,b\"",
                "for=10.1.1.1",
            ],
        );
        assert_eq!(t2.resolve(peer(), &h), Some(client));
        // A quoted value left open, with text after its closing quote, or with an escape
        // (an address needs none) is no address.
        for value in [
            r#"for="203.0.113.7"#,
            r#"for="203.0.113.7"x"#,
            r#"for="203.0.113\.7""#,
        ] {
            assert_eq!(
                t.resolve(peer(), &headers("forwarded", &[value])),
                peer(),
                "{value}"
            );
        }
    }

    #[test]
    fn a_clients_non_text_bytes_do_not_discard_the_trusted_entry() {
        // A client's bytes left of the trusted entry pass through the proxy; they must not
        // move the client into the proxy's (the peer's) bucket.
        let raw = |name: &str, value: &[u8]| {
            let mut map = HeaderMap::new();
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
            map
        };
        let client: IpAddr = "198.51.100.9".parse().unwrap();
        let t = TrustedProxies::hops(1);
        let h = raw("x-forwarded-for", b"\xff\xfe, 198.51.100.9");
        assert_eq!(t.resolve(peer(), &h), Some(client));
        let t = t.header(ForwardedHeader::Forwarded);
        let h = raw("forwarded", b"for=\"\xff\", for=198.51.100.9");
        assert_eq!(t.resolve(peer(), &h), Some(client));
        // The trusted entry itself not text: the peer, as for any unreadable entry.
        let t = TrustedProxies::hops(1);
        assert_eq!(
            t.resolve(peer(), &raw("x-forwarded-for", b"1.2.3.4, \xff")),
            peer()
        );
    }

    #[test]
    fn forwarded_header_for_values_with_ports_and_brackets() {
        let t = TrustedProxies::hops(1).header(ForwardedHeader::Forwarded);
        let h = headers(
            "forwarded",
            &["for=6.6.6.6;proto=https, for=\"[2001:db8::1]:4711\";by=10.0.0.2"],
        );
        assert_eq!(t.resolve(peer(), &h), Some("2001:db8::1".parse().unwrap()));
        let h = headers("forwarded", &["for=192.0.2.60:8080"]);
        assert_eq!(t.resolve(peer(), &h), Some("192.0.2.60".parse().unwrap()));
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let t = TrustedProxies::default();
        let a = t.bucket("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = t.bucket("2001:db8:1:2:bbbb::9".parse().unwrap());
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_eq!(a, b);
        assert_eq!(t.bucket("::ffff:192.0.2.1".parse().unwrap()), "192.0.2.1");
        assert_eq!(
            TrustedProxies::default()
                .ipv6_prefix(128)
                .bucket("2001:db8::1".parse().unwrap()),
            "2001:db8::1"
        );
    }

    #[test]
    fn zoned_ipv6_entries_parse() {
        assert_eq!(parse_ip("fe80::1%eth0"), Some("fe80::1".parse().unwrap()));
        assert_eq!(
            parse_ip("[fe80::1%25eth0]:80"),
            Some("fe80::1".parse().unwrap())
        );
    }
}
