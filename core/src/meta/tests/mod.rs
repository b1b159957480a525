//! Multi-node tests of the metastore in a small deterministic world (`harness`).

mod chaos;
mod cluster;
mod foreign;
mod harness;
mod persistence;
