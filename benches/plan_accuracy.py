#!/usr/bin/env python3
"""Accuracy of `tessera plan`: for a model, picks candidates of different shapes from the
ranking, trains each with `tessera train --plan FILE` and prints predicted against measured step
time and peak bytes per device (the table in docs/benchmarks.md).

    python3 benches/plan_accuracy.py target/release/tessera --model gpt [--count 6] [--steps 8] \
        [--rounds 3]

With `--rounds R` every candidate trains R times, the candidates taking turns (round 1 of each,
then round 2 of each, ...), so a change of the machine's load during the run falls on all of
them alike; the table shows the median of the rounds and their range.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cmd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tessera")
    p.add_argument("--count", type=int, default=6)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1)
    args, model = p.parse_known_args()
    # Every layout's stages measured as they run (`--refine`), as the first ten are by default.
    ranking = run([args.tessera, "plan", *model, "--json", "--top", "1000", "--refine", "1000"])
    first = ranking["first"]
    # Candidates of different shapes: the first, then the first of each (groups, stages,
    # micro-batches) not seen yet, alternating between the fastest and the slowest ends.
    picked, seen = [], set()
    top = ranking["top"]
    # The first of each group count, the first split-backward schedule, then alternately the
    # fastest and the slowest of the rest.
    firsts = []
    for c in top:
        if all(f["groups"] != c["groups"] for f in firsts):
            firsts.append(c)
    firsts += [c for c in top if c["schedule"].startswith(("zero-bubble", "dualpipev"))][:1]
    order = firsts + [c for pair in zip(top, reversed(top)) for c in pair]
    for c in order:
        shape = (c["groups"], c["stages"], c["microbatches"])
        if shape in seen:
            continue
        seen.add(shape)
        picked.append(c)
        if len(picked) == args.count:
            break
    paths = []
    runs = [[] for _ in picked]
    with tempfile.TemporaryDirectory() as tmp:
        for i, c in enumerate(picked):
            plan = dict(first)
            plan.update(
                devices=c["devices"], stages=c["stages"], stage_layers=c["stage_layers"],
                mpmd_dim=c["groups"], microbatches=c["microbatches"], schedule=c["schedule"],
                predicted_step_ms=c["step_seconds"] * 1000.0,
                predicted_peak_bytes=c["peak_bytes"],
                predicted_peak_bytes_per_group=c["peak_bytes_per_group"], command="",
                no_fuse=c["groups"] == 1)
            path = os.path.join(tmp, f"plan{i}.json")
            with open(path, "w") as f:
                json.dump(plan, f)
            paths.append(path)
        for _ in range(args.rounds):
            for i, path in enumerate(paths):
                runs[i].append(run([args.tessera, "train", "--plan", path, "--steps",
                                    str(args.steps), "--no-reference", "--eval-every", "0",
                                    "--json"]))
    rows = list(zip(picked, runs))
    print("| groups × devices | stages (layers) | micro-batches | schedule | predicted ms | "
          "measured ms | measured / predicted | predicted bytes | measured bytes | "
          "measured / predicted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c, ss in rows:
        s = ss[0]
        times = sorted(r["plan_measured_step_ms"] for r in ss)
        pt, mt = s["plan_predicted_step_ms"], statistics.median(times)
        spread = f" ({times[0]:.1f}–{times[-1]:.1f})" if len(times) > 1 else ""
        pb, mb = s["plan_predicted_peak_bytes"], s["plan_measured_peak_bytes"]
        layers = ",".join(str(x) for x in c["stage_layers"])
        bytes_ratio = f"{mb / pb:.2f}×" if mb else "– (one program)"
        print(f"| {c['groups']} × {c['data']} | {c['stages']} ({layers}) | {c['microbatches']} | "
              f"{c['schedule']} | {pt:.1f} | {mt:.1f}{spread} | {mt / pt:.2f}× | {pb} | "
              f"{mb if mb else '–'} | {bytes_ratio} |")


if __name__ == "__main__":
    main()
