#!/usr/bin/env python3
"""Reference fixtures for the target families of the C teacher, on checkpoints saved by transformers.

Unlike make_teacher_fixtures.py (whose models are written by `dflash_tool make-target`), every model
here is built in Python from a config, given random weights, and written by transformers itself
(`model.save_pretrained(dir)`, safetensors): the directory is exactly what the published checkpoints
of that family look like to the loader (names, dtypes, config.json keys as this transformers writes
them). The quantised fixtures (gpt_oss_mxfp4, deepseek_v3_fp8, qwen3_fp8) are rewritten by this
script in the published formats (MXFP4 expert blocks + e8m0 scales; FP8 e4m3 weights + per-block
float32 weight_scale_inv) and then loaded back by transformers' own dequantising loader.

For each fixture NAME this script
  1. builds the model from its config (float32), draws the weights (the scales of
     `dflash_tool make-target`, see tools/tool_make_target.c: linear N(0, 1/fan_in), embeddings and
     lm_head N(0, 16/H), RMSNorm weights 1 + 0.1 N(0, 1) (0.1 N(0, 1) for Gemma3's (1 + w) norms;
     Gemma's post-attention / post-feedforward norms 16 (1 + 0.1 N(0, 1)), so that the scaled
     embedding does not dominate the residual and the tied head does not repeat the input token),
     biases 0.1 N(0, 1), attention sinks N(0, 1), routers N(0, 4/H), DeepSeek/GLM
     e_score_correction_bias N(0, 0.5^2) (std 0.5), Gemma4 layer_scalar U(0.5, 1.5); gpt-oss
     gate_up experts N(0, 9/H) so that the swiglu clamp at 7 acts), casts it to the fixture's dtype
     and saves it with save_pretrained (then quantises, for the quantised fixtures),
  2. loads the directory back with from_pretrained(dtype=float32, attn_implementation="eager",
     experts_implementation="eager" for the MoE classes), requires no missing, unexpected or
     mismatched keys, and checks that every loaded tensor equals the saved one (upcast exactly;
     for the quantised ones: equals this script's own dequantisation),
  3. runs 2-3 token sequences of different lengths, each on its own (positions from 0), on one
     thread in float32, and greedy generate() on 3 prompts (gen_len 24, eos disabled),
  4. keeps the first seed (from 1) for which every gap between consecutive values among the top 9
     logits of every position is >= MIN_GAP, every generated step's top-2 gap is >= MIN_GAP, every
     continuation has at least MIN_DISTINCT different tokens, and
     for MoE: every token's k-th minus (k+1)-th routing score (and, for the grouped routers, the
     topk_group-th minus next group score) of every sparse layer is >= MIN_ROUTER_GAP in the
     teacher sequences and in prompt + continuation, and every expert is chosen by some token,
  5. writes under tests/reference/data/hf/:
       NAME/                 the saved model directory (config.json, model.safetensors,
                             generation_config.json)
       NAME.ref.safetensors  tokens i32 [T], cu_seqlens i32 [S+1], layer_ids i32 [n],
                             features f32 [T, n*H] (HF hidden_states[id + 1]: decoder layer id's
                             output, after the final norm for id = L-1), topk_idx i32 [T, 8],
                             topk_val f32 [T, 8] (descending), lse f32 [T] (logsumexp of the fp32
                             logits after any final soft-cap), logits_last f32 [S, V]
       NAME.tokens.json      {"sequences": [...]}: the input of `dflash_tool teacher-dump`
       NAME.args             bash-sourceable: layer_ids, topk, tokens, reference, model, class,
                             dtype, quant, tol
       NAME.decode.json      {"name", "model", "class", "gen_len", "prompts", "continuations",
                             "min_top2_gap", ...}: the input of test_make_data-style checks
     and the console output into data/hf/hf_fixtures.log.

tests/cli/test_hf_targets.sh runs the C teacher (teacher-dump, make-data) on every fixture.

Not part of CI: it needs torch + transformers (+ accelerate for the quantised loaders). Run it
from the repository root:
    python3 tests/reference/make_hf_fixtures.py [--only NAME,NAME] [--out DIR]
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time

import torch

K = 8                  # top-k written
MIN_GAP = 1e-3         # consecutive top-(K+1) logits, and the top-2 of every generated step
MIN_ROUTER_GAP = 1e-3  # k-th minus (k+1)-th routing score (and group score) of every token
MIN_DISTINCT = 4       # distinct tokens in every greedy continuation (a decode stuck repeating one
                       # token from the start tests the cache little)
SEEDS = 400            # seeds tried per fixture
GEN_LEN = 24
TOL = 2e-4             # the C comparison's tolerance (relative to each tensor's max |value|)
MAX_DIR_BYTES = 400_000

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}

# ------------------------------------------------------------------------------------------ fixtures
# Each: name, class, config class, config kwargs, weight dtype, layer ids, sequence lengths, prompt
# lengths, what it covers; optional: "moe" (the router kind: "gpt_oss" | "grouped"), "quant"
# ("mxfp4" | "fp8"), "fp8_block", "norm_offset" (norms computed as x * (1 + w)), "embed_std"
# (embedding std x sqrt(H), default 4).
FIXTURES = [
    dict(name="qwen2_gqa", cls="Qwen2ForCausalLM", cfg_cls="Qwen2Config", dtype="bf16",
         cfg=dict(vocab_size=251, hidden_size=64, intermediate_size=112, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                  tie_word_embeddings=False, max_position_embeddings=4096),
         layer_ids=[0, 2], seqs=(13, 9, 5), prompts=(5, 11, 17),
         covers="q/k/v biases (o_proj none), GQA 4/2, untied, rope_theta 1e6; last layer (post-norm)"),
    dict(name="qwen2_mqa_tied", cls="Qwen2ForCausalLM", cfg_cls="Qwen2Config", dtype="bf16",
         cfg=dict(vocab_size=199, hidden_size=48, intermediate_size=88, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=1, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                  tie_word_embeddings=True, max_position_embeddings=4096),
         layer_ids=[0, 1], seqs=(11, 6), prompts=(4, 9, 15), embed_std=2.0,
         covers="q/k/v biases, one kv head, tied embeddings (no lm_head.weight; embedding N(0, 4/H): with "
                "16/H the tied head repeats the input token in every seed's greedy decode)"),
    dict(name="mistral_swa", cls="MistralForCausalLM", cfg_cls="MistralConfig", dtype="f16",
         cfg=dict(vocab_size=283, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=24, sliding_window=5,
                  rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                  tie_word_embeddings=False, max_position_embeddings=4096),
         layer_ids=[0, 1, 2], seqs=(13, 9, 4), prompts=(3, 8, 14),
         covers="sliding_window 5 on every layer (shorter than the sequences and the decode), "
                "head_dim 24 != 64/4, GQA 4/2; last layer (post-norm)"),
    dict(name="mistral3_mm", cls="Mistral3ForConditionalGeneration", cfg_cls="Mistral3Config", dtype="bf16",
         cfg=dict(text_config=dict(model_type="mistral", vocab_size=227, hidden_size=48, intermediate_size=72,
                                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                                   sliding_window=6, rms_norm_eps=1e-5,
                                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                                   tie_word_embeddings=False, max_position_embeddings=4096),
                  vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=2, head_dim=16, image_size=28, patch_size=14),
                  tie_word_embeddings=False),
         layer_ids=[1, 2], seqs=(12, 7), prompts=(4, 9, 13),
         covers="Mistral-Small 3.x's wrapper as save_pretrained writes it (its text model under the llava layout "
                "language_model.model.*, the head language_model.lm_head.weight; vision_tower.* and "
                "multi_modal_projector.* to skip), sliding_window 6, one kv head x 16 (!= 48/4); last layer"),
    dict(name="gemma3_text", cls="Gemma3ForCausalLM", cfg_cls="Gemma3TextConfig", dtype="f32",
         norm_offset=True,
         cfg=dict(vocab_size=262, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=20,
                  query_pre_attn_scalar=32, sliding_window=5,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                  rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 20000.0},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 500.0}},
                  final_logit_softcapping=8.0, attn_logit_softcapping=None, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, max_position_embeddings=4096),
         layer_ids=[0, 2], seqs=(13, 9, 5), prompts=(5, 10, 16),
         covers="sliding/full layer_types (window 5), query_pre_attn_scalar 32 != head_dim 20 (!= 48/4), "
                "per-type RoPE (full: linear x2, theta 2e4; sliding: theta 500), final soft-cap 8, "
                "(1 + w) norms incl. q/k norms, sandwich norms, embed * sqrt(H), gelu_tanh, tied; "
                "last layer (post-norm)"),
    dict(name="gemma3_mm", cls="Gemma3ForConditionalGeneration", cfg_cls="Gemma3Config", dtype="bf16",
         norm_offset=True,
         cfg=dict(text_config=dict(vocab_size=233, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                   query_pre_attn_scalar=24, sliding_window=4,
                                   layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 100000.0},
                                                    "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0}},
                                   final_logit_softcapping=None, rms_norm_eps=1e-6, max_position_embeddings=4096),
                  vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=2, image_size=28, patch_size=14, vision_use_head=False),
                  mm_tokens_per_image=1, tie_word_embeddings=True),
         layer_ids=[0, 2], seqs=(12, 7), prompts=(4, 9, 13),
         covers="the multimodal wrapper as save_pretrained writes it (text under language_model.model.*, as "
                "the published Gemma 3 checkpoints have it, though transformers holds model.language_model.*; "
                "vision_tower.* and multi_modal_projector.* to skip), one kv head x 32 (head_dim 32 != 48/2), window 4, "
                "no soft-cap (as published: the wrapper's forward would not apply one), tied; "
                "last layer (post-norm)"),
    dict(name="gemma4_31b_like", cls="Gemma4ForCausalLM", cfg_cls="Gemma4TextConfig", dtype="bf16",
         cfg=dict(vocab_size=211, hidden_size=48, intermediate_size=80, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                  sliding_window=5, final_logit_softcapping=10.0,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                      "rope_theta": 1000000.0}},
                  hidden_size_per_layer_input=0, num_kv_shared_layers=0, enable_moe_block=False,
                  use_double_wide_mlp=False, rms_norm_eps=1e-6, tie_word_embeddings=True,
                  max_position_embeddings=4096),
         layer_ids=[0, 2], seqs=(13, 9, 5), prompts=(5, 10, 16),
         covers="the 31B dense layout: sliding (16-dim heads, 2 kv heads, theta 1e4) / full layers "
                "(global_head_dim 32, 1 kv head, attention_k_eq_v: no v_proj, V = K before k_norm/RoPE), "
                "proportional RoPE (partial 0.25 of 32 = 4 rotated pairs), q/k norms + unscaled v_norm, "
                "attention scaling 1.0, layer_scalar, soft-cap 10, sandwich norms, tied, no PLE / KV sharing / MoE"),
    dict(name="gpt_oss", cls="GptOssForCausalLM", cfg_cls="GptOssConfig", dtype="bf16", moe="gpt_oss",
         cfg=dict(vocab_size=317, hidden_size=48, intermediate_size=56, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=24, num_local_experts=5,
                  num_experts_per_tok=3, sliding_window=5, layer_types=["sliding_attention", "full_attention"],
                  rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                   "truncate": False, "original_max_position_embeddings": 4096,
                                   "rope_theta": 150000.0},
                  swiglu_limit=7.0, attention_bias=True, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  max_position_embeddings=131072),
         layer_ids=[0, 1], seqs=(13, 9, 5), prompts=(5, 9, 14),
         covers="attention sinks, sliding/full alternating (window 5), YaRN (factor 32, beta 32/1, orig 4096, "
                "truncate false: attention_factor 1 + 0.1 ln 32 on cos/sin), q/k/v/o biases, 5 experts top 3 "
                "(softmax over the top-3 logits), router bias, expert biases, interleaved gate/up, "
                "swiglu clamp 7 acting; last layer (post-norm)"),
    dict(name="gpt_oss_mxfp4", cls="GptOssForCausalLM", cfg_cls="GptOssConfig", dtype="bf16", moe="gpt_oss",
         quant="mxfp4",
         cfg=dict(vocab_size=229, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=16, num_local_experts=5,
                  num_experts_per_tok=3, sliding_window=5, layer_types=["sliding_attention", "full_attention"],
                  rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                   "truncate": False, "original_max_position_embeddings": 4096,
                                   "rope_theta": 150000.0},
                  swiglu_limit=7.0, attention_bias=True, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  max_position_embeddings=131072),
         layer_ids=[0], seqs=(13, 9, 5), prompts=(5, 9, 14),
         covers="gpt_oss with its experts in MXFP4 as published (gate_up/down _blocks u8 [E, R, C/32, 16] + "
                "_scales u8 e8m0 [E, R, C/32], biases bf16, quantization_config mxfp4), one kv head"),
    dict(name="deepseek_v3_qlora_yarn", cls="DeepseekV3ForCausalLM", cfg_cls="DeepseekV3Config", dtype="bf16",
         moe="grouped",
         cfg=dict(vocab_size=281, hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=40,
                  kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, rope_interleave=True,
                  rope_parameters={"rope_type": "yarn", "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                   "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                   "rope_theta": 10000.0},
                  first_k_dense_replace=1, n_routed_experts=6, n_group=3, topk_group=2, num_experts_per_tok=3,
                  routed_scaling_factor=2.5, norm_topk_prob=True, n_shared_experts=1, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, max_position_embeddings=163840),
         layer_ids=[0, 2], seqs=(13, 9, 5), prompts=(5, 9, 14),
         covers="MLA with q_lora_rank 40 (q_a_proj, q_a_layernorm, q_b_proj), kv_lora_rank 24, qk_nope 16 / "
                "qk_rope 8 / v 12, rope_interleave, YaRN factor 40 with mscale = mscale_all_dim = 1 "
                "(cos/sin factor 1, softmax scale x (0.1 ln 40 + 1)^2), layer 0 dense, 6 experts in 3 groups, "
                "top-2 groups, top 3, sigmoid + e_score_correction_bias, renormalised x 2.5, one shared expert; "
                "last layer (post-norm)"),
    dict(name="deepseek_v3_noqlora", cls="DeepseekV3ForCausalLM", cfg_cls="DeepseekV3Config", dtype="bf16",
         moe="grouped",
         cfg=dict(vocab_size=239, hidden_size=48, intermediate_size=80, moe_intermediate_size=20,
                  num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=3, q_lora_rank=None,
                  kv_lora_rank=20, qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10, rope_interleave=True,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                  first_k_dense_replace=1, n_routed_experts=6, n_group=3, topk_group=2, num_experts_per_tok=3,
                  routed_scaling_factor=2.5, norm_topk_prob=True, n_shared_experts=1, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, max_position_embeddings=4096),
         layer_ids=[0], seqs=(13, 9, 5), prompts=(5, 9, 14),
         covers="MLA without q_lora (q_proj), 3 heads, kv_lora_rank 20, qk_nope 12 / qk_rope 8 / v 10, "
                "rope_interleave, plain RoPE, layer 0 dense + layer 1 MoE (6 experts, 3 groups, top-2 groups, top 3)"),
    dict(name="deepseek_v3_fp8", cls="DeepseekV3ForCausalLM", cfg_cls="DeepseekV3Config", dtype="bf16",
         moe="grouped", quant="fp8", fp8_block=(16, 16),
         cfg=dict(vocab_size=263, hidden_size=72, intermediate_size=88, moe_intermediate_size=24,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=40,
                  kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, rope_interleave=True,
                  rope_parameters={"rope_type": "yarn", "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                   "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                   "rope_theta": 10000.0},
                  first_k_dense_replace=1, n_routed_experts=6, n_group=3, topk_group=2, num_experts_per_tok=3,
                  routed_scaling_factor=2.5, norm_topk_prob=True, n_shared_experts=1, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, max_position_embeddings=163840),
         layer_ids=[0, 1], seqs=(13, 9, 5), prompts=(5, 9, 14),
         covers="DeepSeek-V3 with FP8 block-quantised linears as published (e4m3 weight + f32 weight_scale_inv "
                "[ceil(out/16), ceil(in/16)], H 72 and others not multiples of 16: partial last blocks), "
                "router/norms/embeddings/lm_head unquantised bf16, e_score_correction_bias f32; last layer (post-norm)"),
    dict(name="glm4_moe_qknorm", cls="Glm4MoeForCausalLM", cfg_cls="Glm4MoeConfig", dtype="f16", moe="grouped",
         cfg=dict(vocab_size=227, hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                  partial_rotary_factor=0.5, attention_bias=True, use_qk_norm=True,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
                  first_k_dense_replace=1, n_routed_experts=6, n_group=2, topk_group=1, num_experts_per_tok=2,
                  routed_scaling_factor=1.8, norm_topk_prob=True, n_shared_experts=1, rms_norm_eps=1e-5,
                  tie_word_embeddings=False, max_position_embeddings=4096),
         layer_ids=[0, 2], seqs=(13, 9, 5), prompts=(5, 9, 14),
         covers="partial rotary 0.5 of head_dim 24 (12 dims, rotate_half on the first 12), q/k/v biases "
                "(o_proj none), q/k norms, GQA 4/2, layer 0 dense, 6 experts in 2 groups, top-1 group, top 2, "
                "sigmoid + e_score_correction_bias, renormalised x 1.8, shared expert; last layer (post-norm)"),
    dict(name="glm4_moe", cls="Glm4MoeForCausalLM", cfg_cls="Glm4MoeConfig", dtype="f16", moe="grouped",
         cfg=dict(vocab_size=191, hidden_size=48, intermediate_size=72, moe_intermediate_size=20,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                  partial_rotary_factor=0.5, attention_bias=True, use_qk_norm=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
                  first_k_dense_replace=1, n_routed_experts=6, n_group=1, topk_group=1, num_experts_per_tok=3,
                  routed_scaling_factor=2.5, norm_topk_prob=True, n_shared_experts=1, rms_norm_eps=1e-5,
                  tie_word_embeddings=False, max_position_embeddings=4096),
         layer_ids=[0], seqs=(13, 9, 5), prompts=(5, 9, 14),
         covers="no q/k norm, one kv head, n_group 1 (as GLM-4.5), 6 experts top 3, renormalised x 2.5"),
    dict(name="qwen3_fp8", cls="Qwen3ForCausalLM", cfg_cls="Qwen3Config", dtype="bf16", quant="fp8",
         fp8_block=(16, 16),
         cfg=dict(vocab_size=263, hidden_size=72, intermediate_size=100, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=20, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                  tie_word_embeddings=False, max_position_embeddings=4096),
         layer_ids=[0, 2], seqs=(13, 9, 5), prompts=(5, 9, 14),
         covers="Qwen3 with FP8 block-quantised q/k/v/o/gate/up/down (e4m3 + f32 weight_scale_inv, block "
                "16x16, partial last blocks: H 72, q 80, kv 40, I 100), the rest bf16; last layer (post-norm)"),
]


def log(lines, msg=""):
    print(msg, flush=True)
    lines.append(msg)


def text_config(cfg):
    return cfg.get_text_config()


def text_model(model):
    return getattr(model.model, "language_model", model.model)


# ------------------------------------------------------------------------------------------ weights
def draw_weights(model, fx, seed):
    """Replace transformers' init with make-target's scales (see the docstring). Deterministic in seed."""
    g = torch.Generator().manual_seed(seed)
    tc = text_config(model.config)
    H = tc.hidden_size
    offset_norm = fx.get("norm_offset", False)
    gpt_oss = fx["cls"].startswith("GptOss")

    def normal(shape, std):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std

    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if ".vision_tower." in name or "multi_modal_projector" in name:
                # never read by the teacher: the linear rule / unit norms, small biases
                if p.dim() >= 2:
                    fan = shape[-1] if "mm_input_projection" not in name else shape[0]
                    v = normal(shape, 1.0 / math.sqrt(math.prod(shape[1:]) if p.dim() > 2 else fan))
                elif name.endswith("bias"):
                    v = normal(shape, 0.02)
                else:
                    v = (0.1 * normal(shape, 1.0)) if "mm_soft_emb_norm" in name else 1.0 + 0.1 * normal(shape, 1.0)
            elif name.endswith("embed_tokens.weight") or name.endswith("lm_head.weight"):
                v = normal(shape, fx.get("embed_std", 4.0) / math.sqrt(H))
            elif name.endswith("sinks"):
                v = normal(shape, 1.0)
            elif name.endswith("bias"):               # q/k/v/o biases, router bias, expert biases
                v = normal(shape, 0.1)
            elif name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight"):
                v = normal(shape, 2.0 / math.sqrt(H))   # router: N(0, 4/H)
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                # [E, out, in] (DeepSeek/GLM: x @ W[e].T); gpt-oss keeps [E, in, out] (x @ W[e])
                fan_in = shape[1] if gpt_oss else shape[2]
                std = 1.0 / math.sqrt(fan_in)
                if gpt_oss and name.endswith("gate_up_proj"):
                    std *= 3.0   # pre-activations of std ~3: some exceed swiglu_limit 7, the clamp acts
                v = normal(shape, std)
            elif p.dim() == 2:
                v = normal(shape, 1.0 / math.sqrt(shape[1]))
            elif p.dim() == 1 and "norm" in name:
                # Gemma's sandwich norms: each sublayer's output norm scaled by 16 (x (1 + 0.1 N)), so
                # that the token's own embedding (x sqrt(H), rms ~4) does not dominate the residual
                # stream and the tied lm_head does not just repeat the input token (with 1, 4 and 8
                # greedy decoding repeated one token from the first or second step on)
                post = fx["cls"].startswith("Gemma") and ("post_attention_layernorm" in name
                                                          or "post_feedforward_layernorm" in name)
                mult = 16.0 if post else 1.0
                v = mult * (1.0 + 0.1 * normal(shape, 1.0)) - (1.0 if offset_norm else 0.0)
            else:
                raise SystemExit(f"{fx['name']}: no weight rule for {name} {shape}")
            p.copy_(v)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(normal(tuple(b.shape), 0.5))
            elif name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(tuple(b.shape), generator=g))


# ------------------------------------------------------------------------------------------ quantisation
FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                           -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_quantize(w_rows):
    """w_rows [E, R, C] (C % 32 == 0), one output row per r. Returns blocks u8 [E, R, C/32, 16],
    scales u8 [E, R, C/32] (e8m0: value 2^(s - 127)) and the exact dequantisation [E, R, C] (f32).
    Byte j of a 32-block holds element 2j in its low nibble and element 2j+1 in its high nibble; a
    nibble is sign(bit 3) + e2m1 magnitude index (FP4_VALUES)."""
    E, R, C = w_rows.shape
    x = w_rows.reshape(E, R, C // 32, 32).float()
    amax = x.abs().amax(-1)
    # smallest power of two with amax / 2^e <= 6
    e = torch.ceil(torch.log2(torch.clamp(amax, min=1e-30) / 6.0)).to(torch.int32)
    e = torch.clamp(e, -127, 127)
    scaled = x / torch.pow(2.0, e.float()).unsqueeze(-1)
    mags = FP4_VALUES[:8]
    idx = (scaled.abs().unsqueeze(-1) - mags).abs().argmin(-1)       # nearest magnitude (ties: lower)
    nib = idx + 8 * (scaled < 0).to(torch.int64)
    nib = torch.where(idx == 0, torch.zeros_like(nib), nib)          # +0 for zero
    nib = nib.to(torch.uint8)
    blocks = (nib[..., 0::2] | (nib[..., 1::2] << 4)).contiguous()   # [E, R, C/32, 16]
    scales = (e + 127).to(torch.uint8).contiguous()
    deq = (FP4_VALUES[nib.long()] * torch.pow(2.0, e.float()).unsqueeze(-1)).reshape(E, R, C)
    return blocks, scales, deq


def fp8_quantize(w, block):
    """w [out, in] (f32). Returns the e4m3 weight, float32 weight_scale_inv [ceil(out/bo), ceil(in/bi)]
    (amax / 448 of each block, the last blocks partial) and the dequantisation float(q) * scale (f32)."""
    bo, bi = block
    O, I = w.shape
    so, si = -(-O // bo), -(-I // bi)
    pad = torch.zeros(so * bo, si * bi)
    pad[:O, :I] = w
    blk = pad.reshape(so, bo, si, bi)
    amax = blk.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax)).float()
    q = (blk / scale[:, None, :, None]).reshape(so * bo, si * bi)[:O, :I].to(torch.float8_e4m3fn)
    full_scale = scale.repeat_interleave(bo, 0).repeat_interleave(bi, 1)[:O, :I]
    deq = q.float() * full_scale
    return q.contiguous(), scale.contiguous(), deq


# Linear weights the published FP8 checkpoints quantise (decoder layers only; not the router gate,
# norms, embeddings, lm_head)
EXPERT_RE = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")
FP8_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "q_a_proj.weight",
                "q_b_proj.weight", "kv_a_proj_with_mqa.weight", "kv_b_proj.weight",
                "gate_proj.weight", "up_proj.weight", "down_proj.weight")


def fp8_targets(st):
    return [k for k, t in st.items() if k.startswith("model.layers.") and k.endswith(FP8_SUFFIXES)
            and t.dim() == 2 and not k.endswith("mlp.gate.weight")]


def quantize_dir(model_dir, fx, block=None):
    """Rewrite a saved checkpoint in the published quantised format (FP8: with block, default the
    fixture's). Returns {param name in the loaded model: expected f32 tensor} for the quantised
    weights (per-expert checkpoint tensors under the fused parameter they are merged into)."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(model_dir, "model.safetensors")
    st = load_file(path)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    out, expect = {}, {}
    if fx["quant"] == "mxfp4":
        for k, t in st.items():
            if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
                # the parameter is [E, in, out] (x @ W); the blocks hold rows = out features
                rows = t.float().transpose(1, 2).contiguous()
                blocks, scales, deq = mxfp4_quantize(rows)
                out[k + "_blocks"] = blocks
                out[k + "_scales"] = scales
                expect[k] = deq.transpose(1, 2).contiguous()
            else:
                out[k] = t
        # as openai/gpt-oss-20b and -120b publish it
        cfg["quantization_config"] = {
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4"}
    else:
        bo, bi = block or fx["fp8_block"]
        targets = set(fp8_targets(st))
        experts = {}
        for k, t in st.items():
            if k in targets:
                q, s, deq = fp8_quantize(t.float(), (bo, bi))
                out[k] = q
                out[k[:-len("weight")] + "weight_scale_inv"] = s
                m = EXPERT_RE.match(k)
                if m:
                    experts.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = deq
                else:
                    expect[k] = deq
            else:
                out[k] = t
        for base, d in experts.items():   # transformers' fused layout: gate_up [E, 2I, H] (gate rows first), down [E, H, I]
            E = 1 + max(e for e, _ in d)
            expect[base + ".gate_up_proj"] = torch.stack([torch.cat([d[(e, "gate")], d[(e, "up")]]) for e in range(E)])
            expect[base + ".down_proj"] = torch.stack([d[(e, "down")] for e in range(E)])
        # as deepseek-ai/DeepSeek-V3 and Qwen/Qwen3-*-FP8 publish it (block [128, 128] there)
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": [bo, bi]}
    save_file(out, path, metadata={"format": "pt"})
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return expect


# ------------------------------------------------------------------------------------------ build / load
def build_and_save(fx, seed, model_dir):
    import transformers
    cfg_cls = getattr(transformers, fx["cfg_cls"])
    cls = getattr(transformers, fx["cls"])
    torch.manual_seed(seed)
    config = cfg_cls(**fx["cfg"])
    model = cls(config).eval()
    draw_weights(model, fx, seed)
    dt = DTYPES[fx["dtype"]]
    model.to(dt)
    for name, b in model.named_buffers():   # kept in float32 as transformers keeps them (and publishes)
        if name.endswith("e_score_correction_bias"):
            mod = model.get_submodule(name.rsplit(".", 1)[0])
            mod.e_score_correction_bias = mod.e_score_correction_bias.float()
    model.save_pretrained(model_dir)
    saved = {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    if fx.get("quant") == "fp8":
        shutil.copytree(model_dir, model_dir + ".plain")
    expect = quantize_dir(model_dir, fx) if fx.get("quant") else {}
    return saved, expect


def load(fx, model_dir, expect=None):
    """from_pretrained as the docstring says. An FP8 checkpoint whose blocks do not divide every
    weight (a partial last block, as DeepSeek-V3's kv_a_proj_with_mqa of 576 rows in 128-blocks has)
    is refused by transformers' CPU dequantiser (Fp8Dequantize derives the block from the scale grid
    and requires divisibility): then the reference model is the same class loaded from a copy of
    the directory holding this script's dequantised float32 weights and no quantization_config (the
    dequantisation itself is checked against transformers' on a block grid that divides, see
    fp8_format_check)."""
    import transformers
    if fx.get("quant") == "fp8":
        try:
            return _load(fx, model_dir)
        except RuntimeError as e:
            fx["_fp8_fallback"] = f"RuntimeError: {str(e).splitlines()[0]}"
        from safetensors.torch import load_file, save_file
        alt = model_dir + ".dequantised"
        shutil.rmtree(alt, ignore_errors=True)
        shutil.copytree(model_dir + ".plain", alt)
        st = load_file(os.path.join(alt, "model.safetensors"))
        deq = {}
        bo, bi = fx["fp8_block"]
        for k in fp8_targets(st):
            deq[k] = fp8_quantize(st[k].float(), fx["fp8_block"])[2]
            R, C = st[k].shape
            if (R % -(-R // bo) or C % -(-C // bi)) and "_fp8_first" not in fx:
                fx["_fp8_first"] = f"{k}: Weight shape ({R}, {C}) not divisible by scale grid ({-(-R // bo)}, {-(-C // bi)})"
        st.update(deq)
        save_file(st, os.path.join(alt, "model.safetensors"), metadata={"format": "pt"})
        return _load(dict(fx, quant=None), alt)
    return _load(fx, model_dir)


def fp8_format_check(fx, model_dir):
    """The same weights quantised with a block grid that divides every quantised weight (the gcd of
    their dims), loaded by transformers' own FP8 dequantiser: every dequantised tensor must equal
    this script's (fp8_quantize) exactly. Returns (block, number of tensors)."""
    from safetensors.torch import load_file
    div = model_dir + ".divisible"
    shutil.rmtree(div, ignore_errors=True)
    shutil.copytree(model_dir + ".plain", div)
    st = load_file(os.path.join(div, "model.safetensors"))
    ks = fp8_targets(st)
    bo = math.gcd(*[st[k].shape[0] for k in ks])
    bi = math.gcd(*[st[k].shape[1] for k in ks])
    expect = quantize_dir(div, fx, block=(bo, bi))
    model = _load(dict(fx, fp8_block=(bo, bi)), div)
    sd = model.state_dict()
    for k, v in expect.items():
        if not torch.equal(sd[k].float(), v):
            raise SystemExit(f"{fx['name']}: transformers' FP8 dequantisation of {k} (block {bo}x{bi}) differs from "
                             f"this script's by {(sd[k].float() - v).abs().max().item():.3g}")
    return (bo, bi), len(expect)


def _load(fx, model_dir):
    import transformers
    cls = getattr(transformers, fx["cls"])
    extra = {}
    if fx.get("moe"):
        extra["experts_implementation"] = "eager"
    if fx.get("quant") == "mxfp4":
        extra["quantization_config"] = transformers.Mxfp4Config(dequantize=True)
    elif fx.get("quant") == "fp8":
        extra["quantization_config"] = transformers.FineGrainedFP8Config(dequantize=True,
                                                                         weight_block_size=list(fx["fp8_block"]))
    model, info = cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True, **extra)
    model.eval()
    # the MXFP4 dequantiser leaves the experts in bfloat16 (convert_moe_packed_tensors' default dtype)
    # in an otherwise float32 model, and the bf16 x f32 matmul then fails: upcast them (exact)
    low = sorted({str(p.dtype) for p in model.parameters() if p.dtype != torch.float32})
    if low:
        fx["_upcast"] = low
        model.float()
    assert type(model).__name__ == fx["cls"], f"{fx['name']}: transformers made a {type(model).__name__}"
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(key), f"{fx['name']}: {key} {info.get(key)}"
    return model


def check_loaded(fx, model, saved, expect):
    """Every tensor of the loaded model equals what was saved (bf16/f16 upcast exactly), the
    quantised ones this script's dequantisation. Returns (number of tensors, number quantised)."""
    sd = model.state_dict()
    n = nq = 0
    for k, v in saved.items():
        if k not in sd:
            raise SystemExit(f"{fx['name']}: {k} is not in the loaded model")
        got = sd[k].float()
        want = expect.get(k, v)
        if not torch.equal(got, want):
            d = (got - want).abs().max().item()
            raise SystemExit(f"{fx['name']}: loaded {k} differs from the saved / dequantised tensor by {d:.3g}")
        n += 1
        nq += k in expect
    assert nq == len(expect), f"{fx['name']}: {len(expect) - nq} quantised tensors not checked"
    return n, nq


# ------------------------------------------------------------------------------------------ forward
def run_sequence(model, ids, layer_ids):
    """One sequence alone: features [n, len(ids)*H] (hidden_states[id + 1], checked against a hook
    on the layer), fp32 logits [n, V]."""
    captured = {}
    tm = text_model(model)
    hooks = [tm.layers[i].register_forward_hook(
        lambda mod, inp, out, i=i: captured.__setitem__(i, out[0] if isinstance(out, tuple) else out))
        for i in sorted(set(layer_ids))]
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids], dtype=torch.long), output_hidden_states=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    L = text_config(model.config).num_hidden_layers
    assert len(out.hidden_states) == L + 1, f"{len(out.hidden_states)} hidden states for {L} layers"
    feats = []
    for i in layer_ids:
        hs = out.hidden_states[i + 1][0]
        layer_out = captured[i][0]
        if i < L - 1:
            assert torch.equal(hs, layer_out), f"hidden_states[{i + 1}] is not layer {i}'s output"
        else:
            assert torch.equal(hs, tm.norm(layer_out)), f"hidden_states[{L}] is not model.norm of layer {i}'s output"
        feats.append(hs)
    return torch.cat(feats, -1).float(), out.logits[0].float()


def min_topk_gap(logits, k):
    vals = torch.topk(logits, k + 1, dim=-1).values
    return (vals[:, :-1] - vals[:, 1:]).min().item()


def routers(model):
    """(layer index, router module) of every sparse layer."""
    out = []
    for i, layer in enumerate(text_model(model).layers):
        r = getattr(layer.mlp, "router", None) or (getattr(layer.mlp, "gate", None)
                                                   if hasattr(layer.mlp, "experts") else None)
        if r is not None:
            out.append((i, r))
    return out


def routing_gaps(kind, r, x, idx):
    """Per token: the smallest decisive gap of the router on input x [N, H]; checks that the router's
    own choice idx [N, k] is what the scores say."""
    x = x.reshape(-1, x.shape[-1])
    if kind == "gpt_oss":   # top-k of the logits (softmax over those k afterwards)
        logits = torch.nn.functional.linear(x, r.weight, r.bias)
        k = r.top_k
        top = torch.topk(logits, k + 1, dim=-1)
        assert torch.equal(top.indices[:, :k].sort(-1).values, idx.sort(-1).values), "router top-k"
        return top.values[:, k - 1] - top.values[:, k]
    # DeepSeek-V3 / GLM-4.5: sigmoid scores + bias, groups by the sum of their 2 best, top groups, top k
    logits = torch.nn.functional.linear(x.float(), r.weight.float())
    s = logits.sigmoid() + r.e_score_correction_bias
    G, E, k, tg = r.num_group, r.num_experts, r.top_k, r.topk_group
    gs = s.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
    gap = torch.full((s.shape[0],), float("inf"))
    if tg < G:
        gt = torch.topk(gs, tg + 1, dim=-1).values
        gap = torch.minimum(gap, gt[:, tg - 1] - gt[:, tg])
    gsel = torch.topk(gs, tg, dim=-1).indices
    mask = torch.zeros_like(gs).scatter_(1, gsel, 1).bool()
    masked = s.masked_fill(~mask.repeat_interleave(E // G, dim=1), float("-inf"))
    top = torch.topk(masked, min(k + 1, E), dim=-1)
    assert torch.equal(top.indices[:, :k].sort(-1).values, idx.sort(-1).values), "router top-k"
    if k < tg * E // G:
        gap = torch.minimum(gap, top.values[:, k - 1] - top.values[:, k])
    return gap


def router_stats(fx, model, seqs):
    """{layer: (smallest gap over every token of seqs, tokens per expert)}; empty for dense models."""
    if not fx.get("moe"):
        return {}
    got, hooks = {}, []
    for i, r in routers(model):
        def hook(mod, inp, out, i=i):
            idx = out[2] if len(out) == 3 else out[1]
            idx = idx.reshape(-1, idx.shape[-1])
            gap = routing_gaps(fx["moe"], mod, inp[0], idx)
            E = mod.num_experts
            cnt = torch.bincount(idx.flatten(), minlength=E)
            g, c = got.get(i, (float("inf"), 0))
            got[i] = (min(g, gap.min().item()), c + cnt)
        hooks.append(r.register_forward_hook(hook))
    try:
        with torch.no_grad():
            for s in seqs:
                model(input_ids=torch.tensor([s], dtype=torch.long), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    assert got, f"{fx['name']}: no router ran"
    return {i: (g, c.tolist()) for i, (g, c) in sorted(got.items())}


def routing_ok(stats):
    if not stats:
        return True, None
    gap = min(g for g, _ in stats.values())
    return gap >= MIN_ROUTER_GAP and all(min(c) > 0 for _, c in stats.values()), gap


def greedy(model, prompt, gen_len):
    """generate() greedily, eos disabled; returns (continuation, per-step top-2 gaps). Checks the
    cached decode against the argmax chain of one full forward without cache."""
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=gen_len,
                             min_new_tokens=gen_len, output_logits=True, return_dict_in_generate=True,
                             pad_token_id=0, eos_token_id=None)
    seq = out.sequences[0].tolist()
    assert seq[:len(prompt)] == prompt and len(seq) == len(prompt) + gen_len, "generate changed the prompt or length"
    cont = seq[len(prompt):]
    gaps = []
    for step, lg in enumerate(out.logits):
        top = torch.topk(lg[0].float(), 2)
        assert top.indices[0].item() == cont[step], "generate did not take the argmax"
        gaps.append((top.values[0] - top.values[1]).item())
    with torch.no_grad():
        full = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0]
    chain = full.argmax(dim=-1).tolist()[len(prompt) - 1:-1]
    assert chain == cont, "the cached generate and the full forward's argmax chain differ"
    return cont, gaps


# ------------------------------------------------------------------------------------------ feature probes
def clamp_share(model, seqs):
    """gpt-oss: the share of gate values above swiglu_limit and of up values outside +-limit, over the
    experts' inputs of the sequences."""
    stats = []
    hooks = []
    for _, layer in enumerate(text_model(model).layers):
        ex = layer.mlp.experts

        def hook(mod, inp, out):
            x, idx = inp[0], inp[1]
            for e in range(mod.num_experts):
                tok = (idx == e).any(-1)
                if tok.any():
                    gu = x[tok] @ mod.gate_up_proj[e] + mod.gate_up_proj_bias[e]
                    gate, up = gu[..., ::2], gu[..., 1::2]
                    stats.append(((gate > mod.limit).sum().item(), (up.abs() > mod.limit).sum().item(), gate.numel()))
        hooks.append(ex.register_forward_hook(hook))
    try:
        with torch.no_grad():
            for s in seqs:
                model(input_ids=torch.tensor([s], dtype=torch.long), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    g = sum(a for a, _, _ in stats)
    u = sum(b for _, b, _ in stats)
    n = sum(c for _, _, c in stats)
    return g, u, n


def softcap_effect(model, seqs):
    """max |capped - uncapped| logit over the sequences (0 without a soft-cap)."""
    cap = getattr(text_config(model.config), "final_logit_softcapping", None)
    if not cap:
        return 0.0
    m = 0.0
    with torch.no_grad():
        for s in seqs:
            out = model(input_ids=torch.tensor([s]), output_hidden_states=True, use_cache=False)
            raw = model.lm_head(out.hidden_states[-1])[0].float()
            capped = torch.tanh(raw / cap) * cap
            assert torch.allclose(capped, out.logits[0].float(), atol=1e-5), "the logits are not the capped lm_head"
            m = max(m, (raw - capped).abs().max().item())
    return m


# ------------------------------------------------------------------------------------------ fixture
def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def save_st(tensors, path, metadata):
    from safetensors import safe_open
    from safetensors.torch import save_file
    if os.path.exists(path):   # keep the bytes of an unchanged file (metadata order varies)
        with safe_open(path, "pt") as f:
            same = f.metadata() == metadata and set(f.keys()) == set(tensors) and all(
                f.get_tensor(k).dtype == v.dtype and torch.equal(f.get_tensor(k), v) for k, v in tensors.items())
        if same:
            return
    save_file(tensors, path, metadata=metadata)


def make_fixture(fx, out_dir, tmp, lines):
    import transformers
    name = fx["name"]
    t0 = time.time()
    cfg_probe = getattr(transformers, fx["cfg_cls"])(**fx["cfg"])
    tc = text_config(cfg_probe)
    V, L = tc.vocab_size, tc.num_hidden_layers
    rng = random.Random("hf-" + name)
    seqs = [[rng.randrange(V) for _ in range(n)] for n in fx["seqs"]]
    prng = random.Random("hf-decode-" + name)
    prompts = [[prng.randrange(V) for _ in range(n)] for n in fx["prompts"]]
    layer_ids = fx["layer_ids"]
    assert all(0 <= i < L for i in layer_ids)
    tried = []
    for seed in range(1, SEEDS + 1):
        model_dir = os.path.join(tmp, f"{name}_seed{seed}")
        saved, expect = build_and_save(fx, seed, model_dir)
        model = load(fx, model_dir)
        n_checked, n_quant = check_loaded(fx, model, saved, expect)
        results = [run_sequence(model, s, layer_ids) for s in seqs]
        logits = torch.cat([r[1] for r in results])
        gap = min_topk_gap(logits, K)
        if gap < MIN_GAP:
            tried.append(f"{seed}: top-{K + 1} gap {gap:.2g}")
            shutil.rmtree(model_dir)
            continue
        rstats = router_stats(fx, model, seqs)
        routed, rgap = routing_ok(rstats)
        if not routed:
            tried.append(f"{seed}: router gap {rgap:.2g} or an unused expert")
            shutil.rmtree(model_dir)
            continue
        model.generation_config.eos_token_id = None
        dec = [greedy(model, p, GEN_LEN) for p in prompts]
        dgap = min(min(g) for _, g in dec)
        drouted, drgap = routing_ok(router_stats(fx, model, [p + c for p, (c, _) in zip(prompts, dec)]))
        distinct = min(len(set(c)) for c, _ in dec)
        if dgap >= MIN_GAP and drouted and distinct >= MIN_DISTINCT:
            break
        tried.append(f"{seed}: decode top-2 gap {dgap:.2g}, {distinct} distinct tokens"
                     + (f", router gap {drgap:.2g}" if drgap is not None else ""))
        shutil.rmtree(model_dir)
    else:
        raise SystemExit(f"{name}: no seed in 1..{SEEDS} passes the gap checks")

    fp8_check = fp8_format_check(fx, model_dir) if fx.get("quant") == "fp8" else None

    # ---- write
    dest = os.path.join(out_dir, name)
    if os.path.exists(dest):
        shutil.rmtree(dest)
    shutil.copytree(model_dir, dest)
    features = torch.cat([r[0] for r in results]).contiguous()
    topk = torch.topk(logits, K, dim=-1)
    lse = torch.logsumexp(logits, dim=-1)
    cu = [0]
    for s in seqs:
        cu.append(cu[-1] + len(s))
    tensors = {
        "tokens": torch.tensor([t for s in seqs for t in s], dtype=torch.int32),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        "layer_ids": torch.tensor(layer_ids, dtype=torch.int32),
        "features": features,
        "topk_idx": topk.indices.to(torch.int32).contiguous(),
        "topk_val": topk.values.contiguous(),
        "lse": lse.contiguous(),
        "logits_last": torch.stack([r[1][-1] for r in results]).contiguous(),
    }
    assert features.shape == (cu[-1], len(layer_ids) * tc.hidden_size)
    ref = os.path.join(out_dir, f"{name}.ref.safetensors")
    save_st(tensors, ref, {"format": "pt", "made_by": "tests/reference/make_hf_fixtures.py",
                           "torch": torch.__version__, "transformers": transformers.__version__})
    tok_path = os.path.join(out_dir, f"{name}.tokens.json")
    with open(tok_path, "w") as f:
        json.dump({"sequences": seqs}, f)
        f.write("\n")
    with open(os.path.join(out_dir, f"{name}.args"), "w") as f:
        f.write(f"# hf fixture {name}, made by tests/reference/make_hf_fixtures.py (bash-sourceable)\n"
                f"# {fx['covers']}\n"
                f"# dflash_tool teacher-dump $D/hf/$model $D/hf/$tokens OUT --layers $layer_ids --topk $topk\n"
                f"layer_ids={','.join(str(i) for i in layer_ids)}\n"
                f"topk={K}\n"
                f"tokens={name}.tokens.json\n"
                f"reference={name}.ref.safetensors\n"
                f"model={name}\n"
                f"class={fx['cls']}\n"
                f"dtype={fx['dtype']}\n"
                f"quant={fx.get('quant', 'none')}\n"
                f"tol={TOL:g}\n")
    doc = {"name": name, "model": name, "class": fx["cls"], "gen_len": GEN_LEN, "prompts": prompts,
           "continuations": [c for c, _ in dec], "min_top2_gap": dgap,
           **({"min_router_gap": drgap} if fx.get("moe") else {}),
           "made_by": "tests/reference/make_hf_fixtures.py", "torch": torch.__version__,
           "transformers": transformers.__version__}
    with open(os.path.join(out_dir, f"{name}.decode.json"), "w") as f:
        json.dump(doc, f)
        f.write("\n")

    # ---- log
    cfgj = json.load(open(os.path.join(dest, "config.json")))
    tcj = cfgj.get("text_config", cfgj)
    log(lines, f"{name}: {fx['cls']}, {fx['dtype']} weights{', ' + fx['quant'] if fx.get('quant') else ''}; "
               f"seed {seed} ({len(tried)} rejected)")
    log(lines, f"  covers: {fx['covers']}")
    keys = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "sliding_window", "layer_types", "query_pre_attn_scalar",
            "final_logit_softcapping", "rope_parameters", "rope_interleave", "attention_bias", "use_qk_norm",
            "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
            "moe_intermediate_size", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "n_group",
            "topk_group", "routed_scaling_factor", "norm_topk_prob", "n_shared_experts", "first_k_dense_replace",
            "swiglu_limit", "swiglu_alpha", "attention_k_eq_v", "per_layer_config", "tie_word_embeddings",
            "rms_norm_eps", "quantization_config"]
    hl = {k: (cfgj if k in ("quantization_config", "tie_word_embeddings") and k in cfgj else tcj).get(k)
          for k in keys if k in tcj or k in cfgj}
    log(lines, f"  config.json: {json.dumps(hl, separators=(',', ':'))}")
    log(lines, f"  loaded: {n_checked} tensors equal to the saved ones" +
               (f" ({n_quant} quantised ones equal to this script's dequantisation)" if n_quant else ""))
    if fx.get("quant"):
        quant_log(lines, fx, dest)
    if fp8_check:
        if fx.get("_fp8_fallback"):
            log(lines, f"  transformers cannot load this FP8 directory on the CPU: with dequantize=True, "
                       f"{fx['_fp8_fallback']} (Fp8Dequantize raised ValueError for every weight with a partial "
                       f"block, e.g. {fx.get('_fp8_first')}); "
                       f"the reference model is {fx['cls']}.from_pretrained of a copy holding this script's "
                       f"dequantised weights (float32, float(e4m3) * weight_scale_inv per block) without "
                       f"quantization_config")
        else:
            log(lines, "  loaded by transformers' FP8 dequantiser (FineGrainedFP8Config(dequantize=True))")
        log(lines, f"  format check: the same weights with block {list(fp8_check[0])} (dividing every quantised "
                   f"weight) loaded by transformers' FP8 dequantiser: {fp8_check[1]} tensors equal to this "
                   f"script's dequantisation")
    if fx.get("_upcast"):
        log(lines, f"  from_pretrained(dtype=float32) left parameters in {fx['_upcast']} (the dequantised experts):"
                   f" upcast to float32 with model.float() (exact)")
    log(lines, f"  layer_ids {layer_ids} (L={L}), k {K}, sequences {[len(s) for s in seqs]} (T={cu[-1]})")
    log(lines, f"  max |logit| {logits.abs().max().item():.4f}, lse in [{lse.min().item():.4f}, "
               f"{lse.max().item():.4f}], max |feature| {features.abs().max().item():.4f}")
    log(lines, f"  min gap between consecutive top-{K + 1} logits: {gap:.4g} (>= {MIN_GAP:g})")
    for i, (g, c) in rstats.items():
        log(lines, f"  layer {i} router: min decisive gap {g:.4g} (>= {MIN_ROUTER_GAP:g}), tokens per expert {c}")
    log(lines, f"  decode: prompts {[len(p) for p in prompts]} x {GEN_LEN} generated ({[len(set(c)) for c, _ in dec]}"
               f" distinct tokens), min top-2 gap {dgap:.4g}"
               + (f", min router gap {drgap:.4g}" if drgap is not None else "") + "; generate == full-forward argmax")
    sc = softcap_effect(model, seqs)
    if sc:
        log(lines, f"  final soft-cap {text_config(model.config).final_logit_softcapping}: max |raw - capped| logit "
                   f"{sc:.4f} (the reference logits, top-k and lse are after the cap)")
    if fx["cls"].startswith("GptOss"):
        g, u, n = clamp_share(model, seqs)
        log(lines, f"  swiglu clamp: {g} of {n} routed gate values > limit, {u} up values outside +-limit")
        assert g > 0 and u > 0, f"{name}: the swiglu clamp never acts"
    size = dir_bytes(dest)
    log(lines, f"  {name}/: {sorted(os.listdir(dest))}, {size} bytes")
    print(f"  ({time.time() - t0:.1f} s)", flush=True)   # not in the log: it would change on every run
    assert size < MAX_DIR_BYTES, f"{dest} is too big for a committed fixture"
    if tried:
        log(lines, f"  rejected seeds: {'; '.join(tried[:6])}{' ...' if len(tried) > 6 else ''}")


def quant_log(lines, fx, dest):
    from safetensors import safe_open
    with safe_open(os.path.join(dest, "model.safetensors"), "pt") as f:
        for k in sorted(f.keys()):
            if ("experts" in k and ("_blocks" in k or "_scales" in k or "_bias" in k)) or "weight_scale_inv" in k \
                    or (fx["quant"] == "fp8" and f.get_slice(k).get_dtype() == "F8_E4M3"):
                if ".layers.0." in k or ".layers.1.mlp.experts.0." in k or (".layers.1." in k and "experts" in k
                                                                              and fx["quant"] == "mxfp4"):
                    t = f.get_tensor(k)
                    log(lines, f"    {k}: {str(t.dtype).replace('torch.', '')} {list(t.shape)}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "data", "hf"), help="output folder (default tests/reference/data/hf)")
    ap.add_argument("--only", default=None, help="make only these fixtures (comma-separated; the log is not written)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import safetensors
    import transformers
    torch.manual_seed(0)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    lines = []
    t0 = time.time()
    log(lines, "make_hf_fixtures.py: transformers references on checkpoints written by save_pretrained")
    log(lines, f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__},"
               f" safetensors {safetensors.__version__}")
    log(lines, f"min gaps: top-{K + 1} logits and decode top-2 {MIN_GAP:g}, router {MIN_ROUTER_GAP:g}; gen_len {GEN_LEN};"
               f" C tolerance {TOL:g}")
    only = a.only.split(",") if a.only else None
    with tempfile.TemporaryDirectory(prefix="dflash_hf_fixtures_") as tmp:
        for fx in FIXTURES:
            if only and fx["name"] not in only:
                continue
            make_fixture(fx, a.out, tmp, lines)
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(a.out) for f in fs
                if f != "hf_fixtures.log")
    log(lines, f"all fixtures: {total} bytes under data/hf (the log aside)")
    print(f"({time.time() - t0:.0f} s)", flush=True)
    if not only:
        with open(os.path.join(a.out, "hf_fixtures.log"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
