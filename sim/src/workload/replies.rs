//! How clients react to answers: record the outcome in the history, update the topic model, and
//! decide whether to retry. A 5xx or a timeout on a produce is ambiguous: the retry is a new
//! attempt with the same ids. A clean rejection (4xx, 503) changed nothing.

use narad_core::{ClientError, ClientOp, ClientReply, RequestId, TopicId};
use rand::RngExt;

use super::{MAX_TRIES, Pending, Role, TopicState, Workload};
use crate::checker::{Checker, PageAsked, ReadKind, inv};

/// What to do after an answer.
pub(super) enum Next {
    Finished,
    Retry { ambiguous: bool },
}

impl Workload {
    /// Node `node` answered `request`. Returns the client to wake and after how long.
    pub fn on_reply(
        &mut self,
        node: u32,
        request: RequestId,
        reply: &ClientReply,
        checker: &mut Checker,
    ) -> Option<(usize, u64)> {
        if !self.answered.insert(request) {
            let detail = format!("request {} answered twice (now by n{node})", request.0);
            checker.violation(crate::checker::inv::ANSWERED_TWICE, detail);
            return None;
        }
        let Some(client) = self.waiting_client(request) else {
            self.late_reply(node, request, reply, checker);
            return None;
        };
        let (_, pending, _) =
            self.clients[client].waiting.take().expect("invariant: found waiting");
        checker.admin_answered(node, request, Some(reply));
        checker.access_answered(request, Some(reply));
        if let (Pending::Access(access), ClientReply::Topics { topics, next }) = (&pending, reply)
            && let ClientOp::ListTopics { after, limit } = &access.op
        {
            // The access client's users may not see every topic.
            let asked = PageAsked { after: after.clone(), limit: *limit, sees_all: false };
            checker.topic_page(&asked, topics, next.as_deref());
        }
        let next = self.handle(node, &pending, Some(reply), checker);
        Some((client, self.after(client, pending, next)))
    }

    /// `request` got no answer in time: ambiguous.
    pub fn on_timeout(
        &mut self,
        request: RequestId,
        checker: &mut Checker,
    ) -> Option<(usize, u64)> {
        let client = self.waiting_client(request)?;
        let (_, pending, node) =
            self.clients[client].waiting.take().expect("invariant: found waiting");
        if let Pending::Produce { ids, .. } = &pending {
            self.late.insert(request, ids.clone());
        }
        checker.admin_answered(node, request, None);
        checker.access_answered(request, None);
        let next = self.handle(node, &pending, None, checker);
        Some((client, self.after(client, pending, next)))
    }

    /// Node `node` went down: every request in flight to it ends with a connection reset
    /// (ambiguous).
    pub fn on_node_down(&mut self, node: u32, checker: &mut Checker) -> Vec<(usize, u64)> {
        let waiting: Vec<RequestId> = self
            .clients
            .iter()
            .filter_map(|c| c.waiting.as_ref().filter(|w| w.2 == node).map(|w| w.0))
            .collect();
        waiting.into_iter().filter_map(|r| self.on_timeout(r, checker)).collect()
    }

    fn waiting_client(&self, request: RequestId) -> Option<usize> {
        self.clients.iter().position(|c| c.waiting.as_ref().is_some_and(|w| w.0 == request))
    }

    /// A 202 that arrived after its client gave up still counts: the node promised durability.
    fn late_reply(
        &mut self,
        node: u32,
        request: RequestId,
        reply: &ClientReply,
        checker: &mut Checker,
    ) {
        if let Some(ids) = self.late.remove(&request)
            && let ClientReply::Produced { accepted } = reply
        {
            checker.acked(node, &ids, *accepted);
        }
    }

    fn after(&mut self, client: usize, pending: Pending, next: Next) -> u64 {
        let max_attempts = self.cfg.max_attempts;
        let c = &mut self.clients[client];
        match next {
            Next::Finished => {
                c.tries = 0;
                c.ambiguous_tries = 0;
                self.think()
            }
            Next::Retry { ambiguous } => {
                c.ambiguous_tries += u32::from(ambiguous);
                let is_produce = matches!(pending, Pending::Produce { .. });
                if c.tries >= MAX_TRIES || (is_produce && c.ambiguous_tries >= max_attempts) {
                    c.tries = 0;
                    c.ambiguous_tries = 0;
                } else {
                    c.next = Some(pending);
                }
                self.rng.random_range(5_000..100_000)
            }
        }
    }

    fn handle(
        &mut self,
        node: u32,
        pending: &Pending,
        reply: Option<&ClientReply>,
        checker: &mut Checker,
    ) -> Next {
        match pending {
            Pending::Produce { ids, invalid, topic, inc, .. } => {
                let live = self.topics.live_id(topic) == Some(*inc);
                self.produce_answer(node, ids, *invalid, (topic, *inc, live), reply, checker)
            }
            Pending::Create { name, partitions } => {
                self.create_answer(name, *partitions, reply, checker)
            }
            Pending::Lookup { name } => self.lookup_answer(name, reply, checker),
            Pending::Delete { name, .. } => match reply {
                Some(ClientReply::TopicDeleted)
                | Some(ClientReply::Error(ClientError::NotFound(_))) => {
                    self.topics.set(name, TopicState::Gone);
                    Next::Finished
                }
                _ => Next::Retry { ambiguous: true },
            },
            // Answers are judged by the admin checker; only an ambiguous one is tried again.
            Pending::Update { .. } => match reply {
                Some(ClientReply::Error(e)) if e.http_status() >= 500 => {
                    Next::Retry { ambiguous: true }
                }
                None => Next::Retry { ambiguous: true },
                Some(_) => Next::Finished,
            },
            Pending::Queue { worker, op } => self.queue_answer(*worker, op, reply, checker),
            Pending::Access(request) => {
                let client = self.access.as_mut().expect("invariant: the access client asked");
                client.answered(request, reply);
                Next::Finished
            }
            Pending::Consume { key, name, offset, sent, .. } => {
                match reply {
                    Some(ClientReply::Records(records)) => {
                        checker.consumed(*key, *offset, records, ReadKind::Live);
                        if let Some(sent) = sent {
                            checker.long_poll_answered(name, *key, *offset, *sent, records.len());
                        }
                        self.cursors.insert(*key, offset + records.len() as u64);
                    }
                    Some(ClientReply::Error(ClientError::NotFound(e)))
                        if self.topics.live_id(name) == Some(key.topic) && !self.cluster =>
                    {
                        checker.violation(
                            inv::TOPIC_LOST,
                            format!("consume of live topic {name}: {e}"),
                        );
                    }
                    Some(ClientReply::Error(ClientError::Gone { log_start_offset })) => {
                        // Records below the log start are gone: read on from it (the final
                        // read judges whether they could be).
                        checker.live_gone(*key, *offset, *log_start_offset);
                        self.cursors.insert(*key, (*log_start_offset).max(*offset));
                    }
                    Some(ClientReply::Error(_)) | None => checker.counters.consume_errors += 1,
                    Some(other) => unexpected(checker, "consume", other),
                }
                Next::Finished
            }
        }
    }

    fn produce_answer(
        &mut self,
        node: u32,
        ids: &[u64],
        invalid: bool,
        (topic, inc, live): (&str, TopicId, bool),
        reply: Option<&ClientReply>,
        checker: &mut Checker,
    ) -> Next {
        let error = match reply {
            None => {
                checker.ambiguous(ids);
                return Next::Retry { ambiguous: true };
            }
            Some(ClientReply::Produced { accepted }) => {
                checker.acked(node, ids, *accepted);
                // A lagging replica may know the name as another incarnation with more
                // partitions: then the pinned partition was valid there.
                let elsewhere = self.cluster
                    && ids.iter().all(|&id| !checker.msg(id).acked_under.contains(&inc));
                if invalid && !elsewhere {
                    checker.violation(
                        inv::HALF_APPLIED,
                        format!("invalid produce of {} messages accepted", ids.len()),
                    );
                }
                return Next::Finished;
            }
            Some(ClientReply::Error(e)) => e,
            Some(other) => {
                unexpected(checker, "produce", other);
                return Next::Finished;
            }
        };
        match error.http_status() {
            500 => {
                checker.ambiguous(ids);
                Next::Retry { ambiguous: true }
            }
            503 => Next::Retry { ambiguous: false },
            // The payer's produce quota (judged by the checker, `checker/quota.rs`).
            429 if self.cfg.produce_quota => Next::Retry { ambiguous: false },
            400 if invalid => Next::Finished,
            // A lagging replica resolved the name to another incarnation (fewer partitions).
            400 if self.cluster => Next::Retry { ambiguous: false },
            404 if !live => Next::Finished,
            // A lagging replica does not know the topic yet: retry, likely on another node.
            404 if self.cluster => Next::Retry { ambiguous: false },
            404 => {
                checker
                    .violation(inv::TOPIC_LOST, format!("produce to live topic {topic}: {error}"));
                Next::Finished
            }
            _ => {
                checker.violation(
                    inv::PROTOCOL,
                    format!("produce of {} messages rejected: {error}", ids.len()),
                );
                Next::Finished
            }
        }
    }

    fn create_answer(
        &mut self,
        name: &str,
        partitions: u32,
        reply: Option<&ClientReply>,
        checker: &mut Checker,
    ) -> Next {
        match reply {
            Some(ClientReply::TopicCreated(info)) => {
                self.topics
                    .set(name, TopicState::Live { id: info.id, partitions: info.partitions });
                checker.topic_live(name, info.id);
            }
            Some(ClientReply::Error(e)) if matches!(e.http_status(), 400 | 413) => {
                checker.violation(inv::PROTOCOL, format!("create {name}: {e}"));
                self.topics.set(name, TopicState::Gone);
            }
            // 409 (an earlier ambiguous attempt made it), 5xx, timeout: look it up.
            _ => self.topics.set(name, TopicState::Creating { partitions, ambiguous: true }),
        }
        Next::Finished
    }

    fn lookup_answer(
        &mut self,
        name: &str,
        reply: Option<&ClientReply>,
        checker: &mut Checker,
    ) -> Next {
        match reply {
            // A lagging replica still shows an incarnation we deleted: ask again.
            Some(ClientReply::Topic(info, _)) if self.topics.is_deleted(info.id) => {
                Next::Retry { ambiguous: false }
            }
            Some(ClientReply::Topic(info, _)) => {
                self.topics
                    .set(name, TopicState::Live { id: info.id, partitions: info.partitions });
                checker.topic_live(name, info.id);
                Next::Finished
            }
            Some(ClientReply::Error(ClientError::NotFound(_))) => {
                // The ambiguous create did not happen: create again.
                let partitions = match self.topics.get(name) {
                    Some(TopicState::Creating { partitions, .. }) => partitions,
                    _ => 1,
                };
                if let Some(admin) = self.clients.iter_mut().find(|c| c.role == Role::Admin) {
                    admin.next = Some(Pending::Create { name: name.to_string(), partitions });
                }
                Next::Finished
            }
            _ => Next::Retry { ambiguous: false },
        }
    }
}

fn unexpected(checker: &mut Checker, what: &str, reply: &ClientReply) {
    checker.violation(inv::PROTOCOL, format!("unexpected answer to {what}: {reply:?}"));
}
