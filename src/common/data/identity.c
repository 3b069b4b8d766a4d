// identity.c: see identity.h.
#include "common/data/identity.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/crc32c.h"
#include "common/core/error.h"

void identity_init(run_identity *id) {
    memset(id, 0, sizeof *id);
    id->target_hidden = id->target_layers = id->target_vocab = id->target_config_crc = id->target_weights_crc = -1;
    id->n_layer_ids = -1;
    id->data_samples = id->data_lengths_crc = id->data_tokens_crc = -1;
    id->heldout_samples = id->heldout_crc = -1;
}

static int identity_cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void identity_set_heldout(run_identity *id, const int64_t *idx, int64_t n) {
    int64_t *sorted = xmalloc(((size_t)n + 1) * sizeof *sorted);
    if (n > 0) memcpy(sorted, idx, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, identity_cmp_i64);
    uint32_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        unsigned char le[8];
        for (int b = 0; b < 8; b++) le[b] = (unsigned char)((uint64_t)sorted[i] >> (8 * b));
        c = crc32c_update(c, le, 8);
    }
    free(sorted);
    id->heldout_samples = n;
    id->heldout_crc = c;
}

#define IDENTITY_MAX_ST_HEADER ((int64_t)100 << 20) // a safetensors header past 100 MB is not one (safetensors.h)

static int identity_cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int64_t identity_weights_crc(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    int n = 0, cap = 0, read_any = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= 12 || strcmp(e->d_name + len - 12, ".safetensors") != 0) continue;
        if (n == cap) names = xrealloc(names, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *names);
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n > 1) qsort(names, (size_t)n, sizeof *names, identity_cmp_str);
    uint32_t c = 0;
    char *header = NULL;
    uint8_t block[IDENTITY_WEIGHT_BLOCK];
    size_t dlen = strlen(dir);
    for (int k = 0; k < n; k++) {
        char *path = xmalloc(dlen + strlen(names[k]) + 2);
        sprintf(path, "%s/%s", dir, names[k]);
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        free(path);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            if (fd >= 0) close(fd);
            continue;
        }
        read_any = 1;
        uint8_t le[8];
        int64_t size = (int64_t)st.st_size, hlen = 0;
        if (size >= 8 && pread(fd, le, 8, 0) == 8)
            for (int b = 7; b >= 0; b--) hlen = hlen << 8 | le[b];
        for (int b = 0; b < 8; b++) le[b] = (uint8_t)((uint64_t)size >> (8 * b));
        c = crc32c_update(c, names[k], strlen(names[k]) + 1);
        c = crc32c_update(c, le, 8);
        if (size >= 8 && hlen > 0 && hlen <= IDENTITY_MAX_ST_HEADER && hlen <= size - 8) {
            header = xrealloc(header, (size_t)hlen);
            if (pread(fd, header, (size_t)hlen, 8) == (ssize_t)hlen) c = crc32c_update(c, header, (size_t)hlen);
            // the values, sampled: blocks spread evenly over the data
            int64_t data = 8 + hlen, span = size - data;
            for (int b = 0; span > 0 && b < IDENTITY_WEIGHT_BLOCKS; b++) {
                int64_t at = data + span / IDENTITY_WEIGHT_BLOCKS * b;
                size_t len = (size_t)(size - at < IDENTITY_WEIGHT_BLOCK ? size - at : IDENTITY_WEIGHT_BLOCK);
                if (pread(fd, block, len, at) == (ssize_t)len) c = crc32c_update(c, block, len);
            }
        }
        close(fd);
    }
    free(header);
    for (int k = 0; k < n; k++) free(names[k]);
    free(names);
    return read_any ? (int64_t)c : -1;
}

void identity_set_target(run_identity *id, const char *arch, int64_t hidden, int64_t layers, int64_t vocab,
                         const char *target_dir) {
    snprintf(id->target_arch, sizeof id->target_arch, "%s", arch);
    id->target_hidden = hidden, id->target_layers = layers, id->target_vocab = vocab;
    id->target_config_crc = id->target_weights_crc = -1;
    if (!target_dir) return;
    uint32_t c;
    char *saved = xstrdup(error_msg()); // an unreadable config.json leaves the field unknown, no error
    char *path = xmalloc(strlen(target_dir) + 16);
    sprintf(path, "%s/config.json", target_dir);
    id->target_config_crc = crc32c_file(path, &c) == 0 ? (int64_t)c : -1;
    free(path);
    error_set("%s", saved);
    free(saved);
    id->target_weights_crc = identity_weights_crc(target_dir);
}

void identity_set_data(run_identity *id, const int64_t *lengths, int64_t n) {
    uint32_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        unsigned char le[8];
        for (int b = 0; b < 8; b++) le[b] = (unsigned char)((uint64_t)lengths[i] >> (8 * b));
        c = crc32c_update(c, le, 8);
    }
    id->data_samples = n;
    id->data_lengths_crc = c;
}

static void identity_ids_str(const run_identity *id, char *buf, size_t n) {
    size_t m = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < id->n_layer_ids && m + 24 < n; i++)
        m += (size_t)snprintf(buf + m, n - m, "%s%lld", i ? "," : "", (long long)id->layer_ids[i]);
    snprintf(buf + m, n - m, "]");
}

int identity_check(const run_identity *a, const char *what, const run_identity *b, const char *advice) {
    char diff[1536] = "", x[320], y[320];
    size_t m = 0;
#define ID_DIFF(name, fx, fy)                                                                                    \
    do {                                                                                                         \
        if (m + 64 < sizeof diff)                                                                                \
            m += (size_t)snprintf(diff + m, sizeof diff - m, "%s%s %s, this run has %s", m ? "; " : "", name, fx, fy); \
    } while (0)
#define ID_INT(name, field, fmt)                                                                                  \
    if (a->field >= 0 && b->field >= 0 && a->field != b->field) {                                                \
        snprintf(x, sizeof x, fmt, (long long)a->field);                                                          \
        snprintf(y, sizeof y, fmt, (long long)b->field);                                                          \
        ID_DIFF(name, x, y);                                                                                      \
    }
    if (a->target_arch[0] && b->target_arch[0] && strcmp(a->target_arch, b->target_arch) != 0)
        ID_DIFF("target architecture", a->target_arch, b->target_arch);
    ID_INT("target hidden_size", target_hidden, "%lld")
    ID_INT("target num_hidden_layers", target_layers, "%lld")
    ID_INT("target vocab_size", target_vocab, "%lld")
    ID_INT("target.path config.json CRC32C", target_config_crc, "%08llx")
    ID_INT("target.path weights (*.safetensors) fingerprint", target_weights_crc, "%08llx")
    int same_ids = a->n_layer_ids == b->n_layer_ids;
    for (int i = 0; same_ids && i < a->n_layer_ids; i++) same_ids = a->layer_ids[i] == b->layer_ids[i];
    if (a->n_layer_ids >= 0 && b->n_layer_ids >= 0 && !same_ids) {
        identity_ids_str(a, x, sizeof x);
        identity_ids_str(b, y, sizeof y);
        ID_DIFF("target_layer_ids", x, y);
    }
    if (a->feature_convention[0] && b->feature_convention[0] && strcmp(a->feature_convention, b->feature_convention) != 0)
        ID_DIFF("feature convention", a->feature_convention, b->feature_convention);
    ID_INT("training-set samples", data_samples, "%lld")
    if (!(a->data_samples >= 0 && b->data_samples >= 0 && a->data_samples != b->data_samples)) // (one line is enough)
        ID_INT("training-set lengths CRC32C", data_lengths_crc, "%08llx")
    ID_INT("training-set tokens CRC32C", data_tokens_crc, "%08llx")
    ID_INT("held-out samples", heldout_samples, "%lld")
    if (!(a->heldout_samples >= 0 && b->heldout_samples >= 0 && a->heldout_samples != b->heldout_samples))
        ID_INT("held-out split (indices' CRC32C)", heldout_crc, "%08llx")
#undef ID_INT
#undef ID_DIFF
    if (!m) return 0;
    return error_set("%s was made with %s (%s)", what, diff, advice);
}

char *identity_to_json(const run_identity *id) {
    cJSON *o = cJSON_CreateObject();
    if (id->target_arch[0]) cJSON_AddStringToObject(o, "target_architecture", id->target_arch);
    if (id->target_hidden >= 0) cJSON_AddNumberToObject(o, "target_hidden_size", (double)id->target_hidden);
    if (id->target_layers >= 0) cJSON_AddNumberToObject(o, "target_num_hidden_layers", (double)id->target_layers);
    if (id->target_vocab >= 0) cJSON_AddNumberToObject(o, "target_vocab_size", (double)id->target_vocab);
    if (id->target_config_crc >= 0) cJSON_AddNumberToObject(o, "target_config_crc32c", (double)id->target_config_crc);
    if (id->target_weights_crc >= 0) cJSON_AddNumberToObject(o, "target_weights_crc32c", (double)id->target_weights_crc);
    if (id->n_layer_ids >= 0) {
        cJSON *a = cJSON_AddArrayToObject(o, "target_layer_ids");
        for (int i = 0; i < id->n_layer_ids; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)id->layer_ids[i]));
    }
    if (id->feature_convention[0]) cJSON_AddStringToObject(o, "feature_convention", id->feature_convention);
    if (id->data_samples >= 0) cJSON_AddNumberToObject(o, "data_samples", (double)id->data_samples);
    if (id->data_lengths_crc >= 0) cJSON_AddNumberToObject(o, "data_lengths_crc32c", (double)id->data_lengths_crc);
    if (id->data_tokens_crc >= 0) cJSON_AddNumberToObject(o, "data_tokens_crc32c", (double)id->data_tokens_crc);
    if (id->heldout_samples >= 0) cJSON_AddNumberToObject(o, "heldout_samples", (double)id->heldout_samples);
    if (id->heldout_crc >= 0) cJSON_AddNumberToObject(o, "heldout_crc32c", (double)id->heldout_crc);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *out = xstrdup(text);
    cJSON_free(text);
    return out;
}

// obj[key], when present, a whole number in [0, 2^53) into *out.
static int identity_int(const cJSON *obj, const char *key, const char *where, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 9.0e15)
        return error_set("%s: identity \"%s\" must be a whole number >= 0", where, key);
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int identity_str(const cJSON *obj, const char *key, const char *where, char *out, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return 0;
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= n)
        return error_set("%s: identity \"%s\" must be a string of under %zu bytes", where, key, n);
    snprintf(out, n, "%s", v->valuestring);
    return 0;
}

int identity_from_json(const void *obj_, const char *where, run_identity *id) {
    const cJSON *o = obj_;
    identity_init(id);
    if (!cJSON_IsObject(o)) return error_set("%s: \"identity\" is not a JSON object", where);
    if (identity_str(o, "target_architecture", where, id->target_arch, sizeof id->target_arch) ||
        identity_int(o, "target_hidden_size", where, &id->target_hidden) ||
        identity_int(o, "target_num_hidden_layers", where, &id->target_layers) ||
        identity_int(o, "target_vocab_size", where, &id->target_vocab) ||
        identity_int(o, "target_config_crc32c", where, &id->target_config_crc) ||
        identity_int(o, "target_weights_crc32c", where, &id->target_weights_crc) ||
        identity_str(o, "feature_convention", where, id->feature_convention, sizeof id->feature_convention) ||
        identity_int(o, "data_samples", where, &id->data_samples) ||
        identity_int(o, "data_lengths_crc32c", where, &id->data_lengths_crc) ||
        identity_int(o, "data_tokens_crc32c", where, &id->data_tokens_crc) ||
        identity_int(o, "heldout_samples", where, &id->heldout_samples) ||
        identity_int(o, "heldout_crc32c", where, &id->heldout_crc))
        return -1;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "target_layer_ids");
    if (a) {
        int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
        if (n < 0 || n > IDENTITY_MAX_LAYERS)
            return error_set("%s: identity \"target_layer_ids\" must be an array of at most %d ids", where, IDENTITY_MAX_LAYERS);
        for (int i = 0; i < n; i++) {
            const cJSON *v = cJSON_GetArrayItem(a, i);
            if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9)
                return error_set("%s: identity \"target_layer_ids\"[%d] is not a layer id", where, i);
            id->layer_ids[i] = (int64_t)v->valuedouble;
        }
        id->n_layer_ids = n;
    }
    return 0;
}
