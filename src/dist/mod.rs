//! Data-parallel training over several processes: one per GPU, or several CPU hosts.
//!
//! Every process (a *rank*) runs the same trainer on the same config and seed. What costs
//! is split, what decides is replicated:
//!
//! - **Rollouts**: rank r runs the jobs `r, r + W, r + 2W, …` of every collection, then the
//!   ranks exchange their episodes ([`ProcessGroup::all_gather`]), so every rank holds the
//!   whole collection in job order. Each (episode, step) samples from its own stream, so
//!   an episode is the same whichever rank ran it.
//! - **Decisions**: advantages, dynamic sampling, success replay, the curriculum and the
//!   metrics are computed by every rank from the same data, so they agree.
//! - **The update**: each minibatch is split into W contiguous parts; each rank scores its
//!   part with the whole minibatch's normalizers (its loss is its share of the minibatch's
//!   loss), and the gradients are summed over ranks ([`tensors::all_reduce_grads`]) before
//!   clipping and the optimizer step, which every rank then takes identically.
//! - **Writing**: only rank 0 writes the run folder (checkpoints, metrics, plots); the
//!   other ranks read it (a resume), so on several hosts it lives on a shared filesystem.
//!
//! The transport is TCP through rank 0 (a star, like gloo's): rank 0 sums or gathers in
//! rank order and sends the same bytes back, so every rank gets a bit-identical result.
//! In a build with the `nccl` feature, gradients on CUDA are summed with NCCL instead
//! ([`GpuSum`]); everything else still goes over TCP.
//! Launch W processes with the environment variables torchrun sets (`WORLD_SIZE`, `RANK`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`), or let `guirl train --nproc W` start them.

#[cfg(feature = "nccl")]
pub mod nccl;
pub mod tensors;
pub(crate) mod wire;

pub use wire::Reader;

use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where the ranks meet when `MASTER_PORT` is not set (torchrun's default).
pub const DEFAULT_PORT: u16 = 29500;
/// Seconds the ranks wait for each other to start (`GUIRL_DIST_TIMEOUT` overrides).
pub const DEFAULT_CONNECT_SECS: u64 = 300;

/// The processes of one data-parallel run, as seen from one of them.
pub struct ProcessGroup {
    rank: usize,
    world: usize,
    local_rank: usize,
    peers: Mutex<Peers>,
    gpu_sum: GpuSum,
    #[cfg(feature = "nccl")]
    nccl: std::sync::OnceLock<nccl::Nccl>,
    /// How the group met, for [`ProcessGroup::another`].
    met: (Rendezvous, String),
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProcessGroup(rank {} of {})", self.rank, self.world)
    }
}

enum Peers {
    /// Rank 0: a stream to each other rank, in rank order (rank 1 first).
    Root(Vec<TcpStream>),
    /// Any other rank: its stream to rank 0.
    Member(TcpStream),
}

/// How the ranks of a run find each other.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendezvous {
    /// This process's rank, `0..world`.
    pub rank: usize,
    /// The number of processes.
    pub world: usize,
    /// The rank within its host (picks the GPU: `cuda:LOCAL_RANK`).
    pub local_rank: usize,
    /// Rank 0's address (`MASTER_ADDR:MASTER_PORT`).
    pub addr: String,
    /// How long to wait for every rank to connect.
    pub timeout: Duration,
    /// How gradients on a GPU are summed (`GUIRL_DIST_BACKEND`).
    pub gpu_sum: GpuSum,
}

/// How the ranks sum gradients that live on CUDA devices (`GUIRL_DIST_BACKEND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuSum {
    /// NCCL where the build has it (the `nccl` feature), else through the host.
    #[default]
    Auto,
    /// NCCL, or an error where the build lacks it (`GUIRL_DIST_BACKEND=nccl`).
    Nccl,
    /// Through the host over TCP, like CPU gradients (`GUIRL_DIST_BACKEND=tcp`).
    Host,
}

impl GpuSum {
    /// Parse `GUIRL_DIST_BACKEND`'s value.
    pub fn parse(v: &str) -> anyhow::Result<GpuSum> {
        match v.trim() {
            "" | "auto" => Ok(GpuSum::Auto),
            "tcp" => Ok(GpuSum::Host),
            "nccl" if cfg!(feature = "nccl") => Ok(GpuSum::Nccl),
            "nccl" => bail!(
                "GUIRL_DIST_BACKEND=nccl, but this build of guirl has no NCCL: build it with \
                 `--features nccl` (which links libnccl.so.2), or unset the variable to sum \
                 gradients through the host"
            ),
            other => bail!("GUIRL_DIST_BACKEND={other:?}: use nccl, tcp or auto"),
        }
    }
}

impl Rendezvous {
    /// From torchrun's variables; `None` without `WORLD_SIZE` or with `WORLD_SIZE=1`.
    pub fn from_env() -> anyhow::Result<Option<Rendezvous>> {
        Rendezvous::from_vars(|k| std::env::var(k).ok())
    }

    /// The same from any lookup (tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Rendezvous>> {
        let num = |k: &str| -> anyhow::Result<Option<usize>> {
            var(k)
                .map(|v| {
                    v.trim().parse::<usize>().with_context(|| format!("{k}={v:?} is not a whole number"))
                })
                .transpose()
        };
        let world = match num("WORLD_SIZE")? {
            None | Some(1) => return Ok(None),
            Some(0) => bail!("WORLD_SIZE=0: the number of processes is at least 1"),
            Some(w) => w,
        };
        let Some(rank) = num("RANK")? else {
            bail!(
                "WORLD_SIZE={world} but RANK is not set: give every process its RANK (0..{world}), \
                 or let `guirl train --nproc {world}` start them"
            );
        };
        if rank >= world {
            bail!("RANK={rank} with WORLD_SIZE={world}: ranks run from 0 to {}", world - 1);
        }
        let host = var("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let port = match var("MASTER_PORT") {
            Some(p) => p.trim().parse::<u16>().with_context(|| format!("MASTER_PORT={p:?} is not a port"))?,
            None => DEFAULT_PORT,
        };
        let secs = match var("GUIRL_DIST_TIMEOUT") {
            Some(s) => {
                s.trim().parse::<u64>().with_context(|| format!("GUIRL_DIST_TIMEOUT={s:?} is not seconds"))?
            }
            None => DEFAULT_CONNECT_SECS,
        };
        Ok(Some(Rendezvous {
            rank,
            world,
            local_rank: num("LOCAL_RANK")?.unwrap_or(rank),
            addr: format!("{host}:{port}"),
            timeout: Duration::from_secs(secs),
            gpu_sum: var("GUIRL_DIST_BACKEND").map(|v| GpuSum::parse(&v)).transpose()?.unwrap_or_default(),
        }))
    }
}

/// Tags of the frames on the wire.
const OK: u8 = 0;
const ERR: u8 = 1;

fn send(s: &mut TcpStream, tag: u8, body: &[u8]) -> std::io::Result<()> {
    s.write_all(&[tag])?;
    s.write_all(&(body.len() as u64).to_le_bytes())?;
    s.write_all(body)?;
    s.flush()
}

fn recv(s: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head)?;
    let len = u64::from_le_bytes(head[1..].try_into().expect("8 bytes")) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok((head[0], body))
}

/// The greeting a rank sends rank 0.
#[derive(serde::Serialize, serde::Deserialize)]
struct Hello {
    rank: usize,
    world: usize,
    fingerprint: String,
}

impl ProcessGroup {
    /// Meet the other ranks. `fingerprint` must be the same on every rank (the config and
    /// the build): a rank started with another config is refused with a clear error.
    pub fn connect(rv: &Rendezvous, fingerprint: &str) -> anyhow::Result<ProcessGroup> {
        let deadline = Instant::now() + rv.timeout;
        let peers = if rv.rank == 0 {
            Peers::Root(accept_all(listen(&rv.addr)?, rv, fingerprint, deadline)?)
        } else {
            Peers::Member(join(rv, fingerprint, deadline)?)
        };
        Ok(ProcessGroup::of(rv, fingerprint, peers))
    }

    fn of(rv: &Rendezvous, fingerprint: &str, peers: Peers) -> ProcessGroup {
        ProcessGroup {
            rank: rv.rank,
            world: rv.world,
            local_rank: rv.local_rank,
            peers: Mutex::new(peers),
            gpu_sum: rv.gpu_sum,
            #[cfg(feature = "nccl")]
            nccl: std::sync::OnceLock::new(),
            met: (rv.clone(), fingerprint.to_string()),
        }
    }

    /// The same ranks over connections of their own (a collective on every rank, like the
    /// others): the two groups' collectives never meet, so each rank may run the other
    /// group's from another thread at the same time, in whatever order (an overlapped
    /// collection's exchange beside the update's sums). Rank 0 listens on a port the
    /// system picks, on `MASTER_ADDR`'s host, and sends it over this group. Gradients on
    /// a GPU are summed through the host in it.
    pub fn another(&self) -> anyhow::Result<ProcessGroup> {
        let (rv, fingerprint) = &self.met;
        let host = rv.addr.rsplit_once(':').map_or(rv.addr.as_str(), |(h, _)| h);
        let listener = if self.is_root() { Some(listen(&format!("{host}:0"))?) } else { None };
        let port = listener.as_ref().map(|l| l.local_addr()).transpose()?.map_or(0, |a| a.port());
        let port = self.broadcast(port.to_le_bytes().to_vec())?;
        let port = u16::from_le_bytes(port.try_into().map_err(|_| anyhow::anyhow!("rank 0 sent no port"))?);
        let rv = Rendezvous { addr: format!("{host}:{port}"), gpu_sum: GpuSum::Host, ..rv.clone() };
        let deadline = Instant::now() + rv.timeout;
        let peers = match listener {
            Some(l) => Peers::Root(accept_all(l, &rv, fingerprint, deadline)?),
            None => Peers::Member(join(&rv, fingerprint, deadline)?),
        };
        Ok(ProcessGroup::of(&rv, fingerprint, peers))
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The rank within its host.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// Whether this is rank 0, the one that writes the run folder.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// This rank's contiguous share of `n` items: `[r·n/W, (r+1)·n/W)`.
    pub fn share(&self, n: usize) -> std::ops::Range<usize> {
        share(n, self.rank, self.world)
    }

    /// Every rank's `mine`, in rank order, on every rank. An `Err` on any rank becomes
    /// the error of all (with the rank that raised it), so no rank waits for a collective
    /// another one will never join.
    pub fn all_gather(&self, mine: Result<Vec<u8>, String>) -> anyhow::Result<Vec<Vec<u8>>> {
        let all = self.collective(mine, |parts| Ok(wire::join(&parts)))?;
        wire::split(&all).context("a malformed all-gather answer from rank 0")
    }

    /// Sum `xs` over the ranks in place (in rank order, so every rank gets the same bits).
    pub fn all_reduce_f32(&self, xs: &mut [f32]) -> anyhow::Result<()> {
        let sum = self.collective(Ok(wire::f32_bytes(xs)), |parts| wire::sum_f32(&parts))?;
        wire::read_f32(&sum, xs)
    }

    /// The same in f64 (statistics).
    pub fn all_reduce_f64(&self, xs: &mut [f64]) -> anyhow::Result<()> {
        let sum = self.collective(Ok(wire::f64_bytes(xs)), |parts| wire::sum_f64(&parts))?;
        wire::read_f64(&sum, xs)
    }

    /// Rank 0's `bytes` on every rank (the others' argument is ignored).
    pub fn broadcast(&self, bytes: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        self.collective(Ok(bytes), |mut parts| Ok(parts.swap_remove(0)))
    }

    /// Wait until every rank has come here.
    pub fn barrier(&self) -> anyhow::Result<()> {
        self.collective(Ok(Vec::new()), |_| Ok(Vec::new())).map(|_| ())
    }

    /// Whether `flag` is raised on any rank (a stop request, a failure).
    pub fn any(&self, flag: bool) -> anyhow::Result<bool> {
        let mut x = [f64::from(u8::from(flag))];
        self.all_reduce_f64(&mut x)?;
        Ok(x[0] > 0.0)
    }

    /// The sum over the ranks of `flat` (f32) computed on its GPU with NCCL, or `None` where
    /// the sum goes through the host instead (a CPU tensor, `GUIRL_DIST_BACKEND=tcp`, or a
    /// build without the `nccl` feature). Collective, like the others: the first call
    /// makes the communicator.
    pub fn sum_on_device(&self, flat: &candle_core::Tensor) -> anyhow::Result<Option<candle_core::Tensor>> {
        if !self.sums_on(flat.device()) {
            return Ok(None);
        }
        #[cfg(feature = "nccl")]
        {
            if self.nccl.get().is_none() {
                // Rank 0 draws the id; an error there becomes every rank's (all_gather).
                let mine = if self.is_root() { nccl::draw_id() } else { Ok(Vec::new()) };
                let ids = self.all_gather(mine)?;
                let n = nccl::Nccl::join(&ids[0], self.rank, self.world, flat.device())?;
                tracing::info!("rank {}: gradients are summed with NCCL", self.rank);
                let _ = self.nccl.set(n);
            }
            let n = self.nccl.get().expect("set above");
            n.sum_f32(flat).map(Some)
        }
        #[cfg(not(feature = "nccl"))]
        Ok(None)
    }

    /// Whether [`Self::sum_on_device`] sums tensors on `device` there (NCCL), rather than
    /// leaving them to the host.
    pub fn sums_on(&self, device: &candle_core::Device) -> bool {
        cfg!(feature = "nccl") && device.is_cuda() && self.gpu_sum != GpuSum::Host
    }

    /// Whether this group has summed gradients with NCCL (its communicator exists).
    pub fn sums_with_nccl(&self) -> bool {
        #[cfg(feature = "nccl")]
        return self.nccl.get().is_some();
        #[cfg(not(feature = "nccl"))]
        false
    }

    /// Every rank sends its part to rank 0, which combines them and sends the result back.
    fn collective(
        &self,
        mine: Result<Vec<u8>, String>,
        combine: impl FnOnce(Vec<Vec<u8>>) -> Result<Vec<u8>, String>,
    ) -> anyhow::Result<Vec<u8>> {
        let mut peers = self.peers.lock().expect("process group lock");
        match &mut *peers {
            Peers::Member(s) => {
                let sent = match &mine {
                    Ok(b) => send(s, OK, b),
                    Err(e) => send(s, ERR, e.as_bytes()),
                };
                sent.map_err(|e| lost(0, self.world, &e))?;
                let (tag, body) = recv(s).map_err(|e| lost(0, self.world, &e))?;
                match tag {
                    OK => Ok(body),
                    _ => bail!("{}", String::from_utf8_lossy(&body)),
                }
            }
            Peers::Root(streams) => {
                let mut parts = Vec::with_capacity(self.world);
                let mut failure: Option<String> = mine.as_ref().err().map(|e| format!("rank 0: {e}"));
                parts.push(mine.unwrap_or_default());
                for (i, s) in streams.iter_mut().enumerate() {
                    match recv(s) {
                        Ok((OK, b)) => parts.push(b),
                        Ok((_, e)) => {
                            failure.get_or_insert(format!("rank {}: {}", i + 1, String::from_utf8_lossy(&e)));
                            parts.push(Vec::new());
                        }
                        Err(e) => {
                            failure.get_or_insert(format!("{:#}", lost(i + 1, self.world, &e)));
                            parts.push(Vec::new());
                        }
                    }
                }
                let result = match failure {
                    Some(f) => Err(f),
                    None => combine(parts),
                };
                for s in streams.iter_mut() {
                    // A rank that is gone cannot be told; the others can.
                    let _ = match &result {
                        Ok(b) => send(s, OK, b),
                        Err(e) => send(s, ERR, e.as_bytes()),
                    };
                }
                result.map_err(|e| anyhow::anyhow!(e))
            }
        }
    }
}

/// The error of a rank whose peer went away mid-collective, in a run of `world` ranks
/// (the resume it names keeps that number: another would give other results).
fn lost(peer: usize, world: usize, e: &std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "lost the connection to rank {peer} ({e}): that process stopped; its own log says why. \
         Every rank stops with it; continue the run with --resume --nproc {world}"
    )
}

/// `[r·n/W, (r+1)·n/W)`.
pub fn share(n: usize, rank: usize, world: usize) -> std::ops::Range<usize> {
    (rank * n / world)..((rank + 1) * n / world)
}

/// Rank 0's listener on `addr` (`MASTER_ADDR:MASTER_PORT`, or port 0 for a port the
/// system picks).
fn listen(addr: &str) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr).with_context(|| match addr.strip_suffix(":0") {
        Some(host) => format!("rank 0 cannot listen on a second port of {host} (MASTER_ADDR)"),
        None => format!(
            "rank 0 cannot listen on {addr} (MASTER_ADDR:MASTER_PORT); is another run using the port?"
        ),
    })?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn accept_all(
    listener: TcpListener,
    rv: &Rendezvous,
    fingerprint: &str,
    deadline: Instant,
) -> anyhow::Result<Vec<TcpStream>> {
    let mut slots: Vec<Option<TcpStream>> = (1..rv.world).map(|_| None).collect();
    while slots.iter().any(Option::is_none) {
        let (mut s, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    let missing: Vec<String> = slots
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.is_none())
                        .map(|(i, _)| (i + 1).to_string())
                        .collect();
                    bail!(
                        "rank 0 waited {}s for rank(s) {} to connect to {}; start every rank \
                         (or raise GUIRL_DIST_TIMEOUT)",
                        rv.timeout.as_secs(),
                        missing.join(", "),
                        rv.addr
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return Err(e).context("accepting a rank"),
        };
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let (_, body) = recv(&mut s).context("reading a rank's greeting")?;
        s.set_read_timeout(None)?;
        let hello: Hello = serde_json::from_slice(&body).context("a malformed greeting")?;
        let refuse = if hello.world != rv.world {
            Some(format!(
                "rank {} was started with WORLD_SIZE={}, rank 0 with {}",
                hello.rank, hello.world, rv.world
            ))
        } else if hello.rank == 0 || hello.rank >= rv.world || slots[hello.rank - 1].is_some() {
            Some(format!(
                "two processes claim rank {} (or it is out of range): give each its own RANK",
                hello.rank
            ))
        } else if hello.fingerprint != fingerprint {
            Some(format!(
                "rank {} runs another config or build than rank 0 ({} against {}): start every rank \
                 with the same config file and binary",
                hello.rank, hello.fingerprint, fingerprint
            ))
        } else {
            None
        };
        if let Some(why) = refuse {
            let _ = send(&mut s, ERR, why.as_bytes());
            for other in slots.iter_mut().flatten() {
                let _ = send(other, ERR, why.as_bytes());
            }
            bail!("{why}");
        }
        slots[hello.rank - 1] = Some(s);
    }
    let mut streams: Vec<TcpStream> = slots.into_iter().map(|s| s.expect("filled")).collect();
    for s in &mut streams {
        send(s, OK, b"")?;
    }
    Ok(streams)
}

fn join(rv: &Rendezvous, fingerprint: &str, deadline: Instant) -> anyhow::Result<TcpStream> {
    let addrs: Vec<_> = rv
        .addr
        .to_socket_addrs()
        .with_context(|| format!("MASTER_ADDR:MASTER_PORT = {} does not resolve", rv.addr))?
        .collect();
    let mut s = loop {
        if let Some(s) = addrs.iter().find_map(|a| TcpStream::connect_timeout(a, Duration::from_secs(2)).ok())
        {
            break s;
        }
        if Instant::now() > deadline {
            bail!(
                "rank {} could not reach rank 0 at {} within {}s; start rank 0 (or raise GUIRL_DIST_TIMEOUT)",
                rv.rank,
                rv.addr,
                rv.timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    s.set_nodelay(true)?;
    let hello = Hello { rank: rv.rank, world: rv.world, fingerprint: fingerprint.to_string() };
    send(&mut s, OK, &serde_json::to_vec(&hello)?)?;
    let (tag, body) = recv(&mut s).map_err(|e| lost(0, rv.world, &e))?;
    if tag != OK {
        bail!("rank 0 refused rank {}: {}", rv.rank, String::from_utf8_lossy(&body));
    }
    Ok(s)
}

#[cfg(test)]
pub(crate) mod tests;
