//! Checkpoints: the incoming DDFs of every non-solid cell, in the storage encoding (so a resume
//! is bit-exact), scheme-neutral (any scheme and backend can resume any other's checkpoint of
//! the same lattice, precision and domain), with the parameters and a CRC-32 over everything.
//!
//! File layout (little endian): magic `ESOFLOW-CKPT\0\0\0\x01`, then a length-prefixed header
//! (key=value lines), then the data, then the CRC-32 of all preceding bytes.

use crate::collision::{CollideParams, Collision};
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::solver::Params;
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

impl Checkpoint {
    /// Serialise.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
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
        let mut out = Vec::with_capacity(self.data.len() + header.len() + 40);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&(self.data.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.data);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
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
        let take_u64 = |pos: &mut usize| -> Result<u64, String> {
            let s = body.get(*pos..*pos + 8).ok_or("truncated")?;
            *pos += 8;
            Ok(u64::from_le_bytes(s.try_into().map_err(|_| "truncated")?))
        };
        let hl = take_u64(&mut pos)? as usize;
        let header = std::str::from_utf8(body.get(pos..pos + hl).ok_or("truncated header")?).map_err(|_| "header is not text")?;
        pos += hl;
        let dl = take_u64(&mut pos)? as usize;
        let data = body.get(pos..pos + dl).ok_or("truncated data")?.to_vec();
        if pos + dl != body.len() {
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
        let kind = match get("collision")? {
            "bgk" => Collision::Bgk,
            "trt" => Collision::Trt,
            "smagorinsky" => Collision::Smagorinsky,
            o => return Err(format!("unknown collision {o}")),
        };
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
        })
    }

    /// Write to a file (through a temporary file, so a crash never leaves half a checkpoint).
    ///
    /// # Errors
    /// I/O errors.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("ckpt.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&self.to_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(tmp, path)
    }

    /// Read from a file.
    ///
    /// # Errors
    /// A message naming the file and the problem.
    pub fn load(path: &Path) -> Result<Checkpoint, String> {
        let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Checkpoint::from_bytes(&b).map_err(|e| format!("{}: {e}", path.display()))
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
}
