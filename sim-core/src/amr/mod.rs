//! Adaptive octree blocks (Jaber, Essel & Sullivan 2025): the CPU reference of the block forest and its mesh
//! operations, written so that the CUDA port is a transliteration (every pass is a loop over
//! block IDs whose iterations are independent, plus scans and compactions).
//!
//! # The forest
//! A root grid of `root[0] x root[1] (x root[2])` blocks covers the domain; each block is
//! [`BLOCK`]^D cells (4^3, 4^2 in 2D) and may split into 2^D children of half the spacing.
//! Parents stay in the arrays after refinement (they hold the averaged data of their children
//! and are the interpolation source of new children). Levels are 2:1 balanced across faces,
//! edges and corners at all times: a leaf's face/edge/corner neighbours differ from it by at
//! most one level (periodic axes wrap).
//!
//! # Arrays (all allocated once from the capacity `C`; `K = 2^D`, `N = 3^D`, `B = 4^D`)
//! | array | size | content |
//! |---|---|---|
//! | `level` | C, u8 | level of the block (0 = root) |
//! | `pos` | C, int3 | position in blocks of its level, `0 .. root[a] << level` |
//! | `parent` | C, u32 | parent ID, `NONE` for roots |
//! | `child` | C, u32 | first child ID, `NONE` for leaves; children are `child .. child + K`, child `j` at offset `((j >> a) & 1)` along axis `a` |
//! | `state` | C, u8 | [`state`]: INACTIVE (free ID), KEEP, REFINE, COARSEN, FROZEN |
//! | `nbr` | C x N, u32 | neighbour link per direction [`dir_index`] `= (ex+1) + 3(ey+1) + 9(ez+1)` (opposite `N-1-d`, self `N/2`): a same-level ID, `COARSER \| id` of the coarser leaf covering that region, or `NONE` outside a non-periodic domain |
//! | `nbr_child` | C x N, u32 | first child of the same-level neighbour, or `NONE` |
//! | `block_mask` | C, u8 | [`block_mask`] bits: leaf, near a coarser / finer level, feeds a coarser leaf, on the boundary |
//! | `cell_mask` | C x B, u8 | [`cell_mask`] per cell `x + 4 (y + 4 z)`: interior, ghost, interface, covered, parent of ghost / interface |
//! | `id_set` | C, u32 | active IDs sorted by level (ascending within a level) |
//! | `level_start` | 17, u32 | `id_set[level_start[l] .. level_start[l+1]]` is level `l`'s ID set |
//! | `gap` | C, u32 | free IDs: a stack of groups of K contiguous IDs, each stored descending, so popping K entries gives a contiguous group whose first ID was on top |
//!
//! Invariants (checked by the property tests): every ID in `0..C` is either active or in the
//! gap set, exactly once; the roots are IDs `0..R` (`x + nx (y + ny z)`), never freed; the
//! other IDs come in groups `R + g K .. R + (g+1) K` that are wholly active (siblings) or
//! wholly free; `nbr` agrees with the geometry (the same-level block at `pos + e`, wrapped on
//! periodic axes, or the leaf of level `l - 1` over it) and is symmetric; `nbr_child[b][d] ==
//! child[nbr[b][d]]`; links marked `COARSER` only occur on leaves; leaves tile the domain.
//!
//! # Adaptation
//! [`BlockForest::set_mark`] (or [`BlockForest::mark_to_targets`] from the criterion) then
//! [`BlockForest::adapt`]: sanitise, balance by propagating refine marks to a fixed point,
//! cancel what would touch a frozen block or level, revert coarsenings that would break the
//! balance, check the capacity (a refusal is an [`AmrError::Capacity`] naming the blocks
//! needed; the forest is unchanged), compact the lists with a scan, free, allocate from the
//! gap set, build the children, and rebuild the ID sets (counting sort), the links (level by
//! level from the parents' links and neighbour-children, as in the paper) and the masks.
//! A frozen level keeps its ID set: no block of it is created or removed.
//!
//! # Solver
//! [`lbm::AmrLbm`] is the LBM on a forest (recursive time stepping, ghost interpolation and
//! interface restriction with non-equilibrium rescaling), on a static forest or adapted between
//! coarse steps ([`lbm::AmrLbm::adapt_to`] moves the data; [`lbm::AmrLbm::block_vorticity`]
//! feeds the criterion); see its module documentation for the scheme and its measured accuracy.
//!
//! # Deviations from Jaber, Essel & Sullivan 2025
//! - Links are rebuilt for every block of every level after an adaptation instead of only for
//!   the paper's "minimal map" of marked blocks and their neighbours: simpler, always correct,
//!   O(active x N) per adaptation. The GPU port can restrict the pass to the minimal map.
//! - The ID sets are rebuilt by a counting sort over all IDs instead of `remove_if` and
//!   appends; the gap set is appended to (freed groups) and popped (new children) as in the
//!   paper. Freed IDs go back before allocation, so an adaptation that coarsens and refines
//!   fits whenever the final block count does.
//! - 2:1 balance is kept by propagating refinement to coarser neighbours (the paper cancels
//!   such refinements instead); cancellation only happens where propagation would change a
//!   frozen block or level.

pub mod criterion;
pub mod forest;
mod info;
pub mod lbm;
pub mod prims;

pub use criterion::{domain_solid_query, domain_solid_query_obstacles, target_level, Criterion, Field, NearWall, ObstacleSums, SolidQuery};
pub use forest::{
    block_mask, cell_coords, cell_mask, dir_index, dir_offset, n_dirs, state, AdaptReport, AmrError, BlockForest, ForestArrays,
    ForestArraysMut, ForestConfig, Link, Mark, BLOCK, COARSER, MAX_LEVELS, NONE,
};
pub use info::{AmrInfo, AmrSettings};
pub use lbm::{AmrLbm, CellRef};

#[cfg(test)]
mod tests;
