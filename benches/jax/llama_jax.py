"""JAX's half of the "Llama train step, 1 device" rows of `cargo xtask bench --compare-jax`.

The byte-level Llama of Tessera's model library (crates/tessera-nn/src/decoder.rs and
layers.rs), written again in plain JAX, layer for layer:
  - vocabulary 256 (bytes), token embedding only (no positions), std 0.02;
  - each block: h += attn(rms_norm(h)); h += swiglu(rms_norm(h)); RMSNorm with a gain, eps 1e-5;
  - attention without biases: one `qkv` matrix [d, 3d] whose columns are grouped head-major
    ([heads, 3, d/heads]: head i's query, key and value side by side), rotary embeddings on the
    query and key (base 10000, the two halves of each head rotated: x cos + rotate_half(x) sin),
    scores scaled by 1/sqrt(d/heads), causal mask by -1e9, softmax, then `out` [d, d];
  - SwiGLU MLP without biases: down(silu(x gate) * (x up)), hidden width
    ceil(8 d / 3) rounded up to a multiple of 8;
  - a final RMSNorm and an untied head [d, 256] (std 0.02); the other weights start with std
    1/sqrt(fan_in), the gains at 1;
  - loss: the mean cross-entropy of each next byte;
  - `--dtype bf16` is Tessera's `--dtype bf16` (mixed precision): every parameter is cast to
    bfloat16 where it is used (so its gradient is float32), matmuls and activations are
    bfloat16, and the norms, the attention softmax, the logits' log-softmax and the loss are
    float32.
The step is `jax.jit` of value_and_grad and `optax.adamw` (b1 0.9, b2 0.999, eps 1e-8, weight
decay 1e-4, Tessera's `AdamW::default()`) as one program, parameters and optimizer state donated.
Without optax installed, the same AdamW is written out here (`optimizer` in the JSON says which).

The data are the windows Tessera's `ByteCorpus` cuts from a file (the first 90 % of its bytes;
row r of step s starts at byte ((s * batch + r) * seq_len) mod (len - seq_len)), so both sides
see the same batches. Parameters start from another generator than Tessera's (same
distributions), so the two runs' losses agree only roughly; `--check DIR` compares exactly:
it loads Tessera's checkpoint of step 1 (`tessera train --checkpoint-dir DIR --checkpoint-every
1 --steps 3`), computes the loss of step 2 and applies one update from Tessera's optimizer state,
and reports both losses against Tessera's (`--tessera-losses`).

Prints one JSON object to stdout; everything else goes to stderr. Step times are the wall time
of one call, from handing it the batch already on the device to holding the loss on the host
(the next batch's upload overlapping the step, as in Tessera's `step_wall_ms`); the first step
(compilation) is reported apart.
"""

import argparse
import json
import math
import os
import platform
import statistics
import struct
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402

try:
    import optax  # noqa: E402
except ImportError:  # a GPU machine without network may have JAX but not optax
    optax = None

VOCAB = 256
EPS = 1e-5
ROPE_BASE = 10000.0
EVAL_FRACTION = 0.1
ADAMW = {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 1e-4}


def ffn_width(d_model):
    """Tessera's Llama hidden width: about 8 d / 3, rounded up to a multiple of 8."""
    return ((8 * d_model + 2) // 3 + 7) // 8 * 8


def param_shapes(cfg):
    """Name -> (shape, initial std or 'ones'), named as Tessera's checkpoints name them."""
    d, f, vocab = cfg["d_model"], cfg["ffn"], cfg["vocab"]
    heads, kv = cfg["heads"], cfg["kv_heads"]
    dh = d // heads
    # Tessera's qkv columns: per key/value head, its query heads, its key, its value.
    qkv = kv * (heads // kv + 2) * dh
    shapes = {"embed.tokens.table": ((vocab, d), 0.02)}
    for i in range(cfg["layers"]):
        b = f"blocks.{i}"
        shapes[f"{b}.norm1.gain"] = ((d,), "ones")
        shapes[f"{b}.attn.qkv.w"] = ((d, qkv), d**-0.5)
        shapes[f"{b}.attn.out.w"] = ((heads * dh, d), (heads * dh) ** -0.5)
        shapes[f"{b}.norm2.gain"] = ((d,), "ones")
        shapes[f"{b}.mlp.gate.w"] = ((d, f), d**-0.5)
        shapes[f"{b}.mlp.up.w"] = ((d, f), d**-0.5)
        shapes[f"{b}.mlp.down.w"] = ((f, d), f**-0.5)
    shapes["final_norm.gain"] = ((d,), "ones")
    shapes["head.w"] = ((d, vocab), 0.02)
    return shapes


def init_params(cfg, seed):
    key = jax.random.PRNGKey(seed)
    params = {}
    for name, (shape, std) in param_shapes(cfg).items():
        if std == "ones":
            params[name] = jnp.ones(shape, jnp.float32)
        else:
            key, sub = jax.random.split(key)
            params[name] = jax.random.normal(sub, shape, jnp.float32) * std
    return params


def rms_norm(x, gain):
    """In float32 whatever x's dtype, returned in x's dtype (Tessera's RmsNorm)."""
    dtype = x.dtype
    x = x.astype(jnp.float32)
    return (x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * gain).astype(dtype)


def rotary(x):
    """x: [batch, heads, seq, head_dim]; the two halves of each head rotated."""
    t, dh = x.shape[2], x.shape[3]
    half = dh // 2
    inv_freq = ROPE_BASE ** (-2.0 * jnp.arange(half, dtype=jnp.float32) / dh)
    angle = jnp.arange(t, dtype=jnp.float32)[:, None] * jnp.concatenate([inv_freq, inv_freq])
    x1, x2 = x[..., :half], x[..., half:]
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return x * jnp.cos(angle).astype(x.dtype) + rotated * jnp.sin(angle).astype(x.dtype)


def attention(p, b, x, heads, kv_heads, kernel="xla"):
    batch, t, d = x.shape
    dh, g = d // heads, heads // kv_heads
    qkv = (x @ p[f"{b}.attn.qkv.w"]).reshape(batch, t, kv_heads, g + 2, dh)
    q = qkv[:, :, :, :g].reshape(batch, t, heads, dh).transpose(0, 2, 1, 3)
    k, v = (qkv[:, :, :, g + i].transpose(0, 2, 1, 3) for i in range(2))
    q, k = rotary(q), rotary(k)
    if kernel == "cudnn":
        # What a JAX user at long sequences writes: cuDNN's fused flash attention ([b, t, n, h]).
        bt = lambda a: a.transpose(0, 2, 1, 3)
        out = jax.nn.dot_product_attention(
            bt(q), bt(k), bt(v), is_causal=True, implementation="cudnn")
        return out.reshape(batch, t, heads * dh) @ p[f"{b}.attn.out.w"]
    # Each key/value head serves its `g` query heads (transformers' repeat_kv).
    k, v = jnp.repeat(k, g, axis=1), jnp.repeat(v, g, axis=1)
    scores = (jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(dh)).astype(jnp.float32)
    causal = jnp.tril(jnp.ones((t, t), jnp.bool_))
    weights = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1).astype(v.dtype)
    out = jnp.einsum("bhqk,bhkd->bhqd", weights, v).transpose(0, 2, 1, 3)
    out = out.reshape(batch, t, heads * dh)
    return out @ p[f"{b}.attn.out.w"]


def swiglu(p, b, x):
    hidden = jax.nn.silu(x @ p[f"{b}.mlp.gate.w"]) * (x @ p[f"{b}.mlp.up.w"])
    return hidden @ p[f"{b}.mlp.down.w"]


def remat_policy(name):
    """`jax.checkpoint`'s policy of Tessera's `--remat NAME` (None: no checkpoint, the default)."""
    if name in (None, "everything_saveable"):
        return None
    return getattr(jax.checkpoint_policies, name)


def block(p, b, h, cfg):
    h = h + attention(p, b, rms_norm(h, p[f"{b}.norm1.gain"]), cfg["heads"],
                      cfg["kv_heads"], cfg.get("attention", "xla"))
    return h + swiglu(p, b, rms_norm(h, p[f"{b}.norm2.gain"]))


def loss_fn(p, tokens, targets, cfg):
    compute = jnp.bfloat16 if cfg.get("dtype") == "bf16" else jnp.float32
    p = {name: x.astype(compute) for name, x in p.items()}
    h = jnp.take(p["embed.tokens.table"], tokens, axis=0)
    policy = remat_policy(cfg.get("remat"))
    for i in range(cfg["layers"]):
        b = f"blocks.{i}"
        # Each decoder block one checkpoint region under the policy, as Tessera's one-program
        # step applies --remat (StagePlan::with_block_remat).
        if policy is None:
            h = block(p, b, h, cfg)
        else:
            h = jax.checkpoint(lambda p, h, b=b: block(p, b, h, cfg), policy=policy)(p, h)
    logits = (rms_norm(h, p["final_norm.gain"]) @ p["head.w"]).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


class PlainAdamW:
    """optax.adamw's arithmetic, for a JAX without optax: state (count, mu, nu)."""

    def __init__(self, lr):
        self.lr = lr

    def init(self, params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return (jnp.zeros([], jnp.int32), zeros, jax.tree_util.tree_map(jnp.zeros_like, params))

    def update(self, grads, state, params):
        count, mu, nu = state
        b1, b2, eps, wd = ADAMW["b1"], ADAMW["b2"], ADAMW["eps"], ADAMW["weight_decay"]
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, mu, grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, grads)
        count = count + 1
        c1 = 1 - b1 ** count.astype(jnp.float32)
        c2 = 1 - b2 ** count.astype(jnp.float32)
        updates = jax.tree_util.tree_map(
            lambda m, v, p: -self.lr * ((m / c1) / (jnp.sqrt(v / c2) + eps) + wd * p),
            mu,
            nu,
            params,
        )
        return updates, (count, mu, nu)


def make_optimizer(lr):
    if optax is None:
        return PlainAdamW(lr), "adamw written in JAX (optax is not installed)"
    return optax.adamw(lr, **ADAMW), f"optax.adamw (optax {optax.__version__})"


def apply_updates(params, updates):
    return jax.tree_util.tree_map(lambda p, u: p + u, params, updates)


def make_step(cfg, opt):
    def step(params, opt_state, tokens, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets, cfg)
        updates, opt_state = opt.update(grads, opt_state, params)
        return apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(0, 1))


def with_adam_state(opt_state, count, mu, nu):
    """`opt_state` with its Adam moments and count replaced (optax's or PlainAdamW's)."""
    if optax is None:
        return (jnp.asarray(count, jnp.int32), mu, nu)
    adam = opt_state[0]._replace(count=jnp.asarray(count, jnp.int32), mu=mu, nu=nu)
    return (adam,) + tuple(opt_state[1:])


class Corpus:
    """Tessera's ByteCorpus, training part: windows of seq_len + 1 bytes."""

    def __init__(self, path, seq_len):
        data = open(path, "rb").read()
        held_out = int(len(data) * EVAL_FRACTION)
        self.train = np.frombuffer(data[: len(data) - held_out], np.uint8).astype(np.int32)
        self.seq = seq_len
        if len(self.train) < seq_len + 1:
            sys.exit(f"llama_jax.py: {path} is shorter than one window of {seq_len + 1} bytes")

    def batch(self, step, rows):
        starts = len(self.train) - (self.seq + 1) + 1
        windows = []
        for r in range(rows):
            start = ((step * rows + r) * self.seq) % starts
            windows.append(self.train[start : start + self.seq + 1])
        w = np.stack(windows)
        return w[:, :-1], w[:, 1:]


def read_safetensors(path):
    """name -> float32 array, from a safetensors file (header length, JSON header, data)."""
    raw = open(path, "rb").read()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"llama_jax.py: {path}: {name} is {info['dtype']}, not F32")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], np.float32).reshape(info["shape"])
    return out


def run_check(cfg, args, corpus, opt, step):
    """Tessera's step-1 checkpoint -> JAX's step-2 loss and one update -> its step-3 loss."""
    folder = os.path.join(args.check, "step-00000001")
    params = read_safetensors(os.path.join(folder, "params.safetensors"))
    state = read_safetensors(os.path.join(folder, "optimizer.safetensors"))
    expected = set(param_shapes(cfg))
    if set(params) != expected:
        sys.exit(
            "llama_jax.py: the checkpoint's parameters are not this model's: only in the "
            f"checkpoint {sorted(set(params) - expected)}, only here {sorted(expected - set(params))}"
        )
    params = {k: jnp.asarray(v) for k, v in params.items()}
    mu = {k: jnp.asarray(state[f"mu.{k}"]) for k in params}
    nu = {k: jnp.asarray(state[f"nu.{k}"]) for k in params}
    count = int(round(float(state["count"])))
    opt_state = with_adam_state(opt.init(params), count, mu, nu)
    tokens, targets = corpus.batch(1, args.batch)
    params, opt_state, loss2 = step(params, opt_state, tokens, targets)
    tokens, targets = corpus.batch(2, args.batch)
    loss3 = loss_fn(params, tokens, targets, cfg)
    return {"step_2_loss": float(loss2), "step_3_loss": float(loss3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--d-model", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", required=True, help="the byte corpus (Tessera's --data)")
    parser.add_argument("--check", help="a Tessera checkpoint directory holding step-00000001")
    parser.add_argument(
        "--dtype",
        choices=["f32", "bf16"],
        default="f32",
        help="the compute dtype (Tessera's --dtype): bf16 is mixed precision",
    )
    parser.add_argument("--kv-heads", type=int, help="key/value heads (default: --heads)")
    parser.add_argument("--vocab", type=int, default=VOCAB, help="token ids (default 256: bytes)")
    parser.add_argument("--ffn", type=int, help="the SwiGLU width (default: Tessera's)")
    parser.add_argument(
        "--attention",
        choices=["xla", "cudnn"],
        default="xla",
        help="the attention: the plain program (xla) or jax.nn.dot_product_attention's cuDNN kernel",
    )
    parser.add_argument(
        "--remat",
        choices=["everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
                 "nothing_saveable"],
        default="everything_saveable",
        help="each decoder block under jax.checkpoint with this policy (Tessera's --remat); "
             "everything_saveable: no checkpoint",
    )
    parser.add_argument(
        "--dump-hlo",
        metavar="FILE",
        help="write XLA's optimized program of the train step (its HLO text) to FILE",
    )
    args = parser.parse_args()
    if args.d_model % args.heads or (args.d_model // args.heads) % 2:
        sys.exit("llama_jax.py: heads must divide d_model into an even head width")
    cfg = {"layers": args.layers, "d_model": args.d_model, "heads": args.heads, "dtype": args.dtype,
           "attention": args.attention, "kv_heads": args.kv_heads or args.heads,
           "remat": args.remat,
           "vocab": args.vocab, "ffn": args.ffn or ffn_width(args.d_model)}
    if args.heads % cfg["kv_heads"]:
        sys.exit("llama_jax.py: --kv-heads must divide --heads")

    device = jax.devices()[0]
    corpus = Corpus(args.data, args.seq_len)
    opt, optimizer = make_optimizer(args.lr)
    step = make_step(cfg, opt)
    out = {
        "versions": {
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "python": platform.python_version(),
        },
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "optimizer": optimizer,
        "remat": args.remat,
        "model": {
            "layers": args.layers,
            "d_model": args.d_model,
            "heads": args.heads,
            "seq_len": args.seq_len,
            "ffn": cfg["ffn"],
            "kv_heads": cfg["kv_heads"],
            "vocab": cfg["vocab"],
            "batch": args.batch,
            "dtype": "float32" if args.dtype == "f32" else "bfloat16 compute, float32 parameters",
        },
        "parameters": sum(math.prod(s) for s, _ in param_shapes(cfg).values()),
    }
    if args.check:
        out["check"] = run_check(cfg, args, corpus, opt, step)
    else:
        params = init_params(cfg, args.seed)
        opt_state = opt.init(params)
        jax.block_until_ready((params, opt_state))
        if args.dump_hlo:
            tokens, targets = corpus.batch(0, args.batch)
            with open(args.dump_hlo, "w") as f:
                f.write(step.lower(params, opt_state, tokens, targets).compile().as_text())
        losses, step_s = [], []
        # Each step's batch is on the device when its timer starts, as Tessera's (its helper
        # thread uploads the next batch while a step runs): the next batch is cut on the host
        # before the timer and handed to `jax.device_put` (asynchronous) after the step is
        # dispatched, so its upload overlaps the step.
        on_device = jax.device_put(corpus.batch(0, args.batch), device)
        jax.block_until_ready(on_device)
        for s in range(args.steps):
            tokens, targets = on_device
            following = corpus.batch(s + 1, args.batch)
            began = time.perf_counter()
            params, opt_state, loss = step(params, opt_state, tokens, targets)
            on_device = jax.device_put(following, device)
            loss = float(loss)
            step_s.append(time.perf_counter() - began)
            losses.append(loss)
        settled = step_s[1:] if len(step_s) > 1 else step_s
        median = statistics.median(settled)
        out.update(
            {
                "losses": losses,
                "step_s": step_s,
                "first_step_s": step_s[0],
                "median_step_s": median,
                "tokens_per_second": args.batch * args.seq_len / median,
            }
        )
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
