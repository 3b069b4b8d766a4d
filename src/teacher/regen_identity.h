// regen_identity.h: what a regenerated set and its parts record of the inputs that made them
// (regenerate.h, "identity"): the settings text, naming the inputs by content (the target's
// weights' fingerprint, identity.h, and config.json's CRC32C, the prompts file's size and CRC32C)
// beside the generation settings and the stop ids; the tokenizer attribute; and a recorded
// settings text compared with this run's, naming the fields that differ.
#pragma once
#include <stddef.h>

#include "teacher/regen_job.h"

// regen_identity_make: g->weights_crc, g->config_crc, g->settings and g->tokenizer, from the
// target's files, g->pi, g->stops and the settings set up; -1 with error_set when the target's
// config.json cannot be read.
int regen_identity_make(regen *g);

// regen_identity_diff: the key=value fields of settings text `here` that differ from `there`'s, as
// "KEY X there, Y here" (the first few, in one line), into out[n].
void regen_identity_diff(const char *there, const char *here, char *out, size_t n);

// regen_identity_check_out: regenerate.out as found at the start: absent (0), a set made with these
// settings (1: nothing to do), or one made with other settings (-1 with error_set naming the fields
// that differ, unless run.overwrite: 0, replaced at the end).
int regen_identity_check_out(const regen *g);
