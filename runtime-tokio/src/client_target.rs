//! `--url`, `--ca`, `--user`: the node a client command talks to, and how. A leaf shared by the
//! command line's definitions (`cli`) and the commands that are clients of a running node
//! (`client`, `cluster_cli`, `follow`, `sub`, `bench`), so neither has to import the other.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use clap::Args;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The header that tells the server's browser guard a request comes from a program.
const CLIENT_HEADER: &str = "x-narad-client";

/// The default address of a node's HTTP API.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7942";

/// The node a client command talks to.
#[derive(Debug, Args)]
pub struct Target {
    /// Base URL of the node's HTTP API (http:// or https://).
    #[arg(long, value_name = "URL", env = "NARAD_URL", default_value = DEFAULT_URL, global = true)]
    pub url: String,
    /// For https:// URLs: trust the certificates in this PEM file (a CA, or the node's own
    /// self-signed certificate, which must not be marked as a CA: openssl req -x509 needs
    /// -addext basicConstraints=critical,CA:FALSE) instead of the built-in public roots.
    #[arg(long, value_name = "PEM", env = "NARAD_CA", global = true)]
    pub ca: Option<PathBuf>,
    /// HTTP Basic credentials sent with every request, as NAME:PASSWORD.
    #[arg(long, value_name = "NAME:PASSWORD", env = "NARAD_USER", global = true,
          value_parser = parse_user, hide_env_values = true)]
    pub user: Option<String>,
}

impl Target {
    /// The base URL without a trailing slash.
    pub fn base(&self) -> &str {
        self.url.trim_end_matches('/')
    }

    /// A blocking client for this target: non-2xx answers are answers (not errors), each
    /// request bounded by `timeout`, no proxy, `--ca` trusted, `--user` sent on every request.
    pub fn agent(&self, timeout: Duration) -> anyhow::Result<ureq::Agent> {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .proxy(None);
        if let Some(certs) = self.ca_certs()? {
            let certs = certs.iter().map(|c| ureq::tls::Certificate::from_der(c).to_owned());
            let roots = ureq::tls::RootCerts::Specific(Arc::new(certs.collect()));
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let authorization = match self.authorization() {
            Some(value) => Some(ureq::http::HeaderValue::from_str(&value).context("--user")?),
            None => None,
        };
        // Every request says it comes from a program (the server's browser guard, with access
        // control on, refuses a change that does not), and carries `--user` when given.
        config = config.middleware(
            move |mut request: ureq::http::Request<ureq::SendBody>,
                  next: ureq::middleware::MiddlewareNext| {
                let headers = request.headers_mut();
                headers.insert(CLIENT_HEADER, ureq::http::HeaderValue::from_static("narad-cli"));
                if let Some(value) = &authorization {
                    headers.insert(ureq::http::header::AUTHORIZATION, value.clone());
                }
                next.handle(request)
            },
        );
        Ok(config.build().into())
    }

    /// The certificates of `--ca`, if given; an unreadable file or one without a PEM
    /// certificate is an error naming it.
    pub fn ca_certs(&self) -> anyhow::Result<Option<Vec<CertificateDer<'static>>>> {
        let Some(path) = &self.ca else { return Ok(None) };
        let pem =
            std::fs::read(path).with_context(|| format!("reading --ca {}", path.display()))?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("--ca {}: not PEM certificates", path.display()))?;
        if certs.is_empty() {
            bail!("--ca {}: no PEM certificate (BEGIN CERTIFICATE) in it", path.display());
        }
        Ok(Some(certs))
    }

    /// The `Authorization` header value of `--user`: `Basic <base64(NAME:PASSWORD)>`.
    pub fn authorization(&self) -> Option<String> {
        let user = self.user.as_ref()?;
        Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user)))
    }
}

/// `NAME:PASSWORD`, with a non-empty name.
fn parse_user(text: &str) -> Result<String, String> {
    match text.split_once(':') {
        Some((name, _)) if !name.is_empty() => Ok(text.to_string()),
        _ => Err("expected NAME:PASSWORD".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(user: Option<&str>) -> Target {
        Target { url: DEFAULT_URL.to_string(), ca: None, user: user.map(str::to_string) }
    }

    #[test]
    fn basic_credentials_are_encoded_once() {
        assert_eq!(target(None).authorization(), None);
        // RFC 7617's example.
        let header = target(Some("Aladdin:open sesame")).authorization();
        assert_eq!(header.as_deref(), Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="));
        assert!(parse_user("alice:").is_ok(), "an empty password is the server's to refuse");
        assert!(parse_user(":secret").is_err());
        assert!(parse_user("alice").is_err());
    }

    /// The agent sends the credentials on every request (seen by a bare listener).
    #[test]
    fn the_agent_sends_basic_credentials() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
            String::from_utf8_lossy(&head).to_ascii_lowercase()
        });
        let target = Target { url, ..target(Some("Aladdin:open sesame")) };
        let agent = target.agent(Duration::from_secs(30)).expect("an agent");
        let response = agent.get(format!("{}/healthz", target.base())).call().expect("answer");
        assert_eq!(response.status().as_u16(), 204);
        let head = server.join().expect("listener");
        assert!(head.contains("authorization: basic qwxhzgrpbjpvcgvuihnlc2ftzq=="), "{head}");
    }

    #[test]
    fn a_bad_ca_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "no certificate here").expect("write");
        let target = Target { ca: Some(path), ..target(None) };
        let error = format!("{:#}", target.ca_certs().expect_err("no certificate"));
        assert!(error.contains("ca.pem"), "{error}");
    }
}
