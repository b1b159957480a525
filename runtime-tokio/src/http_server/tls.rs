//! TLS on the client API (`narad serve --tls-cert PEM --tls-key PEM`): rustls with the ring
//! provider, TLS 1.2 and 1.3, ALPN `http/1.1`. The certificate is served through a resolver that
//! holds the current one, so `reload` (on SIGHUP) swaps it for new handshakes while connections
//! already open keep theirs; a reload that fails is logged and the old certificate kept.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::{Context, bail};
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The ALPN name of HTTP/2 over TLS.
pub(super) const ALPN_HTTP2: &[u8] = b"h2";

/// The server's TLS: the files it was started with and the certificate it serves now.
#[derive(Clone)]
pub struct Tls {
    cert_path: PathBuf,
    key_path: PathBuf,
    resolver: Arc<Resolver>,
    acceptor: TlsAcceptor,
}

/// Serves the current certificate to every handshake.
#[derive(Debug)]
struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }
}

impl Tls {
    /// Loads the certificate chain and key; an unreadable or bad file is an error naming it.
    pub fn load(cert_path: &Path, key_path: &Path) -> anyhow::Result<Tls> {
        let key = certified_key(cert_path, key_path)?;
        let resolver = Arc::new(Resolver { current: RwLock::new(Arc::new(key)) });
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = [&rustls::version::TLS13, &rustls::version::TLS12];
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        // A client that offers h2 gets HTTP/2 (`conn`); one that offers nothing, HTTP/1.1.
        config.alpn_protocols = vec![ALPN_HTTP2.to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Loads TLS when both files are given, none when neither is.
    pub fn from_flags(cert: Option<&Path>, key: Option<&Path>) -> anyhow::Result<Option<Tls>> {
        match (cert, key) {
            (Some(cert), Some(key)) => Tls::load(cert, key).map(Some),
            (None, None) => Ok(None),
            (Some(_), None) => bail!("--tls-cert needs --tls-key (the certificate's private key)"),
            (None, Some(_)) => bail!("--tls-key needs --tls-cert (the certificate chain)"),
        }
    }

    pub(super) fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// Re-reads both files and serves the new certificate to new handshakes; on any error logs
    /// it and keeps serving the old one.
    pub fn reload(&self) {
        match certified_key(&self.cert_path, &self.key_path) {
            Ok(key) => {
                let mut current = self
                    .resolver
                    .current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                *current = Arc::new(key);
                tracing::info!(cert = %self.cert_path.display(), "TLS certificate reloaded");
            }
            Err(error) => tracing::error!(
                error = format!("{error:#}"),
                "TLS reload failed: still serving the previous certificate"
            ),
        }
    }
}

/// Reads a PEM certificate chain and a PEM private key and checks that they belong together.
fn certified_key(cert_path: &Path, key_path: &Path) -> anyhow::Result<CertifiedKey> {
    let pem = std::fs::read(cert_path)
        .with_context(|| format!("reading the TLS certificate {}", cert_path.display()))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: not a PEM certificate chain", cert_path.display()))?;
    if chain.is_empty() {
        bail!("{}: no PEM certificate (BEGIN CERTIFICATE) in it", cert_path.display());
    }
    let pem = std::fs::read(key_path)
        .with_context(|| format!("reading the TLS key {}", key_path.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .with_context(|| format!("{}: no PEM private key in it", key_path.display()))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider).with_context(|| {
        format!(
            "{} and {}: the key does not fit the certificate, or is of an unsupported kind",
            key_path.display(),
            cert_path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PEM text of one DER item (rcgen is built without its own PEM writer).
    fn pem(label: &str, der: &[u8]) -> String {
        use base64::Engine as _;
        let text = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> =
            text.as_bytes().chunks(64).map(|l| std::str::from_utf8(l).expect("ASCII")).collect();
        format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
    }

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let (cert_path, key_path) =
            (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&cert_path, pem("CERTIFICATE", cert.cert.der())).expect("write cert");
        std::fs::write(&key_path, pem("PRIVATE KEY", &cert.signing_key.serialize_der()))
            .expect("write key");
        (cert_path, key_path)
    }

    #[test]
    fn loads_a_pair_and_names_the_bad_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = write_pair(dir.path(), "a");
        assert!(Tls::load(&cert, &key).is_ok());
        let error = |cert: &Path, key: &Path| format!("{:#}", Tls::load(cert, key).err().unwrap());
        let missing = dir.path().join("missing.crt");
        assert!(error(&missing, &key).contains("missing.crt"));
        let garbage = dir.path().join("garbage.key");
        std::fs::write(&garbage, "not a key").expect("write");
        assert!(error(&cert, &garbage).contains("garbage.key"));
        let (_, other_key) = write_pair(dir.path(), "b");
        assert!(error(&cert, &other_key).contains("does not fit"), "{}", error(&cert, &other_key));
        assert!(Tls::from_flags(Some(&cert), None).is_err());
        assert!(Tls::from_flags(None, None).expect("no TLS").is_none());
    }

    #[test]
    fn a_bad_reload_keeps_the_old_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = write_pair(dir.path(), "a");
        let tls = Tls::load(&cert, &key).expect("loads");
        let served = || tls.resolver.current.read().expect("lock").cert[0].clone();
        let before = served();
        std::fs::write(&cert, "garbage").expect("write");
        tls.reload();
        assert_eq!(served(), before, "kept");
        let (new_cert, new_key) = write_pair(dir.path(), "b");
        std::fs::rename(&new_cert, &cert).expect("rename");
        std::fs::rename(&new_key, &key).expect("rename");
        tls.reload();
        assert_ne!(served(), before, "swapped");
    }
}
