//! Long-poll on the node: when a replay consume with a `wait` finds nothing at its offset, it is
//! parked (`parked.rs`) instead of answered; a commit that moves the partition's high watermark
//! past its offset wakes it, and it is then served like a consume without a wait (a read of the
//! log). The node's timer answers it empty at its deadline; a deleted topic answers 404; a
//! partition this node no longer owns, or a shutdown, answers empty (docs/design.md §4.9).
//! Queue receives park here too (`node/queue.rs` parks them): woken by the high watermark, by a
//! message becoming available again, and by the expiry of a lease they watch.

use super::Node;
use super::parked::{Entry, Waiter};
use crate::api::{ClientError, ClientReply};
use crate::constants::MAX_CONSUME_WAIT_MS;
use crate::ids::PartitionKey;
use crate::peer::{PeerMessage, WireError};

impl Node {
    /// Parks a consume that found nothing, if it asked to wait and the node may hold it; else
    /// answers it empty at once. Past the bound it is answered `Overloaded` (503: back off and
    /// retry) rather than empty, so a client does not spin.
    pub(super) fn park_or_answer_empty(&mut self, waiter: Waiter, wait_ms: u64) {
        let wait_ms = wait_ms.min(MAX_CONSUME_WAIT_MS);
        if wait_ms == 0 || self.shutting_down {
            return self.answer_waiter(waiter, Ok(()));
        }
        let watch = match &waiter {
            Waiter::Client { key, offset, .. } | Waiter::Peer { key, offset, .. } => {
                (*key, *offset)
            }
            Waiter::Receive { .. } | Waiter::PeerReceive { .. } | Waiter::PeerWatch { .. } => {
                unreachable!("queue receives park through `park_receive` and `on_receive_watch`")
            }
        };
        let deadline = self.now.plus_millis(wait_ms);
        if let Err(waiter) = self.parked.park(waiter, vec![watch], deadline) {
            let error = ClientError::Overloaded(format!(
                "{} long-poll consumes are parked on this node; retry later",
                self.parked.len()
            ));
            self.answer_waiter(waiter, Err(error));
        }
    }

    /// The high watermark of `key` moved (a commit became visible): serves every parked consume
    /// it passed, each with a read of the log.
    pub(super) fn wake_parked(&mut self, key: PartitionKey) {
        let Some(high_watermark) = self.partitions.get(&key).map(|log| log.high_watermark()) else {
            return;
        };
        for entry in self.parked.take_passed(key, high_watermark) {
            self.serve_woken(entry);
        }
    }

    /// A woken consume is read now, as one without a wait (it does not park again); a woken
    /// queue receive tries again, and parks again if it still finds nothing before its end.
    fn serve_woken(&mut self, entry: Entry) {
        match entry.waiter {
            Waiter::Client { request, topic, key, offset, max } => {
                self.read_local(request, key, offset, max, topic, 0);
            }
            Waiter::Peer { from, id, key, offset, max } => {
                self.on_forwarded_consume(from, id, key, offset, max, 0);
            }
            Waiter::Receive { id, .. } => self.resume_receive(id),
            Waiter::PeerReceive { from, id, key, max, until } => {
                self.resume_peer_receive(from, id, key, max, until);
            }
            Waiter::PeerWatch { from, id } => {
                self.send(from, &PeerMessage::ReceiveWatchReply { id });
            }
        }
    }

    /// Answers every parked consume whose wait is over: nothing became visible in time. A
    /// queue receive parked only until a lease it watches expires tries again instead.
    pub(super) fn expire_parked(&mut self) {
        for entry in self.parked.take_expired(self.now) {
            let until = match entry.waiter {
                Waiter::Receive { until, .. } | Waiter::PeerReceive { until, .. } => until,
                Waiter::Client { .. } | Waiter::Peer { .. } | Waiter::PeerWatch { .. } => self.now,
            };
            if until > self.now {
                self.serve_woken(entry);
            } else {
                self.answer_waiter(entry.waiter, Ok(()));
            }
        }
    }

    /// A message of `key` became available again without the high watermark moving (a nack, a
    /// failed ack, delivery or move): the queue receives watching it try again.
    pub(super) fn wake_receives(&mut self, key: PartitionKey) {
        for entry in self.parked.take_receives(key) {
            self.serve_woken(entry);
        }
    }

    /// A topic incarnation was deleted: its parked consumes are answered 404.
    pub(super) fn release_parked_topic(&mut self, topic: crate::ids::TopicId) {
        for entry in self.parked.take_topic(topic) {
            let error = ClientError::NotFound("topic not found (deleted while waiting)".into());
            self.answer_waiter(entry.waiter, Err(error));
        }
    }

    /// Shutdown begins: every parked consume is answered empty, as if its wait had ended.
    pub(super) fn release_parked_for_shutdown(&mut self) {
        for entry in self.parked.take_all() {
            self.answer_waiter(entry.waiter, Ok(()));
        }
    }

    /// Once a retention pass: parked consumes on a partition whose topic this (caught-up)
    /// replica no longer knows answer 404 (a deletion that arrived in a snapshot, not as an
    /// applied command); on one this node no longer owns, empty (the client asks again and is
    /// routed to the owner).
    pub(super) fn revalidate_parked(&mut self) {
        for key in self.parked.watched_keys() {
            if self.meta.topic_by_id(key.topic).is_none() {
                if self.meta.caught_up() {
                    self.release_parked_topic(key.topic);
                }
            } else if self.meta.owner(key) != Some(self.config.node_id) {
                for entry in self.parked.take_key(key) {
                    self.answer_waiter(entry.waiter, Ok(()));
                }
            }
        }
    }

    /// Answers a waiter without reading: `Ok` is the empty answer (204), `Err` the error.
    pub(super) fn answer_waiter(&mut self, waiter: Waiter, result: Result<(), ClientError>) {
        match waiter {
            Waiter::Receive { id, .. } => self.answer_receive_empty(id, result),
            Waiter::PeerReceive { from, id, .. } => {
                let result = result.map(|()| Vec::new()).map_err(|e| WireError::from_client(&e));
                self.send(from, &PeerMessage::ReceiveReply { id, result });
            }
            Waiter::Client { request, .. } => {
                let reply = match result {
                    Ok(()) => ClientReply::Records(Vec::new()),
                    Err(error) => ClientReply::Error(error),
                };
                self.reply(request, reply);
            }
            Waiter::Peer { from, id, .. } => {
                let result = result.map(|()| Vec::new()).map_err(|e| WireError::from_client(&e));
                self.send(from, &PeerMessage::ConsumeReply { id, result });
            }
            // Whatever ended it (a deletion, a move, a shutdown), the receive looks again.
            Waiter::PeerWatch { from, id } => {
                self.send(from, &PeerMessage::ReceiveWatchReply { id });
            }
        }
    }

    /// Parked consumes (for checkers and metrics).
    pub fn parked_consumes(&self) -> usize {
        self.parked.len()
    }
}
