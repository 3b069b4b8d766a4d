// test_dflash2_step_cuda.c: one whole student step of a tiny DFlash2 drafter (the two dynamic
// convolutions per layer and the candidate selector) on CUDA against the CPU backend (skipped,
// exit 77, without a CUDA device; runs in the emulator build). Shape: V 37, H 24 (3 heads of 8,
// 1 KV head), 2 layers (one sliding window), block 5, conv kernel 3 in groups of 4, selector top-k =
// V = 37 (every label is a candidate: a candidate entering or leaving a smaller top-k where two
// student logits nearly tie would flip a row's hit under bf16 noise, a jump no tolerance covers;
// misses and a k below the rows' stride are test_selector_cuda's), rank 7; 2 sequences, 8 anchors
// in chunks of 3 (a partial last chunk, slots past a sequence's end).
// Both drafters hold the same weights, rounded to bf16 (the CPU computes with those values in fp32),
// and get the same batch (bf16-exact features); only the precision of the computation differs:
// the CUDA step rounds every activation to bf16 (2^-9 relative) through 2 layers, the loss and the
// selector, where the CPU keeps fp32. Compared, relative to the CPU's value:
//   the step's weighted CE, KL and selector CE sums                   2e-2
//   per tensor, max |g_cuda - g_cpu| / max |g_cpu| of the gradient    5e-2 (the selector's three
//       tensors, both convs' base kernels and projections of layer 0, q_proj, fc): bf16 activations
//       in the backward too, ~2e-2 seen; a missing term, a wrong predecessor or a dropped
//       accumulation errs by O(1)
//   the scored slots, no misses, the chain acceptance (the selector's choices)   exact
// (A CUDA selector that adds nothing to dx errs 0.8-1.3 on the trunk's tensors here.)
// The selector's tensors are scaled up from their 0.02 init so that its bilinear term matters.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/half.h"
#include "common/core/rng.h"
#include "student/loss/loss_config.h"
#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/model/memory_plan.h"
#include "student/model/step.h"
#include "testing.h"
#include "testing_device.h"

#define VOC 37
#define HID 24
#define NFEAT 2
#define TOKS 30
#define TOPK 4
#define ANCH 8
#define TOL_SUM 2e-2
#define TOL_GRAD 5e-2

static const char *cfg_json =
    "{\"architectures\": [\"DFlash2DraftModel\"], \"model_type\": \"qwen3\", \"vocab_size\": 37, \"hidden_size\": 24, "
    "\"intermediate_size\": 40, \"num_hidden_layers\": 2, \"num_attention_heads\": 3, \"num_key_value_heads\": 1, "
    "\"head_dim\": 8, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"max_position_embeddings\": 256, "
    "\"num_target_layers\": 4, \"tie_word_embeddings\": true, \"layer_types\": [\"full_attention\", \"sliding_attention\"], "
    "\"use_sliding_window\": true, \"sliding_window\": 5, \"dflash_config\": {\"block_size\": 5, "
    "\"mask_token_id\": 36, \"target_layer_ids\": [1, 3], \"conv_kernel_size\": 3, \"conv_group_size\": 4, "
    "\"selector_top_k\": 37, \"selector_rank\": 7}}";

static float bf16_round(float v) { return f32_from_bf16(bf16_from_f32(v)); }

typedef struct {
    backend be;
    drafter d;
    student_plan plan;
    arena work;
    student_work *w;
    step_stats st;
    float *grad; // host copy of d.grad after the step
} side;

// one drafter on a backend with the CPU side's (bf16-exact) master weights and one step
static void side_step(side *s, const drafter_config *c, const float *emb, const float *master, const student_batch *b,
                      const int32_t *anchors, const loss_config *lc) {
    int64_t shp[2] = {VOC, HID};
    CHECK_MSG(drafter_init(&s->d, c, &s->be, 11, tensor_make(DT_F32, (void *)emb, DEVICE_CPU, 2, shp), NULL) == 0,
              "drafter_init on %s: %s", s->be.name, error_msg());
    backend_copy_to_device(&s->be, s->d.master, master, (size_t)s->d.numel * sizeof(float));
    drafter_sync_compute(&s->d);
    plan_request pr = {.max_tokens = TOKS, .max_seqs = 2, .max_anchors = ANCH, .k = TOPK, .tied = 1, .force_chunk = 3,
                       .force_mode = -1};
    plan_breakdown bd;
    CHECK(plan_make(&s->d.cfg, &s->be, &pr, &s->plan, &bd) == 0 && s->plan.chunk_anchors == 3);
    CHECK(arena_init(&s->work, "student work", &s->be, student_work_bytes(&s->d, &s->plan)) == 0);
    s->w = student_work_create(&s->d, &s->plan, &s->work);
    backend_memset_zero(&s->be, s->d.grad, (size_t)s->d.numel * sizeof(float));
    memset(&s->st, 0, sizeof s->st);
    CHECK_MSG(student_step(&s->d, lc, &s->plan, s->w, b, anchors, ANCH, &s->st) == 0, "student_step on %s: %s",
              s->be.name, error_msg());
    s->grad = dev_down_f32(&s->be, s->d.grad, (size_t)s->d.numel);
}

static void side_free(side *s) {
    student_work_destroy(s->w);
    arena_free(&s->work);
    free(s->grad);
    drafter_free(&s->d);
    backend_close(&s->be);
}

static double rel(double a, double ref) { return fabs(a - ref) / fmax(fabs(ref), 1e-30); }

int main(void) {
    side cpu, gpu;
    memset(&cpu, 0, sizeof cpu);
    memset(&gpu, 0, sizeof gpu);
    int rc = test_open_devices(&cpu.be, &gpu.be);
    if (rc) return rc;
    drafter_config c;
    if (drafter_config_parse(&c, cfg_json, "test shape")) return fprintf(stderr, "%s\n", error_msg()), 1;
    rng g;
    rng_init(&g, 99, 0, 0);
    float *emb = xmalloc((size_t)VOC * HID * sizeof(float));
    for (int i = 0; i < VOC * HID; i++) emb[i] = bf16_round((float)(0.6 * rng_uniform(&g) - 0.3));

    // the batch: two sequences, the teacher's top-4 with distinct ids, bf16-exact features
    static int32_t tokens[TOKS], cu[3] = {0, 13, TOKS}, topk_idx[TOKS * TOPK];
    static int32_t anchors[ANCH] = {0, 3, 5, 9, 13, 17, 22, 27}; // 9 and 27: slots past their sequence's end
    static uint8_t mask[TOKS];
    static float feat[TOKS * NFEAT * HID], topk_val[TOKS * TOPK], lse[TOKS];
    for (int t = 0; t < TOKS; t++) {
        tokens[t] = (int32_t)rng_below(&g, VOC - 1);
        mask[t] = t != 6;
        lse[t] = 2.5f;
        for (int j = 0; j < TOPK; j++) topk_idx[t * TOPK + j] = (t * 3 + j * 9) % VOC, topk_val[t * TOPK + j] = 1.5f - 0.4f * (float)j;
    }
    for (int i = 0; i < TOKS * NFEAT * HID; i++) feat[i] = bf16_round((float)(2 * rng_uniform(&g) - 1));
    int64_t fshape[2] = {TOKS, NFEAT * HID};
    student_batch b = {.S = TOKS, .n_seq = 2, .k = TOPK, .tokens = tokens, .loss_mask = mask, .cu_seqlens = cu,
                       .features = tensor_make(DT_F32, feat, DEVICE_CPU, 2, fshape), .topk_idx = topk_idx,
                       .topk_val = topk_val, .lse = lse};
    loss_config lc;
    loss_config_default(&lc, 5);
    lc.lambda = 0; // CAP's held-constant argmax may flip under bf16 noise; it is tested elsewhere
    lc.selector_weight = 1.3;

    // the weights: the CPU drafter's init, scaled (the selector's x30, matrices x4), rounded to bf16
    int64_t shp[2] = {VOC, HID};
    CHECK(drafter_init(&cpu.d, &c, &cpu.be, 11, tensor_make(DT_F32, emb, DEVICE_CPU, 2, shp), NULL) == 0);
    float *master = xmalloc((size_t)cpu.d.numel * sizeof(float));
    memcpy(master, cpu.d.master, (size_t)cpu.d.numel * sizeof(float));
    for (int i = 0; i < cpu.d.n_params; i++) {
        const drafter_param *p = &cpu.d.params[i];
        float f = strstr(p->name, "candidate_selector.") ? 30.0f : p->is_norm || strstr(p->name, "base_kernel") ? 1.0f : 4.0f;
        for (int64_t j = 0; j < p->numel; j++) master[p->offset + j] = bf16_round(f * master[p->offset + j]);
    }
    drafter_free(&cpu.d);
    side_step(&cpu, &c, emb, master, &b, anchors, &lc);
    side_step(&gpu, &c, emb, master, &b, anchors, &lc);

    printf("%s vs %s\n", gpu.be.name, cpu.be.name);
    printf("  CPU step: sum w %.5g, w CE %.6g, w KL %.6g, w selector CE %.6g; %lld scored, %lld misses, chain %.3g\n",
           cpu.st.sum_w, cpu.st.sum_w_term[LOSS_TERM_CE], cpu.st.sum_w_term[LOSS_TERM_KL], cpu.st.sum_w_term[LOSS_TERM_SEL], (long long)cpu.st.term_scored[LOSS_TERM_SEL],
           (long long)cpu.st.term_miss[LOSS_TERM_SEL], cpu.st.tau_chain_sum);
    printf("  CUDA step: sum w %.5g, w CE %.6g, w KL %.6g, w selector CE %.6g; %lld scored, %lld misses, chain %.3g\n",
           gpu.st.sum_w, gpu.st.sum_w_term[LOSS_TERM_CE], gpu.st.sum_w_term[LOSS_TERM_KL], gpu.st.sum_w_term[LOSS_TERM_SEL], (long long)gpu.st.term_scored[LOSS_TERM_SEL],
           (long long)gpu.st.term_miss[LOSS_TERM_SEL], gpu.st.tau_chain_sum);
    CHECK(cpu.st.term_scored[LOSS_TERM_SEL] > 20 && cpu.st.term_miss[LOSS_TERM_SEL] == 0); // k = V: every label is a candidate
    CHECK(gpu.st.term_scored[LOSS_TERM_SEL] == cpu.st.term_scored[LOSS_TERM_SEL] && gpu.st.term_miss[LOSS_TERM_SEL] == 0 && gpu.st.tau_chain_sum == cpu.st.tau_chain_sum);
    test_report("step sum w", rel(gpu.st.sum_w, cpu.st.sum_w), TOL_SUM);
    test_report("step sum w CE", rel(gpu.st.sum_w_term[LOSS_TERM_CE], cpu.st.sum_w_term[LOSS_TERM_CE]), TOL_SUM);
    test_report("step sum w KL", rel(gpu.st.sum_w_term[LOSS_TERM_KL], cpu.st.sum_w_term[LOSS_TERM_KL]), TOL_SUM);
    test_report("step sum w selector CE", rel(gpu.st.sum_w_term[LOSS_TERM_SEL], cpu.st.sum_w_term[LOSS_TERM_SEL]), TOL_SUM);
    const char *names[] = {"candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook",
                           "candidate_selector.hidden_projection.weight", "layers.0.attention_conv.base_kernel",
                           "layers.0.attention_conv.kernel_projection.weight", "layers.0.mlp_conv.base_kernel",
                           "layers.0.mlp_conv.kernel_projection.weight", "layers.1.self_attn.q_proj.weight", "fc.weight"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        const drafter_param *p = drafter_find(&cpu.d, names[n]);
        CHECK_MSG(p != NULL, "no tensor %s", names[n]);
        if (!p) continue;
        char what[96];
        snprintf(what, sizeof what, "grad %s", names[n]);
        test_report(what, test_rel_err(gpu.grad + p->offset, cpu.grad + p->offset, (size_t)p->numel), TOL_GRAD);
    }
    free(emb);
    free(master);
    side_free(&gpu);
    side_free(&cpu);
    return test_finish("test_dflash2_step_cuda");
}
