// jsonl_sample.h: one line of a tokenized JSONL file, {"input_ids": [...], "loss_mask": [...]},
// parsed into ids and a 0/1 mask (convert-jsonl's samples, regenerate's prompts).
//
// input_ids: a non-empty array of integers in [0, vocab_size) (>= 0 and <= INT32_MAX when
// vocab_size <= 0). loss_mask: optional (absent or null = all ones), as long as input_ids, 0/1 or
// false/true. Other keys are ignored; nothing but whitespace may follow the object. A NUL byte
// anywhere in the line is refused (the line is text).
#pragma once
#include <stddef.h>
#include <stdint.h>

// A growing sample buffer (ids and mask), reused from line to line.
typedef struct {
    int32_t *ids;
    uint8_t *mask;
    int64_t n, cap;
} jsonl_sample;

// jsonl_sample_parse: line[0:len] (line[len] must be the '\0' getline puts there) into s; -1 with
// error_set describing the problem (the caller names the file and line).
int jsonl_sample_parse(const char *line, size_t len, int64_t vocab_size, jsonl_sample *s);
// jsonl_line_blank: the line holds only spaces, tabs and line ends.
int jsonl_line_blank(const char *line, size_t len);
void jsonl_sample_free(jsonl_sample *s);
