//! One frame drawn: surfaces marched where their data changed, then slices, surfaces, box and outlines in one pass.

use super::mesh::MeshKey;
use super::outlines::BRICK_COLORS;
use super::{gpu_data, iso_stride, FieldRenderer, Target, ViewParams, BACKGROUND, BRICK_TINT, DEPTH_FORMAT, SOLID_GREY, VIEW_FORMAT};
use crate::viewer::gpu_timer::{GpuSpan, GpuTimer};
use sim_core::bricks::BrickClass;

impl FieldRenderer {
    /// Draw the view into the view texture of `size` pixels (reallocated when the size changes;
    /// returns true then, so a caller that registered the texture elsewhere can refresh it).
    /// Surfaces whose data or threshold changed are made again first (compute passes in the same
    /// encoder). A zero size draws nothing.
    pub fn render(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        size: [u32; 2],
        p: &ViewParams,
    ) -> bool {
        if size[0] == 0 || size[1] == 0 {
            return false;
        }
        self.redraw = false;
        let mut reallocated = false;
        if self.target.as_ref().is_none_or(|t| t.size != size) {
            let extent = wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 };
            let color = device.create_texture(&wgpu::TextureDescriptor {
                label: Some("field view"),
                size: extent,
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: VIEW_FORMAT,
                usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_SRC,
                view_formats: &[],
            });
            let depth = device.create_texture(&wgpu::TextureDescriptor {
                label: Some("field depth"),
                size: extent,
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: DEPTH_FORMAT,
                usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
                view_formats: &[],
            });
            let view = color.create_view(&wgpu::TextureViewDescriptor::default());
            let depth_view = depth.create_view(&wgpu::TextureViewDescriptor::default());
            self.target = Some(Target { size, color, view, depth_view });
            reallocated = true;
        }
        // Make the surfaces that are shown and out of date, move the tracers and trace the
        // streamlines (compute passes before the render pass).
        let (draw_iso, draw_solids) = self.update_surfaces(device, queue, encoder, p);
        let clip = self.field.as_ref().map(|f| p.camera.clip_from_world(f.size, size[0] as f32 / size[1] as f32, f.size[2] == 1));
        let tracers = clip.and_then(|clip| self.update_tracers(device, queue, encoder, p, size, clip));
        let Some(t) = &self.target else { return reallocated };
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("field view"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &t.view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Clear(BACKGROUND), store: wgpu::StoreOp::Store },
            })],
            depth_stencil_attachment: Some(wgpu::RenderPassDepthStencilAttachment {
                view: &t.depth_view,
                depth_ops: Some(wgpu::Operations { load: wgpu::LoadOp::Clear(1.0), store: wgpu::StoreOp::Discard }),
                stencil_ops: None,
            }),
            timestamp_writes: self.timer.as_mut().and_then(|t| t.render_writes(GpuSpan::Draw)),
            occlusion_query_set: None,
            multiview_mask: None,
        });
        let Some(f) = &self.field else { return reallocated };
        let Some(bind_group) = &f.bind_group else { return reallocated };
        let n = f.size;
        let is_2d = n[2] == 1;
        let aspect = size[0] as f32 / size[1] as f32;
        let clip_from_world = p.camera.clip_from_world(n, aspect, is_2d);
        let eye = p.camera.eye(n, aspect);
        let clampi = |i: usize, a: usize| i.min(n[a] - 1) as u32;
        let mask = if is_2d { 4 } else { u32::from(p.show[0]) | u32::from(p.show[1]) << 1 | u32::from(p.show[2]) << 2 };
        let brick = f.bricks.as_ref().filter(|_| p.bricks).map(|(_, b)| *b);
        let bricks = brick.map_or([1, 1, 1, 0], |b| [b[0] as u32, b[1] as u32, b[2] as u32, 1]);
        let iso_range = p.iso.map_or((0.0, 1.0), |i| i.color_range);
        let globals = gpu_data::FieldGlobals {
            clip_from_world: clip_from_world.to_cols_array_2d(),
            size: [n[0] as u32, n[1] as u32, n[2] as u32, p.cmap.row()],
            slices: [clampi(p.slices[0], 0), clampi(p.slices[1], 1), if is_2d { 0 } else { clampi(p.slices[2], 2) }, mask],
            range: [p.range.0, p.range.1, BRICK_TINT, 0.0],
            eye: [eye.x, eye.y, eye.z, 1.0],
            iso_range: [iso_range.0, iso_range.1, SOLID_GREY, 0.0],
            bricks,
            brick_colors: BrickClass::ALL.map(|c| {
                let k = BRICK_COLORS[c as usize];
                [f32::from(k[0]) / 255.0, f32::from(k[1]) / 255.0, f32::from(k[2]) / 255.0, 1.0]
            }),
            pitch: [f.field.as_ref().map_or(0, |b| b.pitch), 0, 0, 0],
        };
        queue.write_buffer(&self.globals, 0, bytemuck::bytes_of(&globals));
        pass.set_bind_group(0, bind_group, &[]);
        // Where the device writes timestamps inside passes, the draw is split: slices, surfaces.
        let mut split = self.timer.as_mut().filter(|t| t.inside_passes());
        GpuTimer::pass_span(split.as_deref_mut(), &mut pass, GpuSpan::DrawSlices, |pass| {
            pass.set_pipeline(&self.slice_pipeline);
            pass.draw(0..6, 0..3);
        });
        GpuTimer::pass_span(split, &mut pass, GpuSpan::DrawSurfaces, |pass| {
            for (on, mesh, pipeline) in
                [(draw_iso, &self.iso_mesh, &self.iso_pipeline), (draw_solids, &self.solid_mesh, &self.solid_pipeline)]
            {
                let Some(m) = mesh.as_ref().filter(|_| on) else { continue };
                let Some(v) = &m.verts else { continue };
                pass.set_pipeline(pipeline);
                pass.set_vertex_buffer(0, v.slice(..));
                match (&m.indexed, m.mode) {
                    (Some((ib, _)), 0) => {
                        pass.set_index_buffer(ib.slice(..u64::from(m.capacity.max(3)) * 4), wgpu::IndexFormat::Uint32);
                        pass.draw_indexed_indirect(&m.args, 0);
                    }
                    _ => pass.draw_indirect(&m.args, 0),
                }
            }
        });
        if let Some(t) = &tracers {
            self.draw_tracers(&mut pass, t);
            pass.set_bind_group(0, bind_group, &[]);
        }
        if !is_2d {
            pass.set_pipeline(&self.box_pipeline);
            pass.draw(0..24, 0..1);
            if let Some(b) = self.outlines.as_ref().filter(|_| p.outlines && self.outline_count > 0) {
                pass.set_pipeline(&self.outline_pipeline);
                pass.set_vertex_buffer(0, b.slice(..));
                pass.draw(0..24, 0..self.outline_count);
            }
        }
        reallocated
    }

    /// Make the isosurface and the solid surfaces again where their data or threshold changed
    /// since they were made; returns which of them to draw.
    fn update_surfaces(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        p: &ViewParams,
    ) -> (bool, bool) {
        let (Some(mc), Some(f)) = (&self.mc, &self.field) else { return (false, false) };
        if f.size[2] < 2 {
            return (false, false);
        }
        let mut draw = (false, false);
        if let (Some(iso), Some((iso_field, speed)), Some(mesh)) = (p.iso, &f.iso, self.iso_mesh.as_mut()) {
            // Data of another field (the new one is on its way) is not drawn.
            if self.iso_kind == Some(iso.kind) && iso.threshold.is_finite() {
                let key = MeshKey { data: self.iso_serial, threshold: iso.threshold.to_bits() };
                if mesh.key != Some(key) {
                    let tw = self.timer.as_mut().and_then(|t| t.compute_writes(GpuSpan::Iso));
                    let data = (iso_field, speed, &f.solid);
                    mesh.compute(device, queue, encoder, mc, data, f.size, iso.threshold, iso_stride(f.size), key, tw);
                }
                draw.0 = true;
            }
        }
        if let (true, Some(mesh)) = (p.solids, self.solid_mesh.as_mut()) {
            let key = MeshKey { data: self.solid_serial, threshold: 0 };
            if mesh.key != Some(key) {
                let tw = self.timer.as_mut().and_then(|t| t.compute_writes(GpuSpan::Iso));
                let data = (&self.dummy_field, &self.dummy_field, &f.solid);
                mesh.compute(device, queue, encoder, mc, data, f.size, 0.5, 1, key, tw);
            }
            draw.1 = true;
        }
        draw
    }
}
