//! How a run is bounded: the deadline of every wait.

use std::time::Duration;

use super::error::RunError;

/// The deadline when neither the caller nor `TESSERA_TIMEOUT_S` sets one: generous, since a
/// task of a large model may legitimately run for minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The environment variable that sets the deadline, in seconds.
pub const TIMEOUT_ENV: &str = "TESSERA_TIMEOUT_S";

/// Options of [`super::run`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunOptions {
    /// How long a group may wait for an input, and a task may run, before the run fails with
    /// [`RunError::Timeout`] and every group stops.
    pub timeout: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl RunOptions {
    /// The options with the deadline from `TESSERA_TIMEOUT_S` (seconds, e.g. `30` or `0.5`),
    /// or [`DEFAULT_TIMEOUT`] when it is not set.
    pub fn from_env() -> Result<Self, RunError> {
        match std::env::var(TIMEOUT_ENV) {
            Ok(text) => Ok(RunOptions {
                timeout: parse_timeout(&text)?,
            }),
            Err(_) => Ok(RunOptions::default()),
        }
    }
}

/// Seconds as a deadline; refuses what is not a positive, finite number.
pub fn parse_timeout(text: &str) -> Result<Duration, RunError> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| {
            RunError::Options(format!(
                "{TIMEOUT_ENV} is '{text}'; set it to a positive number of seconds, e.g. 600"
            ))
        })
}
