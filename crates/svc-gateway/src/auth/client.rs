//! Where a request comes from, for the limit on failed authentications (`limit.rs`): the TCP peer's address,
//! which every request carries in its [`RequestId`] (the accept loop gives it); or, when the peer is one of
//! `server.trusted_proxies`, the right-most `X-Forwarded-For` address that is not itself a trusted proxy (each
//! proxy appends the address it was reached from, so that is the address the first trusted proxy saw; what lies
//! left of it the client wrote itself). Addresses are counted by their slot (svc-limits' `rate::addresses::Slot`).
//!
//! What this file does not do: read `X-Forwarded-For` from a peer that is not a trusted proxy (a client writes
//! whatever it likes there), read RFC 7239's `Forwarded`, or count anything.

use crate::RequestId;
use axum::http::{Extensions, HeaderMap, HeaderName};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use svc_config::IpBlock;

/// `X-Forwarded-For`.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// A request's headers and extensions: enough to find its client's address, which is read only when a failed
/// authentication needs it (a valid key's request never does).
#[derive(Clone, Copy)]
pub struct Origin<'a> {
    headers: &'a HeaderMap,
    extensions: &'a Extensions,
}

impl<'a> Origin<'a> {
    /// The origin of a request with these headers and extensions.
    pub fn new(headers: &'a HeaderMap, extensions: &'a Extensions) -> Origin<'a> {
        Origin { headers, extensions }
    }

    /// The client's address, through `trusted` proxies ([`client_ip`]).
    pub fn client_ip(&self, trusted: &[IpBlock]) -> IpAddr {
        client_ip(self.extensions.get::<RequestId>().and_then(|r| r.2), self.headers, trusted)
    }
}

/// The client's address of a request from `peer` (see the module docs); a request without a peer (in process)
/// is taken to come from `0.0.0.0`.
pub fn client_ip(peer: Option<IpAddr>, headers: &HeaderMap, trusted: &[IpBlock]) -> IpAddr {
    let peer = peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |p| p.to_canonical());
    let is_trusted = |ip: IpAddr| trusted.iter().any(|b| b.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    // Right to left over every `X-Forwarded-For` line, the last line last (RFC 9110: lines of one field are
    // one comma-separated list, in order).
    let mut nearest = peer;
    for line in headers.get_all(&X_FORWARDED_FOR).iter().rev() {
        let Ok(line) = line.to_str() else { return nearest };
        for entry in line.rsplit(',').map(str::trim).filter(|e| !e.is_empty()) {
            // A trusted proxy writes an address; anything else was written by a client (or a proxy that does
            // not append, which cannot be trusted for what lies left of it either): the last trusted hop is
            // all that is known.
            let Some(ip) = forwarded_ip(entry) else { return nearest };
            if !is_trusted(ip) {
                return ip;
            }
            nearest = ip;
        }
    }
    nearest
}

/// An `X-Forwarded-For` entry's address: `203.0.113.9`, `2001:db8::1`, and with a port (as some load
/// balancers write it) `203.0.113.9:4711`, `[2001:db8::1]:4711`.
fn forwarded_ip(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return Some(addr.ip().to_canonical());
    }
    let bracketed = entry.strip_prefix('[')?.strip_suffix(']')?;
    bracketed.parse::<Ipv6Addr>().ok().map(|v6| IpAddr::V6(v6).to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn blocks(list: &[&str]) -> Vec<IpBlock> {
        list.iter().map(|b| IpBlock::parse(b).unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    fn forwarded(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for line in lines {
            h.append(X_FORWARDED_FOR, line.parse().unwrap_or_else(|e| panic!("{e}")));
        }
        h
    }

    #[test]
    fn x_forwarded_for_counts_only_from_a_trusted_proxy() {
        let proxies = blocks(&["10.0.0.0/8", "fd00::/8"]);
        let spoofed = forwarded(&["198.51.100.1"]);
        // A client that is not a proxy: its own header is ignored.
        assert_eq!(client_ip(Some(ip("203.0.113.9")), &spoofed, &proxies), ip("203.0.113.9"));
        assert_eq!(client_ip(Some(ip("203.0.113.9")), &spoofed, &[]), ip("203.0.113.9"), "no proxy is trusted");
        // Through one trusted proxy: the address it appended.
        assert_eq!(client_ip(Some(ip("10.0.0.2")), &forwarded(&["203.0.113.9"]), &proxies), ip("203.0.113.9"));
        // A client that wrote its own entry first: the right-most entry that is not a trusted proxy wins.
        let chain = forwarded(&["198.51.100.1, 203.0.113.9, 10.0.0.3"]);
        assert_eq!(client_ip(Some(ip("10.0.0.2")), &chain, &proxies), ip("203.0.113.9"));
        // The list spread over several header lines, ports and brackets, IPv4-mapped addresses.
        let lines = forwarded(&["198.51.100.1", "[2001:db8::7]:4711", "fd00::1, [::ffff:10.0.0.3]:80"]);
        assert_eq!(client_ip(Some(ip("::ffff:10.0.0.2")), &lines, &proxies), ip("2001:db8::7"));
        let ported = forwarded(&["203.0.113.9:4711"]);
        assert_eq!(client_ip(Some(ip("10.0.0.2")), &ported, &proxies), ip("203.0.113.9"));
        // Nothing usable: the last trusted hop known.
        assert_eq!(client_ip(Some(ip("10.0.0.2")), &HeaderMap::new(), &proxies), ip("10.0.0.2"));
        let garbage = forwarded(&["unknown, 10.0.0.5"]);
        assert_eq!(client_ip(Some(ip("10.0.0.2")), &garbage, &proxies), ip("10.0.0.5"));
        let all_proxies = forwarded(&["10.0.0.9, 10.0.0.5"]);
        assert_eq!(client_ip(Some(ip("10.0.0.2")), &all_proxies, &proxies), ip("10.0.0.9"));
        // In process, without a peer.
        assert_eq!(client_ip(None, &spoofed, &proxies), ip("0.0.0.0"));
    }
}
