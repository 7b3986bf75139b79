"""JAX's half of `cargo xtask bench --compare-jax`.

Measures, on 8 virtual CPU devices, the model Tessera benchmarks too: a 3-layer MLP
(d_in=256, hidden=512, out=10, batch 256, float32) trained with softmax cross-entropy and a
plain SGD step that returns the new parameters and the loss. The parameters and the batch are
`benches/src/bin/tessera_bench_jit.rs`'s, computed by the same formulas, and the loss picks the
label's log-probability by the same one-hot product, so both sides compute the same values:
`first_losses` (the first three steps' losses) lets the harness check that.

Metrics, each a median over repeated runs after warm-up:
  jit_step     one data-parallel training step of `jax.jit` with NamedShardings on a mesh
               `data=8` (batch sharded on `data`, parameters replicated)
  trace_lower  tracing and lowering that step to StableHLO (`jit(step).trace(...).lower()`),
               without XLA's compile, of a new Python function each sample; JAX's own caches
               (its helpers' traces) are kept warm, as a user jitting a new function finds them
  compile      `lowered.compile()` of that lowering
  dispatch     per-call overhead of a tiny jitted function (x + 1 on a 4-element array),
               `f(x).block_until_ready()` in a loop

Prints one JSON object to stdout; everything else goes to stderr. Run by xtask inside the venv
it makes under target/jax-venv/ (see xtask/src/jax.rs); it can also be run by hand:
    target/jax-venv/bin/python benches/jax/bench_jax.py
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

# Before jax is imported: 8 virtual CPU devices, like the PJRT CPU plugin Tessera uses.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

DEVICES = 8
D_IN, HIDDEN, D_OUT, BATCH = 256, 512, 10, 256
LEARNING_RATE = 0.1


def make_step():
    """A new Python function for the training step each call, so that no trace cache is hit."""

    def loss_fn(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i + 1 < len(params):
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h, axis=-1)
        picked = jnp.sum(logp * jax.nn.one_hot(y, D_OUT, dtype=jnp.float32), axis=-1)
        return -jnp.mean(picked)

    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        new_params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
        return new_params, loss

    return step


def sines(n, step, offset, scale):
    """float32 of sin(i * step + offset) * scale for i < n, each computed in double precision
    by the C library's sin and then rounded (Tessera's `(i as f64 * step + offset).sin() *
    scale` cast to f32)."""
    return np.array([math.sin(i * step + offset) * scale for i in range(n)]).astype(np.float32)


def init(mesh):
    """Parameters (replicated) and one batch (sharded on `data`), placed on the mesh: the values
    tessera_bench_jit.rs starts from."""
    dims = [D_IN, HIDDEN, HIDDEN, D_OUT]
    params = []
    for layer, (d_a, d_b) in enumerate(zip(dims[:-1], dims[1:])):
        w = sines(d_a * d_b, 0.618, 2 * layer, math.sqrt(2.0 / d_a)).reshape(d_a, d_b)
        params.append((jnp.asarray(w), jnp.zeros((d_b,), jnp.float32)))
    x = jnp.asarray(sines(BATCH * D_IN, 0.37, 0.0, 1.0).reshape(BATCH, D_IN))
    y = jnp.asarray(np.array([(i * 7) % D_OUT for i in range(BATCH)], np.int32))

    replicated = NamedSharding(mesh, P())
    batch_x = NamedSharding(mesh, P("data", None))
    batch_y = NamedSharding(mesh, P("data"))
    params = jax.device_put(params, replicated)
    x = jax.device_put(x, batch_x)
    y = jax.device_put(y, batch_y)
    param_shardings = jax.tree_util.tree_map(lambda _: replicated, params)
    in_shardings = (param_shardings, batch_x, batch_y)
    out_shardings = (param_shardings, replicated)
    return params, x, y, in_shardings, out_shardings


def summary(samples):
    return {"median_s": statistics.median(samples), "samples": samples}


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def bench_jit_step(params, x, y, in_sh, out_sh, warmup, runs):
    step = jax.jit(make_step(), in_shardings=in_sh, out_shardings=out_sh)
    first_losses = []
    for _ in range(warmup):
        params, loss = step(params, x, y)
        jax.block_until_ready((params, loss))
        first_losses.append(float(loss))
    samples = []
    for _ in range(runs):
        dt, (params, loss) = timed(lambda: jax.block_until_ready(step(params, x, y)))
        samples.append(dt)
    return summary(samples), float(loss), first_losses[:3]


def bench_trace_lower_compile(params, x, y, in_sh, out_sh, warmup, runs):
    trace_lower, compile_ = [], []
    for i in range(warmup + runs):
        # A new function each sample: it is traced, lowered and compiled anew, while JAX's own
        # caches (e.g. its helpers' traces) stay warm, as they are for a user's new function.
        jitted = jax.jit(make_step(), in_shardings=in_sh, out_shardings=out_sh)
        dt_lower, lowered = timed(lambda: jitted.trace(params, x, y).lower())
        dt_compile, _ = timed(lowered.compile)
        if i >= warmup:
            trace_lower.append(dt_lower)
            compile_.append(dt_compile)
    return summary(trace_lower), summary(compile_)


def bench_dispatch(warmup, runs, calls):
    f = jax.jit(lambda v: v + 1)
    v = jnp.zeros((4,), jnp.float32)
    for _ in range(warmup):
        f(v).block_until_ready()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            f(v).block_until_ready()
        samples.append((time.perf_counter() - start) / calls)
    return summary(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pipeline-mlp",
        action="store_true",
        help="accepted for symmetry with Tessera's runner; JAX has no pipelined rows",
    )
    parser.add_argument("--step-runs", type=int, default=200)
    parser.add_argument("--lower-runs", type=int, default=10)
    parser.add_argument("--dispatch-runs", type=int, default=15)
    parser.add_argument("--dispatch-calls", type=int, default=500)
    args = parser.parse_args()

    devices = jax.devices()
    if len(devices) != DEVICES:
        sys.exit(f"bench_jax.py: expected {DEVICES} CPU devices, jax sees {len(devices)}")
    mesh = Mesh(devices, ("data",))
    params, x, y, in_sh, out_sh = init(mesh)

    started = time.perf_counter()
    print("bench_jax: jit step", file=sys.stderr)
    jit_step, loss, first_losses = bench_jit_step(params, x, y, in_sh, out_sh, 10, args.step_runs)
    print("bench_jax: trace+lower and compile", file=sys.stderr)
    trace_lower, compile_ = bench_trace_lower_compile(
        params, x, y, in_sh, out_sh, 1, args.lower_runs
    )
    print("bench_jax: dispatch", file=sys.stderr)
    dispatch = bench_dispatch(200, args.dispatch_runs, args.dispatch_calls)

    out = {
        "versions": {
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "python": platform.python_version(),
        },
        "device_count": len(devices),
        "platform": devices[0].platform,
        "model": {
            "d_in": D_IN,
            "hidden": HIDDEN,
            "d_out": D_OUT,
            "layers": 3,
            "batch": BATCH,
            "dtype": "float32",
            "mesh": {"data": DEVICES},
            "final_loss": loss,
        },
        "metrics": {
            "jit_step": jit_step,
            "trace_lower": trace_lower,
            "compile": compile_,
            "dispatch": dispatch,
        },
        "first_losses": first_losses,
        "elapsed_s": time.perf_counter() - started,
    }
    if args.pipeline_mlp:
        # JAX has no counterpart of Tessera's pipeline schedules here: the pipelined rows of
        # the table (one per schedule, checked against the simulator's prediction) are
        # measured by Tessera itself, so this flag adds nothing to JAX's output.
        out["pipeline_mlp"] = None
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
