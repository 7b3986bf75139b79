//! Compile logging: with `TESSERA_LOG_COMPILES=1` (or `true`), every XLA compile prints a line
//! `compile: @NAME (T ms, D devices)` on stderr and every load from the persistent compile cache
//! `cache hit: @NAME`, NAME being the module's symbol name, so a user sees what compiles and
//! when (JAX's `jax_log_compiles`).

use std::io::Write;
use std::sync::OnceLock;

/// The variable that turns the log on.
pub const LOG_COMPILES_ENV: &str = "TESSERA_LOG_COMPILES";

/// Whether compiles are logged (the variable is read once per process).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var(LOG_COMPILES_ENV)
            .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
    })
}

/// The symbol name of a module given as text (`module @name ...`), or `<module>`.
pub fn module_name(module: &[u8]) -> String {
    let head = &module[..module.len().min(4096)];
    let text = String::from_utf8_lossy(head);
    text.split("module @")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '{').next())
        .filter(|name| !name.is_empty())
        .map_or_else(|| "<module>".to_owned(), |name| format!("@{name}"))
}

/// Writes one log line on stderr (nothing when stderr is closed).
pub fn log(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::module_name;

    #[test]
    fn the_module_name_is_its_symbol() {
        let text = b"module @jit_step attributes {mhlo.num_partitions = 1 : i32} {\n}";
        assert_eq!(module_name(text), "@jit_step");
        assert_eq!(module_name(b"module @m{}"), "@m");
        assert_eq!(module_name(b"func.func @f()"), "<module>");
    }
}
