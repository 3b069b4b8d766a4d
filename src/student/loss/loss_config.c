// loss_config.c: the loss settings from the configuration's loss.* keys (see loss_config.h).
#include "student/loss/loss_config.h"
#include "common/core/config.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/error.h"

void loss_config_make(loss_config *c, const config *cfg, int block_size) {
    memset(c, 0, sizeof *c);
    c->alpha = cfg->loss_alpha;
    c->lambda = cfg->loss_lambda;
    c->gamma = cfg->loss_gamma > 0 ? cfg->loss_gamma : block_size <= 16 ? 7.0 : 10.0;
    c->weighting = strcmp(cfg->loss_weighting, "dpace") == 0 ? LOSS_WEIGHT_DPACE : LOSS_WEIGHT_DECAY;
    c->label_teacher = strcmp(cfg->loss_label, "teacher") == 0;
    c->selector_weight = cfg->loss_selector_weight;
}

void loss_config_default(loss_config *c, int block_size) {
    config *cfg = malloc(sizeof *cfg); // (large: its strings)
    config_defaults(cfg);
    loss_config_make(c, cfg, block_size);
    free(cfg);
}

void loss_config_copy_keys(config *to, const config *from) {
    config_copy_keys(to, from, "loss."); // every row of the key table under loss.
}

int loss_config_parse_json(config *cfg, const void *json_object, const char *source) {
    const cJSON *o = json_object;
    if (!cJSON_IsObject(o)) return error_set("%s: \"loss\" must be an object", source);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "loss", cJSON_Duplicate(o, 1));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    int rc = config_load_json(cfg, text, source); // only loss.*: any other key is unknown under "loss"
    cJSON_free(text);
    return rc;
}

// Settings: the keys of the slot loss (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key loss_keys[] = {
    {"loss.alpha", CFG_FLOAT, CONFIG_F(loss_alpha), "0.15", "share of the top-k/tail KL in the slot loss", NULL, 0, 1},
    {"loss.lambda", CFG_FLOAT, CONFIG_F(loss_lambda), "0.1", "weight of the confidence-aware penalty (CAP)", NULL, 0, 100},
    {"loss.gamma", CFG_FLOAT, CONFIG_F(loss_gamma), "0", "slot-weight decay constant; 0 = 7 for B <= 16, 10 above", NULL, 0, 1e6},
    {"loss.weighting", CFG_STRING, CONFIG_F(loss_weighting), "decay", "slot weights: exponential decay or D-PACE", "decay|dpace", CONFIG_NOLIM},
    {"loss.label", CFG_STRING, CONFIG_F(loss_label), "data", "CE label: the data token or the teacher's argmax", "data|teacher", CONFIG_NOLIM},
};
const config_key_set loss_settings = CONFIG_KEY_SET(loss_keys, NULL);
