"""A JAX program of well over 1000 variables (issue 34), in the format of
../shared/oracle/jaxpr_real_cases.json: JAX names its variables a..z, ba, ..., so the 222nd is
`in`, the keyword closing a jaxpr's body, and later ones include other words (`if`, `is`, ...).
The program mixes elementwise ops, dot_general, reductions and broadcasts, a `jit` called once
(printed in place, on one line, with variables named past `in`), a `jit` called twice (printed
once before the program, `let NAME = { lambda ... } in`), `jax.nn.relu` (custom_jvp_call) and a
`fori_loop` (scan), and stays bounded (sin, tanh, scaled sums), so JAX's float32 values are
reproducible to 1e-4; a running sum of every eighth step's squares makes each
part reach the results.

Usage: python gen_many_vars_case.py tests/data/many_vars_case.json   (made with JAX 0.10.1 on CPU, seed 0)
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

rng = np.random.default_rng(0)


def enc(a):
    a = np.asarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}


@jax.jit
def once(h):
    return jnp.cos(h) * 0.5


@jax.jit
def twice(h, w):
    return jnp.tanh(h @ w * 0.25)


def step(i, h, w):
    k = i % 8
    if k == 0:
        return jnp.sin(h)
    if k == 1:
        return -h
    if k == 2:
        return h * 0.9 + 0.1
    if k == 3:
        return jnp.tanh(jnp.dot(h, w) * 0.3)
    if k == 4:
        return h + jnp.sum(h, axis=1, keepdims=True) * 0.05
    if k == 5:
        return h - jnp.max(h, axis=0) * 0.1
    if k == 6:
        return jnp.exp(-h * h) - 0.5
    return h * jnp.mean(h) + jnp.abs(h) * 0.2


def program(x, w):
    h, acc = x, jnp.float32(0)
    for i in range(440):
        h = step(i, h, w)
        if i % 8 == 7:
            # Every part of the program reaches the results (the steps contract toward a fixed
            # point, so `h` alone would forget the early ones).
            acc = acc + jnp.sum(h * h)
        if i == 120:
            h = once(h)
        if i in (150, 200):
            h = twice(h, w)
        if i == 170:
            h = jax.nn.relu(h) - 0.3
        if i == 300:
            h = lax.fori_loop(0, 3, lambda _, c: jnp.sin(c) * 0.8, h)
    return acc, h


x = rng.normal(size=(4, 8)).astype(np.float32)
w = (rng.normal(size=(8, 8)) / 3).astype(np.float32)
args = (x, w)
text = str(jax.make_jaxpr(program)(*args))
outs = program(*args)
cts = [np.asarray(rng.integers(-2, 3, size=np.shape(o)), dtype=np.float32) for o in outs]


def loss(*xs):
    return sum(jnp.sum(o * c) for o, c in zip(program(*xs), cts))


grads = [np.asarray(g).tolist() for g in jax.grad(loss, argnums=(0, 1))(*args)]
names = {line.split(":")[0].strip() for line in text.splitlines() if "=" in line}
case = {"name": "many_vars", "jaxpr": text, "consts": [], "inputs": [enc(a) for a in args],
        "outputs": [enc(o) for o in outs], "cotangents": [enc(c) for c in cts], "grads": grads}
json.dump({"generator": f"jax {jax.__version__}", "cases": [case]}, open(sys.argv[1], "w"), indent=1)
print(len(text.splitlines()), "lines;", "`in` is a variable:", "in" in names)
