//! Checkpoints: the incoming DDFs of every non-solid cell, in the storage encoding (so a resume
//! is bit-exact), scheme-neutral (any scheme and backend can resume any other's checkpoint of
//! the same lattice, precision and domain), with the parameters and a CRC-32 over everything.
//!
//! File layout (little endian): magic `ESOFLOW-CKPT\0\0\0\x01`, then a length-prefixed header
//! (key=value lines), then the data, then the CRC-32 of all preceding bytes. The probes placed
//! in the run ride in the header (`probes=name@x:y:z,...`, left out when there are none, so
//! files written before probes existed still load).

use crate::collision::{CollideParams, Collision};
use crate::lattice::Lattice;
use crate::params::Params;
use crate::precision::Precision;
use crate::stats::Stats;
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8; 16] = b"ESOFLOW-CKPT\0\0\0\x01";

/// A saved solver state.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// Velocity set.
    pub lattice: Lattice,
    /// Storage precision of `data`.
    pub precision: Precision,
    /// Cells per axis.
    pub size: [usize; 3],
    /// CRC-32 of the flag array (detects a different domain).
    pub flags_crc: u32,
    /// Steps done.
    pub step: u64,
    /// Parameters in force.
    pub params: Params,
    /// Raw incoming DDFs, `q` values per non-solid cell in cell order.
    pub data: Vec<u8>,
    /// The probes sampled in the run that saved it (cells of the scene's `domain.size`), so a
    /// resumed run or a reopened view samples the same places.
    pub probes: Vec<crate::scene::Probe>,
}

fn kind_name(k: Collision) -> &'static str {
    k.name()
}

fn vecs(v: &[[f32; 3]]) -> String {
    v.iter().map(|a| format!("{}:{}:{}", a[0], a[1], a[2])).collect::<Vec<_>>().join(",")
}

fn parse_vecs(s: &str) -> Result<Vec<[f32; 3]>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|t| {
            let p: Vec<f32> = t.split(':').map(str::parse).collect::<Result<_, _>>().map_err(|e| format!("bad vector {t}: {e}"))?;
            if p.len() != 3 {
                return Err(format!("bad vector {t}"));
            }
            Ok([p[0], p[1], p[2]])
        })
        .collect()
}

/// `name@x:y:z` per probe, comma separated (names made CSV-safe: no `@`, `:` or `,` in them).
fn probes_text(probes: &[crate::scene::Probe]) -> String {
    let one = |p: &crate::scene::Probe| format!("{}@{}:{}:{}", crate::scene::column_name(&p.name), p.cell[0], p.cell[1], p.cell[2]);
    probes.iter().map(one).collect::<Vec<_>>().join(",")
}

fn parse_probes(s: &str) -> Result<Vec<crate::scene::Probe>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|t| {
            let bad = || format!("bad probe {t} (name@x:y:z)");
            let (name, at) = t.split_once('@').ok_or_else(bad)?;
            let c: Vec<usize> = at.split(':').map(str::parse).collect::<Result<_, _>>().map_err(|_| bad())?;
            let cell: [usize; 3] = c.try_into().map_err(|_| bad())?;
            Ok(crate::scene::Probe { name: name.to_string(), cell })
        })
        .collect()
}

impl Checkpoint {
    /// Serialise.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data.len() + 1024);
        self.write_to(&mut out).unwrap_or_else(|_| unreachable!("writing to a Vec cannot fail"));
        out
    }

    /// Serialise into `w` without a copy of the data in memory (the CRC is computed on the way).
    ///
    /// # Errors
    /// I/O errors of `w`.
    pub fn write_to(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let p = &self.params;
        let header = format!(
            "lattice={}\nprecision={}\nsize={}x{}x{}\nflags_crc={}\nstep={}\ncollision={}\ntau={}\ncs={}\nforce={}\nwalls={}\ninlets={}\noutlets={}\n",
            self.lattice.name(),
            self.precision.name(),
            self.size[0],
            self.size[1],
            self.size[2],
            self.flags_crc,
            self.step,
            kind_name(p.collide.kind),
            p.collide.tau,
            p.collide.cs,
            vecs(&[p.collide.force]),
            vecs(&p.walls),
            vecs(&p.inlets),
            p.outlets.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        );
        let header = if self.probes.is_empty() { header } else { format!("{header}probes={}\n", probes_text(&self.probes)) };
        let mut crc = crc32fast::Hasher::new();
        let mut put = |w: &mut dyn Write, b: &[u8]| -> std::io::Result<()> {
            crc.update(b);
            w.write_all(b)
        };
        put(w, MAGIC)?;
        put(w, &(header.len() as u64).to_le_bytes())?;
        put(w, header.as_bytes())?;
        put(w, &(self.data.len() as u64).to_le_bytes())?;
        put(w, &self.data)?;
        w.write_all(&crc.finalize().to_le_bytes())
    }

    /// Parse, refusing anything damaged.
    ///
    /// # Errors
    /// A message saying what is wrong.
    pub fn from_bytes(b: &[u8]) -> Result<Checkpoint, String> {
        if b.len() < MAGIC.len() + 20 || &b[..16] != MAGIC {
            return Err("not an Esoflow checkpoint (bad magic number)".into());
        }
        let (body, crc) = b.split_at(b.len() - 4);
        let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32fast::hash(body) != want {
            return Err("checksum mismatch: the file is damaged or truncated".into());
        }
        let mut pos = 16;
        // Lengths come from the file: every range is checked before it is used.
        let span = |pos: usize, len: u64| -> Option<std::ops::Range<usize>> {
            let end = pos.checked_add(usize::try_from(len).ok()?)?;
            (end <= body.len()).then_some(pos..end)
        };
        let take_u64 = |pos: &mut usize| -> Result<u64, String> {
            let r = span(*pos, 8).ok_or("truncated")?;
            *pos = r.end;
            Ok(u64::from_le_bytes(body[r].try_into().map_err(|_| "truncated")?))
        };
        let hl = take_u64(&mut pos)?;
        let r = span(pos, hl).ok_or("truncated header")?;
        pos = r.end;
        let header = std::str::from_utf8(&body[r]).map_err(|_| "header is not text")?;
        let dl = take_u64(&mut pos)?;
        let r = span(pos, dl).ok_or("truncated data")?;
        pos = r.end;
        let data = body[r].to_vec();
        if pos != body.len() {
            return Err("trailing bytes after the data".into());
        }
        let mut kv = std::collections::HashMap::new();
        for line in header.lines() {
            let (k, v) = line.split_once('=').ok_or_else(|| format!("bad header line {line}"))?;
            kv.insert(k, v);
        }
        let get = |k: &str| kv.get(k).copied().ok_or_else(|| format!("header lacks {k}"));
        let lattice = match get("lattice")? {
            "D2Q9" => Lattice::D2Q9,
            "D3Q19" => Lattice::D3Q19,
            "D3Q27" => Lattice::D3Q27,
            o => return Err(format!("unknown lattice {o}")),
        };
        let precision = match get("precision")? {
            "fp32" => Precision::Fp32,
            "fp16s" => Precision::Fp16s,
            "fp16c" => Precision::Fp16c,
            o => return Err(format!("unknown precision {o}")),
        };
        let size: Vec<usize> = get("size")?.split('x').map(str::parse).collect::<Result<_, _>>().map_err(|e| format!("bad size: {e}"))?;
        if size.len() != 3 {
            return Err("bad size".into());
        }
        let name = get("collision")?;
        let kind = Collision::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| format!("unknown collision {name}"))?;
        let num = |k: &str| -> Result<f32, String> { get(k)?.parse().map_err(|e| format!("bad {k}: {e}")) };
        let force = parse_vecs(get("force")?)?.first().copied().unwrap_or([0.0; 3]);
        let outlets = {
            let s = get("outlets")?;
            if s.is_empty() {
                Vec::new()
            } else {
                s.split(',').map(str::parse).collect::<Result<_, _>>().map_err(|e| format!("bad outlets: {e}"))?
            }
        };
        let probes = kv.get("probes").map_or(Ok(Vec::new()), |t| parse_probes(t))?;
        Ok(Checkpoint {
            lattice,
            precision,
            size: [size[0], size[1], size[2]],
            flags_crc: get("flags_crc")?.parse().map_err(|e| format!("bad flags_crc: {e}"))?,
            step: get("step")?.parse().map_err(|e| format!("bad step: {e}"))?,
            params: Params {
                collide: CollideParams { kind, tau: num("tau")?, cs: num("cs")?, force },
                walls: parse_vecs(get("walls")?)?,
                inlets: parse_vecs(get("inlets")?)?,
                outlets,
            },
            data,
            probes,
        })
    }

    /// The statistics of the state it holds, from its DDFs alone (mass, density range and
    /// fastest speed over its cells; no forces), so that a state can be checked for sanity
    /// ([`Stats::sanity`]) before any solver takes it.
    #[must_use]
    pub fn state_stats(&self) -> Stats {
        use rayon::prelude::*;
        let (q, c, w) = (self.lattice.q(), self.lattice.velocities(), self.lattice.weights());
        let per = q * self.precision.bytes();
        // (mass, min rho, max rho, max |u|^2, all finite) over a run of cells.
        let fold = |chunk: &[u8]| {
            let mut f = vec![0.0f32; chunk.len() / self.precision.bytes()];
            self.precision.decode_all(chunk, &mut f);
            let mut acc = (0.0f64, f64::INFINITY, f64::NEG_INFINITY, 0.0f64, true);
            for cell in f.chunks_exact(q) {
                let (mut rho, mut j) = (0.0f64, [0.0f64; 3]);
                for i in 0..q {
                    let v = f64::from(cell[i] + w[i]);
                    rho += v;
                    for a in 0..3 {
                        j[a] += f64::from(c[i][a]) * v;
                    }
                }
                let u2 = (j[0] * j[0] + j[1] * j[1] + j[2] * j[2]) / (rho * rho);
                acc.4 &= rho.is_finite() && u2.is_finite();
                acc.0 += rho;
                acc.1 = acc.1.min(rho);
                acc.2 = acc.2.max(rho);
                acc.3 = acc.3.max(u2);
            }
            acc
        };
        let (mass, lo, hi, u2, finite) = self.data.par_chunks(per * 4096).map(fold).reduce(
            || (0.0, f64::INFINITY, f64::NEG_INFINITY, 0.0, true),
            |a, b| (a.0 + b.0, a.1.min(b.1), a.2.max(b.2), a.3.max(b.3), a.4 && b.4),
        );
        let nan = |v: f64| if finite { v } else { f64::NAN };
        Stats {
            step: self.step,
            mass: nan(mass),
            max_u: nan(u2.sqrt()),
            rho_range: [nan(lo), nan(hi)],
            forces: Vec::new(),
            first_bad_cell: None,
        }
    }

    /// Write to a file (through a temporary file, so a crash never leaves half a checkpoint:
    /// see [`crate::atomic_file`]).
    ///
    /// # Errors
    /// I/O errors.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        crate::atomic_file::write_atomic(path, |w| self.write_to(w))
    }

    /// Read from a file.
    ///
    /// # Errors
    /// A message naming the file and the problem.
    pub fn load(path: &Path) -> Result<Checkpoint, String> {
        use std::io::Read;
        let (mut f, _) = crate::input::open(path, "a checkpoint")?;
        // The magic number first: a wrong file (a disk image, a pipe that never ends) is
        // refused before the rest of it is read.
        let mut b = vec![0u8; MAGIC.len()];
        let read = f.read_exact(&mut b);
        if read.is_err() || b[..] != MAGIC[..] {
            return Err(format!("{}: not an Esoflow checkpoint (bad magic number)", path.display()));
        }
        f.read_to_end(&mut b).map_err(|e| format!("{}: {e}", path.display()))?;
        Checkpoint::from_bytes(&b).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Whether the state it holds is sane around the reference density `rho0` (see
    /// [`Stats::sanity`]): a resume or a reload takes only such a state, as a run keeps only
    /// such states to roll back to.
    ///
    /// # Errors
    /// What is wrong with the state, in words.
    pub fn check_sane(&self, rho0: f64) -> Result<(), String> {
        self.state_stats().sanity(rho0).map_err(|why| format!("the state it holds (step {}) is not sane: {why}", self.step))
    }
}

/// A state to go back to (the last good state a run rolls back to after a blow-up), kept as
/// the solver keeps its own: a [`Checkpoint`] for most solvers, the compressed records and the
/// shells for compressed subgrids (a fraction of the dense DDFs, so a grid larger than the
/// host's memory keeps one). Unlike a checkpoint it goes back only into a solver of the kind
/// that took it, on the same cells; [`crate::solver::Solver::checkpoint`] after a roll-back
/// saves it to a file.
pub struct Snapshot {
    step: u64,
    bytes: u64,
    held: Held,
}

enum Held {
    Checkpoint(Checkpoint),
    Own(Box<dyn std::any::Any + Send + Sync>),
}

impl Snapshot {
    /// A snapshot that is a checkpoint (any solver of the same lattice, precision and cells
    /// takes it back).
    #[must_use]
    pub fn of_checkpoint(c: Checkpoint) -> Snapshot {
        Snapshot { step: c.step, bytes: c.data.len() as u64, held: Held::Checkpoint(c) }
    }

    /// A solver's own form of its state at `step`, taking about `bytes` of host memory.
    pub(crate) fn own<T: std::any::Any + Send + Sync>(step: u64, bytes: u64, state: T) -> Snapshot {
        Snapshot { step, bytes, held: Held::Own(Box::new(state)) }
    }

    /// Steps done when it was taken.
    #[must_use]
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Host memory it takes (bytes).
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The checkpoint it is, if it is one.
    #[must_use]
    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        match &self.held {
            Held::Checkpoint(c) => Some(c),
            Held::Own(_) => None,
        }
    }

    /// The solver's own form, where it is of type `T`.
    pub(crate) fn own_ref<T: std::any::Any>(&self) -> Option<&T> {
        match &self.held {
            Held::Own(b) => b.downcast_ref::<T>(),
            Held::Checkpoint(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            lattice: Lattice::D2Q9,
            precision: Precision::Fp16s,
            size: [4, 5, 1],
            flags_crc: 77,
            step: 1234,
            params: Params {
                collide: CollideParams { kind: Collision::Trt, tau: 0.7, cs: 0.1, force: [1e-5, 0.0, 0.0] },
                walls: vec![[0.0; 3], [0.1, 0.0, 0.0]],
                inlets: vec![],
                outlets: vec![1.0],
            },
            data: (0..=255u8).collect(),
            probes: Vec::new(),
        }
    }

    #[test]
    fn round_trip_and_damage_is_refused() {
        let c = sample();
        let b = c.to_bytes();
        assert_eq!(Checkpoint::from_bytes(&b).unwrap(), c);
        let mut d = b.clone();
        d[100] ^= 1;
        assert!(Checkpoint::from_bytes(&d).unwrap_err().contains("checksum"));
        assert!(Checkpoint::from_bytes(&b[..b.len() - 10]).is_err());
        assert!(Checkpoint::from_bytes(b"hello").is_err());
    }

    #[test]
    fn a_state_is_checked_for_sanity_from_its_values() {
        // Two D2Q9 cells at rest, density 1.02 (shifted DDFs: f - w = 0.02 w).
        let w = Lattice::D2Q9.weights();
        let rest: Vec<f32> = (0..2).flat_map(|_| w.iter().map(|w| 0.02 * w)).collect();
        let mut c = sample();
        c.precision = Precision::Fp32;
        c.data = Precision::Fp32.encode_all(&rest);
        let st = c.state_stats();
        assert!((st.mass - 2.04).abs() < 1e-5 && st.max_u < 1e-6, "{st:?}");
        c.check_sane(1.0).unwrap();
        let e = c.check_sane(2.5).unwrap_err();
        assert!(e.contains("step 1234") && e.contains("density"), "{e}");
        let mut nan = rest.clone();
        nan[12] = f32::NAN;
        c.data = Precision::Fp32.encode_all(&nan);
        assert!(c.check_sane(1.0).unwrap_err().contains("not finite"));
        // Fast: every cell moving at 0.7 along x (f_1 carries the momentum).
        let mut fast = rest;
        fast[1] += 0.7;
        fast[2] -= 0.7;
        fast[10] += 0.7;
        fast[11] -= 0.7;
        c.data = Precision::Fp32.encode_all(&fast);
        assert!(c.check_sane(1.0).unwrap_err().contains("speed"), "{:?}", c.state_stats());
    }

    #[test]
    fn probes_ride_in_the_header_and_files_without_them_still_load() {
        let mut c = sample();
        let plain = c.to_bytes();
        assert!(!String::from_utf8_lossy(&plain).contains("probes="), "no probes, no key");
        c.probes = vec![
            crate::scene::Probe { name: "wake".into(), cell: [3, 4, 0] },
            crate::scene::Probe { name: "probe2".into(), cell: [0, 1, 0] },
        ];
        assert_eq!(Checkpoint::from_bytes(&c.to_bytes()).unwrap(), c);
        assert!(Checkpoint::from_bytes(&plain).unwrap().probes.is_empty());
        // A name with separators in it is written CSV-safe and still parses.
        c.probes[0].name = "a,b@c:d".into();
        assert_eq!(Checkpoint::from_bytes(&c.to_bytes()).unwrap().probes[0].name, "a_b_c_d");
        assert!(parse_probes("wake@1:2").unwrap_err().contains("name@x:y:z"));
        assert!(parse_probes("wake").is_err());
    }
}
