// wire.c: payload layout (see wire.h).
#include "common/comm/wire.h"

#include <string.h>

#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/error.h"

static size_t wire_pad(size_t n) { return (n + 7) & ~(size_t)7; }

size_t wire_bytes(int64_t S, int64_t n_seq, int64_t k, int64_t D) {
    // every product checked: a batch's bytes never wrap (each term is far below SIZE_MAX / 4)
    return WIRE_HEADER * 8 + wire_pad(size_mul(S, 4)) + wire_pad(size_mul(n_seq + 1, 4)) + wire_pad(size_mul(S, 1)) +
           wire_pad(size_mul(size_mul(S, D), 2)) + wire_pad(size_mul(size_mul(S, k), 4)) * 2 + wire_pad(size_mul(S, 4));
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
    int64_t h[WIRE_HEADER] = {w->kind, w->index, w->S, w->n_seq, w->k, w->D, w->peak_bytes, w->features_on_link, 0};
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
    w->seal = h[8];
    if (w->S < 1 || w->n_seq < 1 || w->n_seq > w->S || w->k < 1 || w->D < 1 || (h[7] != 0 && h[7] != 1) ||
        (h[8] != 0 && (h[8] >> 32) != 1) || wire_bytes(w->S, w->n_seq, w->k, h[7] ? 0 : w->D) != bytes)
        return error_set("malformed payload: header (S %lld, sequences %lld, k %lld, D %lld) does not match its %zu bytes",
                         (long long)w->S, (long long)w->n_seq, (long long)w->k, (long long)w->D, bytes);
    wire_layout(buf, w);
    return 0;
}

void wire_seal(void *buf, size_t bytes) {
    int64_t seal = ((int64_t)1 << 32) | crc32c_update(0, (const char *)buf + WIRE_HEADER * 8, bytes - WIRE_HEADER * 8);
    memcpy((char *)buf + 8 * 8, &seal, sizeof seal);
}

int wire_check_seal(const void *buf, size_t bytes) {
    int64_t seal;
    memcpy(&seal, (const char *)buf + 8 * 8, sizeof seal);
    if (seal == 0) return 0;
    uint32_t got = crc32c_update(0, (const char *)buf + WIRE_HEADER * 8, bytes - WIRE_HEADER * 8);
    if (got != (uint32_t)seal)
        return error_set("payload damaged in transit: its %zu bytes have CRC-32C %08x, the teacher sealed %08x", bytes,
                         (unsigned)got, (unsigned)(uint32_t)seal);
    return 0;
}
