// test_plan.c: the student's planner (student/plan.h) chooses by estimated step time (SPEC §5).
//
//   1. no budget: all anchors in one chunk, loss mode ROWS with all the rows
//   2. the case (H 512, 2 layers, V 32000, B 16, 1024 tokens, 256 anchors): under the budget
//      of 16 anchors per chunk with the 2-GEMM loss, a larger chunk with the 3-GEMM tiled loss also
//      fits, and the planner takes the smaller 2-GEMM chunk (estimated faster); the runner-up is
//      another chunking or mode, no faster
//   3. a budget where only the tiled loss fits: mode TILES; one byte less than the smallest plan:
//      refused, naming the smallest budget
//   4. every plan over a sweep of budgets fits its budget, and a smaller budget never gives a faster
//      estimate
//   5. the estimate: more chunks of the same loss mode cost more; TILES costs more than ROWS
// No device is opened: the plan is computed for a CPU backend of one thread, as --plan does.
#include <stdio.h>
#include <string.h>

#include "common/backend/backend.h"
#include "student/drafter_config.h"
#include "student/plan.h"
#include "testing.h"

static drafter_config shape(long H, long L, long V, long B) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"vocab_size\": %ld, "
             "\"hidden_size\": %ld, \"intermediate_size\": %ld, \"num_hidden_layers\": %ld, \"num_attention_heads\": 8, "
             "\"num_key_value_heads\": 4, \"head_dim\": 64, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, "
             "\"max_position_embeddings\": 40960, \"num_target_layers\": 11, \"tie_word_embeddings\": false, "
             "\"dflash_config\": {\"block_size\": %ld, \"mask_token_id\": %ld, \"target_layer_ids\": [1, 3, 5, 7, 9]}}",
             V, H, 3 * H, L, B, V - 1);
    drafter_config c;
    memset(&c, 0, sizeof c);
    if (drafter_config_parse(&c, json, "test shape")) fprintf(stderr, "drafter_config_parse: %s\n", error_msg());
    return c;
}

static plan_request request(size_t budget, int anchors) {
    return (plan_request){.budget = budget, .max_tokens = 1024, .max_seqs = 1, .max_anchors = anchors, .k = 32,
                          .adam = 1, .tied = 0, .force_mode = -1};
}

// The plan total of a forced plan (no budget).
static size_t forced_total(const drafter_config *c, const backend *be, int anchors, int C, int mode, int rows, int tile) {
    plan_request r = request(0, anchors);
    r.force_chunk = C, r.force_mode = mode, r.force_row_chunk = rows, r.force_vocab_tile = tile;
    student_plan p;
    plan_breakdown bd;
    if (plan_make(c, be, &r, &p, &bd)) return 0;
    return bd.total;
}

int main(void) {
    backend be = {.kind = BACKEND_CPU, .device = DEVICE_CPU, .threads = 1};
    snprintf(be.name, sizeof be.name, "cpu (1 thread)");
    drafter_config c = shape(512, 2, 32000, 16);
    const int A = 256, slots = 15;
    student_plan p;
    plan_breakdown bd;

    // 1. no budget
    plan_request r = request(0, A);
    CHECK(plan_make(&c, &be, &r, &p, &bd) == 0);
    CHECK(p.chunk_anchors == A && p.loss.mode == LOSS_MODE_ROWS && p.loss.row_chunk == A * slots);
    CHECK(bd.est_s > 0 && bd.anchors == A);
    double unbudgeted = bd.est_s;

    // 2. the budget of 16 anchors per chunk with the 2-GEMM loss: 32 anchors with the tiled loss fit too
    size_t b16 = forced_total(&c, &be, A, 16, LOSS_MODE_ROWS, 0, 0);
    CHECK(b16 > 0);
    r = request(b16, A);
    CHECK(plan_make(&c, &be, &r, &p, &bd) == 0);
    CHECK_MSG(p.loss.mode == LOSS_MODE_ROWS, "the planner chose the tiled loss under the 16-anchor budget");
    CHECK(p.chunk_anchors >= 16 && bd.total <= b16);
    plan_request rt = r;
    rt.force_chunk = 32, rt.force_mode = LOSS_MODE_TILES;
    student_plan pt;
    plan_breakdown bt;
    CHECK_MSG(plan_make(&c, &be, &rt, &pt, &bt) == 0 && pt.loss.mode == LOSS_MODE_TILES && bt.total <= b16,
              "32 anchors per chunk with the tiled loss do not fit the budget of 16 with rows (%zu bytes)", b16);
    CHECK_MSG(bd.est_s < bt.est_s, "rows %.3f s not faster than 32 anchors tiled %.3f s", bd.est_s, bt.est_s);
    CHECK(bd.est_s < 1.25 * unbudgeted);
    CHECK(bd.has_runner_up && bd.runner_up_s >= bd.est_s);
    CHECK(bd.runner_up.chunk_anchors != p.chunk_anchors || bd.runner_up.loss.mode != p.loss.mode);
    plan_print(stdout, &bd, &p, b16);

    // 3. only the tiled loss fits: the smallest tiled plan's total, under the smallest ROWS plan's
    size_t rows_min = forced_total(&c, &be, A, 1, LOSS_MODE_ROWS, slots, 0);
    size_t tiles_min = forced_total(&c, &be, A, 1, LOSS_MODE_TILES, slots, 256);
    CHECK(tiles_min > 0 && tiles_min < rows_min);
    r = request(tiles_min, A);
    CHECK(plan_make(&c, &be, &r, &p, &bd) == 0);
    CHECK(p.loss.mode == LOSS_MODE_TILES && bd.total <= tiles_min && p.chunk_anchors >= 1);
    r = request((tiles_min + rows_min) / 2, A);
    CHECK(plan_make(&c, &be, &r, &p, &bd) == 0 && p.loss.mode == LOSS_MODE_TILES && bd.total <= r.budget);
    r = request(tiles_min - 1, A);
    CHECK_ERR(plan_make(&c, &be, &r, &p, &bd), "needs at least");

    // 4. a sweep of budgets: each plan fits, and more memory never estimates slower
    double prev = 0;
    for (size_t b = b16 * 4; b >= tiles_min; b = b * 7 / 8) {
        r = request(b, A);
        if (plan_make(&c, &be, &r, &p, &bd)) { CHECK_MSG(0, "budget %zu refused: %s", b, error_msg()); break; }
        CHECK_MSG(bd.total <= b, "budget %zu: plan %zu bytes", b, bd.total);
        CHECK_MSG(bd.est_s >= prev * (1 - 1e-9), "budget %zu: %.3f s, less than %.3f s at a larger one", b, bd.est_s, prev);
        CHECK(bd.est_s >= unbudgeted * (1 - 1e-9));
        prev = bd.est_s;
    }

    // 5. the estimate itself
    r = request(0, A);
    student_plan a = {.max_tokens = 1024, .max_seqs = 1, .chunk_anchors = 64, .k = 32,
                      .loss = {LOSS_MODE_ROWS, 64 * slots, 32000, 8}};
    student_plan b2 = a, t = a;
    b2.chunk_anchors = 8, b2.loss.row_chunk = 8 * slots;
    t.loss.mode = LOSS_MODE_TILES, t.loss.vocab_tile = 4096;
    CHECK(plan_step_seconds(&c, &be, &r, &b2) > plan_step_seconds(&c, &be, &r, &a));
    CHECK(plan_step_seconds(&c, &be, &r, &t) > plan_step_seconds(&c, &be, &r, &a));
    return test_finish("test_plan");
}
