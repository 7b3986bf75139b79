"""JAX's own StableHLO for `jax.nn.dot_product_attention(..., implementation='cudnn')`: the
`__cudnn$fmhaSoftmax` (forward) and `__cudnn$fmhaSoftmaxBackward` (gradient) custom calls, their
`backend_config`, operand and result layouts, for a few shapes, and with a boolean mask (which
JAX passes to cuDNN as an additive bias, `__cudnn$fmhaScaleBiasSoftmax` and its backward); the
fixture a CUDA lowering of Tessera's attention operation is compared with (issue 47).

Made WITHOUT a GPU: JAX lowers for the `cuda` platform on a CPU machine
(`jax.jit(f).trace(...).lower(lowering_platforms=('cuda',))`), with its cuDNN version check
(`check_cudnn_version`, which needs a GPU) replaced by a stand-in that reports cuDNN 9.10.0.
JAX 0.10.2 reads the version only to check its inputs, not to write the custom calls. With
`--on-gpu` (the GPU bundle's run.sh passes it) the machine's own cuDNN is asked instead and the
GPU is recorded; such a capture should replace this file.

Usage: python gen_cudnn_lowering.py OUT.json [--on-gpu]   (JAX 0.10.2 on a CPU, or a GPU's JAX)
"""
import json, re, sys

import jax, jax.numpy as jnp
from jax._src.cudnn import fused_attention_stablehlo as fa

ON_GPU = "--on-gpu" in sys.argv[2:]
if not ON_GPU:
    fa.check_cudnn_version = lambda *a, **k: 91000

# (batch, q_len, kv_len, q_heads, kv_heads, head_dim, causal, dtype, masked)
SHAPES = [
    (2, 128, 128, 8, 2, 64, True, "bfloat16", False),
    (1, 256, 256, 4, 4, 128, True, "bfloat16", False),
    (2, 64, 64, 8, 8, 64, False, "float16", False),
    (1, 512, 512, 32, 8, 64, True, "bfloat16", False),
    (2, 64, 64, 4, 2, 64, True, "bfloat16", True),
    (1, 128, 128, 8, 8, 64, False, "float16", True),
]


def custom_calls(text):
    return [line.strip() for line in text.splitlines() if "stablehlo.custom_call" in line]


def case(b, t, s, n, k, h, causal, dtype, masked):
    dt = getattr(jnp, dtype)
    q = jax.ShapeDtypeStruct((b, t, n, h), dt)
    kv = jax.ShapeDtypeStruct((b, s, k, h), dt)
    # A boolean mask of one query-by-key matrix (Tessera's mask operand, broadcast as JAX wants).
    mask = jax.ShapeDtypeStruct((1, 1, t, s), jnp.bool_)

    def fwd(q, k, v, *m):
        return jax.nn.dot_product_attention(q, k, v, mask=m[0] if m else None, is_causal=causal,
                                            implementation="cudnn")

    def loss(q, k, v, *m):
        return jnp.sum(fwd(q, k, v, *m).astype(jnp.float32))

    args = (q, kv, kv, mask) if masked else (q, kv, kv)
    lower = lambda f: jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return dict(
        batch=b, q_len=t, kv_len=s, q_heads=n, kv_heads=k, head_dim=h, causal=causal,
        dtype=dtype, masked=masked, scale=1.0 / h ** 0.5,
        forward=custom_calls(lower(fwd)),
        gradient=custom_calls(lower(jax.grad(loss, argnums=(0, 1, 2)))),
    )


def main():
    cases = [case(*s) for s in SHAPES]
    with open(sys.argv[1], "w") as f:
        if ON_GPU:
            where = dict(device=jax.devices()[0].device_kind, cudnn_version=fa.check_cudnn_version())
        else:
            where = dict(cudnn_version_stand_in=91000)
        json.dump(dict(jax=jax.__version__, **where, cases=cases), f, indent=1)
    for c in cases:
        print(c["dtype"], c["q_heads"], c["kv_heads"], len(c["forward"]), len(c["gradient"]))


if __name__ == "__main__":
    main()
