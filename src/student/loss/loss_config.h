// loss_config.h: the loss settings from JSON ({"alpha", "lambda", "gamma", "weighting", "label"}).
#pragma once

#include "student/loss/loss.h"

// loss_config_default: alpha 0.15, lambda 0.1, gamma 7 for B <= 16 and 10 above (SPEC §4: 7 for
// B = 16, 10 for B = 32), decay weighting, data labels, selector_weight 1.
void loss_config_default(loss_config *c, int block_size);
// loss_config_parse: apply a cJSON object (const void * to keep cJSON out of this header) on top of
// c. -1 with error_set naming source and the key.
int loss_config_parse(loss_config *c, const void *json_object, const char *source);
