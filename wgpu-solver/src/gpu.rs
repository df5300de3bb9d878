//! Adapters, the device a solver runs on, and the compiled kernels (one shader module per
//! velocity set, shared by every solver on the same device). Devices are opened headless: no
//! surface is needed.

use crate::wgsl;
use sim_core::collision::Collision;
use sim_core::lattice::Lattice;
use sim_core::precision::Precision;
use sim_core::SolverError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Which adapter a solver runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AdapterChoice {
    /// The adapter wgpu picks for high performance (a discrete GPU before an integrated one,
    /// a software rasteriser last).
    #[default]
    Auto,
    /// The adapter at this place in [`adapters`].
    Index(usize),
    /// The first adapter of [`adapters`] whose name contains this text (case-insensitive).
    Name(String),
}

/// One adapter and the limits that decide the grids it can run.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterSummary {
    /// Place in the list ([`AdapterChoice::Index`]).
    pub index: usize,
    /// The adapter's name (e.g. "NVIDIA H100", "llvmpipe (LLVM 15.0.6, 256 bits)").
    pub name: String,
    /// Graphics API it runs through.
    pub backend: wgpu::Backend,
    /// Discrete, integrated, virtual, CPU or other.
    pub device_type: wgpu::DeviceType,
    /// Driver name and version, where the API tells.
    pub driver: String,
    /// Largest storage buffer one binding may show (bytes).
    pub max_storage_buffer_binding_size: u64,
    /// Largest buffer (bytes).
    pub max_buffer_size: u64,
    /// Storage buffers one shader stage may bind.
    pub max_storage_buffers_per_shader_stage: u32,
    /// Workgroups per dimension of one dispatch.
    pub max_compute_workgroups_per_dimension: u32,
}

impl std::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} ({:?}, {:?}{}); storage binding {} MiB, buffer {} MiB, {} storage buffers per stage",
            self.index,
            self.name,
            self.backend,
            self.device_type,
            if self.driver.is_empty() { String::new() } else { format!(", {}", self.driver) },
            self.max_storage_buffer_binding_size >> 20,
            self.max_buffer_size >> 20,
            self.max_storage_buffers_per_shader_stage
        )
    }
}

fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY),
        flags: wgpu::InstanceFlags::from_build_config().with_env(),
        backend_options: wgpu::BackendOptions::from_env_or_default(),
        memory_budget_thresholds: wgpu::MemoryBudgetThresholds::default(),
        display: None,
    })
}

fn summary(index: usize, a: &wgpu::Adapter) -> AdapterSummary {
    let info = a.get_info();
    let l = a.limits();
    let driver = [info.driver.as_str(), info.driver_info.as_str()].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>().join(" ");
    AdapterSummary {
        index,
        name: info.name,
        backend: info.backend,
        device_type: info.device_type,
        driver,
        max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
        max_buffer_size: l.max_buffer_size,
        max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
        max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
    }
}

/// Adapters that can run compute shaders, in wgpu's order.
fn compute_adapters(inst: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    let all = pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()));
    all.into_iter().filter(|a| a.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)).collect()
}

/// Every adapter this machine offers for compute, with its name, API, type and limits (for
/// `esoflow info`). Empty where there is none.
#[must_use]
pub fn adapters() -> Vec<AdapterSummary> {
    compute_adapters(&instance()).iter().enumerate().map(|(i, a)| summary(i, a)).collect()
}

/// The kernels of one velocity set on one device (the step kernel is made per collision
/// operator and body force: see [`Gpu::step_kernel`]).
pub(crate) struct Kernels {
    pub layout: wgpu::BindGroupLayout,
    module: wgpu::ShaderModule,
    pipeline_layout: wgpu::PipelineLayout,
    /// The field planes and the statistics' first pass.
    pub fields: wgpu::ComputePipeline,
    pub stats_final: wgpu::ComputePipeline,
    pub forces: wgpu::ComputePipeline,
}

/// An open device: what solvers share (kernels are compiled once per velocity set).
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    kernels: Mutex<HashMap<(Lattice, Precision), Arc<Kernels>>>,
    steps: Mutex<HashMap<(Lattice, Precision, Collision), Arc<wgpu::ComputePipeline>>>,
    /// Whether the device has half floats in shaders and storage (`shader-f16`): FP16S storage.
    f16: bool,
    /// The first error the device reported outside an error scope (a step's validation or
    /// memory error), taken by the next call that checks.
    error: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("adapter", &self.info.name).field("backend", &self.info.backend).finish_non_exhaustive()
    }
}

impl Gpu {
    /// Open a device on the chosen adapter, with the adapter's own limits (its largest storage
    /// bindings and buffers, all its storage buffers per stage), not wgpu's defaults.
    ///
    /// # Errors
    /// No adapter (the message says how to get a software one), an index or name that matches
    /// none, or a device that does not open.
    pub fn open(choice: &AdapterChoice) -> Result<Arc<Gpu>, SolverError> {
        let inst = instance();
        let adapter = match choice {
            AdapterChoice::Auto => pollster::block_on(inst.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            }))
            .map_err(|e| {
                SolverError::Backend(format!(
                    "no GPU adapter for the wgpu backend ({e}); on Debian/Ubuntu `apt-get install mesa-vulkan-drivers libvulkan1` gives a software one"
                ))
            })?,
            AdapterChoice::Index(i) => {
                let mut all = compute_adapters(&inst);
                let n = all.len();
                if *i >= n {
                    return Err(SolverError::Backend(format!("adapter {i} does not exist: this machine has {n} compute adapter(s)")));
                }
                all.swap_remove(*i)
            }
            AdapterChoice::Name(name) => {
                let want = name.to_lowercase();
                let all = compute_adapters(&inst);
                let names: Vec<String> = all.iter().map(|a| a.get_info().name).collect();
                all.into_iter().find(|a| a.get_info().name.to_lowercase().contains(&want)).ok_or_else(|| {
                    SolverError::Backend(format!("no adapter's name contains \"{name}\"; the adapters are: {}", names.join(", ")))
                })?
            }
        };
        Gpu::on_adapter(&adapter)
    }

    /// Open a device on an adapter.
    ///
    /// # Errors
    /// An adapter without compute shaders, or a device that does not open.
    pub fn on_adapter(adapter: &wgpu::Adapter) -> Result<Arc<Gpu>, SolverError> {
        let info = adapter.get_info();
        if !adapter.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) {
            return Err(SolverError::Backend(format!("the adapter {} ({:?}) has no compute shaders", info.name, info.backend)));
        }
        // Half floats where the adapter has them: FP16S storage needs them.
        let features = adapter.features() & wgpu::Features::SHADER_F16;
        let desc = wgpu::DeviceDescriptor {
            label: Some("esoflow wgpu solver"),
            required_features: features,
            required_limits: adapter.limits(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| SolverError::Backend(format!("cannot open the device {} ({:?}): {e}", info.name, info.backend)))?;
        let error = Arc::new(Mutex::new(None::<String>));
        let sink = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            tracing::error!("wgpu: {e}");
            if let Ok(mut g) = sink.lock() {
                g.get_or_insert_with(|| e.to_string());
            }
        }));
        Ok(Arc::new(Gpu {
            device,
            queue,
            info,
            kernels: Mutex::new(HashMap::new()),
            steps: Mutex::new(HashMap::new()),
            f16: features.contains(wgpu::Features::SHADER_F16),
            error,
        }))
    }

    /// The adapter's name and API.
    #[must_use]
    pub fn describe(&self) -> String {
        format!("{} ({:?}, {:?})", self.info.name, self.info.backend, self.info.device_type)
    }

    /// The adapter's information.
    #[must_use]
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// Whether the device stores and computes half floats (`shader-f16`), which FP16S storage
    /// needs.
    #[must_use]
    pub fn has_f16(&self) -> bool {
        self.f16
    }

    /// The device's limits (the adapter's, as requested).
    #[must_use]
    pub fn limits(&self) -> wgpu::Limits {
        self.device.limits()
    }

    /// An error the device reported since the last check, as a solver error.
    pub(crate) fn take_error(&self) -> Result<(), SolverError> {
        let e = self.error.lock().ok().and_then(|mut g| g.take());
        e.map_or(Ok(()), |e| Err(SolverError::Backend(format!("wgpu device error: {e}"))))
    }

    /// Run `f` inside validation and out-of-memory error scopes and turn what they catch into a
    /// solver error naming `what`.
    pub(crate) fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T, SolverError> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f();
        let v = pollster::block_on(val.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = v.or(o) {
            return Err(SolverError::Backend(format!("{what}: {e}")));
        }
        Ok(out)
    }

    /// The kernels of a velocity set and DDF precision, compiled on first use.
    pub(crate) fn kernels(&self, lattice: Lattice, precision: Precision) -> Result<Arc<Kernels>, SolverError> {
        let mut cache = self.kernels.lock().map_err(|_| SolverError::Backend("kernel cache lock poisoned".into()))?;
        if let Some(k) = cache.get(&(lattice, precision)) {
            return Ok(k.clone());
        }
        let k = Arc::new(self.compile(lattice, precision)?);
        cache.insert((lattice, precision), k.clone());
        Ok(k)
    }

    fn compile(&self, lattice: Lattice, precision: Precision) -> Result<Kernels, SolverError> {
        let src = wgsl::source(lattice, precision);
        let what = format!("compiling the WGSL kernels (shaders/lbm.wgsl) for {lattice} {precision} on {}", self.describe());
        self.scoped(&what, || {
            let d = &self.device;
            let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("lbm.wgsl"),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
            let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            };
            let uniform = wgpu::BindGroupLayoutEntry {
                binding: 2,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Uniform, has_dynamic_offset: false, min_binding_size: None },
                count: None,
            };
            let layout = d.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("lbm bindings"),
                entries: &[
                    storage(0, false),
                    storage(1, true),
                    uniform,
                    storage(3, false),
                    storage(4, true),
                    storage(5, false),
                    storage(6, false),
                ],
            });
            let pl = d.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some("lbm"),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
            let pipe = |entry: &str| pipeline(d, &pl, &module, entry, &[]);
            Kernels {
                fields: pipe("fields"),
                stats_final: pipe("stats_final"),
                forces: pipe("forces"),
                layout,
                module,
                pipeline_layout: pl,
            }
        })
    }

    /// The step kernel of a velocity set and precision for one collision operator, made on
    /// first use.
    pub(crate) fn step_kernel(
        &self,
        lattice: Lattice,
        precision: Precision,
        collision: Collision,
    ) -> Result<Arc<wgpu::ComputePipeline>, SolverError> {
        let k = self.kernels(lattice, precision)?;
        let mut cache = self.steps.lock().map_err(|_| SolverError::Backend("kernel cache lock poisoned".into()))?;
        if let Some(p) = cache.get(&(lattice, precision, collision)) {
            return Ok(p.clone());
        }
        let what = format!("compiling the WGSL step kernel for {lattice} {precision} {collision} on {}", self.describe());
        let constants = [("COLLISION", f64::from(wgsl::collision_code(collision)))];
        let p = Arc::new(self.scoped(&what, || pipeline(&self.device, &k.pipeline_layout, &k.module, "step", &constants))?);
        cache.insert((lattice, precision, collision), p.clone());
        Ok(p)
    }
}

fn pipeline(
    d: &wgpu::Device,
    layout: &wgpu::PipelineLayout,
    module: &wgpu::ShaderModule,
    entry: &str,
    constants: &[(&str, f64)],
) -> wgpu::ComputePipeline {
    d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: Some(layout),
        module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions { constants, zero_initialize_workgroup_memory: false },
        cache: None,
    })
}

// Solvers move between threads (the viewer steps on a worker): the device must allow it.
const _: fn() = || {
    fn is<T: Send + Sync>() {}
    is::<Gpu>();
};
