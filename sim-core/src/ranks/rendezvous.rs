//! How the processes of a launch find each other: rank 0 listens, every other rank connects to
//! it and says who it is. The place to meet is a TCP address (`ESOFLOW_RENDEZVOUS=HOST:PORT`,
//! or torchrun's `MASTER_ADDR` / `MASTER_PORT`, or on one machine `127.0.0.1` at
//! [`DEFAULT_PORT`]) or a file on a folder every rank sees (`ESOFLOW_RENDEZVOUS=file:PATH`:
//! rank 0 listens on a free port and writes its host and port there). The connections stay
//! open for the run: rank 0 sends its commands over them and gathers what the others answer.

use super::wire::{Dec, Enc, Link};
use super::Rank;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The port rank 0 listens on where nothing names one.
pub const DEFAULT_PORT: u16 = 29517;

/// How long the ranks wait for each other at the start, where `ESOFLOW_RENDEZVOUS_TIMEOUT`
/// (seconds) does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

const MAGIC: &str = "esoflow-launch-1";
const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const REFUSED: u8 = 3;

/// Where the ranks meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Meet {
    /// Rank 0 listens on this port (every interface); the others connect to `host`.
    Tcp {
        /// Rank 0's host, as the other ranks reach it.
        host: String,
        /// The port rank 0 listens on.
        port: u16,
    },
    /// Rank 0 writes `host:port` into this file; the others read it.
    File(PathBuf),
}

impl std::fmt::Display for Meet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Meet::Tcp { host, port } => write!(f, "{host}:{port}"),
            Meet::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

/// The meeting place and the wait from the environment (`var`: `|k| std::env::var(k).ok()`).
///
/// # Errors
/// A bad `ESOFLOW_RENDEZVOUS`, `MASTER_PORT` or `ESOFLOW_RENDEZVOUS_TIMEOUT`, named with what
/// would be valid.
pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<(Meet, Duration), String> {
    let timeout = match var("ESOFLOW_RENDEZVOUS_TIMEOUT") {
        None => DEFAULT_TIMEOUT,
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s <= 86_400.0 => Duration::from_secs_f64(s),
            _ => return Err(format!("ESOFLOW_RENDEZVOUS_TIMEOUT={v}: expected seconds, more than 0 and at most 86400")),
        },
    };
    let port = |name: &str, v: &str| -> Result<u16, String> {
        v.trim().parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| format!("{name}={v}: expected a TCP port, 1 to 65535"))
    };
    if let Some(v) = var("ESOFLOW_RENDEZVOUS") {
        if let Some(path) = v.strip_prefix("file:") {
            if path.is_empty() {
                return Err("ESOFLOW_RENDEZVOUS=file: names no file; give file:/a/folder/every/rank/sees/esoflow.addr".into());
            }
            return Ok((Meet::File(PathBuf::from(path)), timeout));
        }
        let (host, p) = v
            .rsplit_once(':')
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(|| format!("ESOFLOW_RENDEZVOUS={v}: expected HOST:PORT (rank 0's host) or file:PATH (a file every rank sees)"))?;
        return Ok((Meet::Tcp { host: host.trim_matches(['[', ']']).to_string(), port: port("ESOFLOW_RENDEZVOUS", p)? }, timeout));
    }
    let host = var("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
    let port = match var("MASTER_PORT") {
        Some(p) => port("MASTER_PORT", &p)?,
        None => DEFAULT_PORT,
    };
    Ok((Meet::Tcp { host, port }, timeout))
}

/// The processes of a launch, connected: rank 0 holds a link to every other rank (in rank
/// order), every other rank one link to rank 0.
#[derive(Debug)]
pub struct Cluster {
    /// This process's place in the launch.
    pub rank: Rank,
    /// Rank 0: to ranks 1.. in order; the others: to rank 0.
    pub links: Vec<Link>,
    /// Each rank's host name (rank 0 knows all; the others their own and rank 0's).
    pub hosts: Vec<String>,
}

impl Cluster {
    /// Whether this process is rank 0, which runs the simulation's loop and writes the files.
    #[must_use]
    pub fn leads(&self) -> bool {
        self.rank.rank == 0
    }
}

/// This machine's name, for messages and for the file rendezvous.
#[must_use]
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Meet the other ranks of `rank`'s launch at `meet`, waiting at most `timeout`.
///
/// # Errors
/// One sentence: who did not come, or could not be reached, and what to set.
pub fn join(rank: &Rank, meet: &Meet, timeout: Duration) -> Result<Cluster, String> {
    join_saying(rank, meet, timeout, &mut |_| {})
}

/// How often a rank that waits for the others says so.
pub const WAIT_REPORT_EVERY: Duration = Duration::from_secs(10);

/// As [`join`], telling `say` at once who waits for whom and where (a process started by
/// mistake in a launcher's environment, `RANK=0 WORLD_SIZE=2` left over in a shell, says so
/// instead of waiting in silence), then every [`WAIT_REPORT_EVERY`] who is still missing.
///
/// # Errors
/// As [`join`].
pub fn join_saying(rank: &Rank, meet: &Meet, timeout: Duration, say: &mut dyn FnMut(String)) -> Result<Cluster, String> {
    join_reporting(rank, meet, timeout, WAIT_REPORT_EVERY, say)
}

fn join_reporting(rank: &Rank, meet: &Meet, timeout: Duration, every: Duration, say: &mut dyn FnMut(String)) -> Result<Cluster, String> {
    let t = timeout.as_secs_f64();
    if rank.rank == 0 {
        let others = if rank.world == 2 { "rank 1".to_string() } else { format!("ranks 1 to {}", rank.world - 1) };
        say(format!(
            "rank 0 of {} (from {}): waiting up to {t:.0} s for {others} at {meet}; a run of one process needs none of these variables",
            rank.world, rank.source
        ));
        lead(rank, meet, timeout, every, say)
    } else {
        say(format!("rank {} of {} (from {}): connecting to rank 0 at {meet}, for up to {t:.0} s", rank.rank, rank.world, rank.source));
        follow(rank, meet, timeout)
    }
}

fn lead(rank: &Rank, meet: &Meet, timeout: Duration, every: Duration, say: &mut dyn FnMut(String)) -> Result<Cluster, String> {
    let port = match meet {
        Meet::Tcp { port, .. } => *port,
        Meet::File(_) => 0,
    };
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        format!("rank 0 cannot listen on port {port} for the other ranks ({e}); choose another with ESOFLOW_RENDEZVOUS=HOST:PORT or MASTER_PORT")
    })?;
    if let Meet::File(path) = meet {
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        crate::atomic_file::write_bytes(path, format!("{}:{port}\n", host_name()).as_bytes())
            .map_err(|e| format!("ESOFLOW_RENDEZVOUS=file:{}: rank 0 cannot write its address there ({e})", path.display()))?;
    }
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let deadline = start + timeout;
    let mut next_report = start + every;
    let world = rank.world;
    let mut slots: Vec<Option<(Link, String)>> = (1..world).map(|_| None).collect();
    let missing = |slots: &[Option<(Link, String)>]| -> Vec<String> {
        slots.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| (i + 1).to_string()).collect()
    };
    while slots.iter().any(Option::is_none) {
        match listener.accept() {
            Ok((s, from)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let link = Link::new(s, usize::MAX);
                match greet(&link, world) {
                    Ok((r, host)) if r >= 1 && r < world && slots[r - 1].is_none() => {
                        let _ = link.stream.set_read_timeout(None);
                        slots[r - 1] = Some((Link { stream: link.stream, peer: r }, host));
                    }
                    Ok((r, _)) => {
                        let _ = link.send(REFUSED, format!("rank {r} came twice, or is not a rank of a launch of {world}").as_bytes());
                    }
                    Err(why) => {
                        tracing::warn!("rank 0: ignored a connection from {from}: {why}");
                        let _ = link.send(REFUSED, why.as_bytes());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let now = Instant::now();
                if now >= next_report && now < deadline {
                    let m = missing(&slots);
                    say(format!(
                        "rank 0: still waiting for rank{} {} ({:.0} s of {:.0} s)",
                        if m.len() == 1 { "" } else { "s" },
                        m.join(", "),
                        (now - start).as_secs_f64(),
                        timeout.as_secs_f64()
                    ));
                    next_report += every;
                }
                if now >= deadline {
                    let missing = missing(&slots);
                    return Err(format!(
                        "rank 0 waited {:.0} s at {meet} and rank{} {} did not come: start every rank with the same launcher, and \
                         where the ranks run on several machines set ESOFLOW_RENDEZVOUS=HOST:PORT (rank 0's host) or \
                         file:PATH (a file on a folder every machine sees)",
                        timeout.as_secs_f64(),
                        if missing.len() == 1 { "" } else { "s" },
                        missing.join(", ")
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(format!("rank 0: waiting for the other ranks at {meet}: {e}")),
        }
    }
    if let Meet::File(path) = meet {
        // Read by every rank by now: a later launch must not find this address.
        let _ = std::fs::remove_file(path);
    }
    let mut links = Vec::with_capacity(world - 1);
    let mut hosts = vec![host_name()];
    for (link, host) in slots.into_iter().flatten() {
        link.send(WELCOME, &[]).map_err(|e| format!("rank 0 lost rank {} while starting: {e}", link.peer))?;
        links.push(link);
        hosts.push(host);
    }
    Ok(Cluster { rank: rank.clone(), links, hosts })
}

/// Read a rank's hello: its rank and host.
fn greet(link: &Link, world: usize) -> Result<(usize, String), String> {
    let (tag, b) = link.recv().map_err(|e| format!("no hello ({e})"))?;
    let mut d = Dec::new(&b);
    if tag != HELLO || d.str()? != MAGIC {
        return Err("not an Esoflow rank of this version".into());
    }
    let (r, w, host) = (d.u64()? as usize, d.u64()? as usize, d.str()?);
    if w != world {
        return Err(format!("rank {r} on {host} was launched with {w} ranks, rank 0 with {world}: start all ranks with one launcher"));
    }
    Ok((r, host))
}

/// Rank 0's address from a rendezvous file, where it has been written.
fn read_address(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| s.contains(':'))
}

fn follow(rank: &Rank, meet: &Meet, timeout: Duration) -> Result<Cluster, String> {
    let deadline = Instant::now() + timeout;
    let me = rank.rank;
    let mut last;
    let stream = loop {
        let addr = match meet {
            Meet::Tcp { host, port } => Some(format!("{host}:{port}")),
            Meet::File(p) => read_address(p),
        };
        if let Some(a) = addr {
            let tried = a.to_socket_addrs().map_err(|e| e.to_string()).and_then(|mut it| {
                let sa = it.next().ok_or_else(|| format!("{a} names no address"))?;
                TcpStream::connect_timeout(&sa, Duration::from_secs(2)).map_err(|e| e.to_string())
            });
            match tried {
                Ok(s) => break s,
                Err(e) => last = format!("{a}: {e}"),
            }
        } else {
            last = format!("{meet}: rank 0 has not written its address yet");
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "rank {me} could not reach rank 0 within {:.0} s ({last}): where the ranks run on several machines set \
                 ESOFLOW_RENDEZVOUS=HOST:PORT (rank 0's host) or file:PATH (a file on a folder every machine sees), \
                 or ESOFLOW_RENDEZVOUS_TIMEOUT for a longer wait",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let link = Link::new(stream, 0);
    let mut hello = Enc::new();
    hello.str(MAGIC).u64(me as u64).u64(rank.world as u64).str(&host_name());
    link.send(HELLO, &hello.0).map_err(|e| format!("rank {me}: rank 0 at {meet} closed the connection: {e}"))?;
    match link.recv() {
        Ok((WELCOME, _)) => Ok(Cluster { rank: rank.clone(), links: vec![link], hosts: vec![String::new(), host_name()] }),
        Ok((REFUSED, why)) => Err(format!("rank {me}: rank 0 refused this rank: {}", String::from_utf8_lossy(&why))),
        Ok((t, _)) => Err(format!("rank {me}: rank 0 answered with message {t}, not a welcome (another program at {meet}?)")),
        Err(e) => Err(format!("rank {me}: rank 0 at {meet} did not answer ({e}); did another rank 0 time out first?")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
        move |k| m.get(k).cloned()
    }

    fn rank(r: usize, w: usize) -> Rank {
        Rank { rank: r, world: w, local: Some(r), source: "RANK/WORLD_SIZE" }
    }

    #[test]
    fn the_meeting_place_comes_from_the_environment() {
        let (m, t) = from_env(env(&[])).unwrap();
        assert_eq!((m, t), (Meet::Tcp { host: "127.0.0.1".into(), port: DEFAULT_PORT }, DEFAULT_TIMEOUT));
        let (m, _) = from_env(env(&[("MASTER_ADDR", "node7"), ("MASTER_PORT", "29500")])).unwrap();
        assert_eq!(m, Meet::Tcp { host: "node7".into(), port: 29500 });
        let (m, t) = from_env(env(&[("ESOFLOW_RENDEZVOUS", "file:/shared/run.addr"), ("ESOFLOW_RENDEZVOUS_TIMEOUT", "5")])).unwrap();
        assert_eq!((m, t), (Meet::File("/shared/run.addr".into()), Duration::from_secs(5)));
        let (m, _) = from_env(env(&[("ESOFLOW_RENDEZVOUS", "[::1]:4000"), ("MASTER_ADDR", "ignored")])).unwrap();
        assert_eq!(m, Meet::Tcp { host: "::1".into(), port: 4000 });
        for (k, v, want) in [
            ("ESOFLOW_RENDEZVOUS", "node7", "expected HOST:PORT"),
            ("ESOFLOW_RENDEZVOUS", "node7:0", "expected a TCP port"),
            ("ESOFLOW_RENDEZVOUS", "file:", "names no file"),
            ("MASTER_PORT", "http", "MASTER_PORT=http: expected a TCP port"),
            ("ESOFLOW_RENDEZVOUS_TIMEOUT", "-1", "expected seconds"),
        ] {
            let e = from_env(env(&[(k, v)])).unwrap_err();
            assert!(e.contains(want), "{k}={v}: {e}");
        }
    }

    fn meet_all(world: usize, meet: &Meet) -> Vec<Result<Cluster, String>> {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let meet = meet.clone();
                std::thread::spawn(move || join(&rank(r, world), &meet, Duration::from_secs(20)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn ranks_meet_over_tcp_and_through_a_file() {
        let tcp = Meet::Tcp { host: "127.0.0.1".into(), port: free_port() };
        let dir = tempfile::tempdir().unwrap();
        let file = Meet::File(dir.path().join("esoflow.addr"));
        for meet in [tcp, file] {
            let all = meet_all(4, &meet);
            let c: Vec<Cluster> = all.into_iter().map(|c| c.unwrap_or_else(|e| panic!("{meet}: {e}"))).collect();
            assert!(c[0].leads() && !c[1].leads());
            assert_eq!(c[0].links.iter().map(|l| l.peer).collect::<Vec<_>>(), vec![1, 2, 3], "{meet}");
            assert_eq!(c[0].hosts.len(), 4);
            // The links carry messages both ways.
            for (r, f) in c.iter().enumerate().skip(1) {
                f.links[0].send(9, &[r as u8]).unwrap();
                assert_eq!(c[0].links[r - 1].recv().unwrap(), (9, vec![r as u8]));
            }
            if let Meet::File(p) = &meet {
                assert!(!p.exists(), "the address file is removed once all have met");
            }
        }
    }

    #[test]
    fn a_missing_rank_or_a_mismatched_launch_is_named() {
        let port = free_port();
        let meet = Meet::Tcp { host: "127.0.0.1".into(), port };
        let e = join(&rank(0, 3), &meet, Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("ranks 1, 2 did not come") && e.contains("ESOFLOW_RENDEZVOUS"), "{e}");
        // A lone rank says at once what it waits for, and then that it still waits.
        let mut said = Vec::new();
        let e = join_reporting(&rank(0, 2), &meet, Duration::from_millis(450), Duration::from_millis(100), &mut |m| said.push(m));
        assert!(e.unwrap_err().contains("rank 1 did not come"));
        assert_eq!(
            said[0],
            format!("rank 0 of 2 (from RANK/WORLD_SIZE): waiting up to 0 s for rank 1 at 127.0.0.1:{port}; a run of one process needs none of these variables")
        );
        assert!(said.len() >= 3 && said[1..].iter().all(|m| m.starts_with("rank 0: still waiting for rank 1 (")), "{said:?}");
        let e = join(&rank(2, 3), &Meet::Tcp { host: "127.0.0.1".into(), port: free_port() }, Duration::from_millis(300)).unwrap_err();
        assert!(e.starts_with("rank 2 could not reach rank 0 within"), "{e}");
        // A rank of another launch size is refused, and rank 0 goes on waiting for its own.
        let m2 = meet.clone();
        let leader = std::thread::spawn(move || join(&rank(0, 2), &m2, Duration::from_secs(3)));
        let e = join(&rank(1, 4), &meet, Duration::from_secs(3)).unwrap_err();
        assert!(e.contains("was launched with 4 ranks, rank 0 with 2"), "{e}");
        let ok = join(&rank(1, 2), &meet, Duration::from_secs(3));
        assert!(ok.is_ok(), "{ok:?}");
        assert!(leader.join().unwrap().is_ok());
    }
}
