//! QUIC endpoint configuration: TLS 1.3 with a self-signed certificate made at start-up, and QUIC
//! transport limits sized for node messages.
//!
//! TLS here provides encryption, integrity and a per-connection key schedule (exported for the
//! secret handshake of `auth`). It does not authenticate: every node's certificate is a fresh
//! throw-away one, so the dialer accepts any certificate — but still checks the handshake
//! signature, so the server holds the key of the certificate it sent. Who may talk is decided by
//! the cluster secret, proven over the exported keying material (see `auth`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use quinn::{ClientConfig, IdleTimeout, ServerConfig, TransportConfig, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::frame::FRAME_BYTES_MAX;

/// ALPN protocol id of node RPC.
const ALPN: &[u8] = b"narad-node/1";
/// The name every node's certificate carries (names are not checked: see the module header).
pub const SERVER_NAME: &str = "narad-node";
/// A connection with no traffic for this long is dead (keep-alives make silence mean death).
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Keep-alive period: well under the idle timeout.
const KEEP_ALIVE: Duration = Duration::from_secs(1);
/// Concurrent message streams a peer may have open towards us, once authenticated.
const STREAMS_MAX: u32 = 256;
/// Bytes a peer may have in flight towards us before it is authenticated: enough for the
/// handshake, so a stranger cannot make us buffer megabytes.
const HANDSHAKE_WINDOW_BYTES: u32 = 16 * 1024;

/// Client and server configurations for one node's endpoint.
pub fn configs() -> anyhow::Result<(ServerConfig, ClientConfig)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let transport = Arc::new(transport());
    let server = server(Arc::clone(&provider), Arc::clone(&transport))?;
    let client = client(provider, transport)?;
    Ok((server, client))
}

fn transport() -> TransportConfig {
    let frame = u32::try_from(FRAME_BYTES_MAX).expect("invariant: a frame fits in u32");
    let mut config = TransportConfig::default();
    config
        .max_idle_timeout(Some(IdleTimeout::try_from(IDLE_TIMEOUT).expect("5 s is in range")))
        .keep_alive_interval(Some(KEEP_ALIVE))
        // No message stream and a tiny window until the secret handshake is done
        // (`open_for_messages`); one bidirectional stream for that handshake.
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .max_concurrent_bidi_streams(VarInt::from_u32(1))
        .receive_window(VarInt::from_u32(HANDSHAKE_WINDOW_BYTES))
        .stream_receive_window(VarInt::from_u32(frame))
        .send_window(4 * u64::from(frame));
    config
}

/// Lets an authenticated peer send messages: stream credit, and a window for a few whole frames.
pub fn open_for_messages(conn: &quinn::Connection) {
    let frame = u32::try_from(FRAME_BYTES_MAX).expect("invariant: a frame fits in u32");
    conn.set_max_concurrent_uni_streams(VarInt::from_u32(STREAMS_MAX));
    conn.set_receive_window(VarInt::from_u32(4 * frame));
}

fn server(
    provider: Arc<CryptoProvider>,
    transport: Arc<TransportConfig>,
) -> anyhow::Result<ServerConfig> {
    let certified = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
        .context("generating the node's TLS certificate")?;
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with the ring provider")?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .context("installing the node's TLS certificate")?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.max_early_data_size = 0;
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .context("QUIC server TLS configuration")?;
    let mut config = ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(transport);
    Ok(config)
}

fn client(
    provider: Arc<CryptoProvider>,
    transport: Arc<TransportConfig>,
) -> anyhow::Result<ClientConfig> {
    let verifier = Arc::new(AnyCertificate(Arc::clone(&provider)));
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with the ring provider")?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .context("QUIC client TLS configuration")?;
    let mut config = ClientConfig::new(Arc::new(quic));
    config.transport_config(transport);
    Ok(config)
}

/// Accepts any certificate (peers are authenticated by the cluster secret, not by PKI) but still
/// verifies the TLS 1.3 handshake signature against it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // QUIC is TLS 1.3 only, and the configs allow nothing else.
        Err(rustls::Error::PeerIncompatible(rustls::PeerIncompatible::Tls12NotOffered))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
