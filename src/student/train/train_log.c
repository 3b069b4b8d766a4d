// train_log.c: the student's metrics: statistics summed over the students, metrics.jsonl and the
// terminal lines (see train_log.h).
#include "student/train/train_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "student/loss/loss_terms.h"
#include "student/train/students.h"

int train_log_open(train_log *lg, const config *cfg, int append) {
    memset(lg, 0, sizeof *lg);
    if (fs_mkdirs(cfg->run_dir)) return error_prefix("run.dir");
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/config.json", cfg->run_dir);
    char *json = config_to_json(cfg);
    size_t jn = strlen(json);
    json = xrealloc(json, jn + 2);
    memcpy(json + jn, "\n", 2);
    int rc = fs_write_text(path, json);
    free(json);
    if (rc) return -1;
    snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->run_dir);
    lg->t0 = time_now();
    if (append) { // a resumed run's wall_s goes on from the last one its earlier jobs wrote
        FILE *old = fopen(path, "r");
        char line[8192];
        while (old && fgets(line, sizeof line, old)) {
            const char *w = strstr(line, "\"wall_s\": ");
            double v = w ? strtod(w + 10, NULL) : 0;
            if (v > lg->wall_before) lg->wall_before = v;
        }
        if (old) fclose(old);
    }
    lg->jsonl = fopen(path, append ? "a" : "w");
    if (!lg->jsonl) return error_set("%s: %s", path, strerror(errno));
    return 0;
}

double train_log_wall(const train_log *lg) { return lg->wall_before + (time_now() - lg->t0); }

void train_stats_add(step_stats *a, const step_stats *b) {
    a->sum_w += b->sum_w;
    for (int t = 0; t < LOSS_TERMS; t++) {
        a->sum_w_term[t] += b->sum_w_term[t];
        a->term_scored[t] += b->term_scored[t];
        a->term_miss[t] += b->term_miss[t];
    }
    a->anchors += b->anchors;
    for (int j = 0; j < STEP_MAX_SLOTS; j++) {
        a->slot_scored[j] += b->slot_scored[j];
        a->slot_correct[j] += b->slot_correct[j];
    }
    a->tau_chain_sum += b->tau_chain_sum;
    a->decode_tokens += b->decode_tokens;
    a->decode_steps += b->decode_steps;
    for (int t = 0; t < STEP_TREE_BUDGETS; t++) a->tau_tree_sum[t] += b->tau_tree_sum[t];
    a->ctx_tokens += b->ctx_tokens;
    a->block_tokens += b->block_tokens;
}

void train_stats_allreduce(step_stats *s, MPI_Comm comm) {
    enum { ND = 2 + STEP_TREE_BUDGETS + LOSS_TERMS, NI = 5 + 2 * STEP_MAX_SLOTS + 2 * LOSS_TERMS };
    double d[ND];
    int64_t i[NI];
    d[0] = s->sum_w, d[1] = s->tau_chain_sum;
    memcpy(d + 2, s->tau_tree_sum, sizeof s->tau_tree_sum);
    memcpy(d + 2 + STEP_TREE_BUDGETS, s->sum_w_term, sizeof s->sum_w_term);
    i[0] = s->anchors, i[1] = s->ctx_tokens, i[2] = s->block_tokens, i[3] = s->decode_tokens, i[4] = s->decode_steps;
    memcpy(i + 5, s->slot_scored, sizeof s->slot_scored);
    memcpy(i + 5 + STEP_MAX_SLOTS, s->slot_correct, sizeof s->slot_correct);
    memcpy(i + 5 + 2 * STEP_MAX_SLOTS, s->term_scored, sizeof s->term_scored);
    memcpy(i + 5 + 2 * STEP_MAX_SLOTS + LOSS_TERMS, s->term_miss, sizeof s->term_miss);
    students_allreduce(d, ND, MPI_DOUBLE, MPI_SUM, comm, "the students' statistics");
    students_allreduce(i, NI, MPI_INT64_T, MPI_SUM, comm, "the students' statistics");
    s->sum_w = d[0], s->tau_chain_sum = d[1];
    memcpy(s->tau_tree_sum, d + 2, sizeof s->tau_tree_sum);
    memcpy(s->sum_w_term, d + 2 + STEP_TREE_BUDGETS, sizeof s->sum_w_term);
    s->anchors = i[0], s->ctx_tokens = i[1], s->block_tokens = i[2], s->decode_tokens = i[3], s->decode_steps = i[4];
    memcpy(s->slot_scored, i + 5, sizeof s->slot_scored);
    memcpy(s->slot_correct, i + 5 + STEP_MAX_SLOTS, sizeof s->slot_correct);
    memcpy(s->term_scored, i + 5 + 2 * STEP_MAX_SLOTS, sizeof s->term_scored);
    memcpy(s->term_miss, i + 5 + 2 * STEP_MAX_SLOTS + LOSS_TERMS, sizeof s->term_miss);
}

double train_stats_loss(const step_stats *s, const loss_config *lc) {
    return loss_terms_total(lc, s->sum_w_term, s->sum_w > 0 ? s->sum_w : 1);
}

// train_stats_terms_text: "  ce 1.2345  kl ..." of every term reported on every line, into buf.
static const char *train_stats_terms_text(const step_stats *s, char *buf, size_t size) {
    double W = s->sum_w > 0 ? s->sum_w : 1;
    size_t n = 0;
    buf[0] = '\0';
    for (int t = 0; t < LOSS_TERMS && n < size; t++)
        if (loss_terms[t].always)
            n += (size_t)snprintf(buf + n, size - n, "  %s %.4f", loss_terms[t].metric, s->sum_w_term[t] / W);
    return buf;
}

double train_stats_tau_decode(const step_stats *s) {
    return s->decode_steps > 0 ? (double)s->decode_tokens / (double)s->decode_steps : 0;
}

void train_stats_json(FILE *f, const step_stats *s, const loss_config *lc, int B) {
    double W = s->sum_w > 0 ? s->sum_w : 1;
    if (s->decode_steps > 0)
        fprintf(f, "\"tau_decode\": %.4f, \"tau_decode_steps\": %lld, \"tau_decode_tokens\": %lld, ", train_stats_tau_decode(s),
                (long long)s->decode_steps, (long long)s->decode_tokens);
    fprintf(f, "\"loss\": %.6f, ", train_stats_loss(s, lc));
    for (int t = 0; t < LOSS_TERMS; t++)
        if (loss_terms[t].always) fprintf(f, "\"%s\": %.6f, ", loss_terms[t].metric, s->sum_w_term[t] / W);
    fprintf(f, "\"acc\": [");
    for (int j = 1; j < B; j++)
        fprintf(f, "%s%.4f", j > 1 ? ", " : "", s->slot_scored[j] ? (double)s->slot_correct[j] / (double)s->slot_scored[j] : 0.0);
    fprintf(f, "], \"tau_chain\": %.4f, \"tau_tree\": {", s->anchors ? s->tau_chain_sum / (double)s->anchors : 0);
    for (int t = 0; t < STEP_TREE_BUDGETS; t++)
        fprintf(f, "%s\"%d\": %.4f", t ? ", " : "", step_tree_budgets[t], s->anchors ? s->tau_tree_sum[t] / (double)s->anchors : 0);
    fprintf(f, "}, \"anchors\": %lld", (long long)s->anchors);
    for (int t = 0; t < LOSS_TERMS; t++) // a kind's term (DFlash2's selector): its mean and the share it missed
        if (!loss_terms[t].always && s->term_scored[t] > 0)
            fprintf(f, ", \"%s\": %.6f, \"%s\": %.4f", loss_terms[t].metric, s->sum_w_term[t] / W, loss_terms[t].miss_metric,
                    (double)s->term_miss[t] / (double)s->term_scored[t]);
}

void train_log_eval_text(const char *what, const step_stats *s, const loss_config *lc) {
    char terms[256];
    log_info("%s  tau_decode %.3f (%lld steps)  loss %.4f%s  acc@1 %.3f  tau_chain %.3f  tau_tree@%d %.3f", what,
             train_stats_tau_decode(s), (long long)s->decode_steps, train_stats_loss(s, lc),
             train_stats_terms_text(s, terms, sizeof terms),
             s->slot_scored[1] ? (double)s->slot_correct[1] / (double)s->slot_scored[1] : 0.0,
             s->anchors ? s->tau_chain_sum / (double)s->anchors : 0, step_tree_budgets[STEP_TREE_BUDGETS - 1],
             s->anchors ? s->tau_tree_sum[STEP_TREE_BUDGETS - 1] / (double)s->anchors : 0);
}

void train_log_line(train_log *lg, const char *split, int64_t step, const step_stats *s, const loss_config *lc, int B,
                    double lr, double grad_norm, double seconds, double wait_frac, const int64_t *peaks, int n_peaks) {
    FILE *f = lg->jsonl;
    fprintf(f, "{\"step\": %lld, ", (long long)step);
    if (split) fprintf(f, "\"split\": \"%s\", ", split);
    fprintf(f, "\"wall_s\": %.1f, ", train_log_wall(lg));
    train_stats_json(f, s, lc, B);
    if (!split) {
        fprintf(f, ", \"lr\": %.6g, \"grad_norm\": %.6f, \"block_tokens_per_s\": %.1f, \"ctx_tokens_per_s\": %.1f, "
                   "\"teacher_wait_frac\": %.4f, \"peak_bytes\": [",
                lr, grad_norm, seconds > 0 ? (double)s->block_tokens / seconds : 0, seconds > 0 ? (double)s->ctx_tokens / seconds : 0,
                wait_frac);
        for (int r = 0; r < n_peaks; r++) fprintf(f, "%s%lld", r ? ", " : "", (long long)peaks[r]);
        fprintf(f, "]");
    }
    fprintf(f, "}\n");
    fflush(f);
    if (split) {
        char what[48];
        snprintf(what, sizeof what, "eval  step %5lld", (long long)step);
        train_log_eval_text(what, s, lc);
    } else {
        char terms[256];
        log_info("step %5lld  loss %.4f%s  tau %.3f  lr %.2e  |g| %.3f  %.0f block tok/s  wait %.0f%%",
                 (long long)step, train_stats_loss(s, lc), train_stats_terms_text(s, terms, sizeof terms),
                 s->anchors ? s->tau_chain_sum / (double)s->anchors : 0, lr, grad_norm,
                 seconds > 0 ? (double)s->block_tokens / seconds : 0, 100 * wait_frac);
    }
}

int train_log_failed(const train_log *lg) { return lg->jsonl && ferror(lg->jsonl); }

void train_log_summary(train_log *lg, int finished, int64_t steps, double wall, double block_per_s, double ctx_per_s,
                       const int64_t *peaks, int n_ranks, int T, const step_stats *first_eval,
                       const step_stats *last_eval, const char *drafter_dir) {
    double tau0 = first_eval->anchors ? first_eval->tau_chain_sum / (double)first_eval->anchors : 0;
    double tau1 = last_eval->anchors ? last_eval->tau_chain_sum / (double)last_eval->anchors : 0;
    double dec0 = train_stats_tau_decode(first_eval), dec1 = train_stats_tau_decode(last_eval);
    fprintf(lg->jsonl, "{\"summary\": true, \"finished\": %s, \"steps\": %lld, \"wall_s\": %.2f, \"block_tokens_per_s\": %.1f, "
                       "\"ctx_tokens_per_s\": %.1f, \"peak_bytes\": [", finished ? "true" : "false", (long long)steps, wall,
            block_per_s, ctx_per_s);
    for (int r = 0; r < n_ranks; r++) fprintf(lg->jsonl, "%s%lld", r ? ", " : "", (long long)peaks[r]);
    fprintf(lg->jsonl, "], \"tau_decode_first\": %.4f, \"tau_decode_last\": %.4f, \"tau_decode_steps_last\": %lld, "
                       "\"tau_chain_first\": %.4f, \"tau_chain_last\": %.4f}\n",
            dec0, dec1, (long long)last_eval->decode_steps, tau0, tau1);
    log_info("summary: %lld steps in %.1fs, %.0f block tokens/s, held-out tau_decode %.3f -> %.3f (%lld decoding steps; "
             "tau_chain %.3f -> %.3f), drafter in %s", (long long)steps, wall, block_per_s, dec0, dec1,
             (long long)last_eval->decode_steps, tau0, tau1, drafter_dir);
    char pb[32];
    for (int r = 0; r < n_ranks; r++)
        log_info("  peak memory rank %d (%s): %s", r, r < T ? "teacher" : "student", bytes_format((size_t)peaks[r], pb, sizeof pb));
}

int train_log_finished(const char *run_dir, int64_t steps) {
    char path[CONFIG_STR + 32], want[64], line[8192];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    snprintf(want, sizeof want, "\"steps\": %lld", (long long)steps);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, want);
        size_t n = strlen(want);
        if (strstr(line, "\"summary\": true") && strstr(line, "\"finished\": true") && at &&
            (at[n] == ',' || at[n] == '}'))
            found = 1;
    }
    if (f) fclose(f);
    return found;
}

int64_t train_log_finished_at(const char *run_dir) {
    char path[CONFIG_STR + 32], line[8192];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    int64_t at = -1;
    while (f && fgets(line, sizeof line, f)) {
        const char *steps = strstr(line, "\"steps\": ");
        size_t n = strlen(line);
        long long v;
        if (n >= 2 && line[n - 1] == '\n' && line[n - 2] == '}' && // a whole line: a cut one is no record
            strstr(line, "\"summary\": true") && strstr(line, "\"finished\": true") && steps &&
            sscanf(steps + 9, "%lld", &v) == 1 && v >= 0)
            at = v;
    }
    if (f) fclose(f);
    return at;
}

int train_log_exported(const char *run_dir, int64_t steps) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "a");
    int ok = f && fprintf(f, "{\"summary\": true, \"finished\": true, \"steps\": %lld, \"exported_on_resume\": true}\n",
                          (long long)steps) > 0;
    if (f && fclose(f) != 0) ok = 0;
    return ok ? 0 : error_set("%s: a write failed (is the disk full?)", path);
}

void train_log_close(train_log *lg) {
    if (lg->jsonl) fclose(lg->jsonl);
    lg->jsonl = NULL;
}
