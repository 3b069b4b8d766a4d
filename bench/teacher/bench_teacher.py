#!/usr/bin/env python3
"""bench_teacher.py: tokens/s of the teacher forward on the CPU, dflash_rank against PyTorch.

Both run the same random-weight target (made by `dflash_tool make-target`) on the same packed
sequences in one run of this script, on the same cores:
  dflash   `dflash_tool teacher-dump --repeat N`: features of 5 layers + top-32 + LSE, lm_head over
           vocabulary tiles (fp32, OpenBLAS + OpenMP); its median forward time
  pytorch  transformers' own model class (Qwen3ForCausalLM, Qwen3_5ForCausalLM: its torch chunked
           gated delta rule, as transformers runs without the fla kernels) in fp32 with torch.inference_mode, one forward per
           sequence (transformers has no packed attention without padding), output_hidden_states,
           then the same top-32 and logsumexp over the full [T, V] logits; its median time
Needs the pyenv python with torch + transformers (not part of the tests). Prints one markdown row
per configuration; bench/RESULTS.md keeps them with this command.

  python3 bench/teacher/bench_teacher.py --build build --threads 2
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile, time

CONFIGS = {
    # name: make-target arguments
    "qwen3-small": "--arch qwen3 --layers 8 --hidden 512 --heads 8 --kv-heads 4 --head-dim 64 --intermediate 1536 --vocab 32000",
    "qwen3-wide": "--arch qwen3 --layers 4 --hidden 1024 --heads 16 --kv-heads 8 --head-dim 64 --intermediate 3072 --vocab 65536",
    # the Qwen3.5/3.6 hybrid (Qwen3.6-27B's proportions, scaled down): 3 Gated DeltaNet layers then 1
    # gated attention layer; linear 4 key / 12 value heads x 64, gated attention 8/2 heads x 128, rope 25 %
    "qwen3.5-hybrid": "--arch qwen3_5 --layers 8 --hidden 512 --heads 8 --kv-heads 2 --head-dim 128 --intermediate 1536"
                      " --vocab 32000 --lin-k-heads 4 --lin-v-heads 12 --lin-k-dim 64 --lin-v-dim 64 --conv-kernel 4",
    # Qwen3-MoE (Qwen3-30B-A3B's proportions, scaled down): 32 experts of width 256, top 4, renormalised
    "qwen3-moe": "--arch qwen3_moe --layers 8 --hidden 512 --heads 8 --kv-heads 4 --head-dim 64 --intermediate 1536"
                 " --vocab 32000 --experts 32 --experts-per-tok 4 --moe-intermediate 256 --norm-topk",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seq-lens", default="384,128", help="packed sequence lengths")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    args = ap.parse_args()
    import torch, transformers
    torch.set_num_threads(args.threads)
    tool = os.path.join(args.build, "dflash_tool")
    lens = [int(x) for x in args.seq_lens.split(",")]
    print(f"# torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, "
          f"sequences {lens} ({sum(lens)} tokens), median of {args.repeat}")
    print("| config | tokens | dflash tokens/s | pytorch tokens/s | ratio |")
    print("|---|---|---|---|---|")
    for name in args.configs.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "model")
            subprocess.run([tool, "make-target", model, *CONFIGS[name].split(), "--seed", "1", "--dtype", "f32"],
                           check=True, capture_output=True)
            cfg = json.load(open(os.path.join(model, "config.json")))
            g = torch.Generator().manual_seed(0)
            seqs = [torch.randint(0, cfg["vocab_size"], (n,), generator=g).tolist() for n in lens]
            tok = os.path.join(tmp, "tokens.json")
            json.dump({"sequences": seqs}, open(tok, "w"))
            L = cfg["num_hidden_layers"]
            layers = ",".join(str(i) for i in range(min(5, L)))
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
            out = subprocess.run([tool, "teacher-dump", model, tok, os.path.join(tmp, "out.safetensors"), "--device", "cpu",
                                  "--layers", layers, "--topk", "32", "--repeat", str(args.repeat)],
                                 check=True, capture_output=True, text=True, env=env).stdout
            ours = float(re.search(r"([0-9.]+) tokens/s", out).group(1))

            m = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
            ids = [torch.tensor([s]) for s in seqs]
            times = []
            with torch.inference_mode():
                for r in range(args.repeat + 1):  # the first run warms up
                    t0 = time.perf_counter()
                    for x in ids:
                        o = m(x, output_hidden_states=True)
                        feats = torch.cat([o.hidden_states[i + 1][0] for i in range(min(5, L))], -1)
                        logits = o.logits[0].float()
                        top = logits.topk(32)
                        lse = torch.logsumexp(logits, -1)
                    if r:
                        times.append(time.perf_counter() - t0)
            theirs = sum(lens) / statistics.median(times)
            print(f"| {name} | {sum(lens)} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f}x |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
