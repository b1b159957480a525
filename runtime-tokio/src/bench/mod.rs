//! `narad bench`: an HTTP load generator for a running node, lean enough to share two cores with
//! the server it measures. One thread (a current-thread tokio runtime) drives `--concurrency`
//! keep-alive connections in closed loops over a bare HTTP/1.1 client; a warm-up is excluded
//! from every figure; `/metrics` is read before and after the measured window to get fsyncs per
//! message; `--visible` tails every partition to time produce → readable; the server's RSS and
//! CPU come from `/proc`. `--fsync-probe DIR` measures the disk instead (a serialized
//! write + fdatasync loop), the yardstick printed beside every result.

mod conn;
mod histogram;
mod load;
mod probe;
mod queue;
mod report;
mod server;
mod visible;

use std::io::IsTerminal;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::task::JoinHandle;

use crate::cli::BenchArgs;
use load::{Kind, Run, SEQ_HEADER_BYTES, Shape};
use report::{Report, Samples};
use server::{Endpoint, Metrics, cpu_seconds, find_server, rss_bytes, scrape, segment};
use visible::Visible;

/// How long producers may take to finish their last request after the deadline.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long consumers may take to read what was acknowledged before the deadline.
const VISIBLE_GRACE: Duration = Duration::from_secs(5);
/// Interval of the RSS and backlog samples.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Runs `narad bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.fsync_probe {
        let result = probe::run(dir, args.duration, args.probe_overwrite)
            .with_context(|| format!("fsync probe in {}", dir.display()))?;
        report::print_probe(&result, args.probe_overwrite, args.json);
        return Ok(());
    }
    let shape = shape(&args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the bench runtime")?;
    let local = tokio::task::LocalSet::new();
    let report = local.block_on(&runtime, measure(&args, shape))?;
    report.print(args.json);
    Ok(())
}

fn shape(args: &BenchArgs) -> anyhow::Result<Shape> {
    let kind = match (args.healthz, args.batch) {
        _ if args.queue && (args.healthz || args.batch.is_some() || args.visible) => {
            bail!("--queue consumes: it excludes --healthz, --batch and --visible")
        }
        _ if args.queue => Kind::Queue,
        (true, Some(_)) => bail!("--healthz and --batch exclude each other"),
        (true, None) => Kind::Healthz,
        (false, Some(n)) if (1..=1_000).contains(&n) => Kind::Batch(n),
        (false, Some(n)) => bail!("--batch must be 1 to 1000, got {n}"),
        (false, None) => Kind::Produce,
    };
    if args.visible && kind == Kind::Healthz {
        bail!("--visible needs produce requests, not --healthz");
    }
    let least = if args.visible { SEQ_HEADER_BYTES } else { 1 };
    if args.payload < least {
        bail!("--payload must be at least {least} bytes");
    }
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    Ok(Shape {
        kind,
        endpoint: Endpoint::new(&args.target)?,
        topic_segment: segment(&args.topic),
        payload_bytes: args.payload,
        keys: args.keys,
    })
}

async fn measure(args: &BenchArgs, shape: Shape) -> anyhow::Result<Report> {
    let endpoint = shape.endpoint.clone();
    let topic = match shape.kind {
        Kind::Healthz => None,
        _ => Some(server::ensure_topic(&endpoint, &args.topic, args.partitions).await?),
    };
    let server_pid = find_server(args.server_pid, endpoint.addr.port());
    let mut admin = conn::Conn::connect(&endpoint)
        .await
        .with_context(|| format!("connecting to {}", endpoint.host))?;
    let t0 = Instant::now();
    let visible = args.visible.then(|| Rc::new(Visible::new(t0)));
    let run = Rc::new(Run {
        shape,
        measure_from: t0 + args.warmup,
        measure_until: t0 + args.warmup + args.duration,
        stop: Default::default(),
        max_requests: args.max_requests.unwrap_or(u64::MAX),
        issued: Default::default(),
        tally: Default::default(),
        visible: visible.clone(),
    });
    let consumers = match (&visible, &topic) {
        (Some(v), Some(topic)) => spawn_consumers(v, &endpoint, &args.topic, topic),
        _ => Vec::new(),
    };
    let producers: Vec<_> = (0..args.concurrency as u64)
        .map(|worker| match run.shape.kind {
            Kind::Queue => tokio::task::spawn_local(queue::worker(Rc::clone(&run))),
            _ => tokio::task::spawn_local(load::producer(Rc::clone(&run), worker)),
        })
        .collect();
    let samples = Rc::new(std::cell::RefCell::new(Samples::default()));
    let monitor = tokio::task::spawn_local(monitor(
        Rc::clone(&run),
        endpoint.clone(),
        server_pid,
        Rc::clone(&samples),
    ));
    if std::io::stderr().is_terminal() {
        tokio::task::spawn_local(progress(Rc::clone(&run), t0));
    }
    let window = window(&run, &mut admin, &endpoint, server_pid).await;
    run.stop.set(true);
    join_bounded(producers, STOP_GRACE).await;
    if let Some(v) = &visible {
        settle(v, &run).await;
        v.stop.set(true);
    }
    join_bounded(consumers, STOP_GRACE).await;
    join_bounded(vec![monitor], STOP_GRACE).await;
    let samples = samples.take();
    Ok(Report::new(args, &run, window?, samples, server_pid))
}

/// Counters read at both ends of the measured window.
pub struct Window {
    pub before: Metrics,
    pub after: Metrics,
    pub seconds: f64,
    pub server_cpu_seconds: Option<f64>,
    pub client_cpu_seconds: Option<f64>,
}

/// Waits for the window to open, reads the counters, waits for it to close, reads them again.
async fn window(
    run: &Run,
    admin: &mut conn::Conn,
    endpoint: &Endpoint,
    pid: Option<u32>,
) -> anyhow::Result<Window> {
    tokio::time::sleep_until(run.measure_from.into()).await;
    let (server_cpu, client_cpu) = (pid.and_then(|p| cpu_seconds(Some(p))), cpu_seconds(None));
    let started = Instant::now();
    let before = scrape(admin, endpoint).await.context("reading /metrics")?;
    tokio::time::sleep_until(run.measure_until.into()).await;
    let after = scrape(admin, endpoint).await.context("reading /metrics")?;
    let seconds = started.elapsed().as_secs_f64();
    let diff = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
    Ok(Window {
        before,
        after,
        seconds,
        server_cpu_seconds: diff(server_cpu, pid.and_then(|p| cpu_seconds(Some(p)))),
        client_cpu_seconds: diff(client_cpu, cpu_seconds(None)),
    })
}

fn spawn_consumers(
    visible: &Rc<Visible>,
    endpoint: &Endpoint,
    topic: &str,
    state: &server::TopicState,
) -> Vec<JoinHandle<()>> {
    (0..state.partitions)
        .map(|partition| {
            tokio::task::spawn_local(visible::consumer(
                Rc::clone(visible),
                endpoint.clone(),
                segment(topic),
                partition,
                state.high_watermarks[partition as usize],
            ))
        })
        .collect()
}

/// Lets the consumers catch up with everything acknowledged in the window (bounded).
async fn settle(visible: &Visible, run: &Run) {
    let deadline = Instant::now() + VISIBLE_GRACE;
    while Instant::now() < deadline && visible.unseen(run.measure_from, run.measure_until) > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Samples the server's RSS and dispatch backlog until the run stops.
async fn monitor(
    run: Rc<Run>,
    endpoint: Endpoint,
    pid: Option<u32>,
    samples: Rc<std::cell::RefCell<Samples>>,
) {
    let mut conn = conn::Conn::connect(&endpoint).await.ok();
    let wants_backlog = run.shape.kind != Kind::Healthz;
    while !run.stop.get() {
        let now = Instant::now();
        let in_window = now >= run.measure_from && now <= run.measure_until;
        let rss = pid.and_then(rss_bytes);
        let backlog = match (&mut conn, wants_backlog && in_window) {
            (Some(c), true) => scrape(c, &endpoint)
                .await
                .ok()
                .and_then(|m| m.get("narad_dispatch_backlog").copied()),
            _ => None,
        };
        if in_window {
            let at = now.duration_since(run.measure_from).as_secs_f64();
            samples.borrow_mut().push(at, rss, backlog);
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// A one-line progress display on a terminal (stderr), once a second.
async fn progress(run: Rc<Run>, t0: Instant) {
    let total = run.measure_until.duration_since(t0).as_secs_f64();
    let per_request = run.shape.messages_per_request();
    let mut last = 0;
    while !run.stop.get() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let tally = run.tally.borrow();
        let rate = (tally.requests_total - last) * per_request;
        last = tally.requests_total;
        eprint!(
            "\r  {:5.1}/{total:.0} s  {rate:>9} msg/s  errors {:<6}",
            t0.elapsed().as_secs_f64(),
            tally.errors_total
        );
    }
    eprintln!();
}

/// Awaits every task, aborting those still running after `grace`.
async fn join_bounded(tasks: Vec<JoinHandle<()>>, grace: Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            abort.abort();
        }
    }
}
