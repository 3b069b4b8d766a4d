#!/usr/bin/env bash
# test_inconsistent_inputs.sh: issue 27 item 7, inputs that say two things, each one error line
# (the code of 33b0059 accepted the first five silently):
#   - a config.json whose num_hidden_layers is smaller than the layers the weights hold;
#   - a convert-jsonl line that gives a key twice (Python's json keeps the last);
#   - an HDF5 training set whose /tokens is an external link (HDF5 follows it into another file);
#   - a feature shard whose feature_dtype says float16 (the 16-bit words would be read as bf16);
#   - a dense target's layer_types with another length than num_hidden_layers;
# and, already refused before, kept so: a /loss_mask value other than 0 or 1 in a training set
# (src/common/data/trainset.c's validation pass). run.dir = a file-system root or the home
# directory is tests/cli/test_run_claim.sh's. Debian's python3-h5py makes the bad files.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
tiny_job

# --- num_hidden_layers below the weights' layers
"$T" make-target "$TMP/t4" --arch qwen3 --layers 4 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target t4"
echo '{"sequences": [[1, 2, 3, 4, 5]]}' >"$TMP/tok.json"
expect_ok dump-4-layers "$T" teacher-dump "$TMP/t4" "$TMP/tok.json" "$TMP/o.safetensors" --layers 0,1 --topk 4
sed -i 's/"num_hidden_layers":[[:space:]]*4/"num_hidden_layers": 2/' "$TMP/t4/config.json"
grep -q '"num_hidden_layers": 2' "$TMP/t4/config.json" || bad "test bug: the layer count was not edited"
expect_fail fewer-layers "the weights hold layer 3 (tensor model.layers.3.input_layernorm.weight) but config.json's 'num_hidden_layers' is 2" \
  "$T" teacher-dump "$TMP/t4" "$TMP/tok.json" "$TMP/o2.safetensors" --layers 0,1 --topk 4

# --- a key twice in a JSONL line
printf '{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8], "loss_mask": [0, 0, 1, 1, 1, 1, 1, 1], "input_ids": [3, 4, 5, 6, 7, 8, 9, 10]}\n' >"$TMP/dup.jsonl"
expect_fail jsonl-dup-key 'dup.jsonl line 1: key "input_ids" is given twice' \
  "$T" convert-jsonl "$TMP/dup.jsonl" "$TMP/dup.h5" --vocab-size 150 --min-loss-tokens 1
[ ! -e "$TMP/dup.h5" ] && ok || bad "jsonl-dup-key: wrote dup.h5"

# --- HDF5: an external link, a loss mask of 2
/usr/bin/python3 - "$TMP/data.h5" "$TMP" <<'PYEOF'
import sys, h5py, numpy as np
good, tmp = sys.argv[1], sys.argv[2]
with h5py.File(good, "r") as f:
    d = {k: f[k][...] for k in ("tokens", "loss_mask", "offsets")}
    attrs = dict(f.attrs)
def write(path, mask=None, external=False):
    with h5py.File(path, "w") as g:
        for k, v in attrs.items():
            g.attrs[k] = v
        if external:
            with h5py.File(tmp + "/elsewhere.h5", "w") as e:
                e["tokens"] = d["tokens"]
            g["tokens"] = h5py.ExternalLink("elsewhere.h5", "/tokens")
        else:
            g["tokens"] = d["tokens"]
        g["loss_mask"] = d["loss_mask"] if mask is None else mask
        g["offsets"] = d["offsets"]
write(tmp + "/elink.h5", external=True)
m = d["loss_mask"].copy(); m[m.size // 2] = 2
write(tmp + "/mask2.h5", mask=m)
write(tmp + "/same.h5")
PYEOF
expect_ok inspect-rewritten "$T" inspect "$TMP/same.h5"
expect_fail h5-external-link "elink.h5: /tokens is an external link" "$T" inspect "$TMP/elink.h5"
expect_fail h5-mask-2 "mask2.h5: dataset /loss_mask: element [0-9]* is 2, a loss mask is 0 or 1" "$T" inspect "$TMP/mask2.h5"
job=(--device cpu --world.students=1 --target.layer_ids=0,1 --drafter.block_size=6 --train.max_anchors=8
     --data.max_tokens_per_batch=200 --data.heldout_samples=4 --teacher.topk=6 --target.path="$TMP/target")
expect_fail_mpi check-external-link "elink.h5: /tokens is an external link" \
  mpirun -np 2 "$R" --mode train --train.steps=1 --run.dir="$TMP/r-elink" --data.path="$TMP/elink.h5" "${job[@]}"

# --- a feature shard whose feature_dtype is float16
common=(--device cpu --drafter.block_size=6 --teacher.topk=6)
expect_ok dump mpirun -np 1 "$R" --mode dump-features "${common[@]}" --target.path="$TMP/target" --teacher.max_tokens=256 \
  --data.path="$TMP/data.h5" --features.dir="$TMP/feat" --target.layer_ids=0
offline=(mpirun -np 1 "$R" --mode train "${common[@]}" --train.max_anchors=8 --train.eval_interval=100000000
         --train.eval_batches=1 --data.max_tokens_per_batch=200 --data.heldout_samples=4 --target.path="$TMP/target"
         --data.features="$TMP/feat" --target.layer_ids=0 --train.steps=2)
expect_ok offline-bf16 "${offline[@]}" --run.dir="$TMP/r-bf16"
for f in "$TMP"/feat/features-*.h5; do
  /usr/bin/python3 -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); f.attrs["feature_dtype"] = b"float16"; f.close()' "$f"
done
expect_fail_mpi offline-f16 "attribute feature_dtype is \"float16\": the features are read as bfloat16" \
  "${offline[@]}" --run.dir="$TMP/r-f16"
[ ! -e "$TMP/r-f16/drafter" ] && ok || bad "offline-f16: a drafter was exported"

# --- a dense target's layer_types of the wrong length
mkdir -p "$TMP/types"
cp "$TMP/target/model.safetensors" "$TMP/types/"
sed 's/"mlp_bias":/"layer_types": ["full_attention"], "mlp_bias":/' "$TMP/target/config.json" >"$TMP/types/config.json"
expect_fail plan-layer-types "'layer_types' has 1 entries for 2 layers ('num_hidden_layers')" \
  "$R" --plan --target.path="$TMP/types" --target.layer_ids=0,1
finish
