//! After the final read: let two retention passes go by (an owner reads the oldest unacked
//! record of each partition whose timestamp nothing told it), then ask for every live topic's
//! numbers and check each partition's oldest unacked timestamp (`checker/queue_lag.rs`).

use narad_core::{ClientOp, ClientReply, Instant, PartitionKey};

use super::Simulation;
use crate::trace::What;

/// Simulated time past two retention passes before the numbers are asked for.
const MARGIN_MICROS: u64 = 200_000;

impl Simulation {
    pub(super) fn check_oldest_unacked(&mut self) {
        if self.aborted {
            return;
        }
        self.world.record(0, What::Phase { name: "oldest-unacked" });
        let now = self.world.queue.now();
        let passes = 2 * self.cfg.sizes.retention_check_ms * 1_000;
        self.run_to(Instant(now.0 + passes + MARGIN_MICROS));
        // A deletion since then may have left a partition's new oldest record not read yet.
        let probed_since =
            Instant(self.world.queue.now().0.saturating_sub(passes / 2 + MARGIN_MICROS));
        let up: Vec<usize> = (0..self.nodes()).filter(|&n| self.hosts[n].is_up()).collect();
        for (t, (name, inc, _)) in self.world.workload.topics.all_live().into_iter().enumerate() {
            let Some(&via) = up.get(t % up.len().max(1)) else { return };
            let Some(ClientReply::Topic(info, partitions)) =
                self.call(via, ClientOp::GetTopic { name, partition: None })
            else {
                continue; // the final read already judged a topic that cannot be looked up
            };
            if info.id != inc {
                continue;
            }
            for stats in partitions {
                let key = PartitionKey { topic: inc, partition: stats.index };
                if let Some(numbers) = stats.numbers {
                    self.world.checker.queue_oldest_reported(key, &numbers, probed_since);
                }
            }
        }
    }
}
