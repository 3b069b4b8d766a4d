// test_hf_saved.c: config.json files saved by the installed transformers (save_pretrained of tiny
// random models of every architecture the teacher serves; tests/reference/make_hf_saved.py wrote
// tests/reference/data/hf_saved/) read the way transformers reads them (issue 27 item 8):
//   - each parses, and a model.safetensors holding exactly the tensors (names, dtypes, shapes) the
//     saved checkpoint held loads as a target: the shapes the config implies are the ones
//     transformers wrote (a Qwen3-MoE saved by transformers 5, num_experts as num_local_experts,
//     was refused with a shape mismatch at 33b0059);
//   - each structural key removed in turn is an error naming it, never the config class's default
//     (the published model's), except where transformers has a rule instead of a default (Llama's
//     kv heads = heads, head_dim = hidden / heads; Qwen3-MoE's head_dim).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/json_util.h"
#include "common/data/safetensors.h"
#include "teacher/target.h"
#include "teacher/target_config.h"
#include "testing.h"

static const char *const names[] = {"llama", "qwen3", "qwen3_moe", "qwen3_5_text", "qwen3_5", "qwen3_5_moe_text",
                                    "qwen3_5_moe"};

// The keys whose absence must be an error naming them (when the saved config has them).
static const char *const structural[] = {
    "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "vocab_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", NULL};

static char *read_fixture(const char *name, const char *suffix) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/reference/data/hf_saved/%s.%s", name, suffix);
    char *text = file_read_text(test_src_path(rel), 1 << 20);
    CHECK_MSG(text != NULL, "%s: %s", rel, error_msg());
    return text;
}

// The saved checkpoint's tensors (zeros) written as dir/model.safetensors. 0 or -1.
static int write_weights(const char *name, const char *dir) {
    char *text = read_fixture(name, "tensors.json");
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root) return -1;
    st_writer w;
    safetensors_writer_init(&w);
    int n = cJSON_GetArraySize(root), i = 0, rc = 0;
    void **bufs = calloc((size_t)n, sizeof *bufs);
    for (const cJSON *t = root->child; t && rc == 0; t = t->next, i++) {
        dtype dt;
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        if (dtype_parse(cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring, &dt)) {
            rc = -1;
            break;
        }
        int64_t dims[8], numel = 1;
        int nd = cJSON_GetArraySize(shape);
        for (int j = 0; j < nd && j < 8; j++) numel *= dims[j] = (int64_t)cJSON_GetArrayItem(shape, j)->valuedouble;
        bufs[i] = calloc((size_t)(numel > 0 ? numel : 1), dtype_size(dt));
        rc = safetensors_writer_add(&w, t->string, tensor_make(dt, bufs[i], DEVICE_CPU, nd, dims));
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == 0) rc = safetensors_writer_write(&w, path);
    safetensors_writer_free(&w);
    for (int j = 0; j < n; j++) free(bufs[j]);
    free(bufs);
    cJSON_Delete(root);
    return rc;
}

static void test_loads(backend *be) {
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        const char *dir = test_path(names[k]);
        CHECK(fs_mkdirs(dir) == 0);
        char *cfg = read_fixture(names[k], "config.json");
        if (!cfg) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/config.json", dir);
        CHECK(fs_write_text(path, cfg) == 0);
        free(cfg);
        CHECK_MSG(write_weights(names[k], dir) == 0, "%s: %s", names[k], error_msg());
        target_model m;
        memset(&m, 0, sizeof m);
        int rc = target_load(&m, dir, be);
        CHECK_MSG(rc == 0, "%s: saved by transformers, not loaded: %s", names[k], error_msg());
        if (rc == 0) {
            CHECK_MSG(m.cfg.n_layers > 0 && m.cfg.vocab == 96 && m.cfg.hidden == 32, "%s: layers %lld vocab %lld hidden %lld",
                      names[k], (long long)m.cfg.n_layers, (long long)m.cfg.vocab, (long long)m.cfg.hidden);
            if (m.cfg.moe) CHECK_MSG(m.cfg.n_experts == 4 && m.cfg.n_experts_tok == 2, "%s: experts", names[k]);
            target_free(&m);
        }
    }
}

// The config with key removed from obj (the text model's keys: text_config for the wrappers).
static char *without(const char *json, const char *key, int *had) {
    cJSON *root = cJSON_Parse(json);
    cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    cJSON *obj = text ? text : root;
    *had = cJSON_GetObjectItemCaseSensitive(obj, key) != NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static void test_missing_keys(void) {
    int refused = 0;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        char *cfg = read_fixture(names[k], "config.json");
        if (!cfg) continue;
        target_config c;
        CHECK_MSG(target_config_parse(&c, cfg, names[k]) == 0, "%s: %s", names[k], error_msg());
        for (int i = 0; structural[i]; i++) {
            int had = 0;
            char *json = without(cfg, structural[i], &had);
            if (had) {
                // transformers' rules (not defaults): Llama's kv heads and head_dim
                int rule = strcmp(names[k], "llama") == 0 &&
                           (strcmp(structural[i], "num_key_value_heads") == 0 || strcmp(structural[i], "head_dim") == 0);
                char want[96]; // "missing 'num_experts' (or 'num_local_experts')" names the alias too
                snprintf(want, sizeof want, "'%s'", structural[i]);
                if (rule) {
                    CHECK_MSG(target_config_parse(&c, json, names[k]) == 0, "%s without %s: %s", names[k], structural[i],
                              error_msg());
                } else {
                    int rc = target_config_parse(&c, json, names[k]);
                    CHECK_MSG(rc < 0 && strstr(error_msg(), "missing '") && strstr(error_msg(), want), "%s without %s: rc %d, '%s'", names[k], structural[i],
                              rc, rc < 0 ? error_msg() : "accepted");
                    refused++;
                }
            }
            free(json);
        }
        free(cfg);
    }
    CHECK_MSG(refused >= 60, "only %d structural keys were tried", refused);
}

int main(void) {
    backend be;
    CHECK(backend_open(&be, "cpu", 0) == 0);
    test_loads(&be);
    test_missing_keys();
    backend_close(&be);
    return test_finish("test_hf_saved");
}
