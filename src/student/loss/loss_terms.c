// loss_terms.c: the table of the slot loss's terms (see loss_terms.h).
#include "student/loss/loss_terms.h"

#include <stddef.h>

const loss_term loss_terms[LOSS_TERMS] = {
    [LOSS_TERM_CE] = {"ce", "loss.alpha", 1, NULL},
    [LOSS_TERM_KL] = {"kl", "loss.alpha", 1, NULL},
    [LOSS_TERM_CAP] = {"cap", "loss.lambda", 1, NULL},
    [LOSS_TERM_SEL] = {"sel", "loss.selector_weight", 0, "sel_miss"},
};

double loss_terms_total(const loss_config *c, const double sum_w_term[LOSS_TERMS], double W) {
    double total = -0.0; // (x + -0 = x)
    for (int t = 0; t < LOSS_TERMS; t++) total += loss_term_coef(t, c) * sum_w_term[t] / W;
    return total;
}
