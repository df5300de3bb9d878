//! The renderer's inputs: fields, solids, bricks and outlines uploaded from host memory or bound where the solver wrote them.

use super::outlines::{OutlineBox, MAX_OUTLINES};
use super::{check_binding, gpu_data, texture_3d, write_3d, FieldBinding, FieldData, FieldRenderer, HostBuffers, Keep, RenderError};
use sim_core::bricks::BrickMap;
use sim_core::fields::FieldKind;
use std::sync::Arc;

impl FieldRenderer {
    /// Make the field bind group again after a binding changed.
    fn rebind(&mut self, device: &wgpu::Device) {
        let Some(f) = &self.field else { return };
        let view = |t: &wgpu::Texture| t.create_view(&wgpu::TextureViewDescriptor::default());
        let field = f.field.as_ref().unwrap_or(&self.dummy_field);
        let bricks = f.bricks.as_ref().map_or(&self.dummy_u8, |(t, _)| t);
        let (sv, bv) = (view(&f.solid), view(bricks));
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("field"),
            layout: &self.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: self.globals.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: field.resource() },
                wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::TextureView(&sv) },
                wgpu::BindGroupEntry { binding: 3, resource: wgpu::BindingResource::TextureView(&self.lut_view) },
                wgpu::BindGroupEntry { binding: 5, resource: wgpu::BindingResource::TextureView(&bv) },
            ],
        });
        if let Some(f) = self.field.as_mut() {
            f.bind_group = Some(bind_group);
        }
    }

    /// The data of a grid of `size`: all new (no field, a zeroed solid mask) when the size
    /// changes.
    fn ensure_size(&mut self, device: &wgpu::Device, size: [usize; 3]) {
        if self.field.as_ref().is_none_or(|f| f.size != size) {
            // New textures start zeroed: no solid cells until a mask arrives.
            let solid = texture_3d(device, "solid", size, wgpu::TextureFormat::R8Uint);
            self.field = Some(FieldData {
                size,
                field: None,
                solid,
                iso: None,
                bricks: None,
                velocity: None,
                host: HostBuffers::default(),
                bind_group: None,
            });
            self.iso_kind = None;
            self.iso_serial += 1;
            self.solid_serial += 1;
        }
    }

    /// Hold `keep` while the shared buffers now bound are read; what was held before is
    /// released after the next submit (see [`FieldRenderer::take_released`]).
    fn hold(&mut self, keep: Option<Keep>) {
        let same = match (&self.keep, &keep) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.released.extend(std::mem::replace(&mut self.keep, keep));
        }
    }

    /// What the renderer held for shared buffers it no longer binds: drop it once the GPU has run
    /// the commands submitted up to now (the last ones that could read those buffers), e.g. with
    /// `queue.on_submitted_work_done` right after the next submit.
    pub fn take_released(&mut self) -> Vec<Keep> {
        std::mem::take(&mut self.released)
    }

    /// Write `values` (a field of the current grid, tight rows) into the host buffer `slot`.
    fn write_host(&mut self, device: &wgpu::Device, queue: &wgpu::Queue, slot: usize, values: &[f32]) -> Option<FieldBinding> {
        const LABELS: [&str; 6] = ["field", "isosurface field", "speed", "velocity x", "velocity y", "velocity z"];
        let f = self.field.as_mut()?;
        let bytes = std::mem::size_of_val(values) as u64;
        let buffer = f.host.0[slot].get_or_insert_with(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(LABELS[slot]),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        queue.write_buffer(buffer, 0, bytemuck::cast_slice(values));
        Some(FieldBinding { buffer: buffer.clone(), offset: 0, size: bytes, pitch: f.size[0] as u32, shared: false, lattice: 1 })
    }

    /// Errors of a grid the view cannot hold: a zero size or one over the 3D texture limit (the
    /// solid mask and the brick classes are textures).
    fn check_size(device: &wgpu::Device, size: [usize; 3]) -> Result<(), RenderError> {
        let max = device.limits().max_texture_dimension_3d;
        if size.iter().any(|&n| n == 0 || n > max as usize) {
            return Err(RenderError::TooLarge(size, max));
        }
        Ok(())
    }

    fn check_binding(device: &wgpu::Device, size: [usize; 3], pitch: usize, offset: u64) -> Result<u64, RenderError> {
        check_binding(&device.limits(), size, pitch, offset)
    }

    /// Upload a scalar field and the solid mask (x fastest; 0 fluid, 1 solid wall, 2 solid
    /// obstacle: the slices draw every solid cell grey, the solid surfaces are the obstacles').
    /// The field goes into a storage buffer of the renderer's (`queue.write_buffer`), made again
    /// only when the size changes.
    ///
    /// # Errors
    /// A domain over the GPU's 3D texture limit or its storage binding limit, or data of the
    /// wrong length.
    pub fn upload(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        size: [usize; 3],
        values: &[f32],
        solid: Option<&[u8]>,
    ) -> Result<(), RenderError> {
        let cells = size[0] * size[1] * size[2];
        if values.len() != cells || solid.is_some_and(|s| s.len() != cells) {
            return Err(RenderError::Length(values.len(), cells));
        }
        Self::check_size(device, size)?;
        Self::check_binding(device, size, size[0], 0)?;
        self.ensure_size(device, size);
        let binding = self.write_host(device, queue, 0, values);
        if let Some(f) = self.field.as_mut() {
            f.field = binding;
            // Isosurface data and velocity in a shared buffer are not held any longer.
            if f.iso.as_ref().is_some_and(|(b, _)| b.shared) {
                f.iso = None;
                self.iso_kind = None;
            }
            if f.velocity.as_ref().is_some_and(|v| v[0].shared) {
                f.velocity = None;
            }
            if let Some(s) = solid {
                write_3d(queue, &f.solid, size, 1, s);
                self.solid_serial += 1;
            }
        }
        self.hold(None);
        self.rebind(device);
        Ok(())
    }

    /// Say that the isosurface data uploaded last holds values only at the cells whose
    /// coordinates are multiples of `lattice` (a sampled frame, written through host memory):
    /// its surface is then marched on cubes of a multiple of that.
    pub fn set_iso_lattice(&mut self, lattice: u32) {
        if let Some((a, b)) = self.field.as_mut().and_then(|f| f.iso.as_mut()) {
            a.lattice = lattice.max(1);
            b.lattice = lattice.max(1);
        }
    }

    /// Upload the isosurface's field (`kind`) and the velocity magnitude that colours it, for
    /// the domain of the last [`FieldRenderer::upload`]. The surface is made again at the next
    /// draw that shows it.
    ///
    /// # Errors
    /// No field uploaded for this size, or data of the wrong length.
    pub fn upload_iso(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        size: [usize; 3],
        kind: FieldKind,
        values: &[f32],
        speed: &[f32],
    ) -> Result<(), RenderError> {
        let have = self.field.as_ref().map(|f| f.size);
        if have != Some(size) {
            return Err(RenderError::NoField(size, have));
        }
        let cells = size[0] * size[1] * size[2];
        if values.len() != cells || speed.len() != cells {
            return Err(RenderError::Length(values.len().min(speed.len()), cells));
        }
        Self::check_binding(device, size, size[0], 0)?;
        let (Some(a), Some(b)) = (self.write_host(device, queue, 1, values), self.write_host(device, queue, 2, speed)) else {
            return Ok(());
        };
        if let Some(f) = self.field.as_mut() {
            f.iso = Some((a, b));
        }
        self.iso_kind = Some(kind);
        self.iso_serial += 1;
        Ok(())
    }

    /// Upload the velocity components x, y, z (tight rows, the grid of the last
    /// [`FieldRenderer::upload`]) that move the tracers and trace the streamlines; `lattice` as
    /// in [`FieldRenderer::set_iso_lattice`] (1: every cell holds its value). `None`: no velocity
    /// any more (tracers and lines are not drawn).
    ///
    /// # Errors
    /// No field uploaded for this size, or data of the wrong length.
    pub fn upload_velocity(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        size: [usize; 3],
        velocity: Option<[&[f32]; 3]>,
        lattice: u32,
    ) -> Result<(), RenderError> {
        let have = self.field.as_ref().map(|f| f.size);
        if have != Some(size) {
            return Err(RenderError::NoField(size, have));
        }
        let Some(v) = velocity else {
            if let Some(f) = self.field.as_mut() {
                f.velocity = None;
            }
            return Ok(());
        };
        let cells = size[0] * size[1] * size[2];
        if let Some(bad) = v.iter().find(|c| c.len() != cells) {
            return Err(RenderError::Length(bad.len(), cells));
        }
        Self::check_binding(device, size, size[0], 0)?;
        let mut bound = Vec::with_capacity(3);
        for (k, c) in v.iter().enumerate() {
            let Some(mut b) = self.write_host(device, queue, 3 + k, c) else { return Ok(()) };
            b.lattice = lattice.max(1);
            bound.push(b);
        }
        if let (Some(f), Ok(b)) = (self.field.as_mut(), <[FieldBinding; 3]>::try_from(bound)) {
            f.velocity = Some(b);
            self.velocity_serial += 1;
        }
        Ok(())
    }

    /// Take a frame's fields from a GPU buffer (one shared with the solver) where they lie: the
    /// shaders read the planes of `buffer` straight (no copy). The slices' field is plane
    /// `field`; with `iso` = (kind, its plane, the speed's plane) the isosurface's data; with
    /// `velocity` the planes of the velocity components x, y, z (tracers, streamlines). `solid`
    /// as in [`FieldRenderer::upload`]. `keep` is held as long as the buffer is bound (give the
    /// frame's owner, so that nobody writes it meanwhile); what was held before comes back from
    /// [`FieldRenderer::take_released`].
    ///
    /// # Errors
    /// A domain over the GPU's 3D texture limit, planes over its storage binding limit or not
    /// aligned for it, or a buffer too small for the layout.
    #[allow(clippy::too_many_arguments)]
    pub fn upload_from_buffer(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        buffer: &wgpu::Buffer,
        layout: &sim_core::frame::FrameLayout,
        field: usize,
        iso: Option<(FieldKind, usize, usize)>,
        velocity: Option<[usize; 3]>,
        solid: Option<&[u8]>,
        keep: Option<Keep>,
    ) -> Result<(), RenderError> {
        let size = layout.n;
        let cells = size[0] * size[1] * size[2];
        if solid.is_some_and(|s| s.len() != cells) {
            return Err(RenderError::Length(solid.map_or(0, <[u8]>::len), cells));
        }
        let planes =
            [Some(field), iso.map(|i| i.1), iso.map(|i| i.2), velocity.map(|v| v[0]), velocity.map(|v| v[1]), velocity.map(|v| v[2])];
        if (layout.bytes() as u64) > buffer.size() || planes.iter().flatten().any(|&p| p >= layout.planes) {
            return Err(RenderError::Length(buffer.size() as usize / 4, layout.floats()));
        }
        Self::check_size(device, size)?;
        let plane_bytes = (layout.plane_floats() * 4) as u64;
        let bind = |plane: usize| -> Result<FieldBinding, RenderError> {
            let offset = plane as u64 * plane_bytes;
            let bytes = Self::check_binding(device, size, layout.row_pitch, offset)?;
            let lattice = layout.region.lattice() as u32;
            Ok(FieldBinding { buffer: buffer.clone(), offset, size: bytes, pitch: layout.row_pitch as u32, shared: true, lattice })
        };
        let field_binding = bind(field)?;
        // A frame of planes alone (lattice 0) holds no isosurface data.
        let iso_bindings = match iso {
            Some((kind, ip, sp)) if layout.region.lattice() > 0 => Some((kind, bind(ip)?, bind(sp)?)),
            _ => None,
        };
        // Velocity for tracers needs values in the whole volume (every cell or a lattice).
        let velocity_bindings = match velocity {
            Some(v) if layout.region.lattice() > 0 => Some([bind(v[0])?, bind(v[1])?, bind(v[2])?]),
            _ => None,
        };
        self.ensure_size(device, size);
        if let Some(f) = self.field.as_mut() {
            f.field = Some(field_binding);
            match iso_bindings {
                Some((kind, a, b)) => {
                    f.iso = Some((a, b));
                    self.iso_kind = Some(kind);
                    self.iso_serial += 1;
                }
                // Data in the buffer held before is not held any longer.
                None if f.iso.as_ref().is_some_and(|(b, _)| b.shared) => {
                    f.iso = None;
                    self.iso_kind = None;
                }
                None => {}
            }
            match velocity_bindings {
                Some(v) => {
                    f.velocity = Some(v);
                    self.velocity_serial += 1;
                }
                None if f.velocity.as_ref().is_some_and(|v| v[0].shared) => f.velocity = None,
                None => {}
            }
            if let Some(s) = solid {
                write_3d(queue, &f.solid, size, 1, s);
                self.solid_serial += 1;
            }
        }
        if let Some(t) = self.timer.as_mut() {
            t.note_in_place();
        }
        self.hold(keep);
        self.rebind(device);
        Ok(())
    }

    /// Upload the solver's brick classes (for the overlay), for the domain of the last
    /// [`FieldRenderer::upload`].
    ///
    /// # Errors
    /// No field uploaded, or a map that does not cover the domain.
    pub fn upload_bricks(&mut self, device: &wgpu::Device, queue: &wgpu::Queue, map: &BrickMap) -> Result<(), RenderError> {
        let Some(size) = self.field.as_ref().map(|f| f.size) else { return Err(RenderError::NoField(map.count, None)) };
        let covers = (0..3).all(|a| map.brick[a] > 0 && map.count[a] == size[a].div_ceil(map.brick[a]));
        if !covers || map.class.len() != map.count.iter().product::<usize>() {
            return Err(RenderError::Length(map.class.len(), map.count.iter().product()));
        }
        let tex = texture_3d(device, "brick classes", map.count, wgpu::TextureFormat::R8Uint);
        write_3d(queue, &tex, map.count, 1, &map.codes());
        if let Some(f) = self.field.as_mut() {
            f.bricks = Some((tex, map.brick));
        }
        self.rebind(device);
        Ok(())
    }

    /// The boxes to outline in the 3D view when [`ViewParams::outlines`] is on: a generic list
    /// (the solver's bricks by class now; compressed subgrids by compression ratio and refined
    /// blocks by level later), drawn as 12 edges each, one instance per box, depth-tested against
    /// the slices and surfaces. Kept until set again; at most [`MAX_OUTLINES`] boxes (the first
    /// ones). Returns how many are kept.
    pub fn set_outlines(&mut self, device: &wgpu::Device, queue: &wgpu::Queue, boxes: &[OutlineBox]) -> usize {
        let kept = boxes.len().min(MAX_OUTLINES);
        let data: Vec<gpu_data::OutlineInstance> =
            boxes[..kept].iter().map(|b| gpu_data::OutlineInstance { min: b.min, max: b.max, color: b.color, pad: 0 }).collect();
        let bytes = std::mem::size_of_val(data.as_slice()) as u64;
        if self.outlines.as_ref().is_none_or(|b| b.size() < bytes) {
            self.outlines = Some(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("outline boxes"),
                size: bytes.next_power_of_two().max(1024),
                usage: wgpu::BufferUsages::VERTEX | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        if let Some(b) = self.outlines.as_ref().filter(|_| kept > 0) {
            queue.write_buffer(b, 0, bytemuck::cast_slice(&data));
        }
        self.outline_count = kept as u32;
        kept
    }
}
