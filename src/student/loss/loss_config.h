// loss_config.h: the loss settings (loss.h's loss_config) from the configuration's loss.* keys, the
// one place they are read: training, --mode eval (the keys its checkpoint's configuration holds)
// and step-dump (the "loss" object of its config.json) all go through loss_config_make. The keys
// themselves, with their defaults and bounds, are loss_config.c's key set (loss_settings; the
// selector's weight is loss_selector.c's).
#pragma once

#include "common/core/config.h"
#include "student/loss/loss.h"

// loss_config_make: c from cfg's loss.* keys for a drafter of block size B (loss.gamma 0: 7 for
// B <= 16, 10 above; SPEC §4).
void loss_config_make(loss_config *c, const config *cfg, int block_size);
// loss_config_default: the same from every key's default (alpha 0.15, lambda 0.1, decay weights,
// data labels, selector_weight 1).
void loss_config_default(loss_config *c, int block_size);
// loss_config_copy_keys: the loss.* keys of from into to (--mode eval: the loss a checkpoint was
// trained with).
void loss_config_copy_keys(config *to, const config *from);
// loss_config_parse_json: the loss.* keys of a JSON object ({"alpha": 0.2, ...}; const void * keeps
// cJSON out of this header) on top of cfg, checked like the configuration file's. -1 with
// error_set naming source and the key.
int loss_config_parse_json(config *cfg, const void *json_object, const char *source);
