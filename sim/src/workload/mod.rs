//! The workload: clients that create, update (retention) and delete topics, produce keyed,
//! keyless, pinned and batch messages with unique ids, retry ambiguous answers (a retry is a new
//! attempt with the same ids), and read partitions by offset. Each client has at most one request outstanding; in a cluster
//! each request goes to a node of its own (the simulation picks a random running one).

mod access;
mod queue;
mod replies;
pub mod topics;
mod updates;

use std::collections::{BTreeMap, VecDeque};

use narad_core::access::Principal;
use narad_core::{ClientOp, PartitionKey, ProduceMessage, RequestId, TopicChange, TopicId};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::checker::{AdminAsk, Checker, LongPollSent};
use crate::payload::payload;
use crate::swarm::WorkloadConfig;
pub use topics::{DEAD_LETTER_TOPIC, TopicModel, TopicState};

/// What a client does when it wakes.
#[derive(Clone, Debug)]
pub enum Wake {
    /// Send this request from `who` (then call `delivered` or `refused`).
    Send { request: RequestId, op: Box<ClientOp>, who: Who },
    /// Nothing to do yet: wake again after this many microseconds.
    Sleep(u64),
    /// This client has finished.
    Done,
}

/// Who a request is made as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    /// The principal the node is handed (the first tier): `Trusted` for every client but the
    /// access client's requests as users. Over HTTP `Trusted` goes without credentials, or
    /// with the bootstrap admin's when access control is on.
    Principal(Principal),
    /// HTTP Basic credentials (tier 2's access client): the node resolves the incarnation.
    Basic { name: String, password: String },
}

impl Who {
    pub fn trusted() -> Who {
        Who::Principal(Principal::Trusted)
    }

    /// The principal a node is handed directly (the first tier, which never asks over HTTP).
    pub fn principal(self) -> Principal {
        match self {
            Who::Principal(principal) => principal,
            Who::Basic { .. } => unreachable!("invariant: only tier 2 asks with credentials"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Admin,
    Producer,
    Reader,
    /// Queue worker number `.0` (`queue.rs`).
    Queue(usize),
    /// The access client (`access.rs`).
    Access,
}

/// A request a client is making (kept whole so it can be retried).
#[derive(Clone, Debug)]
enum Pending {
    Produce {
        topic: String,
        inc: TopicId,
        ids: Vec<u64>,
        messages: Vec<ProduceMessage>,
        batch: bool,
        invalid: bool,
    },
    Create {
        name: String,
        partitions: u32,
    },
    Lookup {
        name: String,
    },
    Delete {
        name: String,
    },
    /// A retention change; `valid: false`: deliberately out of bounds (must be refused).
    Update {
        name: String,
        change: TopicChange,
        valid: bool,
    },
    Consume {
        key: PartitionKey,
        name: String,
        offset: u64,
        max: u32,
        /// A long-poll's wait (0: none), and when it was sent (for the checker).
        wait_ms: u64,
        sent: Option<LongPollSent>,
    },
    /// A queue receive or settle of queue worker `worker`.
    Queue {
        worker: usize,
        op: queue::QueueOp,
    },
    /// A request of the access client.
    Access(access::AccessRequest),
}

impl Pending {
    /// The request; creates carry the retention the seed gives its topics.
    fn op(&self, cfg: &WorkloadConfig) -> ClientOp {
        match self {
            Pending::Produce { topic, messages, batch, .. } => ClientOp::Produce {
                topic: topic.clone(),
                messages: messages.clone(),
                batch: *batch,
            },
            // The dead-letter topic keeps its copies (the checker wants to find them all).
            Pending::Create { name, partitions } if name == DEAD_LETTER_TOPIC => {
                ClientOp::CreateTopic {
                    name: name.clone(),
                    partitions: Some(*partitions),
                    retention_ms: None,
                    retention_bytes: None,
                    queue: Default::default(),
                }
            }
            Pending::Create { name, partitions } => ClientOp::CreateTopic {
                name: name.clone(),
                partitions: Some(*partitions),
                retention_ms: cfg.create_retention_ms,
                retention_bytes: cfg.create_retention_bytes,
                queue: cfg.queue_settings(),
            },
            Pending::Lookup { name } => ClientOp::GetTopic { name: name.clone(), partition: None },
            Pending::Delete { name, .. } => ClientOp::DeleteTopic { name: name.clone() },
            Pending::Update { name, change, .. } => {
                ClientOp::UpdateTopic { name: name.clone(), change: *change }
            }
            Pending::Consume { key, name, offset, max, wait_ms, .. } => ClientOp::Consume {
                topic: name.clone(),
                partition: key.partition,
                offset: *offset,
                max: *max,
                wait_ms: *wait_ms,
            },
            Pending::Queue { op, .. } => op.op(),
            Pending::Access(request) => request.op.clone(),
        }
    }

    /// Who makes the request: the access client's requests as users, everything else trusted.
    fn who(&self) -> Who {
        match self {
            Pending::Access(request) => request.who.clone(),
            _ => Who::trusted(),
        }
    }
}

#[derive(Clone, Debug)]
struct Client {
    role: Role,
    /// The request in flight and the node it went to.
    waiting: Option<(RequestId, Pending, u32)>,
    /// The request about to be sent (built, or kept for a retry).
    next: Option<Pending>,
    /// Attempts of `next` that ended ambiguously / in total.
    ambiguous_tries: u32,
    tries: u32,
    done: bool,
}

/// Cap on attempts of one request, whatever the answers.
const MAX_TRIES: u32 = 200;

/// All clients and the workload's model of the topics.
pub struct Workload {
    cfg: WorkloadConfig,
    rng: ChaCha8Rng,
    /// Draws of topic updates only (their own stream: seeds without updates keep every draw).
    update_rng: ChaCha8Rng,
    /// Draws of long-poll waits only (likewise).
    poll_rng: ChaCha8Rng,
    /// Every request that got an answer (a second answer is a violation).
    answered: std::collections::BTreeSet<RequestId>,
    clients: Vec<Client>,
    /// Which topics exist, as far as the clients know.
    pub topics: TopicModel,
    next_request: u64,
    messages_left: u64,
    initial_created: u32,
    cursors: BTreeMap<PartitionKey, u64>,
    scripted_deletes: VecDeque<String>,
    scripted_creates: VecDeque<String>,
    /// Produces whose client gave up waiting: a late 202 still counts as an ack.
    late: BTreeMap<RequestId, Vec<u64>>,
    /// Several nodes: a node's replica may lag (a 404 for a topic just created elsewhere is
    /// a clean rejection, retried, not a lost topic).
    cluster: bool,
    /// Queue workers' state, and their own random stream (`with_queue_rng`).
    workers: Vec<queue::QueueWorker>,
    queue_rng: ChaCha8Rng,
    /// The access client, on seeds that run it (`with_access_rng`).
    access: Option<access::AccessClient>,
}

impl Workload {
    /// Clients for `cfg`, drawing from `rng` (topic updates from `update_rng`, long-poll waits
    /// from `poll_rng`).
    pub fn new(
        cfg: WorkloadConfig,
        (rng, update_rng, poll_rng): (ChaCha8Rng, ChaCha8Rng, ChaCha8Rng),
        cluster: bool,
    ) -> Workload {
        let mut clients = vec![new_client(Role::Admin)];
        clients.extend((0..cfg.producers.max(1)).map(|_| new_client(Role::Producer)));
        clients.extend((0..cfg.readers).map(|_| new_client(Role::Reader)));
        clients.extend((0..cfg.queue_workers as usize).map(|w| new_client(Role::Queue(w))));
        let workers = vec![Default::default(); cfg.queue_workers as usize];
        Workload {
            messages_left: cfg.messages,
            cfg,
            rng,
            update_rng,
            poll_rng,
            answered: std::collections::BTreeSet::new(),
            clients,
            topics: TopicModel::default(),
            next_request: 1,
            initial_created: 0,
            cursors: BTreeMap::new(),
            scripted_deletes: VecDeque::new(),
            scripted_creates: VecDeque::new(),
            late: BTreeMap::new(),
            cluster,
            workers,
            queue_rng: rand::SeedableRng::seed_from_u64(0),
            access: None,
        }
    }

    /// The access client draws from `rng` (`Component::WorkloadAccess`), on seeds whose
    /// configuration gives it requests; it is the last client (the others keep their numbers).
    pub fn with_access_rng(mut self, rng: ChaCha8Rng) -> Workload {
        if self.cfg.access_ops > 0 {
            self.access = Some(access::AccessClient::new(rng, self.cfg.access_ops));
            self.clients.push(new_client(Role::Access));
        }
        self
    }

    /// The access client asks over HTTP (tier 2): with credentials, its users' incarnations
    /// told apart by their passwords (`access.rs`).
    pub fn access_over_http(mut self) -> Workload {
        if let Some(access) = self.access.as_mut() {
            access.over_http();
        }
        self
    }

    /// Whether this seed runs the access client.
    pub fn has_access_client(&self) -> bool {
        self.access.is_some()
    }

    /// Queue workers draw from `rng` (`Component::WorkloadQueue`).
    pub fn with_queue_rng(mut self, rng: ChaCha8Rng) -> Workload {
        self.queue_rng = rng;
        self
    }

    /// Number of clients (wake each once at the start).
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// How long a request may stay unanswered before it counts as a timeout.
    pub fn timeout_micros(&self) -> u64 {
        self.cfg.request_timeout_ms * 1_000
    }

    /// True once every client has finished.
    pub fn is_done(&self) -> bool {
        self.clients.iter().all(|c| c.done)
    }

    /// Ends the workload: every client is done (the heal phase starts).
    pub fn stop(&mut self) {
        for client in &mut self.clients {
            client.done = true;
        }
    }

    /// Makes the admin client delete `name` soon (scenarios).
    pub fn request_delete(&mut self, name: &str) {
        self.scripted_deletes.push_back(name.to_string());
    }

    /// Makes the admin client create `name` soon (scenarios; a gone name is re-created).
    pub fn request_create(&mut self, name: &str) {
        self.scripted_creates.push_back(name.to_string());
    }

    /// True for the access client.
    pub fn is_access_client(&self, client: usize) -> bool {
        self.clients[client].role == Role::Access
    }

    /// True for the admin client (topic creates and deletes).
    pub fn is_admin(&self, client: usize) -> bool {
        self.clients[client].role == Role::Admin
    }

    /// A think time in microseconds.
    pub fn think(&mut self) -> u64 {
        self.rng.random_range(0..=self.cfg.think_max_us)
    }

    fn producers_finished(&self) -> bool {
        self.messages_left == 0
            && self.clients.iter().filter(|c| c.role == Role::Producer).all(|c| c.done)
    }

    /// Client `client` wakes up: what does it do?
    pub fn wake(&mut self, client: usize, checker: &mut Checker) -> Wake {
        let c = &self.clients[client];
        if c.done || c.waiting.is_some() {
            return Wake::Done;
        }
        if let Some(Pending::Produce { topic, inc, .. }) = &c.next
            && self.topics.live_id(topic) != Some(*inc)
        {
            // The topic is being deleted: the retry would only be rejected (its ids are excused).
            self.clients[client].next = None;
        }
        let c = &self.clients[client];
        if c.next.is_none() {
            let decided = match c.role {
                Role::Admin => self.admin_next(),
                Role::Producer => self.produce_next(checker),
                Role::Reader => self.read_next(),
                Role::Queue(w) => self.queue_next(w, checker),
                Role::Access => self.access_next(),
            };
            match decided {
                Ok(pending) => self.clients[client].next = Some(pending),
                Err(wake) => {
                    if matches!(wake, Wake::Done) {
                        self.clients[client].done = true;
                    }
                    return wake;
                }
            }
        }
        let pending = self.clients[client].next.as_ref().expect("invariant: decided above");
        let (op, who) = (pending.op(&self.cfg), pending.who());
        let request = RequestId(self.next_request);
        self.next_request += 1;
        Wake::Send { request, op: Box::new(op), who }
    }

    /// The request from the last `wake` reached node `node`.
    pub fn delivered(
        &mut self,
        client: usize,
        request: RequestId,
        node: u32,
        checker: &mut Checker,
    ) {
        let c = &mut self.clients[client];
        let pending = c.next.take().expect("invariant: wake built a request");
        c.tries += 1;
        let mut pending = pending;
        if let Pending::Consume { wait_ms, sent, .. } = &mut pending
            && *wait_ms > 0
        {
            *sent = Some(checker.long_poll_sent());
        }
        match &pending {
            Pending::Produce { ids, .. } => checker.sent(ids),
            Pending::Delete { name, .. } => checker.delete_requested(name),
            Pending::Queue { worker, .. } => self.queue_sent(*worker, checker),
            Pending::Access(access) => {
                checker.counters.access_requests += 1;
                if let Some(ask) = &access.ask {
                    checker.access_asked(request, node, ask.clone());
                }
            }
            _ => {}
        }
        if let Some(ask) = self.admin_ask(&pending) {
            checker.admin_asked(request, ask);
        }
        self.clients[client].waiting = Some((request, pending, node));
    }

    /// What an admin request asks, for the checker of admin answers.
    fn admin_ask(&self, pending: &Pending) -> Option<AdminAsk> {
        Some(match pending {
            Pending::Create { name, partitions } => {
                AdminAsk::Create { name: name.clone(), partitions: *partitions }
            }
            Pending::Delete { name } => {
                let meant = match self.topics.get(name) {
                    Some(TopicState::Deleting { id }) => Some(id),
                    _ => None,
                };
                AdminAsk::Delete { name: name.clone(), meant }
            }
            Pending::Lookup { name } => AdminAsk::Lookup { name: name.clone() },
            Pending::Update { name, change, valid } => {
                AdminAsk::Update { name: name.clone(), change: *change, valid: *valid }
            }
            Pending::Produce { .. }
            | Pending::Consume { .. }
            | Pending::Queue { .. }
            | Pending::Access(_) => {
                return None;
            }
        })
    }

    /// The request from the last `wake` could not be sent (node down): retry later.
    pub fn refused(&mut self, client: usize) -> u64 {
        let c = &mut self.clients[client];
        c.tries += 1;
        if c.tries > MAX_TRIES {
            c.next = None;
            c.tries = 0;
        }
        self.rng.random_range(20_000..150_000)
    }

    /// The access client's next request, or its end.
    fn access_next(&mut self) -> Result<Pending, Wake> {
        let client = self.access.as_mut().expect("invariant: an access role has its client");
        client.next().map(Pending::Access).ok_or(Wake::Done)
    }

    fn admin_next(&mut self) -> Result<Pending, Wake> {
        // The dead-letter topic first: a topic naming it can only be created once it exists.
        if self.cfg.queue_max_deliveries.is_some() {
            match self.topics.get(DEAD_LETTER_TOPIC) {
                None | Some(TopicState::Gone) => {
                    return Ok(self.create_pending(Some(DEAD_LETTER_TOPIC.to_string())));
                }
                Some(TopicState::Creating { .. }) => {
                    return Ok(Pending::Lookup { name: DEAD_LETTER_TOPIC.to_string() });
                }
                Some(_) => {}
            }
        }
        if self.initial_created < self.cfg.initial_topics {
            self.initial_created += 1;
            return Ok(self.create_pending(None));
        }
        if let Some(name) = self.topics.unsettled().into_iter().next() {
            return Ok(match self.topics.get(&name) {
                Some(TopicState::Deleting { .. }) => Pending::Delete { name },
                _ => Pending::Lookup { name },
            });
        }
        if let Some(name) = self.scripted_deletes.pop_front() {
            return match self.topics.live_id(&name) {
                Some(inc) => Ok(self.delete_pending(name, inc)),
                None => Err(Wake::Sleep(1_000)),
            };
        }
        if let Some(name) = self.scripted_creates.pop_front() {
            return Ok(self.create_pending(Some(name)));
        }
        if self.producers_finished() {
            return Err(Wake::Done);
        }
        if let Some(update) = self.update_next() {
            return Ok(update);
        }
        if self.cfg.churn_prob > 0.0 && self.rng.random_bool(self.cfg.churn_prob) {
            let live = self.topics.live();
            if live.len() >= 2 && self.rng.random_bool(0.5) {
                let (name, inc, _) = live[self.rng.random_range(0..live.len())].clone();
                return Ok(self.delete_pending(name, inc));
            }
            let gone = self.topics.gone();
            let reuse = (!gone.is_empty() && self.rng.random_bool(0.5))
                .then(|| gone[self.rng.random_range(0..gone.len())].clone());
            return Ok(self.create_pending(reuse));
        }
        Err(Wake::Sleep(self.rng.random_range(20_000..200_000)))
    }

    fn create_pending(&mut self, name: Option<String>) -> Pending {
        let name = name.unwrap_or_else(|| self.topics.fresh_name());
        let max = self.cfg.max_partitions.max(1);
        let partitions = self.rng.random_range(self.cfg.min_partitions.clamp(1, max)..=max);
        self.topics.set(&name, TopicState::Creating { partitions, ambiguous: false });
        Pending::Create { name, partitions }
    }

    fn delete_pending(&mut self, name: String, inc: TopicId) -> Pending {
        self.topics.set(&name, TopicState::Deleting { id: inc });
        Pending::Delete { name }
    }

    fn read_next(&mut self) -> Result<Pending, Wake> {
        if self.producers_finished() {
            return Err(Wake::Done);
        }
        let live = self.topics.live();
        if live.is_empty() {
            return Err(Wake::Sleep(5_000));
        }
        let (name, inc, partitions) = live[self.rng.random_range(0..live.len())].clone();
        let key = PartitionKey { topic: inc, partition: self.rng.random_range(0..partitions) };
        let offset = self.cursors.get(&key).copied().unwrap_or(0);
        let max = self.rng.random_range(1..=100);
        let wait_ms = self.long_poll_wait();
        Ok(Pending::Consume { key, name, offset, max, wait_ms, sent: None })
    }

    /// A long-poll's wait for the next consume (0: none): within the client's request timeout,
    /// with room for the answer's way back.
    fn long_poll_wait(&mut self) -> u64 {
        let prob = self.cfg.long_poll_prob;
        if prob <= 0.0 || !self.poll_rng.random_bool(prob.min(1.0)) {
            return 0;
        }
        let most = (self.cfg.request_timeout_ms / 2).max(60);
        self.poll_rng.random_range(50..=most)
    }

    fn produce_next(&mut self, checker: &mut Checker) -> Result<Pending, Wake> {
        if self.messages_left == 0 {
            return Err(Wake::Done);
        }
        let live = self.topics.live();
        if live.is_empty() {
            return Err(Wake::Sleep(2_000));
        }
        let (topic, inc, partitions) = live[self.rng.random_range(0..live.len())].clone();
        let batch = self.rng.random_bool(self.cfg.batch_prob);
        let wanted = if batch { self.rng.random_range(1..=self.cfg.max_batch.max(1)) } else { 1 };
        let count = u64::from(wanted).min(self.messages_left);
        let invalid = self.rng.random_bool(self.cfg.invalid_prob);
        let mut ids = Vec::with_capacity(count as usize);
        let mut messages = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let (id, message) = self.new_message(inc, partitions, checker);
            ids.push(id);
            messages.push(message);
        }
        checker.batch_made(checker.next_id() - count..checker.next_id());
        if invalid {
            let at = self.rng.random_range(0..messages.len());
            messages[at].partition = Some(partitions + self.rng.random_range(0..3));
        }
        self.messages_left -= count;
        Ok(Pending::Produce { topic, inc, ids, messages, batch, invalid })
    }

    fn new_message(
        &mut self,
        inc: TopicId,
        partitions: u32,
        checker: &mut Checker,
    ) -> (u64, ProduceMessage) {
        let key = self
            .rng
            .random_bool(self.cfg.keyed_prob)
            .then(|| bytes::Bytes::from(format!("k{}", self.rng.random_range(0..16))));
        let partition = self
            .rng
            .random_bool(self.cfg.pinned_prob)
            .then(|| self.rng.random_range(0..partitions));
        let len = if self.cfg.large_prob > 0.0 && self.rng.random_bool(self.cfg.large_prob) {
            self.rng.random_range(16..=self.cfg.large_max)
        } else {
            self.rng.random_range(16..=self.cfg.small_max.max(16))
        };
        let id = checker.next_id();
        let payload = payload(id, len);
        let assigned = checker.new_message(inc, key.clone(), payload.clone());
        debug_assert_eq!(assigned, id);
        (id, ProduceMessage { key, partition, payload })
    }
}

fn new_client(role: Role) -> Client {
    Client { role, waiting: None, next: None, ambiguous_tries: 0, tries: 0, done: false }
}
