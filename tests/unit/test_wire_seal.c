// test_wire_seal.c: the payload seal of transport.check_payloads and the CRC-32C under it.
//   - crc32c_update (the CRC32 instruction where the CPU has it, else the table) equals a bitwise
//     reference for every length 0..300 at every start offset 0..7, and streams (a then b);
//   - wire_seal / wire_check_seal: an unsealed payload passes, a sealed one passes, and a single
//     flipped bit in any section after the header (tokens, features, top-k, LSE) is an error
//     naming both CRCs; wire_read refuses a seal word that is not 2^32 + a CRC.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/wire.h"
#include "common/core/crc32c.h"
#include "testing.h"

static uint32_t crc_ref(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

static void test_crc(void) {
    CHECK(crc32c_update(0, "123456789", 9) == 0xE3069283u);
    unsigned char buf[320];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131u + 7u);
    int bad = 0;
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 308; n++) {
            uint32_t want = crc_ref(0, buf + off, n);
            bad += crc32c_update(0, buf + off, n) != want;
            size_t h = n / 3; // streaming: the CRC of a then b
            bad += crc32c_update(crc32c_update(0, buf + off, h), buf + off + h, n - h) != want;
        }
    CHECK_MSG(bad == 0, "%d CRC-32C values differ from the bitwise reference", bad);
}

static void test_seal(void) {
    wire_batch w = {.kind = WIRE_TRAIN, .index = 3, .S = 40, .n_seq = 2, .k = 4, .D = 6};
    size_t bytes = wire_bytes(w.S, w.n_seq, w.k, w.D);
    char *buf = calloc(1, bytes);
    wire_write_header(buf, &w);
    wire_layout(buf, &w);
    for (int64_t i = 0; i < w.S; i++) w.tokens[i] = (int32_t)(i * 7), w.lse[i] = (float)i;
    for (int64_t i = 0; i < w.S * w.D; i++) w.features[i] = (uint16_t)i;
    for (int64_t i = 0; i < w.S * w.k; i++) w.topk_idx[i] = (int32_t)i, w.topk_val[i] = -(float)i;
    w.cu[0] = 0, w.cu[1] = 17, w.cu[2] = 40;
    wire_batch r;
    CHECK(wire_read(buf, bytes, &r) == 0 && r.seal == 0);
    CHECK(wire_check_seal(buf, bytes) == 0); // no seal: nothing to check
    wire_seal(buf, bytes);
    CHECK(wire_read(buf, bytes, &r) == 0 && r.seal >> 32 == 1);
    CHECK(wire_check_seal(buf, bytes) == 0);
    // one flipped bit in each section after the header
    size_t at[] = {WIRE_HEADER * 8, (size_t)((char *)w.features - buf) + 5, (size_t)((char *)w.topk_val - buf) + 9,
                   bytes - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        buf[at[i]] ^= 0x10;
        CHECK_ERR(wire_check_seal(buf, bytes), "payload damaged in transit");
        buf[at[i]] ^= 0x10;
    }
    CHECK(wire_check_seal(buf, bytes) == 0);
    int64_t bogus = 12345; // not 2^32 + a CRC
    memcpy(buf + 8 * 8, &bogus, 8);
    CHECK_ERR(wire_read(buf, bytes, &r), "malformed payload");
    free(buf);
}

int main(void) {
    test_crc();
    test_seal();
    return test_finish("test_wire_seal");
}
