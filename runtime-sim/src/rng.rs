//! One master seed, one independent ChaCha stream per component (each node's disk, the workload,
//! the fault schedule, the swarm draw, the network, client routing). Components draw from their own
//! stream, so adding a draw in one place does not reshuffle what the others see.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A component of the simulation that owns a random stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// Which fault classes are on and how hard they hit (swarm testing).
    Swarm,
    /// Client behaviour: what to produce, when, and how to retry.
    Workload,
    /// When structured faults (crashes, pauses, disk-full windows) happen.
    Faults,
    /// The network model (cluster simulations).
    Network,
    /// Which node each client request goes to (cluster simulations).
    Routing,
    /// How many nodes a seed runs (swarm testing picks 1, 3 or 5).
    Topology,
    /// The disk model of one node (latencies and per-operation faults).
    Disk(u32),
    /// The seed handed to one node's `Config`.
    Node(u32),
    /// Whether and how a seed batches inputs before a drain (see `NodeHost::set_batching`).
    Batching,
    /// The workload's topic updates (their own stream, so seeds without updates keep every
    /// other workload draw).
    WorkloadUpdates,
    /// The workload's queue workers (receive, settle, drop leases): their own stream, so seeds
    /// without queue workers keep every other workload draw.
    WorkloadQueue,
    /// The workload's long-poll draws (their own stream, so seeds without long-polls keep
    /// every other workload draw).
    WorkloadLongPoll,
    /// The access client (users, grants, and requests as those users): its own stream, so
    /// seeds without it keep every other draw; also whether a seed runs it at all.
    WorkloadAccess,
    /// Tier 2: turmoil's own random choices (message latencies), and per node the runtime's
    /// entropy seam (handshake nonces, dial jitter, quinn's seed) and its socket's datagram
    /// faults.
    Turmoil,
    /// Tier 2: which scheduled process kills it turns into graceful restarts.
    Tier2Faults,
    Entropy(u32),
    Datagrams(u32),
}

impl Component {
    fn stream_id(self) -> u64 {
        match self {
            Component::Swarm => 1,
            Component::Workload => 2,
            Component::Faults => 3,
            Component::Network => 4,
            Component::Routing => 5,
            Component::Topology => 6,
            Component::Batching => 7,
            Component::WorkloadUpdates => 8,
            Component::WorkloadQueue => 11,
            Component::WorkloadLongPoll => 9,
            Component::Disk(node) => (1 << 32) | u64::from(node),
            Component::Node(node) => (2 << 32) | u64::from(node),
            Component::Turmoil => 12,
            Component::Tier2Faults => 13,
            Component::WorkloadAccess => 14,
            Component::Entropy(node) => (3 << 32) | u64::from(node),
            Component::Datagrams(node) => (4 << 32) | u64::from(node),
        }
    }
}

/// The random stream of `component` under `master`.
pub fn component_rng(master: u64, component: Component) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(master);
    rng.set_stream(component.stream_id());
    rng
}

/// A 64-bit seed derived from the component's stream (for seeds handed to the core).
pub fn component_seed(master: u64, component: Component) -> u64 {
    component_rng(master, component).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn streams_are_independent_and_stable() {
        let mut a = component_rng(7, Component::Workload);
        let mut b = component_rng(7, Component::Disk(1));
        let xs: Vec<u64> = (0..4).map(|_| a.random()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.random()).collect();
        assert_ne!(xs, ys);
        let mut again = component_rng(7, Component::Workload);
        let zs: Vec<u64> = (0..4).map(|_| again.random()).collect();
        assert_eq!(xs, zs);
        assert_ne!(component_seed(7, Component::Node(1)), component_seed(8, Component::Node(1)));
    }
}
