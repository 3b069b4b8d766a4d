// regenerate.c: `--mode regenerate`'s run: its set-up in order, the decode of a shard with
// continuous batching, this teacher's shards, and the end (the merge or a stop); the prompts, the
// identity, the shards' claims and the parts are in regen_*.c (see regenerate.h).
#include "teacher/regenerate.h"
#include "common/core/config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/stop_relay.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/core/stop.h"
#include "common/core/rng.h"
#include "common/kernels/ops.h"
#include "teacher/regen_identity.h"
#include "teacher/regen_job.h"
#include "teacher/regen_output.h"
#include "teacher/regen_shards.h"
#include "teacher/teacher_group.h"

#define REGEN_RNG_ID 0x5247u      // "RG": prompt i's sampling stream is (seed, i, REGEN_RNG_ID)
#define REGEN_AUTO_SEQS_CAP 64    // regenerate.max_seqs = 0 with a memory budget: at most this many
#define REGEN_AUTO_SEQS_NOBUDGET 8
#define REGEN_PROGRESS_S 10.0
#define REGEN_MAX_STAGES 64

// ----------------------------------------------------------------------------- set-up

// Slots: regenerate.max_seqs, or as many as teacher.mem_budget holds next to the weights.
static int regen_slots(regen *g) {
    const config *cfg = g->cfg;
    int64_t cap = cfg->regen_max_seqs > 0 ? cfg->regen_max_seqs : REGEN_AUTO_SEQS_NOBUDGET;
    if (cfg->regen_max_seqs == 0 && cfg->teacher_mem_budget > 0) { // the fewest any stage of a group holds
        int64_t bounds[REGEN_MAX_STAGES + 1] = {0, 0}, b0 = g->target.layer_begin, b1 = g->target.layer_end;
        if (g->group_size > REGEN_MAX_STAGES) return error_set("regenerate: teacher groups of at most %d ranks", REGEN_MAX_STAGES);
        if (g->group_size > 1 && target_stage_split(&g->target.cfg, ops_act_dtype(g->target.be), g->group_size, bounds) < 0) return -1;
        size_t budget = (size_t)cfg->teacher_mem_budget;
        for (int k = 0; k < g->group_size; k++) {
            g->target.layer_begin = bounds[k];
            g->target.layer_end = bounds[k + 1];
            size_t weights = target_model_weight_bytes(&g->target);
            int64_t c = 0;
            for (int s = 1; s <= REGEN_AUTO_SEQS_CAP; s++)
                if (weights + target_decoder_bytes(&g->target, s, g->max_len, (int)cfg->teacher_vocab_tile, &g->sampling) <= budget) c = s;
            if (c == 0) {
                size_t one = target_decoder_bytes(&g->target, 1, g->max_len, (int)cfg->teacher_vocab_tile, &g->sampling);
                g->target.layer_begin = b0;
                g->target.layer_end = b1;
                return error_set("teacher.mem_budget %lld bytes does not hold the weights (%zu bytes) and one sequence "
                                 "of %d cached positions (%zu bytes)%s", (long long)cfg->teacher_mem_budget, weights,
                                 g->max_len, one, g->group_size > 1 ? " on a stage of the teacher group" : "");
            }
            if (k == 0 || c < cap) cap = c;
        }
        g->target.layer_begin = b0;
        g->target.layer_end = b1;
    }
    if (cap > g->shard_prompts) cap = g->shard_prompts; // never more slots than a shard has prompts
    g->max_seqs = (int)cap;
    return 0;
}

static int regen_setup(regen *g, const world *w) {
    const config *cfg = g->cfg;
    g->group_size = w->group_size > 1 ? w->group_size : 1;
    // (target.path, regenerate.prompts and regenerate.out are set and claimed: the mode's needs and
    // claim, src/modes/mode_regenerate.c) the weights are loaded last, once the inputs and the output are known to be usable
    if (target_config_load(&g->target.cfg, cfg->target_path) || teacher_stage_select(w, &g->target)) return -1;
    const target_config *c = &g->target.cfg;
    if (regen_stops_load(&g->stops, cfg, c->vocab) < 0) return -1;
    if (regen_prompts_index(&g->prompts, cfg->regen_prompts, c->vocab) < 0) return -1;
    if (cfg->regen_max_len > c->max_positions)
        return error_set("regenerate.max_len %lld is past the target's max_position_embeddings %lld (%s/config.json)",
                         (long long)cfg->regen_max_len, (long long)c->max_positions, cfg->target_path);
    g->max_new = (int)cfg->regen_max_new_tokens;
    int64_t L = cfg->regen_max_len > 0 ? cfg->regen_max_len : g->prompts.longest + g->max_new - 1;
    if (cfg->regen_max_len == 0 && L > c->max_positions) L = c->max_positions;
    if (L > INT32_MAX / 2) L = INT32_MAX / 2;
    g->max_len = (int)L;
    for (int64_t i = 0; i < g->prompts.n; i++)
        if (g->prompts.len[i] > g->max_len || g->prompts.len[i] > c->max_positions)
            return error_set("regenerate.prompts %s line %lld: the prompt has %d tokens, longer than the cache of %d "
                             "positions per sequence (%s; the target's max_position_embeddings is %lld)",
                             cfg->regen_prompts, (long long)g->prompts.line_no[i], g->prompts.len[i], g->max_len,
                             cfg->regen_max_len > 0 ? "regenerate.max_len" : "the longest prompt + max_new_tokens - 1",
                             (long long)c->max_positions);
    // the held-out rule must leave samples to train on
    double h = cfg->regen_heldout;
    int64_t held = h >= 1 ? (h < (double)g->prompts.n ? (int64_t)h : g->prompts.n) : h > 0 ? (int64_t)floor(h * (double)g->prompts.n) : 0;
    if (h > 0 && held < 1) held = 1;
    if (held >= g->prompts.n)
        return error_set("regenerate.heldout %g holds out all %lld prompts of %s, leaving none to train on: set "
                         "regenerate.heldout below %lld (a count) or below 1 (a fraction), or 0 for none",
                         h, (long long)g->prompts.n, cfg->regen_prompts, (long long)g->prompts.n);
    if (regen_shards_plan(g) < 0) return -1;
    g->sampling = (decode_sampling){.temperature = (float)cfg->regen_temperature, .top_p = (float)cfg->regen_top_p,
                               .top_k = (int)cfg->regen_top_k};
    if (regen_slots(g) < 0) return -1;
    snprintf(g->parts, sizeof g->parts, "%s.parts", cfg->regen_out);
    if (regen_identity_make(g) < 0) return -1;
    int out = regen_identity_check_out(g);
    if (out < 0) return -1;
    g->done_already = out;
    if (out) return 0;
    if (target_load_stage(&g->target, cfg->target_path, g->target.be, g->target.layer_begin, g->target.layer_end > 0 ? g->target.layer_end : -1))
        return -1;
    if (target_decoder_init(&g->decoder, &g->target, g->max_seqs, g->max_len, (int)cfg->teacher_vocab_tile, &g->sampling)) return -1;
    regen_link_init(&g->link, w, &g->decoder, g->links);
    return 0;
}

// ----------------------------------------------------------------------------- one shard

// Record token t for shard prompt j (in slot s); 1 when its reply has ended.
static int regen_emit(regen *g, shard_state *st, int64_t j, int32_t t) {
    int32_t n = st->rlen[j];
    st->reply[st->at[j] + n] = t;
    st->rlen[j] = ++n;
    st->tokens++;
    int P = g->prompts.len[st->first + j];
    if (regen_stops_has(&g->stops, t)) st->finish[j] = FINISH_STOP;
    else if (n >= g->max_new || P + n - 1 >= g->max_len) st->finish[j] = FINISH_LENGTH; // no room to feed t
    else return 0;
    return 1;
}

// The draw of shard prompt j's next token from its stream (sampling), the one number decode_sample's
// rule takes from it per token.
static void regen_draw(regen *g, shard_state *st, int64_t j, double *u) {
    if (g->sampling.temperature > 0.0f) *u = rng_uniform(&st->r[j]);
}

// Decode the shard's prompts with continuous batching: the free slots take the next waiting prompts,
// prefilled together as one pack (target_decoder_add_batch).
// done counts this rank's prompts; the progress line counts the job's: the shards claim in order,
// so every prompt before this shard's is claimed by some rank, and its rate and ETA are the job's.
static int regen_decode_shard(regen *g, shard_state *st, progress *pg, int64_t *done) {
    target_decoder *d = &g->decoder;
    int sampling = g->sampling.temperature > 0.0f;
    int64_t waiting = 0, finished = 0;
    regen_link_reset(&g->link);
    while (finished < st->cnt) {
        while (d->n_seq < g->max_seqs && waiting < st->cnt) { // refill the free slots, one prefill pack
            // the waiting prompts that fit the free slots and the decoder's work buffers (rows tokens;
            // one prompt always fits: it is at most max_len <= rows)
            int s0 = d->n_seq, k = 0, T = 0;
            while (s0 + k < g->max_seqs && waiting < st->cnt && T + g->prompts.len[st->first + waiting] <= d->rows) {
                int64_t j = waiting++;
                rng_init(&st->r[j], (uint64_t)g->cfg->regen_seed, (uint64_t)(st->first + j), REGEN_RNG_ID);
                if (regen_prompts_read(&g->prompts, st->first + j, g->cfg->regen_prompts) < 0) return -1;
                memcpy(st->pack + T, g->prompts.s.ids, (size_t)g->prompts.s.n * sizeof(int32_t));
                st->plen[k] = (int)g->prompts.s.n;
                T += st->plen[k];
                st->u[k] = 0;
                regen_draw(g, st, j, &st->u[k]);
                st->slot_of[s0 + k++] = j;
            }
            if (regen_link_add_batch(&g->link, k, st->pack, st->plen, sampling ? st->u : NULL, &st->cur[s0]) < 0)
                return -1;
            for (int s = s0 + k - 1; s >= s0; s--) { // from the top: the sequence moved into s has been handled
                if (!regen_emit(g, st, st->slot_of[s], st->cur[s])) continue;
                int last = d->n_seq - 1;
                regen_link_remove(&g->link, s);
                if (s != last) {
                    st->slot_of[s] = st->slot_of[last];
                    st->cur[s] = st->cur[last];
                }
                finished++;
                (*done)++;
                progress_update(pg, st->base + finished);
            }
        }
        if (d->n_seq == 0) continue;
        int n = d->n_seq;
        for (int s = 0; s < n; s++) regen_draw(g, st, st->slot_of[s], &st->u[s]);
        if (regen_link_step(&g->link, st->cur, sampling ? st->u : NULL, st->next) < 0) return -1;
        uint8_t ended[4096];
        for (int s = 0; s < n; s++) {
            st->cur[s] = st->next[s];
            ended[s] = (uint8_t)regen_emit(g, st, st->slot_of[s], st->cur[s]);
        }
        for (int s = n - 1; s >= 0; s--) { // from the top: the sequence moved into s has been handled
            if (!ended[s]) continue;
            int last = d->n_seq - 1;
            regen_link_remove(&g->link, s);
            if (s != last) {
                st->slot_of[s] = st->slot_of[last];
                st->cur[s] = st->cur[last];
            }
            finished++;
            (*done)++;
            progress_update(pg, st->base + finished);
        }
    }
    return 0;
}

static void regen_progress_line(int64_t done, int64_t shards, int64_t tokens, double secs) {
    double tps = secs > 0 ? (double)tokens / secs : 0;
    log_info("regenerate: %lld prompts in %lld shard(s) by this rank, %lld tokens generated, %.1f tokens/s",
             (long long)done, (long long)shards, (long long)tokens, tps);
}

// This teacher's shards: each shard not claimed yet, claimed in order (a teacher that finishes
// takes the next one: the work balances itself). A shard's part depends only on its prompts and
// the settings, so who decodes it does not change the set.
static int regen_run_shards(regen *g, const world *w) {
    int64_t per = g->shard_prompts, done = 0, shards = 0;
    shard_state st = {0};
    st.at = xmalloc(((size_t)per + 1) * sizeof(int64_t));
    st.reply = xmalloc((size_t)g->reply_cap * sizeof(int32_t)); // checked at setup
    st.rlen = xmalloc((size_t)per * sizeof(int32_t));
    st.finish = xmalloc((size_t)per);
    st.r = xmalloc((size_t)per * sizeof(rng));
    st.slot_of = xmalloc((size_t)g->max_seqs * sizeof(int64_t));
    st.cur = xmalloc((size_t)g->max_seqs * sizeof(int32_t));
    st.next = xmalloc((size_t)g->max_seqs * sizeof(int32_t));
    st.u = xmalloc((size_t)g->max_seqs * sizeof(double));
    st.pack = xmalloc((size_t)g->decoder.rows * sizeof(int32_t));
    st.plen = xmalloc((size_t)g->max_seqs * sizeof(int));
    progress pg;
    progress_start(&pg, "regenerate (the job's prompts: parts on disk + this shard's)", g->prompts.n);
    double t0 = time_now(), t_line = t0;
    int64_t skipped = 0, tokens0 = 0, said = -1; // said: prompts done at the last tokens/s line
    int rc = 0;
    for (int64_t s = 0; rc == 0 && s < g->n_shards; s++) {
        if (stop_relay_poll()) break; // a signal on any rank: the parts written are kept for the resume (stop.h)
        int mine = regen_shards_claim(g, s);
        if (mine <= 0) {
            rc = mine;
            continue;
        }
        st.first = s * per;
        st.cnt = st.first + per < g->prompts.n ? per : g->prompts.n - st.first;
        int have = regen_output_part_found(g, s, st.cnt);
        if (have < 0) {
            rc = -1;
            break;
        }
        if (have) {
            skipped++;
            done += st.cnt;
            tokens0 = st.tokens;
            progress_update(&pg, regen_output_prompts_done(g));
            continue;
        }
        if ((rc = regen_prompts_check_shard(&g->prompts, st.first, st.cnt, g->cfg->regen_prompts)) < 0) break;
        st.base = regen_output_prompts_done(g);
        progress_update(&pg, st.base);
        st.at[0] = 0;
        for (int64_t j = 0; j < st.cnt; j++) st.at[j + 1] = st.at[j] + regen_reply_need(g, st.first + j);
        memset(st.rlen, 0, (size_t)st.cnt * sizeof(int32_t));
        rc = regen_decode_shard(g, &st, &pg, &done);
        if (rc == 0) rc = regen_output_part_write(g, &st, s);
        if (rc == 0) shards++;
        if (rc == 0) config_test_slow(g->cfg, w->rank); // testing: a slow teacher
        double now = time_now();
        if (rc == 0 && now - t_line >= REGEN_PROGRESS_S) {
            regen_progress_line(done, shards, st.tokens - tokens0, now - t0);
            t_line = now;
            said = done;
        }
    }
    if (rc == 0) {
        pg.done = g->prompts.n; // every shard is claimed (some may still be decoding on other ranks)
        progress_end(&pg);
        if (said != done) regen_progress_line(done, shards, st.tokens - tokens0, time_now() - t0); // (not twice)
        if (skipped) log_info("regenerate: %lld shard(s) of this rank were done by an earlier run", (long long)skipped);
    }
    free(st.at);
    free(st.reply);
    free(st.rlen);
    free(st.finish);
    free(st.r);
    free(st.slot_of);
    free(st.cur);
    free(st.next);
    free(st.u);
    free(st.pack);
    free(st.plen);
    return rc;
}

// ----------------------------------------------------------------------------- the mode

int teacher_regenerate(const world *w, const config *cfg, backend *be, payload_link *links) {
    regen *g = xcalloc(1, sizeof *g);
    g->cfg = cfg;
    g->target.be = be;
    g->links = links;
    int rc = regen_setup(g, w);
    if (rc == 0 && !g->done_already && fs_mkdirs(g->parts) < 0) rc = error_prefix("regenerate.out");
    if (rc == 0 && w->rank == 0 && !g->done_already)
        log_info("regenerate: %lld prompts (longest %lld tokens) in %lld shard(s) over %d teacher(s) of %d rank(s); %d "
                 "slots of %d positions; max_new_tokens %d; %d stop id(s); %s", (long long)g->prompts.n,
                 (long long)g->prompts.longest, (long long)g->n_shards, w->groups, g->group_size, g->max_seqs, g->max_len, g->max_new, g->stops.n,
                 g->sampling.temperature > 0 ? "sampling" : "greedy");
    if (rc == 0 && w->rank == 0 && g->group_size > 1 && !g->done_already)
        log_info("regenerate: the stages pass their rows %s", g->link.on_link ? "over NCCL, GPU to GPU" : "over MPI from host memory");
    // Every rank set up, or none runs (a later stage waiting on a first stage that failed would hang).
    int all_set_up = rc == 0;
    watchdog_allreduce(&all_set_up, 1, MPI_INT, MPI_MIN, "the other ranks to set up");
    int done_already = g->done_already; // rank 0's finding holds for all
    if (all_set_up) watchdog_bcast(&done_already, (int)sizeof done_already, 0, "rank 0 to check the earlier output");
    if (all_set_up && done_already) {
        if (w->rank == 0) log_info("regenerate: %s is already made with these settings: nothing to do", cfg->regen_out);
        if (w->rank == 0) regen_output_tidy(cfg); // an interrupted job's OUT.parts and temporaries
    } else if (all_set_up && regen_shards_claims_dir(g, w) < 0) {
        rc = -1;
    }
    if (!all_set_up || done_already || rc) {
        // the ranks that failed report below; the others have nothing to run
    } else if (g->link.first) { // a group's first stage drives its decoder; the others follow its calls
        rc = regen_run_shards(g, w);
        regen_link_stop(&g->link);
    } else if (regen_link_follow(&g->link) < 0) {
        fatal("%s", error_msg()); // an internal failure on a later stage: the first stage waits for it
    }
    // The first failing rank says why; every rank then agrees to stop.
    int first = rc ? w->rank : w->size;
    watchdog_allreduce(&first, 1, MPI_INT, MPI_MIN, "the other ranks to finish their shards");
    int stopped = stop_relay_poll(); // a signal on any rank: no merge yet (stop.h, stop_relay.h)
    watchdog_allreduce(&stopped, 1, MPI_INT, MPI_MAX, "the other ranks to finish their shards");
    if (first < w->size) {
        if (w->rank == first) log_error("%s", error_msg());
        rc = -1;
    } else if (stopped && !done_already) {
        if (w->rank == 0)
            log_info("regenerate: stopped by %s: the complete parts are kept in %s, %s is written once every part is; "
                     "resume with the same command", stop_signal_name(stopped), g->parts, cfg->regen_out);
    } else if (w->rank == 0 && !done_already) {
        rc = regen_output_merge(g);
        if (rc) log_error("%s", error_msg());
    }
    regen_link_free(&g->link);
    target_decoder_free(&g->decoder);
    regen_prompts_free(&g->prompts);
    target_free(&g->target);
    free(g);
    int any = rc ? 1 : 0;
    watchdog_allreduce(&any, 1, MPI_INT, MPI_MAX, "rank 0 to merge the parts");
    return any ? -1 : 0;
}

// Settings: the keys of --mode regenerate's decode loop: its sequences and their lengths (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key regenerate_keys[] = {
    {"regenerate.max_new_tokens", CFG_INT, CONFIG_F(regen_max_new_tokens), "512", "--mode regenerate: most tokens generated per reply (a reply cut there has finish_reason length and no end token)", NULL, 1, 1073741824},
    {"regenerate.max_seqs", CFG_INT, CONFIG_F(regen_max_seqs), "0", "--mode regenerate: sequences decoded at once per teacher (continuous batching: a finished one is replaced by the next prompt); 0 = as many as teacher.mem_budget holds, up to 64 (8 without a budget)", NULL, 0, 4096},
    {"regenerate.max_len", CFG_INT, CONFIG_F(regen_max_len), "0", "--mode regenerate: cached positions per sequence (prompt + reply - 1; a reply that fills it ends with finish_reason length, a longer prompt is an error); 0 = the longest prompt + max_new_tokens - 1, at most the target's max_position_embeddings (a value past it is refused)", NULL, 0, 1073741824},
};
const config_key_set regenerate_settings = CONFIG_KEY_SET(regenerate_keys, NULL);
