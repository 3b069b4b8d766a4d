// wire.c: payload layout (see wire.h).
#include "common/comm/wire.h"

#include <string.h>

#include "common/core/error.h"

static size_t wire_pad(size_t n) { return (n + 7) & ~(size_t)7; }

size_t wire_bytes(int64_t S, int64_t n_seq, int64_t k, int64_t D) {
    size_t s = (size_t)S;
    return WIRE_HEADER * 8 + wire_pad(s * 4) + wire_pad(((size_t)n_seq + 1) * 4) + wire_pad(s) + wire_pad(s * (size_t)D * 2) +
           wire_pad(s * (size_t)k * 4) * 2 + wire_pad(s * 4);
}

void wire_layout(void *buf, wire_batch *w) {
    char *p = (char *)buf + WIRE_HEADER * 8;
    size_t s = (size_t)w->S;
    w->tokens = (int32_t *)p;
    p += wire_pad(s * 4);
    w->cu = (int32_t *)p;
    p += wire_pad(((size_t)w->n_seq + 1) * 4);
    w->mask = (uint8_t *)p;
    p += wire_pad(s);
    w->features = w->features_on_link ? NULL : (uint16_t *)p;
    p += w->features_on_link ? 0 : wire_pad(s * (size_t)w->D * 2);
    w->topk_idx = (int32_t *)p;
    p += wire_pad(s * (size_t)w->k * 4);
    w->topk_val = (float *)p;
    p += wire_pad(s * (size_t)w->k * 4);
    w->lse = (float *)p;
}

void wire_write_header(void *buf, const wire_batch *w) {
    int64_t h[WIRE_HEADER] = {w->kind, w->index, w->S, w->n_seq, w->k, w->D, w->peak_bytes, w->features_on_link};
    memcpy(buf, h, sizeof h);
}

int wire_read(void *buf, size_t bytes, wire_batch *w) {
    if (bytes < WIRE_HEADER * 8) return error_set("payload of %zu bytes is shorter than its header", bytes);
    int64_t h[WIRE_HEADER];
    memcpy(h, buf, sizeof h);
    memset(w, 0, sizeof *w);
    w->kind = h[0];
    w->index = h[1];
    w->S = h[2];
    w->n_seq = h[3];
    w->k = h[4];
    w->D = h[5];
    w->peak_bytes = h[6];
    w->features_on_link = h[7];
    if (w->S < 1 || w->n_seq < 1 || w->n_seq > w->S || w->k < 1 || w->D < 1 || (h[7] != 0 && h[7] != 1) ||
        wire_bytes(w->S, w->n_seq, w->k, h[7] ? 0 : w->D) != bytes)
        return error_set("malformed payload: header (S %lld, sequences %lld, k %lld, D %lld) does not match its %zu bytes",
                         (long long)w->S, (long long)w->n_seq, (long long)w->k, (long long)w->D, bytes);
    wire_layout(buf, w);
    return 0;
}
