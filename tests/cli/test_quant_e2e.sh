#!/usr/bin/env bash
# shellcheck disable=SC2154  # layer_ids, topk, model, quant come from the sourced NAME.args
# test_quant_e2e.sh: a quantised target trains a drafter end to end on the CPU, the user's path
# with the checkpoints transformers saved (tests/reference/data/hf/, make_hf_fixtures.py): the FP8
# block-quantised Qwen3 (qwen3_fp8: e4m3 weights + f32 weight_scale_inv, partial blocks) and
# gpt-oss with MXFP4 experts (gpt_oss_mxfp4: _blocks/_scales u8, sliding window, sinks). For each:
#   1. regenerate (2 ranks, shards of 1 prompt, 2 slots, 1 held out) from the prompts of NAME.decode.json
#      (JSONL input_ids: regenerate takes raw token ids): every reply equals transformers' greedy
#      continuation token for token (generate with its KV cache, fp32, on the de-quantised model),
#      loss_mask 0 on the prompt and 1 on the reply, every reply cut at max_new_tokens (no stop id:
#      the fixtures' generation_config.json has no eos_token_id), /heldout one sample;
#   2. dump-features (2 ranks) of that set: features.json lists its shards, which exist and hold
#      the set's 3 samples (tokens and loss_mask equal), its layer ids, hidden size and top-k; the
#      shards' LSE equals teacher-dump's on the same sequences (the same de-quantised weights ran);
#   3. train 4 steps from those features (1 rank, students only) and with a live teacher
#      (mpirun -np 2: 1 teacher + 1 student, a checkpoint every 2 steps): each exports a drafter
#      (config.json with the fixture's layer ids and vocabulary, model.safetensors holding only the
#      drafter's own tensors), finite losses, a summary line; live and offline losses agree (1e-3,
#      as test_train_e2e.sh: bf16 features either way);
#   4. --mode eval of the live run's drafter (1 teacher + 1 student): eval.json has a finite
#      tau_decode >= 1 on the one held-out sample;
#   5. no de-quantised copy of the target is written anywhere: the target directory is byte-identical
#      before and after (sha256 of every file, and the same listing); every file the runs left in
#      their directories and in TMPDIR (this test's own, so Open MPI's and anything the programs put
#      in a temporary folder lands here) is listed with its size, and apart from the expected outputs
#      (the set, the feature shards, the drafters and checkpoints) none is larger than the fixture's
#      own weights (a copy with the quantised tensors in bf16 would be 1.5x (FP8) or 2.3x (MXFP4) larger,
#      in fp32 2.7x or 4x); no file at all, expected ones included, holds a tensor name of the target
#      ("model.layers.", which the drafter's own tensors, "layers.0.*", never carry); and no new
#      file at the top of /tmp or /dev/shm (where a program ignoring TMPDIR would write) holds one.
# Every mode must exit 0. About 10 s on a 2-core machine, on the CPU build as under ASan.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
D=$SRC/tests/reference/data/hf
PY=/usr/bin/python3
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks h5py/numpy (scripts/install-deps.sh installs them)"; exit 1; }
# this test's own temporary folder for every program it runs (Open MPI's session directory included)
export TMPDIR=$TMP/tmpdir
mkdir -p "$TMPDIR"
marker=$TMP/.start
touch "$marker"

# ---------------------------------------------------------------- the checks, in Python
# the set: tests/cli/decode_check.py --regenerate
cat >"$TMP/check_features.py" <<'PYEOF'
import json, os, sys
import h5py, numpy as np
sys.path.insert(0, os.path.join(os.environ["DFLASH_SRC"], "tests", "cli"))
from st_read import st_expect, st_load
feat, setp, layer_ids, topk, seqs_out = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4]), sys.argv[5]
idx = json.load(open(f"{feat}/features.json"))
s = h5py.File(setp, "r")
stok, soff, smask = s["tokens"][:], s["offsets"][:], s["loss_mask"][:]
n = len(soff) - 1
want = sorted((stok[soff[i]:soff[i + 1]].tolist(), smask[soff[i]:soff[i + 1]].tolist()) for i in range(n))
assert idx["samples"] == n and idx["target_layer_ids"] == layer_ids and idx["topk"] == topk, idx
assert len(idx["shards"]) >= 1, "features.json lists no shard"
got, seqs, lses = [], [], []
for sh in idx["shards"]:
    path = f"{feat}/{sh}"
    assert os.path.isfile(path), f"features.json lists {sh}, which is missing"
    with h5py.File(path, "r") as f:
        t, o, m = f["tokens"][:], f["offsets"][:], f["loss_mask"][:]
        assert f["features"].shape == (len(t), len(layer_ids) * idx["hidden_size"]), f["features"].shape
        assert f["topk_idx"].shape == (len(t), topk) and f["lse"].shape == (len(t),)
        assert np.isfinite(f["lse"][:]).all() and np.isfinite(f["topk_val"][:]).all()
        for i in range(len(o) - 1):
            got.append((t[o[i]:o[i + 1]].tolist(), m[o[i]:o[i + 1]].tolist()))
            seqs.append(t[o[i]:o[i + 1]].tolist())
        lses.append(f["lse"][:])
assert sorted(got) == want, "the shards do not hold the set's samples"
json.dump({"sequences": seqs}, open(seqs_out, "w"))
np.save(seqs_out + ".lse.npy", np.concatenate(lses))
print(f"features.json: {len(idx['shards'])} shard(s), {n} samples, layers {layer_ids}, top-{topk}")
PYEOF

cat >"$TMP/check_lse.py" <<'PYEOF'
import os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ["DFLASH_SRC"], "tests", "cli"))
from st_read import st_expect, st_load
a = np.load(sys.argv[1])
b = st_expect(st_load(sys.argv[2]), "lse", np.float32)
e = np.abs(a - b).max() / np.abs(b).max()
assert a.shape == b.shape and e <= 1e-4, f"dump-features' LSE differs from teacher-dump's by {e} of the scale"
print(f"dump-features' LSE = teacher-dump's on the same sequences (rel {e:.2g})")
PYEOF

cat >"$TMP/check_run.py" <<'PYEOF'
import json, math, os, sys
sys.path.insert(0, os.path.join(os.environ["DFLASH_SRC"], "tests", "cli"))
from st_read import st_load
run, layer_ids, vocab = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], int(sys.argv[3])
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert any("summary" in l for l in lines), "no summary line in metrics.jsonl"
losses = [l["loss"] for l in lines if "step" in l and l.get("split") != "heldout" and "loss" in l]
assert losses and all(math.isfinite(x) for x in losses), f"losses {losses}"
c = json.load(open(f"{run}/drafter/config.json"))
assert c["dflash_config"]["target_layer_ids"] == layer_ids and c["vocab_size"] == vocab, c
t = st_load(f"{run}/drafter/model.safetensors")
bad = [k for k in t if k.startswith("model.") or "embed_tokens" in k or k.startswith("lm_head")]
assert not bad and "fc.weight" in t, f"the drafter's file holds target tensors: {bad}"
print(" ".join("%.6f" % x for x in losses))
PYEOF

cat >"$TMP/check_eval.py" <<'PYEOF'
import json, math, sys
e = json.load(open(sys.argv[1]))
assert "tau_decode" in e and math.isfinite(e["tau_decode"]) and e["tau_decode"] >= 1, e
assert e["samples"] == 1, f"eval on {e['samples']} samples, want the 1 held out"
print(f"eval.json: tau_decode {e['tau_decode']} over {e['samples']} held-out sample(s)")
PYEOF

# fingerprint DIR: every file of DIR with its size and sha256, in name order
fingerprint() { (cd "$1" && find . -type f -printf '%p %s\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

# ---------------------------------------------------------------- each quantised fixture
fixtures=(qwen3_fp8 gpt_oss_mxfp4)
expected_re='/(set\.h5|feat/features-[0-9]+-of-[0-9]+\.h5|run-[a-z]+/drafter/model\.safetensors|run-[a-z]+/checkpoints/.*)$'
for name in "${fixtures[@]}"; do
  unset layer_ids topk model quant
  # shellcheck source=/dev/null
  source "$D/$name.args"
  M=$D/$model
  W=$TMP/$name
  mkdir -p "$W"
  if [ ! -d "$M" ] || [ ! -f "$D/$name.decode.json" ]; then bad "$name: fixture missing ($M, $D/$name.decode.json)"; continue; fi
  weights=$(find "$M" -name '*.safetensors' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  fingerprint "$M" >"$W/target.before"
  read -r glen vocab < <($PY -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["gen_len"], json.load(open(sys.argv[2]))["vocab_size"])' \
    "$D/$name.decode.json" "$M/config.json")
  $PY -c 'import json, sys; [print(json.dumps({"input_ids": p})) for p in json.load(open(sys.argv[1]))["prompts"]]' \
    "$D/$name.decode.json" >"$W/prompts.jsonl"
  echo "== $name ($quant): $weights bytes of weights in $M"
  t0=$SECONDS

  # 1. regenerate
  expect_ok "$name regenerate" mpirun -np 2 --bind-to none "$R" --mode regenerate --device cpu --target.path="$M" \
    --regenerate.prompts="$W/prompts.jsonl" --regenerate.out="$W/set.h5" --regenerate.max_new_tokens="$glen" \
    --regenerate.shard_prompts=1 --regenerate.max_seqs=2 --regenerate.heldout=1
  grep -m1 "de-quantised at load" "$TMP/err" | sed 's/^/  /'
  if $PY "$SRC/tests/cli/decode_check.py" "$D/$name.decode.json" "$W/set.h5" --regenerate >"$TMP/py.out" 2>&1; then ok; sed 's/^/  /' "$TMP/py.out"
  else bad "$name: the regenerated set is not transformers' greedy continuation:"; cat "$TMP/py.out" >&2; fi
  [ ! -e "$W/set.h5.parts" ] && ok || bad "$name: regenerate left $W/set.h5.parts behind"

  # 2. dump-features
  job=(--device cpu --target.path="$M" --target.layer_ids="$layer_ids" --teacher.topk="$topk" --drafter.block_size=4
       --data.path="$W/set.h5" --data.max_tokens_per_batch=128)
  expect_ok "$name dump-features" mpirun -np 2 --bind-to none "$R" --mode dump-features "${job[@]}" --features.dir="$W/feat" \
    --teacher.max_tokens=128
  if $PY "$TMP/check_features.py" "$W/feat" "$W/set.h5" "$layer_ids" "$topk" "$W/seqs.json" >"$TMP/py.out" 2>&1; then ok; sed 's/^/  /' "$TMP/py.out"
  else bad "$name: the feature files:"; cat "$TMP/py.out" >&2; fi
  expect_ok "$name teacher-dump" "$T" teacher-dump "$M" "$W/seqs.json" "$W/td.safetensors" --layers "$layer_ids" --topk "$topk" --device cpu
  if $PY "$TMP/check_lse.py" "$W/seqs.json.lse.npy" "$W/td.safetensors" >"$TMP/py.out" 2>&1; then ok; sed 's/^/  /' "$TMP/py.out"
  else bad "$name: dump-features vs teacher-dump:"; cat "$TMP/py.out" >&2; fi

  # 3. train: from the features (students only), and with a live teacher
  tr=(--mode train "${job[@]}" --train.steps=4 --train.max_anchors=8 --train.log_interval=1 --train.eval_interval=4
      --drafter.layers=1)
  expect_ok "$name train from features" mpirun -np 1 --bind-to none "$R" "${tr[@]}" --data.features="$W/feat" --run.dir="$W/run-f"
  expect_ok "$name train with a live teacher" mpirun -np 2 --bind-to none "$R" "${tr[@]}" --checkpoint.every=2 --run.dir="$W/run-l"
  lf=$($PY "$TMP/check_run.py" "$W/run-f" "$layer_ids" "$vocab" 2>&1) && ok || bad "$name: the run from features: $lf"
  ll=$($PY "$TMP/check_run.py" "$W/run-l" "$layer_ids" "$vocab" 2>&1) && ok || bad "$name: the live run: $ll"
  echo "  losses: from features $lf; live $ll"
  [ -d "$W/run-l/checkpoints/step-00000004" ] && [ -f "$W/run-l/checkpoints/step-00000004/model.safetensors" ] && ok ||
    bad "$name: no checkpoint step-00000004 in $W/run-l/checkpoints: $(ls "$W/run-l/checkpoints" 2>&1 | tr '\n' ' ')"
  $PY - "$lf" "$ll" <<'PYEOF' && ok || bad "$name: live and offline losses differ: $lf vs $ll"
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:3]]
assert len(a) == len(b) == 4
assert all(abs(x - y) <= 1e-3 * abs(x) for x, y in zip(a, b)), (a, b)
PYEOF

  # 4. eval
  expect_ok "$name eval" mpirun -np 2 --bind-to none "$R" --mode eval "${job[@]}" --eval.drafter="$W/run-l/drafter" --run.dir="$W/ev"
  if $PY "$TMP/check_eval.py" "$W/ev/eval.json" >"$TMP/py.out" 2>&1; then ok; sed 's/^/  /' "$TMP/py.out"
  else bad "$name: eval.json:"; cat "$TMP/py.out" "$W/ev/eval.json" >&2; fi
  for d in run-f run-l ev; do run_dir_free "$W/$d" 30 || bad "$name: $W/$d is still locked"; done

  # 5. no de-quantised copy
  fingerprint "$M" >"$W/target.after"
  cmp -s "$W/target.before" "$W/target.after" && ok || { bad "$name: the target directory changed:"; diff "$W/target.before" "$W/target.after" >&2; }
  echo "  files written (bytes; the target's weights: $weights):"
  { find "$W" "$TMPDIR" -type f ! -name 'target.before' ! -name 'target.after' -printf '%s %p\n'
    find "$TMP" -maxdepth 1 -type f -printf '%s %p\n'; } | sort -k2 >"$W.files"
  awk -v t="$TMP/" '{sub(t, "", $2); printf "  %10d  %s\n", $1, $2}' "$W.files"
  big=$(awk -v w="$weights" '$1 > w {print $2}' "$W.files" | grep -Ev "$expected_re")
  [ -z "$big" ] && ok || bad "$name: unexpected files larger than the target's weights ($weights bytes): $big"
  named=$(awk '{print $2}' "$W.files" | xargs -r grep -l -F -s "model.layers." || true)
  [ -z "$named" ] && ok || bad "$name: files holding the target's tensor names (a copy of its weights?): $named"
  # the "model.layers." check: the fixture's own file has the string (else the check proves nothing)
  grep -q -F "model.layers." "$M/model.safetensors" && ok || bad "$name: its model.safetensors lacks 'model.layers.'"
  echo "  $name: $((SECONDS - t0)) s"
done

# /tmp and /dev/shm: no new file at their top level holds the target's tensor names
stray=$(find /tmp /dev/shm -maxdepth 1 -type f -newer "$marker" -print0 2>/dev/null | xargs -0 -r grep -l -F -s "model.layers." || true)
[ -z "$stray" ] && ok || bad "new files in /tmp or /dev/shm hold target tensor names: $stray"
finish
