//! `narad-sim`: run one seed, sweep many in parallel, or replay one with its full event trace.
//! Seeds are accepted in decimal or `0x…` hex; `--nodes` picks one node, a cluster of 3 or 5, or
//! lets each seed choose (`swarm`, the default). A failing seed prints the faults that were on,
//! the broken invariant, the last events and the exact replay command, and exits 1.

use std::io::{IsTerminal, Write};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use narad_sim::{NodesChoice, RunOptions, RunOutcome, parse_seed, run_seed_catching, sweep::sweep};

#[derive(Parser)]
#[command(name = "narad-sim", about = "Deterministic simulator of the Narad broker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every run takes besides its seed.
#[derive(clap::Args, Clone, Copy)]
struct Shape {
    /// Nodes: 1, 3, 5 (any of 1..9), `swarm` (each seed picks 1, 3 or 5) or `cluster` (3 or 5).
    #[arg(long, default_value = "swarm", value_parser = NodesChoice::parse)]
    nodes: NodesChoice,
    /// Turn off the owners' idempotent commits (to measure the duplicates they prevent).
    #[arg(long)]
    no_idempotent_commits: bool,
    /// `core`: the core's state machine under the simulator's scheduler (fast); `runtime`: the
    /// production runtime (driver, HTTP router, QUIC transport) on simulated hosts (turmoil).
    #[arg(long, default_value = "core", value_parser = narad_sim::swarm::Tier::parse)]
    tier: narad_sim::swarm::Tier,
}

impl Shape {
    fn options(self) -> RunOptions {
        let idempotent_commits = !self.no_idempotent_commits;
        RunOptions { nodes: self.nodes, idempotent_commits, tier: self.tier }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run one seed.
    Run {
        #[arg(long, value_parser = parse_seed)]
        seed: u64,
        #[command(flatten)]
        shape: Shape,
        /// Print one JSON object as the last line.
        #[arg(long)]
        json: bool,
    },
    /// Run a range of seeds in parallel, e.g. `--seeds 0..10000`.
    Sweep {
        #[arg(long)]
        seeds: String,
        #[command(flatten)]
        shape: Shape,
        /// Worker threads (default: available cores).
        #[arg(long)]
        jobs: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// Run a named scenario (`--list` to list them).
    Scenario {
        name: Option<String>,
        #[arg(long)]
        list: bool,
        /// Print every event.
        #[arg(long)]
        trace: bool,
    },
    /// Run one seed again, printing its event trace; ends with the same hash as `run`.
    Replay {
        #[arg(long, value_parser = parse_seed)]
        seed: u64,
        #[command(flatten)]
        shape: Shape,
        /// Print every event (not only the summary and, on failure, the last events).
        #[arg(long)]
        trace: bool,
        /// Also print the core's own log lines (a `tracing` filter, e.g. `debug`), stamped
        /// with simulated time and interleaved with the events.
        #[arg(long, value_name = "FILTER")]
        logs: Option<String>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let passed = match cli.command {
        Command::Run { seed, shape, json } => run(seed, &shape.options(), json),
        Command::Sweep { seeds, shape, jobs, json } => {
            run_sweep(&seeds, &shape.options(), jobs, json)?
        }
        Command::Replay { seed, shape, trace, logs } => {
            replay(seed, &shape.options(), trace, logs.as_deref())?
        }
        Command::Scenario { name, list, trace } => scenario(name.as_deref(), list, trace)?,
    };
    std::process::exit(if passed { 0 } else { 1 });
}

fn run(seed: u64, options: &RunOptions, json: bool) -> bool {
    let outcome = run_seed_catching(seed, options, false);
    if !outcome.passed {
        eprint!("{}", outcome.failure_report());
    }
    if json {
        println!("{}", outcome.to_json());
    } else {
        println!("{}", outcome.summary_line());
    }
    outcome.passed
}

fn replay(seed: u64, options: &RunOptions, trace: bool, logs: Option<&str>) -> Result<bool> {
    if let Some(filter) = logs {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_timer(narad_sim::trace::SimTime)
            .with_ansi(false)
            .with_writer(std::io::stdout)
            .init();
    }
    let outcome = if options.tier == narad_sim::swarm::Tier::Runtime {
        let outcome = narad_sim::tier2::run_seed(seed, options, trace);
        for record in &outcome.full_trace {
            println!("{record}");
        }
        outcome
    } else if trace || logs.is_some() {
        let sim = narad_sim::Simulation::from_seed(seed, options, false);
        let sim = if trace { sim.print_trace_live() } else { sim };
        sim.run()
    } else {
        run_seed_catching(seed, options, false)
    };
    match print_replay(&outcome) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(outcome.passed),
        other => other.map(|()| outcome.passed).map_err(Into::into),
    }
}

fn scenario(name: Option<&str>, list: bool, trace: bool) -> Result<bool> {
    if list || name.is_none() {
        for s in narad_sim::scenarios::catalog::all() {
            println!("{:40} {}", s.name, s.story);
        }
        return Ok(true);
    }
    let name = name.expect("invariant: checked above");
    let Some(s) = narad_sim::scenarios::by_name(name) else { bail!("no scenario named {name}") };
    let outcome = s.run(trace);
    print_replay(&outcome)?;
    print!("{}", narad_sim::scenarios::summary(&s, &outcome));
    Ok(outcome.passed)
}

fn print_replay(outcome: &RunOutcome) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for record in &outcome.full_trace {
        writeln!(out, "{record}")?;
    }
    if !outcome.passed {
        write!(out, "{}", outcome.failure_report())?;
    }
    writeln!(out, "{}", outcome.summary_line())?;
    writeln!(out, "trace_hash {}", outcome.trace_hash)?;
    out.flush()
}

fn parse_range(text: &str) -> Result<(u64, u64)> {
    let (a, b) = text.split_once("..").context("--seeds takes a range A..B")?;
    let from = parse_seed(a).map_err(anyhow::Error::msg)?;
    let to = parse_seed(b).map_err(anyhow::Error::msg)?;
    if to < from {
        bail!("empty seed range {text}");
    }
    Ok((from, to))
}

fn run_sweep(seeds: &str, options: &RunOptions, jobs: Option<usize>, json: bool) -> Result<bool> {
    let (from, to) = parse_range(seeds)?;
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(to - from);
        let style =
            ProgressStyle::with_template("{bar:40} {pos}/{len} seeds {per_sec} eta {eta} {msg}")
                .expect("invariant: template is valid");
        bar.set_style(style);
        bar
    } else {
        ProgressBar::hidden()
    };
    let on_seed = |outcome: &RunOutcome| {
        if !outcome.passed {
            bar.suspend(|| eprint!("{}", outcome.failure_report()));
            bar.set_message(format!("failing: {:#x}", outcome.seed));
        }
        bar.inc(1);
    };
    let report = sweep(from, to, jobs, options, &on_seed);
    bar.finish_and_clear();
    if json {
        println!("{}", report.to_json());
    } else {
        println!(
            "{} seeds: {} passed, {} failed; {:.1} seeds/s, {:.0} events/s; acked {} duplicates {} ({:.5} per acked record)",
            report.seeds,
            report.passed,
            report.failed,
            report.seeds_per_sec(),
            report.events_per_sec(),
            report.acked,
            report.duplicates,
            report.duplicate_rate()
        );
        for (nodes, t) in &report.by_nodes {
            println!(
                "  {nodes} node(s): {} seeds, {} failed, acked {}, duplicates {}",
                t.seeds, t.failed, t.acked, t.duplicates
            );
        }
        let access = report.access;
        println!(
            "  access client: {} seeds, {} requests; answers judged: {} as its users, {} as the \
             bootstrap admin",
            access.seeds, access.requests, access.probes_judged, access.admin_judged
        );
        println!(
            "  produce quotas: {} refusals (429) judged, in {} seeds",
            report.quota_refusals, report.seeds_with_quota_refusals
        );
        println!("  topic list: {} pages judged", report.topic_pages);
        for failure in &report.failures {
            println!("failing: {}", failure.replay_command());
        }
    }
    Ok(report.failed == 0)
}
