//! `SimNetwork`: the simulated network between nodes, drawing from its own random stream.
//!
//! Every peer message gets a latency (with jitter, and now and then a long spike, so later
//! messages overtake it), and may be dropped or duplicated. Structured faults hold for a while
//! and then heal: links cut in both directions (partitions) or in one (one-way partitions), and
//! clogged links whose messages are held back and then released in one burst. A cut is checked
//! when a message is sent and again when it would arrive, so a partition also stops what is
//! already in flight. Cuts and clogs are counted per link, so overlapping windows nest.

use std::collections::BTreeMap;

use bytes::Bytes;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::fault::{FaultClass, FaultHits};

/// A directed link: (from, to), as node indexes.
pub type Link = (u32, u32);

/// Per-message fault knobs (the structured faults are switched by `cut`, `clog` and friends).
#[derive(Clone, Debug, PartialEq)]
pub struct NetFaults {
    /// One-way latency is drawn from `latency_min_us..=latency_max_us`.
    pub latency_min_us: u64,
    pub latency_max_us: u64,
    /// Probability that a message is delayed by up to `spike_max_us` more (reordering).
    pub spike_rate: f64,
    pub spike_max_us: u64,
    /// Probability that a message is lost.
    pub drop_rate: f64,
    /// Probability that a message is delivered twice.
    pub duplicate_rate: f64,
}

impl Default for NetFaults {
    fn default() -> Self {
        NetFaults {
            latency_min_us: 50,
            latency_max_us: 500,
            spike_rate: 0.0,
            spike_max_us: 0,
            drop_rate: 0.0,
            duplicate_rate: 0.0,
        }
    }
}

/// What happens to a message handed to the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Delivered after each of these delays (two entries: duplicated).
    Deliver(Vec<u64>),
    /// Held on a clogged link until it is unclogged.
    Held,
    /// Lost on the way (a per-message drop): the sender cannot tell.
    Dropped,
    /// Stopped by a cut at the sender: there is no connection, which the sender's transport
    /// can notice and report.
    Unreachable,
}

/// How many fault windows currently cut a link, by kind.
#[derive(Clone, Copy, Debug, Default)]
struct Cuts {
    symmetric: u32,
    one_way: u32,
}

/// The network between the simulated nodes.
pub struct SimNetwork {
    rng: ChaCha8Rng,
    /// Per-message fault knobs.
    pub faults: NetFaults,
    cuts: BTreeMap<Link, Cuts>,
    clogs: BTreeMap<Link, u32>,
    held: BTreeMap<Link, Vec<Bytes>>,
    /// Hits per network fault class.
    pub hits: FaultHits,
}

impl SimNetwork {
    /// A healthy network drawing from `rng`.
    pub fn new(rng: ChaCha8Rng) -> SimNetwork {
        SimNetwork {
            rng,
            faults: NetFaults::default(),
            cuts: BTreeMap::new(),
            clogs: BTreeMap::new(),
            held: BTreeMap::new(),
            hits: FaultHits::default(),
        }
    }

    /// Decides the fate of a message sent on `link` now (a held message is kept here).
    pub fn send(&mut self, link: Link, bytes: Bytes) -> Fate {
        if !self.passes(link) {
            return Fate::Unreachable;
        }
        if self.clogs.get(&link).is_some_and(|&n| n > 0) {
            self.hits.hit(FaultClass::Clog);
            self.held.entry(link).or_default().push(bytes);
            return Fate::Held;
        }
        let f = &self.faults;
        let (drop_rate, duplicate_rate) = (f.drop_rate, f.duplicate_rate);
        if drop_rate > 0.0 && self.rng.random_bool(drop_rate) {
            self.hits.hit(FaultClass::NetDrop);
            return Fate::Dropped;
        }
        let mut delays = vec![self.latency()];
        if duplicate_rate > 0.0 && self.rng.random_bool(duplicate_rate) {
            self.hits.hit(FaultClass::NetDuplicate);
            delays.push(self.latency());
        }
        Fate::Deliver(delays)
    }

    /// True when a message on `link` may arrive now (a cut that started while it was in flight
    /// stops it too). Counts the hit when it may not.
    pub fn passes(&mut self, link: Link) -> bool {
        let Some(cuts) = self.cuts.get(&link).copied() else {
            return true;
        };
        if cuts.symmetric > 0 {
            self.hits.hit(FaultClass::Partition);
            false
        } else if cuts.one_way > 0 {
            self.hits.hit(FaultClass::OneWayPartition);
            false
        } else {
            true
        }
    }

    /// One latency draw: base plus jitter, and now and then a long spike.
    pub fn latency(&mut self) -> u64 {
        let f = &self.faults;
        let (min, max) = (f.latency_min_us, f.latency_max_us.max(f.latency_min_us));
        let (spike_rate, spike_max) = (f.spike_rate, f.spike_max_us);
        let mut delay = self.rng.random_range(min..=max);
        if spike_rate > 0.0 && spike_max > 0 && self.rng.random_bool(spike_rate) {
            self.hits.hit(FaultClass::NetDelay);
            delay += self.rng.random_range(0..=spike_max);
        }
        delay
    }

    /// Cuts `link` (one more window); `symmetric` says which kind of fault it belongs to.
    pub fn cut(&mut self, link: Link, symmetric: bool) {
        let cuts = self.cuts.entry(link).or_default();
        if symmetric {
            cuts.symmetric += 1;
        } else {
            cuts.one_way += 1;
        }
    }

    /// Ends one window that cut `link`.
    pub fn uncut(&mut self, link: Link, symmetric: bool) {
        if let Some(cuts) = self.cuts.get_mut(&link) {
            if symmetric {
                cuts.symmetric = cuts.symmetric.saturating_sub(1);
            } else {
                cuts.one_way = cuts.one_way.saturating_sub(1);
            }
            if cuts.symmetric == 0 && cuts.one_way == 0 {
                self.cuts.remove(&link);
            }
        }
    }

    /// Starts holding the messages of `link`.
    pub fn clog(&mut self, link: Link) {
        *self.clogs.entry(link).or_default() += 1;
    }

    /// Ends one clog window of `link`; once none is left, returns the held messages in send
    /// order with their delivery delays (a burst: each gets one ordinary latency draw).
    pub fn unclog(&mut self, link: Link) -> Vec<(Bytes, u64)> {
        let Some(count) = self.clogs.get_mut(&link) else {
            return Vec::new();
        };
        *count = count.saturating_sub(1);
        if *count > 0 {
            return Vec::new();
        }
        self.clogs.remove(&link);
        let held = self.held.remove(&link).unwrap_or_default();
        held.into_iter().map(|bytes| (bytes, self.latency())).collect()
    }

    /// True while any cut or clog is active.
    pub fn is_faulty(&self) -> bool {
        !self.cuts.is_empty() || !self.clogs.is_empty()
    }

    /// Heals everything: no cut, no clog, no per-message fault. Returns every held message with
    /// its link and delivery delay.
    pub fn heal(&mut self) -> Vec<(Link, Bytes, u64)> {
        self.faults = NetFaults::default();
        self.cuts.clear();
        self.clogs.clear();
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        for (link, messages) in held {
            for bytes in messages {
                let delay = self.latency();
                out.push((link, bytes, delay));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Component, component_rng};

    fn net() -> SimNetwork {
        SimNetwork::new(component_rng(5, Component::Network))
    }

    fn msg(n: u8) -> Bytes {
        Bytes::from(vec![n])
    }

    #[test]
    fn cuts_nest_and_stop_one_direction_only_when_one_way() {
        let mut n = net();
        n.cut((0, 1), false);
        assert_eq!(n.send((0, 1), msg(1)), Fate::Unreachable);
        assert!(matches!(n.send((1, 0), msg(2)), Fate::Deliver(_)));
        n.cut((0, 1), true);
        n.uncut((0, 1), false);
        assert!(!n.passes((0, 1)), "the symmetric window still holds");
        n.uncut((0, 1), true);
        assert!(n.passes((0, 1)));
        assert_eq!(n.hits.get(FaultClass::OneWayPartition), 1);
        assert_eq!(n.hits.get(FaultClass::Partition), 1);
    }

    #[test]
    fn a_clog_holds_messages_and_releases_them_in_order() {
        let mut n = net();
        n.clog((2, 0));
        n.clog((2, 0));
        for i in 0..3 {
            assert_eq!(n.send((2, 0), msg(i)), Fate::Held);
        }
        assert!(n.unclog((2, 0)).is_empty(), "one window is still open");
        let burst: Vec<Bytes> = n.unclog((2, 0)).into_iter().map(|(b, _)| b).collect();
        assert_eq!(burst, vec![msg(0), msg(1), msg(2)]);
        assert_eq!(n.hits.get(FaultClass::Clog), 3);
        assert!(!n.is_faulty());
    }

    #[test]
    fn drops_duplicates_and_spikes_are_drawn_and_counted() {
        let mut n = net();
        n.faults = NetFaults {
            spike_rate: 0.2,
            spike_max_us: 100_000,
            drop_rate: 0.1,
            duplicate_rate: 0.1,
            ..NetFaults::default()
        };
        let mut delivered = 0;
        for i in 0..1_000 {
            if let Fate::Deliver(delays) = n.send((0, 1), msg(i as u8)) {
                delivered += delays.len();
            }
        }
        assert!(delivered > 800 && delivered < 1_100, "{delivered}");
        for class in [FaultClass::NetDrop, FaultClass::NetDuplicate, FaultClass::NetDelay] {
            assert!(n.hits.get(class) > 20, "{class:?}");
        }
        n.clog((0, 1));
        n.send((0, 1), msg(9));
        assert_eq!(n.heal().len(), 1);
        assert_eq!(n.faults, NetFaults::default());
    }
}
