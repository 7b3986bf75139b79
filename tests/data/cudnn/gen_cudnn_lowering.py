"""JAX's own StableHLO for `jax.nn.dot_product_attention(..., implementation='cudnn')`: the
`__cudnn$fmhaSoftmax` (forward) and `__cudnn$fmhaSoftmaxBackward` (gradient) custom calls, their
`backend_config`, operand and result layouts, for a few shapes; the fixture a CUDA lowering of
Tessera's attention operation is compared with (issue 47).

Made WITHOUT a GPU: JAX lowers for the `cuda` platform on a CPU machine
(`jax.jit(f).trace(...).lower(lowering_platforms=('cuda',))`), with its cuDNN version check
(`check_cudnn_version`, which needs a GPU) replaced by a stand-in that reports cuDNN 9.10.0.
JAX 0.10.2 reads the version only to check its inputs, not to write the custom calls; a capture
on a GPU machine (JAX 0.11.2 there) should replace this file when one is lent.

Usage: python gen_cudnn_lowering.py OUT.json   (JAX 0.10.2, CPU)
"""
import json, re, sys

import jax, jax.numpy as jnp
from jax._src.cudnn import fused_attention_stablehlo as fa

fa.check_cudnn_version = lambda *a, **k: 91000

# (batch, q_len, kv_len, q_heads, kv_heads, head_dim, causal, dtype)
SHAPES = [
    (2, 128, 128, 8, 2, 64, True, "bfloat16"),
    (1, 256, 256, 4, 4, 128, True, "bfloat16"),
    (2, 64, 64, 8, 8, 64, False, "float16"),
    (1, 512, 512, 32, 8, 64, True, "bfloat16"),
]


def custom_calls(text):
    return [line.strip() for line in text.splitlines() if "stablehlo.custom_call" in line]


def case(b, t, s, n, k, h, causal, dtype):
    dt = getattr(jnp, dtype)
    q = jax.ShapeDtypeStruct((b, t, n, h), dt)
    kv = jax.ShapeDtypeStruct((b, s, k, h), dt)

    def fwd(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")

    def loss(q, k, v):
        return jnp.sum(fwd(q, k, v).astype(jnp.float32))

    lower = lambda f: jax.jit(f).trace(q, kv, kv).lower(lowering_platforms=("cuda",)).as_text()
    return dict(
        batch=b, q_len=t, kv_len=s, q_heads=n, kv_heads=k, head_dim=h, causal=causal,
        dtype=dtype, scale=1.0 / h ** 0.5,
        forward=custom_calls(lower(fwd)),
        gradient=custom_calls(lower(jax.grad(loss, argnums=(0, 1, 2)))),
    )


def main():
    cases = [case(*s) for s in SHAPES]
    with open(sys.argv[1], "w") as f:
        json.dump(dict(jax=jax.__version__, cudnn_version_stand_in=91000, cases=cases), f, indent=1)
    for c in cases:
        print(c["dtype"], c["q_heads"], c["kv_heads"], len(c["forward"]), len(c["gradient"]))


if __name__ == "__main__":
    main()
