//! Surfaces made by marching cubes on the GPU (isosurfaces, solid obstacles): vertex buffers, counters, level of detail.

use super::{gpu_data, FieldBinding, McPipelines, MeshStats, FIRST_CAPACITY, ISO_MAX_STRIDE, ISO_TRIANGLE_BUDGET, VERTEX_BYTES};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// State of the asynchronous read of a surface's counter: 0 waiting, 1 mapped, 2 failed.
type MapFlag = Arc<AtomicU8>;

/// What a surface's vertex buffer holds: which upload of the data, at which threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MeshKey {
    pub(super) data: u64,
    pub(super) threshold: u32,
}

/// One surface made by marching cubes: its vertex buffer, counter and draw arguments.
pub(super) struct Mesh {
    pub(super) mode: u32,
    pub(super) params: wgpu::Buffer,
    pub(super) counter: wgpu::Buffer,
    pub(super) args: wgpu::Buffer,
    pub(super) verts: Option<wgpu::Buffer>,
    /// Isosurfaces: the index buffer and the vertex number of every lattice edge (see
    /// `mesh` in marching_cubes.wgsl), and the lattice points it was made for; obstacles: a
    /// placeholder (their surface is drawn unindexed, made once from every cell).
    pub(super) indexed: Option<(wgpu::Buffer, u64)>,
    pub(super) capacity: u32,
    pub(super) max_capacity: u32,
    pub(super) key: Option<MeshKey>,
    pub(super) readback: Option<(wgpu::Buffer, MapFlag)>,
    pub(super) stats: Option<MeshStats>,
    /// Extra coarsening of an isosurface over its grid's stride ([`iso_stride`]), raised while
    /// the surface has more than [`ISO_TRIANGLE_BUDGET`] triangles and lowered again below a
    /// quarter of it.
    pub(super) lod: u32,
    /// Stride of the last march.
    pub(super) stride: u32,
}

impl Mesh {
    pub(super) fn new(device: &wgpu::Device, mode: u32, max_capacity: u32) -> Mesh {
        let buf = |label: &str, size: u64, usage: wgpu::BufferUsages| {
            device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
        };
        Mesh {
            mode,
            params: buf(
                "mc params",
                std::mem::size_of::<gpu_data::McParams>() as u64,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            ),
            counter: buf("mc counter", 8, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC),
            args: buf("mc draw args", 20, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDIRECT),
            verts: None,
            indexed: None,
            capacity: FIRST_CAPACITY.min(max_capacity),
            max_capacity,
            key: None,
            readback: None,
            stats: None,
            lod: 1,
            stride: 1,
        }
    }

    /// Run marching cubes into this mesh (encoded into `encoder`, before the render pass).
    pub(super) fn compute(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        mc: &McPipelines,
        data: (&FieldBinding, &FieldBinding, &wgpu::Texture),
        size: [usize; 3],
        threshold: f32,
        stride: u32,
        key: MeshKey,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        let verts = self.verts.get_or_insert_with(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("mc vertices"),
                size: u64::from(self.capacity.max(3)) * VERTEX_BYTES,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::VERTEX,
                mapped_at_creation: false,
            })
        });
        // An isosurface's cubes grow with its level of detail, to a multiple of the spacing of
        // the data's lattice (a sampled frame holds only those cells); obstacles keep every cell.
        let stride = if self.mode == 0 {
            let lattice = data.0.lattice.min(data.1.lattice).max(1);
            (stride * self.lod).div_ceil(lattice) * lattice
        } else {
            stride
        };
        self.stride = stride;
        let params = gpu_data::McParams {
            size: [size[0] as u32, size[1] as u32, size[2] as u32, self.mode],
            threshold,
            capacity: self.capacity,
            stride,
            pitch: data.0.pitch,
            speed_pitch: data.1.pitch,
            pad: [0; 3],
        };
        queue.write_buffer(&self.params, 0, bytemuck::bytes_of(&params));
        // Cubes and lattice points per axis at this stride.
        let cubes = size.map(|k| k.saturating_sub(1) as u32 / stride);
        let points = cubes.map(|c| u64::from(c) + 1);
        let words = if self.mode == 0 { u64::from(self.capacity) + 3 * points.iter().product::<u64>() } else { 4 };
        if self.indexed.as_ref().is_none_or(|(_, w)| *w != words) {
            let b = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("mc indices and edges"),
                size: words * 4,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDEX,
                mapped_at_creation: false,
            });
            self.indexed = Some((b, words));
        }
        let Some((mesh_buf, _)) = &self.indexed else { return };
        let mv = data.2.create_view(&wgpu::TextureViewDescriptor::default());
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("marching cubes"),
            layout: &mc.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: self.params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: mc.table.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: data.0.resource() },
                wgpu::BindGroupEntry { binding: 3, resource: wgpu::BindingResource::TextureView(&mv) },
                wgpu::BindGroupEntry { binding: 4, resource: verts.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 5, resource: self.counter.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 6, resource: self.args.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 7, resource: data.1.resource() },
                wgpu::BindGroupEntry { binding: 8, resource: mesh_buf.as_entire_binding() },
            ],
        });
        encoder.clear_buffer(&self.counter, 0, None);
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("marching cubes"), timestamp_writes });
            pass.set_bind_group(0, &bind_group, &[]);
            let groups = |n: [u32; 3]| n.map(|k| k.div_ceil(4).max(1));
            if self.mode == 0 {
                let g = groups(points.map(|k| k as u32));
                pass.set_pipeline(&mc.iso_vertices);
                pass.dispatch_workgroups(g[0], g[1], g[2]);
                let g = groups(cubes);
                pass.set_pipeline(&mc.iso_triangles);
                pass.dispatch_workgroups(g[0], g[1], g[2]);
            } else {
                let g = groups(cubes);
                pass.set_pipeline(&mc.emit);
                pass.dispatch_workgroups(g[0], g[1], g[2]);
            }
            pass.set_pipeline(&mc.finish);
            pass.dispatch_workgroups(1, 1, 1);
        }
        // Read the count back when the GPU is done, without waiting for it.
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("mc count readback"),
            size: 8,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(&self.counter, 0, &staging, 0, 8);
        let flag: MapFlag = Arc::new(AtomicU8::new(0));
        let f = Arc::clone(&flag);
        encoder.map_buffer_on_submit(&staging, wgpu::MapMode::Read, .., move |r| f.store(if r.is_ok() { 1 } else { 2 }, Ordering::Release));
        self.readback = Some((staging, flag));
        self.key = Some(key);
    }

    /// Take a finished count; grow the buffer (and forget the surface, so it is made again) when
    /// it was too small. Returns true when the surface must be made again.
    pub(super) fn take_count(&mut self) -> bool {
        let Some((buf, flag)) = &self.readback else { return false };
        match flag.load(Ordering::Acquire) {
            0 => return false,
            1 => {
                let word = |v: &[u8], k: usize| u32::from_le_bytes([v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]]);
                let counts = buf.get_mapped_range(..).ok().map(|v| (word(&v, 0), word(&v, 1)));
                buf.unmap();
                if let Some((wanted, made)) = counts {
                    let vertices = if self.mode == 0 { made } else { wanted };
                    let st = MeshStats { wanted, capacity: self.capacity, max_capacity: self.max_capacity, stride: self.stride, vertices };
                    self.stats = Some(st);
                    // Indices or vertices over the buffers: grow them (the surface's vertices are
                    // fewer than its indices, but a NaN region can leave some unused).
                    let need = wanted.max(vertices);
                    if need > self.capacity && self.capacity < self.max_capacity {
                        let grown = u64::from(need).next_power_of_two().min(u64::from(self.max_capacity)) as u32 / 3 * 3;
                        self.capacity = grown.max(self.capacity);
                        self.verts = None;
                        self.indexed = None;
                        self.key = None;
                        self.readback = None;
                        return true;
                    }
                    // Level of detail for the next surfaces (a surface made again for a larger
                    // buffer keeps its detail): a field changes little between frames, so its
                    // next surface has about as many triangles.
                    if self.mode == 0 {
                        let tris = wanted / 3;
                        if tris > ISO_TRIANGLE_BUDGET && self.stride < ISO_MAX_STRIDE {
                            self.lod += 1;
                        } else if tris < ISO_TRIANGLE_BUDGET / 4 && self.lod > 1 {
                            self.lod -= 1;
                        }
                    }
                }
            }
            _ => {}
        }
        self.readback = None;
        false
    }
}
