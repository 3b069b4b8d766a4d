// tool_make_target.c: `dflash_tool make-target OUT_DIR --arch NAME ...`
//
// NAME is an architecture table's name in the teacher's registry (target_registry.c), the table's
// text-only class, or NAME_vl for its multimodal class: qwen3|llama|qwen3_5|qwen3_5_vl|qwen3_moe|
// qwen3_5_moe|qwen3_5_moe_vl, written from this file's own tensor list (mt_build_list, below), and
// qwen2|mistral|gemma3|gemma4|gpt_oss|glm4_moe|deepseek_v3 (text-only classes), written from the
// teacher's (see "The other families" below); a new table of an existing family is one without a
// change here, and so is a new family whose table has a to_json.
//
// Writes a random-weight target model directory in the exact Hugging Face layout (SPEC §2), which
// transformers loads with AutoModelForCausalLM.from_pretrained: config.json, and model.safetensors
// or N shards model-0000k-of-0000N.safetensors + model.safetensors.index.json. It is what the tests
// and the reference fixtures (tests/reference/make_teacher_fixtures.py) run the teacher on.
//
// Weights are a pure function of the arguments: tensor number i (in the order written) draws from
// the Philox stream rng_init(seed, 0, i). The scales are chosen so every part of the forward
// matters and the logits are well separated (transformers' initializer_range of 0.02 would leave
// the MLP of a 64-wide model contributing ~1e-3 of the residual stream, and near-equal logits
// would make the top-k order fragile):
//   linear weights [out, in]       N(0, 1/in)        (each projection keeps the scale of its input)
//   embed_tokens, lm_head [V, H]   N(0, 16/H)        (logits of std ~4 behind the final RMSNorm)
//   RMSNorm weights (all of them)  1 + 0.1 N(0, 1)   (so a missing or misplaced norm shows)
// and for the Qwen3.5 hybrid (SPEC §2.1; qwen3_5 is Qwen3_5ForCausalLM, qwen3_5_vl the
// Qwen3_5ForConditionalGeneration layout with text tensors under model.language_model.):
//   zero-centred RMSNorms          0.1 N(0, 1)       (every norm but the gated one: the forward
//                                                     multiplies by 1 + w)
//   linear_attn.norm (gated)       1 + 0.1 N(0, 1)   (multiplies by w)
//   linear_attn.conv1d [C, 1, K]   N(0, 1/K)         (the linear rule, fan-in K)
//   linear_attn.A_log [Hv]         ln 0.3 + 0.4 N(0, 1)
//   linear_attn.dt_bias [Hv]       -0.5 + 0.5 N(0, 1)
//     so the per-token decay exp(-exp(A_log) * softplus(a + dt_bias)), a ~ N(0, 1), lies mostly
//     in [0.6, 0.98]: the recurrent state carries over tens of tokens
//   model.visual.*, mtp.* (qwen3_5_vl only; never read by the teacher): linear rule for weights,
//     0.02 N(0, 1) for biases, 1 + 0.1 N(0, 1) for LayerNorm weights
// and for the mixture-of-experts targets (SPEC §2.2; qwen3_moe is Qwen3MoeForCausalLM, qwen3_5_moe
// Qwen3_5MoeForCausalLM, qwen3_5_moe_vl the Qwen3_5MoeForConditionalGeneration wrapper):
//   mlp.gate.weight [E, H] (router) N(0, 4/H)        (router logits of std ~2 behind the RMSNorm:
//                                                     the softmax is decisive, the k-th and (k+1)-th
//                                                     probabilities typically 1e-2 or more apart,
//                                                     and the top k weights still all count)
//   experts (every layout)         N(0, 1/fan_in)    (the linear rule per expert: fan-in H for
//                                                     gate/up, I for down; each expert an MLP of the
//                                                     dense one's scale, so every expert matters)
//   shared_expert.*, shared_expert_gate [1, H]  the linear rule (the gate's sigmoid ~ 0.3..0.7)
// The experts are written per expert (mlp.experts.{e}.{gate,up,down}_proj.weight, as Qwen3-MoE
// is published) or fused (mlp.experts.gate_up_proj [E, 2I, H], gate rows then up rows per expert,
// and mlp.experts.down_proj [E, H, I], as Qwen3.5-MoE is published and transformers 5 holds them):
// both layouts hold the same values (the fused tensors are drawn block by block from the streams
// the per-expert tensors use), so the two describe one model.
// drawn in fp32 and rounded to --dtype (round to nearest even).
//
// The other families (every table but those of Qwen3, Llama and Qwen3.5): config.json is the
// table's to_json of the config the options say (target_config_fresh: the family's fixed choices
// fill the rest: Qwen2's q/k/v biases; Gemma 3's query_pre_attn_scalar = head_dim, no soft-cap,
// sliding layers' RoPE base 1e4; Gemma 4's full layers with heads of 2 x head_dim, half the kv
// heads, k_eq_v, proportional RoPE on a quarter, soft-cap 30; gpt-oss's q/k/v/o biases, sinks,
// swiglu_limit 7, YaRN over 4096 positions; GLM-4.5's q/k/v biases, RoPE on half the head;
// DeepSeek-V3's latent dims from head_dim in its proportions, YaRN over 4096 positions; the
// sigmoid MoE's one shared expert, scaling 2.5, first layer dense; each to_json's comment says
// which), read back by target_config_parse, which must give the same text again and what the
// options said (a family that cannot, e.g. --sliding-window without sliding layers, is refused
// naming the option). The tensors are the teacher's own list for that config (target_tensor_names:
// the names, the order, the shapes it checks at load), each drawn by its name:
//   linear weights (2-3 dims)      N(0, 1/fan_in)    (fan_in: the last dim as the teacher holds it;
//                                                     experts per expert)
//   embed_tokens, lm_head          N(0, 16/H)
//   *norm* weights                 1 + 0.1 N(0, 1)   (0.1 N(0, 1) where the family's norms are
//                                                     zero-centred, x (1 + w): Gemma 3)
//   biases (*.bias, *_bias)        0.1 N(0, 1)
//   mlp.gate.weight, mlp.router.weight (routers)  N(0, 4/H)
//   self_attn.sinks                N(0, 1)
//   layer_scalar                   1
//   e_score_correction_bias        0.5 N(0, 1), stored F32 whatever --dtype (transformers keeps it so)
// in the layout transformers saves: DeepSeek-V3's and GLM-4.5's experts per expert (--experts-layout
// fused: gate_up_proj [E, 2I, H] + down_proj [E, H, I], which the teacher and transformers read
// too), gpt-oss's as its parameters are shaped, gate_up_proj [E, H, 2I] and down_proj [E, I, H]
// (the teacher's transposed entries). Tensor i of the list draws from stream i, as above.
// tests/reference/check_make_target_families.py checks them against transformers (its log:
// tests/reference/data/make_target_families.log); tests/cli/test_make_target_families.sh runs them.
//
// The directory is built under OUT_DIR.tmp.<pid> and renamed to OUT_DIR at the end, so a failed
// run leaves nothing behind. OUT_DIR must not exist yet.
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/rng.h"
#include "common/data/safetensors.h"
#include "teacher/target.h"
#include "teacher/target_config.h"
#include "teacher/target_registry.h"
#include "tools/tools.h"

static void make_target_usage(FILE *f) {
    fprintf(f,
            "usage: dflash_tool make-target OUT_DIR --arch ARCH --layers L --hidden H\n"
            "                               --heads NQ --kv-heads NKV --vocab V [--head-dim D] [--intermediate I]\n"
            "                               [--seed S] [--tie] [--rope-theta X] [--rope-llama3 FACTOR]\n"
            "                               [--rope-original-max P0] [--dtype bf16|f16|f32] [--shards N]\n"
            "                               [--max-positions P] [--eps E]\n"
            "                               qwen3_5*: [--lin-k-heads HK] [--lin-v-heads HV] [--lin-k-dim DK]\n"
            "                               [--lin-v-dim DV] [--conv-kernel K] [--full-interval N | --layer-types LIST]\n"
            "                               [--partial-rotary F]\n"
            "                               MoE: [--experts E] [--experts-per-tok K] [--moe-intermediate I]\n"
            "                               [--experts-layout per-expert|fused] qwen3_moe: [--norm-topk]\n"
            "                               [--sparse-step N] [--mlp-only LIST] qwen3_5_moe*: [--shared-intermediate IS]\n"
            "                               sliding windows: [--sliding-window W] [--layer-types LIST]\n"
            "\n"
            "Write a random-weight model directory in the Hugging Face layout (config.json + model.safetensors,\n"
            "or N shards + model.safetensors.index.json):\n"
            "  qwen3       Qwen3ForCausalLM            llama       LlamaForCausalLM\n"
            "  qwen3_5     Qwen3_5ForCausalLM (the Qwen3.5/3.6 hybrid, text only: tensors model.*)\n"
            "  qwen3_5_vl  Qwen3_5ForConditionalGeneration (the multimodal wrapper: text tensors under\n"
            "              model.language_model., a small model.visual.* tower and mtp.* tensors besides)\n"
            "  qwen3_moe   Qwen3MoeForCausalLM (Qwen3 attention, mixture-of-experts MLPs)\n"
            "  qwen3_5_moe Qwen3_5MoeForCausalLM (the hybrid with a sparse MLP + shared expert on every layer)\n"
            "  qwen3_5_moe_vl  Qwen3_5MoeForConditionalGeneration (its multimodal wrapper, as qwen3_5_vl)\n"
            "  qwen2       Qwen2ForCausalLM (q/k/v biases)\n"
            "  mistral     MistralForCausalLM (one sliding window on every layer, or none)\n"
            "  gemma3      Gemma3ForCausalLM (sandwich (1 + w) norms, GeGLU, query_pre_attn_scalar = head_dim)\n"
            "  gemma4      Gemma4ForCausalLM (the dense 31B's layout: full layers with 2 x head_dim heads, half\n"
            "              the kv heads and v = k; proportional RoPE; layer scalars; soft-cap 30)\n"
            "  gpt_oss     GptOssForCausalLM (biases, sinks, experts of --moe-intermediate, YaRN)\n"
            "  glm4_moe    Glm4MoeForCausalLM (q/k/v biases, RoPE on half the head, sigmoid-routed experts +\n"
            "              a shared expert, the first layer dense)\n"
            "  deepseek_v3 DeepseekV3ForCausalLM (latent attention with dims from --head-dim: rope D/3, nope and v\n"
            "              the rest, kv_lora 4 nope, q_lora 12 nope; --kv-heads = --heads; grouped sigmoid routing\n"
            "              + a shared expert, the first layer dense; YaRN)\n"
            "  (gpt_oss / deepseek_v3: YaRN over 4096 positions by --max-positions / 4096, as published with\n"
            "   131072 / 163840; plain RoPE up to 4096)\n"
            "\n"
            "  --head-dim D          default H / NQ\n"
            "  --intermediate I      MLP width, default 3*H (the dense layers' for the MoE targets that have them)\n"
            "  --seed S              weights are a function of the arguments and S (default 0)\n"
            "  --tie                 tie_word_embeddings: no lm_head.weight, the embedding serves\n"
            "  --rope-theta X        default 10000 (the family's default for the others: gemma 1e6, gpt_oss 150000)\n"
            "  --rope-llama3 FACTOR  llama3 RoPE scaling (low_freq_factor 1, high_freq_factor 4; not qwen3_5*,\n"
            "                        gpt_oss, deepseek_v3)\n"
            "  --rope-original-max P0  its original_max_position_embeddings (default 8192)\n"
            "  --dtype               weight dtype (default bf16)\n"
            "  --shards N            split the weights into N files (default 1)\n"
            "  --max-positions P     max_position_embeddings (default 32768)\n"
            "  --eps E               rms_norm_eps (default 1e-6)\n"
            "qwen3_5 / qwen3_5_vl (Gated DeltaNet layers and gated full attention):\n"
            "  --lin-k-heads HK      linear_num_key_heads (default NKV)\n"
            "  --lin-v-heads HV      linear_num_value_heads, a multiple of HK (default NQ)\n"
            "  --lin-k-dim DK        linear_key_head_dim (default D)\n"
            "  --lin-v-dim DV        linear_value_head_dim (default D)\n"
            "  --conv-kernel K       linear_conv_kernel_dim (default 4)\n"
            "  --full-interval N     every N-th layer is full attention (full_attention_interval; default 4)\n"
            "  --layer-types LIST    explicit layer_types, L entries of linear|full: linear,linear,full,...\n"
            "  --partial-rotary F    partial_rotary_factor (default 0.25): RoPE on int(D*F) dims, even\n"
            "the mixture-of-experts targets (qwen3_moe, qwen3_5_moe*, gpt_oss, glm4_moe, deepseek_v3):\n"
            "  --experts E           num_experts (default 8)\n"
            "  --experts-per-tok K   num_experts_per_tok, <= E (default 2)\n"
            "  --moe-intermediate I  moe_intermediate_size, each expert's width (default H)\n"
            "  --experts-layout L    per-expert: mlp.experts.{e}.{gate,up,down}_proj.weight (qwen3_moe's, glm4_moe's\n"
            "                        and deepseek_v3's default, as published and saved); fused: mlp.experts.gate_up_proj\n"
            "                        [E, 2I, H] + down_proj [E, H, I] (qwen3_5_moe*'s default, as published); the same\n"
            "                        values either way for the qwen ones (gpt_oss: its one layout)\n"
            "  --norm-topk           qwen3_moe: norm_topk_prob (renormalise the top-k weights; qwen3_5_moe always does)\n"
            "  --sparse-step N       qwen3_moe: decoder_sparse_step: layer i sparse when (i+1) %% N == 0 (default 1)\n"
            "  --mlp-only LIST       qwen3_moe: mlp_only_layers, dense layers: 0,3,...\n"
            "  --shared-intermediate IS  qwen3_5_moe*: shared_expert_intermediate_size (default I)\n"
            "  (--intermediate is the dense layers' width: qwen3_moe, glm4_moe, deepseek_v3)\n"
            "qwen2 / mistral / gemma3 / gemma4 / gpt_oss (sliding-window attention; default: none):\n"
            "  --sliding-window W    the sliding layers' window (sliding_window); alone: every layer sliding\n"
            "                        (gemma4: the last layer is full whatever)\n"
            "  --layer-types LIST    L entries of full|sliding: full,sliding,... (not mistral: all or none)\n");
}

// ---------------------------------------------------------------- the tensor list

typedef enum {
    MT_LINEAR, // N(0, 1/fan_in), fan_in = the product of the dims after the first
    MT_VOCAB,  // N(0, 16/H)
    MT_NORM,   // 1 + 0.1 N(0, 1)
    MT_NORM0,  // 0.1 N(0, 1): a zero-centred RMSNorm (Qwen3.5: x * rsqrt(..) * (1 + w))
    MT_A_LOG,  // ln 0.3 + 0.4 N(0, 1)
    MT_DT_BIAS, // -0.5 + 0.5 N(0, 1)
    MT_BIAS,   // 0.02 N(0, 1)
    MT_ROUTER, // N(0, 4/H): a MoE router
    // the families written from the teacher's tensor list (mt_teacher_list)
    MT_BIAS1,  // 0.1 N(0, 1): attention, router and expert biases
    MT_SINK,   // N(0, 1): attention sinks (gpt-oss)
    MT_ONE,    // 1: layer_scalar (Gemma 4)
    MT_SCORE,  // 0.5 N(0, 1): e_score_correction_bias (DeepSeek-V3, GLM-4.5)
} mt_kind;

#define MT_MAX_DIMS 5

typedef struct {
    char name[128];
    int ndim;
    int64_t shape[MT_MAX_DIMS];
    mt_kind kind;
    int shard; // 0-based file index
    uint32_t rng_id; // the Philox stream: rng_init(seed, 0, rng_id) (the tensor's place in the list, but for
                     // the experts' layouts, which number every expert's gate, up, down alike)
    int64_t fan_in;  // MT_LINEAR: 0 = the product of the dims after the first
    // blk_n > 0: drawn in blk_n equal blocks of the leading elements, block b from the stream
    // rng_id + (b / blk_per) * blk_stride + b % blk_per (the fused experts: the per-expert streams)
    int blk_n, blk_per, blk_stride;
    int f32_file; // stored in F32 whatever --dtype says (transformers keeps it in fp32: e_score_correction_bias)
} mt_tensor;

typedef struct {
    int n, cap;
    mt_tensor *t;
    uint32_t next_id; // the next tensor's rng_id
} mt_list;

// mt_add_nd: tensor `name` of ndim dims (shape[0..ndim)).
static void mt_add_nd(mt_list *l, mt_kind kind, int ndim, const int64_t *shape, const char *name) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
    }
    mt_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->ndim = ndim;
    t->rng_id = l->next_id++;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
}

// mt_add: "{prefix}layers.{layer}.{name}", or `name` itself when layer < 0; cols 0 = a vector.
static void mt_add(mt_list *l, mt_kind kind, int64_t rows, int64_t cols, const char *prefix, int64_t layer,
                   const char *name) {
    char full[128];
    if (layer < 0) snprintf(full, sizeof full, "%s", name);
    else snprintf(full, sizeof full, "%slayers.%lld.%s", prefix, (long long)layer, name);
    int64_t shape[2] = {rows, cols};
    mt_add_nd(l, kind, cols > 0 ? 2 : 1, shape, full);
}

// mt_add_linear_attn: a Gated DeltaNet layer's tensors (transformers' Qwen3_5GatedDeltaNet).
static void mt_add_linear_attn(mt_list *l, const target_config *c, const char *p, int64_t i) {
    int64_t H = c->hidden, kd = c->lin_k_heads * c->lin_k_dim, vd = c->lin_v_heads * c->lin_v_dim;
    int64_t conv = 2 * kd + vd;
    mt_add(l, MT_LINEAR, conv, H, p, i, "linear_attn.in_proj_qkv.weight");
    mt_add(l, MT_LINEAR, vd, H, p, i, "linear_attn.in_proj_z.weight");
    mt_add(l, MT_LINEAR, c->lin_v_heads, H, p, i, "linear_attn.in_proj_b.weight");
    mt_add(l, MT_LINEAR, c->lin_v_heads, H, p, i, "linear_attn.in_proj_a.weight");
    char name[128];
    snprintf(name, sizeof name, "%slayers.%lld.linear_attn.conv1d.weight", p, (long long)i);
    int64_t conv_shape[3] = {conv, 1, c->lin_conv_kernel};
    mt_add_nd(l, MT_LINEAR, 3, conv_shape, name); // fan-in K: N(0, 1/K)
    mt_add(l, MT_DT_BIAS, c->lin_v_heads, 0, p, i, "linear_attn.dt_bias");
    mt_add(l, MT_A_LOG, c->lin_v_heads, 0, p, i, "linear_attn.A_log");
    mt_add(l, MT_NORM, c->lin_v_dim, 0, p, i, "linear_attn.norm.weight"); // gated norm: w, not 1 + w
    mt_add(l, MT_LINEAR, H, vd, p, i, "linear_attn.out_proj.weight");
}

// mt_add_moe: layer i's sparse MLP (transformers' Qwen3MoeSparseMoeBlock / Qwen3_5MoeSparseMoeBlock):
// the router, the experts per expert or fused, and for Qwen3.5-MoE the shared expert and its gate.
// Both layouts take 3E streams for the experts (expert e: gate base+3e, up base+3e+1, down
// base+3e+2), so they hold the same values and what follows gets the same streams.
static void mt_add_moe(mt_list *l, const target_config *c, const char *p, int64_t i, int fused) {
    int64_t H = c->hidden, E = c->n_experts, I = c->moe_intermediate;
    mt_add(l, MT_ROUTER, E, H, p, i, "mlp.gate.weight");
    char name[128];
    if (fused) {
        uint32_t base = l->next_id;
        snprintf(name, sizeof name, "%slayers.%lld.mlp.experts.gate_up_proj", p, (long long)i);
        const int64_t gu[3] = {E, 2 * I, H}, dn[3] = {E, H, I};
        mt_add_nd(l, MT_LINEAR, 3, gu, name);
        mt_tensor *t = &l->t[l->n - 1];
        t->rng_id = base, t->fan_in = H, t->blk_n = (int)(2 * E), t->blk_per = 2, t->blk_stride = 3;
        snprintf(name, sizeof name, "%slayers.%lld.mlp.experts.down_proj", p, (long long)i);
        mt_add_nd(l, MT_LINEAR, 3, dn, name);
        t = &l->t[l->n - 1];
        t->rng_id = base + 2, t->fan_in = I, t->blk_n = (int)E, t->blk_per = 1, t->blk_stride = 3;
        l->next_id = base + 3 * (uint32_t)E;
    } else {
        for (int64_t e = 0; e < E; e++) {
            snprintf(name, sizeof name, "mlp.experts.%lld.gate_proj.weight", (long long)e);
            mt_add(l, MT_LINEAR, I, H, p, i, name);
            snprintf(name, sizeof name, "mlp.experts.%lld.up_proj.weight", (long long)e);
            mt_add(l, MT_LINEAR, I, H, p, i, name);
            snprintf(name, sizeof name, "mlp.experts.%lld.down_proj.weight", (long long)e);
            mt_add(l, MT_LINEAR, H, I, p, i, name);
        }
    }
    if (c->shared_intermediate <= 0) return;
    int64_t Is = c->shared_intermediate;
    mt_add(l, MT_LINEAR, Is, H, p, i, "mlp.shared_expert.gate_proj.weight");
    mt_add(l, MT_LINEAR, Is, H, p, i, "mlp.shared_expert.up_proj.weight");
    mt_add(l, MT_LINEAR, H, Is, p, i, "mlp.shared_expert.down_proj.weight");
    mt_add(l, MT_LINEAR, 1, H, p, i, "mlp.shared_expert_gate.weight");
}

// The vision tower that tc_hybrid_to_json describes (depth 1, width 32, MLP 64, patch 4,
// temporal patch 2, spatial merge 2, 64 position embeddings, 3 input channels): every tensor of
// transformers' Qwen3_5VisionModel, so the wrapper loads with nothing missing. The teacher skips them.
enum { MT_VIS_W = 32, MT_VIS_MLP = 64, MT_VIS_PATCH = 4, MT_VIS_TPATCH = 2, MT_VIS_MERGE = 2, MT_VIS_POS = 64 };

static void mt_add_vision(mt_list *l, const target_config *c) {
    const int64_t W = MT_VIS_W, M = MT_VIS_MLP, Wm = MT_VIS_W * MT_VIS_MERGE * MT_VIS_MERGE;
    const int64_t patch[5] = {W, 3, MT_VIS_TPATCH, MT_VIS_PATCH, MT_VIS_PATCH};
    mt_add_nd(l, MT_LINEAR, 5, patch, "model.visual.patch_embed.proj.weight");
    mt_add(l, MT_BIAS, W, 0, "", -1, "model.visual.patch_embed.proj.bias");
    mt_add(l, MT_LINEAR, MT_VIS_POS, W, "", -1, "model.visual.pos_embed.weight");
    static const struct {
        const char *name;
        mt_kind kind;
        int rows, cols; // 0: W, -1: M, -2: 3W
    } blk[] = {
        {"norm1.weight", MT_NORM, 0, 0},          {"norm1.bias", MT_BIAS, 0, 0},
        {"norm2.weight", MT_NORM, 0, 0},          {"norm2.bias", MT_BIAS, 0, 0},
        {"attn.qkv.weight", MT_LINEAR, -2, 0},    {"attn.qkv.bias", MT_BIAS, -2, 0},
        {"attn.proj.weight", MT_LINEAR, 0, 0},    {"attn.proj.bias", MT_BIAS, 0, 0},
        {"mlp.linear_fc1.weight", MT_LINEAR, -1, 0}, {"mlp.linear_fc1.bias", MT_BIAS, -1, 0},
        {"mlp.linear_fc2.weight", MT_LINEAR, 0, -1}, {"mlp.linear_fc2.bias", MT_BIAS, 0, 0},
    };
    for (size_t b = 0; b < sizeof blk / sizeof blk[0]; b++) {
        int64_t rows = blk[b].rows == 0 ? W : blk[b].rows == -1 ? M : 3 * W;
        int64_t cols = blk[b].kind != MT_LINEAR ? 0 : blk[b].cols == 0 ? W : M;
        char name[128];
        snprintf(name, sizeof name, "model.visual.blocks.0.%s", blk[b].name);
        mt_add(l, blk[b].kind, rows, cols, "", -1, name);
    }
    mt_add(l, MT_NORM, W, 0, "", -1, "model.visual.merger.norm.weight");
    mt_add(l, MT_BIAS, W, 0, "", -1, "model.visual.merger.norm.bias");
    mt_add(l, MT_LINEAR, Wm, Wm, "", -1, "model.visual.merger.linear_fc1.weight");
    mt_add(l, MT_BIAS, Wm, 0, "", -1, "model.visual.merger.linear_fc1.bias");
    mt_add(l, MT_LINEAR, c->hidden, Wm, "", -1, "model.visual.merger.linear_fc2.weight");
    mt_add(l, MT_BIAS, c->hidden, 0, "", -1, "model.visual.merger.linear_fc2.bias");
}

// mt_build_list: the SPEC §2 tensor names, in the order written (and numbered for the RNG).
static void mt_build_list(mt_list *l, const target_config *c, int fused_experts) {
    int64_t H = c->hidden, D = c->head_dim, I = c->intermediate;
    int hybrid = c->arch == ARCH_QWEN3_5;
    const char *p = target_tensor_prefix(c); // "model." or "model.language_model."
    mt_kind norm = hybrid ? MT_NORM0 : MT_NORM;
    char name[128];
    snprintf(name, sizeof name, "%sembed_tokens.weight", p);
    mt_add(l, MT_VOCAB, c->vocab, H, "", -1, name);
    for (int64_t i = 0; i < c->n_layers; i++) {
        mt_add(l, norm, H, 0, p, i, "input_layernorm.weight");
        if (target_layer_is_linear(c, i)) {
            mt_add_linear_attn(l, c, p, i);
        } else {
            // Qwen3.5's gated attention: q_proj gives [query | gate] per head.
            mt_add(l, MT_LINEAR, c->n_heads * D * (hybrid ? 2 : 1), H, p, i, "self_attn.q_proj.weight");
            mt_add(l, MT_LINEAR, c->n_kv_heads * D, H, p, i, "self_attn.k_proj.weight");
            mt_add(l, MT_LINEAR, c->n_kv_heads * D, H, p, i, "self_attn.v_proj.weight");
            mt_add(l, MT_LINEAR, H, c->n_heads * D, p, i, "self_attn.o_proj.weight");
            if (c->arch != ARCH_LLAMA) {
                mt_add(l, norm, D, 0, p, i, "self_attn.q_norm.weight");
                mt_add(l, norm, D, 0, p, i, "self_attn.k_norm.weight");
            }
        }
        mt_add(l, norm, H, 0, p, i, "post_attention_layernorm.weight");
        if (target_layer_is_sparse(c, i)) {
            mt_add_moe(l, c, p, i, fused_experts);
            continue;
        }
        mt_add(l, MT_LINEAR, I, H, p, i, "mlp.gate_proj.weight");
        mt_add(l, MT_LINEAR, I, H, p, i, "mlp.up_proj.weight");
        mt_add(l, MT_LINEAR, H, I, p, i, "mlp.down_proj.weight");
    }
    snprintf(name, sizeof name, "%snorm.weight", p);
    mt_add(l, norm, H, 0, "", -1, name);
    if (!c->tie_embeddings) mt_add(l, MT_VOCAB, c->vocab, H, "", -1, "lm_head.weight");
    if (!c->multimodal) return;
    mt_add_vision(l, c);
    // A few tensors of the multi-token-prediction head, as Qwen3.5 checkpoints carry it
    // (transformers ignores ^mtp.*; so must the teacher).
    mt_add(l, MT_LINEAR, H, 2 * H, "", -1, "mtp.fc.weight");
    mt_add(l, MT_NORM0, H, 0, "", -1, "mtp.pre_fc_norm_embedding.weight");
    mt_add(l, MT_NORM0, H, 0, "", -1, "mtp.pre_fc_norm_hidden.weight");
    mt_add(l, MT_NORM0, H, 0, "", -1, "mtp.norm.weight");
}

static int64_t mt_numel(const mt_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

// mt_bytes: tensor t's bytes in the file (elem: --dtype's element size).
static int64_t mt_bytes(const mt_tensor *t, size_t elem) {
    return mt_numel(t) * (int64_t)(t->f32_file ? sizeof(float) : elem);
}

// mt_assign_shards: consecutive runs of tensors of about total/N bytes each, none empty.
static void mt_assign_shards(mt_list *l, int n_shards, size_t elem) {
    int64_t total = 0;
    for (int i = 0; i < l->n; i++) total += mt_bytes(&l->t[i], elem);
    int s = 0, in_shard = 0;
    int64_t cum = 0;
    for (int i = 0; i < l->n; i++) {
        int shards_left = n_shards - 1 - s; // not yet started
        if (in_shard > 0 && shards_left > 0 &&
            (l->n - i <= shards_left || cum * n_shards >= total * (int64_t)(s + 1))) {
            s++;
            in_shard = 0;
        }
        l->t[i].shard = s;
        in_shard++;
        cum += mt_bytes(&l->t[i], elem);
    }
}

// mt_fill: tensor t's values, fp32, into v (from its stream rng_id, or block by block).
static void mt_fill(const mt_tensor *t, const target_config *c, uint64_t seed, float *v) {
    rng r;
    rng_init(&r, seed, 0, t->rng_id);
    int64_t n = mt_numel(t);
    int64_t fan_in = t->fan_in > 0 ? t->fan_in : n / t->shape[0];
    double std = t->kind == MT_LINEAR ? 1.0 / sqrt((double)fan_in)
               : t->kind == MT_ROUTER ? 2.0 / sqrt((double)c->hidden)
                                      : 4.0 / sqrt((double)c->hidden);
    int64_t blk = t->blk_n > 0 ? n / t->blk_n : n;
    for (int64_t j = 0; j < n; j++) {
        if (t->blk_n > 0 && j % blk == 0) {
            int64_t b = j / blk;
            rng_init(&r, seed, 0, t->rng_id + (uint32_t)((b / t->blk_per) * t->blk_stride + b % t->blk_per));
        }
        double z = rng_normal(&r);
        double x;
        switch (t->kind) {
        case MT_NORM: x = 1.0 + 0.1 * z; break;
        case MT_NORM0: x = 0.1 * z; break;
        case MT_A_LOG: x = log(0.3) + 0.4 * z; break;
        case MT_DT_BIAS: x = -0.5 + 0.5 * z; break;
        case MT_BIAS: x = 0.02 * z; break;
        case MT_BIAS1: x = 0.1 * z; break;
        case MT_SINK: x = z; break;
        case MT_ONE: x = 1.0; break;
        case MT_SCORE: x = 0.5 * z; break;
        default: x = std * z; break; // MT_LINEAR, MT_VOCAB, MT_ROUTER
        }
        v[j] = (float)x;
    }
}

// ---------------------------------------------------------------- files

static int mt_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return error_set("%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (!ok) return error_set("%s: %s", path, strerror(err));
    return 0;
}

static void mt_fsync_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    fsync(dirfd(d));
    closedir(d);
}

// mt_remove_dir: the temporary directory and the files in it (it holds no subdirectories).
static void mt_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[4600];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void mt_shard_name(char *buf, size_t n, int shard, int n_shards) {
    if (n_shards == 1) snprintf(buf, n, "model.safetensors");
    else snprintf(buf, n, "model-%05d-of-%05d.safetensors", shard + 1, n_shards);
}

// mt_write_model: every file of the model into dir (an empty directory).
static int mt_write_model(const char *dir, const target_config *c, mt_list *l, uint64_t seed, dtype dt,
                          int n_shards) {
    char path[4400], file[64];
    char *json = target_config_to_json(c);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = mt_write_text(path, json);
    free(json);
    if (rc) return -1;

    size_t elem = dtype_size(dt);
    mt_assign_shards(l, n_shards, elem);
    int64_t total_bytes = 0;
    for (int s = 0; s < n_shards && rc == 0; s++) {
        // One shard's tensors are in memory at a time.
        int first = -1, last = -1;
        for (int i = 0; i < l->n; i++)
            if (l->t[i].shard == s) {
                if (first < 0) first = i;
                last = i;
            }
        void **bufs = xcalloc((size_t)(last - first + 1), sizeof *bufs);
        st_writer w;
        safetensors_writer_init(&w);
        safetensors_writer_meta(&w, "format", "pt"); // transformers checks it
        for (int i = first; i <= last && rc == 0; i++) {
            mt_tensor *t = &l->t[i];
            int64_t n = mt_numel(t);
            dtype tdt = t->f32_file ? DT_F32 : dt;
            float *v = xmalloc((size_t)n * sizeof(float));
            mt_fill(t, c, seed, v);
            void *data = v;
            if (tdt != DT_F32) {
                data = xmalloc((size_t)n * elem);
                rc = convert_from_f32(data, tdt, v, n);
                free(v);
            }
            bufs[i - first] = data;
            total_bytes += mt_bytes(t, elem);
            if (rc == 0) rc = safetensors_writer_add(&w, t->name, tensor_make(tdt, data, DEVICE_CPU, t->ndim, t->shape));
        }
        mt_shard_name(file, sizeof file, s, n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if (rc == 0) rc = safetensors_writer_write(&w, path);
        safetensors_writer_free(&w);
        for (int i = 0; i <= last - first; i++) free(bufs[i]);
        free(bufs);
    }
    if (rc || n_shards == 1) return rc;

    // model.safetensors.index.json, as transformers' save_pretrained writes it.
    cJSON *index = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total_bytes);
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");
    for (int i = 0; i < l->n; i++) {
        mt_shard_name(file, sizeof file, l->t[i].shard, n_shards);
        cJSON_AddStringToObject(map, l->t[i].name, file);
    }
    char *text = cJSON_Print(index);
    cJSON_Delete(index);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    rc = mt_write_text(path, text);
    free(text);
    return rc;
}

// ---------------------------------------------------------------- arguments

// mt_int / mt_num: a whole-string number, else a usage error (return -1 after printing).
static int mt_int(const char *opt, const char *s, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0') {
        fprintf(stderr, "error: make-target: %s wants an integer, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int mt_num(const char *opt, const char *s, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v)) {
        fprintf(stderr, "error: make-target: %s wants a number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

// ---------------------------------------------------------------- the Qwen3.5 hybrid's options

typedef struct {
    int64_t k_heads, v_heads, k_dim, v_dim, conv, interval; // -1: not given
    const char *types;                                      // --layer-types, NULL: not given
    double partial;                                         // -1: not given
    const char *given;                                      // the first hybrid option seen (for the error)
    const char *given_lin;                                  // the first one other than --layer-types (which the
                                                            // windowed families take too: full|sliding)
} mt_hybrid_args;

// mt_hybrid_opt: option a (value v) if it is one of the hybrid's: 0, or -1 after a usage error; 1 if it is not.
static int mt_hybrid_opt(mt_hybrid_args *h, const char *a, const char *v) {
    static const char *const ints[6] = {"--lin-k-heads", "--lin-v-heads", "--lin-k-dim",
                                        "--lin-v-dim",   "--conv-kernel", "--full-interval"};
    int64_t *dst[6] = {&h->k_heads, &h->v_heads, &h->k_dim, &h->v_dim, &h->conv, &h->interval};
    int rc = 1;
    for (int i = 0; i < 6; i++)
        if (strcmp(a, ints[i]) == 0) rc = mt_int(a, v, dst[i]);
    if (strcmp(a, "--layer-types") == 0) h->types = v, rc = 0;
    if (strcmp(a, "--partial-rotary") == 0) rc = mt_num(a, v, &h->partial);
    if (rc != 1 && !h->given) h->given = a;
    if (rc != 1 && !h->given_lin && strcmp(a, "--layer-types") != 0) h->given_lin = a;
    return rc;
}

// mt_types_parse: a --layer-types list, one entry per layer: "full" / "full_attention", or kind /
// "<kind>_attention" (kind "linear" for the hybrid, "sliding" for the windowed families): flag[i] =
// 1 for kind. -1 with msg naming the entry, or the count when it is not --layers.
static int mt_types_parse(const char *list, const char *kind, uint8_t *flag, int64_t n_layers, char *msg, size_t n) {
    if (n_layers > TARGET_MAX_LAYERS) {
        snprintf(msg, n, "--layer-types takes at most %d layers", TARGET_MAX_LAYERS);
        return -1;
    }
    int64_t i = 0;
    size_t kn = strlen(kind);
    for (const char *p = list;; i++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int other = (len == kn && strncmp(p, kind, kn) == 0) ||
                    (len == kn + 10 && strncmp(p, kind, kn) == 0 && strncmp(p + kn, "_attention", 10) == 0);
        int full = (len == 4 && strncmp(p, "full", 4) == 0) || (len == 14 && strncmp(p, "full_attention", 14) == 0);
        if (!other && !full) {
            snprintf(msg, n, "--layer-types entry %lld is '%.*s': want %s or full", (long long)i, (int)len, p, kind);
            return -1;
        }
        if (i < n_layers) flag[i] = (uint8_t)other;
        if (!end) break;
        p = end + 1;
    }
    if (i + 1 != n_layers) {
        snprintf(msg, n, "--layer-types has %lld entries for --layers %lld", (long long)(i + 1), (long long)n_layers);
        return -1;
    }
    return 0;
}

// mt_layer_types: "linear,full,..." (or linear_attention / full_attention) into c->layer_linear.
static int mt_layer_types(target_config *c, const char *list, char *msg, size_t n) {
    return mt_types_parse(list, "linear", c->layer_linear, c->n_layers, msg, n);
}

// mt_hybrid_setup: the Qwen3.5 fields of c (shape fields already set) from the options, with
// defaults: linear key heads = --kv-heads, value heads = --heads, both head dims = head_dim,
// kernel 4, full attention every 4th layer, partial rotary 0.25. -1 with msg on a bad value.
static int mt_hybrid_setup(target_config *c, const mt_hybrid_args *h, char *msg, size_t n) {
    c->norm_zero_centred = 1;
    c->gated_attention = 1;
    c->lin_k_heads = h->k_heads >= 0 ? h->k_heads : c->n_kv_heads;
    c->lin_v_heads = h->v_heads >= 0 ? h->v_heads : c->n_heads;
    c->lin_k_dim = h->k_dim >= 0 ? h->k_dim : c->head_dim;
    c->lin_v_dim = h->v_dim >= 0 ? h->v_dim : c->head_dim;
    c->lin_conv_kernel = h->conv >= 0 ? h->conv : 4;
    c->partial_rotary = h->partial >= 0.0 ? h->partial : 0.25;
    const int64_t big = (int64_t)1 << 16;
    const char *why = NULL;
    if (c->lin_k_heads < 1 || c->lin_k_heads > big) why = "--lin-k-heads must be in [1, 65536]";
    else if (c->lin_v_heads < 1 || c->lin_v_heads > big) why = "--lin-v-heads must be in [1, 65536]";
    else if (c->lin_v_heads % c->lin_k_heads != 0) {
        snprintf(msg, n, "--lin-v-heads %lld is not a multiple of --lin-k-heads %lld", (long long)c->lin_v_heads,
                 (long long)c->lin_k_heads);
        return -1;
    } else if (c->lin_k_dim < 1 || c->lin_k_dim > 4096) why = "--lin-k-dim must be in [1, 4096]";
    else if (c->lin_v_dim < 1 || c->lin_v_dim > 4096) why = "--lin-v-dim must be in [1, 4096]";
    else if (c->lin_conv_kernel < 1 || c->lin_conv_kernel > 64) why = "--conv-kernel must be in [1, 64]";
    else if (h->types && h->interval >= 0) why = "give --full-interval or --layer-types, not both";
    else if (h->interval == 0 || h->interval < -1) why = "--full-interval must be positive";
    else if (!(c->partial_rotary > 0.0 && c->partial_rotary <= 1.0)) why = "--partial-rotary must be in (0, 1]";
    if (why) {
        snprintf(msg, n, "%s", why);
        return -1;
    }
    c->rope_dim = (int64_t)((double)c->head_dim * c->partial_rotary); // Python's int(): truncation
    if (c->rope_dim < 2 || c->rope_dim % 2 != 0) {
        snprintf(msg, n, "--partial-rotary %g gives %lld rotary dims of head_dim %lld: need an even number >= 2",
                 c->partial_rotary, (long long)c->rope_dim, (long long)c->head_dim);
        return -1;
    }
    if (h->types) {
        c->full_interval = 0;
        return mt_layer_types(c, h->types, msg, n);
    }
    c->full_interval = h->interval > 0 ? h->interval : 4;
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_linear[i] = (uint8_t)((i + 1) % c->full_interval != 0);
    return 0;
}

// ---------------------------------------------------------------- the mixture of experts' options

typedef struct {
    int64_t experts, per_tok, inter, shared, step; // -1: not given
    const char *mlp_only;                          // --mlp-only, NULL: not given
    const char *layout;                            // --experts-layout, NULL: the arch's default
    int norm_topk;                                 // --norm-topk given
    const char *given;                             // the first MoE option seen (for the error)
    const char *qwen3_only, *qwen3_5_only;         // the first family-specific one seen
} mt_moe_args;

// mt_moe_opt: option a (value v) if it is one of the MoE's: 0, or -1 after a usage error; 1 if it is not.
static int mt_moe_opt(mt_moe_args *m, const char *a, const char *v) {
    int rc = 1;
    if (strcmp(a, "--experts") == 0) rc = mt_int(a, v, &m->experts);
    else if (strcmp(a, "--experts-per-tok") == 0) rc = mt_int(a, v, &m->per_tok);
    else if (strcmp(a, "--moe-intermediate") == 0) rc = mt_int(a, v, &m->inter);
    else if (strcmp(a, "--experts-layout") == 0) m->layout = v, rc = 0;
    else if (strcmp(a, "--shared-intermediate") == 0) {
        rc = mt_int(a, v, &m->shared);
        if (!m->qwen3_5_only) m->qwen3_5_only = a;
    } else if (strcmp(a, "--sparse-step") == 0 || strcmp(a, "--mlp-only") == 0) {
        rc = a[2] == 's' ? mt_int(a, v, &m->step) : 0;
        if (a[2] == 'm') m->mlp_only = v;
        if (!m->qwen3_only) m->qwen3_only = a;
    }
    if (rc != 1 && !m->given) m->given = a;
    return rc;
}

// mt_moe_setup: the MoE fields of c (shape fields already set, the hybrid's too) from the options,
// with defaults: 8 experts, top 2, experts of width H, the shared expert as wide, every layer sparse.
// -1 with msg on a bad value.
static int mt_moe_setup(target_config *c, const mt_moe_args *m, char *msg, size_t n) {
    int hybrid = c->arch == ARCH_QWEN3_5;
    c->moe = 1;
    c->n_experts = m->experts >= 0 ? m->experts : 8;
    c->n_experts_tok = m->per_tok >= 0 ? m->per_tok : 2;
    c->moe_intermediate = m->inter >= 0 ? m->inter : c->hidden;
    c->shared_intermediate = hybrid ? (m->shared >= 0 ? m->shared : c->moe_intermediate) : 0;
    c->norm_topk_prob = hybrid || m->norm_topk;
    c->sparse_step = m->step >= 0 ? m->step : 1;
    const int64_t big = (int64_t)1 << 24;
    if (c->n_experts < 1 || c->n_experts > 65536) snprintf(msg, n, "--experts must be in [1, 65536]");
    else if (c->n_experts_tok < 1 || c->n_experts_tok > 64)
        snprintf(msg, n, "--experts-per-tok must be in [1, 64]");
    else if (c->n_experts_tok > c->n_experts)
        snprintf(msg, n, "--experts-per-tok %lld is more than --experts %lld", (long long)c->n_experts_tok,
                 (long long)c->n_experts);
    else if (c->moe_intermediate < 1 || c->moe_intermediate > big)
        snprintf(msg, n, "--moe-intermediate must be in [1, 2^24]");
    else if (hybrid && (c->shared_intermediate < 1 || c->shared_intermediate > big))
        snprintf(msg, n, "--shared-intermediate must be in [1, 2^24]");
    else if (c->sparse_step < 1) snprintf(msg, n, "--sparse-step must be positive");
    else if (c->n_layers > TARGET_MAX_LAYERS)
        snprintf(msg, n, "--layers must be in [1, %d] for the MoE targets", TARGET_MAX_LAYERS);
    else msg[0] = '\0';
    if (msg[0]) return -1;
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_sparse[i] = (uint8_t)((i + 1) % c->sparse_step == 0);
    for (const char *p = m->mlp_only; p;) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || (*end != ',' && *end != '\0') || v < 0 || v >= c->n_layers) {
            size_t len = strcspn(p, ",");
            snprintf(msg, n, "--mlp-only entry '%.*s' is not a layer index in [0, %lld)", (int)len, p,
                     (long long)c->n_layers);
            return -1;
        }
        c->layer_sparse[v] = 0;
        p = *end == ',' ? end + 1 : NULL;
    }
    return 0;
}

// ---------------------------------------------------------------- the architecture

// mt_own_list: the families mt_build_list writes (Qwen3, Llama, the Qwen3.5 hybrid, their MoE
// tables). Every other table's model is written from the teacher's own tensor list
// (mt_teacher_list) and its table's to_json (mt_new_config).
static int mt_own_family(int family) { return family == ARCH_QWEN3 || family == ARCH_LLAMA || family == ARCH_QWEN3_5; }
static int mt_own_list(const target_config *c) { return mt_own_family(c->arch); }

// mt_arch_find: the teacher's table (target_registry.h) for --arch NAME: NAME is a table's name for
// its text-only class, NAME_vl for its multimodal one. NULL when no table serves it.
static const target_arch *mt_arch_find(const char *name, int *multimodal) {
    for (int i = 0; i < target_n_archs; i++) {
        const target_arch *A = target_archs[i];
        size_t n = strlen(A->name);
        if (strncmp(name, A->name, n) != 0 || !A->mixer->to_json) continue; // families make-target does not write
        for (const target_arch_class *k = A->classes; k->class_name; k++)
            if (strcmp(name + n, k->multimodal ? "_vl" : "") == 0) {
                *multimodal = k->multimodal;
                return A;
            }
    }
    return NULL;
}

// mt_arch_names: "a|b|..." the --arch names of the tables of that family and moe flag (-1: any), in
// the registry's order, each table's text-only class before its multimodal one.
static const char *mt_arch_names(char *s, size_t n, int family, int moe) {
    size_t used = 0;
    s[0] = '\0';
    for (int i = 0; i < target_n_archs; i++) {
        const target_arch *A = target_archs[i];
        if ((family >= 0 && A->family != family) || (moe >= 0 && A->moe != moe) || !A->mixer->to_json) continue;
        for (int mm = 0; mm < 2 - !mt_own_family(A->family); mm++) // the others: the text-only class only
            for (const target_arch_class *k = A->classes; k->class_name; k++)
                if (k->multimodal == mm) {
                    used += (size_t)snprintf(s + used, used < n ? n - used : 0, "%s%s%s", used ? "|" : "", A->name,
                                             mm ? "_vl" : "");
                    break;
                }
    }
    return s;
}

// ---------------------------------------------------------------- the command line

typedef struct {
    const char *out_dir, *arch, *dtype_name;
    int64_t layers, hidden, heads, kv_heads, head_dim, inter, vocab, seed, shards, max_pos, orig_max;
    int64_t window; // --sliding-window (-1: not given)
    double theta, llama3, eps;
    int tie, theta_given;
    mt_hybrid_args hy;
    mt_moe_args moe;
} mt_args;

// mt_parse_args: argv into a (defaults for what is not given). 0, or the exit code: 0 after --help
// (*done set), 2 after a usage error.
static int mt_parse_args(int argc, char **argv, mt_args *a, int *done) {
    *a = (mt_args){.dtype_name = "bf16", .layers = -1, .hidden = -1, .heads = -1, .kv_heads = -1, .vocab = -1,
                   .shards = 1, .max_pos = 32768, .orig_max = 8192, .window = -1, .theta = 10000.0, .eps = 1e-6,
                   .hy = {.k_heads = -1, .v_heads = -1, .k_dim = -1, .v_dim = -1, .conv = -1, .interval = -1,
                          .partial = -1.0},
                   .moe = {.experts = -1, .per_tok = -1, .inter = -1, .shared = -1, .step = -1}};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            make_target_usage(stdout);
            *done = 1;
            return 0;
        }
        if (strcmp(o, "--tie") == 0) {
            a->tie = 1;
            continue;
        }
        if (strcmp(o, "--norm-topk") == 0) {
            a->moe.norm_topk = 1;
            if (!a->moe.given) a->moe.given = o;
            if (!a->moe.qwen3_only) a->moe.qwen3_only = o;
            continue;
        }
        if (strncmp(o, "--", 2) != 0) {
            if (a->out_dir) {
                fprintf(stderr, "error: make-target: one OUT_DIR expected, got '%s' and '%s'\n", a->out_dir, o);
                return 2;
            }
            a->out_dir = o;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: make-target: %s needs a value\n", o);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0, hbad, mbad;
        if (strcmp(o, "--arch") == 0) a->arch = v;
        else if (strcmp(o, "--dtype") == 0) a->dtype_name = v;
        else if (strcmp(o, "--layers") == 0) bad = mt_int(o, v, &a->layers);
        else if (strcmp(o, "--hidden") == 0) bad = mt_int(o, v, &a->hidden);
        else if (strcmp(o, "--heads") == 0) bad = mt_int(o, v, &a->heads);
        else if (strcmp(o, "--kv-heads") == 0) bad = mt_int(o, v, &a->kv_heads);
        else if (strcmp(o, "--head-dim") == 0) bad = mt_int(o, v, &a->head_dim);
        else if (strcmp(o, "--intermediate") == 0) bad = mt_int(o, v, &a->inter);
        else if (strcmp(o, "--vocab") == 0) bad = mt_int(o, v, &a->vocab);
        else if (strcmp(o, "--seed") == 0) bad = mt_int(o, v, &a->seed);
        else if (strcmp(o, "--shards") == 0) bad = mt_int(o, v, &a->shards);
        else if (strcmp(o, "--max-positions") == 0) bad = mt_int(o, v, &a->max_pos);
        else if (strcmp(o, "--rope-original-max") == 0) bad = mt_int(o, v, &a->orig_max);
        else if (strcmp(o, "--rope-theta") == 0) {
            bad = mt_num(o, v, &a->theta);
            a->theta_given = 1;
        }
        else if (strcmp(o, "--sliding-window") == 0) bad = mt_int(o, v, &a->window);
        else if (strcmp(o, "--rope-llama3") == 0) bad = mt_num(o, v, &a->llama3);
        else if (strcmp(o, "--eps") == 0) bad = mt_num(o, v, &a->eps);
        else if ((hbad = mt_hybrid_opt(&a->hy, o, v)) != 1) bad = hbad;
        else if ((mbad = mt_moe_opt(&a->moe, o, v)) != 1) bad = mbad;
        else {
            fprintf(stderr, "error: make-target: unknown option '%s' (dflash_tool make-target --help)\n", o);
            return 2;
        }
        if (bad) return 2;
    }
    const char *missing = !a->out_dir ? "OUT_DIR" : !a->arch ? "--arch" : a->layers < 0 ? "--layers"
                        : a->hidden < 0 ? "--hidden" : a->heads < 0 ? "--heads" : a->kv_heads < 0 ? "--kv-heads"
                        : a->vocab < 0 ? "--vocab" : NULL;
    if (missing) {
        fprintf(stderr, "error: make-target: missing %s (dflash_tool make-target --help)\n", missing);
        return 2;
    }
    return 0;
}

// ---------------------------------------------------------------- the other families

// mt_new_options: mt_arch_options for the other families: the options they do not take are
// refused; *fused: --experts-layout fused (the default: per expert, as transformers saves them).
static int mt_new_options(const mt_args *a, const target_config *c, int *fused) {
    char names[256];
    const char *only = NULL, *names_of = NULL;
    if (c->multimodal) {
        fprintf(stderr, "error: make-target: --arch %s: the multimodal wrapper of this family is not written (give its"
                        " text-only class, --arch %s)\n", a->arch, c->table->name);
        return 2;
    }
    if (a->hy.given_lin) only = a->hy.given_lin, names_of = mt_arch_names(names, sizeof names, ARCH_QWEN3_5, -1);
    else if (!c->moe && a->moe.given) only = a->moe.given, names_of = mt_arch_names(names, sizeof names, -1, 1);
    else if (a->moe.qwen3_only) only = a->moe.qwen3_only, names_of = mt_arch_names(names, sizeof names, ARCH_QWEN3, 1);
    else if (a->moe.qwen3_5_only) only = a->moe.qwen3_5_only, names_of = mt_arch_names(names, sizeof names, ARCH_QWEN3_5, 1);
    if (only) {
        fprintf(stderr, "error: make-target: %s is only for --arch %s\n", only, names_of);
        return 2;
    }
    if (c->table->no_intermediate && a->inter) {
        fprintf(stderr, "error: make-target: --intermediate is not used by --arch %s (every MLP is sparse: give"
                        " --moe-intermediate)\n", a->arch);
        return 2;
    }
    const char *layout = a->moe.layout;
    *fused = 0;
    if (layout && strcmp(layout, "fused") == 0) *fused = 1;
    else if (layout && strcmp(layout, "per-expert") != 0) {
        fprintf(stderr, "error: make-target: --experts-layout '%s' is not one of per-expert|fused\n", layout);
        return 2;
    }
    return 0;
}

// mt_arch_options: the architecture's table for --arch (c->table, family, moe, multimodal) and the
// options only some architectures take, refused on the others; *fused: the experts' layout.
// 0, or 2 after a usage error.
static int mt_arch_options(const mt_args *a, target_config *c, int *fused) {
    char names[256];
    int multimodal = 0;
    const target_arch *A = mt_arch_find(a->arch, &multimodal);
    if (!A) {
        fprintf(stderr, "error: make-target: --arch '%s' is not one of %s\n", a->arch,
                mt_arch_names(names, sizeof names, -1, -1));
        return 2;
    }
    c->table = A;
    c->arch = (target_family)A->family;
    c->moe = A->moe;
    c->multimodal = multimodal;
    if (!mt_own_list(c)) return mt_new_options(a, c, fused);
    if (a->window >= 0) {
        fprintf(stderr, "error: make-target: --sliding-window is not supported for --arch %s\n", a->arch);
        return 2;
    }
    int hybrid = c->arch == ARCH_QWEN3_5, is_moe = c->moe;
    const char *only = NULL, *names_of = NULL;
    if (!hybrid && a->hy.given) only = a->hy.given, names_of = mt_arch_names(names, sizeof names, ARCH_QWEN3_5, -1);
    else if (!is_moe && a->moe.given) only = a->moe.given, names_of = mt_arch_names(names, sizeof names, -1, 1);
    if (only) {
        fprintf(stderr, "error: make-target: %s is only for --arch %s\n", only, names_of);
        return 2;
    }
    if (is_moe && hybrid && a->moe.qwen3_only) {
        fprintf(stderr, "error: make-target: %s is only for --arch %s (Qwen3.5-MoE: every layer sparse,"
                        " the top-k always renormalised)\n", a->moe.qwen3_only,
                mt_arch_names(names, sizeof names, ARCH_QWEN3, 1));
        return 2;
    }
    if (is_moe && !hybrid && a->moe.qwen3_5_only) {
        fprintf(stderr, "error: make-target: %s is only for --arch %s\n", a->moe.qwen3_5_only,
                mt_arch_names(names, sizeof names, ARCH_QWEN3_5, 1));
        return 2;
    }
    if (is_moe && hybrid && a->inter) {
        fprintf(stderr, "error: make-target: --intermediate is not used by --arch %s (no dense MLP: every layer"
                        " is sparse; give --moe-intermediate / --shared-intermediate)\n", a->arch);
        return 2;
    }
    *fused = is_moe && hybrid; // as published: Qwen3-MoE per expert, Qwen3.5-MoE fused
    const char *layout = a->moe.layout;
    if (layout && strcmp(layout, "fused") == 0) *fused = 1;
    else if (layout && strcmp(layout, "per-expert") == 0) *fused = 0;
    else if (layout) {
        fprintf(stderr, "error: make-target: --experts-layout '%s' is not one of per-expert|fused\n", layout);
        return 2;
    }
    return 0;
}

// mt_shape_check: the shape and RoPE options' values (a->inter defaulted); NULL, or what is wrong
// (in msg or a constant).
static const char *mt_shape_check(const mt_args *a, const target_config *c, char *msg, size_t n) {
    int hybrid = c->arch == ARCH_QWEN3_5, sparse_only = c->table->no_intermediate;
    int64_t layers = a->layers, hidden = a->hidden, heads = a->heads, kv_heads = a->kv_heads, head_dim = a->head_dim;
    const int64_t big = (int64_t)1 << 24;
    char hybrid_names[128];
    if (layers < 1 || layers > 4096) return "--layers must be in [1, 4096]";
    if (hidden < 2 || hidden > big) return "--hidden must be in [2, 2^24]";
    if (heads < 1 || heads > hidden) return "--heads must be in [1, hidden]";
    if (!head_dim && hidden % heads != 0) {
        snprintf(msg, n, "--heads %lld does not divide --hidden %lld (give --head-dim)", (long long)heads,
                 (long long)hidden);
        return msg;
    }
    if (kv_heads < 1 || heads % kv_heads != 0) {
        snprintf(msg, n, "--kv-heads %lld does not divide --heads %lld", (long long)kv_heads, (long long)heads);
        return msg;
    }
    if (head_dim && (head_dim < 2 || head_dim % 2 != 0 || head_dim > 4096)) return "--head-dim must be even, in [2, 4096]";
    if (!head_dim && (hidden / heads) % 2 != 0) {
        snprintf(msg, n, "head_dim = hidden/heads = %lld is odd (RoPE rotates pairs); give --head-dim",
                 (long long)(hidden / heads));
        return msg;
    }
    if (c->arch == ARCH_LLAMA && hidden % heads != 0)
        return "--heads must divide --hidden for llama (transformers' LlamaConfig refuses it otherwise)";
    if (!sparse_only && (a->inter < 1 || a->inter > big)) return "--intermediate must be in [1, 2^24]";
    if (a->vocab < 2 || a->vocab > big) return "--vocab must be in [2, 2^24]";
    if (a->seed < 0) return "--seed must be >= 0";
    if (a->shards < 1 || a->shards > 99999) return "--shards must be in [1, 99999]";
    if (a->max_pos < 1) return "--max-positions must be positive";
    if (!(a->theta > 1.0)) return "--rope-theta must be > 1";
    if (a->llama3 != 0.0 && !(a->llama3 >= 1.0)) return "--rope-llama3 FACTOR must be >= 1";
    if (a->llama3 != 0.0 && (a->orig_max < 1 || a->orig_max >= a->max_pos))
        return "--rope-original-max must be in [1, --max-positions) (transformers warns otherwise)";
    if (!(a->eps > 0.0 && a->eps < 1.0)) return "--eps must be in (0, 1)";
    mt_arch_names(hybrid_names, sizeof hybrid_names, ARCH_QWEN3_5, 0);
    if (hybrid && a->llama3 != 0.0) {
        snprintf(msg, n, "--rope-llama3 is not supported for --arch %s", hybrid_names);
        return msg;
    }
    if (hybrid && layers > TARGET_MAX_LAYERS) {
        snprintf(msg, n, "--layers must be in [1, %d] for --arch %s", TARGET_MAX_LAYERS, hybrid_names);
        return msg;
    }
    return NULL;
}

// mt_dtype: --dtype, the weights' dtype (*dt) and config.json's torch_dtype (into c); 0, or 2 after
// a usage error.
static int mt_dtype(const char *name, dtype *dt, target_config *c) {
    const char *torch_dtype;
    if (strcmp(name, "bf16") == 0) *dt = DT_BF16, torch_dtype = "bfloat16";
    else if (strcmp(name, "f16") == 0) *dt = DT_F16, torch_dtype = "float16";
    else if (strcmp(name, "f32") == 0) *dt = DT_F32, torch_dtype = "float32";
    else {
        fprintf(stderr, "error: make-target: --dtype '%s' is not one of bf16|f16|f32\n", name);
        return 2;
    }
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", torch_dtype);
    return 0;
}

// mt_shape_fill: the shape every family takes from the options (head_dim: hidden / heads unless given).
static void mt_shape_fill(target_config *c, mt_args *a) {
    if (!a->head_dim) a->head_dim = a->hidden / a->heads;
    c->n_layers = a->layers;
    c->hidden = a->hidden;
    c->intermediate = a->inter;
    c->n_heads = a->heads;
    c->n_kv_heads = a->kv_heads;
    c->head_dim = a->head_dim;
    c->vocab = a->vocab;
    c->max_positions = a->max_pos;
    c->rms_eps = a->eps;
    c->tie_embeddings = a->tie;
}

// mt_config: the rest of config c (its dtype, table and flags set by mt_dtype and mt_arch_options)
// from the options; 0, or 1 after printing what is wrong.
static int mt_config(mt_args *a, target_config *c) {
    int hybrid = c->arch == ARCH_QWEN3_5, is_moe = c->moe;
    if (!a->inter) a->inter = is_moe && hybrid ? 0 : 3 * a->hidden;
    char msg[256];
    const char *why = mt_shape_check(a, c, msg, sizeof msg);
    if (why) {
        fprintf(stderr, "error: make-target: %s\n", why);
        return 1;
    }
    mt_shape_fill(c, a);
    c->rope_theta = a->theta;
    c->partial_rotary = 1.0;
    c->rope_dim = a->head_dim;
    if ((hybrid && mt_hybrid_setup(c, &a->hy, msg, sizeof msg)) || (is_moe && mt_moe_setup(c, &a->moe, msg, sizeof msg))) {
        fprintf(stderr, "error: make-target: %s\n", msg);
        return 1;
    }
    snprintf(c->arch_name, sizeof c->arch_name, "%s", target_arch_class_of(c->table, c->multimodal)->class_name);
    if (a->llama3 != 0.0) {
        c->rope_llama3 = 1;
        c->rope_factor = a->llama3;
        c->rope_low_freq_factor = 1.0;
        c->rope_high_freq_factor = 4.0;
        c->rope_original_max_positions = a->orig_max;
    }
    // Our own reader must read back what we write.
    char *json = target_config_to_json(c);
    target_config back;
    int rc = target_config_parse(&back, json, "make-target config.json");
    free(json);
    if (rc) {
        fprintf(stderr, "error: make-target: %s\n", error_msg());
        return 1;
    }
    if (is_moe && (back.moe != 1 || back.n_experts != c->n_experts || back.n_experts_tok != c->n_experts_tok ||
                   back.norm_topk_prob != c->norm_topk_prob || back.shared_intermediate != c->shared_intermediate ||
                   memcmp(back.layer_sparse, c->layer_sparse, (size_t)a->layers) != 0)) {
        fprintf(stderr, "error: make-target: internal: config.json reads back as a different mixture of experts\n");
        return 1;
    }
    return 0;
}

// mt_window_types: --layer-types for the windowed families (full|sliding, or full_attention |
// sliding_attention, one per layer) into c->layer_window with window w (-1: none given). -1 with msg.
static int mt_window_types(target_config *c, const char *list, int64_t w, char *msg, size_t n) {
    uint8_t sliding[TARGET_MAX_LAYERS];
    if (mt_types_parse(list, "sliding", sliding, c->n_layers, msg, n)) return -1;
    for (int64_t i = 0; i < c->n_layers; i++) {
        if (sliding[i] && w < 1) {
            snprintf(msg, n, "--layer-types entry %lld is sliding: give --sliding-window W", (long long)i);
            return -1;
        }
        c->layer_window[i] = sliding[i] ? (int32_t)w : 0;
    }
    return 0;
}

// mt_new_fill: c (its dtype and table set) from the options, as far as they say: the shapes, the
// RoPE base (the family's default when --rope-theta is not given), llama3 scaling, the sliding
// layers, the experts. What they do not say is the family's to_json's choice for a fresh config
// (target_config_fresh). 0, or -1 with msg.
static int mt_new_fill(mt_args *a, target_config *c, char *msg, size_t n) {
    const target_arch *A = c->table;
    if (!a->inter && !A->no_intermediate) a->inter = 3 * a->hidden;
    const char *why = mt_shape_check(a, c, msg, n);
    if (!why && a->layers > TARGET_MAX_LAYERS) snprintf(msg, n, "--layers must be in [1, %d] for --arch %s", TARGET_MAX_LAYERS, a->arch), why = msg;
    if (!why && (a->window == 0 || a->window < -1 || a->window > INT32_MAX)) why = "--sliding-window must be a positive number of keys";
    if (why) {
        if (why != msg) snprintf(msg, n, "%s", why);
        return -1;
    }
    mt_shape_fill(c, a);
    c->rope_theta = a->theta_given ? a->theta : A->default_rope_theta > 0 ? A->default_rope_theta : 10000.0;
    snprintf(c->arch_name, sizeof c->arch_name, "%s", target_arch_class_of(A, 0)->class_name);
    if (a->llama3 != 0.0) {
        c->rope_llama3 = 1;
        c->rope_factor = a->llama3;
        c->rope_low_freq_factor = 1.0;
        c->rope_high_freq_factor = 4.0;
        c->rope_original_max_positions = a->orig_max;
    }
    if (a->hy.types) {
        if (mt_window_types(c, a->hy.types, a->window, msg, n)) return -1;
    } else if (a->window > 0) { // every layer sliding, as far as the family allows (Gemma 4: the last is full)
        for (int64_t i = 0; i < c->n_layers; i++) c->layer_window[i] = (int32_t)a->window;
    }
    if (!c->moe) return 0;
    const mt_moe_args *m = &a->moe;
    c->n_experts = m->experts >= 0 ? m->experts : 8;
    c->n_experts_tok = m->per_tok >= 0 ? m->per_tok : 2;
    c->moe_intermediate = m->inter >= 0 ? m->inter : c->hidden;
    if (c->n_experts < 1 || c->n_experts > 65536) snprintf(msg, n, "--experts must be in [1, 65536]");
    else if (c->n_experts_tok < 1 || c->n_experts_tok > 64) snprintf(msg, n, "--experts-per-tok must be in [1, 64]");
    else if (c->n_experts_tok > c->n_experts)
        snprintf(msg, n, "--experts-per-tok %lld is more than --experts %lld", (long long)c->n_experts_tok,
                 (long long)c->n_experts);
    else if (c->moe_intermediate < 1 || c->moe_intermediate > ((int64_t)1 << 24))
        snprintf(msg, n, "--moe-intermediate must be in [1, 2^24]");
    else return 0;
    return -1;
}

// mt_new_config: the config of the other families: filled from the options (mt_new_fill), written by
// the table's to_json and read back by target_config_parse into *c (what the teacher will read).
// The round trip must hold: the file read back writes the same text and reads back to itself, and
// says what the options said (a family that cannot, e.g. --sliding-window for one without sliding
// layers, is refused naming the option). 0, or 1 after printing what is wrong.
static int mt_new_config(mt_args *a, target_config *c) {
    char msg[256];
    if (mt_new_fill(a, c, msg, sizeof msg)) {
        fprintf(stderr, "error: make-target: %s\n", msg);
        return 1;
    }
    target_config *back = xmalloc(sizeof *back), *again = xmalloc(sizeof *again);
    char *json = target_config_to_json(c), *json2 = NULL;
    int rc = 1;
    const char *what = NULL;
    if (target_config_parse(back, json, "make-target config.json")) {
        fprintf(stderr, "error: make-target: --arch %s: %s\n", a->arch, error_msg());
        goto done;
    }
    json2 = target_config_to_json(back);
    if (strcmp(json, json2) != 0 || target_config_parse(again, json2, "make-target config.json (again)") ||
        memcmp(back, again, sizeof *back) != 0) {
        fprintf(stderr, "error: make-target: internal: --arch %s's config.json does not read back to itself\n", a->arch);
        goto done;
    }
    if (back->rope_llama3 != c->rope_llama3) what = "--rope-llama3";
    int sliding = 0;
    for (int64_t i = 0; !what && i < c->n_layers; i++) {
        sliding |= back->layer_window[i] > 0;
        if (back->layer_window[i] == c->layer_window[i]) continue;
        if (a->hy.types || (back->layer_window[i] != 0 && back->layer_window[i] != c->layer_window[i])) {
            fprintf(stderr, "error: make-target: --layer-types: --arch %s has layer %lld %s whatever the list says\n",
                    a->arch, (long long)i, back->layer_window[i] > 0 ? "sliding" : "full");
            goto done;
        }
    }
    if (!what && a->window > 0 && !sliding) what = "--sliding-window";
    if (what) {
        fprintf(stderr, "error: make-target: %s is not supported for --arch %s\n", what, a->arch);
        goto done;
    }
    // the rest the options say is the family's whatever it is: a difference is this tool's bug
    int same = back->n_layers == c->n_layers && back->hidden == c->hidden && back->n_heads == c->n_heads &&
               back->n_kv_heads == c->n_kv_heads && back->head_dim == c->head_dim && back->vocab == c->vocab &&
               back->max_positions == c->max_positions && back->rms_eps == c->rms_eps &&
               back->rope_theta == c->rope_theta && back->tie_embeddings == c->tie_embeddings &&
               (c->table->no_intermediate || back->intermediate == c->intermediate) && back->moe == c->moe &&
               (!c->moe || (back->n_experts == c->n_experts && back->n_experts_tok == c->n_experts_tok &&
                            back->moe_intermediate == c->moe_intermediate));
    if (!same) {
        fprintf(stderr, "error: make-target: internal: --arch %s's config.json reads back as a different shape\n", a->arch);
        goto done;
    }
    *c = *back;
    rc = 0;
done:
    free(json);
    free(json2);
    free(back);
    free(again);
    return rc;
}

// mt_kind_of: the random kind of the teacher's tensor `name` (ndim dims), by its name.
static mt_kind mt_kind_of(const char *name, int ndim, const target_config *c) {
    static const struct {
        const char *suffix;
        mt_kind kind;
    } rules[] = {
        {"embed_tokens.weight", MT_VOCAB},  {"lm_head.weight", MT_VOCAB},   {"mlp.gate.weight", MT_ROUTER},
        {"mlp.router.weight", MT_ROUTER},   {"e_score_correction_bias", MT_SCORE}, {"sinks", MT_SINK},
        {"layer_scalar", MT_ONE},           {"bias", MT_BIAS1}, // q/k/v/o_proj.bias, router.bias, experts' *_bias
    };
    size_t len = strlen(name);
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        size_t k = strlen(rules[r].suffix);
        if (len >= k && strcmp(name + len - k, rules[r].suffix) == 0) return rules[r].kind;
    }
    if (ndim >= 2) return MT_LINEAR;
    if (strstr(name, "norm")) return c->norm_zero_centred ? MT_NORM0 : MT_NORM;
    fatal("make-target: no random rule for the teacher's tensor %s", name);
}

typedef struct {
    mt_list *l;
    const target_config *c;
} mt_teacher_ctx;

// mt_teacher_add: one entry of the teacher's list into the make-target list: the file's name and
// shape (the last two dims swapped where the file holds them so: gpt-oss's experts as transformers
// saves them), the kind by name (linear: fan-in the device shape's last dim, per expert).
static void mt_teacher_add(void *ctx, const target_tensor *t) {
    mt_teacher_ctx *x = ctx;
    if (t->alloc_only) return; // a buffer its parts (the per-expert tensors) fill
    if (strlen(t->name) >= sizeof x->l->t[0].name) fatal("make-target: tensor name %s is too long", t->name);
    int64_t shape[MT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
    if (t->transpose && t->ndim >= 2) shape[t->ndim - 2] = t->shape[t->ndim - 1], shape[t->ndim - 1] = t->shape[t->ndim - 2];
    mt_add_nd(x->l, mt_kind_of(t->name, t->ndim, x->c), t->ndim, shape, t->name);
    mt_tensor *m = &x->l->t[x->l->n - 1];
    if (m->kind == MT_LINEAR) m->fan_in = t->shape[t->ndim - 1];
    m->f32_file = m->kind == MT_SCORE; // transformers keeps e_score_correction_bias in fp32
}

// mt_teacher_list: the tensors of c's checkpoint as the teacher lists them (target_tensor_names),
// in its order and numbered for the RNG in that order; experts per expert unless fused (the layout
// where the MLP reads both).
static void mt_teacher_list(mt_list *l, const target_config *c, int fused) {
    st_dir none; // no fused tensor in it: the per-expert layout
    memset(&none, 0, sizeof none);
    mt_teacher_ctx x = {l, c};
    target_tensor_names(c, fused ? NULL : &none, mt_teacher_add, &x);
}

// mt_teacher_layouts: whether c's experts can be written in two layouts (the teacher reads both).
static int mt_teacher_layouts(const target_config *c) {
    mt_list a = {0}, b = {0};
    mt_teacher_list(&a, c, 0);
    mt_teacher_list(&b, c, 1);
    int differ = a.n != b.n;
    for (int i = 0; !differ && i < a.n; i++) differ = strcmp(a.t[i].name, b.t[i].name) != 0;
    free(a.t);
    free(b.t);
    return differ;
}

// ---------------------------------------------------------------- the directory

// mt_write_dir: the model into out_dir (which must not exist), built under out_dir.tmp.<pid> and
// renamed, the rename made durable. 0, or 1 after printing what failed (nothing left behind).
static int mt_write_dir(const char *out_dir, const target_config *c, mt_list *list, const mt_args *a, dtype dt) {
    struct stat st;
    if (stat(out_dir, &st) == 0) {
        fprintf(stderr, "error: make-target: %s already exists (remove it or choose another OUT_DIR)\n", out_dir);
        return 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out_dir, (long)getpid());
    if (mkdir(tmp, 0755) != 0) {
        fprintf(stderr, "error: make-target: cannot create %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    int rc = mt_write_model(tmp, c, list, (uint64_t)a->seed, dt, (int)a->shards);
    if (rc == 0) {
        mt_fsync_dir(tmp);
        if (rename(tmp, out_dir) != 0) rc = error_set("rename %s -> %s: %s", tmp, out_dir, strerror(errno));
    }
    if (rc) {
        mt_remove_dir(tmp);
        fprintf(stderr, "error: make-target: %s\n", error_msg());
        return 1;
    }
    // Make the rename durable: fsync the parent directory.
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", out_dir);
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = '\0';
    else *slash = '\0';
    mt_fsync_dir(parent);
    return 0;
}

// mt_print_summary: the one line saying what was written.
static void mt_print_summary(const char *out_dir, const target_config *c, const mt_list *list, const mt_args *a,
                             int fused) {
    int64_t params = 0, layers = c->n_layers;
    for (int i = 0; i < list->n; i++) params += mt_numel(&list->t[i]);
    char extra[160] = "";
    if (c->arch == ARCH_QWEN3_5) {
        int64_t n_lin = 0;
        for (int64_t i = 0; i < layers; i++) n_lin += c->layer_linear[i];
        snprintf(extra, sizeof extra, " (%lld linear: %lld/%lld heads x %lld/%lld, kernel %lld; rope dims %lld)",
                 (long long)n_lin, (long long)c->lin_k_heads, (long long)c->lin_v_heads, (long long)c->lin_k_dim,
                 (long long)c->lin_v_dim, (long long)c->lin_conv_kernel, (long long)c->rope_dim);
    }
    int64_t n_slide = 0, window = 0;
    for (int64_t i = 0; i < layers; i++)
        if (c->layer_window[i] > 0) n_slide++, window = c->layer_window[i];
    if (n_slide) snprintf(extra, sizeof extra, " (%lld sliding, window %lld)", (long long)n_slide, (long long)window);
    char moe_extra[200] = "";
    if (c->moe) {
        int64_t n_sparse = 0;
        for (int64_t i = 0; i < layers; i++) n_sparse += c->layer_sparse[i];
        char shared[48] = "";
        if (c->shared_intermediate > 0) snprintf(shared, sizeof shared, " + a shared expert x %lld", (long long)c->shared_intermediate);
        snprintf(moe_extra, sizeof moe_extra, ", %lld sparse: %lld experts x %lld, top %lld%s%s, %s", (long long)n_sparse,
                 (long long)c->n_experts, (long long)c->moe_intermediate, (long long)c->n_experts_tok,
                 c->norm_topk_prob ? " renormalised" : "", shared, fused ? "fused" : "per expert");
    }
    printf("make-target: wrote %s: %s, %lld layers%s%s, hidden %lld, %lld/%lld heads x %lld, vocab %lld, %s%s,"
           " %lld parameters in %lld file%s\n",
           out_dir, c->arch_name, (long long)layers, extra, moe_extra, (long long)c->hidden, (long long)c->n_heads,
           (long long)c->n_kv_heads, (long long)c->head_dim, (long long)c->vocab, a->dtype_name,
           a->tie ? ", tied" : "", (long long)params, (long long)a->shards, a->shards == 1 ? "" : "s");
}

int tool_make_target_main(int argc, char **argv) {
    mt_args a;
    int done = 0, rc = mt_parse_args(argc, argv, &a, &done);
    if (rc || done) return rc;
    // Values: each refusal names the option and what is wrong with it.
    target_config c;
    memset(&c, 0, sizeof c);
    int fused = 0;
    dtype dt;
    if ((rc = mt_dtype(a.dtype_name, &dt, &c)) != 0 || (rc = mt_arch_options(&a, &c, &fused)) != 0)
        return rc;
    int own = mt_own_list(&c); // else: the teacher's tensor list, the table's to_json
    if ((rc = own ? mt_config(&a, &c) : mt_new_config(&a, &c)) != 0) return rc;
    if (!own && a.moe.layout && !mt_teacher_layouts(&c)) {
        fprintf(stderr, "error: make-target: --experts-layout: --arch %s's experts have one layout\n", a.arch);
        return 2;
    }

    mt_list list = {0};
    if (own) mt_build_list(&list, &c, fused);
    else mt_teacher_list(&list, &c, fused);
    for (int i = 0; !own && i < list.n; i++) // the summary's word for the experts' layout
        if (strstr(list.t[i].name, "experts.gate_up_proj")) fused = 1;
    if (a.shards > list.n) {
        fprintf(stderr, "error: make-target: --shards %lld is more than the %d tensors\n", (long long)a.shards, list.n);
        free(list.t);
        return 1;
    }
    char out[4096];
    snprintf(out, sizeof out, "%s", a.out_dir);
    for (size_t len = strlen(out); len > 1 && out[len - 1] == '/';) out[--len] = '\0';
    rc = mt_write_dir(out, &c, &list, &a, dt);
    if (rc == 0) mt_print_summary(out, &c, &list, &a, fused);
    free(list.t);
    return rc;
}
