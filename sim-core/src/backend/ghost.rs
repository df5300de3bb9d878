//! LBM-Ghost (Valero-Lara 2017): the domain is cut into blocks; each block stores its cells
//! plus a one-cell ghost layer, holding copies of the neighbouring blocks' border cells. A
//! step refreshes the ghosts, then every block pulls from its own cells and ghosts, collides
//! into a scratch block and writes it back: one DDF copy plus ghosts, no races between blocks.
//! (On a GPU the scratch block is shared memory and the write-back follows a barrier.)

use super::cell::{update_cell, Ctx, Forces, Ptr};
use crate::domain::{is_solid, Domain, NEAR};
use crate::lattice::{opposite, Lat, MAX_Q};
use crate::precision::Store;
use rayon::prelude::*;

pub(crate) struct GhostLayout {
    /// Block edge asked for (before clamping to the domain).
    requested: usize,
    /// Block edge per axis (1 on axes the lattice does not have).
    b: [usize; 3],
    /// Blocks per axis.
    nb: [usize; 3],
    /// Padded block size per axis (b + 2, or 1).
    pd: [usize; 3],
    /// Padded volume.
    pv: usize,
    q: usize,
    /// Domain size.
    n: [usize; 3],
    /// Per block: (first ghost pair, end) into `pairs`.
    ranges: Vec<(usize, usize)>,
    /// Ghost copies: (destination padded index, source storage cell index) per block range.
    pairs: Vec<(u32, u64)>,
    /// Flags of every padded position of every block.
    pflags: Vec<u8>,
}

impl GhostLayout {
    pub(crate) fn new<L: Lat>(dom: &Domain, block: usize) -> GhostLayout {
        let n = dom.n;
        let mut b = [1usize; 3];
        let mut pd = [1usize; 3];
        for a in 0..L::D {
            b[a] = block.min(n[a]);
            pd[a] = b[a] + 2;
        }
        let nb = [n[0].div_ceil(b[0]), n[1].div_ceil(b[1]), n[2].div_ceil(b[2])];
        let pv = pd[0] * pd[1] * pd[2];
        let nblocks = nb[0] * nb[1] * nb[2];
        let mut g = GhostLayout {
            requested: block,
            b,
            nb,
            pd,
            pv,
            n,
            q: L::Q,
            ranges: Vec::with_capacity(nblocks),
            pairs: Vec::new(),
            pflags: vec![1; nblocks * pv],
        };
        for blk in 0..nblocks {
            let start = g.pairs.len();
            let bo = g.block_origin(blk);
            let ext = g.block_extent(blk, n);
            for lz in 0..pd[2] {
                for ly in 0..pd[1] {
                    for lx in 0..pd[0] {
                        let l = [lx, ly, lz];
                        // Positions beyond the block's ghost layer are unused in edge blocks.
                        if (0..3).any(|a| pd[a] > 1 && l[a] > ext[a] + 1) {
                            continue;
                        }
                        let mut gpos = [0usize; 3];
                        let mut is_ghost = false;
                        for a in 0..3 {
                            if pd[a] == 1 {
                                gpos[a] = bo[a];
                                continue;
                            }
                            if l[a] == 0 || l[a] == ext[a] + 1 {
                                is_ghost = true;
                            }
                            gpos[a] = (bo[a] as i64 + l[a] as i64 - 1).rem_euclid(n[a] as i64) as usize;
                        }
                        let cell = dom.index(gpos[0], gpos[1], gpos[2]);
                        let li = lx + pd[0] * (ly + pd[1] * lz);
                        g.pflags[blk * pv + li] = dom.flags[cell];
                        if is_ghost && !is_solid(dom.flags[cell]) {
                            g.pairs.push((li as u32, g.cell_base(dom, cell) as u64));
                        }
                    }
                }
            }
            g.ranges.push((start, g.pairs.len()));
        }
        g
    }

    /// The layout of a domain of any lattice.
    pub(crate) fn for_domain(dom: &Domain, block: usize) -> GhostLayout {
        use crate::lattice::{Lattice, D2Q9, D3Q19, D3Q27};
        match dom.lattice {
            Lattice::D2Q9 => GhostLayout::new::<D2Q9>(dom, block),
            Lattice::D3Q19 => GhostLayout::new::<D3Q19>(dom, block),
            Lattice::D3Q27 => GhostLayout::new::<D3Q27>(dom, block),
        }
    }

    /// Block edge, blocks and padded edge per axis, and the padded block volume (what the
    /// CUDA kernels are built with).
    #[cfg(test)]
    pub(crate) fn geometry(&self) -> ([usize; 3], [usize; 3], [usize; 3], usize) {
        (self.b, self.nb, self.pd, self.pv)
    }

    /// Ghost copies for a device: per ghost cell, the storage slot of its direction 0 and the
    /// source cell's (add `i * pv` for direction i).
    pub(crate) fn device_pairs(&self) -> (Vec<u64>, Vec<u64>) {
        let mut dst = Vec::with_capacity(self.pairs.len());
        let mut src = Vec::with_capacity(self.pairs.len());
        for (blk, &(a, e)) in self.ranges.iter().enumerate() {
            for &(li, s) in &self.pairs[a..e] {
                dst.push((blk * self.q * self.pv + li as usize) as u64);
                src.push(s);
            }
        }
        (dst, src)
    }

    /// The same layout (storage unchanged) for a domain whose flags changed: block flags and
    /// ghost pairs (which leave out solid cells) rebuilt.
    pub(crate) fn rebuilt<L: Lat>(&self, dom: &Domain) -> GhostLayout {
        GhostLayout::new::<L>(dom, self.requested)
    }

    pub(crate) fn block(&self) -> usize {
        self.b[0]
    }

    pub(crate) fn storage_len(&self) -> usize {
        self.ranges.len() * self.q * self.pv
    }

    fn block_origin(&self, blk: usize) -> [usize; 3] {
        let bx = blk % self.nb[0];
        let r = blk / self.nb[0];
        [bx * self.b[0], (r % self.nb[1]) * self.b[1], (r / self.nb[1]) * self.b[2]]
    }

    fn block_extent(&self, blk: usize, n: [usize; 3]) -> [usize; 3] {
        let o = self.block_origin(blk);
        [self.b[0].min(n[0] - o[0]), self.b[1].min(n[1] - o[1]), self.b[2].min(n[2] - o[2])]
    }

    /// Storage index of direction 0 of a cell (add `i * pv` for direction i).
    fn cell_base(&self, dom: &Domain, cell: usize) -> usize {
        let p = dom.coords(cell);
        let bi = [p[0] / self.b[0], p[1] / self.b[1], p[2] / self.b[2]];
        let blk = bi[0] + self.nb[0] * (bi[1] + self.nb[1] * bi[2]);
        let mut l = [0usize; 3];
        for a in 0..3 {
            l[a] = p[a] % self.b[a] + usize::from(self.pd[a] > 1);
        }
        blk * self.q * self.pv + l[0] + self.pd[0] * (l[1] + self.pd[1] * l[2])
    }

    /// Storage index of DDF `i` of a cell (its block's copy, not a ghost).
    pub(crate) fn storage_index(&self, dom: &Domain, cell: usize, i: usize) -> usize {
        self.cell_base(dom, cell) + i * self.pv
    }

    pub(crate) fn step<L: Lat, S: Store>(&self, st: &mut [S], ctx: &Ctx) -> Forces {
        let (pv, q) = (self.pv, self.q);
        let sp = Ptr(st.as_mut_ptr());
        // 1. Ghost refresh: each block writes only its own ghost layer and reads other blocks'
        //    interiors.
        self.ranges.par_iter().enumerate().for_each(|(blk, &(a, e))| {
            let base = blk * q * pv;
            for &(li, src) in &self.pairs[a..e] {
                for i in 0..q {
                    // SAFETY: disjoint ghost slots per block; sources are interior cells.
                    unsafe { *sp.at(base + i * pv + li as usize) = *sp.at(src as usize + i * pv) };
                }
            }
        });
        // 2. Stream-collide per block into scratch, then write back.
        let off: Vec<isize> = (0..L::Q)
            .map(|i| {
                let c = L::C[i];
                c[0] as isize + self.pd[0] as isize * (c[1] as isize + self.pd[1] as isize * c[2] as isize)
            })
            .collect();
        (0..self.ranges.len())
            .into_par_iter()
            .fold(
                || ([[0.0f64; 3]; 16], Vec::<S>::new()),
                |(mut acc, mut scratch), blk| {
                    let base = blk * q * pv;
                    let pf = &self.pflags[blk * pv..(blk + 1) * pv];
                    let bo = self.block_origin(blk);
                    let ext = self.block_extent(blk, self.n);
                    scratch.clear();
                    scratch.resize(q * pv, S::default());
                    let lo = [usize::from(self.pd[0] > 1), usize::from(self.pd[1] > 1), usize::from(self.pd[2] > 1)];
                    for lz in lo[2]..lo[2] + ext[2] {
                        for ly in lo[1]..lo[1] + ext[1] {
                            for lx in lo[0]..lo[0] + ext[0] {
                                let li = lx + self.pd[0] * (ly + self.pd[1] * lz);
                                let flag = pf[li];
                                if is_solid(flag) {
                                    continue;
                                }
                                let mut f = [0.0f32; MAX_Q];
                                // SAFETY: reads of this block's own padded storage.
                                unsafe {
                                    for i in 0..L::Q {
                                        let src = (li as isize - off[i]) as usize;
                                        f[i] = (*sp.at(base + i * pv + src)).dec();
                                    }
                                    if flag & NEAR != 0 {
                                        for i in 1..L::Q {
                                            let src = (li as isize - off[i]) as usize;
                                            if is_solid(pf[src]) {
                                                f[i] = (*sp.at(base + opposite(i) * pv + li)).dec();
                                            }
                                        }
                                    }
                                }
                                let pos = [bo[0] + lx - lo[0], bo[1] + ly - lo[1], bo[2] + lz - lo[2]];
                                update_cell::<L>(&mut f, flag, pos, |i| pf[(li as isize + off[i]) as usize], ctx, &mut acc);
                                for i in 0..L::Q {
                                    scratch[i * pv + li] = S::enc(f[i]);
                                }
                            }
                        }
                    }
                    for lz in lo[2]..lo[2] + ext[2] {
                        for ly in lo[1]..lo[1] + ext[1] {
                            for lx in lo[0]..lo[0] + ext[0] {
                                let li = lx + self.pd[0] * (ly + self.pd[1] * lz);
                                if is_solid(pf[li]) {
                                    continue;
                                }
                                for i in 0..L::Q {
                                    // SAFETY: this block's own interior.
                                    unsafe { *sp.at(base + i * pv + li) = scratch[i * pv + li] };
                                }
                            }
                        }
                    }
                    (acc, scratch)
                },
            )
            .map(|(a, _)| a)
            .reduce(
                || [[0.0f64; 3]; 16],
                |mut a, b| {
                    for k in 0..16 {
                        for c in 0..3 {
                            a[k][c] += b[k][c];
                        }
                    }
                    a
                },
            )
    }
}
