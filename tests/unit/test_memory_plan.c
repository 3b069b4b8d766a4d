// test_memory_plan.c: the student's planner (student/model/memory_plan.h) chooses by estimated step time (SPEC §5).
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
//   6. the teacher's pipeline stages (teacher groups, target_stage_split): on made targets with
//      layers of different sizes (Qwen3-MoE with random dense layers, the Qwen3.5 hybrid with random
//      layer types; random vocabularies, tied or not), for every G from 1 to the layer count, G
//      non-empty consecutive stages whose largest weight bytes equals the brute-force minimum over
//      every split; G = n_layers is one layer per stage; G > n_layers and G = 0 are errors naming
//      world.teacher_group_size
//   7. teacher_plan.h: the stages' weights add up to the whole target's plus what every stage holds
//      again (inv_freq; the tied embedding on the last stage), the NCCL buffers per stage, and the
//      smallest group size that fits a budget
// No device is opened: the plan is computed for a CPU backend of one thread, as --plan does.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/kernels/ops.h"
#include "student/model/drafter_config.h"
#include "student/model/memory_plan.h"
#include "teacher/teacher_plan.h"
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

// ----------------------------------------------------------------------------- 6, 7: teacher stages

// A made target of L layers whose layer sizes differ: kind 0 a Qwen3-MoE with random dense
// (mlp_only) layers, kind 1 the Qwen3.5 hybrid with random layer types.
static int made_target(target_config *c, int kind, int L, int V, int tied) {
    char json[4096], list[1024] = "";
    size_t n = 0;
    if (kind == 0) {
        for (int l = 0; l < L; l++)
            if (test_rand_below(2)) n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", n ? ", " : "", l);
        snprintf(json, sizeof json,
                 "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\", \"hidden_size\": 32, "
                 "\"num_hidden_layers\": %d, \"intermediate_size\": %d, \"num_attention_heads\": 4, "
                 "\"num_key_value_heads\": 2, \"head_dim\": 8, \"vocab_size\": %d, \"num_experts\": %d, "
                 "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, \"mlp_only_layers\": [%s], "
                 "\"tie_word_embeddings\": %s}",
                 L, 32 + 32 * test_rand_below(8), V, 4 + test_rand_below(12), list, tied ? "true" : "false");
    } else {
        for (int l = 0; l < L; l++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"", l ? ", " : "",
                                  test_rand_below(3) ? "linear_attention" : "full_attention");
        snprintf(json, sizeof json,
                 "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": \"qwen3_5_text\", \"hidden_size\": 32, "
                 "\"num_hidden_layers\": %d, \"intermediate_size\": 64, \"num_attention_heads\": 4, "
                 "\"num_key_value_heads\": 2, \"head_dim\": 16, \"vocab_size\": %d, \"linear_num_key_heads\": 2, "
                 "\"linear_num_value_heads\": %d, \"linear_key_head_dim\": 8, \"linear_value_head_dim\": 8, \"linear_conv_kernel_dim\": 4, "
                 "\"layer_types\": [%s], \"tie_word_embeddings\": %s}",
                 L, V, 2 * (1 + test_rand_below(6)), list, tied ? "true" : "false");
    }
    memset(c, 0, sizeof *c);
    if (target_config_parse(c, json, "made config.json")) {
        fprintf(stderr, "target_config_parse: %s\n%s\n", error_msg(), json);
        return -1;
    }
    return 0;
}

// The smallest largest-stage bytes over every split of [from, L) into g non-empty stages (W[a][b]:
// the bytes of stage [a, b)).
static size_t brute_split(size_t W[][17], int64_t from, int64_t L, int g) {
    if (g == 1) return W[from][L];
    size_t best = (size_t)-1;
    for (int64_t cut = from + 1; cut <= L - (g - 1); cut++) {
        size_t rest = brute_split(W, cut, L, g - 1), top = W[from][cut] > rest ? W[from][cut] : rest;
        if (top < best) best = top;
    }
    return best;
}

static void test_stage_split(void) {
    dtype dt = DT_BF16;
    int cases = 0, optimal = 0;
    for (int t = 0; t < 24; t++) {
        int kind = t % 2, L = 4 + test_rand_below(9), tied = (t / 2) % 2; // 4..12 layers
        int V = kind == 0 ? 64 + test_rand_below(4000) : 64 + test_rand_below(2000); // embedding from a sliver to several layers
        target_config c;
        if (made_target(&c, kind, L, V, tied)) { CHECK(0); continue; }
        static size_t W[17][17];
        for (int64_t a = 0; a < L; a++)
            for (int64_t b = a + 1; b <= L; b++) W[a][b] = target_stage_weight_bytes(&c, dt, a, b);
        for (int G = 1; G <= L; G++) {
            int64_t bounds[17];
            if (target_stage_split(&c, dt, G, bounds)) { CHECK_MSG(0, "split G=%d: %s", G, error_msg()); continue; }
            int ordered = bounds[0] == 0 && bounds[G] == L;
            size_t top = 0;
            for (int s = 0; s < G; s++) {
                ordered &= bounds[s + 1] > bounds[s]; // non-empty, consecutive
                if (ordered && W[bounds[s]][bounds[s + 1]] > top) top = W[bounds[s]][bounds[s + 1]];
            }
            CHECK_MSG(ordered, "case %d (kind %d, %d layers, V %d%s) G=%d: stages not consecutive and non-empty", t,
                      kind, L, V, tied ? ", tied" : "", G);
            size_t best = brute_split(W, 0, L, G);
            cases++;
            optimal += ordered && top == best;
            CHECK_MSG(ordered && top == best,
                      "case %d (kind %d, %d layers, V %d%s) G=%d: largest stage %zu bytes, the best split %zu", t, kind,
                      L, V, tied ? ", tied" : "", G, top, best);
            if (G == L)
                for (int s = 0; s < G; s++) CHECK(bounds[s] == s); // one layer per stage
        }
        int64_t b[18];
        CHECK_ERR(target_stage_split(&c, dt, L + 1, b), "world.teacher_group_size");
        CHECK_ERR(target_stage_split(&c, dt, 0, b), "world.teacher_group_size");
    }
    printf("target_stage_split: %d of %d splits as balanced as the brute force\n", optimal, cases);
}

static void test_stage_memory(const backend *be0) {
    backend be = *be0;
    config cfg;
    config_defaults(&cfg);
    target_config c;
    for (int tied = 0; tied <= 1; tied++) {
        CHECK(made_target(&c, 0, 9, 3000, tied) == 0);
        target_outputs o = {.n_feat = 3, .layer_ids = {1, 4, 7}, .topk = 4};
        size_t whole = target_weight_bytes(&c, ops_act_dtype(&be));
        size_t inv = (size_t)c.rope_dim / 2 * sizeof(float) + ARENA_ALIGN; // every stage holds inv_freq
        size_t embed = (size_t)(c.vocab * c.hidden) * dtype_size(ops_act_dtype(&be)) + ARENA_ALIGN;
        teacher_stage_mem st[9];
        for (int G = 1; G <= 9; G++) {
            CHECK(teacher_group_mem(&cfg, &c, &be, &o, 64, G, 2, 0, st) == 0);
            size_t sum = 0;
            for (int s = 0; s < G; s++) {
                sum += st[s].weights;
                CHECK(st[s].total == st[s].weights + st[s].work + st[s].ring && st[s].ring == 0);
                CHECK(st[s].l0 == (s ? st[s - 1].l1 : 0) && st[s].l1 > st[s].l0);
            }
            CHECK(st[G - 1].l1 == 9);
            CHECK_MSG(sum == whole + (size_t)(G - 1) * inv + (tied && G > 1 ? embed : 0),
                      "G=%d%s: the stages' weights %zu, the whole %zu", G, tied ? " tied" : "", sum, whole);
            // the lm_head's logits tile only on the last stage
            if (G > 1) CHECK(st[G - 1].work > st[0].work);
        }
        CHECK_ERR(teacher_group_mem(&cfg, &c, &be, &o, 64, 10, 2, 0, st), "world.teacher_group_size");

        // the smallest G that fits: every smaller G has a stage over the budget
        CHECK(teacher_group_mem(&cfg, &c, &be, &o, 64, 3, 2, 0, st) == 0);
        size_t budget = 0;
        for (int s = 0; s < 3; s++) budget = st[s].total > budget ? st[s].total : budget;
        size_t largest = 0;
        int best = 0, N = teacher_plan_min_group(&cfg, &c, &be, &o, 64, 2, 0, budget, &largest, &best);
        CHECK(N >= 1 && N <= 3 && largest <= budget && best == N);
        for (int G = 1; G < N; G++) {
            CHECK(teacher_group_mem(&cfg, &c, &be, &o, 64, G, 2, 0, st) == 0);
            size_t top = 0;
            for (int s = 0; s < G; s++) top = st[s].total > top ? st[s].total : top;
            CHECK_MSG(top > budget, "G=%d fits (%zu of %zu) but the smallest is said to be %d", G, top, budget, N);
        }
        CHECK(teacher_plan_min_group(&cfg, &c, &be, &o, 64, 2, 0, 1000, &largest, &best) == 0 && best >= 1 &&
              largest > 1000);
    }

    // the NCCL buffers: T = 100, H = 32, D = 3 * 32, slots 2, 2 students, bf16
    teacher_contract ct = {.n_feat = 3, .max_tokens = 100};
    size_t act = 100 * (32 + 96) * 2, feat = 100 * 96 * 2;
    CHECK(teacher_stage_ring_bytes(&cfg, &c, &ct, 1, 0, 2, 1) == (2 * 2 + 1) * feat);           // G = 1: the payload ring
    CHECK(teacher_stage_ring_bytes(&cfg, &c, &ct, 3, 0, 2, 1) == (4 * 2 + 1) * act);            // first: the send ring
    CHECK(teacher_stage_ring_bytes(&cfg, &c, &ct, 3, 1, 2, 1) == (4 * 2 + 1) * act + act);      // + a receive buffer
    CHECK(teacher_stage_ring_bytes(&cfg, &c, &ct, 3, 2, 2, 1) == act + (4 * 2 + 1) * feat);     // last: receive + payloads
    CHECK(teacher_stage_ring_bytes(&cfg, &c, &ct, 3, 0, 0, 1) == 2 * act);                      // dump-features
    CHECK(teacher_stage_ring_bytes(&cfg, &c, &ct, 3, 2, 0, 1) == act);
    CHECK(teacher_stage_ring_bytes(&cfg, &c, &ct, 3, 1, 2, 0) == 0);                            // over MPI
}

int main(void) {
    test_rand_seed(0x9e3779b97f4a7c15ull); // the cases are the same on every run
    backend be;
    CHECK(backend_describe(&be, "cpu", 1) == 0);
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

    // 6, 7. the teacher's stages
    test_stage_split();
    test_stage_memory(&be);
    return test_finish("test_memory_plan");
}
