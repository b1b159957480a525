//! `--url`: the node a client command talks to. A leaf shared by the command line's definitions
//! (`cli`) and the commands that are clients of a running node (`client`, `cluster_cli`), so
//! neither has to import the other.

use clap::Args;

/// The default address of a node's HTTP API.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7942";

/// The node a client command talks to.
#[derive(Debug, Args)]
pub struct Target {
    /// Base URL of the node's HTTP API.
    #[arg(long, value_name = "URL", env = "NARAD_URL", default_value = DEFAULT_URL, global = true)]
    pub url: String,
}
