//! The data directory at start-up: take an exclusive lock on it (two processes writing the same
//! WAL would destroy it), then read every file the node owns so `Node::recover` can rebuild its
//! state from their bytes. Files the core does not recognise are left alone.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::path::Path;

use anyhow::{Context, bail};
use bytes::Bytes;
use narad_core::FileId;

use crate::disk::create_dirs_durable;

/// Name of the lock file in the data directory (not a `FileId`, so recovery ignores it).
const LOCK_FILE: &str = "LOCK";

/// Holds the data directory's exclusive lock until dropped (or the process exits).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Creates the data directory if needed and locks it against a second `narad` process.
pub fn lock(data_dir: &Path) -> anyhow::Result<DataDirLock> {
    create_dirs_durable(data_dir)
        .with_context(|| format!("creating data directory {}", data_dir.display()))?;
    let path = data_dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(DataDirLock { _file: file }),
        Err(TryLockError::WouldBlock) => {
            bail!("data directory {} is in use by another narad process", data_dir.display())
        }
        Err(TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// Reads every file below `data_dir` that `FileId::parse` recognises, after making every directory
/// entry durable (the core's contract: the files it is handed must not vanish on a power loss; it
/// syncs their contents itself before trusting them).
pub fn load(data_dir: &Path) -> anyhow::Result<BTreeMap<FileId, Bytes>> {
    let mut files = BTreeMap::new();
    walk(data_dir, "", &mut files)?;
    Ok(files)
}

fn walk(dir: &Path, prefix: &str, files: &mut BTreeMap<FileId, Bytes>) -> anyhow::Result<()> {
    fs::File::open(dir)
        .and_then(|handle| handle.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))?;
    let entries = fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            tracing::warn!(path = %entry.path().display(), "ignoring non-UTF-8 file name");
            continue;
        };
        let relative = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let kind = entry.file_type().with_context(|| format!("stat {relative}"))?;
        if kind.is_dir() {
            walk(&entry.path(), &relative, files)?;
        } else if let Some(file) = FileId::parse(&relative) {
            let bytes = fs::read(entry.path())
                .with_context(|| format!("reading {}", entry.path().display()))?;
            files.insert(file, Bytes::from(bytes));
        } else if relative != LOCK_FILE {
            tracing::debug!(path = relative, "ignoring unrecognised file in the data directory");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_known_files_and_ignores_others() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        fs::create_dir_all(root.join("wal")).expect("mkdir");
        fs::create_dir_all(root.join("partitions/00000000000000000001")).expect("mkdir");
        fs::write(root.join("wal/00000000000000000000.wal"), b"seg").expect("write");
        fs::write(root.join("wal/checkpoint"), b"cp").expect("write");
        fs::write(root.join("partitions/00000000000000000001/00002.log"), b"p").expect("write");
        fs::write(root.join("wal/stray.tmp"), b"x").expect("write");
        let _lock = lock(root).expect("lock");
        let files = load(root).expect("load");
        let names: Vec<String> = files.keys().map(FileId::relative_path).collect();
        assert_eq!(
            names,
            [
                "wal/00000000000000000000.wal",
                "wal/checkpoint",
                "partitions/00000000000000000001/00002.log"
            ]
        );
        assert_eq!(files[&FileId::WalCheckpoint], Bytes::from_static(b"cp"));
    }

    #[test]
    fn second_lock_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = lock(dir.path()).expect("first lock");
        let err = lock(dir.path()).expect_err("second lock must fail");
        assert!(err.to_string().contains("in use"), "{err}");
        drop(first);
        lock(dir.path()).expect("lock again after release");
    }
}
