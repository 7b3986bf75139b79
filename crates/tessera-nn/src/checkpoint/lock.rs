//! One writer per checkpoint directory: [`DirLock`] holds `.tessera.lock` (the owner's process
//! id) while a run saves there, so a second run started on the same directory is refused
//! instead of silently overwriting the first run's checkpoints with its own.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::io_error;
use crate::error::{NnError, Result};

const LOCK_FILE: &str = ".tessera.lock";

/// The lock of a checkpoint directory, released (its file removed) when dropped.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
}

impl DirLock {
    /// Takes the lock of `dir` (created if missing) for this process. A lock held by a live
    /// process is an error naming its process id; one left by a process that has ended (killed
    /// mid-run) is taken over.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        fs::create_dir_all(dir).map_err(|e| io_error(dir, "cannot create", e))?;
        let path = dir.join(LOCK_FILE);
        // Two tries: the second after removing a lock whose owner has ended.
        for _ in 0..2 {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    write!(file, "{}", std::process::id())
                        .map_err(|e| io_error(&path, "cannot write", e))?;
                    return Ok(DirLock { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = fs::read_to_string(&path).unwrap_or_default();
                    let pid = owner.trim().parse::<u32>().ok();
                    if pid.is_some_and(|pid| alive_after(pid, OWNER_GRACE)) {
                        return Err(held(dir, &path, &owner));
                    }
                    // The owner ended without releasing it (or the file is damaged).
                    fs::remove_file(&path).map_err(|e| io_error(&path, "cannot remove", e))?;
                }
                Err(e) => return Err(io_error(&path, "cannot create", e)),
            }
        }
        Err(held(dir, &path, "another process"))
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Only our own lock: a stale-lock takeover by another run must not be undone.
        let ours = fs::read_to_string(&self.path)
            .is_ok_and(|owner| owner.trim() == std::process::id().to_string());
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn held(dir: &Path, path: &Path, owner: &str) -> NnError {
    NnError::Checkpoint(format!(
        "the checkpoint directory {} is in use by process {} (lock file {}); two runs saving \
         there would overwrite each other's checkpoints. Fix: wait for that run to end, or use \
         another directory (if no such process is running, remove the lock file)",
        dir.display(),
        owner.trim(),
        path.display()
    ))
}

/// How long a lock's live owner is given to end: the ranks of a job that crashed may outlive
/// their launcher by a moment, and a run resumed at once should not be refused for that.
const OWNER_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether process `pid` still runs after waiting up to `grace` for it to end (no wait for
/// this process itself).
fn alive_after(pid: u32, grace: std::time::Duration) -> bool {
    let began = std::time::Instant::now();
    while is_alive(pid) {
        let unknowable = !Path::new("/proc/self").exists();
        if unknowable || pid == std::process::id() || began.elapsed() >= grace {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// Whether process `pid` is running (Linux's /proc; elsewhere every owner counts as running).
fn is_alive(pid: u32) -> bool {
    let proc_root = Path::new("/proc");
    if !proc_root.join("self").exists() {
        return true;
    }
    if pid == std::process::id() {
        return true;
    }
    // A zombie (`Z` in its stat line, after the command's closing parenthesis) has ended.
    match fs::read_to_string(proc_root.join(pid.to_string()).join("stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    #[test]
    fn a_second_lock_is_refused_and_a_dead_owners_lock_taken_over() {
        let dir = std::env::temp_dir().join(format!("tessera-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let lock = DirLock::acquire(&dir).unwrap();
        let err = DirLock::acquire(&dir).unwrap_err().to_string();
        assert!(
            err.contains(&std::process::id().to_string()) && err.contains("in use"),
            "{err}"
        );
        drop(lock);
        assert!(!dir.join(LOCK_FILE).exists());
        // A lock whose owner has ended (no such pid) is taken over.
        fs::write(dir.join(LOCK_FILE), "4294967295").unwrap();
        let lock = DirLock::acquire(&dir).unwrap();
        assert_eq!(
            fs::read_to_string(lock.path()).unwrap(),
            std::process::id().to_string()
        );
        drop(lock);
        fs::remove_dir_all(&dir).unwrap();
    }
}
