//! A fault for the tests of `tessera launch`: `TESSERA_KILL_AT=RANK:STEP[,RANK:STEP...]` makes
//! the process of rank RANK (0 outside a job) kill itself with SIGKILL as step STEP begins,
//! once: each kill first leaves a marker file in `TESSERA_KILL_ONCE_DIR` (required with it), so
//! that the run restarted from a checkpoint goes past that step.

use anyhow::{Context, bail};

/// The variable naming the kills.
pub const KILL_AT_ENV: &str = "TESSERA_KILL_AT";
/// The folder of the kills' markers.
pub const KILL_ONCE_DIR_ENV: &str = "TESSERA_KILL_ONCE_DIR";

/// Kills this process if `TESSERA_KILL_AT` names `rank` at `step` and that kill has not
/// happened yet.
pub fn kill_at_step(rank: usize, step: u64) -> anyhow::Result<()> {
    let Ok(text) = std::env::var(KILL_AT_ENV) else {
        return Ok(());
    };
    if !kills(&text)?.contains(&(rank, step)) {
        return Ok(());
    }
    let dir = std::env::var_os(KILL_ONCE_DIR_ENV).with_context(|| {
        format!("{KILL_AT_ENV} needs {KILL_ONCE_DIR_ENV}, a folder for markers")
    })?;
    let marker = std::path::Path::new(&dir).join(format!("killed-rank{rank}-step{step}"));
    let first = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .is_ok();
    if first {
        let pid = std::process::id().to_string();
        eprintln!(
            "injected fault ({KILL_AT_ENV}): killing rank {rank} with SIGKILL at step {step}"
        );
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status();
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
    Ok(())
}

/// The `(rank, step)` pairs of `text`.
fn kills(text: &str) -> anyhow::Result<Vec<(usize, u64)>> {
    text.split(',')
        .map(|pair| {
            let parsed = pair
                .split_once(':')
                .and_then(|(r, s)| Some((r.trim().parse().ok()?, s.trim().parse().ok()?)));
            match parsed {
                Some(kill) => Ok(kill),
                None => bail!("{KILL_AT_ENV} is '{text}'; give RANK:STEP pairs, e.g. 2:3,2:6"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    #[test]
    fn kills_are_rank_step_pairs() {
        assert_eq!(kills("2:3, 2:6").unwrap(), [(2, 3), (2, 6)]);
        assert!(kills("2").is_err());
        assert!(kills("a:b").is_err());
    }
}
