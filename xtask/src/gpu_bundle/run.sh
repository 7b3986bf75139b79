#!/usr/bin/env bash
# Tessera's GPU bundle, made by `cargo xtask gpu-bundle DIR` on a machine that builds Tessera, for
# a machine that has a GPU, its driver and JAX but neither MLIR nor a network. It runs, with the
# PJRT plugin --plugin names (default cuda; cpu runs it all on the CPU):
#   0. `tessera check attention`: cuDNN's attention against the decomposition on 12 shapes,
#      and JAX's own cuDNN lowering captured as the fixture of Tessera's (a GPU only);
#   1. the Llama train step on one device, Tessera (`tessera train`) against the machine's own JAX
#      (jax/llama_jax.py: jax.jit of value_and_grad + AdamW), alternating, as tokens/s, after
#      checking that both train the same model (JAX started from Tessera's checkpoint gives
#      Tessera's next two losses);
#   2. `tessera oracle jaxpr FILE --backend pjrt --grads` on JAX's programs in oracle/, and
#      `tessera check collectives` (ragged_all_to_all, psend/precv, async collectives on every
#      device, against the interpreter; all must run on a GPU);
#   3. a GPT pipelined over 2 stages as an `mpirun -n 2` job sharing the one device (each CUDA
#      client gets TESSERA_CUDA_MEMORY_FRACTION of its memory), whose losses must equal those of
#      one process running both stages on the device, bit for bit.
# It prints a table, writes WORK/out/run.json (every round's figures, as a docs/runs/ file of
# the repository) and exits non-zero if any part failed.
#
# Usage: ./run.sh [--plugin NAME|PATH] [--python PYTHON] [--quick] [--rounds N] [--steps N]
#                 [--llama SPEC]... [--bundled-libs]
#                 [--work DIR] [--dump-hlo]
#   --plugin        Tessera's PJRT plugin (default cuda: the CUDA plugin of the machine's JAX).
#   --python        the Python with JAX (default python3); optax is used if it has it.
#   --quick         a small Llama, 1 round of 4 steps, 2 steps of the MPI run (a smoke test).
#   --llama         a model to compare (repeatable): LAYERS,D_MODEL,HEADS,SEQ_LEN,BATCH[,DTYPE
#                   [,ATTENTION[,KV_HEADS,VOCAB,FFN[,REMAT]]]]; DTYPE is f32 (the default) or bf16
#                   (mixed precision on both sides); ATTENTION is xla (the default: the plain
#                   program on both sides) or cudnn (Tessera's --attention cudnn against JAX's
#                   jax.nn.dot_product_attention(implementation='cudnn')); REMAT a remat policy
#                   for every decoder block on both sides (Tessera's --remat, JAX's
#                   jax.checkpoint; default everything_saveable: none); default: on the CPU
#                   the two CPU models of docs/benchmarks.md, else 8 layers, d_model 1024, 16
#                   heads, seq_len 512, batch 16 (issue 29's H100 model), in f32, in bf16, and in
#                   bf16 with cuDNN attention, after issue 47's 1B Llama (16 layers, d_model 2048,
#                   32 heads, 8 key/value heads, vocabulary 32000, MLP 8192) at seq_len 4096.
#   --rounds N      rounds per model (default 3), JAX first in odd rounds, Tessera in even.
#   --steps N       steps of each run, the first left out of the median (default 20; 10 on the
#                   CPU).
#   --bundled-libs  use every bundled library, not only those the machine lacks.
#   --work          where the binary is unpacked and the outputs go (default DIR/work).
#   --dump-hlo      also write XLA's optimized programs of each model's first round (JAX's
#                   train step and every program Tessera compiles) under WORK/out/hlo-*.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PLUGIN=cuda
PYTHON=python3
QUICK=0
ROUNDS=""
STEPS=""
MODELS=()
ALL_LIBS=0
DUMP_HLO=0
WORK="$HERE/work"

usage() { sed -n '/^# Usage/,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --plugin) PLUGIN="$2"; shift 2 ;;
        --python) PYTHON="$2"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --llama) MODELS+=("$2"); shift 2 ;;
        --bundled-libs) ALL_LIBS=1; shift ;;
        --work) WORK="$2"; shift 2 ;;
        --dump-hlo) DUMP_HLO=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

case "$PLUGIN" in
    cpu|*cpu*) ON_CPU=1 ;;
    *) ON_CPU=0 ;;
esac
MPI_STEPS=3
if [ "$QUICK" = 1 ]; then
    [ ${#MODELS[@]} -eq 0 ] && MODELS=("2,64,4,32,4")
    ROUNDS="${ROUNDS:-1}"; STEPS="${STEPS:-4}"; MPI_STEPS=2
elif [ "$ON_CPU" = 1 ]; then
    [ ${#MODELS[@]} -eq 0 ] && MODELS=("2,1024,16,16,2" "4,256,8,128,16")
    STEPS="${STEPS:-10}"
else
    # In priority order: issue 47's 1B Llama at sequence 4096 with cuDNN attention (the plain
    # program's scores would not fit), then issue 29's H100 model with cuDNN, in bf16, in f32.
    [ ${#MODELS[@]} -eq 0 ] && MODELS=("16,2048,32,4096,4,bf16,cudnn,8,32000,8192"
        "8,1024,16,512,16,bf16,cudnn" "8,1024,16,512,16,bf16" "8,1024,16,512,16,f32"
        "16,2048,32,4096,4,bf16,cudnn,8,32000,8192,dots_saveable")
fi
ROUNDS="${ROUNDS:-3}"
STEPS="${STEPS:-20}"
[ "$STEPS" -ge 3 ] || { echo "run.sh: --steps must be at least 3" >&2; exit 2; }
# The losses JAX recomputes from Tessera's checkpoint agree to float32 rounding on the CPU; a GPU
# may use TF32 for float32 matmuls and another summation order. In bfloat16 the two programs
# round their activations at places XLA chooses (fusions), so they agree to bfloat16's precision.
if [ "$ON_CPU" = 1 ]; then TOLERANCE=1e-4; else TOLERANCE=5e-3; fi
BF16_TOLERANCE=2e-2

OUT="$WORK/out"
LOGS="$WORK/logs"
mkdir -p "$WORK/bin" "$WORK/bundled" "$WORK/lib" "$OUT" "$LOGS"
TESSERA="$WORK/bin/tessera"
ROWS=()
FAILED=0
LAST_ERROR=""
# A row of the table, also printed at once (a run cut short still shows its rows).
row() { ROWS+=("| $1 | $2 | $3 |"); echo "run.sh: row: | $1 | $2 | $3 |" >&2; }
fail() { row "$1" "FAILED" "$2"; FAILED=1; echo "run.sh: FAILED: $1: $2" >&2; }
# Runs a command with its error output in LOGS/$1.log; on failure shows the log's end.
logged() {
    local name="$1" status
    shift
    "$@" 2> "$LOGS/$name.log"
    status=$?
    if [ "$status" -ne 0 ]; then
        LAST_ERROR="$(grep -m 1 -i 'error' "$LOGS/$name.log" | cut -c 1-300)"
        echo "run.sh: $name failed (exit $status); the end of $LOGS/$name.log:" >&2
        tail -n 20 "$LOGS/$name.log" >&2
    fi
    return "$status"
}
table() {
    echo
    echo "| part | result | detail |"
    echo "|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
}
# The run as a docs/runs/ file (xtask/src/runs.rs): OUT/run.json, named after the GPU.
run_file() {
    printf '%s\n' "${ROWS[@]}" > "$OUT/rows.md"
    "$PYTHON" - "$OUT" "$HERE" "$PLUGIN" "$ROUNDS" "$STEPS" << 'EOF' ||
import glob, json, os, re, subprocess, sys, time
out, here, plugin, rounds, steps = sys.argv[1:]
rows = []
for line in open(f"{out}/rows.md"):
    cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
    if len(cells) == 3:
        rows.append({"part": cells[0], "result": cells[1], "detail": cells[2]})
models = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/*-summary.json"))]
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout
    gpu = gpu.strip().splitlines()[0]
except (OSError, IndexError):
    gpu = "no NVIDIA GPU"
commit = "unknown"
manifest = os.path.join(here, "MANIFEST")
if os.path.exists(manifest):
    first = open(manifest).readline().split()
    commit = first[1] if len(first) > 1 else commit
kind = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", gpu)
name = f"gpu-{kind.group(1).lower()}" if kind else "gpu-run-cpu"
run = {
    "benchmark": name,
    "meta": {
        "commit": commit, "uncommitted_changes": None,
        "machine": f"{gpu}, {os.cpu_count()} host cores",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_at_end": float(open("/proc/loadavg").read().split()[0]),
        "plugin": plugin,
    },
    "data": {"rounds": int(rounds), "steps": int(steps), "rows": rows, "models": models},
}
with open(f"{out}/run.json", "w") as f:
    json.dump(run, f, indent=2)
    f.write("\n")
print(f"run.sh: wrote {out}/run.json (copy it to docs/runs/{name}.json)", file=sys.stderr)
EOF
        echo "run.sh: could not write $OUT/run.json" >&2
}
finish() {
    table
    run_file
    if [ "$FAILED" = 0 ]; then echo "run.sh: every part passed"; exit 0; fi
    echo "run.sh: some parts failed (logs in $LOGS)"; exit 1
}

# --- Unpacking ------------------------------------------------------------------------------
if ! "$PYTHON" -c 'import sys' 2> /dev/null; then
    fail "setup" "no Python at '$PYTHON' (give --python)"; finish
fi
# Tessera finds the CUDA plugin of the `python3` on PATH: make that the one with JAX.
case "$PYTHON" in
    */*) PATH="$(cd "$(dirname "$PYTHON")" && pwd):$PATH"; export PATH ;;
esac
unpack() {
    if command -v xz > /dev/null; then
        xz -dc "$HERE/tessera.xz" > "$TESSERA" && tar -xJf "$HERE/libs.tar.xz" -C "$WORK/bundled"
        return
    fi
    "$PYTHON" - "$HERE" "$WORK" << 'EOF'
import lzma, shutil, sys, tarfile
here, work = sys.argv[1:]
with lzma.open(f"{here}/tessera.xz") as src, open(f"{work}/bin/tessera", "wb") as dst:
    shutil.copyfileobj(src, dst)
with tarfile.open(f"{here}/libs.tar.xz") as libs:
    libs.extractall(f"{work}/bundled")
EOF
}
unpack || { fail "setup" "could not unpack tessera.xz and libs.tar.xz"; finish; }
chmod +x "$TESSERA"

NEEDED_GLIBC="$(sed -n 's/^glibc //p' "$HERE/MANIFEST" 2> /dev/null)"
HAVE_GLIBC="$(getconf GNU_LIBC_VERSION 2> /dev/null | awk '{print $2}')"
if [ -n "$NEEDED_GLIBC" ] && [ -n "$HAVE_GLIBC" ] &&
    [ "$(printf '%s\n%s\n' "$NEEDED_GLIBC" "$HAVE_GLIBC" | sort -V | head -n 1)" != "$NEEDED_GLIBC" ]; then
    fail "setup" "the binary needs glibc $NEEDED_GLIBC but this machine has $HAVE_GLIBC"; finish
fi

# The bundled libraries this machine lacks (all of them with --bundled-libs), found first.
export LD_LIBRARY_PATH="$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rm -f "$WORK"/lib/*
if [ "$ALL_LIBS" = 1 ]; then
    for lib in "$WORK"/bundled/*; do ln -s "$lib" "$WORK/lib/"; done
else
    for _ in 1 2 3 4 5 6 7 8; do
        progress=0
        for lib in $(ldd "$TESSERA" 2> /dev/null | awk '/not found/ {print $1}'); do
            if [ -e "$WORK/bundled/$lib" ] && [ ! -e "$WORK/lib/$lib" ]; then
                ln -s "$WORK/bundled/$lib" "$WORK/lib/$lib"; progress=1
            fi
        done
        [ "$progress" = 1 ] || break
    done
fi
if ! VERSION="$("$TESSERA" --version 2> "$LOGS/version.log")"; then
    fail "setup" "the tessera binary does not run here: $(head -n 3 "$LOGS/version.log" | tr '\n' ' ')"
    finish
fi
# What the dynamic linker takes from the bundle.
USED="$(ldd "$TESSERA" | awk -v lib="$WORK/lib/" 'index($3, lib) == 1 {print $1}' | xargs)"
if ! logged devices "$TESSERA" --plugin "$PLUGIN" devices --cpu-devices 1 --json \
    > "$OUT/devices.json"; then
    fail "setup" "the plugin $PLUGIN opens no device: $LAST_ERROR"; finish
fi
DEVICES="$("$PYTHON" - "$OUT/devices.json" << 'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{len(d['devices'])} {d['devices'][0]['kind']} device(s), PJRT C API {d['pjrt_api_version']}")
EOF
)"
row "setup" "ok" "$VERSION, plugin $PLUGIN: $DEVICES; libraries from the bundle: ${USED:-none}"

JAX_ENV=()
[ "$ON_CPU" = 1 ] && JAX_ENV=(JAX_PLATFORMS=cpu)
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# A JSON value: `json FILE EXPR` prints EXPR of the last line of FILE that is a JSON object (`d`).
json() {
    "$PYTHON" - "$1" "$2" << 'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
d = json.loads(lines[-1])
print(eval(sys.argv[2], {"d": d}))
EOF
}

# --- 0. cuDNN's attention against the decomposition; JAX's own cuDNN lowering ---------------
# First, as it is short (about a minute) and says whether the cuDNN rows below compute the
# right thing: 12 shapes, values and gradients, cuDNN against the decomposition on the device
# (--require-all on a GPU; on the CPU only the decomposition runs, cuDNN reported unsupported).
# `tessera check WHAT`, --require-all on a GPU, as a row of the table.
check_row() {
    local what="$1" flags=()
    [ "$ON_CPU" = 0 ] && flags=(--require-all)
    if logged "check-$what" "$TESSERA" --plugin "$PLUGIN" check "$what" "${flags[@]}" \
        > "$OUT/check-$what.txt"; then
        row "check $what" "ok" "$(tail -n 1 "$OUT/check-$what.txt")"
    else
        fail "check $what" "$(grep -E -m 4 '^(FAILED|unsupported)' "$OUT/check-$what.txt" | cut -c 1-200 | tr '\n' ' ')$(tail -n 1 "$OUT/check-$what.txt") $LAST_ERROR"
    fi
}
check_row attention
# JAX's lowering of jax.nn.dot_product_attention(implementation='cudnn') with this machine's
# cuDNN: the fixture Tessera's CUDA lowering is compared with (tests/data/cudnn/).
if [ "$ON_CPU" = 0 ]; then
    if logged jax-cudnn-lowering "$PYTHON" "$HERE/jax/gen_cudnn_lowering.py" \
        "$OUT/jax_cudnn_lowering.json" --on-gpu > "$OUT/jax-cudnn-lowering.txt"; then
        row "JAX's cuDNN lowering" "ok" "out/jax_cudnn_lowering.json: copy it to tests/data/cudnn/"
    else
        fail "JAX's cuDNN lowering" "$LAST_ERROR"
    fi
fi

# --- 1. The Llama train step against JAX ----------------------------------------------------
llama() {
    local spec="$1" layers d heads seq batch dtype attention kv vocab ffn remat name r
    local tolerance="$TOLERANCE" data="$HERE/data/corpus.txt"
    IFS=, read -r layers d heads seq batch dtype attention kv vocab ffn remat <<< "$spec"
    dtype="${dtype:-f32}"
    attention="${attention:-xla}"
    remat="${remat:-everything_saveable}"
    case "$dtype" in
        f32) ;;
        bf16) tolerance="$BF16_TOLERANCE" ;;
        *) fail "Llama $spec" "unknown dtype $dtype (f32 or bf16)"; return ;;
    esac
    case "$attention" in
        xla | cudnn) ;;
        *) fail "Llama $spec" "unknown attention $attention (xla or cudnn)"; return ;;
    esac
    name="llama-${layers}x${d}-h${heads}-s${seq}-b${batch}-${dtype}"
    local label="Llama $layers layers, d_model $d, $heads heads, seq_len $seq, batch $batch, $dtype"
    if [ "$attention" = cudnn ]; then
        name="$name-cudnn"
        label="$label, cuDNN attention on both sides"
    fi
    local sizes=(--layers "$layers" --d-model "$d" --heads "$heads" --seq-len "$seq" --batch "$batch"
        --dtype "$dtype")
    # Grouped-query heads, a vocabulary and an MLP width of their own: a config file for
    # Tessera, the same flags for JAX.
    local config=() jax_shape=()
    if [ -n "$kv$vocab$ffn" ]; then
        kv="${kv:-$heads}"; vocab="${vocab:-256}"; ffn="${ffn:-$(( ((8 * d + 2) / 3 + 7) / 8 * 8 ))}"
        name="$name-kv$kv-v$vocab-f$ffn"
        label="$label, $kv key/value heads, vocabulary $vocab, MLP $ffn"
        printf 'model = "llama"\nkv_heads = %s\nvocab = %s\nffn = %s\n' "$kv" "$vocab" "$ffn" \
            > "$OUT/$name.toml"
        config=(--config "$OUT/$name.toml")
        jax_shape=(--kv-heads "$kv" --vocab "$vocab" --ffn "$ffn")
    fi
    case "$remat" in
        everything_saveable) ;;
        dots_saveable | dots_with_no_batch_dims_saveable | nothing_saveable)
            name="$name-$remat"; label="$label, remat $remat on both sides" ;;
        *) fail "$label" "unknown remat policy $remat"; return ;;
    esac
    # Long sequences need more bytes than the bundled corpus has: the corpus repeated.
    if [ "$seq" -ge 1024 ]; then
        data="$OUT/corpus-long.txt"
        for _ in $(seq 1 $(( seq * 2 / 3000 + 2 ))); do cat "$HERE/data/corpus.txt"; done > "$data"
    fi
    local train=(--plugin "$PLUGIN" train --model llama "${sizes[@]}" "${config[@]}" --data "$data"
        --microbatches 1 --stages 1
        --mpmd-dim 1 --devices 1 --optimizer adamw --lr 0.001 --no-reference --eval-every 0 --json
        --attention "$attention" --remat "$remat")
    local jax=("$HERE/jax/llama_jax.py" "${sizes[@]}" "${jax_shape[@]}" --lr 0.001 --data "$data"
        --attention "$attention" --remat "$remat")
    # The sides alternate which goes first: JAX in odd rounds, Tessera in even ones.
    for r in $(seq 1 "$ROUNDS"); do
        local jax_dump=() tessera_env=() side
        if [ "$DUMP_HLO" = 1 ] && [ "$r" = 1 ]; then
            jax_dump=(--dump-hlo "$OUT/hlo-$name-jax.txt")
            # Tessera's programs are XLA's to dump; the persistent cache would skip compiling.
            tessera_env=(TESSERA_COMPILE_CACHE=off
                "XLA_FLAGS=${XLA_FLAGS:-} --xla_dump_to=$OUT/hlo-$name-tessera --xla_dump_hlo_as_text")
        fi
        local sides=(jax tessera)
        [ $((r % 2)) = 0 ] && sides=(tessera jax)
        for side in "${sides[@]}"; do
            if [ "$side" = jax ]; then
                logged "$name-jax-$r" env "${JAX_ENV[@]}" "$PYTHON" "${jax[@]}" --steps "$STEPS" \
                    "${jax_dump[@]}" > "$OUT/$name-jax-$r.json" ||
                    { fail "$label" "JAX (round $r): $LAST_ERROR"; return; }
            else
                logged "$name-tessera-$r" env "${tessera_env[@]}" "$TESSERA" "${train[@]}" \
                    --steps "$STEPS" > "$OUT/$name-tessera-$r.json" ||
                    { fail "$label" "Tessera (round $r): $LAST_ERROR"; return; }
            fi
        done
        # Of XLA's dump, the optimized HLO (a GPU's dump also holds PTX and LLVM IR).
        [ -d "$OUT/hlo-$name-tessera" ] &&
            find "$OUT/hlo-$name-tessera" -type f ! -name '*after_optimizations.txt' -delete
    done
    local platform
    platform="$(json "$OUT/$name-jax-1.json" 'd["platform"]')"
    if [ "$ON_CPU" = 0 ] && [ "$platform" = cpu ]; then
        fail "$label" "JAX ran on the CPU, not a GPU: install jax[cuda] for $PYTHON"; return
    fi
    # The same model: JAX from Tessera's checkpoint after step 1 gives its losses of steps 2 and 3.
    rm -rf "$OUT/$name-checkpoint"
    logged "$name-checkpoint" "$TESSERA" "${train[@]}" --steps 3 --stop-after 1 \
        --checkpoint-dir "$OUT/$name-checkpoint" --checkpoint-every 1 > /dev/null ||
        { fail "$label" "Tessera's checkpoint run: $LAST_ERROR"; return; }
    logged "$name-check" env "${JAX_ENV[@]}" "$PYTHON" "${jax[@]}" --check "$OUT/$name-checkpoint" \
        > "$OUT/$name-check.json" || { fail "$label" "JAX's check: $LAST_ERROR"; return; }
    rm -rf "$OUT/$name-checkpoint"
    local verdict
    verdict="$("$PYTHON" - "$OUT" "$name" "$ROUNDS" "$tolerance" "$label" << 'EOF'
import json, statistics, sys
out, name, rounds, tolerance, label = sys.argv[1:]
def last(path):
    return json.loads([l for l in open(path) if l.startswith("{")][-1])
jax = [last(f"{out}/{name}-jax-{r}.json") for r in range(1, int(rounds) + 1)]
tessera = [last(f"{out}/{name}-tessera-{r}.json") for r in range(1, int(rounds) + 1)]
check = last(f"{out}/{name}-check.json")
tokens = jax[0]["model"]["batch"] * jax[0]["model"]["seq_len"]
jax_step = statistics.median(j["median_step_s"] for j in jax)
tessera_step = statistics.median(tokens / t["tokens_per_second"] for t in tessera)
ratio = jax_step / tessera_step
ours = tessera[0]["losses"][1:3]
theirs = [check["check"]["step_2_loss"], check["check"]["step_3_loss"]]
worst = max(abs(a - b) / abs(a) for a, b in zip(ours, theirs))
problems = []
if jax[0]["parameters"] != tessera[0]["parameters"]:
    problems.append(f"parameters: JAX {jax[0]['parameters']}, Tessera {tessera[0]['parameters']}")
if not worst <= float(tolerance):
    problems.append(f"losses of steps 2, 3 from the checkpoint: Tessera {ours}, JAX {theirs}")
detail = (
    f"{tessera[0]['parameters']:,} parameters; JAX {jax_step * 1e3:.1f} ms/step, "
    f"{tokens / jax_step:,.0f} tokens/s ({jax[0]['device_kind']}, {jax[0]['optimizer']}); "
    f"Tessera {tessera_step * 1e3:.1f} ms/step, {tokens / tessera_step:,.0f} tokens/s; "
    f"Tessera / JAX tokens/s {ratio:.2f}x; same model: losses within {worst:.1e} "
    f"(tolerance {tolerance})"
)
phases = tessera[-1].get("step_phases_ms")
if isinstance(phases, dict):
    parts = ", ".join(f"{k} {v:.1f}" for k, v in phases.items() if isinstance(v, (int, float)))
    detail += f"; Tessera's median step in ms: {parts}"
if tessera[-1].get("mfu") is not None:
    detail += f"; MFU {100 * tessera[-1]['mfu']:.1f}% of {tessera[-1].get('peak_source')}"
# Every round's figures, for the run file (docs/runs/) finish() writes.
summary = {
    "model": label, "parameters": tessera[0]["parameters"], "tokens_per_step": tokens,
    "jax_rounds_s": [j["median_step_s"] for j in jax],
    "tessera_rounds_s": [tokens / t["tokens_per_second"] for t in tessera],
    "order": ["jax first" if r % 2 else "tessera first" for r in range(1, int(rounds) + 1)],
    "check": {"tessera": ours, "jax": theirs, "worst": worst, "tolerance": float(tolerance)},
    "device_kind": jax[0]["device_kind"], "jax_optimizer": jax[0]["optimizer"],
    "jax_versions": jax[0]["versions"], "mfu": tessera[-1].get("mfu"),
    "peak_source": tessera[-1].get("peak_source"), "step_phases_ms": phases,
    "passed": not problems,
}
with open(f"{out}/{name}-summary.json", "w") as f:
    json.dump(summary, f)
print(("FAILED " if problems else "ok ") + detail + ("; " + "; ".join(problems) if problems else ""))
EOF
)" || { fail "$label" "could not read the runs' JSON (see $OUT)"; return; }
    case "$verdict" in
        ok\ *) row "$label" "ok" "${verdict#ok }" ;;
        *) fail "$label" "${verdict#FAILED }" ;;
    esac
}
for spec in "${MODELS[@]}"; do llama "$spec"; done

# --- 2. JAX's programs through Tessera and the plugin ---------------------------------------
for file in "$HERE"/oracle/*.json; do
    base="$(basename "$file" .json)"
    if logged "oracle-$base" "$TESSERA" --plugin "$PLUGIN" oracle jaxpr "$file" --backend pjrt \
        --grads > "$OUT/oracle-$base.txt"; then
        row "oracle jaxpr $base.json" "ok" "$(tail -n 1 "$OUT/oracle-$base.txt")"
    else
        fail "oracle jaxpr $base.json" "$(grep -m 3 FAILED "$OUT/oracle-$base.txt" | tr '\n' ' ')$(tail -n 1 "$OUT/oracle-$base.txt") $LAST_ERROR"
    fi
done

# --- 2b. The collectives XLA's CPU backend lacks, on the plugin's devices ---------------------
# `ragged_all_to_all` and `psend`/`precv` lower for GPUs only: on a GPU every program must run
# and equal the interpreter (--require-all); on the CPU they are reported unsupported.
check_row collectives

# --- 3. Two ranks sharing the one device, equal to one process -------------------------------
mpi() {
    local label="mpirun -n 2: GPT, 2 stages, one per rank, one device"
    if ! command -v mpirun > /dev/null; then
        fail "$label" "no mpirun: install Open MPI (e.g. apt-get install openmpi-bin)"; return
    fi
    if ! mpirun --version 2>&1 | grep -q "Open MPI"; then
        fail "$label" "mpirun is not Open MPI's, which Tessera's libmpi.so.40 needs"; return
    fi
    local flags=(--oversubscribe -x LD_LIBRARY_PATH -x TF_CPP_MIN_LOG_LEVEL)
    [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
    local env=()
    if [ "$ON_CPU" = 0 ]; then
        # Each rank's client takes part of the GPU; XLA's GPU kernels without atomics, so that
        # the two runs can agree bit for bit.
        export TESSERA_CUDA_MEMORY_FRACTION="${TESSERA_CUDA_MEMORY_FRACTION:-0.4}"
        export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_deterministic_ops=true"
        flags+=(-x TESSERA_CUDA_MEMORY_FRACTION -x XLA_FLAGS)
    fi
    # interleaved-1f1b runs the 2 stages on one group (one process, one device) and on two.
    # The one process runs the same stage programs as the ranks (--no-fuse): fused into one
    # program, XLA may fuse across the stage boundary and round differently on a GPU.
    local args=(--plugin "$PLUGIN" train --model gpt --schedule interleaved-1f1b --stages 2
        --microbatches 4 --batch 16 --steps "$MPI_STEPS" --eval-every 0 --json)
    logged mpi-one "$TESSERA" "${args[@]}" --mpmd-dim 1 --devices 1 --no-fuse > "$OUT/mpi-one.json" ||
        { fail "$label" "the one-process run: $LAST_ERROR"; return; }
    logged mpi-job mpirun "${flags[@]}" -n 2 "$TESSERA" "${args[@]}" --mpmd-dim 2 --devices 2 \
        > "$OUT/mpi-job.json" || { fail "$label" "the job: $LAST_ERROR"; return; }
    local one job
    one="$(json "$OUT/mpi-one.json" 'd["losses"]')" || { fail "$label" "no JSON summary"; return; }
    job="$(json "$OUT/mpi-job.json" 'd["losses"]')" || { fail "$label" "no JSON summary"; return; }
    if [ "$one" = "$job" ] && [ "$one" != "[]" ]; then
        row "$label" "ok" "losses equal bit for bit: $job"
    else
        fail "$label" "one process $one, two ranks $job"
    fi
}
mpi

finish
