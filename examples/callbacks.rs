//! Host callbacks from a user's view (JAX's `jax.pure_callback`, `jax.experimental.io_callback`
//! and `jax.debug.callback`): a Rust closure computes part of a program on the host, another
//! logs values in program order, and the compiled program calls both from inside XLA.
//!
//! `cargo run -p tessera-examples --example callbacks` (it also runs as a test).

use std::sync::{Arc, Mutex};

use anyhow::{Context, ensure};
use tessera::ir::interp::eval_closed;
use tessera::ir::prim::VmapMethod;
use tessera::ir::trace::{debug_callback, io_callback, pure_callback, trace};
use tessera::ir::{Array, DType, ShapedArray};
use tessera::jit::run_on_device;
use tessera::pjrt::Client;

fn main() -> anyhow::Result<()> {
    let client = Client::cpu(1).context("the PJRT CPU plugin (run `cargo xtask setup`)")?;
    let f32s = |shape: &[i64]| ShapedArray::new(DType::F32, shape);
    let log: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let io_log = log.clone();
    let debug_log = log.clone();

    let program = trace(&[f32s(&[4])], |a| {
        // A pure function the program cannot express itself (here: a cumulative maximum,
        // computed by a Rust loop). It must return arrays of the declared types.
        let running_max = pure_callback(
            |args: &[Array]| {
                let mut best = f64::NEG_INFINITY;
                let values: Vec<f64> = args[0]
                    .values()
                    .iter()
                    .map(|&v| {
                        best = best.max(v);
                        best
                    })
                    .collect();
                Array::new(DType::F32, &[4], values)
                    .map_err(|e| e.to_string())
                    .map(|a| vec![a])
            },
            &[f32s(&[4])],
            &[&a[0]],
            Some(VmapMethod::Sequential),
        )
        .remove(0);
        // An effect: always run, in program order (ordered), even though nothing reads it.
        let _ = io_callback(
            move |args: &[Array]| {
                let sum: f64 = args[0].values().iter().sum();
                io_log
                    .lock()
                    .map_err(|e| e.to_string())?
                    .push(format!("io: sum {sum}"));
                Ok(Vec::new())
            },
            &[],
            &[&running_max],
            true,
        );
        let y = &running_max * 2.0;
        // A debug print of an intermediate value.
        debug_callback(
            move |args: &[Array]| {
                if let Ok(mut log) = debug_log.lock() {
                    log.push(format!(
                        "debug: {:?}",
                        args[0].values().iter().collect::<Vec<_>>()
                    ));
                }
            },
            &[&y],
        );
        vec![y]
    })?;

    let x = Array::new(DType::F32, &[4], vec![1.0, 3.0, 2.0, 5.0])?;
    let on_host = eval_closed(&program, std::slice::from_ref(&x))?;
    let compiled = run_on_device(&client, &program, &[x], 0)?;
    let want = [2.0, 6.0, 6.0, 10.0];
    for result in [&on_host[0], &compiled[0]] {
        ensure!(
            result.values().iter().copied().eq(want),
            "got {:?}",
            result.values()
        );
    }
    let log = log.lock().map_err(|e| anyhow::anyhow!("{e}"))?.clone();
    for line in &log {
        println!("{line}");
    }
    // Each of the two runs (interpreter, PJRT) logged once from each callback (the io and the
    // debug callback do not depend on each other, so XLA may run them in either order).
    let mut first = log.get(..2).unwrap_or_default().to_vec();
    let mut second = log.get(2..).unwrap_or_default().to_vec();
    first.sort();
    second.sort();
    ensure!(
        log.len() == 4 && first == second,
        "expected the same 2 lines twice, got {log:?}"
    );
    ensure!(
        first[0] == "debug: [2.0, 6.0, 6.0, 10.0]" && first[1] == "io: sum 12",
        "{log:?}"
    );
    println!("callbacks: every check passed");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn pure_io_and_debug_callbacks_run_on_the_interpreter_and_on_pjrt() -> anyhow::Result<()> {
        super::main()
    }
}
