//! One writer per checkpoint directory: [`DirLock`] holds `.tessera.lock` (the owner's process
//! id) while a run saves there, so a second run started on the same directory is refused
//! instead of silently overwriting the first run's checkpoints with its own.
//!
//! Taking the lock is atomic: the process id is written to a file of its own first, which is
//! then hard-linked into place (the link fails when a lock exists), so a lock file never exists
//! without its owner's id in it. A lock left by an ended process is moved aside by an atomic
//! rename before a new one is linked, and put back if what was moved is not the stale lock that
//! was judged (another run took it over in between).

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
        let mine = Private::write(dir, "new")?;
        // A few tries: again after moving aside a lock whose owner has ended.
        for _ in 0..4 {
            match fs::hard_link(&mine.0, &path) {
                Ok(()) => return Ok(DirLock { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = match fs::read_to_string(&path) {
                        Ok(owner) => owner,
                        // Released (or moved aside) since the link failed: try again.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(io_error(&path, "cannot read", e)),
                    };
                    let pid = owner.trim().parse::<u32>().ok();
                    if pid.is_some_and(|pid| alive_after(pid, OWNER_GRACE)) {
                        return Err(held(dir, &path, &owner));
                    }
                    // The owner ended without releasing it (or the file is damaged).
                    take_stale(dir, &path, &owner)?;
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

/// A file of this process's own in the checkpoint directory, removed when dropped.
struct Private(PathBuf);

impl Private {
    /// A new file holding this process's id, under a name no other caller uses.
    fn write(dir: &Path, what: &str) -> Result<Private> {
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let path = dir.join(format!("{LOCK_FILE}.{what}.{pid}.{call}"));
        let mut file = fs::File::create(&path).map_err(|e| io_error(&path, "cannot create", e))?;
        let private = Private(path);
        write!(file, "{pid}")
            .and_then(|()| file.sync_all())
            .map_err(|e| io_error(&private.0, "cannot write", e))?;
        Ok(private)
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Moves the stale lock at `path` (whose content was `stale`) aside. If what was moved is not
/// that lock (another run replaced it in between), it is linked back into place.
fn take_stale(dir: &Path, path: &Path, stale: &str) -> Result<()> {
    let aside = Private::write(dir, "stale")?;
    match fs::rename(path, &aside.0) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(path, "cannot move aside", e)),
    }
    let moved = fs::read_to_string(&aside.0).map_err(|e| io_error(&aside.0, "cannot read", e))?;
    if moved != stale {
        // Someone else's live lock: back into place (unless a third run holds it by now).
        let _ = fs::hard_link(&aside.0, path);
    }
    Ok(())
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
        // An empty lock is damaged (a lock is never seen without its owner's id): taken over.
        fs::write(dir.join(LOCK_FILE), "").unwrap();
        drop(DirLock::acquire(&dir).unwrap());
        // Only the lock file is left behind by acquire and drop, never a private file.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Threads of one process (one pid, so each sees the others' locks as live) acquiring at
    /// once: exactly one holds the lock in each round. When the id was written after the file
    /// was created, a thread could read the new lock empty, take it for damaged, remove it and
    /// take its own, so that two held it.
    #[test]
    fn racing_acquirers_get_one_lock() {
        let dir = std::env::temp_dir().join(format!("tessera-lock-race-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for round in 0..100 {
            let start = std::sync::Barrier::new(6);
            let locks: Vec<Option<DirLock>> = std::thread::scope(|s| {
                let racers: Vec<_> = (0..6)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            DirLock::acquire(&dir).ok()
                        })
                    })
                    .collect();
                racers.into_iter().map(|r| r.join().unwrap()).collect()
            });
            let held = locks.iter().filter(|l| l.is_some()).count();
            assert_eq!(held, 1, "round {round}: {held} threads hold the lock");
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
