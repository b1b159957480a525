//! The network seams of a tier-2 node, on turmoil's simulated network: the UDP socket quinn
//! runs on (`SimUdp`, which also loses, duplicates and reorders datagrams as the seed says), the
//! TCP listener axum serves on (`SimListener`) and name resolution through turmoil's DNS
//! (`SimResolver`). Partitions, holds and latency are turmoil's own, per link.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use narad::env::{Resolve, Resolving};
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// Per-datagram faults of one node's socket (the probabilities of the seed's network plan).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DatagramFaults {
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
}

/// How often each per-datagram fault struck (for the report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatagramHits {
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

/// What the socket's sending side shares with the harness: its faults (switched off at the heal)
/// and what they did.
pub struct DatagramState {
    pub faults: DatagramFaults,
    pub hits: DatagramHits,
    rng: ChaCha8Rng,
    /// A datagram held back to go after the next one (reordering).
    held: Option<(SocketAddr, Bytes)>,
}

impl DatagramState {
    pub fn new(faults: DatagramFaults, rng: ChaCha8Rng) -> DatagramState {
        DatagramState { faults, hits: DatagramHits::default(), rng, held: None }
    }
}

/// A receive in progress: it owns a handle to the socket, so that dropping the `SimUdp` (the
/// process stopped) frees the port at once.
type Receiving = Pin<Box<dyn Future<Output = io::Result<(Bytes, SocketAddr)>> + Send>>;

/// quinn's UDP socket on turmoil's network.
pub struct SimUdp {
    socket: Arc<turmoil::net::UdpSocket>,
    local: SocketAddr,
    receiving: Mutex<Option<Receiving>>,
    state: Arc<Mutex<DatagramState>>,
}

impl fmt::Debug for SimUdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimUdp").field("local", &self.local).finish()
    }
}

impl SimUdp {
    /// Binds `addr` on the current turmoil host.
    pub async fn bind(addr: SocketAddr, state: Arc<Mutex<DatagramState>>) -> io::Result<SimUdp> {
        let socket = Arc::new(turmoil::net::UdpSocket::bind(addr).await?);
        let local = socket.local_addr()?;
        Ok(SimUdp { socket, local, receiving: Mutex::new(None), state })
    }

    fn send_now(&self, to: SocketAddr, bytes: &[u8]) -> io::Result<()> {
        match self.socket.try_send_to(bytes, to) {
            Ok(_) => Ok(()),
            // A datagram to a host that is down or cut off is lost, as on a real network.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn receive(&self) -> Receiving {
        let socket = Arc::clone(&self.socket);
        Box::pin(async move {
            let mut buf = vec![0u8; 65_536];
            let (len, from) = socket.recv_from(&mut buf).await?;
            buf.truncate(len);
            Ok((Bytes::from(buf), from))
        })
    }
}

/// Never blocks: turmoil's UDP has no backpressure.
#[derive(Debug)]
struct AlwaysWritable;

impl UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for SimUdp {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let to = transmit.destination;
        let size = transmit.segment_size.unwrap_or(transmit.contents.len()).max(1);
        for datagram in transmit.contents.chunks(size) {
            let mut state = self.state.lock().expect("invariant: state holders never panic");
            let faults = state.faults;
            if faults.loss > 0.0 && state.rng.random_bool(faults.loss) {
                state.hits.lost += 1;
                continue;
            }
            if faults.reorder > 0.0 && state.held.is_none() && state.rng.random_bool(faults.reorder)
            {
                state.hits.reordered += 1;
                state.held = Some((to, Bytes::copy_from_slice(datagram)));
                continue;
            }
            let copies = if faults.duplicate > 0.0 && state.rng.random_bool(faults.duplicate) {
                state.hits.duplicated += 1;
                2
            } else {
                1
            };
            let held = state.held.take();
            drop(state);
            for _ in 0..copies {
                self.send_now(to, datagram)?;
            }
            if let Some((to, bytes)) = held {
                self.send_now(to, &bytes)?;
            }
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        if bufs.is_empty() || meta.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut receiving = self.receiving.lock().expect("invariant: receivers never panic");
        let future = receiving.get_or_insert_with(|| self.receive());
        let Poll::Ready(received) = future.as_mut().poll(cx) else { return Poll::Pending };
        *receiving = None;
        let (bytes, from) = received?;
        let len = bytes.len().min(bufs[0].len());
        bufs[0][..len].copy_from_slice(&bytes[..len]);
        meta[0] = RecvMeta { addr: from, len, stride: len, ecn: None, dst_ip: None };
        Poll::Ready(Ok(1))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn may_fragment(&self) -> bool {
        false
    }
}

/// axum's listener on a turmoil TCP listener.
pub struct SimListener {
    listener: turmoil::net::TcpListener,
}

impl SimListener {
    /// Listens on `port` of every address of the current turmoil host.
    pub async fn bind(port: u16) -> io::Result<SimListener> {
        let addr = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), port);
        Ok(SimListener { listener: turmoil::net::TcpListener::bind(addr).await? })
    }
}

impl axum::serve::Listener for SimListener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok(accepted) = self.listener.accept().await {
                return accepted;
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// Peer names resolved by turmoil's DNS (the host names `n1`, `n2`, ...).
#[derive(Clone, Copy, Debug, Default)]
pub struct SimResolver;

impl Resolve for SimResolver {
    fn resolve<'a>(&'a self, addr: &'a str) -> Resolving<'a> {
        Box::pin(async move {
            let (host, port) = addr
                .rsplit_once(':')
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no port"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad port"))?;
            let ip = std::panic::catch_unwind(|| turmoil::lookup(host))
                .map_err(|_| io::Error::new(io::ErrorKind::NotFound, "unknown host"))?;
            Ok(vec![SocketAddr::new(ip, port)])
        })
    }
}
