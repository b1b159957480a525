//! Fuzzes the data directory's file naming (`core/src/io.rs` `FileId::parse`): a path that
//! parses is the one name of its file (`parse(p) == Some(f)` implies `f.relative_path() == p`,
//! so two names never map to one file), and every file's name parses back to it.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use narad_core::{FileId, PartitionKey, TopicId};

fuzz_target!(|data: &[u8]| {
    if let Ok(path) = std::str::from_utf8(data)
        && let Some(file) = FileId::parse(path)
    {
        assert_eq!(file.relative_path(), path, "{path:?} parsed as {file:?}");
    }
    if let Ok(file) = arbitrary_file(&mut Unstructured::new(data)) {
        assert_eq!(FileId::parse(&file.relative_path()), Some(file));
    }
});

fn arbitrary_file(u: &mut Unstructured<'_>) -> arbitrary::Result<FileId> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => FileId::WalSegment { first_seq: u.arbitrary()? },
        1 => FileId::WalCheckpoint,
        2 => FileId::PartitionSegment {
            key: PartitionKey { topic: TopicId(u.arbitrary()?), partition: u.arbitrary()? },
            base: u.arbitrary()?,
        },
        3 => FileId::MetaRaftLog,
        4 => FileId::PartitionSeal {
            key: PartitionKey { topic: TopicId(u.arbitrary()?), partition: u.arbitrary()? },
            base: u.arbitrary()?,
        },
        _ => FileId::MetaSnapshot,
    })
}
