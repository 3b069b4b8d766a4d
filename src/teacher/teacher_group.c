// teacher_group.c: the stage-to-stage link of a teacher group (see teacher_group.h).
#include "teacher/teacher_group.h"

#include <stdlib.h>
#include <string.h>

#include "common/comm/protocol.h"
#include "common/comm/watchdog.h"
#include "common/comm/wire.h"
#include "common/core/check.h"
#include "common/core/bytes.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "common/kernels/ops.h"

// The stages of a group: stage s of G holds layers [bounds[s], bounds[s+1]) (target_stage_split);
// rank 0 states the split in one line. m's range is set to this rank's stage (G = 1: the whole model).
int teacher_stage_select(const world *w, target_model *m) {
    int G = w->group_size;
    int64_t *bounds = xmalloc(((size_t)G + 1) * sizeof(int64_t));
    dtype act = ops_act_dtype(m->be);
    if (target_stage_split(&m->cfg, act, G, bounds)) {
        free(bounds);
        return -1;
    }
    m->layer_begin = G > 1 ? bounds[w->stage] : 0;
    m->layer_end = G > 1 ? bounds[w->stage + 1] : 0;
    if (G > 1 && w->rank == 0) {
        char line[2048], b[32];
        int used = snprintf(line, sizeof line, "teacher groups of %d rank(s), the target's layers by weight bytes:", G);
        for (int s = 0; s < G && used < (int)sizeof line - 96; s++)
            used += snprintf(line + used, sizeof line - (size_t)used, "%s stage %d layers %lld-%lld (%s)", s ? "," : "", s,
                             (long long)bounds[s], (long long)bounds[s + 1] - 1,
                             bytes_format(target_stage_weight_bytes(&m->cfg, act, bounds[s], bounds[s + 1]), b, sizeof b));
        log_info("%s", line);
    }
    free(bounds);
    return 0;
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

// Bytes of a message of S tokens and n_seq sequences (x and features in it unless on_link).
static size_t stage_msg_bytes(const stage_link *l, int64_t S, int64_t n_seq, int on_link) {
    size_t s = (size_t)S;
    size_t b = STAGE_HEADER * 8 + pad8(size_mul(S, 4)) + pad8(size_mul(n_seq + 1, 4)) + pad8(s);
    return b + (on_link ? 0 : pad8(size_mul(size_mul(S, l->H + l->D), l->e)));
}

// The sections of a message in buf.
static void stage_msg_layout(const stage_link *l, char *buf, int64_t S, int64_t n_seq, int32_t **tokens, int32_t **cu,
                             uint8_t **mask, char **act) {
    char *p = buf + STAGE_HEADER * 8;
    *tokens = (int32_t *)p;
    p += pad8((size_t)S * 4);
    *cu = (int32_t *)p;
    p += pad8(((size_t)n_seq + 1) * 4);
    *mask = (uint8_t *)p;
    p += pad8((size_t)S);
    *act = p; // x [S, H] then features [S, D]
}

int stage_link_init(stage_link *l, const world *w, backend *be, payload_link *link, int n_buf, int max_tokens,
                    int64_t H, int64_t D) {
    memset(l, 0, sizeof *l);
    l->w = w, l->be = be, l->link = link, l->on_link = payload_link_device(link);
    l->prev = w->stage > 0 ? w->rank - 1 : -1;
    l->next = w->stage < w->group_size - 1 ? w->rank + 1 : -1;
    l->H = H, l->D = D, l->e = dtype_size(ops_act_dtype(be)), l->max_tokens = max_tokens;
    l->max_bytes = stage_msg_bytes(l, max_tokens, max_tokens, 0);
    size_t act_bytes = size_mul(size_mul(max_tokens, H + D), l->e);
    if (l->next >= 0) {
        l->n_buf = n_buf;
        l->bufs = xmalloc((size_t)n_buf * sizeof(char *));
        l->sends = xcalloc((size_t)n_buf, sizeof(payload_ticket));
        for (int i = 0; i < n_buf; i++) l->bufs[i] = xmalloc(l->max_bytes);
        if (l->on_link) {
            l->dev = xcalloc((size_t)n_buf, sizeof(void *));
            l->tickets = xcalloc((size_t)n_buf, sizeof(payload_ticket));
            for (int i = 0; i < n_buf; i++)
                if (!(l->dev[i] = backend_alloc(be, act_bytes))) return error_prefix("teacher stage %d's send ring", w->stage);
        }
    }
    if (l->prev >= 0) {
        l->in = xmalloc(l->max_bytes);
        if (l->on_link && !(l->in_dev = backend_alloc(be, act_bytes)))
            return error_prefix("teacher stage %d's receive buffer", w->stage);
    }
    return 0;
}

// The next send slot, once its previous message has gone (waited for under the watchdog).
static int stage_slot(stage_link *l) {
    int slot = l->next_slot++ % l->n_buf;
    watchdog_wait_begin(l->next, l->next, 1.5, "the next stage of its group to take an earlier batch");
    payload_link_wait(&l->sends[slot]);
    int rc = l->on_link ? payload_link_wait(&l->tickets[slot]) : 0;
    watchdog_wait_end();
    return rc ? -1 : slot;
}

int stage_send(stage_link *l, const stage_header *h, const int32_t *tokens, const int32_t *cu, const uint8_t *mask,
               const target_work *tw) {
    int slot = stage_slot(l);
    if (slot < 0) return error_prefix("teacher stage %d -> %d", l->w->stage, l->w->stage + 1);
    char *buf = l->bufs[slot];
    int on_link = l->on_link;
    int64_t hdr[STAGE_HEADER] = {h->kind, h->index, h->S, h->n_seq, h->reply, h->peak, on_link, 0};
    memcpy(buf, hdr, sizeof hdr);
    int32_t *t, *c;
    uint8_t *m;
    char *act;
    stage_msg_layout(l, buf, h->S, h->n_seq, &t, &c, &m, &act);
    memcpy(t, tokens, (size_t)h->S * sizeof(int32_t));
    memcpy(c, cu, ((size_t)h->n_seq + 1) * sizeof(int32_t));
    memcpy(m, mask, (size_t)h->S);
    size_t xb = size_mul(size_mul(h->S, l->H), l->e), fb = size_mul(size_mul(h->S, l->D), l->e);
    if (on_link) { // into this slot's device buffer, GPU to GPU after the header
        ops_copy_2d(l->be, l->dev[slot], (int64_t)h->S * l->H, tw->x, (int64_t)h->S * l->H, 1, (int64_t)h->S * l->H);
        ops_copy_2d(l->be, (char *)l->dev[slot] + xb, (int64_t)h->S * l->D, tw->features, (int64_t)h->S * l->D, 1,
                    (int64_t)h->S * l->D);
        backend_sync(l->be);
    } else {
        backend_copy_to_host(l->be, act, tw->x, xb);
        backend_copy_to_host(l->be, act + xb, tw->features, fb);
    }
    payload_link_post_send(l->link, l->next, TAG_STAGE, buf, stage_msg_bytes(l, h->S, h->n_seq, on_link), &l->sends[slot]);
    if (on_link && payload_link_post_send_dev(l->link, l->next, l->dev[slot], xb + fb, &l->tickets[slot]))
        return error_prefix("teacher stage %d -> %d", l->w->stage, l->w->stage + 1);
    return 0;
}

void stage_send_stop(stage_link *l) {
    int64_t hdr[STAGE_HEADER] = {WIRE_STOP, 0, 0, 0, 0, 0, 0, 0};
    payload_link_send(l->link, l->next, TAG_STAGE, hdr, sizeof hdr);
}

int stage_recv(stage_link *l, stage_header *h, int32_t *tokens, int32_t *cu, uint8_t *mask, target_work *tw,
               double patience) {
    watchdog_wait_begin(l->prev, l->prev, patience, "a batch from the previous stage of its group");
    size_t bytes = payload_link_recv(l->link, l->prev, TAG_STAGE, l->in, l->max_bytes, NULL);
    watchdog_wait_end();
    int64_t hdr[STAGE_HEADER];
    if (bytes < sizeof hdr) return error_set("stage message of %zu bytes from rank %d is shorter than its header", bytes, l->prev);
    memcpy(hdr, l->in, sizeof hdr);
    *h = (stage_header){.kind = hdr[0], .index = hdr[1], .S = hdr[2], .n_seq = hdr[3], .reply = hdr[4], .peak = hdr[5]};
    if (h->kind == WIRE_STOP) return 0;
    int on_link = (int)hdr[6];
    if (h->S < 1 || h->S > l->max_tokens || h->n_seq < 1 || h->n_seq > h->S || on_link != l->on_link ||
        stage_msg_bytes(l, h->S, h->n_seq, on_link) != bytes)
        return error_set("malformed stage message from rank %d: %lld tokens, %lld sequences in %zu bytes", l->prev,
                         (long long)h->S, (long long)h->n_seq, bytes);
    int32_t *t, *c;
    uint8_t *m;
    char *act;
    stage_msg_layout(l, l->in, h->S, h->n_seq, &t, &c, &m, &act);
    memcpy(tokens, t, (size_t)h->S * sizeof(int32_t));
    memcpy(cu, c, ((size_t)h->n_seq + 1) * sizeof(int32_t));
    memcpy(mask, m, (size_t)h->S);
    size_t xb = size_mul(size_mul(h->S, l->H), l->e), fb = size_mul(size_mul(h->S, l->D), l->e);
    if (on_link) { // the activations follow GPU to GPU, in the order of the headers
        watchdog_wait_begin(l->prev, l->prev, 1, "the activations from the previous stage of its group");
        int rc = payload_link_post_recv_dev(l->link, l->prev, l->in_dev, xb + fb, &l->in_ticket) ||
                 payload_link_wait(&l->in_ticket);
        watchdog_wait_end();
        if (rc) return error_prefix("teacher stage %d <- %d", l->w->stage, l->w->stage - 1);
        ops_copy_2d(l->be, tw->x, (int64_t)h->S * l->H, l->in_dev, (int64_t)h->S * l->H, 1, (int64_t)h->S * l->H);
        ops_copy_2d(l->be, tw->features, (int64_t)h->S * l->D, (char *)l->in_dev + xb, (int64_t)h->S * l->D, 1,
                    (int64_t)h->S * l->D);
    } else {
        backend_copy_to_device(l->be, tw->x, act, xb);
        backend_copy_to_device(l->be, tw->features, act + xb, fb);
    }
    return 1;
}

void stage_link_free(stage_link *l) {
    for (int i = 0; i < l->n_buf; i++) payload_link_wait(&l->sends[i]);
    for (int i = 0; i < l->n_buf; i++) {
        if (l->on_link) {
            payload_link_wait(&l->tickets[i]);
            payload_link_ticket_free(&l->tickets[i]);
            backend_free(l->be, l->dev[i]);
        }
        free(l->bufs[i]);
    }
    if (l->in_dev) {
        payload_link_ticket_free(&l->in_ticket);
        backend_free(l->be, l->in_dev);
    }
    free(l->bufs);
    free(l->sends);
    free(l->dev);
    free(l->tickets);
    free(l->in);
    memset(l, 0, sizeof *l);
}
