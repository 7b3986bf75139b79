//! Runnable examples of the Tessera API: `cargo run -p tessera-examples --example NAME`.
