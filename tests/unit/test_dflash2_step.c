// test_dflash2_step.c: the student step of a DFlash2 drafter (drafter.kind dflash2: the two grouped
// dynamic causal convolutions per layer, SPEC §3.1) on the CPU backend:
//   1. gradients = finite differences of the step's loss, per tensor (both convs' base_kernel and
//      kernel_projection of both layers, and DFlash tensors the convs sit between: q/k/v/o, MLP,
//      norms, fc), along the tensor's own gradient direction g/|g|: (L(w + h u) - L(w - h u)) / 2h
//      must equal |g|. CAP is off (lambda 0: its argmax is held constant, a jump for finite
//      differences); the loss is (1 - alpha) sum w CE + alpha sum w KL, in double over fp32 rows.
//      h = 1e-3 along a unit vector (it was 3e-3 before the selector; see below). Truncation ~h^2: at h = 1e-2 the worst tensor (layer 0's
//      attention kernel_projection, weights x8 so the loss ~130 is far from linear) erred 4e-3,
//      at 3e-3 4e-4 (the h^2 ratio); fp32 roundoff of the loss (~1e-7 of 130) / h is ~5e-6 of
//      |g| ~ 10. Tolerance 2e-3 relative, while a missing conv term, a wrong tap or a wrong half
//      of the projection errs by O(1).
//      The selector (top-k 13 of V 64, rank 7, selector_weight 1.7) is in the loss and its three
//      tensors in the check; the predecessor codebook's gradient rows must be zero for tokens that
//      are no batch token (never a predecessor) and not all zero elsewhere, and its slots are counted (hits and misses). The
//      selector's CE is only piecewise smooth (it jumps where a candidate enters or leaves the
//      top-k, or the label's hit flips): at h 1e-2 q_proj's direction crossed a jump (rel 4.2), at
//      3e-3 k_proj's erred 3.4e-3, at 1e-3 the worst tensor errs 3.7e-4 (the successor codebook,
//      |g| 0.85: fp32 roundoff of the loss ~1.5e-5 / h over a small |g|), under the 2e-3 tolerance.
//   2. the anchor-chunk scheme stays exact: the gradients with chunks of 2 anchors equal those of
//      one chunk of all 9 (the convolutions never cross a block), to 1e-5 relative (fp32 sums in
//      another order).
//   3. the chain acceptance (and so tau_decode's walk, SPEC §6) follows the selector's greedy
//      choice, not the logits' argmax: (a) with identity convolutions (kernel projections 0, base
//      kernels 1 at offset 0) and a zero predecessor codebook the selector's scores are the
//      candidates' log-probs, so its choice is the argmax and the per-anchor matches of
//      student_eval equal, exactly, those of a DFlash drafter with the same trunk; (b) with the
//      codebooks scaled up the matches differ from the DFlash drafter's on some anchor, and they
//      sum to the step's tau_chain (both read the same walk).
// Conv weights are set away from their identity init, so every term is exercised.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "student/loss/loss_config.h"
#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/model/memory_plan.h"
#include "student/model/step.h"
#include "testing.h"

#define H 32
#define V 64
#define NF 2
#define ST 40
#define NSEQ 2
#define TK 4
#define NA 9
#define FD_H 1e-3
#define FD_TOL 2e-3
#define CHUNK_TOL 1e-5
#define FIT_STEPS 60
#define FIT_LR 0.3

static const char *shape_json =
    "{\"architectures\": [\"DFlash2DraftModel\"], \"model_type\": \"qwen3\", \"vocab_size\": 64, \"hidden_size\": 32, "
    "\"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
    "\"head_dim\": 8, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"max_position_embeddings\": 512, "
    "\"num_target_layers\": 4, \"tie_word_embeddings\": true, \"layer_types\": [\"sliding_attention\", \"full_attention\"], "
    "\"use_sliding_window\": true, \"sliding_window\": 6, \"dflash_config\": {\"block_size\": 5, "
    "\"mask_token_id\": 63, \"target_layer_ids\": [1, 2], \"conv_kernel_size\": 3, \"conv_group_size\": 4, "
    "\"selector_top_k\": 13, \"selector_rank\": 7}}";

// the same drafter as DFlash (no convolutions, no selector): part 3's reference
static const char *shape_json_dflash =
    "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"vocab_size\": 64, \"hidden_size\": 32, "
    "\"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
    "\"head_dim\": 8, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"max_position_embeddings\": 512, "
    "\"num_target_layers\": 4, \"tie_word_embeddings\": true, \"layer_types\": [\"sliding_attention\", \"full_attention\"], "
    "\"use_sliding_window\": true, \"sliding_window\": 6, \"dflash_config\": {\"block_size\": 5, "
    "\"mask_token_id\": 63, \"target_layer_ids\": [1, 2]}}";

static float unif(uint64_t i) { // deterministic values in [-1, 1)
    uint64_t z = i * 0x9e3779b97f4a7c15ull + 12345;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (float)((double)((z ^ (z >> 31)) >> 40) / 8388608.0 - 1.0);
}

static drafter d;
static backend be;
static student_plan plan;
static student_work *w;
static student_batch b;
static loss_config lc;
static int32_t tokens[ST], cu[NSEQ + 1] = {0, 18, ST}, topk_idx[ST * TK], anchors[NA];
static uint8_t mask[ST];
static float feat[ST * NF * H], topk_val[ST * TK], lse[ST];

static step_stats st;

static double step(double *loss) { // gradients into d.grad (zeroed first); the loss
    memset(&st, 0, sizeof st);
    backend_memset_zero(&be, d.grad, (size_t)d.numel * sizeof(float));
    CHECK_MSG(student_step(&d, &lc, &plan, w, &b, anchors, NA, &st) == 0, "student_step: %s", error_msg());
    *loss = (1 - lc.alpha) * st.sum_w_term[LOSS_TERM_CE] + lc.alpha * st.sum_w_term[LOSS_TERM_KL] + lc.selector_weight * st.sum_w_term[LOSS_TERM_SEL];
    return *loss;
}

int main(void) {
    if (backend_open(&be, "cpu", 0) != 0) return fprintf(stderr, "%s\n", error_msg()), 1;
    drafter_config c;
    if (drafter_config_parse(&c, shape_json, "test shape")) return fprintf(stderr, "%s\n", error_msg()), 1;
    float *emb = xmalloc((size_t)V * H * sizeof(float));
    for (int i = 0; i < V * H; i++) emb[i] = 0.3f * unif((uint64_t)i);
    int64_t shp[2] = {V, H};
    if (drafter_init(&d, &c, &be, 7, tensor_make(DT_F32, emb, DEVICE_CPU, 2, shp), NULL))
        return fprintf(stderr, "%s\n", error_msg()), 1;
    free(emb);
    for (int i = 0; i < d.n_params; i++) { // conv weights away from the identity init, larger matrices
        const drafter_param *p = &d.params[i];
        if (strstr(p->name, "_conv.")) {
            int base = strstr(p->name, "base_kernel") != NULL;
            for (int64_t j = 0; j < p->numel; j++) d.master[p->offset + j] = (base ? 0.4f : 0.15f) * unif((uint64_t)(i * 7919 + j)) + (base ? d.master[p->offset + j] : 0.0f);
        } else if (!p->is_norm) {
            for (int64_t j = 0; j < p->numel; j++) d.master[p->offset + j] *= 8.0f;
        }
    }
    drafter_sync_compute(&d);
    for (int t = 0; t < ST; t++) {
        tokens[t] = (int32_t)((t * 7 + 3) % (V - 1));
        mask[t] = t != 9;
        lse[t] = 3.0f;
        for (int j = 0; j < TK; j++) topk_idx[t * TK + j] = (t * 5 + j * 11) % V, topk_val[t * TK + j] = 2.0f - 0.3f * (float)j;
    }
    for (int i = 0; i < ST * NF * H; i++) feat[i] = unif((uint64_t)i + 999);
    for (int i = 0; i < NA; i++) anchors[i] = i < 5 ? 1 + 3 * i : 19 + 4 * (i - 5);
    int64_t fshape[2] = {ST, NF * H};
    b = (student_batch){.S = ST, .n_seq = NSEQ, .k = TK, .tokens = tokens, .loss_mask = mask, .cu_seqlens = cu,
                        .features = tensor_make(DT_F32, feat, DEVICE_CPU, 2, fshape), .topk_idx = topk_idx,
                        .topk_val = topk_val, .lse = lse};
    loss_config_default(&lc, 5);
    lc.lambda = 0;
    lc.selector_weight = 1.7; // not 1: a weight applied twice or not at all shows

    // 1. finite differences, one chunk of all anchors
    plan_request pr = {.max_tokens = ST, .max_seqs = NSEQ, .max_anchors = NA, .k = TK, .tied = 1, .force_chunk = NA,
                       .force_mode = -1};
    plan_breakdown bd;
    CHECK(plan_make(&d.cfg, &be, &pr, &plan, &bd) == 0);
    arena work;
    CHECK(arena_init(&work, "student work", &be, student_work_bytes(&d, &plan)) == 0);
    w = student_work_create(&d, &plan, &work);
    double l0;
    step(&l0);
    int64_t scored = 0;
    for (int j = 1; j < 5; j++) scored += st.slot_scored[j];
    printf("  selector: %lld scored slots, %lld misses, weighted k-way CE %.4f\n", (long long)st.term_scored[LOSS_TERM_SEL],
           (long long)st.term_miss[LOSS_TERM_SEL], st.sum_w_term[LOSS_TERM_SEL]);
    CHECK(st.term_scored[LOSS_TERM_SEL] == scored && st.term_miss[LOSS_TERM_SEL] > 0 && st.term_miss[LOSS_TERM_SEL] < scored && st.sum_w_term[LOSS_TERM_SEL] > 0);
    const drafter_param *pc = drafter_find(&d, "candidate_selector.predecessor_codebook");
    int used[V] = {0}, untouched_ok = 1, touched = 0;
    for (int t = 0; t < ST; t++) used[tokens[t]] = 1;
    for (int v = 0; v < V; v++)
        for (int64_t i = 0; i < pc->shape[1]; i++) {
            float gv = d.grad[pc->offset + v * pc->shape[1] + i];
            if (!used[v] && gv != 0) untouched_ok = 0;
            if (used[v] && gv != 0) touched = 1;
        }
    CHECK_MSG(untouched_ok && touched, "predecessor codebook gradient: rows of unused tokens %s, used rows %s",
              untouched_ok ? "zero" : "NOT zero", touched ? "touched" : "all zero");
    size_t bytes = (size_t)d.numel * sizeof(float);
    float *g = xmalloc(bytes), *w0 = xmalloc(bytes);
    memcpy(g, d.grad, bytes);
    memcpy(w0, d.master, bytes);
    const char *names[] = {"layers.0.attention_conv.base_kernel", "layers.0.attention_conv.kernel_projection.weight",
                           "layers.0.mlp_conv.base_kernel",       "layers.0.mlp_conv.kernel_projection.weight",
                           "layers.1.attention_conv.base_kernel", "layers.1.attention_conv.kernel_projection.weight",
                           "layers.1.mlp_conv.base_kernel",       "layers.1.mlp_conv.kernel_projection.weight",
                           "layers.0.self_attn.q_proj.weight",    "layers.0.self_attn.k_proj.weight",
                           "layers.1.self_attn.v_proj.weight",    "layers.1.self_attn.o_proj.weight",
                           "layers.0.mlp.down_proj.weight",       "layers.1.mlp.up_proj.weight",
                           "layers.0.input_layernorm.weight",     "layers.1.post_attention_layernorm.weight",
                           "fc.weight",                           "norm.weight",
                           "candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook",
                           "candidate_selector.hidden_projection.weight"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        const drafter_param *p = drafter_find(&d, names[n]);
        if (!p) {
            CHECK_MSG(0, "no tensor %s", names[n]);
            continue;
        }
        double norm = 0;
        for (int64_t j = 0; j < p->numel; j++) norm += (double)g[p->offset + j] * g[p->offset + j];
        norm = sqrt(norm);
        double lp, lm;
        for (int64_t j = 0; j < p->numel; j++) d.master[p->offset + j] = (float)(w0[p->offset + j] + FD_H * g[p->offset + j] / norm);
        drafter_sync_compute(&d);
        step(&lp);
        for (int64_t j = 0; j < p->numel; j++) d.master[p->offset + j] = (float)(w0[p->offset + j] - FD_H * g[p->offset + j] / norm);
        drafter_sync_compute(&d);
        step(&lm);
        memcpy(d.master, w0, bytes);
        drafter_sync_compute(&d);
        double fd = (lp - lm) / (2 * FD_H), rel = fabs(fd - norm) / norm;
        printf("  fd %-50s |g| %.4e  fd %.4e  rel %.2e\n", names[n], norm, fd, rel);
        CHECK_MSG(norm > 0 && rel <= FD_TOL, "%s: directional derivative %.6g, |grad| %.6g", names[n], fd, norm);
    }
    student_work_destroy(w);
    arena_free(&work);

    // 2. chunks of 2 anchors: the same gradients
    pr.force_chunk = 2;
    CHECK(plan_make(&d.cfg, &be, &pr, &plan, &bd) == 0 && plan.chunk_anchors == 2);
    CHECK(arena_init(&work, "student work", &be, student_work_bytes(&d, &plan)) == 0);
    w = student_work_create(&d, &plan, &work);
    double l2;
    step(&l2);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < d.numel; i++) worst = fmax(worst, fabs(d.grad[i] - g[i])), scale = fmax(scale, fabs(g[i]));
    printf("  chunks of 2 vs 9: loss %.9g vs %.9g, max |dgrad| / max |grad| %.2e\n", l2, l0, worst / scale);
    CHECK(fabs(l2 - l0) <= CHUNK_TOL * fabs(l0) && worst <= CHUNK_TOL * scale);
    student_work_destroy(w);
    arena_free(&work);
    free(g);
    free(w0);

    // 3. the chain follows the selector (see the header)
    drafter_config c1;
    drafter d1;
    CHECK(drafter_config_parse(&c1, shape_json_dflash, "test shape (dflash)") == 0);
    emb = xmalloc((size_t)V * H * sizeof(float));
    for (int i = 0; i < V * H; i++) emb[i] = 0.3f * unif((uint64_t)i);
    CHECK(drafter_init(&d1, &c1, &be, 11, tensor_make(DT_F32, emb, DEVICE_CPU, 2, shp), NULL) == 0);
    free(emb);
    for (int i = 0; i < d1.n_params; i++) { // d's trunk into d1
        const drafter_param *p1 = &d1.params[i], *p2 = drafter_find(&d, p1->name);
        CHECK_MSG(p2 && p2->numel == p1->numel, "no tensor %s in the DFlash2 drafter", p1->name);
        if (p2 && p2->numel == p1->numel) memcpy(d1.master + p1->offset, d.master + p2->offset, (size_t)p1->numel * sizeof(float));
    }
    drafter_sync_compute(&d1);
    // a teacher whose greedy token is the data's next token, and d1 fitted to the batch by plain
    // gradient descent (steps of fixed length along -g/|g|), so that its argmax matches on some slots
    for (int t = 0; t + 1 < ST; t++) topk_idx[t * TK] = tokens[t + 1], topk_val[t * TK] = 4.0f;
    {
        student_plan pf;
        arena wf;
        CHECK(plan_make(&d1.cfg, &be, &pr, &pf, &bd) == 0);
        CHECK(arena_init(&wf, "student work (fit)", &be, student_work_bytes(&d1, &pf)) == 0);
        student_work *ww = student_work_create(&d1, &pf, &wf);
        for (int it = 0; it < FIT_STEPS; it++) {
            memset(&st, 0, sizeof st);
            backend_memset_zero(&be, d1.grad, (size_t)d1.numel * sizeof(float));
            CHECK(student_step(&d1, &lc, &pf, ww, &b, anchors, NA, &st) == 0);
            double gn = 0;
            for (int64_t j = 0; j < d1.numel; j++) gn += (double)d1.grad[j] * d1.grad[j];
            gn = sqrt(gn) + 1e-30;
            for (int64_t j = 0; j < d1.numel; j++) d1.master[j] -= (float)(FIT_LR * d1.grad[j] / gn);
            drafter_sync_compute(&d1);
        }
        student_work_destroy(ww);
        arena_free(&wf);
    }
    for (int i = 0; i < d1.n_params; i++) { // and back into d's trunk
        const drafter_param *p1 = &d1.params[i], *p2 = drafter_find(&d, p1->name);
        if (p2 && p2->numel == p1->numel) memcpy(d.master + p2->offset, d1.master + p1->offset, (size_t)p1->numel * sizeof(float));
    }
    for (int i = 0; i < d.n_params; i++) { // identity convolutions, a zero predecessor codebook
        const drafter_param *p = &d.params[i];
        if (strstr(p->name, "_conv.") || !strcmp(p->name, "candidate_selector.predecessor_codebook"))
            for (int64_t j = 0; j < p->numel; j++) // base [2, K, H]: offset o = (j / H) % K
                d.master[p->offset + j] = p->is_delta && (j / p->shape[2]) % p->shape[1] == 0 ? 1.0f : 0.0f;
    }
    drafter_sync_compute(&d);
    int32_t m1[NA], m2[NA], m3[NA];
    student_plan p1;
    pr.force_chunk = NA;
    CHECK(plan_make(&d1.cfg, &be, &pr, &p1, &bd) == 0);
    arena work1;
    CHECK(arena_init(&work1, "student work (dflash)", &be, student_work_bytes(&d1, &p1)) == 0);
    student_work *w1 = student_work_create(&d1, &p1, &work1);
    memset(&st, 0, sizeof st);
    CHECK(student_eval(&d1, &lc, &p1, w1, &b, anchors, NA, &st, m1) == 0);
    CHECK(plan_make(&d.cfg, &be, &pr, &plan, &bd) == 0);
    CHECK(arena_init(&work, "student work", &be, student_work_bytes(&d, &plan)) == 0);
    w = student_work_create(&d, &plan, &work);
    memset(&st, 0, sizeof st);
    CHECK(student_eval(&d, &lc, &plan, w, &b, anchors, NA, &st, m2) == 0);
    int same = 0, differ = 0, sum1 = 0;
    for (int i = 0; i < NA; i++) same += m1[i] == m2[i], sum1 += m1[i];
    printf("  selector with a zero predecessor codebook: %d of %d anchors' matches equal the DFlash drafter's "
           "(%d matched slots in all)\n", same, NA, sum1);
    CHECK(same == NA && sum1 > 0);
    const drafter_param *sp[2] = {drafter_find(&d, "candidate_selector.predecessor_codebook"),
                                  drafter_find(&d, "candidate_selector.successor_codebook")};
    for (int s2 = 0; s2 < 2; s2++)
        for (int64_t j = 0; j < sp[s2]->numel; j++) d.master[sp[s2]->offset + j] = 3.0f * unif((uint64_t)(s2 * 100003 + j));
    drafter_sync_compute(&d);
    memset(&st, 0, sizeof st);
    CHECK(student_eval(&d, &lc, &plan, w, &b, anchors, NA, &st, m3) == 0);
    double chain = 0;
    for (int i = 0; i < NA; i++) differ += m1[i] != m3[i], chain += m3[i] + 1;
    printf("  selector with large codebooks: %d of %d anchors' matches differ from the argmax's; chain %.0f, "
           "tau_chain sum %.0f\n", differ, NA, chain, st.tau_chain_sum);
    CHECK(differ > 0 && fabs(chain - st.tau_chain_sum) < 1e-9);
    student_work_destroy(w);
    arena_free(&work);
    student_work_destroy(w1);
    arena_free(&work1);
    drafter_free(&d1);
    drafter_free(&d);
    backend_close(&be);
    return test_finish("test_dflash2_step");
}
