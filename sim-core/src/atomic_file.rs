//! Files written whole or not at all: every output (fields, checkpoints, screenshots, bench
//! tables) goes to a temporary file in the folder of its destination and is renamed into place
//! once complete, so a run killed at any moment never leaves a truncated file under a final
//! name. The temporary names start with `.` and end with [`PARTIAL_SUFFIX`]; a killed run may
//! leave one behind, never a damaged file under the name a user or a script reads.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Suffix of the temporary file an output is written to before it is renamed into place.
pub const PARTIAL_SUFFIX: &str = ".partial";

/// The folder a file goes into (`.` for a bare file name).
#[must_use]
pub fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The prefix of the temporary files of `path` (`.NAME.`).
fn temp_prefix(path: &Path) -> String {
    let name = path.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    format!(".{name}.")
}

/// A temporary file beside `path`, locked while it is written so that
/// [`remove_leftovers`] never takes a file that a live writer (another run) is filling.
fn temp_in(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let t = tempfile::Builder::new().prefix(&temp_prefix(path)).suffix(PARTIAL_SUFFIX).tempfile_in(folder_of(path))?;
    // Where a file system has no locks, a leftover is still told by its name.
    let _ = t.as_file().try_lock();
    Ok(t)
}

/// Write `path` through `write`, atomically: the bytes go to a temporary file beside it, which
/// is flushed to disk and renamed over `path` only after `write` succeeded. On any error the
/// temporary file is removed and `path` is left as it was.
///
/// # Errors
/// The error of `write`, or of creating, syncing or renaming the temporary file.
pub fn write_atomic<E>(path: &Path, write: impl FnOnce(&mut dyn Write) -> Result<(), E>) -> Result<(), E>
where
    E: From<std::io::Error>,
{
    let mut tmp = temp_in(path)?;
    {
        let mut w = BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
        write(&mut w)?;
        w.flush()?;
    }
    finish(tmp, path)?;
    Ok(())
}

/// Sync the temporary file, give it the usual permissions (a temporary file is private) and
/// rename it over `path`.
fn finish(tmp: tempfile::NamedTempFile, path: &Path) -> std::io::Result<()> {
    tmp.as_file().sync_all()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Write `bytes` to `path` atomically (see [`write_atomic`]).
///
/// # Errors
/// I/O errors.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, |w| w.write_all(bytes))
}

/// Check before a run that a file can be written at `path`: its folder exists and takes a new
/// file, and `path` is not a folder. Nothing is left behind.
///
/// # Errors
/// A message naming the path and what is wrong.
pub fn check_writable(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{} is a folder; give a file name", path.display()));
    }
    let dir = folder_of(path);
    if !dir.is_dir() {
        return Err(format!("{}: the folder {} does not exist", path.display(), dir.display()));
    }
    probe_dir(&dir).map_err(|e| format!("{}: cannot write into {}: {e}", path.display(), dir.display()))
}

/// Check that a folder takes new files, by creating and removing one.
///
/// # Errors
/// The I/O error.
pub fn probe_dir(dir: &Path) -> std::io::Result<()> {
    let f = tempfile::Builder::new().prefix(".esoflow-write-check.").suffix(PARTIAL_SUFFIX).tempfile_in(dir)?;
    f.close()
}

/// Remove the temporary files that runs killed while writing left in `dir`
/// (`.NAME.XXXXXX.partial`); returns how many were removed. A file that a live writer holds
/// (locked) stays.
#[must_use]
pub fn remove_leftovers(dir: &Path) -> usize {
    remove_leftovers_with(dir, ".")
}

/// Remove the temporary files that runs killed while writing `path` left beside it
/// (`.NAME.XXXXXX.partial` of its name only: the folder may hold other programs' files);
/// returns how many were removed.
#[must_use]
pub fn remove_leftovers_of(path: &Path) -> usize {
    remove_leftovers_with(&folder_of(path), &temp_prefix(path))
}

fn remove_leftovers_with(dir: &Path, prefix: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with(prefix) && n.ends_with(PARTIAL_SUFFIX) && e.file_type().is_ok_and(|t| t.is_file())
        })
        .filter(|e| {
            // A writer that is alive holds its file locked.
            let free = File::open(e.path()).is_ok_and(|f| !matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)));
            free && std::fs::remove_file(e.path()).is_ok()
        })
        .count()
}

/// The name of the lock file a run holds in the folder it exports into.
pub const LOCK_NAME: &str = ".esoflow.lock";

/// A folder held by one run: a second run that asks for it is refused while the first holds
/// it. The hold is a lock on [`LOCK_NAME`] in the folder, which the system releases when the
/// process ends, however it ends; the file (with the holder's process id in it) is removed on
/// drop.
pub struct FolderLock {
    file: File,
    path: PathBuf,
}

impl FolderLock {
    /// Take `dir` for this process.
    ///
    /// # Errors
    /// The folder is held by another process (its id in the message), or the lock file cannot
    /// be made.
    pub fn take(dir: &Path) -> Result<FolderLock, String> {
        let path = dir.join(LOCK_NAME);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("cannot make the lock file {}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = std::io::Read::read_to_string(&mut file, &mut holder);
                let who = holder.trim().parse::<u32>().map_or_else(|_| "another process".to_string(), |p| format!("process {p}"));
                return Err(format!(
                    "another Esoflow run ({who}) is writing into {}; wait for it to end or give another folder",
                    dir.display()
                ));
            }
            // A file system without locks (some network shares): the folder is not guarded.
            Err(std::fs::TryLockError::Error(e)) => {
                tracing::warn!("{}: cannot lock ({e}); runs into this folder are not kept apart", path.display())
            }
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(FolderLock { file, path })
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // Removed while still held: a run that starts now makes a new file and takes it.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// An append-only log (stats.csv): each row goes to the file in one write, so a run killed
/// between rows leaves only whole rows, and one killed inside a write at most a partial last
/// line, which [`AppendLog::resume`] drops.
pub struct AppendLog {
    file: File,
    path: PathBuf,
    /// Bytes of whole lines in the file: a write that fails part-way (a full disk) is cut back
    /// to this length.
    len: u64,
}

impl AppendLog {
    /// Create (or replace, atomically) the file with `header` as its first line.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(path: &Path, header: &str) -> std::io::Result<AppendLog> {
        write_bytes(path, format!("{header}\n").as_bytes())?;
        AppendLog::open(path)
    }

    /// Continue an existing log after a resume: keep the header and the whole rows that `keep`
    /// accepts (rows of later steps belong to the run that is being replaced), drop a partial
    /// last line, and append from there. A missing file is created. The kept part is written
    /// atomically.
    ///
    /// # Errors
    /// I/O errors, or a file whose first line is not `header` (another program's file).
    pub fn resume(path: &Path, header: &str, keep: impl Fn(&str) -> bool) -> std::io::Result<(AppendLog, usize)> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((AppendLog::create(path, header)?, 0)),
            Err(e) => return Err(e),
        };
        let mut lines = text.split_inclusive('\n');
        if lines.next().map(str::trim_end) != Some(header) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} does not start with the header {header}; move it away or export into another folder", path.display()),
            ));
        }
        let mut out = format!("{header}\n");
        let mut kept = 0;
        for l in lines.filter(|l| l.ends_with('\n')) {
            if keep(l.trim_end()) {
                out.push_str(l);
                kept += 1;
            }
        }
        write_bytes(path, out.as_bytes())?;
        Ok((AppendLog::open(path)?, kept))
    }

    fn open(path: &Path) -> std::io::Result<AppendLog> {
        let file = std::fs::OpenOptions::new().append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(AppendLog { file, path: path.to_path_buf(), len })
    }

    /// Append one line (a newline is added), whole or not at all: a write that fails part-way
    /// (a full disk, a file-size limit) is cut back to the lines before it.
    ///
    /// # Errors
    /// I/O errors, with the file's name in the message.
    pub fn line(&mut self, line: &str) -> std::io::Result<()> {
        let mut s = String::with_capacity(line.len() + 1);
        s.push_str(line);
        s.push('\n');
        if let Err(e) = self.file.write_all(s.as_bytes()) {
            let cut = self.file.set_len(self.len);
            let kept = if cut.is_ok() { "its rows before this one are kept whole" } else { "its last row may be cut short" };
            return Err(std::io::Error::new(e.kind(), format!("writing {}: {e}; {kept}", self.path.display())));
        }
        self.len += s.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.csv");
        write_bytes(&p, b"old").unwrap();
        let r: std::io::Result<()> = write_atomic(&p, |w| {
            w.write_all(b"new, half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.csv")], "no temporary file is left");
        write_bytes(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
    }

    #[test]
    fn leftovers_of_killed_writes_are_found_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let t = temp_in(&dir.path().join("fields.vti")).unwrap();
        let (_, kept) = t.keep().unwrap();
        assert!(kept.file_name().unwrap().to_string_lossy().starts_with(".fields.vti."));
        std::fs::write(dir.path().join("fields.csv"), "x").unwrap();
        assert_eq!(remove_leftovers(dir.path()), 1);
        assert!(!kept.exists());
        assert!(dir.path().join("fields.csv").exists());
    }

    #[test]
    fn a_folder_is_held_by_one_lock_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let held = FolderLock::take(dir.path()).unwrap();
        let e = FolderLock::take(dir.path()).err().unwrap();
        assert!(e.contains(&format!("process {}", std::process::id())) && e.contains("another Esoflow run"), "{e}");
        drop(held);
        assert!(!dir.path().join(LOCK_NAME).exists());
        let again = FolderLock::take(dir.path()).unwrap();
        drop(again);
    }

    #[test]
    fn a_live_writers_temporary_file_is_not_a_leftover() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("run.ckpt");
        let live = temp_in(&ck).unwrap();
        let (_, dead) = temp_in(&ck).unwrap().keep().unwrap();
        let (_, other) = temp_in(&dir.path().join("notes.txt")).unwrap().keep().unwrap();
        assert_eq!(remove_leftovers_of(&ck), 1);
        assert!(!dead.exists() && live.path().exists() && other.exists(), "only the dead writer's file of run.ckpt goes");
        drop(live);
    }

    #[test]
    fn a_full_disk_is_named_in_the_error() {
        let full = Path::new("/dev/full");
        if full.exists() {
            let mut log = AppendLog::open(full).unwrap();
            let e = log.line("1,2").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::StorageFull);
            assert!(e.to_string().starts_with("writing /dev/full: "), "{e}");
        }
    }

    #[test]
    fn writability_is_checked_without_leaving_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_writable(&dir.path().join("x.png")).is_ok());
        assert!(check_writable(&dir.path().join("missing/x.png")).unwrap_err().contains("does not exist"));
        assert!(check_writable(dir.path()).unwrap_err().contains("is a folder"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_log_resumes_after_its_kept_rows_and_drops_a_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stats.csv");
        let mut log = AppendLog::create(&p, "step,v").unwrap();
        for s in 0..5 {
            log.line(&format!("{s},{}", s * 10)).unwrap();
        }
        drop(log);
        // A run killed inside a write leaves part of a line.
        std::fs::OpenOptions::new().append(true).open(&p).unwrap().write_all(b"5,5").unwrap();
        let (mut log, kept) =
            AppendLog::resume(&p, "step,v", |l| l.split(',').next().and_then(|s| s.parse::<u32>().ok()) < Some(3)).unwrap();
        assert_eq!(kept, 3);
        log.line("3,31").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "step,v\n0,0\n1,10\n2,20\n3,31\n");
        assert!(AppendLog::resume(&p, "other,header", |_| true).is_err());
        let (_, kept) = AppendLog::resume(&dir.path().join("new.csv"), "step,v", |_| true).unwrap();
        assert_eq!(kept, 0);
    }
}
