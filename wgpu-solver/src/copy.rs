//! The device's copy bandwidth through a compute shader: what a memory-bound kernel such as the
//! lattice Boltzmann step can reach at best on that adapter (`esoflow bench --backend wgpu`
//! reports each step's bandwidth against it).

use crate::gpu::Gpu;
use sim_core::SolverError;
use std::time::Instant;

const COPY_WGSL: &str = "
@group(0) @binding(0) var<storage, read> SRC: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> DST: array<vec4<f32>>;

@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = g.x + g.y * groups.x * 256u;
    if i < arrayLength(&DST) {
        DST[i] = SRC[i];
    }
}
";

/// Copy bandwidth in GB/s (bytes read plus bytes written), the best of several rounds of ten
/// copies of a buffer of up to 256 MiB (less where one storage binding holds less).
///
/// # Errors
/// A device error (the buffers do not fit, the device was lost).
pub fn copy_bandwidth_gbs(gpu: &Gpu) -> Result<f64, SolverError> {
    let l = gpu.limits();
    let bytes = (256u64 << 20).min(l.max_storage_buffer_binding_size).min(l.max_buffer_size) / 16 * 16;
    let vecs = (bytes / 16) as u32;
    let groups = vecs.div_ceil(256);
    let per_dim = l.max_compute_workgroups_per_dimension.max(1);
    let (gx, gy) = (groups.min(per_dim), groups.div_ceil(groups.min(per_dim)));
    let d = &gpu.device;
    let (pipeline, bind) = gpu.scoped("setting up the copy bandwidth test", || {
        let module = d
            .create_shader_module(wgpu::ShaderModuleDescriptor { label: Some("copy"), source: wgpu::ShaderSource::Wgsl(COPY_WGSL.into()) });
        let pipeline = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("copy"),
            layout: None,
            module: &module,
            entry_point: Some("copy"),
            compilation_options: wgpu::PipelineCompilationOptions::default(),
            cache: None,
        });
        let buf = |label: &str| {
            d.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let (src, dst) = (buf("copy source"), buf("copy destination"));
        let bind = d.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("copy"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
            ],
        });
        (pipeline, bind)
    })?;
    let round = |copies: u32| -> Result<f64, SolverError> {
        let mut enc = d.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("copy") });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("copy"), timestamp_writes: None });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            for _ in 0..copies {
                pass.dispatch_workgroups(gx, gy, 1);
            }
        }
        let t = Instant::now();
        gpu.queue.submit([enc.finish()]);
        d.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| SolverError::Backend(format!("waiting for the copies: {e}")))?;
        gpu.take_error()?;
        Ok(t.elapsed().as_secs_f64())
    };
    round(2)?; // warm up: pipeline, first touch of the buffers
    let mut best = f64::MAX;
    for _ in 0..5 {
        best = best.min(round(10)? / 10.0);
    }
    Ok(2.0 * bytes as f64 / best.max(1e-9) / 1e9)
}
