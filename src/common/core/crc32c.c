// crc32c.c: see crc32c.h. A byte-wise table (1 KiB), built once; about 400 MB/s per core, which a
// checkpoint or a feature shard read from disk does not notice. On x86-64 with SSE4.2 (the CPU
// says so at run time) the CRC32 instruction instead, 8 bytes at a time (several GB/s): the same
// polynomial, the same values, for the payload seals of transport.check_payloads (gigabytes each).
#include "common/core/crc32c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"

static uint32_t crc32c_table[256];
static int crc32c_ready;

static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[i] = c;
    }
    crc32c_ready = 1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CRC32C_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n > 0; n--, p++) c32 = _mm_crc32_u8(c32, *p);
    return ~c32;
}
#endif

uint32_t crc32c_update(uint32_t crc, const void *data, size_t n) {
#ifdef CRC32C_HW
    static int hw = -1; // (idempotent: two threads racing write the same answer)
    if (hw < 0) hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    if (hw) return crc32c_hw(crc, data, n);
#endif
    if (!crc32c_ready) crc32c_init(); // (idempotent: two threads racing write the same table)
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

int crc32c_file(const char *path, uint32_t *crc) {
    FILE *f = fs_fopen_regular(path, NULL);
    if (!f) return -1;
    enum { BUF = 1 << 20 };
    unsigned char *buf = xmalloc(BUF);
    uint32_t c = 0;
    size_t got;
    while ((got = fread(buf, 1, BUF, f)) > 0) c = crc32c_update(c, buf, got);
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad) return error_set("%s: read error", path);
    *crc = c;
    return 0;
}

#define SEAL_KEY ", \"crc32c\": \""

char *crc32c_seal_json(const char *text) {
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
    if (n > 0 && text[n - 1] == '}') n--; // the body without its closing brace
    uint32_t c = crc32c_update(0, text, n);
    char *out = xmalloc(n + sizeof SEAL_KEY + 16);
    memcpy(out, text, n);
    snprintf(out + n, sizeof SEAL_KEY + 16, SEAL_KEY "%08x\"}\n", c);
    return out;
}

int crc32c_check_seal(const char *text, uint32_t *want, uint32_t *got) {
    const char *at = NULL;
    for (const char *p = strstr(text, SEAL_KEY); p; p = strstr(p + 1, SEAL_KEY)) at = p;
    if (!at) return 0;
    *got = crc32c_update(0, text, (size_t)(at - text));
    // exactly 8 lowercase hex digits, '"}', one optional newline, the end: any other byte is a change
    const char *h = at + strlen(SEAL_KEY);
    uint32_t w = 0;
    int ok = 1;
    for (int i = 0; i < 8 && ok; i++) {
        char c = h[i];
        ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        if (ok) w = w << 4 | (uint32_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    ok = ok && h[8] == '"' && h[9] == '}' && (h[10] == '\0' || (h[10] == '\n' && h[11] == '\0'));
    *want = w;
    return ok && w == *got ? 1 : -1;
}
