//! Fuzzes the metastore's Raft log and snapshot recovery (`core/src/meta/storage.rs` `scan_log`,
//! `newest_snap_record`; `core/src/meta/recovery.rs` through `Metastore::recover`): arbitrary
//! file bytes never panic (recovery answers or refuses), and a sound log (optionally continuing
//! a sound snapshot) followed by a torn tail or zero fill always recovers, to the same entries.
#![no_main]

use arbitrary::Unstructured;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use narad_core::meta::state::MetaState;
use narad_core::meta::storage::{
    SnapRecord, encode_snap_record, newest_snap_record, put_entries, put_header, scan_log,
};
use narad_core::meta::{MetaConfig, Metastore, encode_command};
use narad_core::{Instant, NodeId};
use narad_fuzz::values;
use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};

fuzz_target!(|data: &[u8]| {
    arbitrary_files_never_panic(data);
    if let Ok(files) = sound_files(&mut Unstructured::new(data)) {
        sound_files_with_a_torn_tail_recover(&files);
    }
});

fn config() -> MetaConfig {
    MetaConfig::new(NodeId(1), vec![NodeId(1)], 7)
}

fn recover(log: Option<&Bytes>, snapshot: Option<&Bytes>) -> Result<u64, String> {
    Metastore::<u64>::recover(config(), Instant(0), log, snapshot)
        .map(|meta| meta.applied_index())
        .map_err(|e| e.to_string())
}

/// The input as `[log length: u16 LE][log file][snapshot file]`.
fn arbitrary_files_never_panic(data: &[u8]) {
    let _ = scan_log(data);
    let _ = newest_snap_record(data);
    let Some((len, rest)) = data.split_first_chunk::<2>() else { return };
    let split = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let log = Bytes::copy_from_slice(&rest[..split]);
    let snapshot = Bytes::copy_from_slice(&rest[split..]);
    let _ = recover(Some(&log), Some(&snapshot));
    let _ = recover(Some(&log), None);
}

/// Files as a crash leaves them: sound frames, then a tail cut short or zero filled.
struct Files {
    log: Vec<u8>,
    sound_len: usize,
    snapshot: Option<Bytes>,
    tail: Vec<u8>,
}

fn sound_files(u: &mut Unstructured<'_>) -> arbitrary::Result<Files> {
    let (base, snapshot) = if u.arbitrary()? { snapshot(u)? } else { ((0, 0, 0), None) };
    let (seq, mut index, mut term) = base;
    let mut log = Vec::new();
    put_header(&mut log, seq);
    let mut hard_state = HardState { term, commit: index, ..HardState::default() };
    for _ in 0..u.int_in_range(0..=24u8)? {
        index += 1;
        term += u64::from(u.int_in_range(0..=1u8)?);
        let data = if u.arbitrary()? {
            Bytes::from(encode_command(&values::command(u, true)?))
        } else {
            Bytes::from(u.arbitrary::<Vec<u8>>()?)
        };
        let entry = Entry { index, term, data, ..Entry::default() };
        hard_state.term = term;
        hard_state.vote = 1;
        hard_state.commit = u.int_in_range(hard_state.commit..=index)?;
        let hs = u.arbitrary::<bool>()?.then_some(&hard_state);
        put_entries(&mut log, &[entry], hs);
    }
    let sound_len = log.len();
    let tail = torn_tail(u)?;
    Ok(Files { log, sound_len, snapshot, tail })
}

/// A sound snapshot record (seq 1) at some index and term, and where the log continues it.
fn snapshot(u: &mut Unstructured<'_>) -> arbitrary::Result<((u64, u64, u64), Option<Bytes>)> {
    let index = u64::from(u.int_in_range(1..=1000u16)?);
    let term = u64::from(u.int_in_range(1..=50u8)?);
    let mut metadata = SnapshotMetadata { index, term, ..SnapshotMetadata::default() };
    metadata.set_conf_state(ConfState { voters: vec![1], ..ConfState::default() });
    let record = SnapRecord {
        seq: 1,
        metadata,
        hard_state: HardState { term, vote: 1, commit: index, ..HardState::default() },
        image: Bytes::from(MetaState::new().encode()),
        entries: Vec::new(),
    };
    Ok(((1, index, term), Some(Bytes::from(encode_snap_record(&record)))))
}

/// A torn tail: the start of one more entry frame cut short, or zero fill, or nothing.
fn torn_tail(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => Vec::new(),
        1 => vec![0; usize::from(u.int_in_range(1..=600u16)?)],
        _ => {
            let entry = Entry {
                index: 1 << 40,
                term: 1,
                data: Bytes::from(vec![9; 40]),
                ..Entry::default()
            };
            let mut frame = Vec::new();
            put_entries(&mut frame, &[entry], None);
            let cut = u.int_in_range(1..=frame.len() - 1)?;
            frame.truncate(cut);
            frame
        }
    })
}

fn sound_files_with_a_torn_tail_recover(files: &Files) {
    let sound = Bytes::copy_from_slice(&files.log[..files.sound_len]);
    let mut torn = files.log.clone();
    torn.extend_from_slice(&files.tail);
    let torn = Bytes::from(torn);
    let snapshot = files.snapshot.as_ref();
    let clean = recover(Some(&sound), snapshot);
    assert!(clean.is_ok(), "a sound log was refused: {clean:?}");
    let after_crash = recover(Some(&torn), snapshot);
    assert_eq!(after_crash, clean, "a torn tail changed the outcome");
    assert!(recover(None, snapshot).is_ok(), "a missing log was refused");
}
