//! Reading the files a user names (scenes, STL meshes, checkpoints): never more than a cap, so a
//! wrong path (`/dev/zero`, a disk image, a named pipe) is refused with a message instead of
//! reading until memory runs out.

use std::io::Read;
use std::path::Path;

/// The largest scene file read (a scene is a page of TOML).
pub const SCENE_CAP: u64 = 16_000_000;

/// The largest STL file read: 2 GB, a binary mesh of 40 million triangles.
pub const STL_CAP: u64 = 2_000_000_000;

/// Open `path` for reading: a file or a pipe, not a folder or a device. `what` names the kind
/// of file in messages ("a checkpoint").
///
/// # Errors
/// A message naming the file.
pub fn open(path: &Path, what: &str) -> Result<(std::fs::File, std::fs::Metadata), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let meta = f.metadata().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.is_dir() {
        return Err(format!("{} is a folder, not {what}", path.display()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_char_device() || t.is_block_device() || t.is_socket() {
            return Err(format!("{} is a device, not {what}", path.display()));
        }
    }
    Ok((f, meta))
}

/// Read the whole of `path`, at most `cap` bytes. `what` names the kind of file in messages
/// ("a scene file").
///
/// # Errors
/// A message naming the file: it cannot be opened or read, is a folder, or holds more than
/// `cap` bytes (a pipe may hold any amount), or is a device.
pub fn read_capped(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>, String> {
    let too_big =
        || format!("{} is larger than the {} that {what} may be: is it the right file?", path.display(), crate::units::human_bytes(cap));
    let (f, meta) = open(path, what)?;
    if meta.is_file() && meta.len() > cap {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(if meta.is_file() { meta.len() as usize } else { 0 });
    f.take(cap + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > cap {
        return Err(too_big());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_whole_up_to_the_cap_and_refused_beyond() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.toml");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_capped(&p, 10, "a scene file").unwrap(), b"0123456789");
        let e = read_capped(&p, 9, "a scene file").unwrap_err();
        assert!(e.contains("a.toml") && e.contains("larger than the 9 B that a scene file may be"), "{e}");
        let e = read_capped(dir.path(), 9, "a scene file").unwrap_err();
        assert!(e.contains("is a folder"), "{e}");
        let e = read_capped(&dir.path().join("missing"), 9, "a scene file").unwrap_err();
        assert!(e.starts_with("cannot open ") && e.contains("missing"), "{e}");
    }

    #[test]
    fn a_device_is_refused_before_it_is_read() {
        let zero = Path::new("/dev/zero");
        if zero.exists() {
            let e = read_capped(zero, 1_000_000, "a scene file").unwrap_err();
            assert_eq!(e, "/dev/zero is a device, not a scene file");
        }
    }
}
