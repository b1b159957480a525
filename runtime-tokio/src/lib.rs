//! `narad` as a library: every module of the production runtime, so that the binary (`main.rs`)
//! is a thin entry point and the fuzz targets (`fuzz/`) can reach the HTTP-facing parsers and
//! the node RPC framing, and the simulator's second tier (`narad-sim --tier runtime`) can run a
//! node on simulated seams (`env`, `server::run_node`). Only what those call is public; the
//! `fuzzing` module is not an API (it may change with any commit).

pub mod auth;
pub mod bench;
pub mod cli;
pub mod client;
mod client_target;
pub mod clock;
pub mod cluster_cli;
pub mod datadir;
pub mod dev;
mod disk;
mod driver;
pub mod env;
mod follow;
mod http;
pub mod http_server;
pub mod password;
mod payload_json;
mod quota_gate;
pub mod server;
pub mod sub;
mod transport;
pub mod user_cli;
mod user_directory;

pub use transport::{ClusterKey, TransportEnv};

/// The parsers the fuzz targets in `fuzz/` drive, re-exported from their private modules.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::auth::basic::{
        MAX_AUTHORIZATION_BYTES, header_value as basic_header_value, parse as parse_basic,
    };
    pub use crate::http::ApiError;
    pub use crate::http::body::read_limited;
    pub use crate::http::produce::decode_batch;
    pub use crate::http::query::{
        ConsumeParams, ProduceParams, consume_params, duration_ms, produce_params,
    };
    pub use crate::payload_json::{key_from_json, payload_from_json, write_record};
    pub use crate::transport::auth::{
        ACCEPTOR_HELLO_BYTES, ACCEPTOR_LABEL, AcceptorHello, AuthError, ClusterKey,
        DIALER_HELLO_BYTES, DIALER_LABEL, DialerHello, Transcript,
    };
    pub use crate::transport::frame::{
        FrameError, MESSAGE_BYTES_MAX, decode as decode_frame, header,
    };
}
