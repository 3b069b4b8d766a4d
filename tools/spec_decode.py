#!/usr/bin/env python3
"""spec_decode.py: greedy speculative decoding of an exported drafter with the z-lab `dflash` package.

    python3 tools/spec_decode.py --target T --drafter D --data SET.h5 [--samples N] [--pick heldout|last|first]
                                 [--max-new-tokens M] [--eval-binary build/dflash_rank] [--work DIR]
    python3 tools/spec_decode.py --target T --drafter D --random N --prompt-len L --max-new-tokens M [--seed S]

T is a directory transformers loads (e.g. what `dflash_tool make-target` writes), D an exported
drafter (config.json + model.safetensors, the dflash package's format, e.g. RUN_DIR/drafter). For
every prompt the tool
  1. runs the package's own speculative decoding, `dflash.model.dflash_generate(draft, target,
     input_ids, max_new_tokens, stop_token_ids=None, temperature=0.0, return_stats=True)` (what
     `DFlashDraftModel.spec_generate` and the package's benchmark call), and takes its
     `acceptance_lengths` (per decoding step: the accepted drafts + the bonus token; the first
     generated token comes from the prefill and belongs to no step);
  2. runs plain greedy `target.generate(do_sample=False)` for the same number of new tokens and
     requires the speculative output to equal it token for token (lossless decoding);
  3. prints per prompt and in total: steps, tokens, the mean acceptance per step.
The total "mean acceptance per step" is pooled: sum of acceptance lengths / number of steps over
all prompts, which is SPEC §6's tau_decode (tokens walked / steps taken). The package's benchmark
prints the mean over prompts of the per-prompt means ("Average Acceptance length"); it is printed
too, as `package benchmark average`.

Prompts from a training set (HDF5 /tokens, /offsets, /loss_mask; SPEC §7): the prompt of sample i
is its tokens before the first loss_mask = 1 token; the decode runs for the length of that first
loss-masked region (the assistant turn; --max-new-tokens caps it), so it stops where the data
stops. When the set records its held-out split (/heldout: `--mode regenerate`, `convert-jsonl
--heldout`), the tool decodes exactly those samples (--pick heldout, the default then), the same
ones training and `--mode eval` hold out; without one, --pick last takes the last N samples (the
trainer's rule: data.heldout_samples are the last usable samples) and --pick first the first N. For data the target generated greedily
(`dflash_tool make-data`) the tool also checks the greedy output equals the data's continuation.
Fresh random prompts (--random) are drawn as make-data draws them (uniform ids in [0, V)).

The project's tau_decode on the same sequences: the tool writes a training set of exactly the
decoded sequences (each prompt + its greedy continuation, loss_mask 0 on the prompt and 1 on the
continuation; from --data the root attributes vocab_size, format_version and tokenizer are copied,
for --random they are V, 1 and "random-prompts+greedy(T)") to WORK/subset.h5 and runs
    mpirun -np 2 --oversubscribe dflash_rank --mode eval --device cpu --target.path=T
                 --data.path=WORK/subset.h5 --eval.drafter=D --run.dir=WORK/eval
(OMPI_ALLOW_RUN_AS_ROOT set), which computes the teacher-forced walk of SPEC §6 from the C
teacher's features and the drafter's block predictions, and reads tau_decode, tau_decode_steps and
tau_decode_tokens from WORK/eval/eval.json. The two must agree to 0.01 (they are the same quantity);
exit status 1 if they do not, or if any speculative output differs from greedy generate. --no-eval
skips the C side (then only torch, transformers, h5py and dflash are needed).

How the two walks line up: the package's first block is anchored at the first generated token
(position len(prompt) = the turn's first token r0, itself produced by the prefill), a step accepts
m leading drafts equal to the target's greedy tokens plus the bonus token, capped by
max_length - start - 1, and the next block starts at the bonus token; with max_new_tokens = the
turn's length (max_length = r1) the package walks p -> p + min(1 + m, r1 - 1 - p) and stops when an
anchor reaches r1 - 1 (tokens = turn length - 1). metrics_decode_walk (src/student/model/metrics.c,
tau_decode at commit bd4e1bc) takes the same steps but counts a = 1 + min(m, r1 - 1 - p): when the
drafts of a turn's last step reach the turn's last token it counts one token more (a bonus token
past the turn's end). The tool prints a note when the steps agree and the tokens do not.

CPU notes: both models are loaded in float32 with attn_implementation "sdpa" (the package's
benchmark loads them in bf16 on cuda:0; bf16 weights upcast exactly). The package's stats timer
`dflash.model._cuda_time` calls torch.cuda.synchronize(); on a machine without a GPU the tool
replaces it with time.perf_counter (timing only, decoding untouched). No EOS: stop_token_ids=None
for the package and eos_token_id=None for generate, so both produce exactly max_new_tokens.

Needs torch, transformers, safetensors, h5py and the dflash package (PyPI: dflash); not run by CI.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import warnings

import numpy as np

TOL = 0.01


def load_models(target_dir, drafter_dir):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    import dflash.model as dm
    transformers.utils.logging.disable_progress_bar()
    if not torch.cuda.is_available():
        dm._cuda_time = time.perf_counter  # the stats timer only (see the docstring)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    cfg = AutoConfig.from_pretrained(drafter_dir)
    cls = dm.DFlash2DraftModel if "DFlash2DraftModel" in (cfg.architectures or []) else dm.DFlashDraftModel
    # as tests/reference/check_dflash_export.py: no missing, unexpected or mis-shaped keys
    draft, info = cls.from_pretrained(drafter_dir, dtype=torch.float32, attn_implementation="sdpa",
                                      output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if list(info.get(kind, []) or []):
            sys.exit(f"spec_decode: {drafter_dir}: {kind} {list(info[kind])}")
    draft.eval()
    return target, draft, cls.__name__


def read_set(path):
    import h5py
    with h5py.File(path, "r") as f:
        tokens = f["tokens"][:].astype(np.int64)
        offsets = f["offsets"][:].astype(np.int64)
        mask = f["loss_mask"][:].astype(np.uint8)
        attrs = {k: f.attrs[k] for k in ("vocab_size", "format_version", "tokenizer") if k in f.attrs}
        heldout = f["heldout"][:].astype(np.int64).tolist() if "heldout" in f else None
        rule = f.attrs.get("heldout_rule", b"")
    return tokens, offsets, mask, attrs, heldout, rule.decode() if isinstance(rule, bytes) else str(rule)


def first_region(mask):
    """[r0, r1) of the first loss-masked run of one sample's mask, or None."""
    on = np.flatnonzero(mask)
    if on.size == 0:
        return None
    r0 = int(on[0])
    r1 = r0
    while r1 < mask.size and mask[r1]:
        r1 += 1
    return r0, r1


def data_jobs(path, pick_arg, samples, max_new_tokens, tool):
    """The prompts of a training set as this tool decodes them (also imported by tools/vllm_check.py):
    a list of (name, prompt ids, new tokens, the data's continuation) and the set's root attributes.
    pick_arg heldout|last|first|None (None: heldout when the set has /heldout, else last), samples as
    --samples, max_new_tokens caps each turn's length; the trainer's usable-sample rule applies."""
    jobs = []
    tokens, offsets, mask, attrs, heldout, rule = read_set(path)
    n = len(offsets) - 1
    pick = pick_arg or ("heldout" if heldout is not None else "last")
    if pick == "heldout" and heldout is None:
        sys.exit(f"{tool}: {path} has no /heldout (--pick last takes its last samples instead)")
    if pick == "heldout":  # the set's recorded split, the samples training and --mode eval hold out
        k = len(heldout) if samples is None or samples <= 0 else min(samples, len(heldout))
        idx = heldout[:k]
        print(f"held-out split of {path}: {len(heldout)} samples ({rule}); decoding {k} of them")
    else:
        want = 16 if samples is None else samples
        k = n if want <= 0 else min(want, n)
        idx = range(n - k, n) if pick == "last" else range(k)
    short = 0
    for i in idx:
        s, e = int(offsets[i]), int(offsets[i + 1])
        m = mask[s:e]
        if not ((m[:-1] == 1) & (m[1:] == 1)).any():  # the trainer's rule (SPEC §7, data.min_loss_tokens 2): no anchor
            short += 1
            continue
        reg = first_region(mask[s:e])
        if reg is None or reg[0] == 0 or reg[1] - reg[0] < 2:
            print(f"sample {i}: no prompt or a turn under 2 tokens, skipped")
            continue
        r0, r1 = reg
        m = r1 - r0 if max_new_tokens is None else min(max_new_tokens, r1 - r0)
        jobs.append((f"sample {i}", tokens[s:s + r0], m, tokens[s + r0:s + r0 + m]))
    if short:
        print(f"{short} of the {k} picked samples have no valid anchor (two consecutive loss tokens): "
              f"skipped, as the trainer rejects them (its tau_decode walks the same samples)")
    print(f"prompts: {len(jobs)} samples of {path} ({pick} {k} of {n}), the prompt = the tokens before "
          f"the first loss_mask=1, decoded for the turn's length" +
          ("" if max_new_tokens is None else f" capped at {max_new_tokens}"))
    return jobs, attrs


def write_subset(path, seqs, masks, attrs, datasets=None):
    """A training set (SPEC §7) of the sequences seqs and their loss masks, the root attributes attrs and
    any further datasets (name -> array, e.g. heldout, finish_reason) as given; also used by the examples'
    set tools (examples/smollm2-135m/half_set.py, merge_sets.py)."""
    import h5py
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=np.concatenate(seqs).astype(np.int32))
        f.create_dataset("offsets", data=np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64))
        f.create_dataset("loss_mask", data=np.concatenate(masks).astype(np.uint8))
        for k, v in (datasets or {}).items():
            f.create_dataset(k, data=v)
        for k, v in attrs.items():
            if isinstance(v, (str, bytes)):  # a fixed-length string, as the C writer stores it
                b = v.encode() if isinstance(v, str) else v
                f.attrs.create(k, np.bytes_(b))
            else:
                f.attrs[k] = v


def run_eval(binary, target, drafter, subset, rundir):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", binary, "--mode", "eval", "--device", "cpu",
           f"--target.path={target}", f"--data.path={subset}", f"--eval.drafter={drafter}", f"--run.dir={rundir}"]
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [l for l in (p.stdout + p.stderr).splitlines() if "eval" in l or "error" in l.lower()]
    for l in lines[-3:]:
        print("  | " + l)
    if p.returncode != 0:
        print((p.stdout + p.stderr)[-2000:])
        sys.exit(f"spec_decode: dflash_rank --mode eval failed (exit {p.returncode})")
    return json.load(open(os.path.join(rundir, "eval.json")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="training set (HDF5): prompts and their assistant turns")
    src.add_argument("--random", type=int, metavar="N", help="N fresh random prompts")
    ap.add_argument("--samples", type=int, default=None,
                    help="with --data: how many samples (default: the whole /heldout split, else 16; 0 = all)")
    ap.add_argument("--pick", choices=("heldout", "last", "first"), default=None,
                    help="with --data: the set's /heldout split (the default when it has one: the samples training "
                         "and --mode eval hold out), else its last samples (the default otherwise) or its first")
    ap.add_argument("--prompt-len", type=int, default=8, help="with --random: prompt length")
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="tokens to decode (with --data: at most the turn's length, which is the default; "
                         "with --random: required)")
    ap.add_argument("--seed", type=int, default=0, help="with --random: the prompts' seed")
    ap.add_argument("--eval-binary", default="build/dflash_rank", help="dflash_rank for the tau_decode comparison")
    ap.add_argument("--work", default=None, help="where subset.h5 and the eval run go (default: a fresh /tmp dir)")
    ap.add_argument("--no-eval", action="store_true", help="with --data: skip the project's tau_decode")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()

    import importlib.metadata
    import torch
    import transformers
    import dflash.model as dm
    # transformers 5.24 warns that the package passes `past_key_values` (deprecated for `cache`)
    warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    sys.stdout.reconfigure(line_buffering=True)  # every line as it is printed, also into a pipe or a log
    print("$ python3 " + " ".join(sys.argv))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"dflash {importlib.metadata.version('dflash')}, device cpu" +
          (" (cuda available, unused)" if torch.cuda.is_available() else ""))
    target, draft, cls = load_models(args.target, args.drafter)
    V = target.config.vocab_size
    print(f"target {args.target}: {type(target).__name__}, {target.config.num_hidden_layers} layers, "
          f"H {target.config.hidden_size}, V {V}")
    print(f"drafter {args.drafter}: {cls}, {draft.config.num_hidden_layers} layers, block_size {draft.block_size}, "
          f"mask_token_id {draft.mask_token_id}, target_layer_ids {list(draft.target_layer_ids)}")

    # the prompts: (name, prompt ids, new tokens, data continuation or None, full sample row range)
    jobs = []
    attrs = None
    if args.data:
        jobs, attrs = data_jobs(args.data, args.pick, args.samples, args.max_new_tokens, "spec_decode")
    else:
        if args.max_new_tokens is None:
            ap.error("--random needs --max-new-tokens")
        rng = np.random.default_rng(args.seed)
        hi = V  # as dflash_tool make-data draws its prompts (default --vocab-low 0)
        for j in range(args.random):
            jobs.append((f"random {j}", rng.integers(0, hi, size=args.prompt_len), args.max_new_tokens, None))
        attrs = {"vocab_size": np.int64(V), "format_version": np.int64(1),  # SPEC §7's version
                 "tokenizer": f"random-prompts+greedy({args.target})"}
        print(f"prompts: {args.random} random prompts of {args.prompt_len} tokens in [0, {hi}) (seed {args.seed}), "
              f"{args.max_new_tokens} new tokens each")

    all_ok, steps_total, tok_total, per_prompt_means = True, 0, 0, []
    n_data_match = 0
    hist = [0] * (draft.block_size + 1)
    t0 = time.perf_counter()
    decoded = []  # prompt + the greedy continuation, per prompt: the sequences the project's walk runs on
    for name, prompt, m, cont in jobs:
        ids = torch.tensor(prompt, dtype=torch.long)[None]
        res = dm.dflash_generate(draft, target, ids, m, None, temperature=0.0, return_stats=True)
        spec = res.output_ids[0, ids.shape[1]:].tolist()
        with torch.inference_mode():
            ref = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=m, min_new_tokens=m,
                                  do_sample=False, eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:].tolist()
        acc = list(res.acceptance_lengths)
        decoded.append(np.concatenate([np.asarray(prompt), np.asarray(ref, dtype=np.int64)]))
        same = spec == ref
        all_ok &= same
        steps_total += len(acc)
        tok_total += sum(acc)
        per_prompt_means.append(sum(acc) / len(acc) if acc else float("nan"))
        for a in acc:
            hist[min(a, draft.block_size)] += 1
        line = (f"{name}: prompt {len(prompt)}, new {len(spec)}, steps {len(acc)}, tokens {sum(acc)}, "
                f"mean acceptance {per_prompt_means[-1]:.4f}, == greedy generate: {'yes' if same else 'NO'}")
        if not same:
            d = next(j for j in range(min(len(spec), len(ref))) if spec[j] != ref[j]) if len(spec) == len(ref) else None
            line += f" (first difference at new token {d}; lengths {len(spec)} vs {len(ref)})"
        if cont is not None:
            dm_ = ref == cont.tolist()
            n_data_match += dm_
            line += f", == data: {'yes' if dm_ else 'no'}"
        print(line + f"; acceptance {acc}", flush=True)
    wall = time.perf_counter() - t0
    tau_pkg = tok_total / steps_total if steps_total else float("nan")
    print(f"total: {len(jobs)} prompts, steps {steps_total}, tokens {tok_total}, mean acceptance per step "
          f"{tau_pkg:.4f} (package benchmark average over prompts {np.mean(per_prompt_means):.4f}); "
          f"histogram {hist}; outputs == greedy generate: {'all' if all_ok else 'NOT ALL'}; {wall:.1f} s")
    rc = 0 if all_ok else 1

    if args.data:
        print(f"greedy generate == the data's continuation on {n_data_match} of {len(jobs)} samples" +
              ("" if n_data_match == len(jobs) else " (the data is not the target's greedy output there: the "
               "project's walk below runs on the decoded sequences, which differ from the data's)"))
    if not args.no_eval:
        work = args.work or os.path.join("/tmp", f"spec_decode.{os.getpid()}")
        os.makedirs(work, exist_ok=True)
        subset = os.path.join(work, "subset.h5")
        write_subset(subset, decoded, [np.r_[np.zeros(len(p), np.uint8), np.ones(m, np.uint8)] for _, p, m, _ in jobs],
                     attrs)
        rundir = os.path.join(work, "eval")
        shutil.rmtree(rundir, ignore_errors=True)
        print(f"project: {len(jobs)} decoded sequences written to {subset}")
        ev = run_eval(args.eval_binary, args.target, args.drafter, subset, rundir)
        tau_c = ev["tau_decode"]
        print(f"project tau_decode {tau_c:.4f} ({ev['tau_decode_steps']} steps, {ev.get('tau_decode_tokens')} tokens); "
              f"package {tau_pkg:.4f} ({steps_total} steps, {tok_total} tokens); |diff| {abs(tau_c - tau_pkg):.4f}: "
              f"{'agree' if abs(tau_c - tau_pkg) <= TOL else 'DISAGREE'} (tolerance {TOL})")
        walk = sum(m - 1 for _, _, m, _ in jobs)  # from each turn's first token to its last
        if ev["tau_decode_steps"] != steps_total or ev.get("tau_decode_tokens") != tok_total:
            print(f"note: steps {ev['tau_decode_steps']} vs {steps_total}, tokens {ev.get('tau_decode_tokens')} vs "
                  f"{tok_total}; a walk from each turn's first token to its last covers {walk} tokens" +
                  ("; the same steps with more tokens: the project's last step of a turn counts a bonus token past "
                   "the turn's end where the package caps it at the last token (a = 1 + min(m, r1-1-p) vs "
                   "min(1 + m, r1-1-p))" if ev["tau_decode_steps"] == steps_total and ev.get("tau_decode_tokens", 0) > tok_total
                   else ""))
        if abs(tau_c - tau_pkg) > TOL:
            rc = 1
    print("OK" if rc == 0 else "FAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
