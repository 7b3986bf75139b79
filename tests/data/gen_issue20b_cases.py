"""Issue 20 B's extra oracle cases, in the format of ../shared/oracle/jaxpr_real_cases.json:
jax.random.categorical, a top-1 mixture-of-experts router, split keys sliced apart then
uniform/fold_in/normal, jax.vmap of normal over keys (a key<fry>[4] array), more special
functions, argsort of integers and a 1-D top_k, logsumexp (is_finite) with exact GELU and
standardize (square).

Usage: python gen_issue20b_cases.py OUT.json   (made with JAX 0.10.1 on CPU, seed 0)
"""
import json, numpy as np, jax, jax.numpy as jnp
from jax import lax
R = jax.random
rng = np.random.default_rng(0)
def enc(a):
    a = np.asarray(a)
    dt = str(a.dtype)
    data = a.ravel().tolist()
    if a.dtype == np.bool_: data = [int(x) for x in data]
    return {"dtype": dt, "shape": list(a.shape), "data": data}
cases = []
def case(name, f, *args):
    jaxpr = str(jax.make_jaxpr(f)(*args))
    outs = f(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    cts = [np.asarray(rng.integers(-2, 3, size=np.shape(o)), dtype=np.float32) for o in outs]
    fl = [i for i, a in enumerate(args) if jnp.issubdtype(np.asarray(a).dtype, jnp.floating)]
    def loss(*xs):
        o = f(*xs); o = o if isinstance(o, tuple) else (o,)
        return sum((jnp.sum(oo * c) for oo, c in zip(o, cts) if jnp.issubdtype(oo.dtype, jnp.floating)), jnp.float32(0))
    grads = [None]*len(args)
    if fl and any(jnp.issubdtype(o.dtype, jnp.floating) for o in outs):
        g = jax.grad(loss, argnums=tuple(fl))(*args)
        for i, gi in zip(fl, g): grads[i] = np.asarray(gi).tolist()
    cases.append({"name": name, "jaxpr": jaxpr, "consts": [], "inputs": [enc(a) for a in args],
                  "outputs": [enc(o) for o in outs], "cotangents": [enc(c) for c in cts], "grads": grads})
key = np.asarray(R.PRNGKey(3))
x = rng.normal(size=(4, 6)).astype(np.float32)
case("categorical", lambda k, l: R.categorical(R.wrap_key_data(k), l), key, x)
def moe(x, w):
    logits = x @ w
    v, i = lax.top_k(logits, 1)
    gate = jax.nn.softmax(v, axis=-1)
    return gate * jax.nn.one_hot(i[:, 0], w.shape[1])[:, :1], i
case("moe_top1", moe, x, rng.normal(size=(6, 5)).astype(np.float32))
def split_uniform(k, s):
    k1, k2 = R.split(R.wrap_key_data(k))
    return R.uniform(k1, (3,)) * s + R.normal(R.fold_in(k2, 11), (3,))
case("split_uniform", split_uniform, key, np.float32(2.0))
case("vmap_normal", lambda ks: jax.vmap(lambda k: R.normal(R.wrap_key_data(k), (2,)))(ks), np.asarray(R.split(R.PRNGKey(1), 4)))
y = rng.uniform(0.2, 3.0, size=(3, 4)).astype(np.float32)
case("special_more", lambda a: (lax.digamma(a) + lax.asinh(a) + lax.acosh(a + 1) + jnp.arctan(a) + jnp.sinh(a) * jnp.cosh(a) + jnp.tan(a / 4) + jnp.cbrt(a) + jnp.square(a), lax.is_finite(jnp.log(a - 1))), y)
case("argsort_int_topk1d", lambda a, b: (jnp.argsort(b), jnp.sort(a, axis=0), lax.top_k(a[0], 2)[0]), x, rng.integers(0, 3, size=(7,)).astype(np.int32))
case("logsumexp_gelu", lambda a: (jax.nn.logsumexp(a, axis=1), jax.nn.gelu(a, approximate=False), jax.nn.standardize(a, axis=1)), x)
import sys
json.dump({"generator": f"jax {jax.__version__}", "cases": cases}, open(sys.argv[1], "w"), indent=1)
print(len(cases), "cases")
