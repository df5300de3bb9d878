//! Vulkan interop (app/src/viewer/interop.rs): buffers and timeline semaphores exported for
//! CUDA. Each test needs something an adapter may lack: a Vulkan adapter at all, memory export
//! (`VK_KHR_external_memory_fd`), semaphore export (`VK_KHR_external_semaphore_fd`), or a GL
//! adapter for the test of the refusal. Where it is missing the test is reported as ignored
//! with the reason, never as passed; `ESOFLOW_REQUIRE_ADAPTER=1` makes a missing Vulkan
//! adapter a failure (CI, lavapipe), and `ESOFLOW_REQUIRE_INTEROP=1` a missing export (GPU
//! hosts).

#[allow(dead_code, clippy::all)]
#[path = "../src/viewer/interop.rs"]
mod interop;

use interop::{device_uuid, interop_support, open_device_with_semaphore_export, InteropError, SharedBuffer, SharedTimeline};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::os::fd::AsRawFd as _;
use wgpu::hal::api::Vulkan;

/// A Vulkan device opened as the viewer opens it (with semaphore export where the adapter has
/// it), and whether semaphores export.
struct Vk {
    device: wgpu::Device,
    queue: wgpu::Queue,
    name: String,
    semaphores: bool,
}

fn vulkan_instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        flags: wgpu::InstanceFlags::from_build_config().with_env(),
        backend_options: wgpu::BackendOptions::from_env_or_default(),
        memory_budget_thresholds: wgpu::MemoryBudgetThresholds::default(),
        display: None,
    })
}

fn vulkan_adapter() -> Result<wgpu::Adapter, String> {
    let opts = wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() };
    pollster::block_on(vulkan_instance().request_adapter(&opts)).map_err(|e| format!("no Vulkan adapter ({e})"))
}

fn vulkan() -> Result<Vk, String> {
    let adapter = vulkan_adapter()?;
    let name = adapter.get_info().name;
    let desc = wgpu::DeviceDescriptor {
        label: Some("interop"),
        required_limits: wgpu::Limits::downlevel_defaults().using_resolution(adapter.limits()),
        ..Default::default()
    };
    let (device, queue, semaphores) = open_device_with_semaphore_export(&adapter, &desc).map_err(|e| e.to_string())?;
    Ok(Vk { device, queue, name, semaphores })
}

/// What a test needs.
#[derive(Clone, Copy, PartialEq)]
enum Need {
    Vulkan,
    MemoryExport,
    SemaphoreExport,
    Gl,
}

/// Why `need` is missing here (`None` where it is present), and the variable that makes the
/// miss a failure.
fn missing(need: Need) -> (Option<String>, &'static str) {
    let vk = vulkan();
    let why = match (need, &vk) {
        (Need::Gl, _) => gl_device().err(),
        (_, Err(e)) => Some(e.clone()),
        (Need::Vulkan, Ok(_)) => None,
        (Need::MemoryExport, Ok(v)) => interop_support(&v.device).err().map(|e| format!("{}: {e}", v.name)),
        (Need::SemaphoreExport, Ok(v)) if !v.semaphores => {
            let adapter = vulkan_adapter().ok();
            // SAFETY: read-only use of the guard.
            let why = adapter.and_then(|a| unsafe { a.as_hal::<Vulkan>() }.map(|h| interop::semaphore_support(&h, &v.name)));
            Some(format!("{} cannot export timeline semaphores as fds: {why:?}", v.name))
        }
        (Need::SemaphoreExport, Ok(_)) => None,
    };
    let env = match need {
        Need::Vulkan | Need::Gl => "ESOFLOW_REQUIRE_ADAPTER",
        Need::MemoryExport | Need::SemaphoreExport => "ESOFLOW_REQUIRE_INTEROP",
    };
    (why, env)
}

fn gl_device() -> Result<(wgpu::Device, wgpu::Queue), String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::GL,
        flags: wgpu::InstanceFlags::empty(),
        backend_options: wgpu::BackendOptions::default(),
        memory_budget_thresholds: wgpu::MemoryBudgetThresholds::default(),
        display: None,
    });
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
        .map_err(|e| format!("no GL adapter for the test of a non-Vulkan device ({e})"))?;
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: wgpu::Limits::downlevel_webgl2_defaults().using_resolution(adapter.limits()),
        ..Default::default()
    }))
    .map_err(|e| format!("cannot open the GL adapter ({e})"))
}

fn read_back(device: &wgpu::Device, queue: &wgpu::Queue, src: &wgpu::Buffer, size: u64) -> Vec<u8> {
    let dst = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
    enc.copy_buffer_to_buffer(src, 0, &dst, 0, size);
    queue.submit([enc.finish()]);
    let slice = dst.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    let v = slice.get_mapped_range().expect("mapped range").to_vec();
    dst.unmap();
    v
}

fn round_trip(size: u64) {
    let vk = vulkan().expect("Vulkan device");
    let mut sb = SharedBuffer::new(&vk.device, size, "shared").expect("shared buffer");
    eprintln!("{}: shared buffer of {} bytes, allocation {} bytes, dedicated {}", vk.name, sb.size(), sb.alloc_size(), sb.dedicated());
    assert_eq!(sb.size(), size);
    assert_eq!(sb.buffer().size(), size);
    assert!(sb.alloc_size() >= size);
    let pattern: Vec<u8> = (0..size as usize).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8 ^ (i >> 12) as u8).collect();
    vk.queue.write_buffer(sb.buffer(), 0, &pattern);
    let back = read_back(&vk.device, &vk.queue, sb.buffer(), size);
    assert!(back == pattern, "read back differs from the pattern");
    let fd = sb.take_fd().expect("fd");
    // SAFETY: F_GETFD on an fd we own reads its flags and changes nothing.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    assert!(flags >= 0, "fcntl(F_GETFD) on the exported fd failed");
    assert!(sb.take_fd().is_none());
    drop(fd);
    drop(sb);
    vk.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
}

fn shared_buffer_4k() {
    round_trip(4096);
}

fn shared_buffer_64m() {
    round_trip(64 << 20);
}

fn drop_without_taking_the_fd() {
    let vk = vulkan().expect("Vulkan device");
    // The fd is closed by OwnedFd's drop (not checked by number: parallel tests reuse fds).
    for _ in 0..4 {
        drop(SharedBuffer::new(&vk.device, 1 << 20, "shared").expect("shared buffer"));
    }
    vk.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
}

fn bad_sizes() {
    let vk = vulkan().expect("Vulkan device");
    for size in [0, 6] {
        let e = SharedBuffer::new(&vk.device, size, "bad").expect_err("bad size");
        assert!(matches!(e, InteropError::BadSize { .. }), "{e}");
    }
}

fn device_uuid_is_read() {
    let vk = vulkan().expect("Vulkan device");
    let uuid = device_uuid(&vk.device);
    eprintln!("{}: deviceUUID {uuid:02x?}", vk.name);
    assert!(uuid.is_some());
}

fn needs_vulkan() {
    let (device, _queue) = gl_device().expect("GL device");
    let e = SharedBuffer::new(&device, 256, "gl").expect_err("GL");
    assert!(e.to_string().starts_with("interop needs the Vulkan backend; this device runs on gl"), "{e}");
    assert!(interop_support(&device).is_err());
    assert!(device_uuid(&device).is_none());
}

fn timeline_semaphore() {
    let vk = vulkan().expect("Vulkan device");
    let (device, queue, name) = (&vk.device, &vk.queue, &vk.name);
    let mut tl = SharedTimeline::new(device).expect("timeline");
    let fd = tl.take_fd().expect("fd");
    // SAFETY: F_GETFD on an fd we own reads its flags and changes nothing.
    assert!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) } >= 0);
    assert!(tl.take_fd().is_none());
    assert_eq!(tl.value().expect("value"), 0);
    // A submit that waits for 1 (not yet signalled) and signals 2, with a copy in it.
    let size = 1024u64;
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let src = device.create_buffer(&wgpu::BufferDescriptor { label: Some("src"), size, usage, mapped_at_creation: false });
    // The copy's target: a shared buffer where this device can make one.
    let sb = SharedBuffer::new(device, size, "shared").ok();
    let plain = device.create_buffer(&wgpu::BufferDescriptor { label: Some("dst"), size, usage, mapped_at_creation: false });
    let dst = sb.as_ref().map_or(&plain, SharedBuffer::buffer);
    let pattern: Vec<u8> = (0..size as u32).map(|i| (i * 7 + 3) as u8).collect();
    queue.write_buffer(&src, 0, &pattern);
    let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("timeline") });
    enc.copy_buffer_to_buffer(&src, 0, dst, 0, size);
    tl.wait_signal_on_next_submit(queue, Some(1), Some(2));
    queue.submit([enc.finish()]);
    assert!(!tl.wait(2, std::time::Duration::from_millis(200)).expect("wait"), "the submit ran before its wait was signalled");
    assert_eq!(tl.value().expect("value"), 0);
    tl.signal(1).expect("host signal");
    assert!(tl.wait(2, std::time::Duration::from_secs(10)).expect("wait"), "the submit did not signal 2");
    assert_eq!(tl.value().expect("value"), 2);
    // The next submit without staging leaves the timeline alone.
    queue.submit([]);
    device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    assert_eq!(tl.value().expect("value"), 2);
    assert!(read_back(device, queue, dst, size) == pattern, "the copy in the gated submit did not happen");
    eprintln!("{name}: timeline semaphore exported, waited on 1 and signalled 2 through wgpu's submit");
    drop(tl);
    drop(sb);
}

fn timeline_dropped_while_staged() {
    let vk = vulkan().expect("Vulkan device");
    let tl = SharedTimeline::new(&vk.device).expect("timeline");
    tl.wait_signal_on_next_submit(&vk.queue, Some(5), Some(6));
    drop(tl); // unstages: the next submit must not wait on a destroyed semaphore
    vk.queue.submit([]);
    vk.device.poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(std::time::Duration::from_secs(10)) }).expect("poll");
}

fn timeline_needs_the_extension() {
    // A device opened the plain way (request_device): the semaphore extension is not enabled,
    // and SharedTimeline says so.
    let adapter = vulkan_adapter().expect("Vulkan adapter");
    let (device, _queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("plain"),
        required_limits: wgpu::Limits::downlevel_defaults().using_resolution(adapter.limits()),
        ..Default::default()
    }))
    .expect("plain device");
    let e = SharedTimeline::new(&device).expect_err("plain device");
    assert!(e.to_string().contains("VK_KHR_external_semaphore_fd") || e.to_string().contains("timeline"), "{e}");
}

fn main() {
    let tests: [(&str, fn(), Need); 9] = [
        ("interop_shared_buffer_4k", shared_buffer_4k, Need::MemoryExport),
        ("interop_shared_buffer_64m", shared_buffer_64m, Need::MemoryExport),
        ("interop_drop_without_taking_the_fd", drop_without_taking_the_fd, Need::MemoryExport),
        ("interop_bad_sizes", bad_sizes, Need::Vulkan),
        ("interop_device_uuid", device_uuid_is_read, Need::Vulkan),
        ("interop_needs_vulkan", needs_vulkan, Need::Gl),
        ("interop_timeline_semaphore", timeline_semaphore, Need::SemaphoreExport),
        ("interop_timeline_dropped_while_staged", timeline_dropped_while_staged, Need::SemaphoreExport),
        ("interop_timeline_needs_the_extension", timeline_needs_the_extension, Need::Vulkan),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, body, need)| {
            Trial::ignorable_test(name, move || {
                let (why, env) = missing(need);
                match why {
                    None => {
                        body();
                        Ok(Completion::Completed)
                    }
                    Some(why) if std::env::var(env).as_deref() == Ok("1") => Err(Failed::from(format!("{env}=1 but {why}"))),
                    Some(why) => Ok(Completion::ignored_with(format!("not run: {why}"))),
                }
            })
        })
        .collect();
    libtest_mimic::run(&Arguments::from_args(), trials).exit()
}
