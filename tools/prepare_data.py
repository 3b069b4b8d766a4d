#!/usr/bin/env python3
"""Chat JSONL to a dflash_rank training set, through the target's own tokenizer and chat template.

    python3 tools/prepare_data.py IN.jsonl OUT.h5 --model MODEL_DIR [--tool build/dflash_tool]
        [--max-len N] [--min-loss-tokens N] [--template-kwargs JSON] [--keep-jsonl PATH]
    python3 tools/prepare_data.py IN.jsonl PROMPTS.jsonl --model MODEL_DIR --prompts-only [--max-len N]

Input: one conversation per line, {"messages": [{"role": "system"|"user"|"assistant"|..., "content":
"..."}, ...]} (other keys ignored, blank lines skipped). Each conversation is rendered with
tokenizer.apply_chat_template (the template of MODEL_DIR: transformers.AutoTokenizer.from_pretrained)
and tokenized once; loss_mask is 1 on the tokens of assistant turns and 0 elsewhere (system and user
turns, the template's role headers).

The assistant spans are found on the rendered text, which is robust to tokenizers that merge across
a turn boundary: for the i-th message, an assistant one,
    before = render(messages[:i], add_generation_prompt=True)   # everything up to the reply
    after  = render(messages[:i+1])                             # ... and the reply itself
must be prefixes of the full rendering (before of after); the characters from len(before) up to the end of the last
end-of-turn token (the tokenizer's eos_token, e.g. "<|im_end|>") in the turn, or to len(after) when
there is none, are the reply: its content and the token the target generates to stop, which the
drafter learns too; the template's formatting after it (a newline) is not. A token is in the mask
when its first character is in such a span (offsets of a fast tokenizer). When the template marks
replies with {% generation %} tags, transformers' return_assistant_tokens_mask is used instead.
(A reply that opens the conversation has no
"before": its header is what its rendering shares with the rendering of the same turn emptied.)
A template that rewrites earlier turns as the conversation grows (so a prefix is not a prefix, e.g.
reasoning stripped from past turns) makes the conversation unusable: it is skipped and counted,
like conversations without assistant content.

Output: the token ids and masks as {"input_ids", "loss_mask"} JSON lines (a temporary file, or
--keep-jsonl PATH), then `dflash_tool convert-jsonl` writes OUT.h5 (SPEC section 7) with vocab_size =
the model's config.json vocab_size (else the tokenizer's length) and tokenizer = MODEL_DIR.

--prompts-only: OUT is not a training set but the prompts for `dflash_rank --mode regenerate`
(regenerate.prompts), one {"input_ids": [...]} line per conversation: the messages before the
conversation's final assistant turn (all of them when it ends with another role) rendered with
add_generation_prompt=True, so the target answers that turn itself. Earlier assistant turns stay in
the prompt as the dataset wrote them: they are context (loss 0 in the regenerated set), and
regenerating them would need one generation per turn, each waiting on the one before. A prompt
longer than --max-len is skipped and counted. The regenerated set then holds the target's own
token ids, never re-tokenised.

A reply cut at a length limit ("finish_reason": "length" on the assistant message) keeps its
end-of-turn token out of the mask: the target did not stop there.

Options:
  --tool PATH           dflash_tool (default $DFLASH_TOOL, else build/dflash_tool next to tools/)
  --max-len N           cut conversations to their first N tokens (default: no limit)
  --min-loss-tokens N   leave out (and count) samples with fewer loss tokens (default 1)
  --template-kwargs J   extra chat-template variables as a JSON object, e.g. '{"enable_thinking": false}'

Needs transformers (PyPI: pip install transformers); not used by the tests (CI has no PyPI).

Checked by hand (transformers 5.24, tokenizers 0.22, offline): a byte-level BPE of 400 ids trained
in a script with `tokenizers` on a few sentences, wrapped in PreTrainedTokenizerFast (eos_token
"<|im_end|>") and saved with a config.json (vocab_size 512), with three chat templates: ChatML;
ChatML with {% generation %} tags (the return_assistant_tokens_mask path); and one that renders only
the last two messages (earlier turns vanish as the conversation grows). Five conversations: one
turn; system + two user/assistant turns; an assistant turn opening the conversation; no assistant
turn; a reply with punctuation. Decoding each run of masked tokens gave exactly "<reply><|im_end|>"
for every assistant turn and nothing else, the same for the first two templates; the conversation
without a reply was skipped and counted, and with the third template so was the two-turn one
("template rewrites earlier turns"); --max-len 20 cut every sample to 20 tokens (one left without
loss tokens, skipped and counted); a message without "content" stopped with one error line naming
the line and no output; OUT.h5 read back with h5py equals the JSON lines (--keep-jsonl), with
vocab_size 512 and tokenizer = the model directory.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def die(msg):
    sys.exit(f"error: prepare_data: {msg}")


def as_ids(r):
    """apply_chat_template's tokenized result: a list, or a BatchEncoding (transformers 5)."""
    if hasattr(r, "keys"):
        r = r["input_ids"]
    return list(r)


class Renderer:
    def __init__(self, tok, template_kwargs):
        self.tok = tok
        self.kw = template_kwargs
        tmpl = tok.chat_template if isinstance(tok.chat_template, str) else ""
        self.has_generation_tags = "{% generation %}" in tmpl or "{%- generation %}" in tmpl
        self.eos = tok.eos_token if isinstance(tok.eos_token, str) else None

    def text(self, messages, add_generation_prompt=False):
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                            **self.kw)

    def sample(self, messages):
        """(ids, mask) of one conversation, or (None, reason) when it cannot be used."""
        if self.has_generation_tags:
            r = self.tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                             return_assistant_tokens_mask=True, **self.kw)
            ids, mask = list(r["input_ids"]), [int(m) for m in r["assistant_masks"]]
            return (ids, mask) if any(mask) else (None, "no assistant tokens")
        full = self.text(messages)
        spans = []
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            try:
                before = self.text(messages[:i], add_generation_prompt=True)
            except Exception:  # noqa: BLE001 (a template may refuse a conversation that starts here)
                before = None
            after = self.text(messages[:i + 1])
            if i == 0 and (before is None or not after.startswith(before)):
                # a reply that opens the conversation (transformers renders no empty conversation):
                # its header is what the rendering shares with the same turn emptied
                empty = self.text([dict(m, content="")])
                n = 0
                while n < min(len(empty), len(after)) and empty[n] == after[n]:
                    n += 1
                before = after[:n]
            if before is None or not (after.startswith(before) and full.startswith(after)):
                return None, "template rewrites earlier turns (a prefix is not a prefix)"
            end = len(after)
            k = after.rfind(self.eos, len(before)) if self.eos else -1
            if k >= 0:
                # stop after the end-of-turn token (not the template's newline), or before it when the
                # reply was cut at a length limit: the target did not stop there
                end = k if cut_at_length(m) else k + len(self.eos)
            if end > len(before):
                spans.append((len(before), end))
        if not spans:
            return None, "no assistant tokens"
        enc = self.tok(full, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
        mask = [1 if any(a <= s < b for a, b in spans) and e > s else 0 for s, e in offsets]
        return (ids, mask) if any(mask) else (None, "no assistant tokens")


def cut_at_length(message):
    """An assistant message whose generation was cut at a length limit ("finish_reason": "length",
    as OpenAI-style APIs and tools/regenerate outputs record it): its end-of-turn token, which the
    template adds, is not something the target generated."""
    return message.get("finish_reason") == "length"


def prompt_ids(tok, messages, kw):
    """The prompt that regenerates the conversation's final assistant turn: every message before it
    (all of them when the conversation ends with another role) rendered with add_generation_prompt."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    ctx = messages[:last] if last is not None and last == len(messages) - 1 else messages
    if not ctx:
        return None
    return as_ids(tok.apply_chat_template(ctx, tokenize=True, add_generation_prompt=True, **kw))


def check_messages(msgs, lineno):
    if not isinstance(msgs, list) or not msgs:
        die(f"line {lineno}: wants {{\"messages\": [{{\"role\": ..., \"content\": ...}}, ...]}}")
    for j, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            die(f"line {lineno}: message {j} wants a string \"role\" and a string \"content\"")


def read_conversations(path):
    """(line number, messages) of every non-blank line; a bad line is one error."""
    with open(path) as fin:
        for lineno, line in enumerate(fin, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                die(f"line {lineno}: not valid JSON ({e.msg})")
            msgs = rec.get("messages") if isinstance(rec, dict) else None
            check_messages(msgs, lineno)
            yield lineno, msgs


def write_prompts(a, tok, kw, vocab):
    """--prompts-only: OUT = one {"input_ids": [...]} line per usable conversation."""
    n_in = n_out = n_tokens = 0
    skipped = {}
    tmp = a.out + ".tmp"
    try:
        with open(tmp, "w") as fout:
            for lineno, msgs in read_conversations(a.input):
                n_in += 1
                ids = prompt_ids(tok, msgs, kw)
                why = "nothing before the final assistant turn" if not ids else (
                    f"prompt longer than --max-len {a.max_len}" if 0 < a.max_len < len(ids) else None)
                if why:
                    skipped[why] = skipped.get(why, 0) + 1
                    continue
                bad = [t for t in ids if not 0 <= t < vocab]
                if bad:
                    die(f"line {lineno}: token id {bad[0]} is outside the model's vocabulary [0, {vocab})")
                fout.write(json.dumps({"input_ids": ids}, separators=(",", ":")) + "\n")
                n_out += 1
                n_tokens += len(ids)
        if n_out == 0:
            die(f"{a.input}: none of {n_in} conversations gave a prompt")
        os.replace(tmp, a.out)
    except OSError as e:
        die(str(e))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    if skipped:
        print("prepare_data: skipped " + ", ".join(f"{n} ({why})" for why, n in skipped.items()), file=sys.stderr)
    print(f"prepare_data: {n_out} prompts of {n_in} conversations, {n_tokens} tokens -> {a.out} "
          f"(dflash_rank --mode regenerate --regenerate.prompts={a.out})", file=sys.stderr)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help="chat JSONL: {\"messages\": [...]} per line")
    ap.add_argument("out", help="output HDF5 training set")
    ap.add_argument("--model", required=True, help="the target's model directory (tokenizer + chat template)")
    ap.add_argument("--tool", default=os.environ.get("DFLASH_TOOL", os.path.join(os.path.dirname(here), "build", "dflash_tool")))
    ap.add_argument("--max-len", type=int, default=0)
    ap.add_argument("--min-loss-tokens", type=int, default=1)
    ap.add_argument("--template-kwargs", default="{}")
    ap.add_argument("--keep-jsonl", default=None, help="also keep the tokenized JSON lines here")
    ap.add_argument("--prompts-only", action="store_true",
                    help="write OUT as regenerate.prompts JSONL ({\"input_ids\": [...]} per conversation: the "
                         "conversation before its final assistant turn, with the generation prompt) instead of a "
                         "training set")
    a = ap.parse_args()
    try:
        template_kwargs = json.loads(a.template_kwargs)
        assert isinstance(template_kwargs, dict)
    except (json.JSONDecodeError, AssertionError):
        die(f"--template-kwargs '{a.template_kwargs}' is not a JSON object")
    if not a.prompts_only and not os.access(a.tool, os.X_OK):
        die(f"{a.tool} is not an executable dflash_tool (build it, or pass --tool / DFLASH_TOOL)")
    if not os.path.isdir(a.model):
        die(f"--model {a.model}: not a directory (want the target's Hugging Face model directory)")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        die("needs transformers (pip install transformers)")
    try:
        tok = AutoTokenizer.from_pretrained(a.model)
    except Exception as e:  # noqa: BLE001 (any loading problem is one line)
        die(f"{a.model}: cannot load a tokenizer: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if not tok.chat_template:
        die(f"{a.model}: the tokenizer has no chat template")
    if not getattr(tok, "is_fast", False):
        die(f"{a.model}: a fast tokenizer is needed (character offsets)")
    vocab = len(tok)
    try:
        with open(os.path.join(a.model, "config.json")) as f:
            vocab = int(json.load(f).get("vocab_size", vocab))
    except (OSError, ValueError):
        pass
    render = Renderer(tok, template_kwargs)
    if a.prompts_only:
        return write_prompts(a, tok, template_kwargs, vocab)

    out_dir = os.path.dirname(os.path.abspath(a.out))
    jsonl = a.keep_jsonl or tempfile.NamedTemporaryFile(prefix="prepare_data_", suffix=".jsonl", dir=out_dir, delete=False).name
    n_in = n_out = n_tokens = n_loss = 0
    skipped = {}
    try:
        with open(jsonl, "w") as fout:
            for lineno, msgs in read_conversations(a.input):
                n_in += 1
                ids, mask = render.sample(msgs)
                if ids is None:
                    skipped[mask] = skipped.get(mask, 0) + 1
                    continue
                if a.max_len > 0:
                    ids, mask = ids[:a.max_len], mask[:a.max_len]
                if not any(mask):
                    skipped["no assistant tokens within --max-len"] = skipped.get("no assistant tokens within --max-len", 0) + 1
                    continue
                if sum(mask) < a.min_loss_tokens:  # convert-jsonl would leave it out: count it here
                    why = f"fewer than {a.min_loss_tokens} loss tokens"
                    skipped[why] = skipped.get(why, 0) + 1
                    continue
                bad = [t for t in ids if not 0 <= t < vocab]
                if bad:
                    die(f"line {lineno}: token id {bad[0]} is outside the model's vocabulary [0, {vocab})")
                fout.write(json.dumps({"input_ids": ids, "loss_mask": mask}, separators=(",", ":")) + "\n")
                n_out += 1
                n_tokens += len(ids)
                n_loss += sum(mask)
        if skipped:
            print("prepare_data: skipped " + ", ".join(f"{n} ({why})" for why, n in skipped.items()), file=sys.stderr)
        if n_out == 0:
            die(f"{a.input}: none of {n_in} conversations gave a sample")
        cmd = [a.tool, "convert-jsonl", jsonl, a.out, "--vocab-size", str(vocab), "--tokenizer", a.model,
               "--min-loss-tokens", str(a.min_loss_tokens)]
        r = subprocess.run(cmd)
        if r.returncode:
            sys.exit(r.returncode)
    except OSError as e:
        die(str(e))
    finally:
        if not a.keep_jsonl and os.path.exists(jsonl):
            os.unlink(jsonl)
    print(f"prepare_data: {n_out} of {n_in} conversations, {n_tokens} tokens ({n_loss} assistant) -> {a.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
