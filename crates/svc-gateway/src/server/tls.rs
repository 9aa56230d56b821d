//! TLS termination (`server.tls`): the certificate chain and private key read from their PEM files into a rustls
//! acceptor (ring, TLS 1.2 and 1.3) offering HTTP/2 and HTTP/1.1 by ALPN. A connection's handshake must end within
//! `header_read_timeout`, as a plain connection's first request must; requests over TLS carry [`OverTls`].

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use svc_config::TlsFiles;
use tokio_rustls::TlsAcceptor;

/// The extension of a request that came over the gateway's own TLS (the dashboard's session cookie is then
/// `Secure`).
#[derive(Debug, Clone, Copy)]
pub struct OverTls;

/// Why the certificate or key cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file cannot be read or holds no certificate.
    #[error("server.tls.cert_file `{path}`: {why}")]
    Cert {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The key file cannot be read or holds no private key.
    #[error("server.tls.key_file `{path}`: {why}")]
    Key {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The two do not make a server identity (the key is not the certificate's, say).
    #[error("server.tls: {0}")]
    Identity(String),
}

/// The acceptor of `files`.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let cert = |why: String| TlsError::Cert { path: files.cert_file.display().to_string(), why };
    let chain = CertificateDer::pem_file_iter(&files.cert_file)
        .map_err(|e| cert(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert("no certificate in it (expected PEM `-----BEGIN CERTIFICATE-----` blocks)".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key_file)
        .map_err(|e| TlsError::Key { path: files.key_file.display().to_string(), why: e.to_string() })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Identity(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Identity(format!("the certificate and the key do not go together: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &std::path::Path, cert: &str, key: &str) -> TlsFiles {
        let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_file, cert).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&key_file, key).unwrap_or_else(|e| panic!("{e}"));
        TlsFiles { cert_file, key_file }
    }

    #[test]
    fn a_certificate_and_its_key_serve_and_mismatches_are_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let a = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap_or_else(|e| panic!("{e}"));
        let b = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap_or_else(|e| panic!("{e}"));
        assert!(acceptor(&files(dir.path(), &a.cert.pem(), &a.key_pair.serialize_pem())).is_ok());
        let wrong = acceptor(&files(dir.path(), &a.cert.pem(), &b.key_pair.serialize_pem())).err();
        assert!(matches!(wrong, Some(TlsError::Identity(_))), "{wrong:?}");
        let empty = acceptor(&files(dir.path(), "not a certificate\n", &a.key_pair.serialize_pem())).err();
        assert!(empty.as_ref().is_some_and(|e| e.to_string().contains("no certificate")), "{empty:?}");
        let no_key = acceptor(&files(dir.path(), &a.cert.pem(), "")).err();
        assert!(matches!(no_key, Some(TlsError::Key { .. })), "{no_key:?}");
    }
}
