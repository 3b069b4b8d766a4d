#!/usr/bin/env bash
# test_fuzz_config.sh: a fixed-seed fuzz loop over configurations: a few hundred mutants of a valid
# run.json and of its command-line overrides (keys dropped or given twice, wrong types, huge,
# negative, NaN and infinite numbers, long strings, invalid UTF-8, NULs, control characters,
# truncated JSON, deep nesting, unknown keys, flipped bytes) go to dflash_rank --print-config (the
# parser), and every eighth to --preflight on a tiny target and training set (the checks behind it).
# Every mutant must exit 0, or non-zero with exactly one "error:" line (--preflight: or its table
# with a "problem(s)" summary); never a signal, a sanitizer report or a hang (timeout 20 each).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check # --preflight starts MPI (a singleton)
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
N=${FUZZ_CONFIG_MUTANTS:-240}

"$T" make-target "$TMP/t" --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --vocab 150 --seed 5 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/data.h5" --target "$TMP/t" --samples 24 --prompt-len 6 --gen-len 24 --seed 2 >/dev/null 2>&1 || bad "make-data"
mkdir -p "$TMP/mut"
python3 - "$TMP" "$N" <<'PYEOF' || bad "the mutator failed"
import json, random, sys
tmp, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(20240614)
base = {"run": {"dir": tmp + "/run", "seed": 7, "device": "cpu", "mode": "train"},
        "world": {"students": 1},
        "target": {"path": tmp + "/t", "layer_ids": [0, 1]},
        "teacher": {"topk": 6, "max_tokens": 512},
        "drafter": {"block_size": 6, "layers": 1},
        "train": {"steps": 3, "max_anchors": 8, "lr": 0.0006, "eval_interval": 1000, "eval_batches": 1, "ema": 0.0},
        "data": {"path": tmp + "/data.h5", "max_tokens_per_batch": 200, "heldout_samples": 4, "bucket_size": 8},
        "checkpoint": {"every": 0, "keep": 2}}
weird = ["1e309", "-1e309", "NaN", "Infinity", "-5", "0", "-1", "9223372036854775808", "1e18", "4.5", "1e-320",
         '"x"', '""', "[]", "{}", "null", "true", "[1, \"a\"]", '"' + "a" * 5000 + '"', '"\\u0000"', '"a\\nb"',
         '"\\ud800"', "-0", "1E+2", '"80GiB"', '"-1GiB"', '"99999999999T"', "[" * 50 + "]" * 50]
cli_weird = ["", "x", "nan", "inf", "-inf", "1e12", "-1", "0", "0x10", "010", "1e6", "99999999999999999999",
             "a" * 3000, "a\nb", "\x01", "\xff\xfe", "a.h5:nan,b.h5", ":", ",", "a.h5:0", "1,,2", " 5", "80GiB", "-1GiB"]
keys = [(s, k) for s in base for k in base[s]]
all_keys = keys + [("train", "weight_decay"), ("train", "grad_clip"), ("train", "mem_budget"), ("teacher", "mem_budget"),
                   ("teacher", "vocab_tile"), ("loss", "alpha"), ("loss", "gamma"), ("loss", "weighting"), ("transport", "slots"),
                   ("run", "rank_timeout"), ("data", "sets"), ("drafter", "sliding_window"), ("drafter", "mask_token_id"),
                   ("test", "stop_at_step"), ("features", "shard_samples"), ("run", "resume"), ("drafter", "config")]

def text(cfg):
    return json.dumps(cfg, indent=1)

def mutate_obj():
    cfg = json.loads(json.dumps(base))
    for _ in range(rng.randint(1, 3)):
        s, k = rng.choice(all_keys)
        op = rng.randrange(8)
        sec = cfg.setdefault(s, {}) if isinstance(cfg.get(s, {}), dict) else {}
        if op >= 4 and isinstance(base.get(s, {}).get(k), (int, float)) and not isinstance(base[s][k], bool):
            sec[k] = type(base[s][k])(base[s][k] * rng.choice([1, 2, 3]))    # another sane value
        elif op >= 4 and k in sec: del sec[k]
        elif op == 0 and k in sec: del sec[k]
        elif op == 1: sec[k] = "@W%d@" % rng.randrange(len(weird))
        elif op == 2: sec["unknown_" + k] = 1
        else: cfg[s] = rng.choice([5, "x", [], None, {k: "@W%d@" % rng.randrange(len(weird))}])
    t = text(cfg)
    for i, w in enumerate(weird):
        t = t.replace('"@W%d@"' % i, w)
    return t.encode()

def mutate_raw():
    t = text(base).encode()
    op = rng.randrange(8)
    if op == 0: return t[:rng.randrange(len(t))]                                   # truncated
    if op == 1:                                                                    # a key twice
        s, k = rng.choice(keys)
        return t.replace(b'"%s": {' % s.encode(), b'"%s": {"%s": %s, ' % (s.encode(), k.encode(), json.dumps(base[s][k]).encode()), 1)
    if op == 2:                                                                    # deep nesting
        d = rng.choice([10, 900, 1001, 5000])
        return b'{"run": ' + b'{"a": ' * d + b'1' + b'}' * d + b'}'
    if op == 3:                                                                    # invalid UTF-8, NULs, control bytes
        b = bytearray(t)
        for _ in range(rng.randint(1, 4)):
            b.insert(rng.randrange(len(b)), rng.choice([0x00, 0xff, 0xc0, 0x80, 0x0a, 0x01, 0x7f]))
        return bytes(b)
    if op == 4:                                                                    # flipped bytes
        b = bytearray(t)
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if op == 5: return t.replace(b'"dir": "', b'"dir": "a\\u0000', 1)                # a NUL escape
    if op == 6: return rng.choice([b"", b"[]", b"null", b"1", b'"x"', b"{", b"{}" * 3, b"\xef\xbb\xbf{}"])
    return t.replace(b'"seed"', b'"se\\ned"', 1)                                   # a newline in a key

for i in range(n):
    data = mutate_obj() if rng.random() < 0.6 else mutate_raw()
    open("%s/mut/%d.json" % (tmp, i), "wb").write(data)
    args = []
    for _ in range(rng.choice([0, 0, 0, 0, 1, 2])):
        s, k = rng.choice(all_keys + [("nope", "key"), ("train", "")])
        args.append("--%s.%s=%s" % (s, k, rng.choice(cli_weird)))
    if rng.random() < 0.05: args.append(rng.choice(["--", "--=", "--config", "--mode", "--train.lr", "-x", "--=1"]))
    open("%s/mut/%d.args" % (tmp, i), "wb").write(b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in args))
PYEOF

accepted=0 refused=0 t0=$(date +%s)
for ((i = 0; i < N; i++)); do
  mapfile -d '' args <"$TMP/mut/$i.args"
  mode=--print-config
  [ $((i % 8)) -eq 7 ] && mode=--preflight
  timeout 20 "$R" --config "$TMP/mut/$i.json" "${args[@]}" "$mode" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  what="mutant $i ($mode, $(head -c 120 "$TMP/mut/$i.json" | tr -c '[:print:]' '?')... args: ${args[*]:0:3})"
  if [ "$rc" -eq 124 ]; then bad "$what: hung (killed after 20 s)"; continue; fi
  if [ "$rc" -ge 128 ]; then bad "$what: killed by a signal (exit $rc)"; tail -5 "$TMP/err" >&2; continue; fi
  if grep -qE "runtime error|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer" "$TMP/err"; then
    bad "$what: sanitizer report"; head -20 "$TMP/err" >&2; continue
  fi
  if [ "$rc" -eq 0 ]; then accepted=$((accepted + 1)); ok; continue; fi
  lines=$(grep -c "error:" "$TMP/err")
  if [ "$lines" -eq 1 ] || { [ "$mode" = --preflight ] && [ "$lines" -eq 0 ] && grep -q "^preflight: .*problem(s)" "$TMP/out"; }; then
    refused=$((refused + 1)); ok
  else
    bad "$what: exit $rc with $lines error lines, wanted one:"; head -5 "$TMP/err" >&2
  fi
done
echo "test_fuzz_config: $N mutants in $(($(date +%s) - t0)) s: $accepted accepted, $refused refused"
[ $((accepted + refused)) -eq "$N" ] && ok || bad "only $((accepted + refused)) of $N mutants behaved"
[ "$accepted" -gt 0 ] && [ "$refused" -gt 0 ] && ok || bad "the mutants were all accepted or all refused: the mutator is broken"
finish
