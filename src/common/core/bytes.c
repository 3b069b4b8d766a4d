// bytes.c: sizes as text, both ways (see bytes.h).
#include "common/core/bytes.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/core/error.h"

char *bytes_format(size_t bytes, char *buf, size_t n) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, n, "%zu B", bytes);
        return buf;
    }
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    // three significant digits; the thresholds avoid printing "10.00" or "100.0"
    if (v < 9.995) snprintf(buf, n, "%.2f %s", v, units[u]);
    else if (v < 99.95) snprintf(buf, n, "%.1f %s", v, units[u]);
    else snprintf(buf, n, "%.0f %s", v, units[u]);
    return buf;
}

// The unit suffixes bytes_parse accepts (case-insensitive). Binary: K, KiB, M, MiB, ... (what
// memory sizes mean in practice, and what bytes_format prints); decimal: KB, MB, GB, TB.
static const struct {
    const char *suffix;
    uint64_t mult;
} byte_units[] = {
    {"", 1},
    {"b", 1},
    {"k", 1ull << 10},    {"kib", 1ull << 10}, {"kb", 1000ull},
    {"m", 1ull << 20},    {"mib", 1ull << 20}, {"mb", 1000000ull},
    {"g", 1ull << 30},    {"gib", 1ull << 30}, {"gb", 1000000000ull},
    {"t", 1ull << 40},    {"tib", 1ull << 40}, {"tb", 1000000000000ull},
};

int bytes_parse(const char *s, size_t *out) {
#define BYTES_BAD(why)                                                                          \
    error_set("invalid size '%s': %s (expected e.g. 512, 64MiB, 1.5GiB, 2G, 500MB)", s, why)
    const char *p = s;
    if (!isdigit((unsigned char)*p)) return BYTES_BAD("it must start with a digit");
    // integer part, exactly, with overflow detection
    uint64_t whole = 0;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10) return BYTES_BAD("too large");
        whole = whole * 10 + d;
    }
    // fraction: up to 18 digits kept exactly as frac / 10^frac_digits (further digits cannot
    // change the byte count of any size below 2^64 by more than a byte, so they are ignored)
    uint64_t frac = 0, frac_scale = 1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return BYTES_BAD("digits must follow the '.'");
        for (; isdigit((unsigned char)*p); p++) {
            if (frac_scale < 1000000000000000000ull) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                frac_scale *= 10;
            }
        }
    }
    if (*p == ' ' && p[1]) p++; // "1.50 GiB", as bytes_format writes it (a unit must follow)
    uint64_t mult = 0;
    for (size_t i = 0; i < sizeof byte_units / sizeof byte_units[0]; i++) {
        if (strcasecmp(p, byte_units[i].suffix) == 0) {
            mult = byte_units[i].mult;
            break;
        }
    }
    if (!mult) return BYTES_BAD("unknown unit (B, K/KiB, M/MiB, G/GiB, T/TiB, KB, MB, GB, TB)");
    if (whole > UINT64_MAX / mult) return BYTES_BAD("too large");
    uint64_t total = whole * mult;
    if (frac) {
        if (mult == 1) return BYTES_BAD("a fraction of a byte");
        // frac * mult / frac_scale, truncated to whole bytes; 128-bit so nothing overflows
        unsigned __int128 part = (unsigned __int128)frac * mult / frac_scale;
        if (part > UINT64_MAX - total) return BYTES_BAD("too large");
        total += (uint64_t)part;
    }
    if (total > SIZE_MAX) return BYTES_BAD("too large");
    *out = (size_t)total;
    return 0;
#undef BYTES_BAD
}
