//! TLS for TCP listeners (`wss://`): loads a PEM certificate chain and private key into a
//! rustls acceptor (ring crypto, TLS 1.2 and 1.3, no client certificates).
//!
//! May touch: reads the certificate and key files it is given.

use std::io;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;

/// Builds the acceptor. Errors name the file and what is wrong with it.
pub fn acceptor(files: &TlsFiles) -> io::Result<TlsAcceptor> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|iter| iter.collect::<Result<_, _>>())
        .map_err(|e| bad(format!("--tls-cert {}: {e}", files.cert.display())))?;
    if certs.is_empty() {
        return Err(bad(format!(
            "--tls-cert {}: no PEM certificate found",
            files.cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad(format!("--tls-key {}: {e}", files.key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("TLS set-up: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            bad(format!(
                "--tls-cert {} / --tls-key {}: {e}",
                files.cert.display(),
                files.key.display()
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
