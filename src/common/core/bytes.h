// bytes.h: sizes as text: "1.50 GiB" for the logs and plans, "64MiB" / "1.5GiB" from configs.
#pragma once
#include <stddef.h>

// bytes_format: "1.50 GiB", "12.0 MiB", "512 B" into buf; returns buf.
char *bytes_format(size_t bytes, char *buf, size_t n);
// bytes_parse: "123", "64MiB", "1.5GiB", "2G", "500M", "4k" -> bytes; -1 (error_set) if malformed.
// Units are case-insensitive, optionally after one space: B; K, M, G, T and KiB, MiB, GiB, TiB are
// 1024-based (memory sizes); KB, MB, GB, TB are 1000-based. A decimal fraction is allowed with a
// unit ("1.5GiB") and truncated to whole bytes; no sign, no exponent, no fraction of a byte.
int bytes_parse(const char *s, size_t *out);
