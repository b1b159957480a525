//! Fuzzes the cluster handshake's messages (`runtime-tokio/src/transport/auth.rs`): a hello that
//! parses is the exact encoding of what it parsed to, foreign magics and versions are refused, and
//! a proof verifies only if it is the one the same key makes for the same role and transcript.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use narad::fuzzing::{
    ACCEPTOR_HELLO_BYTES, ACCEPTOR_LABEL, AcceptorHello, ClusterKey, DIALER_HELLO_BYTES,
    DIALER_LABEL, DialerHello, Transcript,
};
use narad_core::NodeId;

fuzz_target!(|data: &[u8]| {
    hellos_are_canonical(data);
    if let Ok(proof) = Proof::arbitrary(&mut Unstructured::new(data)) {
        proofs_bind_everything(&proof);
    }
});

fn hellos_are_canonical(data: &[u8]) {
    if let Some(hello) = data.first_chunk::<DIALER_HELLO_BYTES>() {
        let parsed = DialerHello::decode(hello);
        assert_eq!(parsed.is_ok(), hello.starts_with(b"NRDC\x01"));
        if let Ok(parsed) = parsed {
            assert_eq!(parsed.encode(), hello);
        }
    }
    if let Some(answer) = data.first_chunk::<ACCEPTOR_HELLO_BYTES>() {
        let parsed = AcceptorHello::decode(answer);
        assert_eq!(parsed.is_ok(), answer.starts_with(b"NRDS\x01"));
        if let Ok(parsed) = parsed {
            assert_eq!(parsed.encode(), answer);
        }
    }
}

/// A key, a transcript, a claimed proof, and a transcript field to flip.
#[derive(Arbitrary, Debug)]
struct Proof {
    secret: [u8; 20],
    exporter: [u8; 32],
    dialer: u32,
    acceptor: u32,
    dialer_nonce: [u8; 32],
    acceptor_nonce: [u8; 32],
    claimed: Vec<u8>,
    flip: u8,
}

fn transcript(p: &Proof) -> Transcript {
    Transcript {
        exporter: p.exporter,
        dialer: NodeId(p.dialer),
        acceptor: NodeId(p.acceptor),
        dialer_nonce: p.dialer_nonce,
        acceptor_nonce: p.acceptor_nonce,
    }
}

fn proofs_bind_everything(p: &Proof) {
    let key = ClusterKey::from_secret(&p.secret).expect("20 bytes is long enough");
    let transcript = transcript(p);
    let tag = key.tag(DIALER_LABEL, &transcript);
    assert!(key.verify(DIALER_LABEL, &transcript, tag.as_ref()));
    assert!(!key.verify(ACCEPTOR_LABEL, &transcript, tag.as_ref()), "roles are bound");
    let claimed_ok = key.verify(DIALER_LABEL, &transcript, &p.claimed);
    assert_eq!(claimed_ok, p.claimed == tag.as_ref(), "only the exact tag verifies");
    let mut changed = crate::transcript(p);
    match p.flip % 5 {
        0 => changed.exporter[0] ^= 1,
        1 => changed.dialer.0 ^= 1,
        2 => changed.acceptor.0 ^= 1,
        3 => changed.dialer_nonce[31] ^= 1,
        _ => changed.acceptor_nonce[0] ^= 1,
    }
    assert!(!key.verify(DIALER_LABEL, &changed, tag.as_ref()), "every field is bound");
}
