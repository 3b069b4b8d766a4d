// loss_config.c: defaults and JSON parsing of the loss settings (see loss_config.h).
#include "student/loss/loss_config.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "common/core/error.h"

void loss_config_default(loss_config *c, int block_size) {
    memset(c, 0, sizeof *c);
    c->alpha = 0.15;
    c->lambda = 0.1;
    c->gamma = block_size <= 16 ? 7.0 : 10.0;
    c->weighting = LOSS_WEIGHT_DECAY;
    c->label_teacher = 0;
    c->selector_weight = 1.0;
}

int loss_config_parse(loss_config *c, const void *json_object, const char *source) {
    const cJSON *o = json_object, *v;
    if (!cJSON_IsObject(o)) return error_set("%s: \"loss\" must be an object", source);
    cJSON_ArrayForEach(v, o) {
        const char *k = v->string;
        if (strcmp(k, "alpha") == 0 || strcmp(k, "lambda") == 0 || strcmp(k, "gamma") == 0) {
            if (!cJSON_IsNumber(v)) return error_set("%s: loss.%s wants a number", source, k);
            double x = v->valuedouble;
            if (k[0] == 'a' && !(x >= 0 && x <= 1)) return error_set("%s: loss.alpha = %g is outside [0, 1]", source, x);
            if (k[0] == 'l' && !(x >= 0)) return error_set("%s: loss.lambda = %g must be >= 0", source, x);
            if (k[0] == 'g' && !(x > 0)) return error_set("%s: loss.gamma = %g must be > 0", source, x);
            if (k[0] == 'a') c->alpha = x;
            else if (k[0] == 'l') c->lambda = x;
            else c->gamma = x;
        } else if (strcmp(k, "weighting") == 0) {
            if (cJSON_IsString(v) && strcmp(v->valuestring, "decay") == 0) c->weighting = LOSS_WEIGHT_DECAY;
            else if (cJSON_IsString(v) && strcmp(v->valuestring, "dpace") == 0) c->weighting = LOSS_WEIGHT_DPACE;
            else return error_set("%s: loss.weighting must be \"decay\" or \"dpace\"", source);
        } else if (strcmp(k, "label") == 0) {
            if (cJSON_IsString(v) && strcmp(v->valuestring, "data") == 0) c->label_teacher = 0;
            else if (cJSON_IsString(v) && strcmp(v->valuestring, "teacher") == 0) c->label_teacher = 1;
            else return error_set("%s: loss.label must be \"data\" or \"teacher\"", source);
        } else if (strcmp(k, "selector_weight") == 0) {
            if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 100))
                return error_set("%s: loss.selector_weight wants a number in [0, 100]", source);
            c->selector_weight = v->valuedouble;
        } else {
            return error_set("%s: unknown key loss.%s (alpha, lambda, gamma, weighting, label, selector_weight)", source,
                             k);
        }
    }
    return 0;
}
