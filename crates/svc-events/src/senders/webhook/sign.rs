//! The two signatures of a webhook delivery.
//!
//! - `X-SVC-Signature` (spec 6.4): `sha256=` + lowercase hex HMAC-SHA256 of the exact body bytes, keyed with the
//!   webhook secret; byte for byte GitHub's `X-Hub-Signature-256` scheme. Also the constant-time check a
//!   receiver does, used by tests and by anyone embedding a receiver in Rust.
//! - `webhook-signature` (Standard Webhooks): `v1,` + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`. It
//!   covers the delivery id and the attempt's time too, so a receiver that checks the timestamp's age refuses
//!   a replayed request. Its key is `WebhookConfig::standard_key` (a `whsec_` secret's base64-decoded rest,
//!   any other secret's raw bytes).

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

/// The `webhook-signature` value: `v1,` + base64 of the HMAC-SHA256 of `{id}.{timestamp}.{body}` under `key`.
pub fn sign_standard(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> String {
    use base64::Engine as _;
    match HmacSha256::new_from_slice(key) {
        Ok(mut mac) => {
            for part in [id.as_bytes(), b".", timestamp.as_bytes(), b".", body] {
                mac.update(part);
            }
            format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()))
        }
        Err(_) => String::from("v1,"),
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
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GITHUB: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_test_vector() {
        assert_eq!(sign(b"It's a Secret to Everybody", b"Hello, World!"), GITHUB);
        assert!(verify(b"It's a Secret to Everybody", b"Hello, World!", GITHUB));
    }

    #[test]
    fn standard_webhooks_vector() {
        // The example of the Standard Webhooks specification.
        let key = svc_config::standard_webhooks_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(key.len(), 24);
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign_standard(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(
            svc_config::standard_webhooks_key("s3cret").unwrap(),
            b"s3cret",
            "any other secret is its raw bytes"
        );
        assert!(svc_config::standard_webhooks_key("whsec_%%%").is_err());
        assert!(svc_config::standard_webhooks_key("whsec_").is_err());
        assert_eq!(svc_config::standard_webhooks_key("whsec_AAAA").unwrap(), [0, 0, 0]);
        assert_eq!(svc_config::standard_webhooks_key("whsec_AAA").unwrap(), [0, 0], "padding is optional");
    }

    #[test]
    fn verify_rejects_tampering() {
        assert!(!verify(b"It's a Secret to Everybody", b"Hello, World?", GITHUB));
        assert!(!verify(b"another secret", b"Hello, World!", GITHUB));
        assert!(!verify(b"It's a Secret to Everybody", b"Hello, World!", &GITHUB.to_uppercase()));
        assert!(!verify(b"It's a Secret to Everybody", b"Hello, World!", &GITHUB[7..]));
    }
}
