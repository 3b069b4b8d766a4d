// tool_step_dump.c: `dflash_tool step-dump IN.safetensors CONFIG.json OUT.safetensors`
//
// One student step with no optimizer update: the hook for checking the student against any other
// implementation (tests/reference/make_student_fixtures.py is one, in PyTorch).
//   IN      the drafter's weights under their export names, target.embed_tokens.weight,
//           target.lm_head.weight (absent = tied), and the batch: features f32 [S, n_feat*H],
//           tokens i32 [S], loss_mask u8 [S], cu_seqlens i32 [n+1], anchors i32 [A] (used as given),
//           topk_idx i32 [S, k], topk_val f32 [S, k], lse f32 [S]
//   CONFIG  the drafter's config.json plus "loss": the loss.* keys ({"alpha", "lambda", "gamma", "weighting",
//           "label", "selector_weight"}), read as the configuration's (loss_config.h)
//   OUT     loss and each term every drafter has (loss_terms.h: ce, kl, cap) (f32 [1], normalised by
//           the sum of weights) and grad.<name> for every trainable tensor (the gradient of the
//           normalised loss)
// Options pick the device and force the chunking (for the invariance tests): the result must not
// depend on them beyond summation order.
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/core/log.h"
#include "common/data/safetensors.h"
#include "student/model/drafter.h"
#include "student/loss/loss_config.h"
#include "student/loss/loss_terms.h"
#include "student/model/memory_plan.h"
#include "student/model/step.h"
#include "tools/tools.h"

static void step_dump_usage(FILE *f) {
    fprintf(f, "usage: dflash_tool step-dump IN.safetensors CONFIG.json OUT.safetensors [--device auto|cpu|cuda]\n"
               "        [--mem-budget BYTES] [--chunk-anchors N] [--loss-mode rows|tiles] [--row-chunk N]\n"
               "        [--vocab-tile N] [--plan] [--eval]\n"
               "  --mem-budget: let the planner choose the chunking for this budget (e.g. 64MiB)\n"
               "  --chunk-anchors, --loss-mode, --row-chunk, --vocab-tile: force the chunking\n"
               "  --plan: print the memory plan and exit\n"
               "  --eval: the evaluation instead of the step (forward only: the same loss terms, no gradient)\n"
               "  --export DIR: also export the drafter of IN (config.json + model.safetensors, the dflash format)\n");
}

// A tensor of IN that must exist with this dtype and rank; shape checked by the caller.
static const st_entry *step_dump_need(const st_file *f, const char *name, dtype dt, int ndim) {
    const st_entry *e = safetensors_find(f, name);
    if (!e) {
        error_set("%s: missing tensor %s", f->path, name);
        return NULL;
    }
    if (e->dt != dt || e->ndim != ndim) {
        error_set("%s: tensor %s must be %s with %d dimension(s), found %s with %d", f->path, name, dtype_name(dt), ndim,
                  dtype_name(e->dt), e->ndim);
        return NULL;
    }
    return e;
}

// A copy of a tensor's bytes in malloc'd (aligned) memory: files from other writers need not align
// their data to the element size, and the step reads these arrays as int32/float.
static void *step_dump_copy(const st_entry *e) {
    void *p = xmalloc(e->nbytes);
    memcpy(p, e->data, e->nbytes);
    return p;
}

int tool_step_dump_main(int argc, char **argv) {
    const char *pos[3] = {0}, *device = "auto", *budget_s = NULL, *mode_s = NULL, *export_dir = NULL;
    int npos = 0, chunk = 0, row_chunk = 0, vocab_tile = 0, plan_only = 0, eval_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) { step_dump_usage(stdout); return 0; }
        if (strcmp(a, "--plan") == 0) { plan_only = 1; continue; }
        if (strcmp(a, "--eval") == 0) { eval_only = 1; continue; }
        if (i + 1 < argc && (strcmp(a, "--device") == 0 || strcmp(a, "--mem-budget") == 0 || strcmp(a, "--chunk-anchors") == 0 ||
                             strcmp(a, "--loss-mode") == 0 || strcmp(a, "--row-chunk") == 0 || strcmp(a, "--vocab-tile") == 0 ||
                             strcmp(a, "--export") == 0)) {
            const char *v = argv[++i];
            if (strcmp(a, "--device") == 0) device = v;
            else if (strcmp(a, "--mem-budget") == 0) budget_s = v;
            else if (strcmp(a, "--chunk-anchors") == 0) chunk = atoi(v);
            else if (strcmp(a, "--loss-mode") == 0) mode_s = v;
            else if (strcmp(a, "--row-chunk") == 0) row_chunk = atoi(v);
            else if (strcmp(a, "--export") == 0) export_dir = v;
            else vocab_tile = atoi(v);
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "error: step-dump: unknown or incomplete option '%s'\n", a);
            return 2;
        } else if (npos < 3) {
            pos[npos++] = a;
        } else {
            step_dump_usage(stderr);
            return 2;
        }
    }
    if (npos != 3) { step_dump_usage(stderr); return 2; }
    size_t budget = 0;
    if (budget_s && bytes_parse(budget_s, &budget)) { fprintf(stderr, "error: --mem-budget: %s\n", error_msg()); return 2; }
    int force_mode = -1;
    if (mode_s) {
        if (strcmp(mode_s, "rows") == 0) force_mode = LOSS_MODE_ROWS;
        else if (strcmp(mode_s, "tiles") == 0) force_mode = LOSS_MODE_TILES;
        else { fprintf(stderr, "error: --loss-mode must be rows or tiles, not '%s'\n", mode_s); return 2; }
    }
    log_setup(0, 1, LOG_WARN);

    // CONFIG: the drafter's config.json + "loss"
    drafter_config dc;
    loss_config lc;
    char *json = file_read_text(pos[1], SIZE_MAX);
    if (!json) { fprintf(stderr, "error: %s\n", error_msg()); return 1; }
    int rc = drafter_config_parse(&dc, json, pos[1]);
    if (rc == 0) { // its "loss" object holds loss.* keys, read as the configuration's (loss_config.h)
        config *keys = xmalloc(sizeof *keys);
        config_defaults(keys);
        cJSON *root = cJSON_Parse(json);
        const cJSON *lo = root ? cJSON_GetObjectItemCaseSensitive(root, "loss") : NULL;
        if (lo) rc = loss_config_parse_json(keys, lo, pos[1]);
        cJSON_Delete(root);
        loss_config_make(&lc, keys, (int)dc.block_size);
        free(keys);
    }
    free(json);
    if (rc) { fprintf(stderr, "error: %s\n", error_msg()); return 1; }

    // IN: the batch
    st_file in;
    if (safetensors_open(&in, pos[0])) { fprintf(stderr, "error: %s\n", error_msg()); return 1; }
    const st_entry *e_feat = step_dump_need(&in, "features", DT_F32, 2), *e_tok = NULL, *e_mask = NULL, *e_cu = NULL,
                   *e_anc = NULL, *e_ti = NULL, *e_tv = NULL, *e_lse = NULL, *e_emb = NULL;
    if (e_feat) e_tok = step_dump_need(&in, "tokens", DT_I32, 1);
    if (e_tok) e_mask = step_dump_need(&in, "loss_mask", DT_U8, 1);
    if (e_mask) e_cu = step_dump_need(&in, "cu_seqlens", DT_I32, 1);
    if (e_cu) e_anc = step_dump_need(&in, "anchors", DT_I32, 1);
    if (e_anc) e_ti = step_dump_need(&in, "topk_idx", DT_I32, 2);
    if (e_ti) e_tv = step_dump_need(&in, "topk_val", DT_F32, 2);
    if (e_tv) e_lse = step_dump_need(&in, "lse", DT_F32, 1);
    if (e_lse) e_emb = safetensors_find(&in, "target.embed_tokens.weight");
    if (e_lse && !e_emb) error_set("%s: missing tensor target.embed_tokens.weight", pos[0]);
    const st_entry *e_head = safetensors_find(&in, "target.lm_head.weight");
    int S = e_tok ? (int)e_tok->shape[0] : 0;
    if (e_emb && (e_feat->shape[0] != S || e_mask->shape[0] != S || e_ti->shape[0] != S || e_tv->shape[0] != S ||
                  e_lse->shape[0] != S || e_ti->shape[1] != e_tv->shape[1] || e_cu->shape[0] < 2 || e_anc->shape[0] < 1)) {
        error_set("%s: the batch tensors disagree on the token count %d (or cu_seqlens/anchors are empty)", pos[0], S);
        e_emb = NULL;
    }
    if (!e_emb) {
        fprintf(stderr, "error: %s\n", error_msg());
        safetensors_close(&in);
        return 1;
    }
    int n_seq = (int)e_cu->shape[0] - 1, k = (int)e_ti->shape[1];
    int A = (int)e_anc->shape[0];

    backend be;
    if (backend_open(&be, device, 0)) { fprintf(stderr, "error: %s\n", error_msg()); safetensors_close(&in); return 1; }
    plan_request pr = {.budget = budget, .max_tokens = S, .max_seqs = n_seq, .max_anchors = A, .k = k,
                       .tied = e_head == NULL, .force_chunk = chunk, .force_mode = force_mode,
                       .force_row_chunk = row_chunk, .force_vocab_tile = vocab_tile};
    student_plan plan;
    plan_breakdown bd;
    if (plan_make(&dc, &be, &pr, &plan, &bd)) {
        fprintf(stderr, "error: %s\n", error_msg());
        backend_close(&be);
        safetensors_close(&in);
        return 1;
    }
    if (plan_only) {
        plan_print(stdout, &bd, &plan, budget);
        backend_close(&be);
        safetensors_close(&in);
        return 0;
    }

    void *copies[8] = {step_dump_copy(e_tok), step_dump_copy(e_mask), step_dump_copy(e_cu), step_dump_copy(e_feat),
                       step_dump_copy(e_ti), step_dump_copy(e_tv), step_dump_copy(e_lse), step_dump_copy(e_anc)};
    tensor feat = st_entry_tensor(e_feat);
    feat.data = copies[3];
    student_batch b = {.S = S, .n_seq = n_seq, .k = k, .tokens = copies[0],
                       .loss_mask = copies[1], .cu_seqlens = copies[2], .features = feat,
                       .topk_idx = copies[4], .topk_val = copies[5], .lse = copies[6]};
    const int32_t *anchor_list = copies[7];
    drafter d;
    tensor head = e_head ? st_entry_tensor(e_head) : (tensor){0};
    if (drafter_init(&d, &dc, &be, 0, st_entry_tensor(e_emb), e_head ? &head : NULL) || drafter_load_weights(&d, &in)) {
        fprintf(stderr, "error: %s\n", error_msg());
        return 1;
    }
    if (export_dir && drafter_export(&d, export_dir, 0)) { fprintf(stderr, "error: %s\n", error_msg()); return 1; }
    arena work;
    if (arena_init(&work, "student work", &be, student_work_bytes(&d, &plan))) { fprintf(stderr, "error: %s\n", error_msg()); return 1; }
    student_work *w = student_work_create(&d, &plan, &work);
    step_stats st;
    memset(&st, 0, sizeof st);
    if ((eval_only ? student_eval(&d, &lc, &plan, w, &b, anchor_list, A, &st, NULL)
                   : student_step(&d, &lc, &plan, w, &b, anchor_list, A, &st))) {
        fprintf(stderr, "error: %s\n", error_msg());
        return 1;
    }
    if (!(st.sum_w > 0)) { fprintf(stderr, "error: %s: no anchor has a scored slot (sum of weights is 0)\n", pos[0]); return 1; }

    // Normalise by the sum of weights and write OUT.
    // every term every drafter has, as written, and the loss the gradients are of: the sum of the
    // written terms as written, plus a kind's (DFlash2's selector; 0 for a DFlash drafter)
    float loss[1], term[LOSS_TERMS];
    double total = -0.0; // (x + -0 = x)
    for (int t = 0; t < LOSS_TERMS; t++) {
        term[t] = (float)(st.sum_w_term[t] / st.sum_w);
        total += loss_terms[t].always ? loss_term_coef(t, &lc) * term[t] : loss_term_coef(t, &lc) * st.sum_w_term[t] / st.sum_w;
    }
    loss[0] = (float)total;
    float *grads = xmalloc((size_t)d.numel * sizeof(float));
    backend_copy_to_host(&be, grads, d.grad, (size_t)d.numel * sizeof(float));
    for (int64_t i = 0; i < d.numel; i++) grads[i] = (float)(grads[i] / st.sum_w);
    st_writer sw;
    safetensors_writer_init(&sw);
    int64_t one = 1;
    safetensors_writer_add(&sw, "loss", tensor_make(DT_F32, loss, DEVICE_CPU, 1, &one));
    for (int t = 0; t < LOSS_TERMS; t++)
        if (loss_terms[t].always)
            safetensors_writer_add(&sw, loss_terms[t].metric, tensor_make(DT_F32, term + t, DEVICE_CPU, 1, &one));
    char (*names)[128] = xmalloc((size_t)d.n_params * sizeof *names);
    for (int i = 0; i < d.n_params; i++) {
        const drafter_param *p = &d.params[i];
        snprintf(names[i], sizeof names[i], "grad.%s", p->name);
        safetensors_writer_add(&sw, names[i], tensor_make(DT_F32, grads + p->offset, DEVICE_CPU, p->ndim, p->shape));
    }
    char peak[32];
    size_t hw = arena_high_water(&work) + d.mem.used;
    safetensors_writer_meta(&sw, "producer", "dflash_tool step-dump");
    safetensors_writer_meta(&sw, "backend", be.name);
    rc = safetensors_writer_write(&sw, pos[2]);
    if (rc) fprintf(stderr, "error: %s\n", error_msg());
    else {
        char terms[256] = "";
        for (int t = 0, n = 0; t < LOSS_TERMS && n < (int)sizeof terms; t++)
            if (loss_terms[t].always)
                n += snprintf(terms + n, sizeof terms - (size_t)n, "%s%s %.6f", n ? " " : "", loss_terms[t].metric, term[t]);
        printf("step-dump: %d anchors in chunks of %d, loss mode %s, loss %.6f (%s), peak %s (peak_bytes %zu), %s\n", A,
               plan.chunk_anchors, plan.loss.mode == LOSS_MODE_ROWS ? "rows" : "tiles", loss[0], terms,
               bytes_format(hw, peak, sizeof peak), hw, be.name);
    }
    safetensors_writer_free(&sw);
    for (int i = 0; i < 8; i++) free(copies[i]);
    free(names);
    free(grads);
    student_work_destroy(w);
    arena_free(&work);
    drafter_free(&d);
    backend_close(&be);
    safetensors_close(&in);
    return rc ? 1 : 0;
}
