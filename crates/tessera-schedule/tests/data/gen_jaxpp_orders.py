"""Writes jaxpp_orders.json: each actor's action list as JAXPP's own `tasks()` returns it.

The data behind crates/tessera-schedule/tests/jaxpp_orders.rs; see README.md next to this file for
the format. Generated against github.com/NVIDIA/jaxpp at commit
cf9e386248b0550c195d8cbde06d841c196e61f0 ("Update 26.05.01", package version 0.9.2).

How to run (any Python >= 3.10 with `jax` importable; jaxpp itself is not installed):

    git clone https://github.com/NVIDIA/jaxpp /tmp/jaxpp_src
    git -C /tmp/jaxpp_src checkout cf9e386248b0550c195d8cbde06d841c196e61f0
    python gen_jaxpp_orders.py /tmp/jaxpp_src > jaxpp_orders.json

Only `jaxpp/schedules.py` (and `jaxpp/types.py`, which it imports for `TaskType` and `MpmdIdx`)
is loaded: the package's `__init__` pulls in its whole API, so we register an empty `jaxpp`
package pointing at the source folder instead of running it. Nothing is stubbed.
"""

import json
import sys
import types


def load_schedules(jaxpp_root):
    package = types.ModuleType("jaxpp")
    package.__path__ = [f"{jaxpp_root}/src/jaxpp"]
    sys.modules["jaxpp"] = package
    import jaxpp.schedules as schedules

    return schedules


LETTER = {"FWD": "F", "BWD": "B", "BWD_I": "I", "BWD_W": "W"}


def task_text(task):
    return f"{LETTER[task.fwd_or_bwd.name]}{task.stage_id}:{task.mubatch_idx}"


def action_text(schedules, action):
    if isinstance(action, schedules.FusedTask):
        return "(" + "+".join(task_text(t) for t in action) + ")"
    return task_text(action)


def cases(s):
    """(name, stages, mpmd_dim, constructor) for every shared schedule and parameter set."""
    for stages in range(1, 9):
        yield "gpipe", stages, stages, lambda st=stages: s.GPipe(st)
        yield "1f1b", stages, stages, lambda st=stages: s.Std1F1B(st)
        yield "eager-1f1b", stages, stages, lambda st=stages: s.Eager1F1B(st)
        yield "zero-bubble", stages, stages, lambda st=stages: s.ZeroBubble(st)
        for mpmd_dim in range(1, stages + 1):
            for name, cls, fuse in [
                ("interleaved-1f1b", s.Interleaved1F1B, False),
                ("interleaved-1f1b-fused", s.Interleaved1F1B, True),
                ("kimi-k2", s.KimiK2, False),
                ("kimi-k2-fused", s.KimiK2, True),
            ]:
                yield name, stages, mpmd_dim, (
                    lambda c=cls, st=stages, d=mpmd_dim, f=fuse: c(st, d, fuse_steady_state=f)
                )
            yield "dualpipev", stages, mpmd_dim, (
                lambda st=stages, d=mpmd_dim: s.DualPipeV(st, d)
            )


def main():
    s = load_schedules(sys.argv[1])
    out = []
    for name, stages, mpmd_dim, make in cases(s):
        for microbatches in range(1, 17):
            case = {"schedule": name, "stages": stages, "mpmd_dim": mpmd_dim,
                    "microbatches": microbatches}
            try:
                lists = make().tasks(microbatches)
                case["actors"] = [
                    [action_text(s, a) for a in s.strip_nones(actor)] for actor in lists
                ]
            except Exception as e:  # JAXPP refuses with ValueError, AssertionError, ...
                case["refused"] = f"{type(e).__name__}: {e}"
            out.append(case)
    sys.stdout.write("[\n")
    sys.stdout.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in out))
    sys.stdout.write("\n]\n")


if __name__ == "__main__":
    main()
