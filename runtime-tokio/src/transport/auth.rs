//! Cluster authentication: a node proves it knows the cluster secret before any of its messages
//! is accepted, and checks that its peer does too.
//!
//! TLS (QUIC's, with throw-away self-signed certificates) gives each connection encryption and a
//! unique key schedule, but no identity. Identity comes from a handshake on the connection's first
//! bidirectional stream, run by both sides before either accepts a message:
//!
//! ```text
//! dialer   -> acceptor: "NRDC" v1 | dialer id | acceptor id | dialer nonce (32 B)
//! acceptor -> dialer:   "NRDS" v1 | acceptor id | acceptor nonce (32 B)
//! dialer   -> acceptor: HMAC(K, "narad/v1 dialer"   | exporter | ids | nonces)
//! acceptor -> dialer:   HMAC(K, "narad/v1 acceptor" | exporter | ids | nonces)
//! ```
//!
//! `K` is HKDF-SHA256 of the secret; `exporter` is 32 bytes of TLS keying material exported from
//! this very connection (RFC 5705), so a proof cannot be replayed on another connection or relayed
//! by a man in the middle (each leg of a relay has its own exporter). Both node ids are inside the
//! MAC, so a proof made for one pair of nodes is worthless for another. The dialer proves first:
//! a stranger who connects to a node learns nothing derived from the secret before it is refused
//! (a dialer only ever talks to the addresses it was configured with).
//!
//! What this does not give: per-node identities. Any holder of the secret can claim any node id;
//! the secret is the cluster's trust boundary, as the spec asks.

use std::fmt;

use narad_core::NodeId;
use quinn::{Connection, ConnectionError, RecvStream, SendStream, VarInt};
use ring::{hkdf, hmac};

use crate::env::Entropy;

/// Shortest secret we accept: a guessable secret would let anyone who can reach a node's port
/// join the cluster.
pub const SECRET_BYTES_MIN: usize = 16;
/// Application close code: the peer failed authentication.
pub const CLOSE_REFUSED: VarInt = VarInt::from_u32(1);

const HANDSHAKE_VERSION: u8 = 1;
const DIALER_MAGIC: &[u8; 4] = b"NRDC";
const ACCEPTOR_MAGIC: &[u8; 4] = b"NRDS";
const NONCE_BYTES: usize = 32;
const TAG_BYTES: usize = 32;
/// Bytes of the dialer's hello.
pub const DIALER_HELLO_BYTES: usize = 4 + 1 + 4 + 4 + NONCE_BYTES;
/// Bytes of the acceptor's hello.
pub const ACCEPTOR_HELLO_BYTES: usize = 4 + 1 + 4 + NONCE_BYTES;
const KDF_SALT: &[u8] = b"narad cluster secret v1";
const KDF_INFO: &[u8] = b"narad connection proof key";
const EXPORTER_LABEL: &[u8] = b"EXPORTER-narad-cluster-auth-v1";
/// Label of the dialer's proof.
pub const DIALER_LABEL: &[u8] = b"narad/v1 dialer";
/// Label of the acceptor's proof.
pub const ACCEPTOR_LABEL: &[u8] = b"narad/v1 acceptor";
/// Labels of the keys a node's QUIC endpoint derives its stateless-reset tokens and its
/// connection ids from.
const RESET_LABEL: &[u8] = b"narad/v1 stateless reset";
const CID_LABEL: &[u8] = b"narad/v1 connection ids";

/// The key derived from the cluster secret. The secret itself is not kept.
#[derive(Clone)]
pub struct ClusterKey(hmac::Key);

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

/// The secret cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the cluster secret has {0} bytes; use at least {SECRET_BYTES_MIN} (e.g. 32 random bytes in hex)"
)]
pub struct WeakSecret(pub usize);

impl ClusterKey {
    /// Derives the key from the secret's bytes.
    pub fn from_secret(secret: &[u8]) -> Result<ClusterKey, WeakSecret> {
        if secret.len() < SECRET_BYTES_MIN {
            return Err(WeakSecret(secret.len()));
        }
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, KDF_SALT).extract(secret);
        let okm = prk
            .expand(&[KDF_INFO], hmac::HMAC_SHA256)
            .expect("invariant: 32 bytes is a valid HKDF-SHA256 output length");
        Ok(ClusterKey(hmac::Key::from(okm)))
    }

    /// The key node `me`'s QUIC endpoint makes stateless-reset tokens with: the same across its
    /// restarts, so that a peer whose packets reach the restarted endpoint on a connection the
    /// old one had is told at once that the connection is gone (a key drawn at random each
    /// start, quinn's default, leaves the peer waiting for its idle timeout). Secret to anyone
    /// without the cluster secret, as a reset key must be.
    pub fn reset_key(&self, me: NodeId) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, self.node_tag(RESET_LABEL, me).as_ref())
    }

    /// The key node `me`'s endpoint hashes its connection ids with: the same across restarts,
    /// so that the restarted endpoint recognises an old connection's id as one of its own and
    /// answers it with a stateless reset (a packet for an id it did not make is dropped).
    pub fn connection_id_key(&self, me: NodeId) -> u64 {
        let tag = self.node_tag(CID_LABEL, me);
        let bytes: [u8; 8] = tag.as_ref()[..8].try_into().expect("a SHA-256 tag has 32 bytes");
        u64::from_be_bytes(bytes)
    }

    fn node_tag(&self, label: &[u8], me: NodeId) -> hmac::Tag {
        let mut message = label.to_vec();
        message.extend_from_slice(&me.0.to_be_bytes());
        hmac::sign(&self.0, &message)
    }

    /// This side's proof over `transcript` for role `label`.
    pub fn tag(&self, label: &[u8], transcript: &Transcript) -> hmac::Tag {
        hmac::sign(&self.0, &transcript.message(label))
    }

    /// Constant-time check of a peer's proof.
    pub fn verify(&self, label: &[u8], transcript: &Transcript, tag: &[u8]) -> bool {
        hmac::verify(&self.0, &transcript.message(label), tag).is_ok()
    }
}

/// Everything both proofs cover.
pub struct Transcript {
    pub exporter: [u8; 32],
    pub dialer: NodeId,
    pub acceptor: NodeId,
    pub dialer_nonce: [u8; NONCE_BYTES],
    pub acceptor_nonce: [u8; NONCE_BYTES],
}

impl Transcript {
    /// The MAC'd message: the role's label, then every field.
    pub fn message(&self, label: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(label.len() + 32 + 8 + 2 * NONCE_BYTES);
        out.extend_from_slice(label);
        out.extend_from_slice(&self.exporter);
        out.extend_from_slice(&self.dialer.0.to_be_bytes());
        out.extend_from_slice(&self.acceptor.0.to_be_bytes());
        out.extend_from_slice(&self.dialer_nonce);
        out.extend_from_slice(&self.acceptor_nonce);
        out
    }
}

/// Why a handshake did not authenticate the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The peer's proof is wrong: it does not hold our cluster secret.
    #[error("peer failed to prove the cluster secret (wrong or missing NARAD_CLUSTER_SECRET)")]
    BadProof,
    /// The peer closed the connection with a reason (it refused us).
    #[error("refused by the peer: {0}")]
    RefusedByPeer(String),
    /// The peer is not who we expected, or not allowed to connect.
    #[error("{0}")]
    NotAllowed(String),
    /// The peer does not speak our handshake.
    #[error("handshake protocol error: {0}")]
    Protocol(String),
    /// The connection failed underneath.
    #[error("connection failed during the handshake: {0}")]
    Connection(String),
}

/// Dialer side: proves the secret to `peer` and checks its proof. On error the connection is
/// closed (with a reason the peer will log).
pub async fn dial(
    conn: &Connection,
    key: &ClusterKey,
    me: NodeId,
    peer: NodeId,
    entropy: &dyn Entropy,
) -> Result<(), AuthError> {
    let result = dial_inner(conn, key, me, peer, nonce(entropy)).await;
    if let Err(error) = &result {
        refuse(conn, error);
    }
    result
}

async fn dial_inner(
    conn: &Connection,
    key: &ClusterKey,
    me: NodeId,
    peer: NodeId,
    dialer_nonce: [u8; NONCE_BYTES],
) -> Result<(), AuthError> {
    let exporter = exporter(conn)?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| lost(conn, e))?;
    let hello = DialerHello { dialer: me, acceptor: peer, nonce: dialer_nonce };
    write(conn, &mut send, &hello.encode()).await?;

    let mut answer = [0u8; ACCEPTOR_HELLO_BYTES];
    read(conn, &mut recv, &mut answer).await?;
    let answer = AcceptorHello::decode(&answer)?;
    if answer.acceptor != peer {
        return Err(AuthError::NotAllowed(format!(
            "dialed node {} but node {} answered (check --peers)",
            peer.0, answer.acceptor.0
        )));
    }
    let transcript = Transcript {
        exporter,
        dialer: me,
        acceptor: peer,
        dialer_nonce,
        acceptor_nonce: answer.nonce,
    };
    write(conn, &mut send, key.tag(DIALER_LABEL, &transcript).as_ref()).await?;
    let mut proof = [0u8; TAG_BYTES];
    read(conn, &mut recv, &mut proof).await?;
    if !key.verify(ACCEPTOR_LABEL, &transcript, &proof) {
        return Err(AuthError::BadProof);
    }
    let _ = send.finish(); // The handshake stream is done; the connection stays.
    Ok(())
}

/// Acceptor side: reads the dialer's hello, asks `allowed` whether that node may connect, and
/// checks its proof before proving ours. Returns the dialer's id. On error the connection is
/// closed with a reason.
pub async fn accept(
    conn: &Connection,
    key: &ClusterKey,
    me: NodeId,
    allowed: impl Fn(NodeId) -> Result<(), String>,
    entropy: &dyn Entropy,
) -> Result<NodeId, AuthError> {
    let result = accept_inner(conn, key, me, allowed, nonce(entropy)).await;
    if let Err(error) = &result {
        refuse(conn, error);
    }
    result
}

async fn accept_inner(
    conn: &Connection,
    key: &ClusterKey,
    me: NodeId,
    allowed: impl Fn(NodeId) -> Result<(), String>,
    acceptor_nonce: [u8; NONCE_BYTES],
) -> Result<NodeId, AuthError> {
    let exporter = exporter(conn)?;
    let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| lost(conn, e))?;
    let mut hello = [0u8; DIALER_HELLO_BYTES];
    read(conn, &mut recv, &mut hello).await?;
    let hello = DialerHello::decode(&hello)?;
    let dialer = hello.dialer;
    if hello.acceptor != me {
        return Err(AuthError::NotAllowed(format!(
            "node {} dialed node {} but reached node {} (check --peers)",
            dialer.0, hello.acceptor.0, me.0
        )));
    }
    allowed(dialer).map_err(AuthError::NotAllowed)?;
    let answer = AcceptorHello { acceptor: me, nonce: acceptor_nonce };
    write(conn, &mut send, &answer.encode()).await?;

    let transcript =
        Transcript { exporter, dialer, acceptor: me, dialer_nonce: hello.nonce, acceptor_nonce };
    let mut proof = [0u8; TAG_BYTES];
    read(conn, &mut recv, &mut proof).await?;
    if !key.verify(DIALER_LABEL, &transcript, &proof) {
        return Err(AuthError::BadProof);
    }
    write(conn, &mut send, key.tag(ACCEPTOR_LABEL, &transcript).as_ref()).await?;
    let _ = send.finish();
    Ok(dialer)
}

/// Closes the connection with the reason the peer should log (nothing for connection failures:
/// the connection is already gone).
fn refuse(conn: &Connection, error: &AuthError) {
    let reason: &[u8] = match error {
        AuthError::BadProof => b"cluster secret mismatch",
        AuthError::NotAllowed(_) => b"node not allowed (check --node-id and --peers)",
        AuthError::Protocol(_) => b"handshake protocol error",
        AuthError::RefusedByPeer(_) | AuthError::Connection(_) => return,
    };
    conn.close(CLOSE_REFUSED, reason);
}

/// The dialer's first message: who it is, whom it means to reach, and its nonce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DialerHello {
    pub dialer: NodeId,
    pub acceptor: NodeId,
    pub nonce: [u8; NONCE_BYTES],
}

impl DialerHello {
    /// The hello's bytes: `"NRDC" v1 | dialer id | acceptor id | nonce`.
    pub fn encode(&self) -> Vec<u8> {
        let mut hello = Vec::with_capacity(DIALER_HELLO_BYTES);
        hello.extend_from_slice(DIALER_MAGIC);
        hello.push(HANDSHAKE_VERSION);
        hello.extend_from_slice(&self.dialer.0.to_be_bytes());
        hello.extend_from_slice(&self.acceptor.0.to_be_bytes());
        hello.extend_from_slice(&self.nonce);
        hello
    }

    /// Parses a hello read from the handshake stream.
    pub fn decode(hello: &[u8; DIALER_HELLO_BYTES]) -> Result<DialerHello, AuthError> {
        check_magic(hello, DIALER_MAGIC)?;
        Ok(DialerHello {
            dialer: node_at(hello, 5),
            acceptor: node_at(hello, 9),
            nonce: hello[13..].try_into().expect("invariant: 32 bytes"),
        })
    }
}

/// The acceptor's answer: who it is and its nonce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptorHello {
    pub acceptor: NodeId,
    pub nonce: [u8; NONCE_BYTES],
}

impl AcceptorHello {
    /// The answer's bytes: `"NRDS" v1 | acceptor id | nonce`.
    pub fn encode(&self) -> Vec<u8> {
        let mut answer = Vec::with_capacity(ACCEPTOR_HELLO_BYTES);
        answer.extend_from_slice(ACCEPTOR_MAGIC);
        answer.push(HANDSHAKE_VERSION);
        answer.extend_from_slice(&self.acceptor.0.to_be_bytes());
        answer.extend_from_slice(&self.nonce);
        answer
    }

    /// Parses an answer read from the handshake stream.
    pub fn decode(answer: &[u8; ACCEPTOR_HELLO_BYTES]) -> Result<AcceptorHello, AuthError> {
        check_magic(answer, ACCEPTOR_MAGIC)?;
        Ok(AcceptorHello {
            acceptor: node_at(answer, 5),
            nonce: answer[9..].try_into().expect("invariant: 32 bytes"),
        })
    }
}

/// The big-endian node id at `pos` of a hello.
fn node_at(bytes: &[u8], pos: usize) -> NodeId {
    NodeId(u32::from_be_bytes(bytes[pos..pos + 4].try_into().expect("invariant: 4 bytes")))
}

fn check_magic(hello: &[u8], magic: &[u8; 4]) -> Result<(), AuthError> {
    if &hello[..4] != magic {
        return Err(AuthError::Protocol("not a narad node handshake".into()));
    }
    if hello[4] != HANDSHAKE_VERSION {
        return Err(AuthError::Protocol(format!(
            "handshake version {} (this node speaks {HANDSHAKE_VERSION})",
            hello[4]
        )));
    }
    Ok(())
}

fn exporter(conn: &Connection) -> Result<[u8; 32], AuthError> {
    let mut out = [0u8; 32];
    conn.export_keying_material(&mut out, EXPORTER_LABEL, b"")
        .map_err(|_| AuthError::Protocol("TLS keying material unavailable".into()))?;
    Ok(out)
}

fn nonce(entropy: &dyn Entropy) -> [u8; NONCE_BYTES] {
    let mut out = [0u8; NONCE_BYTES];
    entropy.fill(&mut out);
    out
}

async fn write(conn: &Connection, send: &mut SendStream, bytes: &[u8]) -> Result<(), AuthError> {
    send.write_all(bytes).await.map_err(|e| match e {
        quinn::WriteError::ConnectionLost(e) => lost(conn, e),
        other => AuthError::Connection(other.to_string()),
    })
}

async fn read(conn: &Connection, recv: &mut RecvStream, out: &mut [u8]) -> Result<(), AuthError> {
    recv.read_exact(out).await.map_err(|e| match e {
        quinn::ReadExactError::ReadError(quinn::ReadError::ConnectionLost(e)) => lost(conn, e),
        quinn::ReadExactError::FinishedEarly(_) => {
            AuthError::Protocol("handshake stream ended early".into())
        }
        quinn::ReadExactError::ReadError(other) => AuthError::Connection(other.to_string()),
    })
}

/// Describes a lost connection; a close by the peer carries its reason.
fn lost(conn: &Connection, error: ConnectionError) -> AuthError {
    match conn.close_reason().unwrap_or(error) {
        ConnectionError::ApplicationClosed(close) if close.error_code == CLOSE_REFUSED => {
            AuthError::RefusedByPeer(String::from_utf8_lossy(&close.reason).into_owned())
        }
        other => AuthError::Connection(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript(nonce_byte: u8) -> Transcript {
        Transcript {
            exporter: [7; 32],
            dialer: NodeId(1),
            acceptor: NodeId(2),
            dialer_nonce: [nonce_byte; NONCE_BYTES],
            acceptor_nonce: [9; NONCE_BYTES],
        }
    }

    #[test]
    fn a_proof_verifies_only_with_the_same_secret_label_and_transcript() {
        let key = ClusterKey::from_secret(b"correct horse battery staple").expect("long enough");
        let other = ClusterKey::from_secret(b"correct horse battery stapler").expect("long enough");
        let tag = key.tag(DIALER_LABEL, &transcript(1));
        assert!(key.verify(DIALER_LABEL, &transcript(1), tag.as_ref()));
        assert!(!other.verify(DIALER_LABEL, &transcript(1), tag.as_ref()));
        assert!(!key.verify(ACCEPTOR_LABEL, &transcript(1), tag.as_ref()), "roles differ");
        assert!(!key.verify(DIALER_LABEL, &transcript(2), tag.as_ref()), "nonce differs");
        let mut swapped = transcript(1);
        swapped.dialer = NodeId(3);
        assert!(!key.verify(DIALER_LABEL, &swapped, tag.as_ref()), "ids are bound");
    }

    #[test]
    fn hellos_round_trip_and_foreign_bytes_are_refused() {
        let hello = DialerHello { dialer: NodeId(1), acceptor: NodeId(2), nonce: [5; NONCE_BYTES] };
        let bytes: [u8; DIALER_HELLO_BYTES] = hello.encode().try_into().expect("sized");
        assert_eq!(DialerHello::decode(&bytes), Ok(hello));
        let answer = AcceptorHello { acceptor: NodeId(2), nonce: [6; NONCE_BYTES] };
        let mut bytes: [u8; ACCEPTOR_HELLO_BYTES] = answer.encode().try_into().expect("sized");
        assert_eq!(AcceptorHello::decode(&bytes), Ok(answer));
        bytes[4] = 2;
        assert!(matches!(AcceptorHello::decode(&bytes), Err(AuthError::Protocol(_))));
    }

    #[test]
    fn short_secrets_are_refused() {
        assert_eq!(ClusterKey::from_secret(b"short").map(|_| ()), Err(WeakSecret(5)));
        assert!(ClusterKey::from_secret(&[0u8; SECRET_BYTES_MIN]).is_ok());
    }
}
