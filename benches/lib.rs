//! Criterion benchmarks of the Tessera crates live in `benches/benches/`; run them with
//! `cargo xtask bench`.
