#!/usr/bin/env python3
"""bench_regenerate.py: generated tokens/s of `dflash_rank --mode regenerate` against transformers'
batched greedy `generate`, on the CPU, same target, same prompts, same threads.

  dflash        `dflash_rank --mode regenerate` (1 rank, OMP_NUM_THREADS = --threads, --batch slots,
                continuous batching), the whole job's wall time (start-up and weight loading
                included; the prompts are few, so that is a small part)
  transformers  model.generate in fp32 under torch.inference_mode, batches of --batch prompts
                left-padded (its batched path), do_sample=False, max_new_tokens = min_new_tokens = G,
                eos disabled (both sides produce exactly G tokens per prompt); the wall time of all
                batches after a warm-up batch
Also prints how many replies are token-for-token equal (padding changes transformers' arithmetic
slightly, so a near tie can flip a token; the test suite checks equality unpadded).

  python3 bench/teacher/bench_regenerate.py --build build --threads 2
  python3 bench/teacher/bench_regenerate.py --build build --threads 2 --target WORKDIR/target \
      --prompts-file WORKDIR/prompts.jsonl --prompts 64 --batch 32 [--stops]
      (a real checkpoint, e.g. examples/smollm2-135m's, and the first N of its templated prompts)

Needs torch + transformers (/work/venv); not part of the tests.
"""
import argparse, json, os, random, subprocess, sys, tempfile, time

CONFIGS = {
    "qwen3-small": "--arch qwen3 --layers 8 --hidden 512 --heads 8 --kv-heads 4 --head-dim 64 --intermediate 1536 --vocab 32000",
    "qwen3.5-hybrid": "--arch qwen3_5 --layers 8 --hidden 512 --heads 8 --kv-heads 2 --head-dim 128 --intermediate 1536"
                      " --vocab 32000 --lin-k-heads 4 --lin-v-heads 12 --lin-k-dim 64 --lin-v-dim 64 --conv-kernel 4",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--configs", default="qwen3-small")
    ap.add_argument("--target", help="a Hugging Face checkpoint directory instead of the random configs")
    ap.add_argument("--prompts-file", help="with --target: JSONL of {\"input_ids\": [...]} (the first --prompts)")
    ap.add_argument("--stops", action="store_true",
                    help="with --target: both sides stop at the target's stop ids (generation_config.json "
                         "eos_token_id), as a real regeneration does; tokens/s counts the replies' own tokens")
    a = ap.parse_args()
    import h5py
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    tool, rank = os.path.join(a.build, "dflash_tool"), os.path.join(a.build, "dflash_rank")
    load = os.getloadavg()
    print(f"# torch {torch.__version__}, transformers {transformers.__version__}, {a.threads} threads, "
          f"{a.prompts} prompts of {'the file' if a.target else '8..64 tokens'}, {a.max_new} new tokens each{' at most, to the target stop ids' if a.stops else ''}, batch {a.batch}; "
          f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| config | generated tokens | dflash tokens/s | transformers tokens/s | ratio | equal replies |")
    print("|---|---|---|---|---|---|")
    if a.target and not a.prompts_file:
        sys.exit("bench_regenerate: --target needs --prompts-file")
    for name in ([os.path.basename(os.path.abspath(a.target))] if a.target else a.configs.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            stops = []
            if a.target:  # its files linked, without generation_config.json (no stop ids) unless --stops
                model_dir = os.path.join(tmp, "target")
                os.mkdir(model_dir)
                if a.stops:
                    with open(os.path.join(a.target, "generation_config.json")) as f:
                        eos = json.load(f)["eos_token_id"]
                    stops = eos if isinstance(eos, list) else [eos]
                for fn in os.listdir(a.target):
                    if fn != "generation_config.json" or a.stops:
                        os.symlink(os.path.abspath(os.path.join(a.target, fn)), os.path.join(model_dir, fn))
                with open(a.prompts_file) as f:
                    prompts = [json.loads(line)["input_ids"] for line, _ in zip(f, range(a.prompts))]
                a.prompts = len(prompts)
            else:
                model_dir = os.path.join(tmp, "target")
                subprocess.run([tool, "make-target", model_dir] + CONFIGS[name].split() + ["--dtype", "f32", "--seed", "1"],
                               check=True, stdout=subprocess.DEVNULL)
                r = random.Random(5)
                prompts = [[r.randrange(32000) for _ in range(r.randint(8, 64))] for _ in range(a.prompts)]
            pj = os.path.join(tmp, "p.jsonl")
            with open(pj, "w") as f:
                for p in prompts:
                    f.write(json.dumps({"input_ids": p}) + "\n")
            out = os.path.join(tmp, "out.h5")
            env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
            t0 = time.perf_counter()
            subprocess.run([rank, "--mode", "regenerate", "--device", "cpu", f"--target.path={model_dir}",
                            f"--regenerate.prompts={pj}", f"--regenerate.out={out}",
                            f"--regenerate.max_new_tokens={a.max_new}", f"--regenerate.max_seqs={a.batch}",
                            f"--regenerate.shard_prompts={a.prompts}", "--regenerate.heldout=0"],
                           check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t_ours = time.perf_counter() - t0
            with h5py.File(out, "r") as f:
                tok, off = f["tokens"][:], f["offsets"][:]
            ours = [tok[off[i] + len(p):off[i + 1]].tolist() for i, p in enumerate(prompts)]

            model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            model.eval()
            model.generation_config.eos_token_id = stops or None

            def cut(row):  # a reply ends at its first stop id (kept, as in our set); padding after it dropped
                for i, t in enumerate(row):
                    if t in stops:
                        return row[:i + 1]
                return row

            def gen(batch):
                L = max(len(p) for p in batch)
                ids = torch.tensor([[0] * (L - len(p)) + p for p in batch])
                att = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in batch])
                with torch.inference_mode():
                    o = model.generate(ids, attention_mask=att, do_sample=False, max_new_tokens=a.max_new,
                                       min_new_tokens=1 if stops else a.max_new, pad_token_id=0,
                                       eos_token_id=stops or None)
                return [cut(row[L:].tolist()) for row in o]

            gen(prompts[:a.batch])  # warm-up
            t0 = time.perf_counter()
            theirs = []
            for b in range(0, len(prompts), a.batch):
                theirs += gen(prompts[b:b + a.batch])
            t_hf = time.perf_counter() - t0
            n, n_hf = sum(map(len, ours)), sum(map(len, theirs))
            equal = sum(x == y for x, y in zip(ours, theirs))
            print(f"| {name} | {n} | {n / t_ours:.0f} | {n_hf / t_hf:.0f} | {t_hf / t_ours:.2f}x | {equal}/{len(prompts)} |",
                  flush=True)
    load = os.getloadavg()
    print(f"# load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
