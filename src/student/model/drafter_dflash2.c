// drafter_dflash2.c: the DFlash2 drafter kind (SPEC §3.1; drafter.kind "dflash2"): exported as the
// dflash package's DFlash2DraftModel on a qwen3 base. Its tensors: DFlash's (drafter_dflash.h, in
// the same order, first in the flat buffer), then per layer the two GroupedDynamicCausalConv
// modules (attention_conv, mlp_conv: base_kernel [2, K, H] and kernel_projection [2*K*H/G, H]).
// Its config keys (dflash_config, else the root, as the package's _draft_value reads them):
// conv_kernel_size K (default 2), conv_group_size G (16; channels per group, H % G == 0),
// selector_top_k k (16) and selector_rank r (256). Last in the flat buffer, the CandidateSelector's
// three tensors: candidate_selector.predecessor_codebook [V, r] and .successor_codebook [V, r]
// (stored without ".weight": the package's from_pretrained key_mapping adds it) and
// candidate_selector.hidden_projection.weight [r, H], all normal(0, 0.02) like the package's
// _init_weights of nn.Embedding / nn.Linear. The convolutions' math is ops_dynconv
// (common/kernels/ops_dynconv.h), the selector's selector.h.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/core/tensor.h"
#include "common/kernels/ops.h"
#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/model/drafter_dflash.h"
#include "student/model/drafter_kind.h"
#include "student/model/grad_buckets.h"

static const char *const conv_names[2] = {"attention_conv", "mlp_conv"};

// dflash2_param_list: DFlash's tensors, then per layer l and conv s (attention_conv, mlp_conv):
// layers.l.<s>.base_kernel [2, K, H] (identity init) and layers.l.<s>.kernel_projection.weight
// [2*K*H/G, H]; then the selector's predecessor, successor codebooks [V, r] and hidden_projection [r, H].
static int dflash2_param_list(const drafter_config *c, drafter_param *list) {
    int n = drafter_dflash_param_list(c, list);
    // the offset after DFlash's tensors (a count-only call, list NULL, needs none)
    int64_t off = list ? list[n - 1].offset + (list[n - 1].numel + DRAFTER_ALIGN - 1) / DRAFTER_ALIGN * DRAFTER_ALIGN : 0;
    int64_t H = c->hidden, K = c->conv_kernel, G = c->conv_group > 0 ? c->conv_group : 1;
    char nm[96];
    for (int64_t l = 0; l < c->n_layers; l++)
        for (int s = 0; s < 2; s++) {
            snprintf(nm, sizeof nm, "layers.%lld.%s.base_kernel", (long long)l, conv_names[s]);
            drafter_param_push(list, &n, &off, nm, 3, (int64_t[]){2, K, H}, 0, 1);
            snprintf(nm, sizeof nm, "layers.%lld.%s.kernel_projection.weight", (long long)l, conv_names[s]);
            drafter_param_push(list, &n, &off, nm, 2, (int64_t[]){2 * K * (H / G), H}, 0, 0);
        }
    int64_t V = c->vocab, r = c->selector_rank;
    drafter_param_push(list, &n, &off, "candidate_selector.predecessor_codebook", 2, (int64_t[]){V, r}, 0, 0);
    drafter_param_push(list, &n, &off, "candidate_selector.successor_codebook", 2, (int64_t[]){V, r}, 0, 0);
    drafter_param_push(list, &n, &off, "candidate_selector.hidden_projection.weight", 2, (int64_t[]){r, H}, 0, 0);
    return n;
}

// dflash2_first_conv: index of layer 0's attention_conv.base_kernel in d->params.
static int dflash2_first_conv(const drafter_config *c) { return 2 + 11 * (int)c->n_layers + 1; }

static void dflash2_bind(drafter *d) {
    drafter_dflash_bind(d);
    size_t e = dtype_size(ops_act_dtype(d->be));
    int i = dflash2_first_conv(&d->cfg);
    for (int64_t l = 0; l < d->cfg.n_layers; l++)
        for (int s = 0; s < 2; s++, i += 2) {
            d->layers[l].conv_base[s] = (char *)d->compute + (size_t)d->params[i].offset * e;
            d->layers[l].conv_proj[s] = (char *)d->compute + (size_t)d->params[i + 1].offset * e;
        }
    d->sel_pred = (char *)d->compute + (size_t)d->params[i].offset * e;
    d->sel_succ = (char *)d->compute + (size_t)d->params[i + 1].offset * e;
    d->sel_proj = (char *)d->compute + (size_t)d->params[i + 2].offset * e;
}

// dflash2_grad_buckets: DFlash's buckets for its tensors; a layer's conv tensors are final with the
// layer's block backward (they see only the block's slots, never the context); the selector's with
// the last layer's (bucket 0: its gradient is complete once the last chunk's loss has run).
static int dflash2_grad_buckets(const drafter *d, int *bucket_of) {
    int L = (int)d->cfg.n_layers, first = dflash2_first_conv(&d->cfg);
    if (d->n_params != first + 4 * L + 3)
        return error_set("gradient buckets: %d parameters for %d DFlash2 layers is not the drafter's layout", d->n_params, L);
    drafter base = *d; // DFlash's view: its tensors only
    base.n_params = first;
    if (drafter_dflash_grad_buckets(&base, bucket_of)) return -1;
    for (int l = 0; l < L; l++)
        for (int j = 0; j < 4; j++) {
            const char *nm = d->params[first + 4 * l + j].name;
            if (!strstr(nm, conv_names[j / 2]))
                return error_set("gradient buckets: %s is not in the DFlash2 drafter's order", nm);
            bucket_of[first + 4 * l + j] = grad_bucket_block(L, l);
        }
    for (int j = 0; j < 3; j++) {
        if (!strstr(d->params[first + 4 * L + j].name, "candidate_selector."))
            return error_set("gradient buckets: %s is not in the DFlash2 drafter's order", d->params[first + 4 * L + j].name);
        bucket_of[first + 4 * L + j] = grad_bucket_block(L, L - 1);
    }
    return 0;
}

static void dflash2_defaults(drafter_config *c) {
    c->conv_kernel = 2;
    c->conv_group = 16;
    c->selector_top_k = 16;
    c->selector_rank = 256;
}

// dflash2_config_parse: the four keys, dflash_config's spelling winning over the root's.
static int dflash2_config_parse(drafter_config *c, const cJSON *root, const cJSON *dflash, const char *src) {
    const char *keys[4] = {"conv_kernel_size", "conv_group_size", "selector_top_k", "selector_rank"};
    int64_t *vals[4] = {&c->conv_kernel, &c->conv_group, &c->selector_top_k, &c->selector_rank};
    for (int i = 0; i < 4; i++) {
        if (json_get_positive(root, keys[i], src, vals[i])) return -1;
        if (dflash && json_get_positive(dflash, keys[i], src, vals[i])) return -1;
    }
    if (c->hidden % c->conv_group)
        return error_set("%s: 'conv_group_size' %lld does not divide hidden_size %lld", src, (long long)c->conv_group,
                         (long long)c->hidden);
    if (c->selector_top_k > OPS_TOPK_MAX) // the student's top-K rows (ops_topk, the CUDA loss) keep at most this many
        return error_set("%s: 'selector_top_k' %lld is above %d, the most candidates the student's top-K keeps", src,
                         (long long)c->selector_top_k, OPS_TOPK_MAX);
    if (c->selector_top_k > c->vocab)
        return error_set("%s: 'selector_top_k' %lld is larger than vocab_size %lld", src, (long long)c->selector_top_k,
                         (long long)c->vocab);
    if (c->conv_kernel > c->block_size)
        return error_set("%s: 'conv_kernel_size' %lld is longer than the block (block_size %lld)", src,
                         (long long)c->conv_kernel, (long long)c->block_size);
    return 0;
}

static void dflash2_config_write(const drafter_config *c, cJSON *root, cJSON *dflash) {
    (void)root;
    cJSON_AddNumberToObject(dflash, "conv_kernel_size", (double)c->conv_kernel);
    cJSON_AddNumberToObject(dflash, "conv_group_size", (double)c->conv_group);
    cJSON_AddNumberToObject(dflash, "selector_top_k", (double)c->selector_top_k);
    cJSON_AddNumberToObject(dflash, "selector_rank", (double)c->selector_rank);
}

const drafter_kind drafter_kind_dflash2 = {
    .name = "dflash2",
    .architecture = "DFlash2DraftModel",
    .model_type = "qwen3",
    .param_list = dflash2_param_list,
    .bind = dflash2_bind,
    .grad_buckets = dflash2_grad_buckets,
    .defaults = dflash2_defaults,
    .config_parse = dflash2_config_parse,
    .config_write = dflash2_config_write,
};
