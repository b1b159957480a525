//! Whole-node tests of the core, driven by a small in-memory runtime (`harness`).

mod harness;
mod node_flow;
