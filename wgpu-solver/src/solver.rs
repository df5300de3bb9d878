//! The dense-grid solver on a wgpu device: one copy of the FP32 DDFs streamed in place by
//! Esoteric Pull, the flags, and a uniform parameter struct per step parity; statistics and
//! obstacle forces are reduced on the device (workgroup partials, then one workgroup).

use crate::gpu::{AdapterChoice, Gpu, Kernels};
use crate::layout;
use crate::wgsl::{GpuInlet, GpuOutlet, GpuParams, MAX_FACES, MAX_OBSTACLE_IDS, MAX_WALLS, WORKGROUP};
use sim_core::checkpoint::Checkpoint;
use sim_core::collision::trt_tau_minus;
use sim_core::domain::{id_of, is_solid, kind, kind_of, Domain};
use sim_core::edit::{CellEdit, EditReport};
use sim_core::lattice::{Lat, Lattice, D2Q9, D3Q19, D3Q27, MAX_Q};
use sim_core::precision::Precision;
use sim_core::scene::{LoadedScene, Profile};
use sim_core::schemes::Scheme;
use sim_core::walls::Links;
use sim_core::{Fields, Params, Solver, SolverError, SolverInfo, Stats};
use std::sync::Arc;

/// Run `$body` with `$l` the velocity set type of `$lattice`.
macro_rules! with_lattice {
    ($lattice:expr, $l:ident => $body:expr) => {
        match $lattice {
            Lattice::D2Q9 => {
                type $l = D2Q9;
                $body
            }
            Lattice::D3Q19 => {
                type $l = D3Q19;
                $body
            }
            Lattice::D3Q27 => {
                type $l = D3Q27;
                $body
            }
        }
    };
}

/// Storage buffers the kernels bind (DDFs, flags, scratch, lists and links, first bad cells,
/// link states).
const STORAGE_BINDINGS: u32 = 6;

/// Steps recorded into one submission (a long run is several).
const STEPS_PER_SUBMIT: u64 = 256;

/// Marks "no non-finite cell" in the statistics.
const NONE: u32 = u32::MAX;

/// How a grid is dispatched: workgroups per row (x), rows (y), and workgroups that cover the
/// grid (the last row may be partly past it).
#[derive(Clone, Copy, Debug)]
struct Geometry {
    gx: u32,
    gy: u32,
    groups: u32,
}

/// Where the parts of the scratch buffer start (in floats).
#[derive(Clone, Copy, Debug)]
struct Bases {
    stats: u32,
    forces: u32,
}

/// The dense wgpu solver.
pub struct WgpuSolver {
    gpu: Arc<Gpu>,
    k: Arc<Kernels>,
    /// The step kernel for the current collision operator and body force.
    step: Arc<wgpu::ComputePipeline>,
    dom: Domain,
    params: Params,
    /// How the DDFs are stored (FP32, or FP16S where the device has half floats).
    precision: Precision,
    t: u64,
    /// DDFs, `F[i * cells + n]`.
    f: wgpu::Buffer,
    flags: wgpu::Buffer,
    /// The parameters for even and odd steps.
    uniforms: [wgpu::Buffer; 2],
    /// Field planes, statistics partials and results, obstacle forces.
    out: wgpu::Buffer,
    /// The statistics' first non-finite cells.
    outu: wgpu::Buffer,
    /// The obstacle force lists, then the interpolated walls' links.
    list: wgpu::Buffer,
    /// Per interpolated-wall link: f*_k(x) kept from the step before, then its momentum
    /// exchange in the last step.
    lstate: wgpu::Buffer,
    /// The interpolated walls' links of the current flags, and where they start in `list`
    /// (0: none).
    links: Links,
    links_at: u32,
    bind: [wgpu::BindGroup; 2],
    geo: Geometry,
    bases: Bases,
    fluid: usize,
    /// Per obstacle id, the shift's part of the momentum exchange (sum of c_i 2 w_i over its
    /// links), which the device sums leave out: for the links of the current flags, and for
    /// those of the step whose forces the device holds (an edit changes the first only).
    link_shift: [[f64; 3]; MAX_OBSTACLE_IDS],
    force_shift: [[f64; 3]; MAX_OBSTACLE_IDS],
    /// Whether the force results hold a step's forces (none before the first step).
    forces_valid: bool,
}

fn backend(what: &str, e: impl std::fmt::Display) -> SolverError {
    SolverError::Backend(format!("{what}: {e}"))
}

/// The largest grid whose DDFs (`q` FP32 values per cell) fit `bytes`: a cube in 3D, a square
/// in 2D, in words.
fn largest_grid(lattice: Lattice, precision: Precision, bytes: u64) -> String {
    let cells = bytes as f64 / (lattice.q() * precision.bytes()) as f64;
    if lattice.dims() == 2 {
        let s = cells.sqrt().floor();
        format!("{s} x {s}")
    } else {
        let s = cells.cbrt().floor();
        format!("{s} x {s} x {s}")
    }
}

/// Check that a grid's DDFs fit one storage binding of the device (and u32 slot indices);
/// returns the largest binding.
fn check_fits(gpu: &Gpu, lattice: Lattice, precision: Precision, n: [usize; 3]) -> Result<u64, SolverError> {
    let limits = gpu.limits();
    // Slot indices are u32 in the kernels: at most 2^32 - 1 values.
    let bind_max = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size).min(4 * u64::from(u32::MAX));
    let slots = (lattice.q() as u64).saturating_mul(n.iter().map(|&v| v as u64).product());
    let bytes = slots.saturating_mul(precision.bytes() as u64);
    if bytes > bind_max || slots > u64::from(u32::MAX) {
        return Err(SolverError::Backend(format!(
            "the {} x {} x {} grid's {lattice} {precision} DDFs take {} MiB, more than the {} MiB one storage binding holds on {}: \
             the largest grid that fits is about {} cells",
            n[0],
            n[1],
            n[2],
            bytes >> 20,
            bind_max >> 20,
            gpu.describe(),
            largest_grid(lattice, precision, bind_max)
        )));
    }
    Ok(bind_max)
}

/// Whether the device stores `precision`; otherwise the reason, with the key to change.
fn check_precision(gpu: &Gpu, precision: Precision) -> Result<(), SolverError> {
    match precision {
        Precision::Fp32 => Ok(()),
        Precision::Fp16s if gpu.has_f16() => Ok(()),
        Precision::Fp16s => Err(SolverError::Backend(format!(
            "{} has no half floats in shaders (shader-f16), which FP16S storage needs on the wgpu backend; set solver.precision = \"fp32\"",
            gpu.describe()
        ))),
        Precision::Fp16c => Err(SolverError::Backend(
            "the wgpu backend stores fp32 or fp16s DDFs; this scene sets solver.precision = \"fp16c\": set it to \"fp16s\" or \"fp32\""
                .into(),
        )),
    }
}

impl WgpuSolver {
    /// Build the solver a scene describes on the chosen adapter.
    ///
    /// # Errors
    /// No adapter, a scene this backend does not run (compressed subgrids, adaptive blocks,
    /// FP16 storage, interpolated obstacle walls), a grid too large for the adapter's buffers,
    /// or a device error.
    pub fn from_scene(ls: &LoadedScene, choice: &AdapterChoice) -> Result<WgpuSolver, SolverError> {
        WgpuSolver::from_scene_on(Gpu::open(choice)?, ls)
    }

    /// [`WgpuSolver::from_scene`] on an open device (solvers on one device share its compiled
    /// kernels).
    ///
    /// # Errors
    /// As [`WgpuSolver::from_scene`].
    pub fn from_scene_on(gpu: Arc<Gpu>, ls: &LoadedScene) -> Result<WgpuSolver, SolverError> {
        let s = &ls.scene;
        if s.compression.enabled {
            return Err(SolverError::Backend(
                "compressed subgrids are not on the wgpu backend; set compression.enabled = false or use the CPU or CUDA backend".into(),
            ));
        }
        if s.amr.enabled {
            return Err(SolverError::Backend(
                "adaptive blocks are not on the wgpu backend; set amr.enabled = false or use the CPU or CUDA backend".into(),
            ));
        }
        if s.solver.scheme != Scheme::EsotericPull {
            return Err(SolverError::Backend(format!(
                "the wgpu backend streams by Esoteric Pull in place; this scene sets solver.scheme = \"{}\": set it to \"esoteric_pull\"",
                s.solver.scheme.name()
            )));
        }
        check_precision(&gpu, s.solver.precision)?;
        // Before voxelising: a grid far too large fails at once.
        check_fits(&gpu, ls.derived.lattice, s.solver.precision, ls.derived.size)?;
        let dom = Domain::from_scene(ls).map_err(|e| SolverError::Backend(e.to_string()))?;
        let params = Params::from_scene(ls, &dom);
        WgpuSolver::new(gpu, dom, params, s.solver.precision, &|p| sim_core::domain::initial_state(ls, p))
    }

    /// Build on a domain, every non-solid cell at the equilibrium of the density and velocity
    /// `init` gives for its coordinates (an inlet cell at its face's velocity). Obstacles with
    /// an exact shape (the domain's surfaces) get interpolated walls.
    ///
    /// # Errors
    /// As [`WgpuSolver::from_scene`].
    pub fn new(
        gpu: Arc<Gpu>,
        dom: Domain,
        params: Params,
        precision: Precision,
        init: &dyn Fn([usize; 3]) -> (f32, [f32; 3]),
    ) -> Result<WgpuSolver, SolverError> {
        check_precision(&gpu, precision)?;
        if dom.inlets.len() > MAX_FACES || dom.outlets.len() > MAX_FACES || params.walls.len() > MAX_WALLS {
            return Err(SolverError::Backend(format!(
                "the wgpu backend holds at most {MAX_FACES} inlets, {MAX_FACES} outlets and {MAX_WALLS} walls"
            )));
        }
        params.validate().map_err(SolverError::Param)?;
        let limits = gpu.limits();
        let lattice = dom.lattice;
        let cells = dom.cells();
        let q = lattice.q();
        // Whole words: buffer sizes and writes go by 4 bytes.
        let ddf_bytes = ((q * cells * precision.bytes()) as u64).div_ceil(4) * 4;
        let bind_max = check_fits(&gpu, lattice, precision, dom.n)?;
        if limits.max_storage_buffers_per_shader_stage < STORAGE_BINDINGS {
            return Err(SolverError::Backend(format!(
                "{} binds {} storage buffers per shader stage; the wgpu solver needs {STORAGE_BINDINGS}",
                gpu.describe(),
                limits.max_storage_buffers_per_shader_stage
            )));
        }
        let groups = cells.div_ceil(WORKGROUP as usize) as u32;
        let per_dim = limits.max_compute_workgroups_per_dimension.max(1);
        let gx = groups.min(per_dim);
        let gy = groups.div_ceil(gx);
        if gy > per_dim {
            return Err(SolverError::Backend(format!("the grid needs {groups} workgroups, more than {per_dim} x {per_dim}")));
        }
        let geo = Geometry { gx, gy, groups };
        let stats = 4 * cells as u64;
        let forces = stats + 4 * u64::from(groups) + 4;
        let len = forces + 3 * MAX_OBSTACLE_IDS as u64;
        if len * 4 > bind_max || forces > u64::from(u32::MAX) {
            return Err(SolverError::Backend(format!(
                "the field planes of the grid take {} MiB, more than one storage binding holds on {}",
                (len * 4) >> 20,
                gpu.describe()
            )));
        }
        let bases = Bases { stats: stats as u32, forces: forces as u32 };
        let k = gpu.kernels(lattice, precision)?;
        let step = gpu.step_kernel(lattice, precision, params.collide.kind)?;
        let state = with_lattice!(lattice, L => layout::initial_state::<L>(&dom, init));
        let (f, flags, uniforms, out, outu) = gpu.scoped("allocating the solver's buffers", || {
            let d = &gpu.device;
            let buf = |label: &str, size: u64, usage: wgpu::BufferUsages| {
                d.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size: size.max(4), usage, mapped_at_creation: false })
            };
            let st = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
            let f = buf("ddfs", ddf_bytes, st);
            let flags = buf("flags", cells.div_ceil(4) as u64 * 4, st);
            let un = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
            let size = std::mem::size_of::<GpuParams>() as u64;
            let uniforms = [buf("params even", size, un), buf("params odd", size, un)];
            let out = buf("scratch", len * 4, st);
            let outu = buf("scratch u32", (u64::from(groups) + 1) * 4, st);
            (f, flags, uniforms, out, outu)
        })?;
        let fluid = dom.fluid_cells();
        // Placeholders until the lists are built below.
        let list = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("force lists"),
            size: 4 * (MAX_OBSTACLE_IDS as u64 + 1),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let lstate = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("link states"),
            size: 8,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind = [0, 1].map(|p| bind_group(&gpu, &k, &f, &flags, &uniforms[p], &out, &list, &outu, &lstate));
        let mut s = WgpuSolver {
            gpu,
            k,
            step,
            dom,
            params,
            precision,
            t: 0,
            f,
            flags,
            uniforms,
            out,
            outu,
            list,
            lstate,
            links: Links::default(),
            links_at: 0,
            bind,
            geo,
            bases,
            fluid,
            link_shift: [[0.0; 3]; MAX_OBSTACLE_IDS],
            force_shift: [[0.0; 3]; MAX_OBSTACLE_IDS],
            forces_valid: false,
        };
        s.install(&state)?;
        Ok(s)
    }

    /// The device this solver runs on.
    #[must_use]
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn upload_flags(&self) {
        let mut words = self.dom.flags.clone();
        words.resize(self.dom.cells().div_ceil(4) * 4, 0);
        self.gpu.queue.write_buffer(&self.flags, 0, &words);
    }

    /// The parameter struct for steps of parity `odd`.
    fn gpu_params(&self, odd: bool) -> GpuParams {
        let d = &self.dom;
        let c = &self.params.collide;
        let mut g = GpuParams {
            n: [d.n[0] as u32, d.n[1] as u32, d.n[2] as u32, d.cells() as u32],
            ctl: [u32::from(odd), self.geo.gx, self.geo.groups, self.links.len() as u32],
            opt: [self.bases.stats, self.bases.forces, u32::from(c.has_force()), self.links_at],
            // 1/tau and TRT's odd rate as the CPU reference computes them (host division).
            coll: [c.tau, c.cs, 1.0 / c.tau, 1.0 / trt_tau_minus(c.tau)],
            force: [c.force[0], c.force[1], c.force[2], 0.0],
            ..GpuParams::default()
        };
        for (w, v) in g.walls.iter_mut().zip(&self.params.walls) {
            *w = [v[0], v[1], v[2], 0.0];
        }
        for (gi, b) in g.inlets.iter_mut().zip(&d.inlets) {
            *gi = GpuInlet {
                shape: [b.axis as i32, b.inward, i32::from(b.profile == Profile::Parabolic), b.sponge as i32],
                layer: [b.layer as i32, 0, 0, 0],
                u: [b.velocity[0], b.velocity[1], b.velocity[2], 0.0],
                lo: [b.open[0].0 as i32, b.open[1].0 as i32, b.open[2].0 as i32, 0],
                hi: [b.open[0].1 as i32, b.open[1].1 as i32, b.open[2].1 as i32, 0],
            };
        }
        for (go, o) in g.outlets.iter_mut().zip(&d.outlets) {
            *go = GpuOutlet {
                shape: [o.axis as i32, o.inward, o.sponge as i32, o.layer as i32],
                inflow: [o.inflow.map_or(-1, |i| i as i32), 0, 0, 0],
                density: [o.density, 0.0, 0.0, 0.0],
            };
        }
        g
    }

    fn upload_params(&self) {
        for p in 0..2 {
            let g = self.gpu_params(p == 1);
            self.gpu.queue.write_buffer(&self.uniforms[p], 0, bytemuck::bytes_of(&g));
        }
    }

    /// Build the obstacle force lists and the interpolated walls' links from the flags: for
    /// each obstacle id, the non-solid cells with a link into it, and the shift's part of its
    /// momentum exchange over its halfway links. The links' kept values are read afresh
    /// ([`WgpuSolver::refresh_links`]) by the caller, and the parameters uploaded.
    fn rebuild_lists(&mut self) -> Result<(), SolverError> {
        let links = Links::of_grid(&self.dom, 0);
        let (lists, shift) = with_lattice!(self.dom.lattice, L => force_lists::<L>(&self.dom, links.mask));
        let mut words = Vec::with_capacity(MAX_OBSTACLE_IDS + 1 + lists.iter().map(Vec::len).sum::<usize>());
        let mut at = 0u32;
        words.push(0);
        for l in &lists {
            at += l.len() as u32;
            words.push(at);
        }
        for l in &lists {
            words.extend_from_slice(l);
        }
        self.links_at = 0;
        if !links.is_empty() {
            self.links_at = words.len() as u32;
            words.extend(links.packed());
        }
        let bytes = (words.len() * 4) as u64;
        let link_bytes = (8 * links.len() as u64).max(8);
        let grow_list = self.list.size() < bytes;
        let grow_links = self.lstate.size() < link_bytes;
        if grow_list || grow_links {
            let d = &self.gpu.device;
            let storage = |label: &str, size: u64| {
                d.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            };
            if grow_list {
                self.list = self.gpu.scoped("allocating the force lists", || storage("force lists", bytes))?;
            }
            if grow_links {
                self.lstate = self.gpu.scoped("allocating the wall links' states", || storage("link states", link_bytes))?;
            }
            self.bind = [0, 1].map(|p| {
                bind_group(&self.gpu, &self.k, &self.f, &self.flags, &self.uniforms[p], &self.out, &self.list, &self.outu, &self.lstate)
            });
        }
        self.gpu.queue.write_buffer(&self.list, 0, bytemuck::cast_slice(&words));
        self.link_shift = shift;
        self.links = links;
        Ok(())
    }

    /// Put `state` (shifted DDFs in f32) on the device with what the current flags derive: the
    /// flags, the force lists and wall links, the parameters that locate them, and the links'
    /// kept values read from the state (after a start or an edit).
    fn install(&mut self, state: &[f32]) -> Result<(), SolverError> {
        self.write_state(state);
        self.upload_flags();
        self.rebuild_lists()?;
        self.upload_params();
        self.refresh_links(state);
        self.gpu.take_error()
    }

    /// Read every interpolated-wall link's f*_k(x) from `state` (the DDF buffer before the next
    /// step): the value x + c_k loads along c_k in that step, as sim-core's CPU solver reads it
    /// after a start, a restore or an edit.
    fn refresh_links(&self, state: &[f32]) {
        if self.links.is_empty() {
            return;
        }
        let odd = self.t % 2 == 1;
        let kept = with_lattice!(self.dom.lattice, L => layout::kept_links::<L>(&self.dom, &self.links, state, odd));
        self.gpu.queue.write_buffer(&self.lstate, 0, bytemuck::cast_slice(&kept));
    }

    fn parity(&self) -> usize {
        usize::from(self.t % 2 == 1)
    }

    fn encoder(&self) -> wgpu::CommandEncoder {
        self.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("esoflow") })
    }

    /// Run a kernel over every cell with the parameters of the current parity.
    fn over_cells(&self, enc: &mut wgpu::CommandEncoder, pipeline: &wgpu::ComputePipeline) {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &self.bind[self.parity()], &[]);
        pass.dispatch_workgroups(self.geo.gx, self.geo.gy, 1);
    }

    /// Submit `enc` with copies of `parts` (buffer, offset, bytes; all multiples of 4) appended,
    /// wait, and return their bytes.
    fn read_back(&self, mut enc: wgpu::CommandEncoder, parts: &[(&wgpu::Buffer, u64, u64)]) -> Result<Vec<Vec<u8>>, SolverError> {
        let mut at = Vec::with_capacity(parts.len());
        let mut size = 0u64;
        for &(_, _, len) in parts {
            at.push(size);
            size += len.div_ceil(8) * 8;
        }
        let staging = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read back"),
            size: size.max(8),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        for (&(buf, off, len), &dst) in parts.iter().zip(&at) {
            enc.copy_buffer_to_buffer(buf, off, &staging, dst, len);
        }
        self.gpu.queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.gpu.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| backend("waiting for the device", e))?;
        self.gpu.take_error()?;
        rx.recv().map_err(|e| backend("reading back", e))?.map_err(|e| backend("mapping the read-back buffer", e))?;
        let out = {
            let view = staging.slice(..).get_mapped_range().map_err(|e| backend("mapping the read-back buffer", e))?;
            parts.iter().zip(&at).map(|(&(_, _, len), &dst)| view[dst as usize..(dst + len) as usize].to_vec()).collect()
        };
        staging.unmap();
        Ok(out)
    }

    /// The whole DDF buffer as stored (FP32 or FP16S encodings, little-endian), one value per
    /// slot.
    fn read_raw(&self) -> Result<Vec<u8>, SolverError> {
        let slots = self.dom.lattice.q() * self.dom.cells();
        let mut bytes = self.read_back(self.encoder(), &[(&self.f, 0, self.f.size())])?.swap_remove(0);
        bytes.truncate(slots * self.precision.bytes());
        Ok(bytes)
    }

    fn write_raw(&self, mut bytes: Vec<u8>) {
        bytes.resize(bytes.len().div_ceil(4) * 4, 0);
        self.gpu.queue.write_buffer(&self.f, 0, &bytes);
    }

    /// The whole DDF buffer, decoded to the shifted DDFs in f32.
    fn read_state(&self) -> Result<Vec<f32>, SolverError> {
        let raw = self.read_raw()?;
        let mut state = vec![0.0f32; raw.len() / self.precision.bytes()];
        self.precision.decode_all(&raw, &mut state);
        Ok(state)
    }

    /// Write the whole DDF buffer from shifted DDFs in f32, encoded as stored.
    fn write_state(&self, state: &[f32]) {
        self.write_raw(self.precision.encode_all(state));
    }

    fn fields_inner(&self) -> Result<Fields, SolverError> {
        let cells = self.dom.cells();
        let mut enc = self.encoder();
        self.over_cells(&mut enc, &self.k.fields);
        let bytes = self.read_back(enc, &[(&self.out, 0, 16 * cells as u64)])?;
        let v: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[0]);
        Ok(Fields {
            size: self.dom.n,
            rho: v[..cells].to_vec(),
            u: (0..cells).map(|n| [v[cells + n], v[2 * cells + n], v[3 * cells + n]]).collect(),
            solid: self.dom.flags.iter().map(|&f| is_solid(f)).collect(),
        })
    }

    fn stats_inner(&self) -> Result<Stats, SolverError> {
        let mut enc = self.encoder();
        self.over_cells(&mut enc, &self.k.fields);
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
            pass.set_pipeline(&self.k.stats_final);
            pass.set_bind_group(0, &self.bind[self.parity()], &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        let g = u64::from(self.geo.groups);
        let res = 4 * (u64::from(self.bases.stats) + 4 * g);
        let forces = 4 * u64::from(self.bases.forces);
        let b = self.read_back(enc, &[(&self.out, res, 16), (&self.out, forces, 12 * MAX_OBSTACLE_IDS as u64), (&self.outu, 4 * g, 4)])?;
        let r: Vec<f32> = bytemuck::pod_collect_to_vec(&b[0]);
        let fr: Vec<f32> = bytemuck::pod_collect_to_vec(&b[1]);
        let bad: u32 = bytemuck::pod_read_unaligned(&b[2]);
        let blown = bad != NONE;
        let forces = (1..=self.dom.obstacles.len())
            .map(|k| if self.forces_valid { [0, 1, 2].map(|a| self.force_shift[k][a] + f64::from(fr[3 * k + a])) } else { [0.0; 3] })
            .collect();
        Ok(Stats {
            step: self.t,
            mass: if blown { f64::NAN } else { self.fluid as f64 + f64::from(r[0]) },
            max_u: if blown { f64::NAN } else { f64::from(r[1]).sqrt() },
            rho_range: if blown { [f64::NAN; 2] } else { [f64::from(r[2]), f64::from(r[3])] },
            forces,
            first_bad_cell: blown.then(|| self.dom.coords(bad as usize)),
        })
    }

    fn checkpoint_inner(&self) -> Result<Checkpoint, SolverError> {
        // The stored encodings themselves, in the checkpoint's order: bit for bit what the
        // device holds, in any precision.
        let raw = self.read_raw()?;
        let odd = self.t % 2 == 1;
        let w = self.precision.bytes();
        let data = with_lattice!(self.dom.lattice, L => layout::gather_bytes::<L>(&self.dom, &raw, w, odd));
        Ok(Checkpoint {
            lattice: self.dom.lattice,
            precision: self.precision,
            size: self.dom.n,
            flags_crc: crc32fast::hash(&self.dom.flags),
            step: self.t,
            params: self.params.clone(),
            data,
            probes: Vec::new(),
        })
    }

    fn edit_inner(&mut self, e: &CellEdit) -> Result<EditReport, SolverError> {
        with_lattice!(self.dom.lattice, L => self.edit_lat::<L>(e))
    }

    /// Apply a cell edit to the state (read back whole, edited on the host as sim-core's CPU
    /// solver edits its own, written back): cells that stay fluid keep their incoming DDFs,
    /// moved to the slots the new flags give them; cells that become fluid start at rest
    /// equilibrium with the mean density of their fluid neighbours that stay (1 without any).
    fn edit_lat<L: Lat>(&mut self, e: &CellEdit) -> Result<EditReport, SolverError> {
        let plan = self.dom.plan_edit(e).map_err(SolverError::Edit)?;
        if plan.changes.is_empty() {
            return Ok(EditReport::default());
        }
        let mut state = self.read_state()?;
        let odd = self.t % 2 == 1;
        let around = self.dom.around(&plan.changes);
        let changed: std::collections::HashSet<usize> = plan.changes.iter().map(|&(c, _)| c).collect();
        let p = &self.params;
        let (walls, force) = (p.walls.clone(), p.collide.force);
        // 1. The incoming DDFs and density of every fluid cell around the edit (old flags).
        let read: Vec<(usize, [f32; MAX_Q])> = around
            .iter()
            .copied()
            .filter(|&n| !is_solid(self.dom.flags[n]))
            .map(|n| {
                let j = layout::neighbours::<L>(&self.dom, n);
                let mut f = [0.0f32; MAX_Q];
                for i in 0..L::Q {
                    f[i] = state[layout::slot::<L>(&self.dom, i, n, &j, odd)];
                }
                (n, f)
            })
            .collect();
        let d = &self.dom;
        let rho: std::collections::HashMap<usize, f32> =
            read.iter().map(|&(n, f)| (n, layout::density::<L>(d, n, f, &walls, force, &d.inlets, &d.outlets))).collect();
        let mass_removed: f64 = read.iter().filter(|(n, _)| changed.contains(n)).map(|(n, _)| f64::from(rho[n])).sum();
        // 2. Densities of the cells that become fluid.
        let new_fluid: Vec<(usize, f32)> = plan
            .changes
            .iter()
            .filter(|&&(_, f)| !is_solid(f))
            .map(|&(n, _)| {
                let p = d.coords(n);
                let (sum, k) = L::C
                    .iter()
                    .skip(1)
                    .filter_map(|&ci| {
                        let m = d.neighbour(p, ci);
                        (!changed.contains(&m)).then(|| rho.get(&m)).flatten()
                    })
                    .fold((0.0f64, 0usize), |(s, k), &r| (s + f64::from(r), k + 1));
                (n, if k > 0 { (sum / k as f64) as f32 } else { 1.0 })
            })
            .collect();
        // 3. New flags, then the states where they now belong.
        let before = self.dom.apply_plan(&plan, &around);
        let d = &self.dom;
        for (n, f) in &read {
            if changed.contains(n) {
                continue;
            }
            let j = layout::neighbours::<L>(d, *n);
            for i in 0..L::Q {
                state[layout::slot::<L>(d, i, *n, &j, odd)] = f[i];
            }
        }
        let mut mass_added = 0.0f64;
        for &(n, r) in &new_fluid {
            let mut feq = [0.0f32; MAX_Q];
            sim_core::collision::equilibrium::<L>(r - 1.0, [0.0; 3], &mut feq);
            mass_added += f64::from(layout::density::<L>(d, n, feq, &walls, force, &d.inlets, &d.outlets));
            let j = layout::neighbours::<L>(d, n);
            for i in 0..L::Q {
                state[layout::slot::<L>(d, i, n, &j, odd)] = feq[i];
            }
        }
        self.fluid = self.dom.fluid_cells();
        self.install(&state)?;
        Ok(EditReport { changed: before, obstacle: plan.obstacle.map(|(id, _)| id), mass_added, mass_removed })
    }
}

/// For each obstacle id, the non-solid cells with a link into it (ascending), and the sum of
/// c_i 2 w_i over those links that are halfway (not of an obstacle in the curved walls' `mask`).
fn force_lists<L: Lat>(dom: &Domain, mask: u16) -> (Vec<Vec<u32>>, [[f64; 3]; MAX_OBSTACLE_IDS]) {
    let mut lists = vec![Vec::new(); MAX_OBSTACLE_IDS];
    let mut shift = [[0.0f64; 3]; MAX_OBSTACLE_IDS];
    if dom.obstacles.is_empty() {
        return (lists, shift);
    }
    for n in 0..dom.cells() {
        let flag = dom.flags[n];
        if is_solid(flag) || (flag & sim_core::domain::NEAR) == 0 {
            continue;
        }
        let j = layout::neighbours::<L>(dom, n);
        let mut seen = 0u32;
        for i in 1..L::Q {
            let nf = dom.flags[j[i]];
            if kind_of(nf) != kind::SOLID || id_of(nf) == 0 {
                continue;
            }
            let k = id_of(nf);
            if seen & (1 << k) == 0 {
                seen |= 1 << k;
                lists[k].push(n as u32);
            }
            if Links::curved(mask, nf) {
                continue;
            }
            let v = 2.0 * f64::from(L::W[i]);
            for a in 0..3 {
                shift[k][a] += f64::from(L::C[i][a]) * v;
            }
        }
    }
    (lists, shift)
}

fn bind_group(
    gpu: &Gpu,
    k: &Kernels,
    f: &wgpu::Buffer,
    flags: &wgpu::Buffer,
    params: &wgpu::Buffer,
    out: &wgpu::Buffer,
    list: &wgpu::Buffer,
    outu: &wgpu::Buffer,
    lstate: &wgpu::Buffer,
) -> wgpu::BindGroup {
    fn e(binding: u32, b: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
        wgpu::BindGroupEntry { binding, resource: b.as_entire_binding() }
    }
    gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("lbm"),
        layout: &k.layout,
        entries: &[e(0, f), e(1, flags), e(2, params), e(3, out), e(4, list), e(5, outu), e(6, lstate)],
    })
}

/// Open a device on the chosen adapter and build the scene's solver there (the counterpart of
/// `sim_core::build::cpu`).
///
/// # Errors
/// As [`WgpuSolver::from_scene`].
pub fn build(ls: &LoadedScene, choice: &AdapterChoice) -> Result<Box<dyn Solver>, SolverError> {
    Ok(Box::new(WgpuSolver::from_scene(ls, choice)?))
}

impl Solver for WgpuSolver {
    fn info(&self) -> SolverInfo {
        let l = self.dom.lattice;
        let mem = self.f.size() + self.flags.size() + self.out.size() + self.outu.size() + self.list.size() + self.lstate.size();
        SolverInfo {
            backend: "wgpu",
            device: self.gpu.describe(),
            lattice: l,
            scheme: Scheme::EsotericPull,
            precision: self.precision,
            size: self.dom.n,
            bytes_per_cell: Scheme::EsotericPull.bytes_stored(l, self.precision, 16),
            bytes_moved_per_cell: Scheme::EsotericPull.bytes_moved(l, self.precision, 16),
            memory_bytes: mem,
        }
    }
    fn domain(&self) -> &Domain {
        &self.dom
    }
    fn time_step(&self) -> u64 {
        self.t
    }
    fn step(&mut self, steps: u64) -> Result<(), SolverError> {
        let mut left = steps;
        while left > 0 {
            let n = left.min(STEPS_PER_SUBMIT);
            left -= n;
            let mut enc = self.encoder();
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("steps"), timestamp_writes: None });
                pass.set_pipeline(&self.step);
                for _ in 0..n {
                    pass.set_bind_group(0, &self.bind[self.parity()], &[]);
                    pass.dispatch_workgroups(self.geo.gx, self.geo.gy, 1);
                    self.t += 1;
                }
                if left == 0 && !self.dom.obstacles.is_empty() {
                    // The forces of the last step, with its parity: read from where it stored
                    // the DDFs that enter the obstacles.
                    pass.set_pipeline(&self.k.forces);
                    pass.set_bind_group(0, &self.bind[usize::from((self.t - 1) % 2 == 1)], &[]);
                    pass.dispatch_workgroups(MAX_OBSTACLE_IDS as u32, 1, 1);
                    self.force_shift = self.link_shift;
                    self.forces_valid = true;
                }
            }
            self.gpu.queue.submit([enc.finish()]);
            let _ = self.gpu.device.poll(wgpu::PollType::Poll);
            self.gpu.take_error()?;
        }
        Ok(())
    }
    fn synchronize(&self) -> Result<(), SolverError> {
        self.gpu.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| backend("waiting for the device", e))?;
        self.gpu.take_error()
    }
    fn fields(&self) -> Fields {
        self.fields_inner().unwrap_or_else(|e| {
            tracing::error!("{e}");
            let cells = self.dom.cells();
            Fields {
                size: self.dom.n,
                rho: vec![f32::NAN; cells],
                u: vec![[f32::NAN; 3]; cells],
                solid: self.dom.flags.iter().map(|&f| is_solid(f)).collect(),
            }
        })
    }
    fn stats(&self) -> Stats {
        self.stats_inner().unwrap_or_else(|e| {
            tracing::error!("{e}");
            Stats::unreadable(self.t)
        })
    }
    fn params(&self) -> Params {
        self.params.clone()
    }
    fn set_params(&mut self, p: Params) -> Result<(), SolverError> {
        p.validate().map_err(SolverError::Param)?;
        let cur = &self.params;
        if p.walls.len() != cur.walls.len() || p.inlets.len() != cur.inlets.len() || p.outlets.len() != cur.outlets.len() {
            return Err(SolverError::Param("the number of walls, inlets and outlets is fixed by the scene".into()));
        }
        let step = self.gpu.step_kernel(self.dom.lattice, self.precision, p.collide.kind)?;
        for (b, v) in self.dom.inlets.iter_mut().zip(&p.inlets) {
            b.velocity = *v;
        }
        for (b, d) in self.dom.outlets.iter_mut().zip(&p.outlets) {
            b.density = *d;
        }
        self.step = step;
        self.params = p;
        self.upload_params();
        Ok(())
    }
    fn checkpoint(&self) -> Checkpoint {
        self.checkpoint_inner().unwrap_or_else(|e| {
            tracing::error!("{e}");
            Checkpoint {
                lattice: self.dom.lattice,
                precision: self.precision,
                size: self.dom.n,
                flags_crc: crc32fast::hash(&self.dom.flags),
                step: self.t,
                params: self.params.clone(),
                data: Vec::new(),
                probes: Vec::new(),
            }
        })
    }
    fn restore(&mut self, c: &Checkpoint) -> Result<(), SolverError> {
        let e = |m: String| Err(SolverError::Checkpoint(m));
        let l = self.dom.lattice;
        if c.lattice != l || c.precision != self.precision {
            return e(format!("it holds {} {} but this solver is {l} {}", c.lattice, c.precision, self.precision));
        }
        if c.size != self.dom.n || c.flags_crc != crc32fast::hash(&self.dom.flags) {
            return e("it was made on a different domain (size or obstacles differ)".into());
        }
        if c.data.len() != l.q() * self.precision.bytes() * self.fluid {
            return e("its data size does not match the domain".into());
        }
        self.set_params(c.params.clone())?;
        self.t = c.step;
        let odd = self.t % 2 == 1;
        let w = self.precision.bytes();
        let raw = with_lattice!(l, L => layout::scatter_bytes::<L>(&self.dom, &c.data, w, odd));
        let mut state = vec![0.0f32; raw.len() / w];
        self.precision.decode_all(&raw, &mut state);
        self.write_raw(raw);
        self.upload_params();
        self.refresh_links(&state);
        self.gpu.take_error()
    }
    fn edit_cells(&mut self, edit: &CellEdit) -> Result<EditReport, SolverError> {
        self.edit_inner(edit)
    }
}
