#!/usr/bin/env bash
# test_fuzz_files.sh: hostile data files never crash a tool. With a fixed seed, a few hundred
# mutants of real files go through real consumers:
#   safetensors  the model.safetensors of a tiny target: header JSON mutated (dtypes, shapes,
#                offsets, keys, names, metadata, stray bytes), the length field changed (an odd,
#                padded header length is valid and must load), data truncated or extended; read by
#                `dflash_tool inspect` and, every other one, loaded and run by `teacher-dump`
#   training set a make-data set (fixed-length tokenizer) and a legacy one written by h5py with a
#                variable-length tokenizer in the global heap (GCOL block): bytes flipped in the
#                metadata and anywhere, 0xbb at every byte of the heap block's header and first
#                object, truncations; read by `dflash_tool inspect` and, some, by a
#                `dflash_rank --mode dump-features` run (opens the set and reads every sample)
#   checkpoint   one bit flipped anywhere in model.safetensors, optimizer.safetensors or state.json of
#                a 2-step checkpoint, resumed by `dflash_rank --mode train`: every one must be refused
#                naming the corruption (the checksums, crc32c.h), never resumed
#   features     one bit flipped anywhere in a dump's features.json (must be refused: its seal) or its
#                shard (refused, or accepted with a run identical to the unmutated one: the bit was in
#                bytes HDF5 does not read), trained on by a student-only run; the shard's attributes
#                (feature_dtype, hidden_size, topk, target_layer_ids, vocab_size) changed: refused
#   config.json  the target's config.json with a key set to an odd value (0, -1, 2^31, 2^53, a float, a
#                string, null, a list), removed, given twice, a structural size off by one, the
#                architecture changed, a layer_types list, bytes after the document; read by --plan
#                and `teacher-dump`: an accepted mutant of a structural key must dump exactly the
#                unmutated features (else it is a silent acceptance of config.json against the weights)
#   index.json   the index of a 2-shard target: entries removed, renamed, pointed at the other shard,
#                a missing one, "../x", an absolute path, /dev/zero, a FIFO or a directory inside the
#                model directory; weight_map of the wrong type, keys given twice, bytes after it;
#                `teacher-dump`: accepted only with the unmutated features (issue 27 items 5, 7, 8)
#   regenerate   the prompts JSONL (characters replaced, ranges removed, cut short, odd ids, input_ids
#                of other types, keys given twice, no prompt, prompts past the target's positions) and
#                generation_config.json (eos_token_id odd, given twice, cut short, not an object):
#                `dflash_rank --mode regenerate`; refused with no file left, or accepted with a set
#                that `dflash_tool inspect` reads (issue 38)
#   regenerate   also two `--mode regenerate` jobs on one regenerate.out, the second started 0-400 ms
#                after the first: one completes with a lone job's file, the other is refused (the
#                output in use) or completes after it; a mutated training set given as
#                regenerate.out is refused and left unchanged
#   paths        (issue 49) links, files named like locks, parts or shards and inputs inside output
#                directories (regenerate, dump-features, train): one error line or success, the
#                user's files and the job's inputs unchanged by content hash, a refusal changing nothing
# Every run must exit 0, or non-zero with exactly one "error:" line; never a signal (exit >= 128),
# a sanitizer report or a hang (timeout 20 s each). Prints how many ran, were accepted and refused.
source "$DFLASH_SRC/tests/cli/lib.sh"
T=$BUILD/dflash_tool
R=$BUILD/dflash_rank
PY=/usr/bin/python3 # Debian's, with numpy and h5py (no PyPI packages)
if ! $PY -c 'import h5py, numpy' 2>/dev/null; then
  echo "test_fuzz_files: $PY lacks h5py/numpy (scripts/install-deps.sh installs python3-h5py)" >&2
  exit 1
fi

# ---------------------------------------------------------------- the real files
"$T" make-target "$TMP/tgt" --arch qwen3 --layers 2 --hidden 32 --heads 2 --kv-heads 1 --vocab 100 \
  --max-positions 64 --seed 3 >/dev/null 2>&1 || bad "make-target"
"$T" make-data "$TMP/set.h5" --target "$TMP/tgt" --samples 6 --prompt-len 4 --gen-len 12 --seed 1 >/dev/null 2>&1 ||
  bad "make-data"
echo '{"sequences": [[1, 2, 3, 4, 5, 6, 7, 8]]}' >"$TMP/toks.json"
"$T" make-target "$TMP/shards" --arch llama --layers 2 --hidden 32 --heads 2 --kv-heads 1 --vocab 100 \
  --max-positions 64 --shards 2 --seed 4 >/dev/null 2>&1 || bad "make-target --shards 2"
# the legacy file: the same samples, the tokenizer a variable-length string (h5py's default for str)
$PY - "$TMP/set.h5" "$TMP/legacy.h5" <<'PYEOF' || bad "legacy training set"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    for k in ("tokens", "loss_mask", "offsets"):
        g.create_dataset(k, data=f[k][...], chunks=True, maxshape=(None,))
    g.attrs["vocab_size"] = f.attrs["vocab_size"]
    g.attrs["format_version"] = f.attrs["format_version"]
    g.attrs["tokenizer"] = "legacy/" + f.attrs["tokenizer"].decode()
assert open(sys.argv[2], "rb").read().find(b"GCOL") > 0, "no global heap in the legacy file"
PYEOF
# the unmutated files pass every consumer (so a refusal below is the mutation's doing)
expect_ok "inspect the target's weights" "$T" inspect "$TMP/tgt/model.safetensors"
expect_ok "teacher-dump" "$T" teacher-dump "$TMP/tgt" "$TMP/toks.json" "$TMP/dump.st" --layers 0,1 --topk 4 --device cpu
expect_ok "teacher-dump of the shards" "$T" teacher-dump "$TMP/shards" "$TMP/toks.json" "$TMP/dump_shards.st" --layers 0,1 \
  --topk 4 --device cpu
expect_ok "inspect the set" "$T" inspect "$TMP/set.h5"
expect_ok "inspect the legacy set" "$T" inspect "$TMP/legacy.h5"
grep -q 'tokenizer = "legacy/random-prompts' "$TMP/out" && ok || bad "legacy tokenizer not read: $(cat "$TMP/out")"

# a feature dump and a checkpoint of a student-only run on it (the checkpoint and feature mutants).
# Open MPI's plugins leak at MPI_Finalize and are unloaded by then, so tests/lsan.supp cannot name
# them: no leak check on these dflash_rank runs, as on the mutants' (tests/cli/lib.sh).
no_leaks="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
ASAN_OPTIONS="$no_leaks" "$R" --mode dump-features --device cpu --target.path="$TMP/tgt" --target.layer_ids=0,1 --drafter.block_size=2 \
  --data.path="$TMP/set.h5" --teacher.topk=4 --features.dir="$TMP/feat" >/dev/null 2>&1 || bad "dump-features"
ASAN_OPTIONS="$no_leaks" "$R" --mode train --device cpu --target.path="$TMP/tgt" --target.layer_ids=0,1 --drafter.block_size=2 --teacher.topk=4 \
  --data.features="$TMP/feat" --data.heldout_samples=1 --train.eval_interval=100000000 --train.eval_batches=1 \
  --train.log_interval=1 --train.max_anchors=4 --train.steps=2 --checkpoint.every=2 --run.dir="$TMP/ckrun" \
  >/dev/null 2>&1 || bad "the checkpoint run"

# ---------------------------------------------------------------- mutate and run
mkdir -p "$TMP/m"
SECONDS=0
$PY - "$TMP" "$T" "$R" <<'PYEOF'
import json, os, random, shutil, struct, subprocess, sys, time

tmp, tool, rank = sys.argv[1:4]
rng = random.Random(1414)
counts = {"ran": 0, "accepted": 0, "refused": 0, "heap": 0}
failures = []
BAD_WORDS = ("runtime error", "AddressSanitizer", "LeakSanitizer", "Segmentation", "core dumped")


def run(what, cmd, leaks=True):
    env = dict(os.environ)
    if not leaks:  # Open MPI's plugins leak at MPI_Finalize (tests/cli/lib.sh)
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    p = subprocess.run(["timeout", "20"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    err = p.stderr.decode(errors="replace")
    text = err + p.stdout.decode(errors="replace")
    n_err = sum(1 for line in err.splitlines() if "error:" in line)
    counts["ran"] += 1
    why = None
    if p.returncode == 124:
        why = "hang (timeout 20 s)"
    elif p.returncode >= 128 or p.returncode < 0:
        why = "signal (exit %d)" % p.returncode
    elif any(w in text for w in BAD_WORDS):
        why = "sanitizer report or crash"
    elif p.returncode != 0 and n_err != 1:
        why = "exit %d with %d error lines" % (p.returncode, n_err)
    if why:
        failures.append("%s: %s\n  %s\n%s" % (what, why, " ".join(cmd), "\n".join(err.splitlines()[-8:])))
    counts["accepted" if p.returncode == 0 else "refused"] += 1
    counts["heap"] += "from the global heap" in err  # a corrupt heap met by the child process (h5safe.h)


# ---- safetensors
model = open(os.path.join(tmp, "tgt", "model.safetensors"), "rb").read()
hlen = struct.unpack("<Q", model[:8])[0]
header = json.loads(model[8:8 + hlen])
data = model[8 + hlen:]
names = [k for k in header if k != "__metadata__"]
DTYPES = ["F32", "F16", "BF16", "F64", "I8", "U8", "I32", "I64", "BOOL", "F8", "bf16", "", 7, None]
ODD_VALUES = [-1, 0, 1, 2**31, 2**53, 2**53 + 1, 2**64, 1.5, "3", None, [], {}, True]


def mutate_header():
    h = json.loads(json.dumps(header))
    name = rng.choice(names)
    e = h[name]
    k = rng.randrange(12)
    if k == 0:
        e["dtype"] = rng.choice(DTYPES)
    elif k == 1 and e["shape"]:
        d = rng.randrange(len(e["shape"]))
        e["shape"][d] = rng.choice(ODD_VALUES + [e["shape"][d] + 1, e["shape"][d] - 1])
    elif k == 2:
        e["shape"] = rng.choice([[], [1] * 9, e["shape"] + [1], e["shape"][::-1], "x", [0]])
    elif k == 3:
        i = rng.randrange(2)
        e["data_offsets"][i] = rng.choice(ODD_VALUES + [e["data_offsets"][i] + rng.choice([-2, -1, 1, 2])])
    elif k == 4:
        e["data_offsets"] = rng.choice([e["data_offsets"][::-1], [0], [0, 0, 0], "0,1", None])
    elif k == 5:
        del e[rng.choice(["dtype", "shape", "data_offsets"])]
    elif k == 6:
        del h[name]
    elif k == 7:
        h[name + ".x"] = h.pop(name)
    elif k == 8:
        other = rng.choice(names)
        e["data_offsets"] = list(h[other]["data_offsets"])
    elif k == 9:
        h["__metadata__"] = rng.choice([{"format": 5}, [], "pt", {"a": None}, None])
    elif k == 10:
        h[name] = rng.choice([[], 5, "t", None])
    else:
        e["extra"] = rng.choice(ODD_VALUES)
    return json.dumps(h, separators=(",", ":")).encode()


def st_mutant():
    k = rng.randrange(10)
    hb = json.dumps(header, separators=(",", ":")).encode()
    if k <= 3:
        hb = mutate_header()
    elif k == 4:  # stray bytes in the header text
        hb = bytearray(hb)
        for _ in range(rng.randrange(1, 4)):
            hb[rng.randrange(len(hb))] = rng.choice(b'{}[]",:0 \x00\xff\\')
        hb = bytes(hb)
    elif k == 5:  # duplicate key, as text
        n = rng.choice(names)
        hb = hb[:-1] + b',"' + n.encode() + b'":' + json.dumps(header[n]).encode() + b"}"
    elif k == 6:  # padding: an odd (valid) or any header length
        hb = hb + b" " * rng.randrange(0, 9)
    length = len(hb)
    body = data
    if k == 7:
        length = rng.choice([0, 1, 7, length - 1, length + 1, len(model), 2**40, 2**64 - 1])
    elif k == 8:
        body = data[:rng.randrange(len(data) + 1)]
    elif k == 9:
        body = data + bytes(rng.randrange(1, 9))
    return struct.pack("<Q", length) + hb + body


tdir = os.path.join(tmp, "m", "tgt")
os.makedirs(tdir, exist_ok=True)
shutil.copy(os.path.join(tmp, "tgt", "config.json"), tdir)
N_ST = 110
for i in range(N_ST):
    path = os.path.join(tdir, "model.safetensors")
    with open(path, "wb") as f:
        f.write(st_mutant())
    run("safetensors mutant %d (inspect)" % i, [tool, "inspect", path])
    if i % 2 == 0:
        run("safetensors mutant %d (teacher-dump)" % i,
            [tool, "teacher-dump", tdir, os.path.join(tmp, "toks.json"), os.path.join(tmp, "m", "dump.st"),
             "--layers", "0,1", "--topk", "4", "--device", "cpu"])
n_st = counts["ran"]

# ---- training sets
sets = {name: open(os.path.join(tmp, name), "rb").read() for name in ("set.h5", "legacy.h5")}
gcol = sets["legacy.h5"].find(b"GCOL")


def h5_mutant(i):
    name = "legacy.h5" if i % 3 == 0 else "set.h5"
    b = bytearray(sets[name])
    if name == "legacy.h5" and i // 3 < 48:  # 0xbb at each byte of the heap header and first object
        b[gcol + i // 3] = 0xBB
        return name, b
    k = rng.randrange(8)
    if k == 0:  # truncated
        return name, b[:rng.randrange(len(b))]
    if name == "legacy.h5" and k == 1:  # anywhere in the heap block
        b[gcol + rng.randrange(4096)] = rng.randrange(256)
        return name, b
    for _ in range(rng.randrange(1, 4)):  # metadata (the first 8 KiB) mostly, or anywhere
        at = rng.randrange(8192) if rng.random() < 0.8 else rng.randrange(len(b))
        b[at] = rng.choice([0x00, 0xFF, 0xBB, b[at] ^ (1 << rng.randrange(8)), rng.randrange(256)])
    return name, b


N_H5 = 144
dump_every = 12
for i in range(N_H5):
    name, b = h5_mutant(i)
    path = os.path.join(tmp, "m", "ts_%03d.h5" % i)
    with open(path, "wb") as f:
        f.write(b)
    run("%s mutant %d (inspect)" % (name, i), [tool, "inspect", path])
    if i % dump_every == 1:
        run("%s mutant %d (dump-features)" % (name, i),
            [rank, "--mode", "dump-features", "--device", "cpu", "--target.path=" + os.path.join(tmp, "tgt"),
             "--target.layer_ids=0,1", "--drafter.block_size=2", "--data.path=" + path, "--teacher.topk=4",
             "--features.dir=" + os.path.join(tmp, "m", "feat_%03d" % i), "--run.dir=" + os.path.join(tmp, "m", "run")],
            leaks=False)
    os.remove(path)

n_before_ck = counts["ran"]

# ---- config.json and index.json (issue 27 items 5, 7, 8)
DUMP = ["--layers", "0,1", "--topk", "4", "--device", "cpu"]
STRUCTURAL = ["num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "vocab_size"]
CFG_VALUES = [0, -1, 1, 2**31, 2**53, 2**62, 1.5, "8", None, [], {}, True, 1e300]


def dump_is_reference(out, ref):  # the mutant dumped exactly what the unmutated model dumps
    try:
        return open(out, "rb").read() == open(ref, "rb").read()
    except OSError:
        return False


cfg_text = open(os.path.join(tmp, "tgt", "config.json")).read()
cfg = json.loads(cfg_text)
cdir = os.path.join(tmp, "m", "cfg")
os.makedirs(cdir, exist_ok=True)
os.symlink(os.path.join(tmp, "tgt", "model.safetensors"), os.path.join(cdir, "model.safetensors"))
N_CFG = 54
n_cfg_before = counts["ran"]
for i in range(N_CFG):
    c = json.loads(cfg_text)
    key = rng.choice(STRUCTURAL if i % 2 == 0 else sorted(cfg))
    k = rng.randrange(8)
    if k <= 2:
        c[key] = rng.choice(CFG_VALUES)
        text = json.dumps(c)
    elif k == 3:
        c.pop(key, None)
        text = json.dumps(c)
    elif k == 4 and isinstance(cfg.get(key), int) and not isinstance(cfg.get(key), bool):
        c[key] = cfg[key] + rng.choice([-1, 1])
        text = json.dumps(c)
    elif k == 5:  # given twice, as text
        text = json.dumps(c)[:-1] + ", " + json.dumps(key) + ": " + json.dumps(rng.choice(CFG_VALUES)) + "}"
    elif k == 6:
        c[rng.choice(["architectures", "model_type", "layer_types", "rope_scaling", "tie_word_embeddings"])] = rng.choice(
            [["Qwen3MoeForCausalLM"], "llama", ["full_attention"], ["full_attention"] * 3, {"rope_type": "yarn"}, None, 1])
        text = json.dumps(c)
        key = "(another key)"
    else:
        text = json.dumps(c) + rng.choice([" x", "{}", "\x00", "]", ",{}"])
        key = "(trailing bytes)"
    with open(os.path.join(cdir, "config.json"), "w") as f:
        f.write(text)
    what = "config.json mutant %d (%s)" % (i, key)
    run(what + " --plan", [rank, "--plan", "--target.path=" + cdir, "--target.layer_ids=0,1", "--drafter.block_size=2",
                           "--teacher.topk=4"], leaks=False)
    out = os.path.join(tmp, "m", "cfg_dump.st")
    if os.path.exists(out):
        os.remove(out)
    before = counts["accepted"]
    run(what + " teacher-dump", [tool, "teacher-dump", cdir, os.path.join(tmp, "toks.json"), out] + DUMP)
    if counts["accepted"] > before and key in STRUCTURAL and not dump_is_reference(out, os.path.join(tmp, "dump.st")):
        failures.append("%s: accepted by teacher-dump with other features (a silent acceptance)\n  %s" % (what, text))

index_text = open(os.path.join(tmp, "shards", "model.safetensors.index.json")).read()
index = json.loads(index_text)
shard_names = sorted(set(index["weight_map"].values()))
N_IDX = 36
for i in range(N_IDX):
    d = os.path.join(tmp, "m", "idx_%02d" % i)
    shutil.copytree(os.path.join(tmp, "shards"), d)
    x = json.loads(index_text)
    wm = x["weight_map"]
    tname = rng.choice(sorted(wm))
    k = rng.randrange(12)
    special = None
    if k == 0:
        del wm[tname]
    elif k == 1:
        wm[tname + ".x"] = wm.pop(tname)
    elif k == 2:
        wm[tname] = [s for s in shard_names if s != wm[tname]][0]
    elif k == 3:
        wm[tname] = rng.choice(["missing.safetensors", "../model.safetensors", "/dev/zero", "", ".", "a/../../x"])
    elif k == 4:
        special = "zero.safetensors"
        os.symlink("/dev/zero", os.path.join(d, special))
        wm[tname] = special
    elif k == 5:
        special = "fifo.safetensors"
        os.mkfifo(os.path.join(d, special))
        wm[tname] = special
    elif k == 6:
        special = "dir.safetensors"
        os.mkdir(os.path.join(d, special))
        wm[tname] = special
    elif k == 7:
        wm["model.layers.9.mlp.up_proj.weight"] = shard_names[0]
    elif k == 8:
        x["weight_map"] = rng.choice([[], "x", None, 5, {}])
    elif k == 9:
        wm[tname] = rng.choice([5, None, [], {}])
    text = json.dumps(x)
    if k == 10:  # a key given twice, as text
        text = text.replace('"weight_map": {', '"weight_map": {"%s": "%s", ' % (tname, shard_names[-1]), 1)
    elif k == 11:
        text = text + rng.choice([" ]", "x", "{}"])
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write(text)
    what = "index.json mutant %d (kind %d, %s)" % (i, k, tname)
    out = os.path.join(d, "dump.st")
    before = counts["accepted"]
    run(what + " teacher-dump", [tool, "teacher-dump", d, os.path.join(tmp, "toks.json"), out] + DUMP)
    if counts["accepted"] > before and not dump_is_reference(out, os.path.join(tmp, "dump_shards.st")):
        failures.append("%s: accepted with other features (a silent acceptance)\n  %s" % (what, text[:300]))
    shutil.rmtree(d)
print("fuzz: %d config.json mutants and %d index.json mutants: %d runs" % (N_CFG, N_IDX, counts["ran"] - n_cfg_before))

# ---- regenerate's inputs (issue 38): the prompts JSONL and the target's generation_config.json
# Every mutant is refused in one line (and no set, part or temporary file is left) or accepted with
# a set `dflash_tool inspect` reads, never a crash or a half-written file.
REGEN = [rank, "--mode", "regenerate", "--device", "cpu", "--target.path=" + os.path.join(tmp, "rg_tgt"),
         "--regenerate.max_new_tokens=3", "--regenerate.shard_prompts=2", "--regenerate.heldout=1"]
shutil.copytree(os.path.join(tmp, "tgt"), os.path.join(tmp, "rg_tgt"))
base_prompts = [[rng.randrange(100) for _ in range(rng.randint(2, 8))] for _ in range(6)]
base_text = "".join(json.dumps({"input_ids": p}) + "\n" for p in base_prompts)
CHARS = list('{}[],:" \n\t-.e0123456789') + ["\x00", "\xff", "\\", "x"]


def regen_run(what, prompts_text, gen_config):
    d = os.path.join(tmp, "m", "rg")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    pp, out = os.path.join(d, "p.jsonl"), os.path.join(d, "out.h5")
    with open(pp, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(prompts_text)
    gc = os.path.join(tmp, "rg_tgt", "generation_config.json")
    if gen_config is None:
        if os.path.exists(gc): os.remove(gc)
    else:
        with open(gc, "w") as f: f.write(gen_config)
    before = counts["accepted"]
    run(what, REGEN + ["--regenerate.prompts=" + pp, "--regenerate.out=" + out], leaks=False)
    left = [n for n in os.listdir(d) if ".tmp." in n] + [n for n in os.listdir(d) if n.endswith(".parts") and counts["accepted"] > before]
    if left:
        failures.append("%s: left behind: %s" % (what, left))
    if counts["accepted"] > before:
        p = subprocess.run(["timeout", "20", tool, "inspect", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if p.returncode != 0:
            failures.append("%s: accepted, but the set is unreadable: %s" % (what, p.stderr.decode(errors="replace")[-300:]))
    elif os.path.exists(out):
        failures.append("%s: refused, but %s exists" % (what, out))


def mutate_prompts():
    t = base_text
    k = rng.randrange(10)
    if k == 0:  # a character replaced
        i = rng.randrange(len(t)); t = t[:i] + rng.choice(CHARS) + t[i + 1:]
    elif k == 1:  # a range removed
        i = rng.randrange(len(t)); t = t[:i] + t[i + rng.randint(1, 12):]
    elif k == 2:  # cut short
        t = t[:rng.randrange(len(t))]
    elif k == 3:  # an odd id
        v = rng.choice([-1, 99, 100, 2**31, 2**53, 1e20, 1.5, "3", None, [], {}, True])
        p = [list(x) for x in base_prompts]; p[rng.randrange(6)][0] = v
        t = "".join(json.dumps({"input_ids": x}) + "\n" for x in p)
    elif k == 4:  # input_ids of another type, or absent
        v = rng.choice([[], 3, "ids", None, {}, [[1, 2]]])
        t = json.dumps({"input_ids": v}) + "\n" + t if v is not None else '{"ids": [1]}\n' + t
    elif k == 5:  # a key given twice, other keys
        t = '{"input_ids": [1, 2], "input_ids": [3, 4, 5], "x": 1}\n' + t
    elif k == 6:  # blank lines only, or nothing
        t = rng.choice(["", "\n\n", "   \n"])
    elif k == 7:  # a prompt past the target's 64 positions
        t = json.dumps({"input_ids": [1] * rng.choice([61, 64, 65, 1000])}) + "\n" + t
    elif k == 8:  # not an object per line
        t = rng.choice(["[1, 2, 3]\n", "null\n", "1\n", '"s"\n']) + t
    else:  # many lines duplicated
        t = t * rng.randint(2, 5)
    return t


def mutate_gen_config():
    v = rng.choice([-1, 0, 99, 100, 1.5, 1e20, -1e20, "3", None, [], [1, 2], [1, "x"], [1.5], {}, True, [[1]], 2**63])
    k = rng.randrange(5)
    if k == 0: return json.dumps({"eos_token_id": v})
    if k == 1: return '{"eos_token_id": %s, "eos_token_id": %s}' % (json.dumps(v), json.dumps(rng.choice([1, 2, 500, "x"])))
    if k == 2: return json.dumps({"eos_token_id": v})[:rng.randrange(1, 20)]
    if k == 3: return rng.choice(["", "[]", "null", '{"eos_token_id": 1} x', "\x00"])
    return json.dumps({"eos_token_id": v, "bos_token_id": v})


N_RP, N_RG = 22, 14
rg_accepted = counts["accepted"]
for i in range(N_RP):
    regen_run("regenerate prompts mutant %d" % i, mutate_prompts(), None)
for i in range(N_RG):
    regen_run("regenerate generation_config mutant %d" % i, base_text, mutate_gen_config())
print("fuzz: %d regenerate prompts mutants and %d generation_config.json mutants: %d accepted" %
      (N_RP, N_RG, counts["accepted"] - rg_accepted))

# ---- checkpoints and features: flipped bits
TRAIN = [rank, "--mode", "train", "--device", "cpu", "--target.path=" + os.path.join(tmp, "tgt"), "--target.layer_ids=0,1",
         "--drafter.block_size=2", "--teacher.topk=4", "--data.heldout_samples=1", "--train.eval_interval=100000000",
         "--train.eval_batches=1", "--train.log_interval=1", "--train.max_anchors=4"]


def flip_one(path):
    b = bytearray(open(path, "rb").read())
    at = rng.randrange(len(b))
    b[at] ^= 1 << rng.randrange(8)
    open(path, "wb").write(b)
    return at


def losses(run_dir):  # what a run computed, without its timings
    keys = ("step", "split", "loss", "ce", "kl", "cap", "grad_norm")
    try:
        return [tuple(json.loads(l).get(k) for k in keys) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    except OSError:
        return None


ck_step = os.path.join("checkpoints", "step-00000002")
N_CK = 27
for i in range(N_CK):
    d = os.path.join(tmp, "m", "ck_%02d" % i)
    shutil.copytree(os.path.join(tmp, "ckrun"), d)
    name = ("model.safetensors", "optimizer.safetensors", "state.json")[i % 3]
    at = flip_one(os.path.join(d, ck_step, name))
    what = "checkpoint mutant %d (%s, byte %d)" % (i, name, at)
    before = counts["accepted"]
    run(what, TRAIN + ["--data.features=" + os.path.join(tmp, "feat"), "--train.steps=3", "--run.dir=" + d,
                       "--run.resume=true"], leaks=False)
    if counts["accepted"] > before:
        failures.append("%s: resumed (a silent acceptance of a corrupt checkpoint)" % what)
    shutil.rmtree(d)

subprocess.run(TRAIN + ["--data.features=" + os.path.join(tmp, "feat"), "--train.steps=2",
                        "--run.dir=" + os.path.join(tmp, "m", "ft_ref")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
reference = losses(os.path.join(tmp, "m", "ft_ref"))
if not reference:
    failures.append("the unmutated features did not train")
shard = sorted(f for f in os.listdir(os.path.join(tmp, "feat")) if f.endswith(".h5"))[0]
N_FT = 27
ft_same = 0
for i in range(N_FT):
    d = os.path.join(tmp, "m", "ft_%02d" % i)
    shutil.copytree(os.path.join(tmp, "feat"), d)
    name = "features.json" if i % 3 == 0 else shard
    if i % 3 == 2:  # a bit of one element of a dataset (a raw flip mostly lands in unused chunk space)
        import h5py, numpy as np
        with h5py.File(os.path.join(d, name), "r+") as f:
            ds = rng.choice([k for k in ("tokens", "loss_mask", "offsets", "features", "topk_idx", "topk_val", "lse", "crc32c")
                             if k in f])
            a = f[ds][...]
            flat = a.reshape(-1).view(np.uint8)
            at = rng.randrange(flat.size)
            flat[at] ^= np.uint8(1 << rng.randrange(8))
            f[ds][...] = a
        name = "%s /%s" % (name, ds)
    else:
        at = flip_one(os.path.join(d, name))
    what = "features mutant %d (%s, byte %d)" % (i, name, at)
    before = counts["accepted"]
    rd = os.path.join(tmp, "m", "ft_run_%02d" % i)
    run(what, TRAIN + ["--data.features=" + d, "--train.steps=2", "--run.dir=" + rd], leaks=False)
    if counts["accepted"] > before:
        if name == "features.json":
            failures.append("%s: accepted (the index's seal missed it)" % what)
        elif losses(rd) != reference:
            failures.append("%s: accepted with other losses (a silent acceptance)\n  %s\n  %s" % (what, losses(rd), reference))
        else:
            ft_same += 1
    shutil.rmtree(d)
    shutil.rmtree(rd, ignore_errors=True)

# the shard's metadata (its attributes, which no checksum covers): every change must be refused
import h5py, numpy as np
ATTRS = [("feature_dtype", b"float16"), ("feature_dtype", b"bf16"), ("hidden_size", np.int64(16)), ("topk", np.int64(3)),
         ("target_layer_ids", np.array([1, 0], dtype=np.int64)), ("target_layer_ids", np.array([0], dtype=np.int64)),
         ("vocab_size", np.int64(50)), ("vocab_size", np.int64(2**40))]
for i, (attr, value) in enumerate(ATTRS):
    d = os.path.join(tmp, "m", "fa_%02d" % i)
    shutil.copytree(os.path.join(tmp, "feat"), d)
    with h5py.File(os.path.join(d, shard), "r+") as f:
        f.attrs[attr] = value
    what = "features metadata mutant %d (%s = %r)" % (i, attr, value)
    before = counts["accepted"]
    rd = os.path.join(tmp, "m", "fa_run_%02d" % i)
    run(what, TRAIN + ["--data.features=" + d, "--train.steps=2", "--run.dir=" + rd], leaks=False)
    if counts["accepted"] > before:
        failures.append("%s: accepted (a silent acceptance of features that say another thing)" % what)
    shutil.rmtree(d)
    shutil.rmtree(rd, ignore_errors=True)

# ---- regenerate.out: jobs racing for one output, and training-set mutants given as the output
prompts = os.path.join(tmp, "m", "prompts.jsonl")
with open(prompts, "w") as f:
    for i in range(16):
        f.write(json.dumps({"input_ids": [rng.randrange(100) for _ in range(rng.randint(2, 12))]}) + "\n")
REGEN = [rank, "--mode", "regenerate", "--device", "cpu", "--target.path=" + os.path.join(tmp, "tgt"),
         "--regenerate.prompts=" + prompts, "--regenerate.max_new_tokens=24", "--regenerate.shard_prompts=2",
         "--regenerate.max_seqs=2", "--regenerate.heldout=2"]
lone = os.path.join(tmp, "m", "lone.h5")
run("regenerate alone", REGEN + ["--regenerate.out=" + lone], leaks=False)  # an MPI singleton: Open MPI's plugins leak
N_RACE = 6
for i in range(N_RACE):  # two jobs on one output, the second started 0-400 ms after the first
    out = os.path.join(tmp, "m", "race_%02d.h5" % i)
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    procs = []
    for k in range(2):
        procs.append(subprocess.Popen(["timeout", "60"] + REGEN + ["--regenerate.out=" + out], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=env))
        if k == 0:
            time.sleep(rng.random() * 0.4)
    results = [(p.wait(), p.stderr.read().decode(errors="replace")) for p in procs]
    for p in procs:
        p.stdout.close(); p.stderr.close()
    counts["ran"] += 2
    what = "race %d" % i
    for rc, err in results:
        n_err = sum(1 for line in err.splitlines() if "error:" in line)
        if rc >= 124 or rc < 0 or any(w in err for w in BAD_WORDS) or (rc != 0 and n_err != 1):
            failures.append("%s: exit %d with %d error lines\n%s" % (what, rc, n_err, "\n".join(err.splitlines()[-8:])))
        elif rc != 0 and "is in use by another job" not in err:
            failures.append("%s: refused for another reason: %s" % (what, err.splitlines()[-1]))
    if not any(rc == 0 for rc, _ in results):
        failures.append("%s: neither job completed" % what)
    elif open(out, "rb").read() != open(lone, "rb").read():
        failures.append("%s: the output differs from a lone job's" % what)
    for leftover in (out + ".lock", out + ".parts"):
        if os.path.exists(leftover):
            failures.append("%s: %s left behind" % (what, leftover))
N_AS_OUT = 12
for i in range(N_AS_OUT):  # a mutant of a training set as regenerate.out: refused, the file unchanged
    d = os.path.join(tmp, "m", "as_out_%02d.h5" % i)
    data = bytearray(open(os.path.join(tmp, "set.h5"), "rb").read())
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    open(d, "wb").write(bytes(data))
    what = "training-set mutant %d as regenerate.out" % i
    before = counts["accepted"]
    run(what, REGEN + ["--regenerate.out=" + d], leaks=False)
    if counts["accepted"] > before:
        failures.append("%s: accepted (a file regenerate did not make was replaced)" % what)
    elif open(d, "rb").read() != bytes(data):
        failures.append("%s: the refused output changed" % what)
    os.remove(d)

# ---- paths (issue 49): symlinks, files named like locks, parts or shards, inputs inside output
# directories. Each case lays a user's file, a link to one (or to nothing), an empty file, a
# directory or a stale lock line of ours at a name a mode writes (OUT.lock, OUT.parts/part-*,
# features.dir/.lock and shards, run.dir/.lock, drafter, config.json), sometimes gives that very
# path as the job's input, with or without run.overwrite (train: or run.resume). Every run must end
# in one error line or success (run() checks), the user's files (the sandbox's user/, every link's
# target) and the job's inputs unchanged by content hash; a refused run, or one without
# run.overwrite, changes nothing at all that was there (a stale lock of ours may go, and must).
import hashlib


def tree_sums(root):
    sums = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            if os.path.islink(p):
                sums[p] = "link " + os.readlink(p)
            elif os.path.isfile(p):
                sums[p] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return sums


def file_sum(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.isfile(p) else None


STALE = b"host gone pid 4 started 2020-01-01 00:00:00 +0000\n"
drafter_src = os.path.join(tmp, "ckrun", "drafter")
OUT_DIR = {"regenerate": "out", "dump-features": "feat", "train": "run"}
# (mode, the name laid in the output directory, what is laid there, the job's input is that path, flags)
PATH_CASES = [
    ("regenerate", "o.h5.lock", "copy", True, []),                 # the prompts named like the output's lock
    ("regenerate", "o.h5.lock", "link", False, []),                # the lock name a link to the user's prompts
    ("regenerate", "o.h5.lock", "stale", False, []),               # a crashed job's lock: taken again
    ("regenerate", "o.h5.parts", "link", False, ["--run.overwrite=true"]),
    ("regenerate", "o.h5.parts/part-00000-of-00002.h5", "copy", True, ["--run.overwrite=true"]),
    ("regenerate", "o.h5.parts", "linkdir", False, []),            # the parts directory a link to a user's: not written into
    ("dump-features", ".lock", "link", False, []),
    ("dump-features", ".lock", "empty", False, []),
    ("dump-features", "features-000.h5", "copy", True, ["--run.overwrite=true"]),  # a set named like a shard
    ("dump-features", "features.json", "dangling", False, ["--run.overwrite=true"]),
    ("train", ".lock", "copy", False, []),                         # a user's file named like run.dir's lock
    ("train", ".lock", "dangling", False, []),
    ("train", "drafter", "link", True, ["--run.overwrite=true"]),  # drafter.config = run.dir/drafter, a link to a drafter
    ("train", "config.json", "copy", True, ["--run.resume=true"]), # a published drafter's config.json in run.dir
    ("train", "metrics.jsonl", "dangling", False, ["--run.overwrite=true"]),
    ("train", "drafter", "dir", False, ["--run.overwrite=true"]),  # a foreign file in an earlier export: kept
    ("train", "drafter", "link", False, ["--run.overwrite=true"]), # an earlier export a link to a user's drafter
]
n_path = {"ran": 0, "accepted": 0}
for ci, (mode, name, kind, at_ob, flags) in enumerate(PATH_CASES):
    n_path["ran"] += 1
    S = os.path.join(tmp, "m", "path_%02d" % ci)
    user, outd = os.path.join(S, "user"), os.path.join(S, OUT_DIR[mode])
    os.makedirs(user)
    os.makedirs(outd)
    shutil.copy(prompts, os.path.join(user, "prompts.jsonl"))
    shutil.copy(os.path.join(tmp, "set.h5"), os.path.join(user, "set.h5"))
    shutil.copytree(drafter_src, os.path.join(user, "drafter"))
    own = {"regenerate": os.path.join(user, "prompts.jsonl"), "dump-features": os.path.join(user, "set.h5"),
           "train": os.path.join(user, "drafter", "config.json")}[mode]
    if mode == "train" and name == "drafter":
        own = os.path.join(user, "drafter")
    ob = os.path.join(outd, name)
    os.makedirs(os.path.dirname(ob), exist_ok=True)
    if kind == "copy":
        shutil.copy(own, ob)
    elif kind == "link":
        os.symlink(own, ob)
    elif kind == "linkdir":  # a link to an empty directory of the user's: nothing in it looks foreign
        os.makedirs(os.path.join(user, "empty"))
        os.symlink(os.path.join(user, "empty"), ob)
    elif kind == "dangling":
        os.symlink(os.path.join(user, "nothing"), ob)
    elif kind == "empty":
        open(ob, "wb").close()
    elif kind == "dir":
        shutil.copytree(own, ob)
        open(os.path.join(ob, "notes.txt"), "w").write("mine\n")
    else:
        open(ob, "wb").write(STALE)
    inp = ob if at_ob else own
    if mode == "regenerate":
        cmd = [rank, "--mode", "regenerate", "--device", "cpu", "--target.path=" + os.path.join(tmp, "tgt"),
               "--regenerate.prompts=" + inp, "--regenerate.out=" + os.path.join(outd, "o.h5"),
               "--regenerate.max_new_tokens=3", "--regenerate.shard_prompts=2", "--regenerate.heldout=1"]
    elif mode == "dump-features":
        cmd = [rank, "--mode", "dump-features", "--device", "cpu", "--target.path=" + os.path.join(tmp, "tgt"),
               "--target.layer_ids=0,1", "--drafter.block_size=2", "--teacher.topk=4", "--data.path=" + inp,
               "--features.dir=" + outd]
    else:
        cmd = TRAIN + ["--data.features=" + os.path.join(tmp, "feat"), "--train.steps=1", "--checkpoint.every=0",
                       "--run.dir=" + outd, "--drafter.config=" + inp]
    before, user_sums = tree_sums(S), tree_sums(user)
    inp_sum = file_sum(os.path.join(inp, "config.json") if os.path.isdir(inp) else inp)
    accepted = counts["accepted"]
    what = "path case %d (%s: %s laid at %s, input %s %s)" % (ci, mode, kind, name, os.path.relpath(inp, S), " ".join(flags))
    run(what, cmd + flags, leaks=False)
    ok_run = counts["accepted"] > accepted
    n_path["accepted"] += ok_run
    if tree_sums(user) != user_sums:
        failures.append("%s: the user's files changed" % what)
    elif file_sum(os.path.join(inp, "config.json") if os.path.isdir(inp) else inp) != inp_sum:
        failures.append("%s: the input changed" % what)
    elif not ok_run or "--run.overwrite=true" not in flags:  # only run.overwrite replaces what is there
        after = tree_sums(S)
        gone = [p for p, h in before.items() if after.get(p) != h and not (kind == "stale" and p == ob)]
        if gone:
            failures.append("%s: %s, yet it changed %s" % (what, "accepted without run.overwrite" if ok_run else "refused",
                                                           ", ".join(os.path.relpath(p, S) for p in gone)))
    elif kind == "stale" and os.path.exists(ob):
        failures.append("%s: a stale lock of ours was left behind" % what)
    elif kind == "dir" and not os.path.isfile(os.path.join(outd, "drafter", "notes.txt")) and \
            not any(os.path.isfile(os.path.join(outd, d, "notes.txt")) for d in os.listdir(outd)):
        failures.append("%s: the foreign file in the earlier export was removed" % what)
    shutil.rmtree(S, ignore_errors=True)
print("fuzz: %d path cases (links, files named like locks, parts and shards, inputs inside outputs): %d accepted, "
      "the user's files and inputs unchanged" % (n_path["ran"], n_path["accepted"]))

print("fuzz: %d regenerate races on one output (each: one job completed, the other refused or done after it) and %d "
      "training-set mutants as regenerate.out (every one refused, unchanged)" % (N_RACE, N_AS_OUT))
print("fuzz: %d checkpoint mutants (every one refused) and %d feature mutants (%d accepted with the unmutated run's "
      "losses: bytes HDF5 does not read, or a sample the 2 steps do not draw)" % (N_CK, N_FT, ft_same))
print("fuzz: %d runs of %d safetensors mutants and %d training-set mutants: %d accepted, %d refused "
      "with one error line, %d wrong" % (counts["ran"], N_ST, N_H5, counts["accepted"], counts["refused"],
                                         len(failures)))
print("fuzz: %d of the runs read safetensors, %d training sets; %d refusals were a corrupt global heap"
      % (n_st, n_before_ck - n_st, counts["heap"]))
for f in failures[:20]:
    print("FAIL: " + f, file=sys.stderr)
with open(os.path.join(tmp, "fuzz.result"), "w") as f:
    f.write("%d %d %d\n" % (counts["ran"], len(failures), counts["heap"]))
PYEOF
read -r ran wrong heap <"$TMP/fuzz.result" 2>/dev/null || { ran=0; wrong=1; heap=0; }
echo "test_fuzz_files: $ran runs in ${SECONDS}s"
[ "$ran" -ge 450 ] && ok || bad "only $ran runs"
[ "$heap" -ge 5 ] && ok || bad "only $heap mutants reached the corrupt-heap path (the heap block mutants missed it?)"
[ "$wrong" -eq 0 ] && ok || bad "$wrong mutants crashed, hung or printed other than one error line"
finish
