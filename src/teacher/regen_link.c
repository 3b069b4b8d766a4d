// regen_link.c: regenerate's decoder across the stages of a teacher group (see regen_link.h).
#include "teacher/regen_link.h"

#include <stdlib.h>
#include <string.h>

#include "common/comm/protocol.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/kernels/ops.h"

enum { OP_ADD = 1, OP_STEP, OP_REMOVE, OP_RESET, OP_STOP };

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

void regen_link_init(regen_link *l, const world *w, target_decoder *d, payload_link *link) {
    memset(l, 0, sizeof *l);
    l->d = d;
    l->link = w->group_size > 1 ? link : NULL;
    l->on_link = payload_link_device(l->link);
    l->G = w->group_size > 1 ? w->group_size : 1;
    l->first = l->G == 1 || w->stage == 0;
    l->last = l->G == 1 || w->stage == l->G - 1;
    l->head = l->G == 1 ? w->rank : w->group * l->G;
    l->prev = l->first ? -1 : w->rank - 1;
    l->next = l->last ? -1 : w->rank + 1;
    l->x_bytes = (size_t)d->m->cfg.hidden * dtype_size(ops_act_dtype(d->m->be));
    if (l->G > 1) {
        size_t R = (size_t)d->rows;
        size_t S = (size_t)d->max_seqs;
        l->cap = 4 * 8 + pad8(R * 4) + pad8(S * 4) + S * 8 + R * l->x_bytes; // R tokens, <= max_seqs lengths and draws
        l->buf = xmalloc(l->cap);
    }
}

void regen_link_free(regen_link *l) {
    free(l->buf);
    memset(l, 0, sizeof *l);
}

// R rows of the decoder's w.x to (send) or from the stage peer as a device block, waited for (the
// decoder writes w.x again at its next call). A failure ends the job: the peer cannot be told.
static void link_rows(regen_link *l, int peer, int R, int send) {
    backend *be = l->d->m->be;
    payload_ticket t = {0};
    size_t bytes = (size_t)R * l->x_bytes;
    if (send) backend_sync(be); // the layers that wrote w.x are done
    int rc = send ? payload_link_post_send_dev(l->link, peer, l->d->w.x, bytes, &t)
                  : payload_link_post_recv_dev(l->link, peer, l->d->w.x, bytes, &t);
    if (rc == 0) rc = payload_link_wait(&t);
    payload_link_ticket_free(&t);
    if (rc) fatal("regenerate: the rows %s stage rank %d over %s: %s", send ? "to" : "from", peer, payload_link_label(l->link),
                  error_msg());
}

// Send op on to the next stage: R ids, for ADD the n prompt lengths plen, n_u draws and, for ADD and
// STEP, the R rows of the residual stream this stage's layers left in the decoder's work buffer.
static void link_send(regen_link *l, int64_t op, int R, int64_t n, const int32_t *ids, const int *plen,
                      const double *u, int n_u) {
    int64_t *h = (int64_t *)l->buf;
    h[0] = op;
    h[1] = R;
    h[2] = n;
    h[3] = u ? n_u : 0;
    char *p = l->buf + 4 * 8;
    if (R > 0 && ids) memcpy(p, ids, (size_t)R * 4);
    p += pad8((size_t)R * 4);
    if (op == OP_ADD) {
        memcpy(p, plen, (size_t)n * 4);
        p += pad8((size_t)n * 4);
    }
    if (u) {
        memcpy(p, u, (size_t)n_u * 8);
        p += (size_t)n_u * 8;
    }
    int rows = op == OP_ADD || op == OP_STEP;
    if (rows && !l->on_link) {
        backend_copy_to_host(l->d->m->be, p, l->d->w.x, (size_t)R * l->x_bytes);
        p += (size_t)R * l->x_bytes;
    }
    payload_link_send(l->link, l->next, TAG_REGEN, l->buf, (size_t)(p - l->buf));
    if (rows && l->on_link) link_rows(l, l->next, R, 1);
}

// The last stage's token ids for the first stage's call.
static void link_reply(regen_link *l, int32_t *next, int k) {
    payload_link_recv(l->link, l->head + l->G - 1, TAG_REGEN, next, (size_t)k * sizeof(int32_t), NULL);
}

int regen_link_add_batch(regen_link *l, int k, const int32_t *ids, const int *plen, const double *u, int32_t *next) {
    int s = target_decoder_add_batch(l->d, k, ids, plen, u, next);
    if (s < 0 || l->G == 1) return s;
    int R = 0;
    for (int i = 0; i < k; i++) R += plen[i];
    link_send(l, OP_ADD, R, k, ids, plen, u, k);
    link_reply(l, next, k);
    return s;
}

int regen_link_step(regen_link *l, const int32_t *tokens, const double *u, int32_t *next) {
    int n = l->d->n_seq;
    if (target_decoder_step_sample(l->d, tokens, u, next) < 0) return -1;
    if (l->G == 1) return 0;
    link_send(l, OP_STEP, n, n, tokens, NULL, u, n);
    link_reply(l, next, n);
    return 0;
}

void regen_link_remove(regen_link *l, int s) {
    target_decoder_remove(l->d, s);
    if (l->G > 1) link_send(l, OP_REMOVE, 0, s, NULL, NULL, NULL, 0);
}

void regen_link_reset(regen_link *l) {
    target_decoder_reset(l->d);
    if (l->G > 1) link_send(l, OP_RESET, 0, 0, NULL, NULL, NULL, 0);
}

void regen_link_stop(regen_link *l) {
    if (l->G > 1 && l->next >= 0) link_send(l, OP_STOP, 0, 0, NULL, NULL, NULL, 0);
}

int regen_link_follow(regen_link *l) {
    target_decoder *d = l->d;
    int32_t *ids = xmalloc((size_t)d->rows * sizeof(int32_t));
    double *u = xmalloc((size_t)d->max_seqs * sizeof(double));
    int *plen = xmalloc((size_t)d->max_seqs * sizeof(int));
    int32_t *next = xmalloc((size_t)d->max_seqs * sizeof(int32_t));
    int rc = 0;
    for (;;) {
        payload_link_recv(l->link, l->prev, TAG_REGEN, l->buf, l->cap, NULL);
        const int64_t *h = (const int64_t *)l->buf;
        int64_t op = h[0], n = h[2];
        int R = (int)h[1], n_u = (int)h[3];
        if (op == OP_STOP) {
            regen_link_stop(l);
            break;
        }
        const char *p = l->buf + 4 * 8;
        if (R > 0) memcpy(ids, p, (size_t)R * 4);
        p += pad8((size_t)R * 4);
        if (op == OP_ADD) {
            memcpy(plen, p, (size_t)n * 4);
            p += pad8((size_t)n * 4);
        }
        memcpy(u, p, (size_t)n_u * 8);
        p += (size_t)n_u * 8;
        const double *draws = n_u ? u : NULL;
        if ((op == OP_ADD || op == OP_STEP) && l->on_link) link_rows(l, l->prev, R, 0);
        else if (op == OP_ADD || op == OP_STEP) backend_copy_to_device(d->m->be, d->w.x, p, (size_t)R * l->x_bytes);
        switch (op) {
        case OP_ADD: // the prompts' rows; the last stage's next tokens into next[0..n-1]
            rc = target_decoder_add_batch(d, (int)n, ids, plen, draws, next) < 0 ? -1 : 0;
            break;
        case OP_STEP: // the last stage writes the next tokens over ids (after uploading them)
            rc = target_decoder_step_sample(d, ids, draws, ids);
            break;
        case OP_REMOVE:
            target_decoder_remove(d, (int)n);
            break;
        case OP_RESET:
            target_decoder_reset(d);
            break;
        default:
            rc = error_set("regenerate: stage message of unknown kind %lld", (long long)op);
        }
        if (rc < 0) break;
        if (l->last && op == OP_ADD) payload_link_send(l->link, l->head, TAG_REGEN, next, (size_t)n * sizeof(int32_t));
        else if (l->last && op == OP_STEP) payload_link_send(l->link, l->head, TAG_REGEN, ids, (size_t)R * sizeof(int32_t));
        else if (!l->last) link_send(l, op, R, n, ids, plen, draws, n_u);
    }
    free(ids);
    free(u);
    free(plen);
    free(next);
    return rc;
}
