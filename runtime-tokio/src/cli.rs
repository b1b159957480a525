//! The command line: `narad serve` runs a node; `topic`, `produce` and `consume` are small
//! clients of a running node's HTTP API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand};

pub use crate::client_target::{DEFAULT_URL, Target};

/// Examples shown under `narad --help`.
const EXAMPLES: &str = "Examples:
  narad serve                                   # one node on 127.0.0.1:7942, data in ./narad-data
  narad dev --nodes 3                           # a local 3-node cluster in one command
  NARAD_CLUSTER_SECRET=... narad serve --node-id 1 --http 10.0.0.1:7942 --cluster 10.0.0.1:7943 \
      --peers 1=10.0.0.1:7943,2=10.0.0.2:7943,3=10.0.0.3:7943 --data-dir /var/lib/narad
  narad cluster members
  narad topic create orders --partitions 4
  echo '{\"id\": 1}' | narad produce orders --key customer-7
  narad consume orders --partition 0 --offset 0 --max 10
  narad bench --concurrency 64 --duration 20s --json    # produce load against 127.0.0.1:7942";

/// Narad: a durable, HTTP-first message broker.
///
/// Every produce is fsynced (group-committed) into the node's ingress WAL before it is answered
/// 202, then dispatched to its partition log, where consumers read it by offset.
#[derive(Debug, Parser)]
#[command(name = "narad", version, propagate_version = true, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a broker node: recover from the data directory, then serve the HTTP API.
    ///
    /// Stops gracefully on SIGTERM or Ctrl-C: no new connections, in-flight group commits
    /// finish, the WAL checkpoint is flushed. Logging follows RUST_LOG (default: info).
    Serve(ServeArgs),
    /// Create, list, inspect or delete topics on a running node.
    Topic(TopicArgs),
    /// Produce one message (DATA, or standard input when DATA is absent).
    ///
    /// Prints nothing and exits 0 once the node answered 202 (the message is durable).
    Produce(ProduceArgs),
    /// Read committed messages of one partition, starting at an offset; prints JSON.
    Consume(ConsumeArgs),
    /// Work a topic as a queue: lease messages, print each as a JSON line, then ack it.
    ///
    /// With --nack every message is given back after printing (a dry run: the queue is left as
    /// it was, each message's delivery_count one higher). Ctrl-C stops after the message in hand
    /// and says how many were settled.
    Sub(SubArgs),
    /// Load a running node over HTTP and report throughput, latency and fsyncs per message.
    ///
    /// Closed-loop clients on keep-alive connections, one thread. A warm-up is excluded from every
    /// figure. `--fsync-probe DIR` measures the disk instead: a serialized write + fdatasync loop.
    Bench(BenchArgs),
    /// Start a local cluster of N nodes on 127.0.0.1 (child processes, free ports, data in
    /// ./narad-dev/, a generated secret) and print their URLs; Ctrl-C stops them all.
    Dev(crate::dev::DevArgs),
    /// Inspect the cluster through a running node (`narad cluster members`).
    Cluster(crate::cluster_cli::ClusterCommand),
    /// Manage users and their grants (`narad user create|list|get|delete|grants|password`).
    ///
    /// Passwords are read from --password-file or standard input, never from the command line.
    User(crate::user_cli::UserArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address the HTTP API listens on.
    #[arg(long, value_name = "ADDR", env = "NARAD_HTTP", default_value = "127.0.0.1:7942")]
    pub http: SocketAddr,
    /// Directory holding the ingress WAL (<data-dir>/wal/), the metastore (<data-dir>/meta/)
    /// and the partition logs. Created if missing; locked against a second process.
    #[arg(long, value_name = "DIR", env = "NARAD_DATA_DIR", default_value = "./narad-data")]
    pub data_dir: PathBuf,
    /// This node's id (1 for a single node); in a cluster, its id in --peers.
    #[arg(long, value_name = "N", env = "NARAD_NODE_ID", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub node_id: u32,
    /// Seed for the node's random choices (e.g. where keyless round-robin starts); drawn from
    /// the clock when absent. Pin it to make a run reproducible.
    #[arg(long, value_name = "N", env = "NARAD_SEED")]
    pub seed: Option<u64>,
    /// Shut down gracefully (as on SIGTERM) once the process that started this one exits, even
    /// by SIGKILL: `narad dev` starts its nodes so, and they never outlive it.
    #[arg(long, hide = true)]
    pub exit_with_parent: bool,
    /// Threads serving HTTP and driving the node. 1 (the default) runs everything but disk I/O
    /// on one thread, which on a small machine costs the fewest context switches per request;
    /// more spreads HTTP parsing over that many threads (a machine with cores to spare).
    #[arg(long, value_name = "N", env = "NARAD_THREADS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Size at which a partition log's active segment is sealed and the next commit starts a
    /// new segment file (whole sealed segments are what retention will delete).
    #[arg(long, value_name = "BYTES", env = "NARAD_PARTITION_SEGMENT_BYTES",
          default_value_t = narad_core::constants::PARTITION_SEGMENT_BYTES,
          value_parser = clap::value_parser!(u64).range(4096..))]
    pub partition_segment_bytes: u64,
    /// Payload bytes per second (message payloads and keys) each user may produce through this
    /// node; with access control off, all clients together. A produce past it is answered 429
    /// with the Retry-After that pays it off, and nothing is staged; a burst of one second's
    /// worth passes at once, and one batch of any size once the user is paid up. Each node
    /// counts on its own (a user producing through N nodes may reach N times it). 0, the
    /// default, sets no quota.
    #[arg(long, value_name = "BYTES", env = "NARAD_PRODUCE_QUOTA", default_value_t = 0)]
    pub produce_quota: u64,
    #[command(flatten)]
    pub access: crate::auth::setup::AccessArgs,
    #[command(flatten)]
    pub cluster: crate::cluster_cli::ClusterArgs,
    /// Largest request head (request line and headers) accepted, in bytes; a larger one is
    /// answered 431 and the connection closed.
    #[arg(long, value_name = "BYTES", env = "NARAD_MAX_HEADER_BYTES",
          default_value_t = crate::http_server::MAX_HEADER_BYTES,
          value_parser = clap::value_parser!(u32).range(4096..=1024 * 1024).map(|v| v as usize))]
    pub max_header_bytes: usize,
    /// How long a client may take to send a request head, from its first byte (for the first
    /// request: from the connect, TLS handshake included) before it is disconnected.
    #[arg(long, value_name = "TIME", env = "NARAD_HEADER_TIMEOUT", default_value = "10s",
          value_parser = parse_positive_duration)]
    pub header_timeout: Duration,
    /// How long a client may take to send a request body, from its head on; a slower one is
    /// answered 408 and disconnected.
    #[arg(long, value_name = "TIME", env = "NARAD_BODY_TIMEOUT", default_value = "30s",
          value_parser = parse_positive_duration)]
    pub body_timeout: Duration,
    /// Open client connections this node serves at once; one more is answered 503 (with
    /// Retry-After) and closed. Each open connection costs a file descriptor.
    #[arg(long, value_name = "N", env = "NARAD_MAX_CONNECTIONS",
          default_value_t = crate::http_server::MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|v| v as usize))]
    pub max_connections: usize,
    /// Request-body bytes held in memory at once over all connections; a request that does not
    /// fit is answered 503 with Retry-After before its body is read. At least 16 MiB (the
    /// largest batch).
    #[arg(long, value_name = "BYTES", env = "NARAD_MAX_INFLIGHT_BYTES",
          default_value_t = crate::http_server::MAX_INFLIGHT_BYTES,
          value_parser = clap::value_parser!(u64)
              .range(crate::http_server::MIN_INFLIGHT_BYTES as u64..=1 << 40)
              .map(|v| v as usize))]
    pub max_inflight_bytes: usize,
    /// Serve the HTTP API over TLS with this PEM certificate chain (with --tls-key). SIGHUP
    /// re-reads both files for new connections.
    #[arg(long, value_name = "PEM", env = "NARAD_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", env = "NARAD_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// How long a keep-alive connection may sit idle (nothing read or written) between
    /// requests before it is closed.
    #[arg(long, value_name = "TIME", env = "NARAD_IDLE_TIMEOUT", default_value = "60s",
          value_parser = parse_positive_duration)]
    pub idle_timeout: Duration,
}

impl ServeArgs {
    /// The HTTP server's bounds, from the flags.
    pub fn http_limits(&self) -> crate::http_server::HttpLimits {
        crate::http_server::HttpLimits {
            max_header_bytes: self.max_header_bytes,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            body_timeout: self.body_timeout,
            max_connections: self.max_connections,
            max_inflight_bytes: self.max_inflight_bytes,
        }
    }
}

#[derive(Debug, Args)]
pub struct TopicArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub action: TopicAction,
}

#[derive(Debug, Subcommand)]
pub enum TopicAction {
    /// Create a topic; prints it as JSON.
    Create {
        /// Topic name: 1-200 of [A-Za-z0-9._-], not "." or "..".
        name: String,
        /// Number of partitions (1-4096; the node's default is 3).
        #[arg(long, value_name = "N")]
        partitions: Option<u32>,
        /// Retention in milliseconds: 0 keeps records forever, else 1000 or more (default 7
        /// days). Each partition's owner deletes whole sealed segments once their newest record
        /// is older.
        #[arg(long, value_name = "MS")]
        retention_ms: Option<u64>,
        /// Size limit of each partition, 4194304 (4 MiB) or more (default: no limit). The owner
        /// deletes the oldest sealed segment while the others still hold this many bytes.
        #[arg(long, value_name = "BYTES")]
        retention_bytes: Option<u64>,
    },
    /// Change a topic's retention through the metastore; prints the topic as JSON. Only the
    /// settings given change.
    #[command(group(clap::ArgGroup::new("change").required(true).multiple(true)))]
    Update {
        /// Topic name.
        name: String,
        /// New retention in milliseconds: 0 keeps records forever, else 1000 or more.
        #[arg(long, value_name = "MS", group = "change")]
        retention_ms: Option<u64>,
        /// New per-partition size limit in bytes, 4194304 (4 MiB) or more.
        #[arg(long, value_name = "BYTES", group = "change", conflicts_with = "no_retention_bytes")]
        retention_bytes: Option<u64>,
        /// Remove the per-partition size limit.
        #[arg(long, group = "change")]
        no_retention_bytes: bool,
    },
    /// List every topic as JSON (the node answers a page at a time; this follows every page).
    List,
    /// Show one topic with per-partition statistics (owner, high watermark, size).
    Get {
        /// Topic name.
        name: String,
        /// Show this partition's statistics only.
        #[arg(long, value_name = "P")]
        partition: Option<u32>,
    },
    /// Delete a topic (records still waiting in the WAL for it are discarded).
    Delete {
        /// Topic name.
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub target: Target,
    /// Topic to produce to.
    pub topic: String,
    /// Partition-affinity key: the partition is fnv1a_32(key) % partitions.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Explicit partition (wins over --key).
    #[arg(long, value_name = "P")]
    pub partition: Option<u32>,
    /// The message; read from standard input when absent.
    pub data: Option<String>,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub target: Target,
    /// Topic to read.
    pub topic: String,
    /// Partition to read (required without --follow).
    #[arg(long, value_name = "P")]
    pub partition: Option<u32>,
    /// First offset to read (with --follow: of --partition).
    #[arg(long, value_name = "O", default_value_t = 0)]
    pub offset: u64,
    /// Read up to N messages and print {"messages": [...]}; without it, print one message.
    #[arg(long, value_name = "N", conflicts_with = "follow")]
    pub max: Option<u32>,
    /// Keep reading: long-poll and print each record as it becomes visible, one JSON object a
    /// line, until Ctrl-C (which prints how many). With --partition, that partition from
    /// --offset; without, every partition from its current end (new records only).
    #[arg(long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct SubArgs {
    #[command(flatten)]
    pub target: Target,
    /// Topic to work.
    pub topic: String,
    /// Only this partition (default: every partition of the topic).
    #[arg(long, value_name = "P")]
    pub partition: Option<u32>,
    /// Messages leased per receive (1-100).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub max: u32,
    /// Give every message back after printing it instead of acking it.
    #[arg(long)]
    pub nack: bool,
    /// Stop after settling N messages.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Stop once nothing was available for this long (e.g. 5s; default: run until Ctrl-C).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub idle: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub target: Target,
    /// Topic to produce to (created if missing).
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Partitions of the topic when the bench creates it.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub partitions: u32,
    /// Concurrent clients (connections), each with one request in flight.
    #[arg(short, long, value_name = "N", default_value_t = 16)]
    pub concurrency: usize,
    /// Length of the measured window (e.g. 10s, 500ms, 1m).
    #[arg(short, long, value_name = "TIME", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Load before the measured window, excluded from every figure.
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Payload bytes per message.
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    pub payload: usize,
    /// Use batch produce with N messages per request (1-1000).
    #[arg(long, value_name = "N")]
    pub batch: Option<usize>,
    /// Cycle through N distinct keys (0: keyless, round-robin partitions).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keys: usize,
    /// Also measure produce → visible latency (202 to readable by a consumer).
    #[arg(long)]
    pub visible: bool,
    /// Load `GET /healthz` instead of produce: the HTTP ceiling of the same server.
    #[arg(long)]
    pub healthz: bool,
    /// Consume instead of produce: each client leases one message and acks it (fill the topic
    /// with a produce run first). Reports acks per second and consumer-journal syncs per ack.
    #[arg(long)]
    pub queue: bool,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Pid of the server, for its RSS and CPU (found in /proc when absent).
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Stop after this many requests, even before the duration is over.
    #[arg(long, value_name = "N")]
    pub max_requests: Option<u64>,
    /// Run the serialized fdatasync probe in DIR (for --duration) instead of loading a node.
    #[arg(long, value_name = "DIR")]
    pub fsync_probe: Option<PathBuf>,
    /// With --fsync-probe: overwrite a pre-written file instead of appending.
    #[arg(long, requires = "fsync_probe")]
    pub probe_overwrite: bool,
}

/// A duration above zero (a timeout of zero would refuse everything).
fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        Duration::ZERO => Err("must be above zero".to_string()),
        duration => Ok(duration),
    }
}

/// Parses `10s`, `500ms`, `2m` or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 =
        number.parse().map_err(|_| format!("`{text}` is not a duration (e.g. 10s, 500ms, 2m)"))?;
    let seconds = match unit {
        "" | "s" => number,
        "ms" => number / 1_000.0,
        "m" => number * 60.0,
        _ => return Err(format!("unknown unit `{unit}` (use ms, s or m)")),
    };
    if !(0.0..=86_400.0).contains(&seconds) {
        return Err(format!("`{text}` is out of range (0 to 24 hours)"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults() {
        let cli = Cli::try_parse_from(["narad", "serve"]).expect("parses");
        let Command::Serve(args) = cli.command else { panic!("serve expected") };
        assert_eq!(args.http.to_string(), "127.0.0.1:7942");
        assert_eq!(args.data_dir, PathBuf::from("./narad-data"));
        assert_eq!(args.node_id, 1);
    }

    #[test]
    fn url_is_global_for_topics() {
        let cli = Cli::try_parse_from(["narad", "topic", "get", "t", "--url", "http://x:1"])
            .expect("parses");
        let Command::Topic(args) = cli.command else { panic!("topic expected") };
        assert_eq!(args.target.url, "http://x:1");
    }

    #[test]
    fn topic_update_needs_a_change_and_one_size_setting() {
        let parse = |args: &[&str]| {
            let all = [&["narad", "topic", "update", "t"][..], args].concat();
            Cli::try_parse_from(all).map(|cli| cli.command)
        };
        let Ok(Command::Topic(args)) = parse(&["--retention-ms", "5000", "--no-retention-bytes"])
        else {
            panic!("parses")
        };
        let TopicAction::Update { name, retention_ms, retention_bytes, no_retention_bytes } =
            args.action
        else {
            panic!("update expected")
        };
        assert_eq!((name.as_str(), retention_ms, retention_bytes), ("t", Some(5000), None));
        assert!(no_retention_bytes);
        assert!(parse(&[]).is_err(), "nothing to change");
        assert!(parse(&["--retention-bytes", "9", "--no-retention-bytes"]).is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("3h").is_err());
        assert!(parse_duration("x").is_err());
    }
}
