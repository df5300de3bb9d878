//! Invariant checks of the block forest, unit tests in 2D and 3D, and property tests over
//! random refine/coarsen sequences.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

/// Check every invariant of the forest by brute force against the geometry. Panics with a
/// description on the first violation.
pub(crate) fn check_invariants(f: &BlockForest) {
    let cap = f.capacity();
    let k = f.children_per_block();
    let nd = f.dirs();
    let dims = f.dims();
    let roots = f.roots();
    // IDs: active xor in the gap set, exactly once.
    let mut seen = vec![0u8; cap];
    for &g in f.gap_ids() {
        assert!((g as usize) < cap, "gap id {g} out of range");
        assert!(!f.is_active(g), "gap id {g} is active");
        seen[g as usize] += 1;
    }
    for b in 0..cap as u32 {
        if f.is_active(b) {
            seen[b as usize] += 1;
        }
    }
    assert!(seen.iter().all(|&s| s == 1), "an id is neither active nor free, or twice: {:?}", seen.iter().position(|&s| s != 1));
    assert_eq!(f.active(), (0..cap as u32).filter(|&b| f.is_active(b)).count());
    // Gap groups: contiguous, descending, aligned after the roots.
    assert_eq!(f.gap_ids().len() % k, 0);
    for g in f.gap_ids().chunks(k) {
        let c0 = g[k - 1];
        assert!(c0 as usize >= roots && (c0 as usize - roots) % k == 0, "gap group {g:?} misaligned");
        for j in 0..k {
            assert_eq!(g[k - 1 - j], c0 + j as u32, "gap group {g:?} not descending-contiguous");
        }
    }
    // ID sets.
    let mut total = 0;
    for l in 0..=MAX_LEVELS {
        let ids = f.level_ids(l);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "level {l} ids not ascending");
        for &b in ids {
            assert!(f.is_active(b) && f.level(b) == l, "level {l} id set holds {b}");
        }
        total += ids.len();
    }
    assert_eq!(total, f.active(), "id sets do not hold every active block");
    // Tree structure and the geometric map.
    let mut at: HashMap<(u8, [i32; 3]), u32> = HashMap::new();
    for &b in f.active_ids() {
        let l = f.level(b);
        let p = f.pos(b);
        let ext = f.level_extent(l);
        for a in 0..3 {
            assert!(p[a] >= 0 && p[a] < ext[a], "block {b} outside its level");
        }
        assert!(at.insert((l, p), b).is_none(), "two blocks at level {l} {p:?}");
        if (b as usize) < roots {
            assert_eq!(l, 0);
            assert_eq!(f.parent(b), NONE);
        } else {
            let par = f.parent(b);
            assert!(par != NONE && f.is_active(par), "block {b} without parent");
            let c0 = f.first_child(par);
            assert!(c0 <= b && b < c0 + k as u32, "block {b} is not among its parent's children");
            let j = (b - c0) as usize;
            assert_eq!(l, f.level(par) + 1);
            let pp = f.pos(par);
            for a in 0..dims {
                assert_eq!(p[a], 2 * pp[a] + ((j >> a) & 1) as i32, "child position");
            }
        }
        let c0 = f.first_child(b);
        if c0 != NONE {
            for c in c0..c0 + k as u32 {
                assert!(f.is_active(c) && f.parent(c) == b, "child {c} of {b}");
            }
        }
    }
    // Links against the geometry, symmetry, neighbour-children, masks.
    for &b in f.active_ids() {
        let l = f.level(b);
        let p = f.pos(b);
        let ext = f.level_extent(l);
        let mut near_coarser = false;
        let mut outside = false;
        for d in 0..nd {
            let e = dir_offset(d, dims);
            let mut q = [0i32; 3];
            let mut inside = true;
            for a in 0..dims {
                let t = p[a] + e[a];
                if f.periodic()[a] {
                    q[a] = t.rem_euclid(ext[a]);
                } else if t < 0 || t >= ext[a] {
                    inside = false;
                } else {
                    q[a] = t;
                }
            }
            let link = f.neighbour(b, d);
            if !inside {
                assert_eq!(link, Link::Outside, "block {b} dir {d}");
                outside = true;
                continue;
            }
            if let Some(&n) = at.get(&(l, q)) {
                assert_eq!(link, Link::Same(n), "block {b} (level {l} {p:?}) dir {e:?}");
                assert_eq!(f.neighbour(n, nd - 1 - d), Link::Same(b), "asymmetric link {b} -> {n}");
                assert_eq!(f.nbr_child(b, d), f.first_child(n), "neighbour-child of {b} dir {d}");
            } else {
                assert!(l > 0, "missing root");
                let mut qc = [0i32; 3];
                for a in 0..dims {
                    qc[a] = q[a] >> 1;
                }
                let x = *at
                    .get(&(l - 1, qc))
                    .unwrap_or_else(|| panic!("2:1 balance: block {b} level {l} {p:?} dir {e:?} has no level {} block", l - 1));
                assert!(f.is_leaf(x), "coarser neighbour {x} is not a leaf");
                assert!(f.is_leaf(b), "non-leaf {b} next to a coarser leaf");
                assert_eq!(link, Link::Coarser(x), "block {b} dir {e:?}");
                assert_eq!(f.nbr_child(b, d), NONE);
                // The coarse side sees the fine block's parent, and its children.
                let par = f.parent(b);
                let mut pe = [0i32; 3];
                for a in 0..dims {
                    pe[a] = ((p[a] & 1) + e[a]).div_euclid(2);
                }
                let pd = dir_index(pe, dims);
                assert_eq!(f.neighbour(par, pd), Link::Same(x));
                assert_eq!(f.neighbour(x, nd - 1 - pd), Link::Same(par));
                assert_eq!(f.nbr_child(x, nd - 1 - pd), f.first_child(par));
                near_coarser = true;
            }
        }
        let m = f.block_mask(b);
        assert_eq!(m & block_mask::LEAF != 0, f.is_leaf(b));
        assert_eq!(m & block_mask::NEAR_COARSER != 0, near_coarser);
        assert_eq!(m & block_mask::ON_BOUNDARY != 0, outside);
        if !near_coarser && f.is_leaf(b) {
            assert!(f.cell_masks(b).iter().all(|&c| c == cell_mask::INTERIOR));
        }
    }
    // Leaves tile the domain exactly once; rasterised at the finest level, neighbouring sites
    // (faces, edges, corners) differ by at most one level.
    let lf = f.finest_level();
    let ext = f.level_extent(lf);
    let sites = (ext[0] * ext[1] * ext[2]) as usize;
    let mut owner = vec![u32::MAX; sites];
    let idx = |q: [i32; 3]| (q[0] + ext[0] * (q[1] + ext[1] * q[2])) as usize;
    let mut volume = 0u64;
    for b in f.leaves() {
        let l = f.level(b);
        let s = 1i32 << (lf - l);
        let p = f.pos(b);
        let (mut lo, mut hi) = ([0i32; 3], [1i32; 3]);
        for a in 0..dims {
            lo[a] = p[a] * s;
            hi[a] = lo[a] + s;
        }
        volume += 1u64 << (dims as u32 * u32::from(lf - l));
        for z in lo[2]..hi[2] {
            for y in lo[1]..hi[1] {
                for x in lo[0]..hi[0] {
                    let i = idx([x, y, z]);
                    assert_eq!(owner[i], u32::MAX, "leaves overlap at {x} {y} {z}");
                    owner[i] = b;
                }
            }
        }
    }
    assert_eq!(volume, sites as u64, "leaf volumes do not sum to the domain");
    assert!(owner.iter().all(|&o| o != u32::MAX), "a site is not covered");
    for i in 0..sites {
        let q = [i as i32 % ext[0], (i as i32 / ext[0]) % ext[1], i as i32 / (ext[0] * ext[1])];
        for d in 0..nd {
            let e = dir_offset(d, dims);
            let mut r = [0i32; 3];
            let mut inside = true;
            for a in 0..dims {
                let t = q[a] + e[a];
                if f.periodic()[a] {
                    r[a] = t.rem_euclid(ext[a]);
                } else if t < 0 || t >= ext[a] {
                    inside = false;
                } else {
                    r[a] = t;
                }
            }
            if inside {
                let (la, lb) = (f.level(owner[i]), f.level(owner[idx(r)]));
                assert!(
                    la.abs_diff(lb) <= 1,
                    "2:1 balance broken between leaves {} (level {la}) and {} (level {lb})",
                    owner[i],
                    owner[idx(r)]
                );
            }
        }
    }
}

fn forest(dims: usize, root: [usize; 3], periodic: [bool; 3], max_level: u8, capacity: usize) -> BlockForest {
    BlockForest::new(ForestConfig { dims, root, periodic, max_level, capacity }).expect("forest")
}

/// The child of `b` at offset `o`.
fn child_at(f: &BlockForest, b: u32, o: [usize; 3]) -> u32 {
    f.first_child(b) + (o[0] | o[1] << 1 | o[2] << 2) as u32
}

#[test]
fn root_grid_links_2d_walled_and_periodic() {
    let f = forest(2, [3, 2, 1], [false, false, false], 2, 100);
    check_invariants(&f);
    assert_eq!(f.active(), 6);
    assert_eq!(f.capacity(), 6 + 94 / 4 * 4);
    assert_eq!(f.neighbour(0, dir_index([-1, 0, 0], 2)), Link::Outside);
    assert_eq!(f.neighbour(0, dir_index([1, 1, 0], 2)), Link::Same(4));
    let g = forest(2, [3, 2, 1], [true, false, false], 2, 100);
    check_invariants(&g);
    assert_eq!(g.neighbour(0, dir_index([-1, 0, 0], 2)), Link::Same(2));
    assert_eq!(g.neighbour(0, dir_index([-1, 1, 0], 2)), Link::Same(5));
    assert_eq!(g.neighbour(0, dir_index([-1, -1, 0], 2)), Link::Outside);
}

#[test]
fn refining_one_block_2d_gives_coarse_links_and_masks() {
    let mut f = forest(2, [2, 2, 1], [false; 3], 3, 64);
    f.set_mark(0, Mark::Refine).unwrap();
    let r = f.adapt().unwrap();
    assert_eq!(r.refined, vec![0]);
    check_invariants(&f);
    assert_eq!(f.first_child(0), 4, "smallest gap group first");
    assert_eq!(f.level_ids(1), &[4, 5, 6, 7]);
    // Child (1,0) of block 0: +x is root block 1 (coarser), -x its sibling (0,0).
    let c = child_at(&f, 0, [1, 0, 0]);
    assert_eq!(f.neighbour(c, dir_index([1, 0, 0], 2)), Link::Coarser(1));
    assert_eq!(f.neighbour(c, dir_index([-1, 0, 0], 2)), Link::Same(child_at(&f, 0, [0, 0, 0])));
    assert_eq!(f.neighbour(c, dir_index([0, -1, 0], 2)), Link::Outside);
    assert_eq!(f.neighbour(c, dir_index([1, 1, 0], 2)), Link::Coarser(1));
    assert_eq!(f.neighbour(child_at(&f, 0, [1, 1, 0]), dir_index([1, 1, 0], 2)), Link::Coarser(3));
    assert_eq!(f.neighbour(c, dir_index([0, 1, 0], 2)), Link::Same(child_at(&f, 0, [1, 1, 0])));
    // Root 1 sees 0's children.
    assert_eq!(f.nbr_child(1, dir_index([-1, 0, 0], 2)), 4);
    assert_eq!(f.block_mask(1), block_mask::LEAF | block_mask::NEAR_FINER | block_mask::ON_BOUNDARY);
    assert_eq!(f.block_mask(0) & block_mask::FEEDS, block_mask::FEEDS);
    // Cell masks of child (1,0): x = 2,3 ghost (next to the +x coarse block), x = 0,1 interface.
    let m = f.cell_masks(c);
    for y in 0..4 {
        assert_eq!(&m[4 * y..4 * y + 4], &[cell_mask::INTERFACE, cell_mask::INTERFACE, cell_mask::GHOST, cell_mask::GHOST]);
    }
    // Child (0,0) sits in the walled corner: its neighbours are its siblings or outside.
    let c00 = child_at(&f, 0, [0, 0, 0]);
    assert_eq!(f.block_mask(c00) & block_mask::NEAR_COARSER, 0);
    assert!(f.cell_masks(c00).iter().all(|&v| v == cell_mask::INTERIOR));
    // Child (1,1) touches root 3 at its corner: the corner cells are ghost.
    let c11 = child_at(&f, 0, [1, 1, 0]);
    let m = f.cell_masks(c11);
    assert_eq!(m[0], cell_mask::INTERFACE, "far corner from +x/+y coarse blocks is within 4 cells");
    assert_eq!(m[3 + 4 * 3], cell_mask::GHOST);
    // Parent cells: over ghost children cells -> parent of ghost.
    let pm = f.cell_masks(0);
    assert_eq!(pm[3], cell_mask::PARENT_OF_GHOST, "parent cell (3,0) covers child (1,0) cells x=2,3");
    assert_eq!(pm[2], cell_mask::PARENT_OF_INTERFACE);
    assert_eq!(pm[0], cell_mask::COVERED);
}

#[test]
fn coarsening_frees_the_group_and_restores_links() {
    let mut f = forest(2, [2, 2, 1], [false; 3], 3, 64);
    f.set_mark(0, Mark::Refine).unwrap();
    f.adapt().unwrap();
    let before_gap = f.gap_ids().len();
    f.set_mark(0, Mark::Coarsen).unwrap();
    let r = f.adapt().unwrap();
    assert_eq!(r.coarsened, vec![0]);
    check_invariants(&f);
    assert_eq!(f.gap_ids().len(), before_gap + 4);
    assert_eq!(*f.gap_ids().last().unwrap(), 4, "freed group on top");
    assert!(f.is_leaf(0));
    assert_eq!(f.nbr_child(1, dir_index([-1, 0, 0], 2)), NONE);
    assert_eq!(f.active(), 4);
}

#[test]
fn balance_propagates_across_periodic_edges_3d() {
    let mut f = forest(3, [2, 2, 2], [true; 3], 3, 2000);
    f.set_mark(0, Mark::Refine).unwrap();
    f.adapt().unwrap();
    check_invariants(&f);
    // Refine the child of root 0 at the low corner: its coarse neighbours across the periodic
    // faces (all 7 other roots) must refine too.
    let c = child_at(&f, 0, [0, 0, 0]);
    f.set_mark(c, Mark::Refine).unwrap();
    let r = f.adapt().unwrap();
    check_invariants(&f);
    assert_eq!(r.balance_added, 7);
    assert_eq!(r.refined.len(), 8);
    assert_eq!(f.level_ids(1).len(), 64);
    assert_eq!(f.level_ids(2).len(), 8);
}

#[test]
fn capacity_refusal_names_the_blocks_needed_and_changes_nothing() {
    let mut f = forest(3, [2, 1, 1], [false; 3], 2, 2 + 8);
    f.set_mark(0, Mark::Refine).unwrap();
    f.adapt().unwrap();
    check_invariants(&f);
    let active: Vec<u32> = f.active_ids().to_vec();
    f.set_mark(1, Mark::Refine).unwrap();
    let e = f.adapt().unwrap_err();
    assert_eq!(e, AmrError::Capacity { needed: 18, capacity: 10, active: 10 });
    assert!(e.to_string().contains("needs 18 blocks"), "{e}");
    assert_eq!(f.active_ids(), &active[..]);
    assert_eq!(f.state(1), state::KEEP, "marks cleared");
    check_invariants(&f);
    // Coarsening and refining in one adaptation fits when the final count does.
    f.set_mark(0, Mark::Coarsen).unwrap();
    f.set_mark(1, Mark::Refine).unwrap();
    let r = f.adapt().unwrap();
    assert_eq!((r.refined.clone(), r.coarsened.clone()), (vec![1], vec![0]));
    check_invariants(&f);
    assert_eq!(f.first_child(1), 2, "the freed group is reused");
    assert!(BlockForest::new(ForestConfig { dims: 3, root: [2, 2, 2], periodic: [false; 3], max_level: 1, capacity: 7 }).is_err());
}

#[test]
fn frozen_levels_and_blocks_are_left_alone() {
    let mut f = forest(2, [4, 4, 1], [false; 3], 3, 1000);
    f.set_mark(5, Mark::Refine).unwrap();
    f.adapt().unwrap();
    f.freeze_level(1, true).unwrap();
    let l1: Vec<u32> = f.level_ids(1).to_vec();
    // Refining another root would create level-1 blocks: dropped.
    f.set_mark(0, Mark::Refine).unwrap();
    // Refining a level-1 child at the corner of 5 needs its coarse neighbours (roots) refined,
    // which the frozen level forbids: cancelled.
    let c = child_at(&f, 5, [0, 0, 0]);
    f.set_mark(c, Mark::Refine).unwrap();
    // Refining an inner child is fine (all its neighbours are its siblings).
    let r = f.adapt().unwrap();
    assert!(r.refined.is_empty() && r.cancelled == 1, "{r:?}");
    assert_eq!(f.level_ids(1), &l1[..]);
    // Coarsening 5 would remove level-1 blocks: dropped.
    f.set_mark(5, Mark::Coarsen).unwrap();
    f.adapt().unwrap();
    assert_eq!(f.level_ids(1), &l1[..]);
    f.freeze_level(1, false).unwrap();
    // A frozen block blocks the balance propagation it would need.
    f.freeze_block(4, true).unwrap();
    f.set_mark(c, Mark::Refine).unwrap();
    let r = f.adapt().unwrap();
    assert_eq!(r.cancelled, 1);
    assert!(f.is_leaf(4) && f.is_leaf(c));
    f.freeze_block(4, false).unwrap();
    f.set_mark(c, Mark::Refine).unwrap();
    let r = f.adapt().unwrap();
    assert!(r.refined.contains(&c) && r.refined.contains(&4), "{r:?}");
    check_invariants(&f);
}

#[test]
fn coarsening_next_to_finer_blocks_is_reverted() {
    // 1D-like row of roots; refine 1 and 2, then 1's child next to 2 twice.
    let mut f = forest(2, [4, 1, 1], [false; 3], 3, 1000);
    f.set_mark(1, Mark::Refine).unwrap();
    f.set_mark(2, Mark::Refine).unwrap();
    f.adapt().unwrap();
    let c = child_at(&f, 2, [0, 0, 0]);
    f.set_mark(c, Mark::Refine).unwrap();
    f.adapt().unwrap();
    check_invariants(&f);
    // Coarsening 1 would put level-2 blocks next to a level-0 leaf... 1 touches c's children.
    f.set_mark(1, Mark::Coarsen).unwrap();
    let r = f.adapt().unwrap();
    assert_eq!(r.reverted, 1);
    assert!(r.coarsened.is_empty());
    check_invariants(&f);
    // Coarsening c and 1 in one adaptation is fine: the reversion reads the final marks.
    f.set_mark(1, Mark::Coarsen).unwrap();
    f.set_mark(c, Mark::Coarsen).unwrap();
    let r = f.adapt().unwrap();
    assert_eq!(r.coarsened, vec![1, c]);
    assert_eq!(r.reverted, 0);
    check_invariants(&f);
}

/// The prefix sums answer every box query as the scan of the domain does (2D and 3D, boxes
/// inside, across and outside the domain, obstacles and wall layers mixed).
#[test]
fn obstacle_sums_agree_with_the_scan() {
    use crate::domain::{kind, make_flag, Domain};
    use crate::lattice::Lattice;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for (lattice, n, lvl) in [(Lattice::D2Q9, [40, 24, 1], 1u8), (Lattice::D3Q19, [16, 12, 8], 2u8)] {
        let mut dom = Domain::periodic(lattice, n);
        for f in &mut dom.flags {
            *f = match next() % 10 {
                0 => make_flag(kind::SOLID, 1),
                1 => make_flag(kind::SOLID, 2),
                2 => make_flag(kind::SOLID, 0),
                _ => *f,
            };
        }
        let sums = ObstacleSums::new(&dom, lvl);
        let scan = domain_solid_query_obstacles(&dom, lvl);
        let s = f64::from(1u32 << lvl);
        let mut seen = [0usize; 2];
        for _ in 0..3000 {
            let mut lo = [0.0; 3];
            let mut hi = [1.0; 3];
            for a in 0..lattice.dims() {
                let ext = n[a] as f64 / s;
                lo[a] = (next() % 1000) as f64 / 1000.0 * (ext + 2.0) - 1.0;
                hi[a] = lo[a] + (next() % 400) as f64 / 1000.0 * ext;
            }
            let any = sums.any(lo, hi);
            assert_eq!(any, scan(lo, hi), "{lattice:?} box {lo:?} {hi:?}");
            seen[usize::from(any)] += 1;
        }
        assert!(seen[0] > 100 && seen[1] > 100, "both answers tested: {seen:?}");
    }
}

#[test]
fn criterion_and_near_wall_refinement() {
    use crate::domain::{kind, make_flag, Domain};
    use crate::lattice::Lattice;
    // 8x4 root blocks of 4 cells = 32x16 cells at level 0; the domain voxelised at level 2.
    let mut f = forest(2, [8, 4, 1], [false; 3], 3, 5000);
    let lvl = 2u8;
    let n = [32 << lvl, 16 << lvl, 1];
    let mut dom = Domain::periodic(Lattice::D2Q9, n);
    // A disc at (8, 8) level-0 cells, radius 2.
    for y in 0..n[1] {
        for x in 0..n[0] {
            let (cx, cy) = ((x as f64 + 0.5) / 4.0 - 8.0, (y as f64 + 0.5) / 4.0 - 8.0);
            if cx * cx + cy * cy < 4.0 {
                let i = dom.index(x, y, 0);
                dom.flags[i] = make_flag(kind::SOLID, 1);
            }
        }
    }
    let solid = domain_solid_query(&dom, lvl);
    let crit = Criterion { field: Field::Vorticity, threshold: 0.1, coarsen: 1.0, max_level: 3, every: 16 };
    // A value field: high in a band at x in [20, 24) level-0 cells.
    let value = |f: &BlockForest, b: u32| {
        let (lo, s) = f.block_box(b);
        if lo[0] < 24.0 && lo[0] + s > 20.0 {
            0.45 // level 3
        } else {
            0.0
        }
    };
    for _ in 0..4 {
        let t = f.targets(|b| value(&f, b), &crit, Some((NearWall { level: 2, margin: 1.0 }, &solid)));
        f.mark_to_targets(&t);
        f.adapt().unwrap();
        check_invariants(&f);
    }
    // Every leaf meets its target (balance may refine more).
    let t = f.targets(|b| value(&f, b), &crit, Some((NearWall { level: 2, margin: 1.0 }, &solid)));
    for b in f.leaves() {
        assert!(f.level(b) >= t[b as usize] & 15, "leaf {b} below its target");
    }
    // Leaves touching the disc are at level 2; leaves in the band at level 3.
    for b in f.leaves() {
        let (lo, s) = f.block_box(b);
        if solid(lo, [lo[0] + s, lo[1] + s, 1.0]) {
            assert!(f.level(b) >= 2);
        }
        if lo[0] < 24.0 && lo[0] + s > 20.0 {
            assert_eq!(f.level(b), 3);
        }
    }
    // Values drop: everything coarsens back to the root grid, one level per adaptation,
    // except near the wall, where the leaves stay on level 2 throughout.
    for _ in 0..4 {
        let t = f.targets(|_| 0.0, &crit, Some((NearWall { level: 2, margin: 1.0 }, &solid)));
        f.mark_to_targets(&t);
        f.adapt().unwrap();
        check_invariants(&f);
        for b in f.leaves() {
            let (lo, s) = f.block_box(b);
            if solid(lo, [lo[0] + s, lo[1] + s, 1.0]) {
                assert!(f.level(b) >= 2, "leaf {b} at {lo:?} touches the disc on level {}", f.level(b));
            }
        }
    }
    assert!(f.level_ids(3).is_empty());
    assert!(!f.level_ids(2).is_empty());
    for _ in 0..3 {
        let t = f.targets(|_| 0.0, &crit, None);
        f.mark_to_targets(&t);
        f.adapt().unwrap();
    }
    assert_eq!(f.active(), 32);
}

/// Hysteresis (`Criterion::coarsen`): a refined block whose value has dropped just below the
/// threshold coarsens without it and keeps its level with it, until the value is below the
/// coarsening threshold; a coarse block with that value does not refine.
#[test]
fn coarsening_waits_for_the_hysteresis_threshold() {
    for (coarsen, value, stays) in [(1.0f32, 0.07f32, false), (0.5, 0.07, true), (0.5, 0.04, false)] {
        let mut f = forest(2, [4, 4, 1], [false; 3], 1, 200);
        let crit = Criterion { field: Field::Vorticity, threshold: 0.1, coarsen, max_level: 1, every: 16 };
        // Block 0 asks for level 1, then its children's values drop to `value`.
        let t = f.targets(|b| if b == 0 { 0.2 } else { 0.0 }, &crit, None);
        f.mark_to_targets(&t);
        f.adapt().unwrap();
        assert_eq!(f.leaves().len(), 15 + 4);
        for _ in 0..2 {
            let t = f.targets(|_| value, &crit, None);
            f.mark_to_targets(&t);
            f.adapt().unwrap();
            check_invariants(&f);
        }
        let fine = f.leaves().iter().filter(|&&b| f.level(b) == 1).count();
        assert_eq!(fine, if stays { 4 } else { 0 }, "coarsen {coarsen}, value {value}");
    }
}

/// One random adaptation: marks from a seed, then adapt; on a capacity refusal the forest
/// must be unchanged.
fn random_adapt(f: &mut BlockForest, seed: u64, p_ref: u64, p_coa: u64, p_freeze: u64) {
    let mut rng = seed | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % 100
    };
    let ids: Vec<u32> = f.active_ids().to_vec();
    for b in ids {
        let r = next();
        if r < p_ref {
            f.set_mark(b, Mark::Refine).unwrap();
        } else if r < p_ref + p_coa {
            f.set_mark(b, Mark::Coarsen).unwrap();
        }
        let z = next();
        if z < p_freeze {
            f.freeze_block(b, true).unwrap();
        } else if z < 2 * p_freeze && f.state(b) == state::FROZEN {
            f.freeze_block(b, false).unwrap();
        }
    }
    let frozen: Vec<(u8, Vec<u32>)> = (0..=f.max_level()).filter(|&l| f.level_frozen(l)).map(|l| (l, f.level_ids(l).to_vec())).collect();
    let before_ids = f.active_ids().to_vec();
    let before_children: Vec<u32> = before_ids.iter().map(|&b| f.first_child(b)).collect();
    let frozen_blocks: Vec<(u32, u32)> =
        before_ids.iter().filter(|&&b| f.state(b) == state::FROZEN).map(|&b| (b, f.first_child(b))).collect();
    match f.adapt() {
        Ok(r) => {
            if std::env::var("AMR_STATS").is_ok() {
                eprintln!(
                    "active {} finest {} refined {} coarsened {} added {} cancelled {} reverted {}",
                    f.active(),
                    f.finest_level(),
                    r.refined.len(),
                    r.coarsened.len(),
                    r.balance_added,
                    r.cancelled,
                    r.reverted
                );
            }
        }
        Err(AmrError::Capacity { needed, capacity, .. }) => {
            if std::env::var("AMR_STATS").is_ok() {
                eprintln!("refused");
            }
            assert!(needed > capacity);
            assert_eq!(f.active_ids(), &before_ids[..], "refused adaptation changed the forest");
            let after: Vec<u32> = before_ids.iter().map(|&b| f.first_child(b)).collect();
            assert_eq!(after, before_children);
        }
        Err(e) => panic!("{e}"),
    }
    for (l, ids) in frozen {
        assert_eq!(f.level_ids(l), &ids[..], "frozen level {l} changed");
    }
    for (b, c) in frozen_blocks {
        assert!(f.is_active(b), "frozen block {b} removed");
        assert_eq!(f.first_child(b), c, "frozen block {b} changed");
    }
    for b in f.active_ids() {
        assert!(f.state(*b) == state::KEEP || f.state(*b) == state::FROZEN, "marks left after adapt");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// Random refine/coarsen sequences in 2D: every invariant holds after every adaptation
    /// (2:1 balance across faces and corners, ID partition, symmetric links matching the
    /// geometry, leaves covering the domain once, frozen levels and blocks untouched).
    #[test]
    fn random_sequences_2d(rx in 1usize..5, ry in 1usize..4, px in any::<bool>(), py in any::<bool>(),
                           max_level in 1u8..5, extra in 0usize..600, frozen in 0u8..6,
                           ops in prop::collection::vec((any::<u64>(), 0u64..40, 0u64..50, 0u64..4), 1..14)) {
        let roots = rx * ry;
        let mut f = forest(2, [rx, ry, 1], [px, py, false], max_level, roots + extra);
        if frozen <= max_level && frozen > 0 {
            f.freeze_level(frozen, true).unwrap();
        }
        check_invariants(&f);
        for (i, (seed, p_ref, p_coa, p_frz)) in ops.into_iter().enumerate() {
            if i == 3 && frozen > 0 && frozen <= max_level {
                f.freeze_level(frozen, false).unwrap();
            }
            random_adapt(&mut f, seed, p_ref, p_coa, p_frz);
            check_invariants(&f);
        }
    }

    /// The same in 3D (faces, edges and corners).
    #[test]
    fn random_sequences_3d(rx in 1usize..4, ry in 1usize..3, rz in 1usize..3, periodic in any::<[bool; 3]>(),
                           max_level in 1u8..4, extra in 0usize..4000, frozen in 0u8..5,
                           ops in prop::collection::vec((any::<u64>(), 0u64..25, 0u64..50, 0u64..3), 1..12)) {
        let roots = rx * ry * rz;
        let mut f = forest(3, [rx, ry, rz], periodic, max_level, roots + extra);
        if frozen <= max_level && frozen > 0 {
            f.freeze_level(frozen, true).unwrap();
        }
        check_invariants(&f);
        for (seed, p_ref, p_coa, p_frz) in ops {
            random_adapt(&mut f, seed, p_ref, p_coa, p_frz);
            check_invariants(&f);
        }
    }
}
