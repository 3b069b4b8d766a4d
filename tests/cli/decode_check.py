# decode_check.py: checks a make-data / regenerate HDF5 set against a decode fixture (transformers' greedy continuations).
# decode_check.py FIXTURE OUT.h5 [--regenerate]: FIXTURE is a decode fixture (prompts, continuations, name,
# gen_len; tests/reference/make_decode_fixture.py or make_hf_fixtures.py); every sample of OUT.h5 must be its
# prompt unchanged followed by transformers' continuation exactly, loss_mask 0 on the prompt and 1 on the
# rest. Without --regenerate (make-data's file) it prints one line with the fixture's min top-2 gap. With
# --regenerate (--mode regenerate's set) also: every finish_reason is the length limit, max_new_tokens is
# gen_len, temperature 0, and /heldout holds one sample. Exits 1 (the reason on stderr) on a difference.
# numpy + h5py only (used by tests/cli/test_make_data.sh, test_hf_targets.sh, test_quant_e2e.sh).
import json, sys
import h5py

args = [a for a in sys.argv[1:] if a != "--regenerate"]
regen = len(args) != len(sys.argv) - 1
fixture, out = args[:2]
d = json.load(open(fixture))
f = h5py.File(out, "r")
tok, off, mask = f["tokens"][:], f["offsets"][:], f["loss_mask"][:]
assert len(off) == len(d["prompts"]) + 1, f"{len(off) - 1} samples, want {len(d['prompts'])}"
what = "reply" if regen else "generated"
same = 0
for i, (p, c) in enumerate(zip(d["prompts"], d["continuations"])):
    s = tok[off[i]:off[i + 1]].tolist()
    assert s[:len(p)] == p, f"sample {i}: the prompt changed"
    got = s[len(p):]
    if got != c:
        j = next((j for j, (a, b) in enumerate(zip(got, c)) if a != b), min(len(got), len(c)))
        sys.exit(f"sample {i}: {what} token {j} is {got[j:j + 1]}, transformers has {c[j:j + 1]} "
                 f"({len(got)} vs {len(c)} tokens)")
    assert mask[off[i]:off[i + 1]].tolist() == [0] * len(p) + [1] * len(c), f"sample {i}: loss_mask"
    same += 1
if not regen:
    print(f"{d['name']}: {len(d['prompts'])} prompts x {d['gen_len']} tokens equal transformers "
          f"(min top-2 gap {d['min_top2_gap']:.3g})")
    sys.exit(0)
fin = f["finish_reason"][:]
assert fin.tolist() == [1] * len(d["prompts"]), f"finish_reason {fin.tolist()}: every reply should end at the length limit"
assert int(f.attrs["max_new_tokens"]) == d["gen_len"] and float(f.attrs["temperature"]) == 0
h = f["heldout"][:].tolist()
assert len(h) == 1 and 0 <= h[0] < len(d["prompts"]), f"/heldout {h}"
print(f"{d['name']}: {same} replies x {d['gen_len']} tokens equal transformers' greedy continuation, held out {h}")
