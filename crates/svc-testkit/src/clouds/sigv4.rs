//! The fake Bedrock's check of AWS Signature Version 4, written from AWS's specification ("Create a signed AWS
//! API request") and independent of the gateway's signer (the `aws-sigv4` crate): the canonical request (the
//! path's segments URI-encoded once more, as every service but S3 wants; the sorted query; the signed headers,
//! trimmed; the body's SHA-256), the string to sign, the day's key derived from the secret, and a
//! constant-time comparison. A request dated more than five minutes from now is refused, as AWS does.

use axum::http::{HeaderMap, Method, Uri};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Credentials the fake accepts.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    pub region: String,
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// AWS's URI encoding: everything but the unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds since the epoch of an `x-amz-date` (`20261128T091500Z`).
fn epoch(amz_date: &str) -> Option<i64> {
    let n = |r: std::ops::Range<usize>| amz_date.get(r)?.parse::<i64>().ok();
    let secs = days(n(0..4)?, n(4..6)?, n(6..8)?) * 86_400 + n(9..11)? * 3600 + n(11..13)? * 60 + n(13..15)?;
    (amz_date.len() == 16 && amz_date.ends_with('Z')).then_some(secs)
}

/// Whether the request is signed by `keys` for `service`; the error says what is wrong, in AWS's words.
pub(crate) fn verify(
    keys: &Keys,
    service: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), String> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let auth = header("authorization").ok_or("Missing Authentication Token")?;
    let rest = auth.strip_prefix("AWS4-HMAC-SHA256 ").ok_or("Authorization header requires AWS4-HMAC-SHA256")?;
    let part = |name: &str| rest.split(", ").find_map(|p| p.strip_prefix(name));
    let credential = part("Credential=").ok_or("Authorization header requires 'Credential' parameter")?;
    let signed = part("SignedHeaders=").ok_or("Authorization header requires 'SignedHeaders' parameter")?;
    let signature = part("Signature=").ok_or("Authorization header requires 'Signature' parameter")?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, day, region, svc, "aws4_request"] = scope[..] else {
        return Err(format!("Credential should be scoped to a valid region, not '{credential}'"));
    };
    if key_id != keys.access_key_id {
        return Err("The security token included in the request is invalid.".into());
    }
    if region != keys.region || svc != service {
        return Err(format!("Credential should be scoped to correct service: '{service}' in region '{}'", keys.region));
    }
    let amz_date = header("x-amz-date").ok_or("Missing x-amz-date")?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    match epoch(amz_date) {
        Some(t) if (t - now).abs() <= 300 && amz_date.starts_with(day) => {}
        _ => return Err(format!("Signature expired or not yet valid: {amz_date} is not now")),
    }
    if let Some(token) = &keys.session_token {
        if header("x-amz-security-token") != Some(token) || !signed.split(';').any(|h| h == "x-amz-security-token") {
            return Err("The security token included in the request is invalid.".into());
        }
    }
    if !signed.split(';').any(|h| h == "host") {
        return Err("'Host' must be a signed header".into());
    }
    let path: Vec<String> = uri.path().split('/').map(encode).collect();
    let mut query: Vec<&str> = uri.query().unwrap_or_default().split('&').filter(|p| !p.is_empty()).collect();
    query.sort_unstable();
    let mut canonical_headers = String::new();
    for name in signed.split(';') {
        let values: Vec<String> =
            headers.get_all(name).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string()).collect();
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let payload = hex::encode(Sha256::digest(body));
    let canonical =
        format!("{method}\n{}\n{}\n{canonical_headers}\n{signed}\n{payload}", path.join("/"), query.join("&"));
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{day}/{region}/{service}/aws4_request\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{}", keys.secret_access_key).as_bytes(), day);
    for step in [region, service, "aws4_request"] {
        key = hmac(&key, step);
    }
    let expected = hex::encode(hmac(&key, &to_sign));
    let same = expected.len() == signature.len()
        && expected.bytes().zip(signature.bytes()).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0;
    if !same {
        return Err("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_encoding() {
        assert_eq!(epoch("19700101T000000Z"), Some(0));
        assert_eq!(epoch("20150830T123600Z"), Some(1_440_938_160));
        assert_eq!(encode("anthropic.claude-v2%3A1"), "anthropic.claude-v2%253A1");
    }

    /// AWS's own published example ("get-vanilla" of the SigV4 test suite): the key and the string to sign.
    #[test]
    fn the_derived_key_signs_as_aws_documents() {
        let mut key = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830");
        for step in ["us-east-1", "service", "aws4_request"] {
            key = hmac(&key, step);
        }
        let to_sign = "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\nbb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63";
        assert_eq!(
            hex::encode(hmac(&key, to_sign)),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }
}
