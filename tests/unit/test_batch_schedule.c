// test_batch_schedule.c: the computed schedule (batch_schedule_item / _group / _group_of_step)
// against the list it stands for, built here step by step as the training loop consumes it: an
// evaluation first, each step's items, an evaluation after every eval_interval steps and after the
// last; over students, block counts, intervals that do and do not divide the steps, and more
// held-out batches than students or fewer. Also: train.steps = 1e9 costs no memory.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/wire.h"
#include "common/core/config.h"
#include "student/train/batch_source.h"
#include "testing.h"

typedef struct {
    batch_item *items;
    batch_group *groups;
    int64_t n, ng;
} listed;

static void list_make(listed *l, int64_t steps, int64_t G, int64_t I, int64_t ev, int s, int S) {
    int64_t cap_items = steps * G + (steps + 2) * (ev + 1) + 1, cap_groups = 2 * steps + 2;
    l->items = malloc((size_t)cap_items * sizeof *l->items);
    l->groups = malloc((size_t)cap_groups * sizeof *l->groups);
    l->n = l->ng = 0;
    for (int64_t t = -1; t < steps; t++) {
        if (t >= 0) {
            l->groups[l->ng] = (batch_group){WIRE_TRAIN, l->n, 0};
            for (int64_t j = s; j < G; j += S) l->items[l->n++] = (batch_item){WIRE_TRAIN, t * G + j};
            l->groups[l->ng].count = l->n - l->groups[l->ng].first;
            l->ng++;
        }
        if (ev > 0 && (t < 0 || (t + 1) % I == 0 || t + 1 == steps)) {
            l->groups[l->ng] = (batch_group){WIRE_HELDOUT, l->n, 0};
            for (int64_t h = s; h < ev; h += S) l->items[l->n++] = (batch_item){WIRE_HELDOUT, h};
            l->groups[l->ng].count = l->n - l->groups[l->ng].first;
            l->ng++;
        }
    }
}

int main(void) {
    const int64_t steps_v[] = {1, 2, 5, 7, 12}, I_v[] = {1, 2, 3, 5, 100}, ev_v[] = {0, 1, 2, 3, 7};
    const int S_v[] = {1, 2, 3};
    long cases = 0, wrong = 0;
    for (size_t a = 0; a < sizeof steps_v / sizeof *steps_v; a++)
        for (size_t b = 0; b < sizeof I_v / sizeof *I_v; b++)
            for (size_t c = 0; c < sizeof ev_v / sizeof *ev_v; c++)
                for (size_t d = 0; d < sizeof S_v / sizeof *S_v; d++)
                    for (int64_t mult = 1; mult <= 2; mult++) {
                        int S = S_v[d];
                        int64_t G = S * mult, steps = steps_v[a], I = I_v[b], ev_have = ev_v[c];
                        config cfg;
                        config_defaults(&cfg);
                        cfg.steps = steps, cfg.batches_per_step = G, cfg.eval_interval = I, cfg.eval_batches = 5;
                        for (int s = 0; s < S; s++) {
                            int64_t ev = ev_have < 5 ? ev_have : 5;
                            listed l;
                            list_make(&l, steps, G, I, ev, s, S);
                            batch_schedule sc;
                            batch_schedule_make(&sc, &cfg, s, S, ev_have);
                            cases++;
                            int bad = sc.n_items != l.n || sc.n_groups != l.ng;
                            for (int64_t n = 0; !bad && n < l.n; n++) {
                                batch_item it = batch_schedule_item(&sc, n);
                                bad = it.kind != l.items[n].kind || it.index != l.items[n].index;
                            }
                            for (int64_t g = 0, t = 0; !bad && g < l.ng; g++) {
                                batch_group gr = batch_schedule_group(&sc, g);
                                bad = gr.kind != l.groups[g].kind || gr.first != l.groups[g].first || gr.count != l.groups[g].count;
                                if (!bad && gr.kind == WIRE_TRAIN) bad = batch_schedule_group_of_step(&sc, t++) != g;
                            }
                            if (bad) {
                                wrong++;
                                CHECK_MSG(0, "steps %lld G %lld I %lld held-out %lld student %d of %d: the schedule differs",
                                          (long long)steps, (long long)G, (long long)I, (long long)ev_have, s, S);
                            }
                            batch_schedule_free(&sc);
                            free(l.items);
                            free(l.groups);
                        }
                    }
    printf("test_batch_schedule: %ld schedules, %ld wrong\n", cases, wrong);
    CHECK(cases > 1000 && wrong == 0);
    // the largest train.steps: nothing stored, the last item where it belongs
    config cfg;
    config_defaults(&cfg);
    cfg.steps = 1000000000, cfg.batches_per_step = 4, cfg.eval_interval = 1000, cfg.eval_batches = 2;
    batch_schedule sc;
    batch_schedule_make(&sc, &cfg, 1, 2, 10);
    CHECK(sc.n_items == 2000000000LL + 1000001LL);
    batch_item last = batch_schedule_item(&sc, sc.n_items - 1), before = batch_schedule_item(&sc, sc.n_items - 2);
    CHECK(last.kind == WIRE_HELDOUT && last.index == 1);
    CHECK(before.kind == WIRE_TRAIN && before.index == (cfg.steps - 1) * 4 + 3);
    return test_finish("test_batch_schedule");
}
