//! An entry of `server.trusted_proxies`: one IP address or a CIDR block (`10.0.0.0/8`, `fd00::/8`), and
//! whether an address falls in it. An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, what a dual-stack listener
//! reports for an IPv4 client) is taken as the IPv4 address it maps, on either side.
//!
//! What this file does not do: read `X-Forwarded-For` (the gateway does).

use std::fmt;
use std::net::IpAddr;

/// An IP address block: the addresses whose first `prefix` bits are the network's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpBlock {
    network: IpAddr,
    prefix: u8,
}

impl IpBlock {
    /// Reads `10.0.0.1` (one address), `10.0.0.0/8` or `fd00::/8`. A block with bits set past its prefix
    /// (`10.0.0.1/8`) is refused, with the block that was probably meant.
    pub fn parse(text: &str) -> Result<IpBlock, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let Ok(written) = addr.parse::<IpAddr>() else {
            return Err(format!("`{text}` is not an IP address or a CIDR block (such as `10.0.0.0/8` or `fd00::/8`)"));
        };
        let width = bits(written);
        let prefix = match prefix {
            None => width,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= width => p,
                _ => return Err(format!("`{text}`: the prefix length must be a whole number from 0 to {width}")),
            },
        };
        // `::ffff:10.0.0.0/104` is `10.0.0.0/8`: the block is kept in the form addresses are compared in.
        let (network, prefix) = match written.to_canonical() {
            IpAddr::V4(v4) if written.is_ipv6() && prefix >= 96 => (IpAddr::V4(v4), prefix - 96),
            _ => (written, prefix),
        };
        let block = IpBlock { network, prefix };
        let masked = block.masked();
        if masked != network {
            let meant = IpBlock { network: masked, prefix };
            return Err(format!("`{text}` has bits set past its prefix length (did you mean `{meant}`?)"));
        }
        Ok(block)
    }

    /// Whether `ip` is in the block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let prefix = u32::from(self.prefix);
        // The bits where the two differ, shifted past the host part: none may be left.
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => (u32::from(n) ^ u32::from(a)).checked_shr(32 - prefix).unwrap_or(0) == 0,
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                (u128::from(n) ^ u128::from(a)).checked_shr(128 - prefix).unwrap_or(0) == 0
            }
            _ => false,
        }
    }

    /// The network address with every bit past the prefix cleared.
    fn masked(&self) -> IpAddr {
        let prefix = u32::from(self.prefix);
        match self.network {
            IpAddr::V4(n) => IpAddr::V4((u32::from(n) & !u32::MAX.checked_shr(prefix).unwrap_or(0)).into()),
            IpAddr::V6(n) => IpAddr::V6((u128::from(n) & !u128::MAX.checked_shr(prefix).unwrap_or(0)).into()),
        }
    }
}

/// 32 or 128.
fn bits(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

impl fmt::Display for IpBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix == bits(self.network) {
            write!(f, "{}", self.network)
        } else {
            write!(f, "{}/{}", self.network, self.prefix)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(text: &str) -> IpBlock {
        IpBlock::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn blocks_contain_their_addresses_and_no_others() {
        let cases = [
            ("10.0.0.0/8", "10.255.1.2", true),
            ("10.0.0.0/8", "11.0.0.1", false),
            ("10.0.0.7", "10.0.0.7", true),
            ("10.0.0.7", "10.0.0.8", false),
            ("0.0.0.0/0", "203.0.113.9", true),
            ("0.0.0.0/0", "2001:db8::1", false),
            ("fd00::/8", "fd12:3456::1", true),
            ("fd00::/8", "fe80::1", false),
            ("::/0", "2001:db8::1", true),
            ("2001:db8::1", "2001:db8::1", true),
            // A dual-stack listener's view of an IPv4 client, and a block written the same way.
            ("10.0.0.0/8", "::ffff:10.1.2.3", true),
            ("::ffff:10.0.0.0/104", "10.9.9.9", true),
            ("::ffff:10.0.0.0/104", "11.0.0.1", false),
        ];
        for (b, a, inside) in cases {
            assert_eq!(block(b).contains(ip(a)), inside, "{b} ∋ {a}");
        }
        assert_eq!(block("::ffff:10.0.0.0/104").to_string(), "10.0.0.0/8");
        assert_eq!(block(" 192.168.1.0/24 ").to_string(), "192.168.1.0/24");
        assert_eq!(block("192.168.1.4/32").to_string(), "192.168.1.4");
    }

    #[test]
    fn malformed_blocks_are_refused_with_the_reason() {
        let err = |text: &str| IpBlock::parse(text).err().unwrap_or_default();
        assert!(err("proxy.internal").contains("is not an IP address or a CIDR block"), "{}", err("proxy.internal"));
        assert!(err("10.0.0.0/33").contains("from 0 to 32"));
        assert!(err("fd00::/129").contains("from 0 to 128"));
        assert!(err("10.0.0.0/x").contains("from 0 to 32"));
        assert_eq!(err("10.0.0.1/8"), "`10.0.0.1/8` has bits set past its prefix length (did you mean `10.0.0.0/8`?)");
        assert!(err("fd00::1/8").contains("did you mean `fd00::/8`?"), "{}", err("fd00::1/8"));
    }
}
