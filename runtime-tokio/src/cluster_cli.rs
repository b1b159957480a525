//! Cluster flags of `narad serve` (`--peers`, `--cluster`, the secret), turned into the node's
//! voters and the transport's configuration; and the `narad cluster members` client command.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use narad_core::{Config, NodeId};
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::client_target::Target;
use crate::driver::Driver;
use crate::transport::{self, ClusterKey, Outbox, Transport, TransportConfig, TransportEnv};

/// Environment variable holding the cluster secret (when no file is given).
pub const SECRET_ENV: &str = "NARAD_CLUSTER_SECRET";

/// Cluster flags of `narad serve`. Without `--peers` the node is a cluster of one.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterArgs {
    /// The cluster's voters and their node-RPC addresses, this node included:
    /// `1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`. Every node gets the same list; a majority must be
    /// up to create or delete topics. Omit it for a single node.
    #[arg(long, value_name = "ID=ADDR,...", env = "NARAD_PEERS", value_parser = parse_peers)]
    pub peers: Option<Peers>,
    /// UDP address node RPC (QUIC) listens on; defaults to this node's address in --peers.
    #[arg(long, value_name = "ADDR", env = "NARAD_CLUSTER")]
    pub cluster: Option<SocketAddr>,
    /// File holding the cluster secret (at least 16 bytes; surrounding whitespace is ignored).
    /// Without it the secret comes from NARAD_CLUSTER_SECRET. Every node of a cluster needs the
    /// same secret: a process without it can neither join, commit nor read.
    #[arg(long, value_name = "PATH", env = "NARAD_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Membership heartbeat period, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(50..))]
    pub heartbeat_ms: u64,
    /// Silence after which the metastore leader marks a member dead (its partitions' records are
    /// then rerouted to live siblings), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(200..))]
    pub dead_after_ms: u64,
}

/// `--peers`: node id → `host:port`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peers(pub BTreeMap<u32, String>);

/// Parses `1=HOST:PORT,2=HOST:PORT`.
pub fn parse_peers(text: &str) -> Result<Peers, String> {
    let mut peers = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, addr) =
            entry.split_once('=').ok_or_else(|| format!("`{entry}` is not ID=HOST:PORT"))?;
        let id: u32 = id.trim().parse().map_err(|_| format!("`{id}` is not a node id"))?;
        if id == 0 {
            return Err("node ids start at 1".into());
        }
        let addr = addr.trim();
        let port_ok =
            addr.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if !port_ok {
            return Err(format!("`{addr}` is not HOST:PORT"));
        }
        if peers.insert(id, addr.to_string()).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    if peers.is_empty() {
        return Err("no peers given".into());
    }
    Ok(Peers(peers))
}

/// What `serve` runs: the metastore's voters and, for a real cluster, the transport.
pub struct ClusterPlan {
    voters: Vec<NodeId>,
    cluster_addr: String,
    heartbeat_ms: u64,
    dead_after_ms: u64,
    transport: Option<TransportConfig>,
}

impl ClusterPlan {
    /// Checks the flags and loads the secret; fails before anything is started.
    pub fn new(node_id: u32, args: &ClusterArgs) -> anyhow::Result<ClusterPlan> {
        ClusterPlan::with_key(node_id, args, || load_key(args.cluster_secret_file.as_ref()))
    }

    /// Like `new`, with the cluster key from `key` (asked only for a cluster of several nodes).
    pub fn with_key(
        node_id: u32,
        args: &ClusterArgs,
        key: impl FnOnce() -> anyhow::Result<ClusterKey>,
    ) -> anyhow::Result<ClusterPlan> {
        let me = NodeId(node_id);
        let mut plan = ClusterPlan {
            voters: vec![me],
            cluster_addr: String::new(),
            heartbeat_ms: args.heartbeat_ms,
            dead_after_ms: args.dead_after_ms,
            transport: None,
        };
        let Some(Peers(peers)) = &args.peers else {
            if args.cluster.is_some() {
                bail!("--cluster needs --peers (the cluster's voters)");
            }
            return Ok(plan);
        };
        let Some(own) = peers.get(&node_id) else {
            bail!("--peers must list this node (--node-id {node_id}) too");
        };
        plan.voters = peers.keys().map(|id| NodeId(*id)).collect();
        plan.cluster_addr = own.clone();
        if peers.len() == 1 {
            return Ok(plan);
        }
        let bind = match args.cluster {
            Some(addr) => addr,
            None => resolve_own(own)?,
        };
        let key = key()?;
        let peers = peers
            .iter()
            .filter(|(id, _)| **id != node_id)
            .map(|(id, addr)| (NodeId(*id), addr.clone()))
            .collect();
        plan.transport = Some(TransportConfig { me, bind, peers, key });
        Ok(plan)
    }

    /// The node's configuration.
    pub fn node_config(&self, node_id: u32, seed: u64, http: SocketAddr) -> Config {
        let mut config = Config::cluster(NodeId(node_id), seed, self.voters.clone());
        config.http_addr = http.to_string();
        config.cluster_addr.clone_from(&self.cluster_addr);
        config.heartbeat_ms = self.heartbeat_ms;
        config.dead_after_ms = self.dead_after_ms;
        // NARAD_WAL_PREFILL=0 turns WAL pre-writing off (for measuring what it buys).
        if std::env::var("NARAD_WAL_PREFILL").is_ok_and(|v| v == "0") {
            config.wal_prewrite_chunk_bytes = 0;
        }
        // NARAD_WAL_LANES=0 makes every produce small: each group commit takes everything staged
        // (for measuring what the bulk lane buys).
        if std::env::var("NARAD_WAL_LANES").is_ok_and(|v| v == "0") {
            config.wal_small_request_bytes = u64::MAX;
        }
        config
    }

    /// Starts the transport (for a cluster of more than one node) and connects it to the
    /// driver. Call inside the tokio runtime.
    pub fn attach(
        self,
        driver: Driver,
        env: TransportEnv,
    ) -> anyhow::Result<(Driver, Option<Transport>)> {
        let Some(config) = self.transport else {
            return Ok((driver, None));
        };
        let (inbox_tx, inbox_rx) = mpsc::channel(transport::INBOX_MESSAGES);
        let (transport, outbox): (Transport, Outbox) = Transport::start(config, env, inbox_tx)?;
        Ok((driver.with_peers(outbox, inbox_rx), Some(transport)))
    }
}

/// Where to bind when --cluster is absent: this node's own --peers address.
fn resolve_own(own: &str) -> anyhow::Result<SocketAddr> {
    own.to_socket_addrs()
        .with_context(|| format!("resolving this node's --peers address `{own}`"))?
        .next()
        .with_context(|| format!("`{own}` resolves to no address; pass --cluster"))
}

/// The secret from --cluster-secret-file, else from NARAD_CLUSTER_SECRET.
fn load_key(file: Option<&PathBuf>) -> anyhow::Result<ClusterKey> {
    let secret = match file {
        Some(path) => std::fs::read(path)
            .with_context(|| format!("reading the cluster secret from {}", path.display()))?,
        None => match std::env::var_os(SECRET_ENV) {
            Some(value) => value.into_encoded_bytes(),
            None => bail!(
                "a cluster needs a secret shared by its nodes: set {SECRET_ENV} or pass \
                 --cluster-secret-file (e.g. `openssl rand -hex 32 > secret`)"
            ),
        },
    };
    let secret = secret.trim_ascii();
    Ok(ClusterKey::from_secret(secret)?)
}

/// `narad cluster ...`.
#[derive(Debug, Args)]
pub struct ClusterCommand {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub action: ClusterAction,
}

#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// List the cluster's members as the node at --url sees them: id, status, metastore role,
    /// addresses, partitions owned.
    Members {
        /// Print the JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Deserialize)]
struct MembersJson {
    members: Vec<MemberJson>,
}

#[derive(Deserialize)]
struct MemberJson {
    id: u32,
    status: String,
    role: String,
    http_addr: String,
    cluster_addr: String,
    partitions_owned: u32,
    last_heartbeat_ms: u64,
}

/// Runs `narad cluster ...`.
pub fn run(command: ClusterCommand) -> anyhow::Result<()> {
    let ClusterAction::Members { json } = command.action;
    let base = command.target.base();
    let agent = command.target.agent(Duration::from_secs(30))?;
    let mut response = agent
        .get(format!("{base}/v1/cluster/members"))
        .call()
        .with_context(|| format!("requesting {base}"))?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().context("reading the answer")?;
    if status != 200 {
        bail!("{status}: {}", body.trim());
    }
    if json {
        println!("{body}");
        return Ok(());
    }
    let members: MembersJson = serde_json::from_str(&body).context("decoding the members")?;
    print!("{}", members_table(&members.members));
    Ok(())
}

fn members_table(members: &[MemberJson]) -> String {
    let now_ms = crate::clock::unix_millis();
    let mut out = format!(
        "{:<4} {:<6} {:<9} {:<22} {:<22} {:>10}  {}\n",
        "ID", "STATUS", "ROLE", "HTTP", "CLUSTER", "PARTITIONS", "LAST HEARTBEAT"
    );
    for m in members {
        let heartbeat = match m.last_heartbeat_ms {
            0 => "never".to_string(),
            at => format!("{:.1} s ago", now_ms.saturating_sub(at) as f64 / 1_000.0),
        };
        out.push_str(&format!(
            "{:<4} {:<6} {:<9} {:<22} {:<22} {:>10}  {heartbeat}\n",
            m.id, m.status, m.role, m.http_addr, m.cluster_addr, m.partitions_owned,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse() {
        let peers = parse_peers("1=127.0.0.1:7001, 2=node-b:7002,3=[::1]:7003").expect("parses");
        assert_eq!(peers.0.len(), 3);
        assert_eq!(peers.0[&2], "node-b:7002");
        assert_eq!(peers.0[&3], "[::1]:7003");
        assert!(parse_peers("1=127.0.0.1:7001,1=127.0.0.1:7002").is_err());
        assert!(parse_peers("0=127.0.0.1:7001").is_err());
        assert!(parse_peers("1=127.0.0.1").is_err());
        assert!(parse_peers("x=127.0.0.1:1").is_err());
        assert!(parse_peers("").is_err());
    }

    #[test]
    fn a_cluster_needs_this_node_in_its_peers_and_a_secret() {
        let args = |peers: &str| ClusterArgs {
            peers: Some(parse_peers(peers).expect("parses")),
            heartbeat_ms: 1_000,
            dead_after_ms: 5_000,
            ..ClusterArgs::default()
        };
        let missing = ClusterPlan::new(4, &args("1=127.0.0.1:1,2=127.0.0.1:2"));
        assert!(missing.is_err());
        let single = ClusterPlan::new(1, &args("1=127.0.0.1:7001")).expect("a cluster of one");
        assert!(single.transport.is_none());
        assert_eq!(single.voters, vec![NodeId(1)]);
        let dir = std::env::temp_dir().join(format!("narad-secret-{}", std::process::id()));
        std::fs::write(&dir, "short\n").expect("write secret");
        let mut weak = args("1=127.0.0.1:7001,2=127.0.0.1:7002");
        weak.cluster_secret_file = Some(dir.clone());
        assert!(ClusterPlan::new(1, &weak).is_err(), "a 5-byte secret is refused");
        std::fs::write(&dir, "0123456789abcdef0123456789abcdef\n").expect("write secret");
        let plan = ClusterPlan::new(1, &weak).expect("a good secret");
        let transport = plan.transport.as_ref().expect("two voters need a transport");
        assert_eq!(transport.bind.to_string(), "127.0.0.1:7001");
        assert_eq!(transport.peers.len(), 1);
        assert_eq!(plan.voters, vec![NodeId(1), NodeId(2)]);
        let _ = std::fs::remove_file(&dir);
    }
}
