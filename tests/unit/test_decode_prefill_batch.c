// test_decode_prefill_batch.c: a batched prefill (target_decoder_add_batch: several prompts of
// different lengths packed into one pass over the weights, each into its own slot) leaves the same
// decoder state as prefilling the prompts one at a time (target_decoder_add), for a dense Qwen3, a
// Qwen3-MoE and the Qwen3.5 hybrid (K/V caches, the Gated DeltaNet's conv and recurrent states, each
// slot's last hidden state), gives the same next tokens, and the decode steps after it give the same
// tokens. On the CPU a pack of at most 32 rows gives the same bits (gemm_rows.c sums each output the
// same way whatever rows share the product); a longer pack goes through OpenBLAS (another summation
// order) and is held to 1e-5 of each tensor's scale. On CUDA (when there is a device: the emulator
// build has one) the pack changes the GEMMs' row counts and the Gated DeltaNet's form, so bf16 states
// are held to 2e-2 of their scale; the tokens must still be equal. Also: a pack over the work buffers
// (rows tokens) or over the free slots is refused, naming it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"
#include "teacher/target_decode.h"
#include "testing.h"

typedef struct {
    const char *name, *args;
} target_case;

static const target_case cases[] = {
    {"qwen3", "--arch qwen3 --layers 3 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 96 --vocab 307 "
              "--seed 1"},
    {"qwen3_moe", "--arch qwen3_moe --layers 3 --hidden 48 --heads 4 --kv-heads 2 --head-dim 12 --intermediate 64 "
                  "--vocab 223 --experts 6 --experts-per-tok 2 --moe-intermediate 24 --norm-topk --mlp-only 1 --seed 8"},
    {"qwen3_5", "--arch qwen3_5 --layers 4 --hidden 48 --heads 4 --kv-heads 2 --head-dim 24 --intermediate 80 "
                "--vocab 301 --lin-k-heads 2 --lin-v-heads 6 --lin-k-dim 12 --lin-v-dim 10 --conv-kernel 3 "
                "--layer-types linear,full,linear,linear --seed 1"},
};

enum { MAX_SEQS = 6, MAX_LEN = 96, STEPS = 4 };

// n elements of act data (f32 or bf16) at p, as floats (caller frees)
static float *act_floats(const void *p, size_t n, dtype dt) {
    float *f = xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        f[i] = dt == DT_BF16 ? f32_from_bf16(((const uint16_t *)p)[i]) : ((const float *)p)[i];
    return f;
}

// Compare bytes [off, off + n elements) of a device buffer of two decoders: exact (tol 0) or within
// tol of the reference's scale.
static void cmp_dev(backend *be, const void *a, const void *b, size_t off, size_t n, dtype dt, float tol,
                    const char *what) {
    if (n == 0) return;
    size_t e = dtype_size(dt);
    char *ha = xmalloc(n * e), *hb = xmalloc(n * e);
    backend_copy_to_host(be, ha, (const char *)a + off * e, n * e);
    backend_copy_to_host(be, hb, (const char *)b + off * e, n * e);
    if (tol == 0.0f) {
        CHECK_MSG(memcmp(ha, hb, n * e) == 0, "%s: the batched prefill differs in its bits", what);
    } else {
        float *fa = act_floats(ha, n, dt), *fb = act_floats(hb, n, dt);
        double err = test_rel_err(fb, fa, n);
        CHECK_MSG(err <= tol, "%s: relative error %.3g > %.3g", what, err, (double)tol);
        free(fa);
        free(fb);
    }
    free(ha);
    free(hb);
}

// Every slot's state of decoders a (one at a time) and b (batched) after their prefills.
static void cmp_state(const target_decoder *a, const target_decoder *b, float tol, const char *tag) {
    const target_config *c = &a->m->cfg;
    backend *be = a->m->be;
    dtype dt = ops_act_dtype(be);
    size_t kvd = (size_t)(c->n_kv_heads * c->head_dim), H = (size_t)c->hidden;
    size_t Kc = c->lin_conv_kernel > 1 ? (size_t)c->lin_conv_kernel - 1 : 0;
    size_t conv = Kc * (size_t)(2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim);
    size_t rec = (size_t)(c->lin_v_heads * c->lin_k_dim * c->lin_v_dim);
    char what[160];
    CHECK_MSG(a->n_seq == b->n_seq, "%s: %d and %d live sequences", tag, a->n_seq, b->n_seq);
    for (int s = 0; s < a->n_seq; s++) {
        CHECK_MSG(a->len[s] == b->len[s], "%s slot %d: %d and %d positions", tag, s, a->len[s], b->len[s]);
        for (int l = 0; l < a->n_att; l++) {
            size_t off = ((size_t)l * a->max_seqs + (size_t)s) * (size_t)a->max_len * kvd;
            snprintf(what, sizeof what, "%s slot %d attention %d keys", tag, s, l);
            cmp_dev(be, a->k_cache, b->k_cache, off, (size_t)a->len[s] * kvd, dt, tol, what);
            snprintf(what, sizeof what, "%s slot %d attention %d values", tag, s, l);
            cmp_dev(be, a->v_cache, b->v_cache, off, (size_t)a->len[s] * kvd, dt, tol, what);
        }
        for (int l = 0; l < a->n_lin; l++) {
            size_t i = (size_t)l * a->max_seqs + (size_t)s;
            snprintf(what, sizeof what, "%s slot %d linear %d conv state", tag, s, l);
            cmp_dev(be, a->conv_state, b->conv_state, i * conv, conv, dt, tol, what);
            snprintf(what, sizeof what, "%s slot %d linear %d recurrent state", tag, s, l);
            cmp_dev(be, a->rec_state, b->rec_state, i * rec, rec, DT_F32, tol, what);
        }
        snprintf(what, sizeof what, "%s slot %d last hidden state", tag, s);
        cmp_dev(be, a->last, b->last, (size_t)s * H, H, dt, tol, what);
    }
}

// The prompts: n of lengths len[], ids from the test generator (below vocab), packed one after another.
static int32_t *make_prompts(const int *len, int n, int64_t vocab) {
    int T = 0;
    for (int i = 0; i < n; i++) T += len[i];
    int32_t *ids = xmalloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) ids[t] = (int32_t)test_rand_below((int)vocab);
    return ids;
}

// One case: prompts of lengths len[0..n-1], added one at a time into decoder a and as packs of
// sizes pack[0..] into decoder b (live sequences kept), then STEPS greedy steps on both.
static void run_case(target_model *m, const char *tag, const int *len, int n, const int *pack, float tol) {
    target_decoder a, b;
    if (target_decoder_init(&a, m, MAX_SEQS, MAX_LEN, 0, NULL) || target_decoder_init(&b, m, MAX_SEQS, MAX_LEN, 0, NULL)) {
        CHECK_MSG(0, "%s: decoder: %s", tag, error_msg());
        return;
    }
    int32_t *ids = make_prompts(len, n, m->cfg.vocab);
    int32_t na[MAX_SEQS], nb[MAX_SEQS], ta[MAX_SEQS], tb[MAX_SEQS];
    for (int i = 0, at = 0; i < n; at += len[i++]) CHECK(target_decoder_add(&a, ids + at, len[i], NULL, &na[i]) == i);
    for (int p = 0, i = 0, at = 0; i < n; p++) {
        int s = target_decoder_add_batch(&b, pack[p], ids + at, len + i, NULL, &nb[i]);
        CHECK_MSG(s == i, "%s: add_batch of %d prompts returned slot %d, want %d (%s)", tag, pack[p], s, i, error_msg());
        for (int k = 0; k < pack[p]; k++) at += len[i++];
    }
    cmp_state(&a, &b, tol, tag);
    for (int i = 0; i < n; i++) CHECK_MSG(na[i] == nb[i], "%s: prompt %d's next token %d, one at a time %d", tag, i, nb[i], na[i]);
    for (int j = 0; j < STEPS; j++) { // the decode continues the same way from both
        memcpy(ta, na, sizeof ta);
        memcpy(tb, nb, sizeof tb);
        CHECK(target_decoder_step(&a, ta, na) == 0);
        CHECK(target_decoder_step(&b, tb, nb) == 0);
        for (int i = 0; i < n; i++)
            CHECK_MSG(na[i] == nb[i], "%s step %d: sequence %d's token %d, one at a time %d", tag, j, i, nb[i], na[i]);
    }
    free(ids);
    target_decoder_free(&a);
    target_decoder_free(&b);
}

// The refusals: a pack over the free slots or over the work buffers.
static void run_refusals(target_model *m) {
    target_decoder d;
    if (target_decoder_init(&d, m, 3, 8, 0, NULL)) {
        CHECK_MSG(0, "decoder: %s", error_msg());
        return;
    }
    int32_t ids[24] = {0}, next[4];
    int len4[4] = {2, 2, 2, 2}, len3[3] = {8, 8, 1};
    CHECK_ERR(target_decoder_add_batch(&d, 4, ids, len4, NULL, next), "slots are free");
    CHECK_ERR(target_decoder_add_batch(&d, 3, ids, len3, NULL, next), "work buffers hold 8");
    CHECK(d.n_seq == 0);
    CHECK(target_decoder_add_batch(&d, 3, ids, len4, NULL, next) == 0 && d.n_seq == 3);
    CHECK_ERR(target_decoder_add_batch(&d, 1, ids, len4, NULL, next), "all 3 slots hold a sequence");
    target_decoder_free(&d);
}

static void run_backend(backend *be, const char *dev, float tol_long, float tol_short) {
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char dir[1200], cmd[4096];
        snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), cases[k].name);
        const char *bd = getenv("DFLASH_BUILD");
        snprintf(cmd, sizeof cmd, "'%s/dflash_tool' make-target '%s' %s >/dev/null 2>&1", bd ? bd : ".", dir, cases[k].args);
        if (access(dir, F_OK) != 0 && system(cmd) != 0) {
            CHECK_MSG(0, "%s: make-target failed (%s)", cases[k].name, cmd);
            continue;
        }
        target_model m;
        memset(&m, 0, sizeof m);
        if (target_load(&m, dir, be)) {
            CHECK_MSG(0, "%s: %s", cases[k].name, error_msg());
            continue;
        }
        char tag[96];
        // five prompts, 32 rows in all: one pack of 5; then 3 + 2 (the second added while 3 are live)
        static const int short_len[] = {7, 3, 12, 1, 9}, short_all[] = {5}, short_split[] = {3, 2};
        snprintf(tag, sizeof tag, "%s %s 32 rows in one pack", dev, cases[k].name);
        run_case(&m, tag, short_len, 5, short_all, tol_short);
        snprintf(tag, sizeof tag, "%s %s 32 rows in packs 3+2", dev, cases[k].name);
        run_case(&m, tag, short_len, 5, short_split, tol_short);
        // six prompts, 165 rows (past one 96-row pack): 1 + 3 + 2, the middle one 88 rows
        static const int long_len[] = {70, 40, 5, 43, 1, 6}, long_split[] = {1, 3, 2};
        snprintf(tag, sizeof tag, "%s %s long prompts in packs 1+3+2", dev, cases[k].name);
        run_case(&m, tag, long_len, 6, long_split, tol_long);
        if (k == 0) run_refusals(&m);
        target_free(&m);
    }
}

int main(void) {
    test_rand_seed(39);
    backend cpu;
    if (backend_open(&cpu, "cpu", 0)) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    run_backend(&cpu, "cpu", 1e-5f, 0.0f);
    backend_close(&cpu);
    if (backend_cuda_devices() > 0) {
        backend gpu;
        if (backend_open(&gpu, "cuda", 0)) {
            fprintf(stderr, "%s\n", error_msg());
            return 1;
        }
        run_backend(&gpu, "cuda", 2e-2f, 2e-2f);
        backend_close(&gpu);
    } else {
        printf("no CUDA device: the CPU only\n");
    }
    return test_finish("test_decode_prefill_batch");
}
