//! `narad dev --nodes N`: a local cluster in one command, for trying Narad out. Starts N
//! `narad serve` child processes on 127.0.0.1 with free ports, data directories and logs under
//! `./narad-dev/`, a generated cluster secret (kept in `./narad-dev/cluster-secret`, so a
//! second run reuses the data) and a generated password for the first admin (user `admin`, in
//! `./narad-dev/admin-password`: the nodes serve with access control on, as a real cluster
//! does). Prints the nodes' URLs, reports when all are ready and the admin can log in, with the
//! `NARAD_USER` to export, and on Ctrl-C (or SIGTERM) stops them all gracefully.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use ring::rand::SecureRandom;

/// How often the supervisor looks at its children.
const POLL: Duration = Duration::from_millis(200);
/// How long the nodes may take to stop after SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Number of nodes (1-9).
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=9))]
    pub nodes: u32,
    /// Directory for the nodes' data directories, logs and the cluster secret.
    #[arg(long, value_name = "DIR", default_value = "./narad-dev")]
    pub dir: PathBuf,
}

/// One child node.
struct DevNode {
    id: u32,
    url: String,
    cluster: String,
    log: PathBuf,
    child: Option<Child>,
}

/// Runs the local cluster until Ctrl-C.
pub fn run(args: DevArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let secret = args.dir.join("cluster-secret");
    ensure_secret(&secret)?;
    let admin_password = args.dir.join("admin-password");
    ensure_secret(&admin_password)?;
    let admin = format!("{}:{}", crate::auth::setup::BOOTSTRAP_ADMIN, read_line(&admin_password)?);
    let stop = watch_signals()?;
    let ports: Vec<(u16, u16)> = (0..args.nodes)
        .map(|_| Ok((free_tcp_port()?, free_udp_port()?)))
        .collect::<anyhow::Result<_>>()?;
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, udp))| format!("{}=127.0.0.1:{udp}", i + 1))
        .collect();
    let peers = peers.join(",");
    println!(
        "narad dev: {} nodes, data in {}, secret in {}",
        args.nodes,
        args.dir.display(),
        secret.display()
    );
    let mut nodes = Vec::new();
    for (i, (http, udp)) in ports.iter().enumerate() {
        let files = (secret.as_path(), admin_password.as_path());
        let node = spawn(&args.dir, files, i as u32 + 1, (*http, *udp), &peers);
        match node {
            Ok(node) => nodes.push(node),
            Err(error) => {
                stop_all(&mut nodes);
                return Err(error);
            }
        }
    }
    for node in &nodes {
        println!(
            "  node {}  {}  (cluster {}, log {})",
            node.id,
            node.url,
            node.cluster,
            node.log.display()
        );
    }
    supervise(&mut nodes, &stop, &admin);
    stop_all(&mut nodes);
    Ok(())
}

fn spawn(
    dir: &Path,
    (secret, admin_password): (&Path, &Path),
    id: u32,
    (http, udp): (u16, u16),
    peers: &str,
) -> anyhow::Result<DevNode> {
    let exe = std::env::current_exe().context("locating the narad binary")?;
    let log = dir.join(format!("node-{id}.log"));
    let log_file = File::options()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening {}", log.display()))?;
    let child = Command::new(exe)
        .arg("serve")
        .args(["--node-id", &id.to_string()])
        .args(["--http", &format!("127.0.0.1:{http}")])
        .args(["--cluster", &format!("127.0.0.1:{udp}")])
        .args(["--peers", peers])
        .arg("--data-dir")
        .arg(dir.join(format!("node-{id}")))
        .arg("--cluster-secret-file")
        .arg(secret)
        .arg("--admin-password-file")
        .arg(admin_password)
        // They stop (gracefully) when we die, however we die.
        .arg("--exit-with-parent")
        .env_remove("NARAD_CLUSTER_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        // Its own process group: Ctrl-C reaches only us, and we stop the nodes in order.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting node {id}"))?;
    Ok(DevNode {
        id,
        url: format!("http://127.0.0.1:{http}"),
        cluster: format!("127.0.0.1:{udp}"),
        log,
        child: Some(child),
    })
}

/// Watches the nodes until a signal: reports readiness (every node ready, the admin can log
/// in) once, and any node that exits.
fn supervise(nodes: &mut [DevNode], stop: &AtomicBool, admin: &str) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_millis(500)))
        .build()
        .into();
    let started = Instant::now();
    let mut ready_reported = false;
    while !stop.load(Ordering::Relaxed) {
        for node in nodes.iter_mut() {
            let Some(child) = node.child.as_mut() else { continue };
            if let Ok(Some(status)) = child.try_wait() {
                println!("node {} exited ({status}); see {}", node.id, node.log.display());
                node.child = None;
            }
        }
        if !ready_reported
            && nodes.iter().all(|n| is_ready(&agent, &n.url))
            && admin_logs_in(&agent, &nodes[0].url, admin)
        {
            ready_reported = true;
            let first = &nodes[0].url;
            println!(
                "all {} nodes ready after {:.1} s; access control is on. Try:\n  \
                 export NARAD_USER='{admin}'\n  \
                 narad topic create demo --partitions 6 --url {first}\n  \
                 echo hello | narad produce demo --url {}\n  narad cluster members --url {first}\n  \
                 curl -u '{admin}' {first}/v1/topics\n\
                 Ctrl-C stops the cluster.",
                nodes.len(),
                started.elapsed().as_secs_f64(),
                nodes[nodes.len() - 1].url,
            );
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `admin` (NAME:PASSWORD) is a user the node at `url` lets in.
fn admin_logs_in(agent: &ureq::Agent, url: &str, admin: &str) -> bool {
    let (name, password) = admin.split_once(':').expect("invariant: NAME:PASSWORD");
    let authorization = crate::auth::basic::header_value(name, password);
    agent
        .get(format!("{url}/v1/users"))
        .header("authorization", &authorization)
        .call()
        .is_ok_and(|r| r.status().as_u16() == 200)
}

/// The first line of a file this command wrote.
fn read_line(path: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().next().unwrap_or_default().to_string())
}

fn is_ready(agent: &ureq::Agent, url: &str) -> bool {
    agent.get(format!("{url}/readyz")).call().is_ok_and(|r| r.status().as_u16() == 200)
}

/// SIGTERM to every node, then waits (bounded); stragglers are killed.
fn stop_all(nodes: &mut [DevNode]) {
    println!("stopping {} nodes...", nodes.iter().filter(|n| n.child.is_some()).count());
    for node in nodes.iter() {
        if let Some(child) = &node.child {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    for node in nodes.iter_mut() {
        let Some(mut child) = node.child.take() else { continue };
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    println!("node {} stopped ({status})", node.id);
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    println!("node {} did not stop in time; killing it", node.id);
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
            }
        }
    }
}

/// Creates a secret file (32 random bytes, hex, mode 0600) unless it exists.
fn ensure_secret(path: &Path) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the OS random source failed"))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(file, "{hex}").with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A flag raised by SIGINT or SIGTERM (watched on a small thread of its own).
pub(crate) fn watch_signals() -> anyhow::Result<Arc<AtomicBool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal watcher")?;
    let (mut int, mut term) = runtime.block_on(async {
        Ok::<_, std::io::Error>((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    })?;
    let flag = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("narad-dev-signals".into())
        .spawn(move || {
            runtime.block_on(async {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            });
            flag.store(true, Ordering::Relaxed);
        })
        .context("starting the signal watcher")?;
    Ok(stop)
}

fn free_tcp_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free TCP port")?;
    Ok(listener.local_addr()?.port())
}

fn free_udp_port() -> anyhow::Result<u16> {
    let socket = UdpSocket::bind("127.0.0.1:0").context("finding a free UDP port")?;
    let port = socket.local_addr()?.port();
    if port == 0 {
        bail!("the OS gave port 0");
    }
    Ok(port)
}
