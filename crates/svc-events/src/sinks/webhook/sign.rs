//! `X-SVC-Signature` (spec 6.4): `sha256=` + lowercase hex HMAC-SHA256 of the exact body bytes, keyed with the
//! webhook secret; byte for byte GitHub's `X-Hub-Signature-256` scheme. Also the constant-time check a receiver
//! does, used by tests and by anyone embedding a receiver in Rust.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header value for `body` under `secret`: `sha256=<64 lowercase hex digits>`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail; an empty MAC would never verify anyway.
    match HmacSha256::new_from_slice(secret) {
        Ok(mut mac) => {
            mac.update(body);
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        }
        Err(_) => String::from("sha256="),
    }
}

/// Whether `header` is the signature of `body` under `secret`, compared in constant time. Upper-case hex is
/// rejected, like `@octokit/webhooks-methods` does.
pub fn verify(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex_part) = header.strip_prefix("sha256=") else {
        return false;
    };
    if hex_part.len() != 64 || hex_part.bytes().any(|b| b.is_ascii_uppercase()) {
        return false;
    }
    let Ok(expected) = hex::decode(hex_part) else {
        return false;
    };
    let Ok(mut mac) = HmacSha256::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GITHUB: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_test_vector() {
        assert_eq!(sign(b"It's a Secret to Everybody", b"Hello, World!"), GITHUB);
        assert!(verify(b"It's a Secret to Everybody", b"Hello, World!", GITHUB));
    }

    #[test]
    fn verify_rejects_tampering() {
        assert!(!verify(b"It's a Secret to Everybody", b"Hello, World?", GITHUB));
        assert!(!verify(b"another secret", b"Hello, World!", GITHUB));
        assert!(!verify(b"It's a Secret to Everybody", b"Hello, World!", &GITHUB.to_uppercase()));
        assert!(!verify(b"It's a Secret to Everybody", b"Hello, World!", &GITHUB[7..]));
    }
}
