#!/usr/bin/env bash
# bench/loss/run.sh: the fused lm_head loss against the naive C loss and PyTorch on the CPU.
#
#   bench/loss/run.sh [BUILD_DIR]        (default: build; needs BUILD_DIR/bench/bench_loss)
#
# For each case (N rows, vocabulary V, hidden H) it runs, each in a fresh process on the same problem:
#   fused-rows   loss_forward_backward, mode ROWS, 240-row chunks ([240, V] logits, 2 GEMMs)
#   fused-tiles  mode TILES, 240-row chunks x 8192-wide vocabulary tiles (3 GEMMs)
#   c-naive      loss_naive_cpu: [N, V] logits and [N, V] dlogits at once
#   torch-full   PyTorch, [N, V] logits + autograd
#   torch-chunked PyTorch, 240-row chunks under torch.utils.checkpoint
# and prints one markdown table: the best of the repeats, the time relative to fused-rows, the
# peak extra resident memory, and the loss total (the same problem: the totals must agree).
# A method whose estimated memory exceeds 80 % of MemAvailable is skipped and says so.
# Environment: PYTHON (default python3, the pyenv one with torch), THREADS (default: nproc),
# CASES ("N:V:H:REPEAT ..." to override the default cases; REPEAT = runs per method, the best
# counts). The default cases take about 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
py=${PYTHON:-python3}
threads=${THREADS:-$(nproc)}
cases=${CASES:-"1920:32000:1024:2 1920:151936:1024:2 7680:151936:256:1"}
bin=$build/bench/bench_loss
[ -x "$bin" ] || { echo "run.sh: $bin not found: build it first (cmake --build $build --target bench_loss)" >&2; exit 1; }
export OMP_NUM_THREADS=$threads
# Large blocks straight from mmap, so that freed tensors leave the resident set at once and the
# peak counts live memory, not what malloc kept for later (same setting for C and Python).
export MALLOC_MMAP_THRESHOLD_=1048576
out=$(mktemp)
trap 'rm -f "$out"' EXIT
avail=$(( $(awk '/MemAvailable/ {print $2}' /proc/meminfo) * 1024 ))
rc=240 tile=8192

header="# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $threads threads, $((avail >> 30)) GiB available, load average $(cut -d' ' -f1 /proc/loadavg) at the start"
echo "$header" >&2
for c in $cases; do
    IFS=: read -r n v h repeat <<<"$c"
    repeat=${repeat:-2}
    common=(--n "$n" --vocab "$v" --hidden "$h" --row-chunk "$rc" --repeat "$repeat")
    # estimated bytes per method: the [rows, V] fp32 tensors it holds at its peak
    for m in fused-rows fused-tiles c-naive torch-full torch-chunked; do
        case $m in
            fused-rows) need=$((rc * v * 4)) ;;
            fused-tiles) need=$((rc * tile * 4)) ;;
            c-naive) need=$((2 * n * v * 4)) ;;
            torch-full) need=$((7 * n * v * 4)) ;;
            torch-chunked) need=$((14 * rc * v * 4)) ;;
        esac
        if [ $((need * 10)) -gt $((avail * 8)) ]; then
            echo "{\"method\": \"$m\", \"n\": $n, \"vocab\": $v, \"hidden\": $h, \"skipped\": \"needs ~$((need >> 30)) GiB\"}" >>"$out"
            continue
        fi
        echo "  $n:$v:$h $m x$repeat (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        case $m in
            fused-rows) "$bin" --method rows "${common[@]}" ;;
            fused-tiles) "$bin" --method tiles --tile "$tile" "${common[@]}" ;;
            c-naive) "$bin" --method naive "${common[@]}" ;;
            torch-full) "$py" -W ignore bench/loss/bench_loss_torch.py --method full --threads "$threads" "${common[@]}" ;;
            torch-chunked) "$py" -W ignore bench/loss/bench_loss_torch.py --method chunked --threads "$threads" "${common[@]}" ;;
        esac >>"$out"
    done
done

echo "$header (load average $(cut -d' ' -f1 /proc/loadavg) at the end)"
"$py" - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| N | V | H | method | best time s (of n) | vs fused-rows | peak extra MiB | vs fused-rows | loss total |")
print("|---|---|---|---|---|---|---|---|---|")
base = {}
for r in rows:
    if r["method"] == "fused-rows" and "times_s" in r:
        base[(r["n"], r["vocab"], r["hidden"])] = r
for r in rows:
    key = (r["n"], r["vocab"], r["hidden"])
    head = f"| {r['n']} | {r['vocab']} | {r['hidden']} | {r['method']} |"
    if "skipped" in r:
        print(f"{head} skipped: {r['skipped']} | | | | |")
        continue
    t, mem = min(r["times_s"]), r["peak_extra_bytes"] / 2**20
    b = base.get(key)
    tr = f"{t / min(b['times_s']):.2f}x" if b else ""
    mr = f"{r['peak_extra_bytes'] / max(b['peak_extra_bytes'], 1):.1f}x" if b else ""
    print(f"{head} {t:.2f} ({len(r['times_s'])}) | {tr} | {mem:.0f} | {mr} | {r['loss']:.6g} |")
EOF
