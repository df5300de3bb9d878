//! The block kernels' sources and their builds: `kernels/amr.cu` and `kernels/amr_mesh.cu` after
//! the dense kernels' shared device functions, with the lattice's halo table and the defines of
//! a run (storage, in place, interpolated walls), and the device memory a forest needs.

use super::mesh;
use crate::amr::BLOCK;
use crate::backend::cuda::{compile_source, defines, KernelConfig, COMMON_CUH};
use crate::collision::Collision;
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::schemes::Scheme;

/// The block-LBM kernels.
pub const AMR_CU: &str = include_str!("../../../../../kernels/amr.cu");
/// The mesh kernels (appended to [`AMR_CU`]).
pub const AMR_MESH_CU: &str = include_str!("../../../../../kernels/amr_mesh.cu");

/// Floats of the parameter table the kernels read: per level tau and force, then the walls'
/// velocities and the outflow densities (see `kernels/amr.cu`).
pub(super) const PRM: usize = 4 * 16 + 18 + 6;

/// Full source of the block kernels for a lattice and a DDF storage precision.
#[must_use]
pub fn amr_source(lattice: Lattice, precision: Precision) -> String {
    let d = lattice.dims();
    let cfg = KernelConfig {
        lattice,
        scheme: Scheme::OneStepPull,
        precision,
        collision: Collision::Bgk,
        force: true,
        n: [BLOCK, BLOCK, if d == 3 { BLOCK } else { 1 }],
        brick: [32, 1, 1],
        rows: false,
        ghost_block: 0,
        boxed: false,
        halo: 0,
        slip: false,
    };
    format!("{}{}\n{}\n{}\n{}\n{}", defines(&cfg), mesh::counter_defines(), COMMON_CUH, halo_source(lattice), AMR_CU, AMR_MESH_CU)
}

/// The in-place storage's halo slots of a block (`kernels/amr.cu`, "In-place storage"): per
/// cell and pair `(i, i + 1)` (`i` odd) whose cell `n + c_i` lies outside the block, its index
/// among the block's halo slots, else `u16::MAX`; indexed `cell * pairs + (i - 1) / 2`. Returns
/// the table and the number of halo slots a block has.
#[must_use]
pub fn halo_table(lattice: Lattice) -> (Vec<u16>, usize) {
    let d = lattice.dims();
    let b = BLOCK.pow(d as u32);
    let pairs = (lattice.q() - 1) / 2;
    let c = lattice.velocities();
    let mut table = vec![u16::MAX; b * pairs];
    let mut n = 0usize;
    for cell in 0..b {
        let k = [cell % BLOCK, (cell / BLOCK) % BLOCK, cell / (BLOCK * BLOCK)];
        for p in 0..pairs {
            let ci = c[2 * p + 1];
            let outside = (0..d).any(|a| {
                let t = k[a] as i32 + ci[a];
                !(0..BLOCK as i32).contains(&t)
            });
            if outside {
                table[cell * pairs + p] = n as u16;
                n += 1;
            }
        }
    }
    (table, n)
}

/// The halo table as CUDA source (compiled in only with `AMR_INPLACE`).
fn halo_source(lattice: Lattice) -> String {
    let (table, n) = halo_table(lattice);
    let list: Vec<String> = table.iter().map(u16::to_string).collect();
    format!(
        "#if defined(AMR_INPLACE) && AMR_INPLACE\n#define AMR_H {n}\n__device__ const unsigned short amr_hidx[{}] = {{{}}};\n#endif\n",
        table.len(),
        list.join(",")
    )
}

/// Capacity (blocks) from which the launch lists are built over many thread blocks.
pub const LISTS_MANY_FROM: usize = 65_536;

/// Values of the DDF buffer a forest of `capacity` blocks needs per buffer: `Q * B` a block,
/// plus its halo slots with in-place storage.
#[must_use]
pub fn ddf_values(lattice: Lattice, capacity: usize, inplace: bool) -> usize {
    let halo = if inplace { halo_table(lattice).1 } else { 0 };
    capacity * (lattice.q() * BLOCK.pow(lattice.dims() as u32) + halo)
}

/// Whether a forest of `capacity` blocks needs 64-bit offsets into its DDF buffers (the
/// kernels' `AMR_IDX64`; 32 bits address up to 2^32 values a buffer).
#[must_use]
pub fn needs_wide_offsets(lattice: Lattice, capacity: usize, inplace: bool) -> bool {
    ddf_values(lattice, capacity, inplace) as u64 >= 1 << 32
}

/// Compile the block kernels for `arch` (e.g. "sm_90") and a forest of `capacity` blocks,
/// without fused multiply-adds.
///
/// # Errors
/// NVRTC missing, compile errors or warnings.
pub fn compile_amr(
    lattice: Lattice,
    precision: Precision,
    arch: &str,
    capacity: usize,
    inplace: bool,
) -> Result<cudarc::nvrtc::Ptx, String> {
    compile_amr_walls(lattice, precision, arch, capacity, inplace, false)
}

/// [`compile_amr`] with the interpolated walls' kernels (`curved`: `AMR_CURVED`, the kernels a
/// run with curved links on its finest level uses, `sim_core::amr::lbm::walls`).
///
/// # Errors
/// As [`compile_amr`].
pub fn compile_amr_walls(
    lattice: Lattice,
    precision: Precision,
    arch: &str,
    capacity: usize,
    inplace: bool,
    curved: bool,
) -> Result<cudarc::nvrtc::Ptx, String> {
    compile_amr_with(lattice, precision, arch, capacity, inplace, curved, "", false)
}

/// The block kernels with `extra` defines (`NAME=VALUE` separated by spaces) before the source;
/// `curved` defines `AMR_CURVED` (interpolated walls).
#[allow(clippy::too_many_arguments)]
pub(super) fn compile_amr_with(
    lattice: Lattice,
    precision: Precision,
    arch: &str,
    capacity: usize,
    inplace: bool,
    curved: bool,
    extra: &str,
    fmad: bool,
) -> Result<cudarc::nvrtc::Ptx, String> {
    let wide = if needs_wide_offsets(lattice, capacity, inplace) { " AMR_IDX64=1" } else { "" };
    let walls = if curved { " AMR_CURVED=1" } else { "" };
    let ip = if inplace {
        let base = capacity * lattice.q() * BLOCK.pow(lattice.dims() as u32);
        format!(" AMR_INPLACE=1 AMR_HALO_BASE={base}ull")
    } else {
        String::new()
    };
    let all = format!("{extra}{wide}{walls}{ip}");
    let defines: String = all.split_whitespace().map(|d| format!("#define {}\n", d.replacen('=', " ", 1))).collect();
    compile_source(
        &format!("{defines}{}", amr_source(lattice, precision)),
        &format!("kernels/amr.cu for {lattice} {precision} on {arch} (defines '{}', fmad {fmad})", all.trim()),
        arch,
        fmad,
    )
}

/// Device bytes of a forest of `capacity` blocks: two copies of the DDFs in `precision` (one
/// and its halo slots with in-place storage, `inplace`), the
/// cell masks, obstacle and current-data flags, the links, the block arrays and the launch
/// lists.
#[must_use]
pub fn device_bytes(lattice: Lattice, precision: Precision, capacity: usize, inplace: bool) -> u64 {
    let d = lattice.dims();
    let b = BLOCK.pow(d as u32);
    let nd = 3usize.pow(d as u32);
    // Per block: DDFs, cell masks + obstacle + valid flags, links + neighbour-children,
    // pos, parent + child, level + fresh + state + mark + aux + block mask, values, id set +
    // gap + refined list, launch and transfer lists (3 C each).
    // The host copy's refresh: dirty flags and room to gather every row.
    let refresh = 1 + 3 + 3 * 4 + 2 * 4 + 2 * nd * 4 + 2 * b;
    // The step's codes: 8 bytes a cell.
    let codes = 8 * b;
    let ddfs = if inplace { ddf_values(lattice, capacity, true) } else { 2 * ddf_values(lattice, capacity, false) };
    (ddfs * precision.bytes() + capacity * (3 * b + 2 * nd * 4 + 3 * 4 + 2 * 4 + 6 + 4 + 3 * 4 + 6 * 4 + refresh + codes)) as u64
        + 4 * mesh::CTR as u64
}

/// The developer knob `ESOFLOW_AMR_INPLACE=1`: [`AmrGpu::new`] keeps the DDFs in place (one
/// buffer with halo slots, Esoteric Pull) instead of in two buffers. Off by default while the
/// in-place kernels are slower (docs/amr-gpu.md).
#[must_use]
pub fn in_place_knob() -> bool {
    std::env::var("ESOFLOW_AMR_INPLACE").as_deref() == Ok("1")
}
