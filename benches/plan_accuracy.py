#!/usr/bin/env python3
"""Accuracy of `tessera plan` as users run it (its default `--refine`), on fixed presets.

    python3 benches/plan_accuracy.py target/release/tessera --preset gpt [--rounds 3] \
        [--steps 10] [--out docs/runs/cpu-plan-gpt.json]

For a preset, ranks every layout with the default `tessera plan` (`--top 1000`, and a cache
of its own, so that the costs are measured now by this build), then trains with `tessera train
--plan FILE`:
  - the 7 candidates the plan ranks first: how many measure within 15% of their predicted step
    (and how many of those the plan did not time itself: its calibration trains the fastest
    layouts of each leading group shape and the near ties of its first, and a layout it timed
    is predicted from its timings:
    the 3 leading ones by 2 more taken after the ranking, the others by theirs scaled to the
    machine's speed those 2 measured);
  - the layouts whose predicted step is within 1.5x of the first choice's (every layout when the
    plan considered fewer than 30): the planner's regret is its first choice's measured step
    over the best measured step among them, minus one. The fastest of many noisy medians is
    biased low (among hundreds of near ties, the one whose rounds happened to run fast wins), so
    the first choice and the 3 layouts that measured fastest are measured again, in
    `--confirm-rounds` fresh rounds taking turns (7: one process's step spreads by 5-10% here,
    and a median of 3 could not tell a 5% regret from a tie), and the regret is taken from those
    rounds ("confirmed"); the regret over the first rounds alone is kept beside it.
Every candidate trains `--rounds` times, the candidates taking turns (round 1 of each, then
round 2 of each, ...), so a change of the machine's load falls on all of them alike, and each
round starts one candidate further along than the last (round r runs candidate r first, then
the rest in order, wrapping around), so no candidate always trains right after the same one or
always first; a candidate's figure is the median of its rounds. The load average is kept at
the start and end of each round. It cannot see the host's other work on a shared machine, so
four more checks of the machine's speed are kept:
  - a fixed single-threaded probe that does not run Tessera (`probe()`), timed before and after
    the plan and at the start of each round (`probe_ms`);
  - the steady-host rule, fixed before the runs it judges: every training after the plan starts
    only once the probe (timed right before it) is within 20% of the probe right after the plan
    (`GATE`), the moment nearest the plan's own timings that the predictions come from; while it
    is not, the probe is timed again (the host stays busy, as during the plan), for at most 60 s
    (`GATE_WAIT_S`), after which the training starts anyway and counts as started outside. Each
    training's probe is kept (`rounds_probe_ms`) and each round's waits (`gate`); no training is
    dropped, the rule only chooses when it starts;
  - each of the first 7 that the plan timed itself trains once more right after the plan
    (`after_plan_ms`: does the plan's own timing repeat a minute later?);
  - the rendered section gives each round's pace (its steps over each layout's median, the
    median over the round's layouts: a drift between rounds) and each round's steps over those
    trained right after the plan (the median over the layouts the plan timed: a drift between
    the plan and the rounds, which no prediction can foresee).

The presets are fixed in PRESETS. `gpt` and `llama` are the ones the planner's time model was
tuned on (8 devices, the models' default sizes); `gpt-held-out` and `llama-held-out` were fixed
before any change to the model was judged on them, with sizes and device counts never used to
tune it. With `--out FILE` the run is written as a `docs/runs/` file (xtask/src/runs.rs) from
which `cargo xtask bench --render` draws its section of docs/benchmarks.md.
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# name -> (tessera plan/train arguments, held out from the time model's tuning)
PRESETS = {
    "gpt": (["--model", "gpt"], False),
    "llama": (["--model", "llama"], False),
    "gpt-held-out": (
        ["--model", "gpt", "--layers", "6", "--d-model", "96", "--heads", "6", "--seq-len", "48",
         "--batch", "48", "--devices", "6"],
        True,
    ),
    "llama-held-out": (
        ["--model", "llama", "--layers", "3", "--d-model", "128", "--heads", "4", "--seq-len",
         "64", "--batch", "32", "--devices", "4"],
        True,
    ),
}
TOP = 7
WITHIN = 0.15
REGRET_BAND = 1.5
ALL_BELOW = 30
CONFIRM = 3
PROBE_BYTES = 64 << 20
GATE = 0.2
GATE_WAIT_S = 60.0


def run(cmd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def probe():
    """Milliseconds of a fixed single-threaded workload (SHA-256 of 64 MiB, then a copy of it),
    the median of 3: the host's speed, independent of Tessera, at one moment."""
    data = bytes(range(256)) * (PROBE_BYTES // 256)
    times = []
    for _ in range(3):
        started = time.perf_counter()
        hashlib.sha256(data).digest()
        bytearray(data)
        times.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(times)


def new_gate():
    return {"trainings": 0, "waited": 0, "waited_s": 0.0, "outside": 0}


def steady(reference, gate):
    """Waits, probing, until the host runs within GATE of `reference` (at most GATE_WAIT_S);
    counts the wait in `gate` and returns the last probe's milliseconds."""
    def outside(ms):
        return abs(ms / reference - 1) > GATE
    ms, started, tries = probe(), time.time(), 1
    while outside(ms) and time.time() - started < GATE_WAIT_S:
        ms, tries = probe(), tries + 1
    gate["trainings"] += 1
    gate["waited"] += tries > 1
    gate["waited_s"] += time.time() - started
    gate["outside"] += outside(ms)
    return ms


def train(tessera, path, steps, reference, gate):
    """One `tessera train --plan` once the host is steady: (its step in ms, the probe before)."""
    ms = steady(reference, gate)
    s = run([tessera, "train", "--plan", path, "--steps", str(steps), "--no-reference",
             "--eval-every", "0", "--json"])
    return s["plan_measured_step_ms"], ms


def turns(items, r):
    """`items` in the order of round `r`: starting `r` places along, wrapping around."""
    start = r % len(items)
    return items[start:] + items[:start]


def key(c):
    return (c["groups"], c["stages"], tuple(c["stage_layers"]), c["microbatches"], c["schedule"],
            c.get("remat"), c.get("fsdp_gather"))


def plan_file(first, c, folder, i):
    plan = dict(first)
    plan.update(
        devices=c["devices"], stages=c["stages"], stage_layers=c["stage_layers"],
        mpmd_dim=c["groups"], microbatches=c["microbatches"], schedule=c["schedule"],
        predicted_step_ms=c["step_seconds"] * 1000.0, predicted_peak_bytes=c["peak_bytes"],
        predicted_peak_bytes_per_group=c["peak_bytes_per_group"], command="",
        no_fuse=c["groups"] == 1)
    # A candidate's own remat policy and FSDP gather mode (the plan searches them), absent in
    # older rankings and in plans without --fsdp.
    for field in ("remat", "fsdp_gather"):
        plan.pop(field, None)
        if c.get(field):
            plan[field] = c[field]
    path = os.path.join(folder, f"plan{i}.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    return path


def meta():
    def git(*args):
        out = subprocess.run(["git", *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None
    status = git("status", "--porcelain", "--untracked-files=no")
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                     "unknown CPU")
    return {
        "commit": git("rev-parse", "--short=10", "HEAD"),
        "uncommitted_changes": None if status is None else bool(status),
        "machine": f"{model}, {os.cpu_count()} CPUs (nproc)",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_at_end": load_average(),
        "plugin": "the default CPU plugin",
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tessera")
    p.add_argument("--preset", choices=sorted(PRESETS), required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--confirm-rounds", type=int, default=7)
    p.add_argument("--out", help="write the run as a docs/runs/ file")
    args = p.parse_args()
    preset, held_out = PRESETS[args.preset]

    # A cache of its own: the costs are measured by this build on this machine now, as a
    # user's first `tessera plan` measures them (a shared cache may hold another build's, or
    # costs measured while the machine was busy).
    cache = tempfile.mkdtemp(prefix="plan-accuracy-")
    probes = {"before_plan": probe()}
    started = time.time()
    ranking = run([args.tessera, "plan", *preset, "--json", "--top", "1000", "--cache", cache])
    plan_seconds = time.time() - started
    probes["after_plan"] = probe()
    shutil.rmtree(cache, ignore_errors=True)
    top = ranking["top"]
    first = top[0]
    band = [c for c in top if c["step_seconds"] <= REGRET_BAND * first["step_seconds"]]
    considered = top if len(top) < ALL_BELOW else band
    measured, seen = [], set()
    for c in top[:TOP] + considered:
        if key(c) not in seen:
            seen.add(key(c))
            measured.append(c)
    rounds, probes_at, loads = [[] for _ in measured], [[] for _ in measured], []
    after_plan = {}
    reference = probes["after_plan"]
    with tempfile.TemporaryDirectory() as tmp:
        paths = [plan_file(ranking["first"], c, tmp, i) for i, c in enumerate(measured)]
        gate = new_gate()
        for i, c in enumerate(measured):
            if top.index(c) < TOP and c.get("timed_step_ms") is not None:
                print(f"plan_accuracy: {args.preset}: right after the plan: candidate {i + 1}",
                      file=sys.stderr)
                after_plan[i], _ = train(args.tessera, paths[i], args.steps, reference, gate)
        after_plan_gate = gate
        for r in range(args.rounds):
            at_start, at_start_probe, gate = load_average(), probe(), new_gate()
            for i in turns(list(range(len(paths))), r):
                print(f"plan_accuracy: {args.preset}: round {r + 1}/{args.rounds}: candidate "
                      f"{i + 1}/{len(paths)}", file=sys.stderr)
                step, ms = train(args.tessera, paths[i], args.steps, reference, gate)
                rounds[i].append(step)
                probes_at[i].append(ms)
            loads.append({"start": at_start, "end": load_average(), "probe_ms": at_start_probe,
                          "gate": gate})
        first_at = next(i for i, c in enumerate(measured) if c is first)
        fastest = sorted(range(len(measured)), key=lambda i: statistics.median(rounds[i]))
        finalists = [first_at] + [i for i in fastest if i != first_at][:CONFIRM]
        confirmed = {i: [] for i in finalists}
        for r in range(args.confirm_rounds):
            at_start, at_start_probe, gate = load_average(), probe(), new_gate()
            for i in turns(finalists, r):
                print(f"plan_accuracy: {args.preset}: confirming, round "
                      f"{r + 1}/{args.confirm_rounds}: candidate {i + 1}", file=sys.stderr)
                step, _ = train(args.tessera, paths[i], args.steps, reference, gate)
                confirmed[i].append(step)
            loads.append({"start": at_start, "end": load_average(), "probe_ms": at_start_probe,
                          "confirming": True, "gate": gate})
    candidates = []
    for i, (c, times) in enumerate(zip(measured, rounds)):
        candidates.append({
            "rank": top.index(c) + 1, "groups": c["groups"], "data": c["data"],
            "stages": c["stages"], "stage_layers": c["stage_layers"],
            "microbatches": c["microbatches"], "schedule": c["schedule"],
            "remat": c.get("remat"), "fsdp_gather": c.get("fsdp_gather"),
            "predicted_ms": c["step_seconds"] * 1000.0, "rounds_ms": times,
            # The probe right before each of those rounds' trainings (the steady-host rule).
            "rounds_probe_ms": probes_at[i],
            # What the plan's calibration did to it: its factor, and its own step where the plan
            # timed it (its prediction is then that measurement).
            "calibration": c.get("calibration"), "timed_by_plan_ms": c.get("timed_step_ms"),
            "measured_ms": statistics.median(times),
            "confirmed_rounds_ms": confirmed.get(i),
            # Trained once right after the plan, where the plan timed it.
            "after_plan_ms": after_plan.get(i),
        })
    firsts = [c for c in candidates if c["rank"] <= TOP]
    within = sum(abs(c["measured_ms"] / c["predicted_ms"] - 1) <= WITHIN for c in firsts)
    untimed = [c for c in firsts if c["timed_by_plan_ms"] is None]
    within_untimed = sum(abs(c["measured_ms"] / c["predicted_ms"] - 1) <= WITHIN for c in untimed)
    chosen = next(c for c in candidates if c["rank"] == 1)
    best = min(c["measured_ms"] for c in candidates)
    finals = {i: statistics.median(t) for i, t in confirmed.items()}
    data = {
        "preset": args.preset, "arguments": preset, "held_out": held_out,
        "plan_command": f"tessera plan {' '.join(preset)} --json --top 1000 --cache EMPTY_DIR",
        "plan_seconds": plan_seconds, "layouts_considered": len(top),
        "steps": args.steps, "rounds": args.rounds, "order": "rotating",
        "confirm_rounds": args.confirm_rounds, "load_average": loads,
        # The fixed probe before and after the plan (each round's is with its load average).
        "probe_ms": probes,
        # The steady-host rule: a training starts once the probe is within `within` of the
        # probe after the plan, waiting at most `wait_s` (each round's waits are with its load
        # average; the trainings right after the plan's here).
        "gate": {"within": GATE, "wait_s": GATE_WAIT_S, "after_plan": after_plan_gate},
        "candidates": candidates, "within_15_percent": within, "of": len(firsts),
        "within_15_percent_untimed": within_untimed, "of_untimed": len(untimed),
        "regret_unconfirmed": chosen["measured_ms"] / best - 1,
        "regret": finals[first_at] / min(finals.values()) - 1,
        "confirmed": len(finals),
    }
    if args.out:
        # The preset's section of docs/benchmarks.md, wherever the file is written first.
        name = f"cpu-plan-{args.preset}"
        # The commit's state before the run file is opened (opening it changes a tracked file).
        record = {"benchmark": name, "meta": meta(), "data": data}
        with open(args.out, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
    print(f"{args.preset}: {within} of {len(firsts)} within 15%, regret "
          f"{data['regret'] * 100:.1f}% confirmed ({data['regret_unconfirmed'] * 100:.1f}% over "
          f"the first rounds) over {len(candidates)} measured layouts")


if __name__ == "__main__":
    main()
