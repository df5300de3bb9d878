//! Zero-copy interop, Vulkan side: wgpu buffers whose memory another API (CUDA) can import.
//!
//! wgpu-hal 30 cannot export its own allocations, so [`SharedBuffer`] creates the `VkBuffer` and
//! its `VkDeviceMemory` through ash (exportable as an `OPAQUE_FD`) and hands both to wgpu with
//! `wgpu::hal::vulkan::Buffer::from_raw_managed` + `Device::create_buffer_from_hal`.
//!
//! # Ownership
//! - `from_raw_managed` gives wgpu-hal ownership of the buffer *and* its memory: when the last
//!   reference to the `wgpu::Buffer` goes (and the GPU is done with it), wgpu-hal's
//!   `destroy_buffer` calls `vkDestroyBuffer` and `vkFreeMemory` (wgpu-hal 30.0.1,
//!   `vulkan/device.rs`, `BufferOwnership::Managed` / `BufferMemoryBacking::VulkanMemory`). This
//!   module frees nothing itself once the buffer is handed over; on an error before that it
//!   destroys what it made.
//! - The exported fd is a second reference to the memory. [`SharedBuffer::take_fd`] gives it away
//!   (`cuImportExternalMemory` takes ownership of it on success); an fd never taken is closed when
//!   the [`SharedBuffer`] drops.
//!
//! # What the CUDA side must know
//! - Import exactly [`SharedBuffer::alloc_size`] bytes (the `VkDeviceMemory` size, which can be
//!   larger than the requested [`SharedBuffer::size`]), handle type `OPAQUE_FD`, and pass
//!   `CUDA_EXTERNAL_MEMORY_DEDICATED` when [`SharedBuffer::dedicated`] is true. The buffer starts
//!   at offset 0 of the allocation.
//! - Check [`device_uuid`] against `cuDeviceGetUuid` first: both APIs must be on the same GPU.
//! - Drop the CUDA mapping and the external-memory object before the [`SharedBuffer`] (and before
//!   the last clone of its `wgpu::Buffer`).
//! - Sizes are non-zero multiples of 4 bytes (wgpu's copy alignment), at most the device's
//!   `max_buffer_size`.
//!
//! # Synchronisation
//! Without semaphores: `device.poll(Wait)` before CUDA writes, `stream.synchronize()` before the
//! wgpu submit that reads. Without a CPU stall: [`open_device_with_semaphore_export`] opens the
//! device with `VK_KHR_external_semaphore_fd`, [`SharedTimeline`] is an exportable timeline
//! semaphore, and [`SharedTimeline::wait_signal_on_next_submit`] makes the next
//! `queue.submit` wait on one value and signal another (wgpu-hal's
//! `Queue::add_wait_semaphore` / `add_signal_semaphore`).
//!
//! # Where it was tried
//! - lavapipe (Mesa 22.3.6): buffers export (non-dedicated); no `VK_KHR_external_semaphore_fd`,
//!   so [`open_device_with_semaphore_export`] returns a plain device there.
//! - NVIDIA H100, driver 580.159.04: buffers export; 4 KiB non-dedicated, 64 MiB **dedicated**
//!   (so the CUDA import needs `CUDA_EXTERNAL_MEMORY_DEDICATED`: cudarc's
//!   `import_external_memory` passes flags 0); timeline semaphores export and gate wgpu submits.

// Some of it serves only the tests (app/tests/interop.rs includes this file) and diagnostics.
#![allow(dead_code, reason = "parts of the interop API are used by its tests only")]

use ash::vk;
use std::ffi::CStr;
use std::os::fd::{FromRawFd as _, OwnedFd};
use wgpu::hal::api::Vulkan;

/// Why interop cannot work, or a Vulkan call that failed.
#[derive(Debug, thiserror::Error)]
pub enum InteropError {
    /// The device is not a Vulkan one.
    #[error("interop needs the Vulkan backend; this device runs on {backend}")]
    NotVulkan {
        /// The device's backend.
        backend: String,
    },
    /// A device extension interop needs is not enabled.
    #[error("interop needs the Vulkan device extension {extension}, which is not enabled on {adapter}")]
    MissingExtension {
        /// Extension name.
        extension: String,
        /// Adapter name.
        adapter: String,
    },
    /// The Vulkan version is too old.
    #[error("interop needs Vulkan {needed}; {adapter} (with this instance) offers {have}")]
    VulkanVersion {
        /// Version needed, as "1.1".
        needed: String,
        /// Version there.
        have: String,
        /// Adapter name.
        adapter: String,
    },
    /// The driver cannot export this kind of object as an opaque fd.
    #[error("{adapter} cannot export {what} as an opaque fd (external features: {features:?})")]
    NotExportable {
        /// What (buffer memory, timeline semaphore).
        what: &'static str,
        /// The driver's external memory/semaphore feature flags.
        features: String,
        /// Adapter name.
        adapter: String,
    },
    /// No memory type fits.
    #[error("no device-local memory type can hold an exportable buffer of {size} bytes (allowed memory types {type_bits:#b})")]
    NoMemoryType {
        /// Bytes asked for.
        size: u64,
        /// The buffer's `memoryTypeBits`.
        type_bits: u32,
    },
    /// A size wgpu cannot use.
    #[error("shared buffer size {size} must be a non-zero multiple of 4 bytes and at most the device's max_buffer_size {max}")]
    BadSize {
        /// Bytes asked for.
        size: u64,
        /// The device's limit.
        max: u64,
    },
    /// The timeline semaphore feature is off on this device.
    #[error("interop needs timeline semaphores, which are not enabled on {adapter}")]
    NoTimelineSemaphores {
        /// Adapter name.
        adapter: String,
    },
    /// A Vulkan call failed.
    #[error("{call} failed: {result}")]
    Vulkan {
        /// The Vulkan function.
        call: &'static str,
        /// Its result code.
        result: vk::Result,
    },
    /// wgpu could not open the device.
    #[error("cannot open the wgpu device: {0}")]
    RequestDevice(String),
}

fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> InteropError {
    move |result| InteropError::Vulkan { call, result }
}

fn not_vulkan(backend: wgpu::Backend) -> InteropError {
    InteropError::NotVulkan { backend: backend.to_string() }
}

fn version_string(v: u32) -> String {
    format!("{}.{}", vk::api_version_major(v), vk::api_version_minor(v))
}

/// The Vulkan version usable with both the instance and the physical device.
fn effective_version(instance: &ash::Instance, instance_version: u32, phys: vk::PhysicalDevice) -> u32 {
    // SAFETY: `phys` is the live physical device of a wgpu-hal device or adapter, enumerated from
    // `instance`; the call only fills a plain struct.
    let props = unsafe { instance.get_physical_device_properties(phys) };
    let v = props.api_version.min(instance_version);
    vk::make_api_version(0, vk::api_version_major(v), vk::api_version_minor(v), 0)
}

fn need_version(version: u32, needed: u32, adapter: &str) -> Result<(), InteropError> {
    if version >= needed {
        Ok(())
    } else {
        Err(InteropError::VulkanVersion { needed: version_string(needed), have: version_string(version), adapter: adapter.to_owned() })
    }
}

fn has_extension(enabled: &[&'static CStr], name: &CStr) -> bool {
    enabled.contains(&name)
}

fn missing(name: &CStr, adapter: &str) -> InteropError {
    InteropError::MissingExtension { extension: name.to_string_lossy().into_owned(), adapter: adapter.to_owned() }
}

/// The Vulkan usage flags of a shared buffer: every wgpu usage [`SharedBuffer`] declares.
const BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
);
const HANDLE: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;

/// Whether [`SharedBuffer`] can work on `device`: the Vulkan backend, Vulkan 1.1,
/// `VK_KHR_external_memory_fd` enabled and buffer memory exportable as an opaque fd.
///
/// # Errors
/// The first of these that fails.
pub fn interop_support(device: &wgpu::Device) -> Result<(), InteropError> {
    let info = device.adapter_info();
    // SAFETY: the guard is only read from and dropped at the end of this function; nothing is
    // destroyed through it.
    let hal = unsafe { device.as_hal::<Vulkan>() }.ok_or_else(|| not_vulkan(info.backend))?;
    check_buffer_support(&hal, &info.name).map(|_| ())
}

/// The checks of [`interop_support`]; returns whether the driver wants dedicated allocations for
/// exported buffers.
fn check_buffer_support(hal: &wgpu::hal::vulkan::Device, adapter: &str) -> Result<bool, InteropError> {
    let shared = hal.shared_instance();
    let instance = shared.raw_instance();
    let phys = hal.raw_physical_device();
    need_version(effective_version(instance, shared.instance_api_version(), phys), vk::API_VERSION_1_1, adapter)?;
    if !has_extension(hal.enabled_device_extensions(), ash::khr::external_memory_fd::NAME) {
        return Err(missing(ash::khr::external_memory_fd::NAME, adapter));
    }
    let info = vk::PhysicalDeviceExternalBufferInfo::default().usage(BUFFER_USAGE).handle_type(HANDLE);
    let mut props = vk::ExternalBufferProperties::default();
    // SAFETY: Vulkan 1.1 is checked above, so the core 1.1 entry point is loaded; the structs
    // are valid and live for the call.
    unsafe { instance.get_physical_device_external_buffer_properties(phys, &info, &mut props) };
    let features = props.external_memory_properties.external_memory_features;
    if !features.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE) {
        return Err(InteropError::NotExportable { what: "buffer memory", features: format!("{features:?}"), adapter: adapter.to_owned() });
    }
    Ok(features.contains(vk::ExternalMemoryFeatureFlags::DEDICATED_ONLY))
}

/// The physical device's `deviceUUID` (`VkPhysicalDeviceIDProperties`), to compare with
/// `cuDeviceGetUuid`. `None` off Vulkan or below Vulkan 1.1.
#[must_use]
pub fn device_uuid(device: &wgpu::Device) -> Option<[u8; 16]> {
    // SAFETY: the guard is only read from; nothing is destroyed through it.
    let hal = unsafe { device.as_hal::<Vulkan>() }?;
    let shared = hal.shared_instance();
    let instance = shared.raw_instance();
    let phys = hal.raw_physical_device();
    if effective_version(instance, shared.instance_api_version(), phys) < vk::API_VERSION_1_1 {
        return None;
    }
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
    // SAFETY: Vulkan 1.1 is checked above (core vkGetPhysicalDeviceProperties2); the chain lives
    // for the call.
    unsafe { instance.get_physical_device_properties2(phys, &mut props) };
    Some(id.device_uuid)
}

/// A buffer and memory not yet handed to wgpu: destroyed on drop (error paths).
struct Pending<'a> {
    device: &'a ash::Device,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        // SAFETY: both handles were created on `device` by `SharedBuffer::new`, are not in use by
        // the GPU (never submitted) and are not referenced anywhere else; null handles are
        // ignored by Vulkan.
        unsafe {
            self.device.destroy_buffer(self.buffer, None);
            self.device.free_memory(self.memory, None);
        }
    }
}

/// A wgpu buffer (COPY_SRC | COPY_DST | STORAGE) whose memory is exported as an opaque fd for
/// CUDA (`cuImportExternalMemory`). See the module docs for ownership and drop order.
#[derive(Debug)]
pub struct SharedBuffer {
    buffer: wgpu::Buffer,
    size: u64,
    alloc_size: u64,
    dedicated: bool,
    fd: Option<OwnedFd>,
}

impl SharedBuffer {
    /// Create a shared buffer of `size` bytes on `device`.
    ///
    /// # Errors
    /// Not Vulkan, missing extension, not exportable, a bad size, no memory type, or a failed
    /// Vulkan call (named).
    pub fn new(device: &wgpu::Device, size: u64, label: &str) -> Result<SharedBuffer, InteropError> {
        let info = device.adapter_info();
        let max = device.limits().max_buffer_size;
        if size == 0 || size % 4 != 0 || size > max {
            return Err(InteropError::BadSize { size, max });
        }
        let (hal_buffer, alloc_size, dedicated, fd) = {
            // SAFETY: the guard is dropped at the end of this block, before wgpu sees the buffer;
            // the device itself is not destroyed through it.
            let hal = unsafe { device.as_hal::<Vulkan>() }.ok_or_else(|| not_vulkan(info.backend))?;
            let dedicated_only = check_buffer_support(&hal, &info.name)?;
            let shared = hal.shared_instance();
            let instance = shared.raw_instance();
            let raw = hal.raw_device();
            let phys = hal.raw_physical_device();

            let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(HANDLE);
            let create = vk::BufferCreateInfo::default()
                .size(size)
                .usage(BUFFER_USAGE)
                .sharing_mode(vk::SharingMode::EXCLUSIVE)
                .push_next(&mut external);
            let mut pending = Pending { device: raw, buffer: vk::Buffer::null(), memory: vk::DeviceMemory::null() };
            // SAFETY: valid create info (non-zero size, supported usage, external handle type
            // checked exportable); the handle is owned by `pending` until handed to wgpu.
            pending.buffer = unsafe { raw.create_buffer(&create, None) }.map_err(vk_err("vkCreateBuffer"))?;

            let mut ded_req = vk::MemoryDedicatedRequirements::default();
            let mut req2 = vk::MemoryRequirements2::default().push_next(&mut ded_req);
            let req_info = vk::BufferMemoryRequirementsInfo2::default().buffer(pending.buffer);
            // SAFETY: Vulkan 1.1 (core vkGetBufferMemoryRequirements2) is checked by
            // `check_buffer_support`; the buffer is live.
            unsafe { raw.get_buffer_memory_requirements2(&req_info, &mut req2) };
            let req = req2.memory_requirements;
            let dedicated =
                dedicated_only || ded_req.prefers_dedicated_allocation == vk::TRUE || ded_req.requires_dedicated_allocation == vk::TRUE;

            // SAFETY: `phys` is the device's physical device; fills a plain struct.
            let mem_props = unsafe { instance.get_physical_device_memory_properties(phys) };
            let type_index = pick_memory_type(&mem_props, req.memory_type_bits)
                .ok_or(InteropError::NoMemoryType { size: req.size, type_bits: req.memory_type_bits })?;

            let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(HANDLE);
            let mut ded_alloc = vk::MemoryDedicatedAllocateInfo::default().buffer(pending.buffer);
            let mut alloc =
                vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(type_index).push_next(&mut export);
            if dedicated {
                alloc = alloc.push_next(&mut ded_alloc);
            }
            // SAFETY: valid allocate info (size and type from the buffer's requirements, export
            // and dedicated structs live for the call); `pending` frees it on error.
            pending.memory = unsafe { raw.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
            // SAFETY: buffer and memory are live, unbound; offset 0 satisfies any alignment and
            // the allocation has the required size.
            unsafe { raw.bind_buffer_memory(pending.buffer, pending.memory, 0) }.map_err(vk_err("vkBindBufferMemory"))?;

            let fd_fn = ash::khr::external_memory_fd::Device::new(instance, raw);
            let get = vk::MemoryGetFdInfoKHR::default().memory(pending.memory).handle_type(HANDLE);
            // SAFETY: the extension is enabled on this device (checked), the memory was
            // allocated exportable as OPAQUE_FD.
            let fd = unsafe { fd_fn.get_memory_fd(&get) }.map_err(vk_err("vkGetMemoryFdKHR"))?;
            // SAFETY: on success vkGetMemoryFdKHR returns a new fd that the caller owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };

            let (buffer, memory) = (pending.buffer, pending.memory);
            std::mem::forget(pending);
            // SAFETY: buffer and memory were made on this device, the buffer is bound at offset
            // 0 to `memory` of `req.size` >= `size` bytes; wgpu-hal takes ownership of both (it
            // destroys the buffer and frees the memory when the wgpu buffer is destroyed) and
            // nothing else frees them. wgpu never maps it (no MAP_* usage).
            let hal_buffer = unsafe { wgpu::hal::vulkan::Buffer::from_raw_managed(buffer, memory, 0, req.size) };
            (hal_buffer, req.size, dedicated, fd)
        };
        let desc = wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        };
        // SAFETY: `hal_buffer` was created from this device's hal device, with Vulkan usages
        // covering `desc.usage`, non-zero size, bound memory (initialised as far as wgpu is
        // concerned: it tracks no init state for hal buffers, and contents are unspecified).
        let buffer = unsafe { device.create_buffer_from_hal::<Vulkan>(hal_buffer, &desc) };
        Ok(SharedBuffer { buffer, size, alloc_size, dedicated, fd: Some(fd) })
    }

    /// The wgpu buffer (COPY_SRC | COPY_DST | STORAGE).
    #[must_use]
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The size asked for (the wgpu buffer's size).
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The `VkDeviceMemory` allocation's size: what CUDA must import.
    #[must_use]
    pub fn alloc_size(&self) -> u64 {
        self.alloc_size
    }

    /// Whether the memory is a dedicated allocation (CUDA: `CUDA_EXTERNAL_MEMORY_DEDICATED`).
    #[must_use]
    pub fn dedicated(&self) -> bool {
        self.dedicated
    }

    /// The exported opaque fd, once: the caller owns it (`cuImportExternalMemory` consumes it on
    /// success). `None` after the first call.
    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fd.take()
    }
}

/// The memory type for an exported buffer: among `type_bits`, a device-local type, preferring one
/// that is not host-visible (the large VRAM heap, not the BAR window).
fn pick_memory_type(props: &vk::PhysicalDeviceMemoryProperties, type_bits: u32) -> Option<u32> {
    let types = &props.memory_types[..props.memory_type_count as usize];
    let bad = vk::MemoryPropertyFlags::LAZILY_ALLOCATED | vk::MemoryPropertyFlags::PROTECTED;
    let ok = |i: usize, t: &vk::MemoryType| {
        type_bits & (1 << i) != 0 && t.property_flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL) && !t.property_flags.intersects(bad)
    };
    let pick = |host_visible_ok: bool| {
        types
            .iter()
            .enumerate()
            .find(|&(i, t)| ok(i, t) && (host_visible_ok || !t.property_flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE)))
            .map(|(i, _)| i as u32)
    };
    pick(false).or_else(|| pick(true))
}

/// Open a device on `adapter` as `adapter.request_device(desc)` would, adding
/// `VK_KHR_external_semaphore_fd` when the adapter is a Vulkan one that supports it and timeline
/// semaphores (Vulkan 1.2). Returns the device, its queue and whether semaphore export is on
/// (if not, the device is a plain one and [`SharedTimeline::new`] will refuse it).
///
/// wgpu-hal 30 already enables timeline semaphores (it uses one as its fence) and
/// `VK_KHR_external_memory_fd` where supported; only the semaphore extension is added here,
/// through `hal::vulkan::Adapter::open_with_callback` and `Adapter::create_device_from_hal`.
/// Give the result to eframe as `WgpuSetup::Existing`.
///
/// # Errors
/// Features or limits the adapter lacks, or the device could not be opened.
pub fn open_device_with_semaphore_export(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
) -> Result<(wgpu::Device, wgpu::Queue, bool), InteropError> {
    let plain = || {
        pollster::block_on(adapter.request_device(desc)).map(|(d, q)| (d, q, false)).map_err(|e| InteropError::RequestDevice(e.to_string()))
    };
    let info = adapter.get_info();
    let open = {
        // SAFETY: the guard is only read from and dropped at the end of this block.
        let Some(hal) = (unsafe { adapter.as_hal::<Vulkan>() }) else { return plain() };
        if semaphore_support(&hal, &info.name).is_err() {
            return plain();
        }
        // `create_device_from_hal` skips the checks `request_device` makes: make them here.
        if !adapter.features().contains(desc.required_features) {
            return Err(InteropError::RequestDevice(format!(
                "unsupported features were requested: {:?}",
                desc.required_features - adapter.features()
            )));
        }
        if desc.required_features.intersects(wgpu::Features::all_experimental_mask()) && !desc.experimental_features.is_enabled() {
            return Err(InteropError::RequestDevice("experimental features requested but not enabled".into()));
        }
        if !desc.required_limits.check_limits(&adapter.limits()) {
            return Err(InteropError::RequestDevice("the required limits exceed the adapter's".into()));
        }
        let callback = |args: wgpu::hal::vulkan::CreateDeviceCallbackArgs<'_, '_, '_>| {
            for ext in [ash::khr::external_semaphore::NAME, ash::khr::external_semaphore_fd::NAME] {
                if !args.extensions.contains(&ext) {
                    args.extensions.push(ext);
                }
            }
        };
        // SAFETY: the callback only adds extensions the adapter supports (checked by
        // `semaphore_support`: VK_KHR_external_semaphore is core in the Vulkan 1.2 it requires,
        // and listing it again is allowed); features and limits are checked above.
        unsafe { hal.open_with_callback(desc.required_features, &desc.required_limits, &desc.memory_hints, Some(Box::new(callback))) }
            .map_err(|e| InteropError::RequestDevice(format!("vkCreateDevice with VK_KHR_external_semaphore_fd: {e}")))?
    };
    // SAFETY: `open` was created from this adapter's hal adapter with `desc`'s features and
    // limits (checked against the adapter above).
    let (device, queue) =
        unsafe { adapter.create_device_from_hal::<Vulkan>(open, desc) }.map_err(|e| InteropError::RequestDevice(e.to_string()))?;
    Ok((device, queue, true))
}

/// Whether the adapter can export timeline semaphores as opaque fds: Vulkan 1.2, the
/// `VK_KHR_external_semaphore_fd` extension, the timeline feature, and export support.
pub fn semaphore_support(hal: &wgpu::hal::vulkan::Adapter, adapter: &str) -> Result<(), InteropError> {
    let caps = hal.physical_device_capabilities();
    let shared = hal.shared_instance();
    let instance = shared.raw_instance();
    let phys = hal.raw_physical_device();
    need_version(effective_version(instance, shared.instance_api_version(), phys), vk::API_VERSION_1_2, adapter)?;
    if !caps.supports_extension(ash::khr::external_semaphore_fd::NAME) {
        return Err(missing(ash::khr::external_semaphore_fd::NAME, adapter));
    }
    timeline_export_support(instance, phys, adapter)
}

fn timeline_export_support(instance: &ash::Instance, phys: vk::PhysicalDevice, adapter: &str) -> Result<(), InteropError> {
    let mut timeline = vk::PhysicalDeviceTimelineSemaphoreFeatures::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut timeline);
    // SAFETY: Vulkan 1.2 checked by the callers; the chain lives for the call.
    unsafe { instance.get_physical_device_features2(phys, &mut features) };
    if timeline.timeline_semaphore != vk::TRUE {
        return Err(InteropError::NoTimelineSemaphores { adapter: adapter.to_owned() });
    }
    let mut ty = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
    let info = vk::PhysicalDeviceExternalSemaphoreInfo::default().handle_type(SEM_HANDLE).push_next(&mut ty);
    let mut props = vk::ExternalSemaphoreProperties::default();
    // SAFETY: as above (core 1.1 entry point); the structs live for the call.
    unsafe { instance.get_physical_device_external_semaphore_properties(phys, &info, &mut props) };
    if !props.external_semaphore_features.contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE) {
        return Err(InteropError::NotExportable {
            what: "timeline semaphores",
            features: format!("{:?}", props.external_semaphore_features),
            adapter: adapter.to_owned(),
        });
    }
    Ok(())
}

const SEM_HANDLE: vk::ExternalSemaphoreHandleTypeFlags = vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD;

/// A timeline `VkSemaphore` (initial value 0) exported as an opaque fd for CUDA
/// (`cuImportExternalSemaphore` with `CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD`).
///
/// The protocol of INTEROP.md: CUDA waits 2k and signals 2k+1 around its kernels; wgpu waits
/// 2k+1 and signals 2k+2 on the frame's submit ([`SharedTimeline::wait_signal_on_next_submit`]).
///
/// Drop: destroy the CUDA external semaphore first. Dropping this waits (up to 5 s) for the
/// device's submitted work, takes back waits/signals staged but not yet submitted, then destroys
/// the semaphore (leaking it, with a warning, if the device does not go idle in time).
#[derive(Debug)]
pub struct SharedTimeline {
    device: wgpu::Device,
    semaphore: vk::Semaphore,
    fd: Option<OwnedFd>,
    /// The queue staged on by `wait_signal_on_next_submit` (to unstage on drop).
    staged_on: std::sync::Mutex<Option<wgpu::Queue>>,
}

impl SharedTimeline {
    /// Create an exportable timeline semaphore on `device`, which must come from
    /// [`open_device_with_semaphore_export`] (returning `true`).
    ///
    /// # Errors
    /// Not Vulkan, below Vulkan 1.2, `VK_KHR_external_semaphore_fd` not enabled on this device,
    /// no timeline or export support, or a failed Vulkan call.
    pub fn new(device: &wgpu::Device) -> Result<SharedTimeline, InteropError> {
        let info = device.adapter_info();
        // SAFETY: the guard is dropped at the end of this function; nothing is destroyed through it.
        let hal = unsafe { device.as_hal::<Vulkan>() }.ok_or_else(|| not_vulkan(info.backend))?;
        let shared = hal.shared_instance();
        let instance = shared.raw_instance();
        let phys = hal.raw_physical_device();
        need_version(effective_version(instance, shared.instance_api_version(), phys), vk::API_VERSION_1_2, &info.name)?;
        if !has_extension(hal.enabled_device_extensions(), ash::khr::external_semaphore_fd::NAME) {
            return Err(missing(ash::khr::external_semaphore_fd::NAME, &info.name));
        }
        timeline_export_support(instance, phys, &info.name)?;
        let raw = hal.raw_device();
        let mut ty = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
        let mut export = vk::ExportSemaphoreCreateInfo::default().handle_types(SEM_HANDLE);
        let create = vk::SemaphoreCreateInfo::default().push_next(&mut ty).push_next(&mut export);
        // SAFETY: timeline semaphores are supported (wgpu-hal enables the feature whenever the
        // device has it) and exportable as OPAQUE_FD (both checked); the chain lives for the call.
        let semaphore = unsafe { raw.create_semaphore(&create, None) }.map_err(vk_err("vkCreateSemaphore"))?;
        let fd_fn = ash::khr::external_semaphore_fd::Device::new(instance, raw);
        let get = vk::SemaphoreGetFdInfoKHR::default().semaphore(semaphore).handle_type(SEM_HANDLE);
        // SAFETY: the extension is enabled on this device (checked); the semaphore was created
        // exportable as OPAQUE_FD.
        let fd = match unsafe { fd_fn.get_semaphore_fd(&get) } {
            // SAFETY: on success vkGetSemaphoreFdKHR returns a new fd that the caller owns.
            Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
            Err(e) => {
                // SAFETY: just created, never used.
                unsafe { raw.destroy_semaphore(semaphore, None) };
                return Err(InteropError::Vulkan { call: "vkGetSemaphoreFdKHR", result: e });
            }
        };
        Ok(SharedTimeline { device: device.clone(), semaphore, fd: Some(fd), staged_on: std::sync::Mutex::new(None) })
    }

    /// The exported opaque fd, once (CUDA's import takes ownership of it). `None` afterwards.
    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fd.take()
    }

    /// The raw semaphore (for other Vulkan code; do not destroy it).
    #[must_use]
    pub fn raw(&self) -> vk::Semaphore {
        self.semaphore
    }

    /// Stage, on `queue`'s next submit (`Queue::submit`, including the one eframe/egui-wgpu
    /// makes each frame), a wait for this timeline to reach `wait` (at all pipeline stages) and a
    /// signal of `signal` when that submission completes. `None` skips either.
    ///
    /// They apply to whichever thread submits next on this queue: stage them right before the
    /// submit they belong to. `signal` must be larger than every value signalled before.
    pub fn wait_signal_on_next_submit(&self, queue: &wgpu::Queue, wait: Option<u64>, signal: Option<u64>) {
        // SAFETY: the queue is only used to stage semaphores; the semaphore lives until this
        // `SharedTimeline` drops, which unstages anything not yet submitted and waits for the
        // device before destroying it.
        let Some(hal) = (unsafe { queue.as_hal::<Vulkan>() }) else { return };
        *self.staged_on.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(queue.clone());
        if let Some(v) = wait {
            hal.add_wait_semaphore(self.semaphore, Some(v), vk::PipelineStageFlags::ALL_COMMANDS);
        }
        if let Some(v) = signal {
            hal.add_signal_semaphore(self.semaphore, Some(v));
        }
    }

    fn with_raw<T>(&self, f: impl FnOnce(&ash::Device) -> T) -> T {
        // SAFETY: the guard is only used for this call; the device is not destroyed through it.
        let hal = unsafe { self.device.as_hal::<Vulkan>() }.expect("SharedTimeline is only made on Vulkan devices");
        f(hal.raw_device())
    }

    /// The current value (`vkGetSemaphoreCounterValue`).
    ///
    /// # Errors
    /// The Vulkan call failed (device lost).
    pub fn value(&self) -> Result<u64, InteropError> {
        // SAFETY: a live timeline semaphore of this device (Vulkan 1.2 checked in `new`).
        self.with_raw(|d| unsafe { d.get_semaphore_counter_value(self.semaphore) }).map_err(vk_err("vkGetSemaphoreCounterValue"))
    }

    /// Signal `value` from the host (`vkSignalSemaphore`).
    ///
    /// # Errors
    /// The Vulkan call failed.
    pub fn signal(&self, value: u64) -> Result<(), InteropError> {
        let info = vk::SemaphoreSignalInfo::default().semaphore(self.semaphore).value(value);
        // SAFETY: a live timeline semaphore of this device; the caller keeps values increasing.
        self.with_raw(|d| unsafe { d.signal_semaphore(&info) }).map_err(vk_err("vkSignalSemaphore"))
    }

    /// Wait on the host until the timeline reaches `value`; `false` on timeout.
    ///
    /// # Errors
    /// The Vulkan call failed.
    pub fn wait(&self, value: u64, timeout: std::time::Duration) -> Result<bool, InteropError> {
        let sems = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default().semaphores(&sems).values(&values);
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: a live timeline semaphore of this device; arrays live for the call.
        match self.with_raw(|d| unsafe { d.wait_semaphores(&info, ns) }) {
            Ok(()) => Ok(true),
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(e) => Err(InteropError::Vulkan { call: "vkWaitSemaphores", result: e }),
        }
    }
}

impl Drop for SharedTimeline {
    fn drop(&mut self) {
        if let Some(queue) = self.staged_on.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            // SAFETY: only unstages this semaphore from the queue's pending lists.
            if let Some(hal) = unsafe { queue.as_hal::<Vulkan>() } {
                while hal.remove_wait_semaphore(self.semaphore) {}
                while hal.remove_signal_semaphore(self.semaphore) {}
            }
        }
        let idle = self.device.poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(std::time::Duration::from_secs(5)) });
        if let Err(e) = idle {
            tracing::warn!("shared timeline semaphore leaked: the device did not go idle ({e})");
            return;
        }
        // SAFETY: all submitted work is done (waited above) and nothing staged remains, so no
        // pending operation uses the semaphore; it was created on this device.
        self.with_raw(|d| unsafe { d.destroy_semaphore(self.semaphore, None) });
    }
}
