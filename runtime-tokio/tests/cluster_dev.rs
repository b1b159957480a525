//! `narad dev --nodes 3`: one command starts a local 3-node cluster (child processes, free ports,
//! a generated secret), prints the URLs, reports readiness, serves produce and consume through
//! any node, and stops every node on Ctrl-C (SIGINT).

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Client, wait_until};

const READY_BOUND: Duration = Duration::from_secs(60);
const STOP_BOUND: Duration = Duration::from_secs(20);

/// `narad dev`, signalled (then killed) if the test ends early.
struct Dev(Option<Child>);

impl Drop for Dev {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            // SIGTERM first: `narad dev` then stops its nodes (they run in their own group).
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            if !wait_until(STOP_BOUND, || child.try_wait().ok().flatten().is_some()) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// Starts `narad dev --nodes 3` in `dir` and waits for its readiness report: the running dev,
/// its remaining output lines, and the nodes' URLs.
fn start_dev(dir: &Path) -> (Dev, mpsc::Receiver<String>, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_narad"))
        .args(["dev", "--nodes", "3", "--dir"])
        .arg(dir)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn narad dev");
    let stdout = child.stdout.take().expect("piped stdout");
    let dev = Dev(Some(child));
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut printed = Vec::new();
    let ready = loop {
        match lines.recv_timeout(READY_BOUND) {
            Ok(line) if line.starts_with("all 3 nodes ready") => break true,
            Ok(line) => printed.push(line),
            Err(_) => break false,
        }
    };
    assert!(ready, "no readiness report; printed:\n{}", printed.join("\n"));
    let urls: Vec<String> = printed
        .iter()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
        .map(str::to_string)
        .collect();
    assert_eq!(urls.len(), 3, "one URL per node: {printed:?}");
    (dev, lines, urls)
}

#[test]
fn dev_starts_a_three_node_cluster_and_stops_it_on_ctrl_c() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("narad-dev");
    let (mut dev, lines, urls) = start_dev(&dir);
    let secret = std::fs::metadata(dir.join("cluster-secret")).expect("secret file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(secret.permissions().mode() & 0o777, 0o600, "the secret is private");
    let password = std::fs::read_to_string(dir.join("admin-password")).expect("admin password");
    let password = password.trim_end();
    assert_eq!(Client::new(&urls[0]).get("/v1/topics").0, 401, "access control is on");

    let clients: Vec<Client> =
        urls.iter().map(|u| Client::new(u).with_credentials("admin", password)).collect();
    clients[0].create_topic("demo", 3);
    assert!(wait_until(Duration::from_secs(10), || clients[2].get("/v1/topics/demo").0 == 200));
    for (i, client) in clients.iter().enumerate() {
        let (status, _) =
            client.post("/v1/topics/demo/produce?partition=1", format!("m{i}").as_bytes());
        assert_eq!(status, 202);
    }
    let all = wait_until(Duration::from_secs(10), || {
        let (status, body) = clients[1].get("/v1/topics/demo/consume?partition=1&offset=0&max=10");
        status == 200 && String::from_utf8_lossy(&body).matches("\"payload\"").count() == 3
    });
    assert!(all, "three messages produced through three nodes, read through one");

    let mut child = dev.0.take().expect("running");
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let stopped = wait_until(STOP_BOUND, || child.try_wait().ok().flatten().is_some());
    assert!(stopped, "narad dev stops on Ctrl-C");
    assert!(child.wait().expect("reap").success());
    for url in &urls {
        assert_eq!(Client::new(url).get("/healthz").0, 0, "{url} is down");
    }
    let mut rest = Vec::new();
    while let Ok(line) = lines.recv_timeout(STOP_BOUND) {
        rest.push(line); // until the reader thread sees the end of the output
    }
    let export = format!("export NARAD_USER='admin:{password}'");
    assert!(rest.iter().any(|l| l.contains(&export)), "it says how to log in: {rest:?}");
    let stops = rest.iter().filter(|l| l.contains("stopped (exit status: 0)")).count();
    assert_eq!(stops, 3, "every node stopped cleanly");
}

#[test]
fn dev_nodes_stop_when_dev_is_killed() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("narad-dev");
    let (mut dev, _lines, urls) = start_dev(&dir);
    let mut child = dev.0.take().expect("running");
    child.kill().expect("SIGKILL narad dev"); // no chance to stop its nodes itself
    child.wait().expect("reap");
    let all_down =
        wait_until(STOP_BOUND, || urls.iter().all(|url| Client::new(url).get("/healthz").0 == 0));
    let read_logs = || -> Vec<String> {
        (1..=3)
            .map(|id| fs::read_to_string(dir.join(format!("node-{id}.log"))).unwrap_or_default())
            .collect()
    };
    // The HTTP listener closes first; the node then finishes its work and says so.
    wait_until(STOP_BOUND, || read_logs().iter().all(|log| log.contains("shut down cleanly")));
    let logs = read_logs();
    assert!(all_down, "nodes outlived a killed narad dev; logs:\n{}", logs.join("\n---\n"));
    for (id, log) in logs.iter().enumerate() {
        assert!(log.contains("parent process exited"), "node {}: {log}", id + 1);
        assert!(log.contains("node shut down cleanly"), "node {}: {log}", id + 1);
    }
}
