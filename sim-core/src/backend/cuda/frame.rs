//! Frames for the viewer on the GPU: the kernels that write the fields a frame shows (the
//! whole grid, a box or a lattice of cells) and read back their value ranges.

use super::*;
use crate::collision::Collision;
use crate::fields::FieldKind;
use crate::frame::{FrameLayout, FrameRanges, FrameRegion, HostFloats, MAX_FRAME_FIELDS};
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::schemes::Scheme;
use crate::solver::SolverError;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, PushKernelArg};
use std::sync::Arc;

/// The frame kernels of a compiled module (`frame_fields`, `frame_box`, `frame_lattice`).
pub(super) struct FrameKernels<'a> {
    pub frame: &'a CudaFunction,
    pub frame_box: &'a CudaFunction,
    pub frame_lattice: &'a CudaFunction,
}

/// Words of a frame's range buffer: a smallest and a largest key per field, then the count of
/// non-finite values (see frame_cell in stream_collide.cu).
pub(super) const FRAME_RANGE_WORDS: usize = 2 * MAX_FRAME_FIELDS + 1;

/// The start of a frame's range buffer.
pub(super) const FRAME_RANGE_INIT: [u32; FRAME_RANGE_WORDS] = {
    let mut w = [0u32; FRAME_RANGE_WORDS];
    let mut k = 0;
    while k < MAX_FRAME_FIELDS {
        w[2 * k] = u32::MAX;
        k += 1;
    }
    w
};

/// Launch the frame kernels of a grid `n` for `kinds` from the field planes (rho, ux, uy, uz,
/// ... of every cell) into `out` (a device address) as `layout` says: every cell, the slice
/// planes, or the isosurface's lattice and the slices; the ranges into `range` (cleared with
/// [`FRAME_RANGE_INIT`] before).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_frame(
    stream: &Arc<CudaStream>,
    k: &FrameKernels<'_>,
    planes: &CudaSlice<f32>,
    flags: &CudaSlice<u8>,
    n: [usize; 3],
    kinds: &[FieldKind],
    layout: &FrameLayout,
    out: u64,
    range: &mut CudaSlice<u32>,
) -> Result<(), SolverError> {
    let codes = kinds.iter().enumerate().fold(0u32, |acc, (k, &kind)| acc | (frame_code(kind) << (4 * k)));
    let nk = kinds.len() as u32;
    let pitch = layout.row_pitch as u64;
    let plane = layout.plane_floats() as u64;
    match layout.region {
        FrameRegion::All => {
            let mut b = stream.launch_builder(k.frame);
            b.arg(planes).arg(flags).arg(&codes).arg(&nk).arg(&pitch).arg(&plane).arg(&out).arg(range);
            // SAFETY: arguments match frame_fields; `out` holds the layout's floats (checked by
            // the caller), the planes hold 4 x cells floats at least, the range buffer FRAME_RANGE_WORDS words.
            unsafe { b.launch(threads(n.iter().product())) }.map_err(derr("launching frame_fields"))?;
        }
        FrameRegion::Planes(_) | FrameRegion::Sampled { .. } => {
            if let FrameRegion::Sampled { stride, .. } = layout.region {
                let (s, m) = lattice_dims(n, stride);
                let mut b = stream.launch_builder(k.frame_lattice);
                b.arg(planes).arg(flags).arg(&codes).arg(&nk).arg(&pitch).arg(&plane).arg(&out).arg(&mut *range);
                b.arg(&s).arg(&m[0]).arg(&m[1]).arg(&m[2]);
                // SAFETY: as frame_fields; the lattice's points lie in the grid.
                unsafe { b.launch(threads(m.iter().map(|&e| e as usize).product())) }.map_err(derr("launching frame_lattice"))?;
            }
            let planes_at = layout.region.planes().unwrap_or_default();
            for (a, i) in planes_at.iter().enumerate().filter_map(|(a, i)| i.map(|i| (a, i))) {
                let (origin, ext) = slab_box(n, a, i, 0);
                let mut b = stream.launch_builder(k.frame_box);
                b.arg(planes).arg(flags).arg(&codes).arg(&nk).arg(&pitch).arg(&plane).arg(&out).arg(&mut *range);
                b.arg(&origin[0]).arg(&origin[1]).arg(&origin[2]).arg(&ext[0]).arg(&ext[1]).arg(&ext[2]);
                // SAFETY: as frame_fields; the box is one plane of the grid.
                unsafe { b.launch(threads(ext.iter().map(|&e| e as usize).product())) }.map_err(derr("launching frame_box"))?;
            }
        }
    }
    Ok(())
}

/// A frame's ranges from its range buffer's words (`nk` fields).
pub(super) fn frame_ranges(keys: &[u32], nk: usize, lag: u64) -> FrameRanges {
    let min_max =
        (0..nk).map(|k| if keys[2 * k] == u32::MAX { (0.0, 0.0) } else { (key_float(keys[2 * k]), key_float(keys[2 * k + 1])) }).collect();
    FrameRanges { min_max, finite: keys[2 * MAX_FRAME_FIELDS] == 0, lag }
}

/// Compile the uniform-grid kernels of `lattice` for a grid `n` and take their frame kernels
/// (for a backend that fills field planes its own way: adaptive blocks fill the finest grid's).
///
/// # Errors
/// NVRTC or module errors.
pub(super) fn load_frame_module(
    ctx: &Arc<CudaContext>,
    lattice: Lattice,
    n: [usize; 3],
    dev: &DeviceInfo,
) -> Result<(Arc<CudaModule>, [CudaFunction; 3]), SolverError> {
    let brick = if lattice.dims() == 3 { BRICK_SHAPES[0].0 } else { BRICK_SHAPES[0].1 };
    let cfg = KernelConfig {
        lattice,
        scheme: Scheme::EsotericPull,
        precision: Precision::Fp32,
        collision: Collision::Bgk,
        force: false,
        n,
        brick,
        rows: false,
        ghost_block: 0,
        boxed: false,
        halo: 0,
        slip: false,
    };
    let arch = crate::backend::cuda::arch_of(dev);
    let ptx = compile(&cfg, &arch).map_err(SolverError::Backend)?;
    let module = Module::load(ctx, ptx, "the frame kernels")?;
    let get = |name: &str| module.get(name);
    let f = [get("frame_fields")?, get("frame_box")?, get("frame_lattice")?];
    Ok((module.keep(), f))
}

/// The lattice of every `stride`-th cell of grid `n`: the stride and its points per axis.
pub(super) fn lattice_dims(n: [usize; 3], stride: usize) -> (u32, [u32; 3]) {
    let s = stride.max(1);
    (s as u32, std::array::from_fn(|a| ((n[a] - 1) / s + 1) as u32))
}

/// The box of the cells within `half` cells of plane `i` along `axis` (all of the grid across
/// it): its corner, wrapped into the grid, and its extents (at most the grid's).
pub(super) fn slab_box(n: [usize; 3], axis: usize, i: usize, half: usize) -> ([u32; 3], [u32; 3]) {
    let mut origin = [0u32; 3];
    let mut ext = [n[0] as u32, n[1] as u32, n[2] as u32];
    let thick = (2 * half + 1).min(n[axis]);
    origin[axis] = ((i + n[axis] - half.min(n[axis] - 1)) % n[axis]) as u32;
    ext[axis] = thick as u32;
    (origin, ext)
}

/// The frame kernel's code of a field.
pub(super) fn frame_code(kind: FieldKind) -> u32 {
    match kind {
        FieldKind::Density => 0,
        FieldKind::Ux => 1,
        FieldKind::Uy => 2,
        FieldKind::Uz => 3,
        FieldKind::Speed => 4,
        FieldKind::Vorticity => 5,
        FieldKind::Q => 6,
    }
}

/// The float of an order key (the inverse of float_key in stream_collide.cu).
pub(super) fn key_float(k: u32) -> f32 {
    f32::from_bits(if k & 0x8000_0000 != 0 { k & 0x7fff_ffff } else { !k })
}

/// Where the `stats` kernel's density range starts (no cell seen: min key all ones, max 0).
pub(crate) const RHO_KEYS_START: [u32; 2] = [u32::MAX, 0];

/// The density range of the `stats` kernel's keys; a grid without fluid cells reads [1, 1].
pub(crate) fn rho_range_of_keys(k: &[u32]) -> [f64; 2] {
    if k[0] > k[1] {
        return [1.0; 2];
    }
    [f64::from(key_float(k[0])), f64::from(key_float(k[1]))]
}

/// Page-locked host memory for frames: the GPU copies into it at full speed.
pub(super) struct PinnedFloats(pub(super) cudarc::driver::PinnedHostSlice<f32>);

impl HostFloats for PinnedFloats {
    fn floats(&self) -> &[f32] {
        self.0.as_slice().unwrap_or(&[])
    }
    fn floats_mut(&mut self) -> &mut [f32] {
        self.0.as_mut_slice().unwrap_or(&mut [])
    }
    fn pinned(&self) -> bool {
        true
    }
}
