#!/usr/bin/env python3
"""make_inputs.py: the peer trainer's (speculators') inputs from a dflash_rank training set.

    python make_inputs.py jsonl  --data SET.h5 --out DIR
    python make_inputs.py concat --train DIR/prep-train --heldout DIR/prep-heldout --out DIR/data
    python make_inputs.py hidden --target T --data DIR/data --layer-ids 1,8,14,21,27 [--threads N]
    python make_inputs.py check  --data DIR/data --features FEATDIR --layer-ids 1,8,14,21,27

jsonl: SET.h5 (SPEC section 7: /tokens, /offsets, /loss_mask, and the held-out split /heldout that
training, --mode eval and tools/spec_decode.py hold out) as two files of {"input_ids", "loss_mask"}
lines, the same token ids and masks: DIR/train.jsonl (every sample not in /heldout, in set order)
and DIR/heldout.jsonl (the /heldout samples). `speculators prepare-data` takes each without a
server (it only truncates, filters and shuffles such rows).

concat: prepare-data shuffles its rows, and the peer's trainer splits its dataset by position (the
first int(n * train_data_ratio) rows train, the rest validate). The two prepared sets are put one
after the other (training rows first) into DIR/data, and DIR/data/split.json records the counts and
the --train-data-ratio that puts exactly the training rows in the training split: the peer trains on
our training samples and validates on our held-out split.

hidden: per row i of DIR/data, DIR/data/hidden_states/hs_<i>.safetensors with `token_ids` [T] int64
and `hidden_states` [T, n_aux + 1, H] bf16, what speculators' FileTransfer reads (hs_connectors
FileTransfer.get_cached; train/data.py splits the last slot off as verifier_last_hidden_states). The
peer's layer id k (vLLM's aux hidden state convention) is the input of decoder layer k, i.e. the
output of layer k-1; our target_layer_ids (and the z-lab package's) name the output of layer id,
transformers' hidden_states[id + 1]. So slot j holds the input of decoder layer ours[j] + 1, taken by
a forward pre-hook; the last slot is the final norm's input (the last layer's output before the
norm: the peer applies the target's norm and lm_head itself to make its labels). Our layer L-1 (after
the final norm) has no aux equivalent and is refused. A transformers forward of the target in float32
(the checkpoint's dtype), one row at a time; files are written to a temporary name and renamed, and
existing ones are kept (a killed run resumes).

check: the hidden states of the first training rows against our offline features (dump-features,
bf16) of the same samples: the same layers of the same target, so they must agree to bf16 rounding
plus the two forwards' float differences.
"""
import argparse
import json
import os
import sys
import time


def die(msg):
    print(f"error: make_inputs.py: {msg}", file=sys.stderr)
    sys.exit(1)


def read_set(path):
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        for k in ("tokens", "offsets", "loss_mask"):
            if k not in f:
                die(f"{path}: no /{k} dataset (not a dflash_rank training set)")
        tokens = f["tokens"][:]
        offsets = f["offsets"][:]
        mask = f["loss_mask"][:]
        heldout = f["heldout"][:] if "heldout" in f else np.zeros(0, dtype=np.int64)
    return tokens, offsets, mask, heldout


def cmd_jsonl(a):
    tokens, offsets, mask, heldout = read_set(a.data)
    n = len(offsets) - 1
    held = set(int(i) for i in heldout)
    if any(i < 0 or i >= n for i in held):
        die(f"{a.data}: /heldout names a sample outside [0, {n})")
    if not held:
        die(f"{a.data}: no /heldout split recorded (the comparison evaluates on it)")
    os.makedirs(a.out, exist_ok=True)
    counts = {}
    for name, keep in (("train", lambda i: i not in held), ("heldout", lambda i: i in held)):
        path = os.path.join(a.out, f"{name}.jsonl")
        tmp = path + ".tmp"
        k = 0
        with open(tmp, "w") as f:
            for i in range(n):
                if not keep(i):
                    continue
                s, e = int(offsets[i]), int(offsets[i + 1])
                f.write(json.dumps({"input_ids": tokens[s:e].tolist(), "loss_mask": mask[s:e].tolist()}) + "\n")
                k += 1
        os.replace(tmp, path)
        counts[name] = k
    print(f"make_inputs: {a.data}: {counts['train']} training samples -> {a.out}/train.jsonl, "
          f"{counts['heldout']} held out -> {a.out}/heldout.jsonl")


def cmd_concat(a):
    from datasets import concatenate_datasets, load_from_disk
    tr = load_from_disk(a.train)
    ho = load_from_disk(a.heldout)
    cols = ["input_ids", "loss_mask", "seq_len"]
    for d, p in ((tr, a.train), (ho, a.heldout)):
        if not set(cols) <= set(d.column_names):
            die(f"{p}: prepare-data output lacks {cols} (has {d.column_names})")
    fmt = tr.format
    both = concatenate_datasets([tr.select_columns(cols), ho.select_columns(cols)])
    if fmt.get("type"):
        both = both.with_format(fmt["type"])
    n_tr, n = len(tr), len(tr) + len(ho)
    # the peer's split: split_idx = int(n * ratio) must be exactly n_tr
    ratio = (n_tr + 0.5) / n
    if int(n * ratio) != n_tr:
        die(f"no train_data_ratio splits {n} rows at {n_tr}")
    tmp = a.out + ".tmp"
    both.save_to_disk(tmp)
    with open(os.path.join(tmp, "split.json"), "w") as f:
        json.dump({"train_rows": n_tr, "heldout_rows": len(ho), "train_data_ratio": ratio}, f)
    if os.path.exists(a.out):
        die(f"{a.out} exists")
    os.replace(tmp, a.out)
    print(f"make_inputs: {a.out}: {n_tr} training rows then {len(ho)} held-out rows, "
          f"--train-data-ratio {ratio!r}")


def parse_ids(s):
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        die(f"--layer-ids '{s}': expected comma-separated integers")


def load_target(path, threads):
    import torch
    from transformers import AutoModelForCausalLM
    if threads > 0:
        torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    return model


def hidden_rows(model, ids_list, ours):
    """Yield [T, len(ours) + 1, H] float32 tensors for each id sequence (see the module doc)."""
    import torch
    base = model.model
    layers = base.layers
    L = len(layers)
    for k in ours:
        if k < 0 or k >= L - 1:
            die(f"target layer id {k}: must be in [0, {L - 2}] (the peer's aux states are decoder "
                f"layer inputs; our id L-1 is after the final norm and has none)")
    grabbed = {}

    def pre_hook(name):
        def f(_mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            grabbed[name] = x.detach()
        return f

    handles = [layers[k + 1].register_forward_pre_hook(pre_hook(k), with_kwargs=True) for k in ours]
    handles.append(base.norm.register_forward_pre_hook(pre_hook("last"), with_kwargs=True))
    try:
        with torch.no_grad():
            for ids in ids_list:
                grabbed.clear()
                x = torch.as_tensor(ids, dtype=torch.long).unsqueeze(0)
                base(input_ids=x, use_cache=False)
                slots = [grabbed[k][0] for k in ours] + [grabbed["last"][0]]
                yield torch.stack(slots, dim=1)
    finally:
        for h in handles:
            h.remove()


def cmd_hidden(a):
    import torch
    from datasets import load_from_disk
    from safetensors.torch import save_file
    ours = parse_ids(a.layer_ids)
    d = load_from_disk(a.data).with_format(None)
    out = os.path.join(a.data, "hidden_states")
    os.makedirs(out, exist_ok=True)
    todo = [i for i in range(len(d)) if not os.path.exists(os.path.join(out, f"hs_{i}.safetensors"))]
    if not todo:
        print(f"make_inputs: {out}: all {len(d)} hidden-state files present")
        return
    model = load_target(a.target, a.threads)
    t0 = time.time()
    tok = 0
    ids_iter = (d[i]["input_ids"] for i in todo)
    for n, (i, hs) in enumerate(zip(todo, hidden_rows(model, ids_iter, ours)), 1):
        ids = torch.as_tensor(d[i]["input_ids"], dtype=torch.long)
        path = os.path.join(out, f"hs_{i}.safetensors")
        save_file({"token_ids": ids.contiguous(), "hidden_states": hs.to(torch.bfloat16).contiguous()},
                  path + ".tmp")
        os.replace(path + ".tmp", path)
        tok += ids.numel()
        if n % 50 == 0 or n == len(todo):
            dt = time.time() - t0
            print(f"make_inputs: hidden states {n}/{len(todo)} rows, {tok} tokens, {dt:.0f} s "
                  f"({tok / max(dt, 1e-9):.0f} tokens/s), about {dt / n * (len(todo) - n):.0f} s left", flush=True)


def cmd_check(a):
    """Compare the first rows' hidden states with our dump-features output for the same samples."""
    import glob
    import h5py
    import numpy as np
    from datasets import load_from_disk
    from safetensors.torch import load_file
    ours = parse_ids(a.layer_ids)
    d = load_from_disk(a.data).with_format(None)
    shards = sorted(glob.glob(os.path.join(a.features, "*.h5")))
    if not shards:
        die(f"{a.features}: no feature shards (*.h5)")
    # index our feature rows by their token ids (a sample's tokens identify it)
    want = {}
    for i in range(min(a.rows, len(d))):
        want[tuple(d[i]["input_ids"])] = i
    worst = 0.0
    found = 0
    for sh in shards:
        with h5py.File(sh, "r") as f:
            if "features" not in f or "tokens" not in f or "offsets" not in f:
                continue
            offs = f["offsets"][:]
            toks = f["tokens"][:]
            for s in range(len(offs) - 1):
                key = tuple(int(t) for t in toks[offs[s]:offs[s + 1]])
                if key not in want:
                    continue
                i = want.pop(key)
                feat = f["features"][offs[s]:offs[s + 1]].astype(np.uint32) << 16
                feat = feat.view(np.float32).reshape(len(key), len(ours), -1)
                hs = load_file(os.path.join(a.data, "hidden_states", f"hs_{i}.safetensors"))["hidden_states"]
                hs = hs.float().numpy()[:, :len(ours), :]
                # per layer: |hs - feat|_F / |feat|_F (a wrong layer gives tens of percent)
                rel = max(float(np.linalg.norm(hs[:, j] - feat[:, j]) / max(np.linalg.norm(feat[:, j]), 1e-9))
                          for j in range(len(ours)))
                worst = max(worst, rel)
                found += 1
    if not found:
        die(f"{a.features}: none of the first {a.rows} rows found in the feature shards "
            "(their datasets: /features, /tokens, /offsets)")
    print(f"make_inputs: check: {found} rows, hidden states vs our features: worst layer's |diff| / |feature| = {worst:.2e}")
    if worst > a.tol:
        die(f"hidden states differ from our features by {worst:.4f} > {a.tol}: not the same layers")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("jsonl")
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("concat")
    p.add_argument("--train", required=True)
    p.add_argument("--heldout", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("hidden")
    p.add_argument("--target", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--layer-ids", required=True, help="OUR target_layer_ids (outputs of these layers)")
    p.add_argument("--threads", type=int, default=1)
    p = sub.add_parser("check")
    p.add_argument("--data", required=True)
    p.add_argument("--features", required=True)
    p.add_argument("--layer-ids", required=True)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--tol", type=float, default=0.02)
    a = ap.parse_args()
    {"jsonl": cmd_jsonl, "concat": cmd_concat, "hidden": cmd_hidden, "check": cmd_check}[a.cmd](a)


if __name__ == "__main__":
    main()
