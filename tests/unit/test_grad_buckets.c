// test_grad_buckets.c: the gradient buckets of the students' all-reduce (student/model/grad_buckets.h).
//   1. coverage: for 1 to 4 layers, the ranges of all buckets tile the flat gradient [0, numel)
//      exactly once, each bucket's ranges are increasing and apart, and every parameter lies in the
//      bucket grad_buckets.h gives it (k_proj, v_proj, k_norm in its layer's context bucket, the
//      rest of a layer in its block bucket, the final norm with the last layer, fc and hidden_norm
//      last);
//   2. order: whatever hooks a step reaches (none, all, some, repeated, out of order, past the end),
//      every step issues buckets 0 .. 2L once each, in that order, by grad_buckets_finish;
//   3. the hooks of a real step (CPU backend, 2 layers, 3 chunks): student_step calls them once per
//      bucket, in bucket order, and at each call the bucket's gradient already equals, bit for bit,
//      what the step ends with (while the fc gradient at the first call does not yet: the check can
//      fail); the step's gradients with the hook equal those without; a failing hook fails the step.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/model/grad_buckets.h"
#include "student/loss/loss_config.h"
#include "student/model/memory_plan.h"
#include "student/model/step.h"
#include "testing.h"

#define H 32
#define V 64
#define B 4
#define NF 2
// the batch of test 3: 40 tokens in 2 sequences, top-4, 9 anchors in chunks of 4 (3 chunks)
#define ST 40
#define NSEQ 2
#define TK 4
#define NA 9

// The drafter: H 32, 4/2 heads of 8, MLP 64, V 64, B 4, two target features, tied lm_head.
#define SHAPE_JSON                                                                                                   \
    "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"vocab_size\": 64, \"hidden_size\": 32, "    \
    "\"intermediate_size\": 64, \"num_hidden_layers\": %d, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "    \
    "\"head_dim\": 8, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"max_position_embeddings\": 512, "           \
    "\"num_target_layers\": 4, \"tie_word_embeddings\": true, \"dflash_config\": {\"block_size\": 4, "                 \
    "\"mask_token_id\": 63, \"target_layer_ids\": [1, 2]}}"

static drafter_config shape(int layers) {
    char json[1024];
    snprintf(json, sizeof json, SHAPE_JSON, layers);
    drafter_config c = {0};
    CHECK_MSG(drafter_config_parse(&c, json, "test shape") == 0, "drafter_config_parse: %s", error_msg());
    return c;
}

static float unif(uint64_t i) { // deterministic values in [-1, 1)
    uint64_t z = i * 0x9e3779b97f4a7c15ull + 12345;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (float)((double)((z ^ (z >> 31)) >> 40) / 8388608.0 - 1.0);
}

static int drafter_make(drafter *d, backend *be, int layers) {
    drafter_config c = shape(layers);
    float *emb = xmalloc((size_t)V * H * sizeof(float));
    for (int i = 0; i < V * H; i++) emb[i] = 0.05f * unif((uint64_t)i);
    int64_t shp[2] = {V, H};
    int rc = drafter_init(d, &c, be, 7, tensor_make(DT_F32, emb, DEVICE_CPU, 2, shp), NULL);
    free(emb);
    return rc;
}

// The bucket holding element `at` (-1: none).
static int bucket_at(const grad_buckets *gb, int64_t at) {
    for (int b = 0; b < gb->n_buckets; b++)
        for (int i = gb->first[b]; i < gb->first[b + 1]; i++)
            if (at >= gb->ranges[i].offset && at < gb->ranges[i].offset + gb->ranges[i].count) return b;
    return -1;
}

static int cmp_range(const void *a, const void *b) {
    int64_t x = ((const grad_range *)a)->offset, y = ((const grad_range *)b)->offset;
    return x < y ? -1 : x > y;
}

static void test_coverage(backend *be) {
    for (int L = 1; L <= 4; L++) {
        drafter d;
        if (drafter_make(&d, be, L)) {
            CHECK_MSG(0, "drafter_init: %s", error_msg());
            continue;
        }
        grad_buckets gb;
        CHECK(grad_buckets_plan(&gb, &d) == 0);
        CHECK(gb.n_buckets == 2 * L + 1);
        int nr = gb.first[gb.n_buckets];
        grad_range *all = xmalloc((size_t)nr * sizeof(grad_range));
        memcpy(all, gb.ranges, (size_t)nr * sizeof(grad_range));
        qsort(all, (size_t)nr, sizeof(grad_range), cmp_range);
        int64_t at = 0;
        for (int i = 0; i < nr; i++) {
            CHECK_MSG(all[i].offset == at && all[i].count > 0, "L %d: range %d starts at %lld, want %lld", L, i,
                      (long long)all[i].offset, (long long)at);
            at = all[i].offset + all[i].count;
        }
        CHECK_MSG(at == d.numel, "L %d: the ranges end at %lld of %lld", L, (long long)at, (long long)d.numel);
        for (int b = 0; b < gb.n_buckets; b++)
            for (int i = gb.first[b] + 1; i < gb.first[b + 1]; i++) // increasing, and apart (else one range)
                CHECK(gb.ranges[i].offset > gb.ranges[i - 1].offset + gb.ranges[i - 1].count);
        for (int p = 0; p < d.n_params; p++) {
            const char *nm = d.params[p].name;
            int want;
            if (p < 2) want = grad_bucket_front(L);
            else if (p == d.n_params - 1) want = grad_bucket_block(L, L - 1);
            else {
                int l = (p - 2) / 11;
                want = strstr(nm, "k_proj") || strstr(nm, "v_proj") || strstr(nm, "k_norm") ? grad_bucket_context(L, l)
                                                                                                : grad_bucket_block(L, l);
            }
            int first = bucket_at(&gb, d.params[p].offset), last = bucket_at(&gb, d.params[p].offset + d.params[p].numel - 1);
            CHECK_MSG(first == want && last == want, "L %d: %s in buckets %d..%d, want %d", L, nm, first, last, want);
        }
        // a layout that is not the drafter's is refused
        drafter bad = d;
        bad.n_params--;
        grad_buckets gb2;
        CHECK_ERR(grad_buckets_plan(&gb2, &bad), "not the drafter's layout");
        free(all);
        grad_buckets_free(&gb);
        drafter_free(&d);
    }
}

// What was issued: the bucket of each call, recognised by its first range.
typedef struct {
    const grad_buckets *gb;
    int order[64], n;
    int fail_at; // -1: never
} issued;

static int record(void *ctx, const grad_range *r, int n) {
    issued *is = ctx;
    int b = -1;
    for (int i = 0; i < is->gb->n_buckets; i++)
        if (is->gb->ranges + is->gb->first[i] == r && is->gb->first[i + 1] - is->gb->first[i] == n) b = i;
    if (is->n == is->fail_at) return -1;
    if (is->n < 64) is->order[is->n++] = b;
    return 0;
}

static void test_order(backend *be) {
    drafter d;
    if (drafter_make(&d, be, 3)) {
        CHECK_MSG(0, "drafter_init: %s", error_msg());
        return;
    }
    grad_buckets gb;
    CHECK(grad_buckets_plan(&gb, &d) == 0);
    int nb = gb.n_buckets; // 7
    // hook sequences of one step each (-1 ends a sequence)
    const int seqs[][12] = {
        {-1},                                   // a last micro-batch without anchors: no hook at all
        {0, 1, 2, 3, 4, 5, 6, -1},              // every hook, in order
        {0, 1, 2, -1},                          // some
        {2, 0, 2, 1, 5, 3, -1},                 // repeated and out of order (a bucket is never issued twice)
        {6, -1},                                // the last only: every bucket, in order
        {99, 0, -1},                            // past the end
    };
    issued is = {.gb = &gb, .fail_at = -1};
    for (int k = 0; k < (int)(sizeof seqs / sizeof seqs[0]); k++) {
        is.n = 0;
        for (int i = 0; seqs[k][i] >= 0; i++) CHECK(grad_buckets_ready(&gb, seqs[k][i], record, &is) == 0);
        CHECK(grad_buckets_finish(&gb, record, &is) == 0);
        CHECK_MSG(is.n == nb, "sequence %d: %d buckets issued, want %d", k, is.n, nb);
        for (int i = 0; i < is.n && i < nb; i++) CHECK_MSG(is.order[i] == i, "sequence %d: call %d issued bucket %d", k, i, is.order[i]);
        CHECK(gb.next == 0); // the next step starts over
    }
    // a failing issue stops there and is reported
    is.n = 0, is.fail_at = 2;
    CHECK(grad_buckets_ready(&gb, 5, record, &is) == -1);
    CHECK(is.n == 2);
    grad_buckets_free(&gb);
    drafter_free(&d);
}

// The hook of a real step: snapshots of each bucket's gradient when it is called.
typedef struct {
    drafter *d;
    grad_buckets gb;
    float *snap;       // [numel]: each bucket's values at its hook
    float *fc_at_first; // the fc bucket at the first hook
    int order[64], n;
} hook_log;

static int on_final(void *ctx, int b) {
    hook_log *h = ctx;
    if (h->n < 64) h->order[h->n] = b;
    if (h->n == 0) {
        int f = grad_bucket_front((int)h->d->cfg.n_layers);
        for (int i = h->gb.first[f]; i < h->gb.first[f + 1]; i++)
            memcpy(h->fc_at_first + h->gb.ranges[i].offset, h->d->grad + h->gb.ranges[i].offset,
                   (size_t)h->gb.ranges[i].count * sizeof(float));
    }
    h->n++;
    for (int i = h->gb.first[b]; i < h->gb.first[b + 1]; i++) // CPU backend: d->grad is host memory
        memcpy(h->snap + h->gb.ranges[i].offset, h->d->grad + h->gb.ranges[i].offset,
               (size_t)h->gb.ranges[i].count * sizeof(float));
    return 0;
}

static int hook_fails(void *ctx, int b) {
    (void)ctx;
    return b == 1 ? error_set("hook refused bucket %d", b) : 0;
}

static void test_step_hooks(backend *be) {
    const int L = 2, S = ST, K = TK, A = NA, C = 4;
    drafter d;
    if (drafter_make(&d, be, L)) {
        CHECK_MSG(0, "drafter_init: %s", error_msg());
        return;
    }
    int32_t tokens[ST], cu[NSEQ + 1] = {0, 18, ST}, topk_idx[ST * TK], anchors[NA];
    uint8_t mask[ST];
    float feat[ST * NF * H], topk_val[ST * TK], lse[ST];
    for (int t = 0; t < S; t++) {
        tokens[t] = (int32_t)((t * 7 + 3) % (V - 1));
        mask[t] = 1;
        lse[t] = 3.0f;
        for (int j = 0; j < K; j++) topk_idx[t * K + j] = (t * 5 + j * 11) % V, topk_val[t * K + j] = 2.0f - 0.3f * (float)j;
    }
    for (int i = 0; i < S * NF * H; i++) feat[i] = unif((uint64_t)i + 999);
    for (int i = 0; i < A; i++) anchors[i] = i < 5 ? 1 + 3 * i : 19 + 3 * (i - 5); // inside both sequences
    int64_t fshape[2] = {S, NF * H};
    student_batch b = {.S = S, .n_seq = NSEQ, .k = K, .tokens = tokens, .loss_mask = mask, .cu_seqlens = cu,
                       .features = tensor_make(DT_F32, feat, DEVICE_CPU, 2, fshape), .topk_idx = topk_idx,
                       .topk_val = topk_val, .lse = lse};
    plan_request pr = {.max_tokens = S, .max_seqs = NSEQ, .max_anchors = A, .k = K, .tied = 1, .force_chunk = C,
                       .force_mode = -1};
    student_plan plan;
    plan_breakdown bd;
    CHECK(plan_make(&d.cfg, be, &pr, &plan, &bd) == 0);
    CHECK(plan.chunk_anchors == C);
    loss_config lc;
    loss_config_default(&lc, B);
    arena work;
    CHECK(arena_init(&work, "student work", be, student_work_bytes(&d, &plan)) == 0);
    student_work *w = student_work_create(&d, &plan, &work);
    size_t bytes = (size_t)d.numel * sizeof(float);
    hook_log h = {.d = &d, .snap = xcalloc(1, bytes), .fc_at_first = xcalloc(1, bytes)};
    CHECK(grad_buckets_plan(&h.gb, &d) == 0);

    // without a hook
    step_stats st;
    memset(&st, 0, sizeof st);
    backend_memset_zero(be, d.grad, bytes);
    CHECK(student_step(&d, &lc, &plan, w, &b, anchors, A, &st) == 0);
    float *plain = xmalloc(bytes);
    memcpy(plain, d.grad, bytes);
    // with it
    memset(&st, 0, sizeof st);
    backend_memset_zero(be, d.grad, bytes);
    student_work_set_grad_hook(w, on_final, &h);
    CHECK(student_step(&d, &lc, &plan, w, &b, anchors, A, &st) == 0);
    student_work_set_grad_hook(w, NULL, NULL);
    CHECK_MSG(h.n == h.gb.n_buckets, "%d hook calls, want %d", h.n, h.gb.n_buckets);
    for (int i = 0; i < h.n && i < 64; i++) CHECK_MSG(h.order[i] == i, "hook call %d for bucket %d", i, h.order[i]);
    CHECK_MSG(memcmp(plain, d.grad, bytes) == 0, "the step's gradients differ with the hook");
    int64_t differ = 0, nonzero = 0;
    for (int64_t i = 0; i < d.numel; i++) differ += memcmp(&h.snap[i], &d.grad[i], sizeof(float)) != 0, nonzero += d.grad[i] != 0;
    CHECK_MSG(differ == 0, "%lld gradient elements changed after their bucket's hook", (long long)differ);
    CHECK_MSG(nonzero > d.numel / 2, "only %lld of %lld gradient elements are nonzero", (long long)nonzero, (long long)d.numel);
    // the control: fc's gradient is not final at the first hook (so the check above can fail)
    const drafter_param *fc = drafter_find(&d, "fc.weight");
    int64_t fc_same = 0;
    for (int64_t i = 0; i < fc->numel; i++) fc_same += h.fc_at_first[fc->offset + i] == d.grad[fc->offset + i];
    CHECK_MSG(fc_same < fc->numel / 2, "fc's gradient was already final at the first hook (%lld of %lld)", (long long)fc_same,
              (long long)fc->numel);
    // a failing hook fails the step with its error
    memset(&st, 0, sizeof st);
    student_work_set_grad_hook(w, hook_fails, NULL);
    CHECK_ERR(student_step(&d, &lc, &plan, w, &b, anchors, A, &st), "hook refused bucket 1");
    student_work_destroy(w);
    arena_free(&work);
    free(plain);
    free(h.snap);
    free(h.fc_at_first);
    grad_buckets_free(&h.gb);
    drafter_free(&d);
}

int main(void) {
    backend be;
    if (backend_open(&be, "cpu", 0)) {
        fprintf(stderr, "backend_open: %s\n", error_msg());
        return 1;
    }
    test_coverage(&be);
    test_order(&be);
    test_step_hooks(&be);
    backend_close(&be);
    return test_finish("test_grad_buckets");
}
