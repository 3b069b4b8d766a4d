// crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), in software, for the checksums
// written with checkpoints and feature shards (docs/faults.md, "What is verified at load").
//
//   crc32c_update(0, "123456789", 9) == 0xE3069283 (the standard check value); streaming:
//   crc32c_update(crc32c_update(0, a, n), b, m) == the CRC of a followed by b.
// A JSON document can be sealed: its last member "crc32c": "xxxxxxxx" is the CRC of every byte
// before the ", \"crc32c\"" that introduces it, so a flipped bit anywhere in the text is seen.
#pragma once
#include <stddef.h>
#include <stdint.h>

uint32_t crc32c_update(uint32_t crc, const void *data, size_t n);
// crc32c_file: the CRC of a whole file into *crc; -1 with error_set naming the file on a read error.
int crc32c_file(const char *path, uint32_t *crc);
// crc32c_seal_json: text is a JSON object ending in '}' (trailing whitespace allowed); a new
// malloc'd text with the member "crc32c" appended last (the caller frees).
char *crc32c_seal_json(const char *text);
// crc32c_check_seal: 1 the text's seal matches, 0 the text has no seal (an older file),
// -1 a seal that does not match (*want, *got: the recorded and the computed CRC).
int crc32c_check_seal(const char *text, uint32_t *want, uint32_t *got);
