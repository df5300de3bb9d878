//! A view's frame: the fields one picture needs, written by the solver in one pass into memory
//! laid out for the renderer (host memory, or device memory the renderer shares with the
//! solver's GPU), with each field's range over the fluid cells.
//!
//! This is the seam between the solver and every view: the dense solvers write whole planes
//! here; block and subgrid solvers write the same layout from their own storage, so the viewer
//! does not change with them.

use crate::domain::Domain;
use crate::error::SolverError;
use crate::fields::FieldKind;

/// Most fields one frame carries: the slice field, the isosurface's field and the speed that
/// colours it, and the three velocity components that move tracers and trace streamlines.
pub const MAX_FRAME_FIELDS: usize = 6;

/// Which cells a frame must hold. A view that draws only slice planes needs only their cells:
/// a frame of three planes of a 256^3 grid costs the solver a few hundredths of a millisecond,
/// a whole frame half a millisecond. Cells outside the region keep whatever the buffer held;
/// the ranges are taken over the region's fluid cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FrameRegion {
    /// Every cell (an isosurface, a screenshot, an export).
    #[default]
    All,
    /// The cells of the planes x = i, y = j, z = k that are given (at least one).
    Planes([Option<usize>; 3]),
    /// The cells whose three coordinates are multiples of `stride` (at least 2), what an
    /// isosurface marched on cubes of `stride` cells reads (a 65^3 lattice of a 256^3 grid at
    /// cubes of 4: 1/60 of the cells), and the cells of the planes given (none, or the slices).
    Sampled {
        /// Lattice spacing in cells.
        stride: usize,
        /// Planes x = i, y = j, z = k held whole.
        planes: [Option<usize>; 3],
    },
}

impl FrameRegion {
    /// Whether the region holds cell (x, y, z).
    #[must_use]
    pub fn contains(&self, p: [usize; 3]) -> bool {
        match self {
            FrameRegion::All => true,
            FrameRegion::Planes(k) => (0..3).any(|a| k[a] == Some(p[a])),
            FrameRegion::Sampled { stride, planes } => {
                p.iter().all(|&c| c % (*stride).max(1) == 0) || (0..3).any(|a| planes[a] == Some(p[a]))
            }
        }
    }

    /// The planes held whole where the region is not every cell (what a view can draw slices
    /// from), `None` for every cell.
    #[must_use]
    pub fn planes(&self) -> Option<[Option<usize>; 3]> {
        match self {
            FrameRegion::All => None,
            FrameRegion::Planes(k) | FrameRegion::Sampled { planes: k, .. } => Some(*k),
        }
    }

    /// Spacing of the lattice of cells the region holds in every direction: 1 for every cell,
    /// the stride of a sampled region, 0 for planes alone (no lattice). An isosurface can be
    /// marched from the region on cubes of any multiple of it.
    #[must_use]
    pub fn lattice(&self) -> usize {
        match self {
            FrameRegion::All => 1,
            FrameRegion::Planes(_) => 0,
            FrameRegion::Sampled { stride, .. } => *stride,
        }
    }

    /// Whether every cell of plane `index` along `axis` is in the region (so a slice there can
    /// be drawn from the frame).
    #[must_use]
    pub fn has_plane(&self, axis: usize, index: usize) -> bool {
        match self {
            FrameRegion::All => true,
            FrameRegion::Planes(k) | FrameRegion::Sampled { planes: k, .. } => k[axis] == Some(index),
        }
    }
}

/// Where each value of a frame lies: `planes` planes of `f32`, one per field; a plane is the
/// `ny * nz` rows of the grid (z slowest), each row `row_pitch >= nx` floats long with x
/// fastest (the padding lets a GPU copy rows into a texture, which wants rows aligned to
/// 256 bytes). `region` says which cells are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLayout {
    /// Cells per axis.
    pub n: [usize; 3],
    /// Floats from one row to the next.
    pub row_pitch: usize,
    /// Number of planes (fields).
    pub planes: usize,
    /// The cells written (every cell unless [`FrameLayout::with_region`] says otherwise).
    pub region: FrameRegion,
}

impl FrameLayout {
    /// A layout for `planes` fields of a grid `n` with rows padded to a multiple of
    /// `row_align_bytes` (1 for tight rows; 256 for `wgpu` buffer-to-texture copies).
    #[must_use]
    pub fn new(n: [usize; 3], planes: usize, row_align_bytes: usize) -> FrameLayout {
        let align = (row_align_bytes / 4).max(1);
        FrameLayout { n, row_pitch: n[0].div_ceil(align) * align, planes, region: FrameRegion::All }
    }

    /// The same layout, writing only the cells of `region`.
    #[must_use]
    pub fn with_region(self, region: FrameRegion) -> FrameLayout {
        FrameLayout { region, ..self }
    }

    /// Floats in one plane (padding included).
    #[must_use]
    pub fn plane_floats(&self) -> usize {
        self.row_pitch * self.n[1] * self.n[2]
    }

    /// Floats in the whole frame.
    #[must_use]
    pub fn floats(&self) -> usize {
        self.plane_floats() * self.planes
    }

    /// Bytes in the whole frame.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.floats() * 4
    }

    /// Whether rows carry no padding (a plane is then the field in the solver's cell order).
    #[must_use]
    pub fn is_tight(&self) -> bool {
        self.row_pitch == self.n[0]
    }

    /// Index of cell `c` (the domain's cell index, x fastest) in plane `plane`.
    #[must_use]
    pub fn index(&self, plane: usize, c: usize) -> usize {
        let x = c % self.n[0];
        let row = c / self.n[0];
        plane * self.plane_floats() + row * self.row_pitch + x
    }

    /// Plane `plane` of `data` (a whole frame) as the field in the domain's cell order (the
    /// padding dropped).
    #[must_use]
    pub fn unpad(&self, data: &[f32], plane: usize) -> Vec<f32> {
        let p = &data[plane * self.plane_floats()..(plane + 1) * self.plane_floats()];
        if self.is_tight() {
            return p.to_vec();
        }
        p.chunks(self.row_pitch).flat_map(|r| &r[..self.n[0]]).copied().collect()
    }
}

/// Each field's smallest and largest finite value over the fluid cells ((0, 0) when there is no
/// finite fluid value), and whether every fluid value was finite.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameRanges {
    /// Per plane, in the order asked for.
    pub min_max: Vec<(f32, f32)>,
    /// False as soon as one fluid cell of one field is NaN or infinite (a blow-up).
    pub finite: bool,
    /// Time steps the frame lags the solver's [`crate::Solver::time_step`]: 0, or 1 where the
    /// fields came from the last step (see [`crate::Solver::fuse_frame_fields`]).
    pub lag: u64,
}

/// Where a solver writes a frame.
#[derive(Debug)]
pub enum FrameTarget<'a> {
    /// Host memory of at least [`FrameLayout::floats`] floats.
    Host(&'a mut [f32]),
    /// Device memory the solver's GPU can write (a buffer shared with the renderer): its
    /// address in the solver's device address space and its size in bytes. Only GPU backends
    /// take this; see [`crate::Solver::write_frame`].
    Device {
        /// Device address.
        ptr: u64,
        /// Bytes at `ptr`.
        bytes: usize,
        /// GPU-side hand-over with the renderer; `None`: the caller synchronises on the host
        /// (the renderer is done with the memory before the call, and reads it after the call
        /// returns, which waits for the frame).
        sync: Option<FrameSync<'a>>,
    },
}

/// A timeline semaphore that the solver's GPU API shares with the renderer's. Only the backend
/// that waits on and signals it knows its concrete type (it imported the renderer's semaphore).
pub trait SharedTimeline: std::any::Any + std::fmt::Debug + Sync {}

/// The hand-over of a shared frame buffer between the solver's GPU queue and the renderer's,
/// through timeline semaphores both APIs share: the solver's queue waits until `read` reaches
/// `read_value` (the renderer's last submit that read this buffer is done; 0: nothing to wait
/// for) before it writes the frame, and sets `written` to `written_value` once the frame is
/// written (the renderer's first submit that reads it waits for that). No CPU thread waits
/// for the other API.
#[derive(Clone, Copy, Debug)]
pub struct FrameSync<'a> {
    /// The timeline the renderer signals.
    pub read: &'a dyn SharedTimeline,
    /// The value to wait for.
    pub read_value: u64,
    /// The timeline the solver signals.
    pub written: &'a dyn SharedTimeline,
    /// The value to signal (larger than every value signalled on it before).
    pub written_value: u64,
}

impl FrameTarget<'_> {
    /// Floats the target holds.
    #[must_use]
    pub fn floats(&self) -> usize {
        match self {
            FrameTarget::Host(h) => h.len(),
            FrameTarget::Device { bytes, .. } => bytes / 4,
        }
    }
}

/// Host memory a frame is written into: a plain vector, or memory a GPU backend page-locked so
/// that its copies run at full speed.
pub trait HostFloats: Send + Sync {
    /// The floats.
    fn floats(&self) -> &[f32];
    /// The floats, to write.
    fn floats_mut(&mut self) -> &mut [f32];
    /// Whether the memory is page-locked.
    fn pinned(&self) -> bool {
        false
    }
}

impl HostFloats for Vec<f32> {
    fn floats(&self) -> &[f32] {
        self
    }
    fn floats_mut(&mut self) -> &mut [f32] {
        self
    }
}

/// A buffer for frames in host memory, from [`crate::Solver::host_frame`].
pub struct HostFrame(Box<dyn HostFloats>);

impl HostFrame {
    /// Wrap memory.
    #[must_use]
    pub fn new(m: Box<dyn HostFloats>) -> HostFrame {
        HostFrame(m)
    }
    /// A zeroed vector of `floats`.
    #[must_use]
    pub fn vec(floats: usize) -> HostFrame {
        HostFrame(Box::new(vec![0.0f32; floats]))
    }
    /// The floats.
    #[must_use]
    pub fn floats(&self) -> &[f32] {
        self.0.floats()
    }
    /// The floats, to write.
    pub fn floats_mut(&mut self) -> &mut [f32] {
        self.0.floats_mut()
    }
    /// Whether the memory is page-locked.
    #[must_use]
    pub fn pinned(&self) -> bool {
        self.0.pinned()
    }
}

impl std::fmt::Debug for HostFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostFrame({} floats{})", self.floats().len(), if self.pinned() { ", pinned" } else { "" })
    }
}

/// Check a request before writing it: field count and target size.
///
/// # Errors
/// No field or more than [`MAX_FRAME_FIELDS`], a layout of another grid or plane count, rows
/// shorter than the grid, or a target smaller than the layout.
pub fn check_request(d: &Domain, kinds: &[FieldKind], layout: &FrameLayout, target_floats: usize) -> Result<(), SolverError> {
    let bad = |m: String| Err(SolverError::Backend(m));
    if kinds.is_empty() || kinds.len() > MAX_FRAME_FIELDS {
        return bad(format!("a frame carries 1 to {MAX_FRAME_FIELDS} fields, not {}", kinds.len()));
    }
    if layout.n != d.n || layout.planes != kinds.len() || layout.row_pitch < d.n[0] {
        return bad(format!(
            "frame layout {:?} x {} planes (row pitch {}) does not fit a {:?} grid with {} fields",
            layout.n,
            layout.planes,
            layout.row_pitch,
            d.n,
            kinds.len()
        ));
    }
    if let FrameRegion::Sampled { stride, .. } = layout.region {
        if stride < 2 {
            return bad(format!("a sampled frame's lattice stride is 2 or more, not {stride} (1: every cell, FrameRegion::All)"));
        }
    }
    if let Some(k) = layout.region.planes() {
        if matches!(layout.region, FrameRegion::Planes(_)) && k.iter().all(Option::is_none) {
            return bad("a frame of planes needs at least one plane".into());
        }
        for a in 0..3 {
            if let Some(i) = k[a].filter(|&i| i >= d.n[a]) {
                return bad(format!("frame plane {} = {i} is outside the grid (0 to {})", ["x", "y", "z"][a], d.n[a] - 1));
            }
        }
    }
    if target_floats < layout.floats() {
        return bad(format!("frame target holds {} bytes; the frame needs {}", target_floats * 4, layout.bytes()));
    }
    Ok(())
}

/// Smallest and largest finite value over fluid cells ((0, 0) if none) and whether every fluid
/// value is finite. `solid[c]` is true for solid cells.
#[must_use]
pub fn fluid_range(values: impl Iterator<Item = f32>, solid: impl Iterator<Item = bool>) -> ((f32, f32), bool) {
    let mut lo = f32::INFINITY;
    let mut hi = f32::NEG_INFINITY;
    let mut finite = true;
    for (v, s) in values.zip(solid) {
        if s {
            continue;
        }
        if v.is_finite() {
            lo = lo.min(v);
            hi = hi.max(v);
        } else {
            finite = false;
        }
    }
    if lo > hi {
        ((0.0, 0.0), finite)
    } else {
        ((lo, hi), finite)
    }
}

/// A frame from host fields for a backend that writes none on a device (`backend` names it
/// in the refusal of a device target): [`write_host`] of `fields()` into host memory.
///
/// # Errors
/// A device target.
pub fn write_from_fields(
    fields: impl FnOnce() -> crate::fields::Fields,
    backend: &str,
    kinds: &[FieldKind],
    layout: &FrameLayout,
    target: FrameTarget<'_>,
) -> Result<FrameRanges, SolverError> {
    match target {
        FrameTarget::Host(out) => Ok(write_host(&fields(), kinds, layout, out)),
        FrameTarget::Device { .. } => Err(SolverError::Backend(format!("the {backend} backend writes frames only to host memory"))),
    }
}

/// The host implementation every backend can use: density and velocity once, each field from
/// them, written into `out` in `layout` (padding left as it is; every cell, whatever the
/// region), with the ranges over the region's fluid cells.
#[must_use]
pub fn write_host(f: &crate::fields::Fields, kinds: &[FieldKind], layout: &FrameLayout, out: &mut [f32]) -> FrameRanges {
    let mut ranges = FrameRanges { min_max: Vec::with_capacity(kinds.len()), finite: true, lag: 0 };
    let nx = layout.n[0];
    let n = layout.n;
    // Cells outside the region count as solid for the ranges.
    let outside: Vec<bool> = match layout.region {
        FrameRegion::All => f.solid.clone(),
        region => (0..f.solid.len()).map(|c| f.solid[c] || !region.contains([c % n[0], (c / n[0]) % n[1], c / (n[0] * n[1])])).collect(),
    };
    for (k, &kind) in kinds.iter().enumerate() {
        let v = crate::fields::scalar(f, kind);
        let (mm, fin) = fluid_range(v.iter().copied(), outside.iter().copied());
        ranges.min_max.push(mm);
        ranges.finite &= fin;
        let plane = &mut out[k * layout.plane_floats()..(k + 1) * layout.plane_floats()];
        for (dst, src) in plane.chunks_mut(layout.row_pitch).zip(v.chunks(nx)) {
            dst[..nx].copy_from_slice(src);
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_pads_rows_and_indexes_cells() {
        let l = FrameLayout::new([10, 3, 2], 2, 256);
        assert_eq!(l.row_pitch, 64);
        assert_eq!(l.plane_floats(), 64 * 6);
        assert_eq!(l.index(1, 10 + 3), 64 * 6 + 64 + 3);
        let tight = FrameLayout::new([10, 3, 2], 1, 1);
        assert!(tight.is_tight());
        let data: Vec<f32> = (0..l.floats()).map(|i| i as f32).collect();
        let p = l.unpad(&data, 1);
        assert_eq!(p.len(), 60);
        assert_eq!(p[13], data[l.index(1, 13)]);
    }

    #[test]
    fn regions_hold_their_planes() {
        let r = FrameRegion::Planes([Some(2), None, Some(0)]);
        assert!(r.contains([2, 5, 7]) && r.contains([1, 1, 0]) && !r.contains([1, 1, 1]));
        assert!(r.has_plane(0, 2) && !r.has_plane(0, 1) && !r.has_plane(1, 0) && r.has_plane(2, 0));
        assert!(FrameRegion::All.contains([9, 9, 9]) && FrameRegion::All.has_plane(1, 3));
        let l = FrameLayout::new([4, 3, 2], 1, 1).with_region(r);
        assert_eq!((l.region, l.row_pitch), (r, 4));
        assert_eq!(
            (r.planes(), r.lattice(), FrameRegion::All.planes(), FrameRegion::All.lattice()),
            (Some([Some(2), None, Some(0)]), 0, None, 1)
        );
    }

    #[test]
    fn sampled_regions_hold_their_lattice_and_planes() {
        let r = FrameRegion::Sampled { stride: 4, planes: [None, Some(5), None] };
        assert!(r.contains([0, 0, 0]) && r.contains([8, 4, 12]) && !r.contains([8, 4, 13]) && r.contains([3, 5, 7]));
        assert!(r.has_plane(1, 5) && !r.has_plane(0, 4) && !r.has_plane(1, 4));
        assert_eq!((r.planes(), r.lattice()), (Some([None, Some(5), None]), 4));
        let d = crate::domain::Domain::periodic(crate::lattice::Lattice::D3Q19, [9, 9, 9]);
        let l = FrameLayout::new([9, 9, 9], 1, 1);
        let k = [FieldKind::Speed];
        assert!(check_request(&d, &k, &l.with_region(r), l.floats()).is_ok());
        assert!(check_request(&d, &k, &l.with_region(FrameRegion::Sampled { stride: 3, planes: [None; 3] }), l.floats()).is_ok());
        let e = check_request(&d, &k, &l.with_region(FrameRegion::Sampled { stride: 1, planes: [None; 3] }), l.floats()).unwrap_err();
        assert!(e.to_string().contains("stride is 2 or more"), "{e}");
        let e = check_request(&d, &k, &l.with_region(FrameRegion::Sampled { stride: 2, planes: [Some(9), None, None] }), l.floats())
            .unwrap_err();
        assert!(e.to_string().contains("frame plane x = 9 is outside the grid (0 to 8)"), "{e}");
    }

    #[test]
    fn fluid_range_skips_solids_and_flags_non_finite() {
        let v = [1.0, -2.0, f32::NAN, 5.0];
        let s = [false, false, true, true];
        assert_eq!(fluid_range(v.into_iter(), s.into_iter()), ((-2.0, 1.0), true));
        let s = [false, false, false, true];
        assert_eq!(fluid_range(v.into_iter(), s.into_iter()), ((-2.0, 1.0), false));
        assert_eq!(fluid_range(v.into_iter(), [true; 4].into_iter()), ((0.0, 0.0), true));
    }
}
