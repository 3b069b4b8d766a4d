#!/usr/bin/env bash
# test_make_target_families.sh: dflash_tool make-target for the families written from the teacher's
# own tensor list and each table's to_json (Qwen2, Mistral, Gemma 3, Gemma 4, gpt-oss, GLM-4.5,
# DeepSeek-V3: tools/tool_make_target.c), without torch. For each case (the cases of
# tests/reference/check_make_target_families.py, which compared them with transformers by hand:
# tests/reference/data/make_target_families.log):
#   make-target twice: exit 0, the two directories byte-identical (the weights are a function of
#     the arguments); another --seed gives other weights and the same config.json
#   teacher-dump on 3 sequences (--device cpu): exit 0, features [T, n*H], top-k and lse finite,
#     the top-k values descending, their indices in the vocabulary, lse >= the largest
#   dflash_rank --plan on the directory (the tiny example's config): every role fits, and in a
#     teacher group of 2 stages split by the files' weight bytes
#   make-data --samples 3: the KV-cached greedy decode loads and runs
# and the options a family cannot take are refused in one line naming them.
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
PY=/usr/bin/python3 # the standard library only

# name | make-target arguments | layer ids (keep in step with check_make_target_families.py's CASES)
CASES=(
  "qwen2_llama3|--arch qwen2 --layers 3 --hidden 64 --heads 4 --kv-heads 2 --vocab 251 --rope-llama3 8 --rope-original-max 64 --max-positions 4096 --seed 1|0,2"
  "qwen2_swa_tied|--arch qwen2 --layers 3 --hidden 48 --heads 4 --kv-heads 1 --head-dim 16 --sliding-window 4 --layer-types full,sliding,sliding --vocab 199 --tie --dtype f32 --seed 2|0,1"
  "mistral_swa|--arch mistral --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --sliding-window 5 --vocab 283 --dtype f16 --eps 1e-5 --seed 3|0,1,2"
  "gemma3|--arch gemma3 --layers 3 --hidden 48 --heads 4 --kv-heads 2 --head-dim 20 --intermediate 80 --sliding-window 5 --layer-types sliding,full,sliding --vocab 262 --dtype f32 --tie --seed 4|0,2"
  "gemma4|--arch gemma4 --layers 4 --hidden 48 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 80 --sliding-window 5 --layer-types sliding,full,sliding,full --vocab 211 --tie --seed 5|0,2,3"
  "gpt_oss|--arch gpt_oss --layers 2 --hidden 48 --heads 4 --kv-heads 2 --head-dim 24 --sliding-window 5 --layer-types sliding,full --vocab 317 --experts 5 --experts-per-tok 3 --moe-intermediate 56 --eps 1e-5 --seed 6|0,1"
  "glm4_moe|--arch glm4_moe --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 96 --vocab 227 --experts 6 --experts-per-tok 2 --moe-intermediate 24 --dtype f16 --eps 1e-5 --seed 7|0,2"
  "deepseek_v3|--arch deepseek_v3 --layers 3 --hidden 64 --heads 4 --kv-heads 4 --head-dim 24 --intermediate 96 --vocab 281 --experts 8 --experts-per-tok 3 --moe-intermediate 24 --seed 8|0,2"
  "deepseek_v3_fused|--arch deepseek_v3 --layers 2 --hidden 48 --heads 3 --kv-heads 3 --head-dim 18 --intermediate 80 --vocab 239 --experts 6 --experts-per-tok 2 --moe-intermediate 20 --experts-layout fused --shards 2 --dtype f32 --seed 9|0,1"
)

# check_dump OUT V N_FEAT: teacher-dump's outputs are sane (exit 1 with the reason otherwise)
cat >"$TMP/check_dump.py" <<'PYEOF'
import array, json, math, struct, sys
path, V, n_feat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
def get(name):
    h = head[name]
    a = array.array({"F32": "f", "I32": "i"}[h["dtype"]])
    b, e = h["data_offsets"]
    a.frombytes(raw[8 + n + b:8 + n + e])
    return a, h["shape"]
feat, fs = get("features"); val, vs = get("topk_val"); idx, _ = get("topk_idx"); lse, ls = get("lse")
T, k = vs
assert fs[0] == T and fs[1] % n_feat == 0 and ls == [T], f"shapes {fs} {vs} {ls}"
bad = [x for x in list(feat) + list(val) + list(lse) if not math.isfinite(x)]
assert not bad, f"{len(bad)} values not finite"
assert max(abs(x) for x in feat) > 0, "features all zero"
for t in range(T):
    row = val[t * k:(t + 1) * k]
    assert all(row[j] >= row[j + 1] for j in range(k - 1)), f"token {t}: top-k values not descending"
    assert all(0 <= i < V for i in idx[t * k:(t + 1) * k]), f"token {t}: a top-k index outside the vocabulary"
    assert lse[t] >= row[0] - 1e-4, f"token {t}: lse {lse[t]} below the top logit {row[0]}"
print(f"T {T}, features {fs[1]} wide (max |x| {max(abs(x) for x in feat):.4g}), lse in [{min(lse):.4f}, {max(lse):.4f}]")
PYEOF

echo '{"sequences": [[5, 17, 42, 3, 99, 8, 23, 61, 12, 7, 150, 33, 2], [11, 4, 73, 120, 9, 56, 31, 18, 44], [190, 6, 88, 14, 27]]}' >"$TMP/tokens.json"

for case in "${CASES[@]}"; do
  IFS='|' read -r name args ids <<<"$case"
  # shellcheck disable=SC2086  # args is a list of options
  if ! "$T" make-target "$TMP/$name" $args >"$TMP/mt.out" 2>"$TMP/mt.err"; then
    bad "$name: make-target failed: $(cat "$TMP/mt.err")"
    continue
  fi
  ok
  echo "$name: $(sed "s|$TMP/||" "$TMP/mt.out")"
  # shellcheck disable=SC2086
  "$T" make-target "$TMP/$name.again" $args >/dev/null 2>&1 || bad "$name: make-target failed the second time"
  same=1
  for f in "$TMP/$name"/*; do cmp -s "$f" "$TMP/$name.again/$(basename "$f")" || { same=0; bad "$name: $(basename "$f") differs between two runs"; }; done
  [ "$(ls "$TMP/$name" | wc -l)" = "$(ls "$TMP/$name.again" | wc -l)" ] || { same=0; bad "$name: the runs wrote different files"; }
  [ "$same" = 1 ] && ok
  # shellcheck disable=SC2086
  "$T" make-target "$TMP/$name.seed" $args --seed 99 >/dev/null 2>&1 || bad "$name: make-target --seed 99 failed"
  cmp -s "$TMP/$name/config.json" "$TMP/$name.seed/config.json" && ok || bad "$name: --seed changed config.json"
  w=$(ls "$TMP/$name" | grep -m1 safetensors$)
  cmp -s "$TMP/$name/$w" "$TMP/$name.seed/$w" && bad "$name: --seed 99 wrote the same $w" || ok
  rm -rf "$TMP/$name.again" "$TMP/$name.seed"

  V=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$TMP/$name/config.json")
  nf=$(echo "$ids" | tr ',' '\n' | wc -l)
  if ! "$T" teacher-dump "$TMP/$name" "$TMP/tokens.json" "$TMP/$name.st" --device cpu --layers "$ids" --topk 8 \
       >"$TMP/td.out" 2>"$TMP/td.err"; then
    bad "$name: teacher-dump failed: $(grep -m1 error "$TMP/td.err")"
  elif $PY "$TMP/check_dump.py" "$TMP/$name.st" "$V" "$nf" >"$TMP/py.out" 2>&1; then
    ok
    echo "  teacher-dump: $(cat "$TMP/py.out")"
  else
    bad "$name: teacher-dump's outputs: $(tail -n1 "$TMP/py.out")"
  fi

  plan=(--config "$SRC/examples/tiny/train.json" --target.path="$TMP/$name" --target.layer_ids="$ids" --run.dir="$TMP/run"
        --device cpu --plan)
  if "$R" "${plan[@]}" >"$TMP/out" 2>"$TMP/err" && grep -q "^plan: every role fits" "$TMP/out"; then ok
  else bad "$name: dflash_rank --plan: $(grep -m1 error "$TMP/err" "$TMP/out")"; fi
  if "$R" "${plan[@]}" --world.teachers=2 --world.teacher_group_size=2 >"$TMP/out" 2>"$TMP/err" &&
     [ "$(grep -c "^teacher_stage_bytes" "$TMP/out")" = 2 ]; then ok
  else bad "$name: dflash_rank --plan in a group of 2: $(grep -m1 error "$TMP/err" "$TMP/out")"; fi

  if "$T" make-data "$TMP/$name.h5" --target "$TMP/$name" --samples 3 --prompt-len 5 --gen-len 8 --seed 1 \
       --device cpu >"$TMP/md.out" 2>"$TMP/md.err"; then ok
  else bad "$name: make-data failed: $(grep -m1 error "$TMP/md.err")"; fi
  rm -f "$TMP/$name.h5" "$TMP/$name.st"
done

# ---------------------------------------------------------------- what a family cannot take
B=(--layers 4 --hidden 48 --heads 4 --kv-heads 2 --vocab 100)
expect_fail no-window "--sliding-window is not supported for --arch glm4_moe" \
  "$T" make-target "$TMP/e1" --arch glm4_moe "${B[@]}" --sliding-window 4
expect_fail gemma4-last "--layer-types: --arch gemma4 has layer 3 full" \
  "$T" make-target "$TMP/e2" --arch gemma4 "${B[@]}" --sliding-window 4 --layer-types full,sliding,full,sliding
expect_fail mistral-mixed "--layer-types: --arch mistral has layer 0 sliding" \
  "$T" make-target "$TMP/e3" --arch mistral "${B[@]}" --sliding-window 4 --layer-types full,sliding,sliding,sliding
expect_fail sliding-no-window "entry 1 is sliding: give --sliding-window" \
  "$T" make-target "$TMP/e4" --arch qwen2 "${B[@]}" --layer-types full,sliding,full,full
expect_fail wrapper "the multimodal wrapper of this family is not written" \
  "$T" make-target "$TMP/e5" --arch gemma3_vl "${B[@]}"
expect_fail one-layout "--experts-layout: --arch gpt_oss's experts have one layout" \
  "$T" make-target "$TMP/e6" --arch gpt_oss "${B[@]}" --experts-layout fused
expect_fail no-intermediate "--intermediate is not used by --arch gpt_oss" \
  "$T" make-target "$TMP/e7" --arch gpt_oss "${B[@]}" --intermediate 20
expect_fail yarn-family "--rope-llama3 is not supported for --arch deepseek_v3" \
  "$T" make-target "$TMP/e8" --arch deepseek_v3 --layers 2 --hidden 48 --heads 4 --kv-heads 4 --vocab 100 --rope-llama3 4
expect_fail mla-kv "'num_key_value_heads' 2 differs from 'num_attention_heads' 4" \
  "$T" make-target "$TMP/e9" --arch deepseek_v3 "${B[@]}"
expect_fail qwen3-window "--sliding-window is not supported for --arch qwen3" \
  "$T" make-target "$TMP/e10" --arch qwen3 "${B[@]}" --sliding-window 4
expect_fail hybrid-option "--lin-k-heads is only for --arch qwen3_5" \
  "$T" make-target "$TMP/e11" --arch qwen2 "${B[@]}" --lin-k-heads 2
for e in 1 2 3 4 5 6 7 8 9 10 11; do [ -e "$TMP/e$e" ] && bad "a refused make-target left $TMP/e$e"; done
ls "$TMP" | grep -q '\.tmp\.' && bad "a refused make-target left a temporary directory" || ok
finish
