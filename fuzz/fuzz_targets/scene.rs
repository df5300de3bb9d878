//! Any text as a scene file (with any text as one `--set` override): one error or a scene,
//! never a panic; a scene of test size voxelises (or says why not) without a panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim_core::domain::Domain;
use sim_core::scene;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The last line, if it looks like KEY=VALUE, is also tried as a command-line override.
    let (body, set) = match text.rsplit_once('\n') {
        Some((body, last)) if last.contains('=') => (body.to_string(), last.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))),
        _ => (text.to_string(), None),
    };
    let overrides: Vec<(String, String)> = set.into_iter().collect();
    if let Ok(ls) = scene::from_str(&body, "fuzz.toml", std::path::PathBuf::from("."), &overrides) {
        let cells: usize = ls.derived.size.iter().product();
        if cells <= 1 << 16 {
            let _ = Domain::from_scene(&ls);
        }
    }
});
