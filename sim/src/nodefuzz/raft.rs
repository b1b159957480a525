//! A minimal protobuf encoder for raft-rs's `eraftpb::Message` and `Entry` (the fields a fake
//! peer needs), so that forged Raft traffic gets past decoding and addressing into raft-rs
//! itself. Field numbers are those of raft-proto 0.7's `eraftpb.proto`.

use narad_core::NodeId;

use super::input::RaftSel;

const WIRE_VARINT: u64 = 0;
const WIRE_LEN: u64 = 2;

/// Encodes `sel` as a message from `from` to `to`; `commands` are the entries' data.
pub fn encode_message(sel: &RaftSel, from: NodeId, to: NodeId, commands: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint_field(&mut out, 1, u64::from(sel.msg_type));
    put_varint_field(&mut out, 2, u64::from(to.0));
    put_varint_field(&mut out, 3, u64::from(from.0));
    put_varint_field(&mut out, 4, u64::from(sel.term));
    put_varint_field(&mut out, 5, u64::from(sel.log_term));
    put_varint_field(&mut out, 6, u64::from(sel.index));
    for (i, ((term, _), data)) in sel.entries.iter().zip(commands).enumerate() {
        let index = u64::from(sel.index) + 1 + i as u64;
        put_len_field(&mut out, 7, &encode_entry(u64::from(*term), index, data));
    }
    put_varint_field(&mut out, 8, u64::from(sel.commit));
    put_varint_field(&mut out, 10, u64::from(sel.reject));
    out
}

/// A normal entry (type 0, left at its default) with `term`, `index` and `data`.
fn encode_entry(term: u64, index: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint_field(&mut out, 2, term);
    put_varint_field(&mut out, 3, index);
    put_len_field(&mut out, 4, data);
    out
}

fn put_varint_field(out: &mut Vec<u8>, field: u64, value: u64) {
    if value != 0 {
        put_varint(out, field << 3 | WIRE_VARINT);
        put_varint(out, value);
    }
}

fn put_len_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, field << 3 | WIRE_LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_encode_as_protobuf() {
        let mut out = Vec::new();
        put_varint(&mut out, 300);
        assert_eq!(out, [0xAC, 0x02]);
        let sel = RaftSel {
            msg_type: 8,
            term: 3,
            log_term: 0,
            index: 0,
            commit: 0,
            reject: false,
            entries: Vec::new(),
        };
        // msg_type = 8 (heartbeat), to = 1, from = 2, term = 3.
        assert_eq!(encode_message(&sel, NodeId(2), NodeId(1), &[]), [8, 8, 16, 1, 24, 2, 32, 3]);
    }
}
