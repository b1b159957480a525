//! Whole-node and whole-cluster tests of the core, driven by small in-memory runtimes.

mod access_flow;
mod cluster_flow;
mod cluster_harness;
mod flush_pairing;
mod harness;
mod long_poll;
mod node_flow;
mod overload;
mod queue_flow;
mod queue_lag;
mod quota;
mod retention;
mod seal_flow;
mod topic_list;
mod topic_update;
