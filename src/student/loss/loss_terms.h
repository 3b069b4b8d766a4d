// loss_terms.h: the terms of the slot loss, one entry each (SPEC §3.1, §4):
//   slot loss = sum_t coef_t(cfg) * term_t   = (1 - alpha) CE + alpha KL + lambda CAP [+ selector_weight SEL]
// An entry names the term's metric and the configuration key of its weight, loss_term_coef gives
// its coefficient; its value and gradient are computed where the entry's id is handled: the row terms (id below
// LOSS_ROW_TERMS) by the fused lm_head loss, one case each in loss_cuda.h's loss_term_row /
// loss_term_aux / loss_term_grad (both backends) and in loss_naive_cpu; the selector's by
// loss_selector.h. The step sums w * term per id (step_stats.sum_w_term), the logs report each
// entry's metric from those sums (train_log.c, eval.json, step-dump). docs/student.md, "Adding a
// loss term", lists every file a new term touches.
#pragma once

#ifdef __CUDACC__
#define LOSS_HD __host__ __device__
#else
#define LOSS_HD
#endif

typedef enum { LOSS_WEIGHT_DECAY = 0, LOSS_WEIGHT_DPACE = 1 } loss_weighting;

// The terms, in the order they are summed. The first LOSS_ROW_TERMS are computed per row by the
// fused lm_head loss (loss.h); the candidate selector's (DFlash2) by loss_selector.h.
typedef enum {
    LOSS_TERM_CE,
    LOSS_TERM_KL,
    LOSS_TERM_CAP,
    LOSS_ROW_TERMS,                    // the fused loss's terms end here
    LOSS_TERM_SEL = LOSS_ROW_TERMS,
    LOSS_TERMS
} loss_term_id;

// The loss settings: made from the configuration's loss.* keys by loss_config_make (loss_config.h).
typedef struct {
    double alpha;           // KL share (default 0.15)
    double lambda;          // CAP weight (default 0.1)
    double gamma;           // decay constant (7 for B = 16, 10 for B = 32)
    loss_weighting weighting;
    int label_teacher;      // 1: the label is the teacher's argmax instead of the data token
    double selector_weight; // DFlash2: weight of the candidate selector's k-way CE (default 1)
} loss_config;

// loss_term_coef: term t's coefficient in the slot loss (both backends use it).
static inline LOSS_HD double loss_term_coef(int t, const loss_config *c) {
    switch (t) {
    case LOSS_TERM_CE: return 1.0 - c->alpha;
    case LOSS_TERM_KL: return c->alpha;
    case LOSS_TERM_CAP: return c->lambda;
    case LOSS_TERM_SEL: return c->selector_weight;
    }
    return 0.0;
}

// A term's entry: how it is named and reported.
typedef struct {
    const char *metric;      // its name in metrics.jsonl, eval.json, the terminal lines, step-dump
    const char *key;         // the configuration key of its weight (declared by loss_config.c or the term's own file)
    int always;              // 1: every drafter's (reported on every line); 0: a kind's (DFlash2's
                             // selector), reported where it scored rows
    const char *miss_metric; // always 0: the share of its scored rows whose label it missed
} loss_term;

#ifdef __cplusplus
extern "C" {
#endif
extern const loss_term loss_terms[LOSS_TERMS];
#ifdef __cplusplus
}
#endif

// loss_terms_total: sum_t coef_t * sum_w_term[t] / W, the loss the weighted sums add up to.
double loss_terms_total(const loss_config *c, const double sum_w_term[LOSS_TERMS], double W);
