// config.c: the keys of every set gathered, JSON loading, command-line overrides, printing (see config.h).
#include "common/core/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"

// The keys of every set (config_key_sets, src/settings.c), gathered once: in the sets' order (for
// the suggestions of config_unknown) and sorted by name (for printing). A name declared twice is a
// programming error, stopped here before any key is read.
typedef struct {
    int n;
    const config_key **in_order, **by_name;
    const config_key_set **set_of; // by_name[i]'s set
} config_table;

static int config_key_cmp(const void *a, const void *b) {
    return strcmp((*(const config_key *const *)a)->key, (*(const config_key *const *)b)->key);
}

static const config_table *config_table_get(void) {
    static config_table t;
    if (t.in_order) return &t;
    int n = 0;
    for (int s = 0; s < config_n_key_sets; s++) n += config_key_sets[s]->n;
    t.in_order = xmalloc(sizeof *t.in_order * (size_t)n);
    t.by_name = xmalloc(sizeof *t.by_name * (size_t)n);
    t.set_of = xmalloc(sizeof *t.set_of * (size_t)n);
    for (int s = 0, i = 0; s < config_n_key_sets; s++)
        for (int j = 0; j < config_key_sets[s]->n; j++, i++) t.in_order[i] = t.by_name[i] = &config_key_sets[s]->keys[j];
    qsort(t.by_name, (size_t)n, sizeof *t.by_name, config_key_cmp);
    for (int i = 0; i < n; i++) {
        if (i && strcmp(t.by_name[i - 1]->key, t.by_name[i]->key) == 0)
            fatal("config: key '%s' is declared twice (src/settings.c lists the sets)", t.by_name[i]->key);
        for (int s = 0; s < config_n_key_sets; s++) {
            const config_key_set *set = config_key_sets[s];
            if (t.by_name[i] >= set->keys && t.by_name[i] < set->keys + set->n) t.set_of[i] = set;
        }
    }
    t.n = n;
    return &t;
}


static const char *config_type_name(config_type t) {
    switch (t) {
    case CFG_INT: return "integer";
    case CFG_FLOAT: return "number";
    case CFG_STRING: return "string";
    case CFG_BOOL: return "boolean";
    case CFG_INT_LIST: return "list of integers";
    case CFG_BYTES: return "size in bytes";
    case CFG_DATA_SETS: return "list of training sets";
    }
    return "?";
}

const config_key *config_key_find(const char *key) {
    const config_table *t = config_table_get();
    size_t lo = 0, hi = (size_t)t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(t->by_name[mid]->key, key);
        if (c == 0) return t->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

// An unknown key gets a suggestion when another section has the same leaf name, or the key is
// a known one with a typo of one character.
static int config_unknown(const char *key, const char *source) {
    const char *leaf = strrchr(key, '.');
    leaf = leaf ? leaf + 1 : key;
    const config_table *t = config_table_get();
    for (int i = 0; i < t->n; i++) {
        const char *l = strrchr(t->in_order[i]->key, '.');
        if (l && strcmp(l + 1, leaf) == 0)
            return error_set("%s: unknown key '%s' (did you mean '%s'?)", source, key, t->in_order[i]->key);
    }
    return error_set("%s: unknown key '%s' (dflash_rank --config-keys lists them)", source, key);
}

static int config_check_range(const config_key *k, double v, const char *source) {
    if (v < k->min || v > k->max)
        return error_set("%s: key '%s' = %.10g is outside [%.10g, %.10g]", source, k->key, v, k->min, k->max);
    return 0;
}

static int config_check_choice(const config_key *k, const char *v, const char *source) {
    if (!k->choices) return 0;
    size_t n = strlen(v);
    for (const char *c = k->choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, v, n) == 0) return 0;
        if (!bar) break;
        c = bar + 1;
    }
    return error_set("%s: key '%s' = \"%s\" is not one of %s", source, k->key, v, k->choices);
}

// Parsers from text (command line, defaults). Each returns -1 with error_set on a bad value.
// text_is_decimal: s is a decimal number as JSON writes one (a sign, digits, a fraction, an
// exponent): strtod alone would also take hexadecimal ("0x10", "0x1p-3"), "inf", "nan" and
// leading spaces, which neither the docs nor a JSON config accept.
static int text_is_decimal(const char *s) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++) digits++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++) digits++;
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return 0;
        while (*p >= '0' && *p <= '9') p++;
    }
    return *p == '\0';
}

// An integer is decimal ("010" is ten), or a number with an exponent that is a whole number
// below 2^53 ("1e6" is a million); never hexadecimal.
static int parse_int(const char *s, int64_t *out) {
    if (!text_is_decimal(s)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!errno && end != s && !*end) {
        *out = v;
        return 0;
    }
    double d = strtod(s, &end);
    if (end == s || *end || !(fabs(d) < 9007199254740992.0) || d != floor(d)) return -1;
    *out = (int64_t)d;
    return 0;
}

// data.sets: every path given, distinct, every weight finite and > 0. sets is the parsed list.
static int data_sets_check(const config_key *k, const config_data_sets *sets, const char *source) {
    for (int64_t i = 0; i < sets->n; i++) {
        const config_data_set *d = &sets->v[i];
        if (!d->path[0]) return error_set("%s: key '%s': set %lld has no path", source, k->key, (long long)i);
        if (!(d->weight > 0) || !isfinite(d->weight))
            return error_set("%s: key '%s': set %lld (%s) has weight %g; a weight must be a finite number > 0", source,
                             k->key, (long long)i, d->path, d->weight);
        for (int64_t j = 0; j < i; j++)
            if (strcmp(sets->v[j].path, d->path) == 0)
                return error_set("%s: key '%s' names %s twice (sets %lld and %lld)", source, k->key, d->path,
                                 (long long)j, (long long)i);
    }
    return 0;
}

// One more set of data.sets (its path checked for length; the caller checks the rest).
static int data_sets_add(const config_key *k, config_data_sets *sets, const char *path, size_t path_len, double weight,
                         const char *source) {
    if (sets->n >= CONFIG_MAX_SETS) return error_set("%s: key '%s' has more than %d sets", source, k->key, CONFIG_MAX_SETS);
    if (path_len >= CONFIG_STR)
        return error_set("%s: key '%s': a path is longer than %d characters", source, k->key, CONFIG_STR - 1);
    config_data_set *d = &sets->v[sets->n++];
    memcpy(d->path, path, path_len);
    d->path[path_len] = '\0';
    d->weight = weight;
    return 0;
}

// "a.h5:2,b.h5:0.5": sets separated by commas (spaces around them ignored), each a path with an
// optional ":WEIGHT" (1 when left out; a last colon followed by text without a '/' is a weight);
// "" is the empty list.
static int data_sets_parse_text(const config_key *k, const char *val, config_data_sets *sets, const char *source) {
    sets->n = 0;
    if (!*val) return 0;
    for (const char *item = val;;) {
        const char *comma = strchr(item, ',');
        const char *start = item; // spaces around a set are not part of it ("a.h5:2, b.h5")
        size_t len = comma ? (size_t)(comma - item) : strlen(item);
        while (len > 0 && (*start == ' ' || *start == '\t')) start++, len--;
        while (len > 0 && (start[len - 1] == ' ' || start[len - 1] == '\t')) len--;
        item = start;
        if (len == 0) return error_set("%s: key '%s' has an empty set in \"%s\"", source, k->key, val);
        size_t path_len = len;
        double weight = 1;
        const char *colon = NULL; // the last one
        for (const char *p = item; p < item + len; p++)
            if (*p == ':') colon = p;
        if (colon && !memchr(colon, '/', (size_t)(item + len - colon))) {
            char num[64];
            size_t nl = (size_t)(item + len - colon - 1);
            snprintf(num, sizeof num, "%.*s", (int)nl, colon + 1);
            char *end;
            weight = strtod(num, &end);
            // (spaces around the weight are allowed; inf and nan are refused below, as not finite)
            if (nl == 0 || nl >= sizeof num || end == num || *end ||
                (isfinite(weight) && !text_is_decimal(num + strspn(num, " \t"))))
                return error_set("%s: key '%s': the weight in \"%.*s\" is not a number", source, k->key, (int)len, item);
            path_len = (size_t)(colon - item);
            while (path_len > 0 && (item[path_len - 1] == ' ' || item[path_len - 1] == '\t')) path_len--;
        }
        if (data_sets_add(k, sets, item, path_len, weight, source)) return -1;
        if (!comma) break;
        item = comma + 1;
    }
    return data_sets_check(k, sets, source);
}

static int config_set_text(config *c, const config_key *k, const char *val, const char *source) {
    char *field = (char *)c + k->offset;
    switch (k->type) {
    case CFG_INT: {
        int64_t v;
        if (parse_int(val, &v)) return error_set("%s: key '%s' wants an integer, got \"%s\"", source, k->key, val);
        if (config_check_range(k, (double)v, source)) return -1;
        *(int64_t *)field = v;
        return 0;
    }
    case CFG_FLOAT: {
        char *end;
        double v = strtod(val, &end);
        if (end == val || *end || !isfinite(v) || !text_is_decimal(val))
            return error_set("%s: key '%s' wants a number, got \"%s\"", source, k->key, val);
        if (config_check_range(k, v, source)) return -1;
        *(double *)field = v;
        return 0;
    }
    case CFG_BOOL:
        if (strcmp(val, "true") == 0 || strcmp(val, "1") == 0) *(int *)field = 1;
        else if (strcmp(val, "false") == 0 || strcmp(val, "0") == 0) *(int *)field = 0;
        else return error_set("%s: key '%s' wants true or false, got \"%s\"", source, k->key, val);
        return 0;
    case CFG_STRING:
        if (strlen(val) >= k->size)
            return error_set("%s: key '%s' is longer than %zu characters", source, k->key, k->size - 1);
        if (config_check_choice(k, val, source)) return -1;
        snprintf(field, k->size, "%s", val);
        return 0;
    case CFG_BYTES: {
        size_t v;
        if (bytes_parse(val, &v)) return error_set("%s: key '%s' wants a size like 80GiB, got \"%s\"", source, k->key, val);
        if (config_check_range(k, (double)v, source)) return -1;
        *(int64_t *)field = (int64_t)v;
        return 0;
    }
    case CFG_INT_LIST: {
        // "1,9,17" (or "" for the empty list)
        config_int_list *list = (config_int_list *)field;
        int64_t n = 0;
        char buf[CONFIG_STR];
        if (strlen(val) >= sizeof buf)
            return error_set("%s: key '%s' is longer than %zu characters", source, k->key, sizeof buf - 1);
        snprintf(buf, sizeof buf, "%s", val);
        for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
            int64_t v;
            if (parse_int(tok, &v)) return error_set("%s: key '%s' wants integers separated by commas, got \"%s\"", source, k->key, val);
            if (n >= CONFIG_MAX_IDS) return error_set("%s: key '%s' has more than %d values", source, k->key, CONFIG_MAX_IDS);
            if (config_check_range(k, (double)v, source)) return -1;
            list->v[n++] = v;
        }
        list->n = n;
        return 0;
    }
    case CFG_DATA_SETS: { // parsed aside, so a bad value leaves the key as it was
        config_data_sets *sets = xmalloc(sizeof *sets);
        int rc = data_sets_parse_text(k, val, sets, source);
        if (rc == 0) memcpy(field, sets, sizeof *sets);
        free(sets);
        return rc;
    }
    }
    return error_set("%s: key '%s' has an unhandled type", source, k->key);
}

void config_defaults(config *c) {
    memset(c, 0, sizeof *c);
    const config_table *t = config_table_get();
    for (int i = 0; i < t->n; i++)
        if (config_set_text(c, t->by_name[i], t->by_name[i]->def, "defaults"))
            fatal("bad default in the config table: %s", error_msg()); // a programming error
}

// A JSON leaf, checked against the key's type.
static int config_set_json(config *c, const config_key *k, const cJSON *v, const char *source) {
    char text[CONFIG_STR];
    switch (k->type) {
    case CFG_INT:
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
            return error_set("%s: key '%s' wants an integer", source, k->key);
        if (config_check_range(k, v->valuedouble, source)) return -1; // 1e300 too, before it is text
        snprintf(text, sizeof text, "%.0f", v->valuedouble);
        return config_set_text(c, k, text, source);
    case CFG_FLOAT:
        if (!cJSON_IsNumber(v)) return error_set("%s: key '%s' wants a number", source, k->key);
        snprintf(text, sizeof text, "%.17g", v->valuedouble);
        return config_set_text(c, k, text, source);
    case CFG_BOOL:
        if (!cJSON_IsBool(v)) return error_set("%s: key '%s' wants true or false", source, k->key);
        return config_set_text(c, k, cJSON_IsTrue(v) ? "true" : "false", source);
    case CFG_STRING:
        if (!cJSON_IsString(v)) return error_set("%s: key '%s' wants a string", source, k->key);
        return config_set_text(c, k, v->valuestring, source);
    case CFG_BYTES:
        if (cJSON_IsString(v)) return config_set_text(c, k, v->valuestring, source);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
            return error_set("%s: key '%s' wants a size (bytes, or a string like \"80GiB\")", source, k->key);
        if (config_check_range(k, v->valuedouble, source)) return -1;
        snprintf(text, sizeof text, "%.0f", v->valuedouble);
        return config_set_text(c, k, text, source);
    case CFG_INT_LIST: {
        if (!cJSON_IsArray(v)) return error_set("%s: key '%s' wants a list of integers", source, k->key);
        size_t n = 0;
        text[0] = '\0';
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
                return error_set("%s: key '%s' wants a list of integers", source, k->key);
            n += (size_t)snprintf(text + n, sizeof text - n, "%s%.0f", n ? "," : "", e->valuedouble);
            if (n >= sizeof text) return error_set("%s: key '%s' has too many values", source, k->key);
        }
        return config_set_text(c, k, text, source);
    }
    case CFG_DATA_SETS: { // [{"path": "a.h5", "weight": 2}, "b.h5", ...]: a bare string is weight 1
        static const char want[] = "wants a list of training sets ({\"path\": \"a.h5\", \"weight\": 2} or \"a.h5\")";
        if (!cJSON_IsArray(v)) return error_set("%s: key '%s' %s", source, k->key, want);
        config_data_sets *sets = xmalloc(sizeof *sets);
        sets->n = 0;
        int rc = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            const char *path = NULL;
            double weight = 1;
            if (cJSON_IsString(e)) {
                path = e->valuestring;
            } else if (cJSON_IsObject(e)) {
                const cJSON *f, *dup = json_duplicate_key(e);
                if (dup) {
                    rc = error_set("%s: key '%s': set %lld gives \"%s\" twice", source, k->key, (long long)sets->n, dup->string);
                    break;
                }
                cJSON_ArrayForEach(f, e) {
                    if (strcmp(f->string, "path") == 0 && cJSON_IsString(f)) path = f->valuestring;
                    else if (strcmp(f->string, "weight") == 0 && cJSON_IsNumber(f)) weight = f->valuedouble;
                    else if (strcmp(f->string, "path") == 0 || strcmp(f->string, "weight") == 0)
                        rc = error_set("%s: key '%s': set %lld: \"%s\" wants a %s", source, k->key, (long long)sets->n,
                                       f->string, f->string[0] == 'p' ? "string" : "number");
                    else rc = error_set("%s: key '%s': set %lld has an unknown key \"%s\" (path, weight)", source, k->key,
                                        (long long)sets->n, f->string);
                    if (rc) break;
                }
                if (rc == 0 && !path) rc = error_set("%s: key '%s': set %lld has no \"path\"", source, k->key, (long long)sets->n);
            } else {
                rc = error_set("%s: key '%s' %s", source, k->key, want);
            }
            if (rc == 0) rc = data_sets_add(k, sets, path, strlen(path), weight, source);
            if (rc) break;
        }
        if (rc == 0) rc = data_sets_check(k, sets, source);
        if (rc == 0) memcpy((char *)c + k->offset, sets, sizeof *sets);
        free(sets);
        return rc;
    }
    }
    return error_set("%s: key '%s' has an unhandled type", source, k->key);
}

static int config_walk(config *c, const cJSON *obj, const char *prefix, const char *source) {
    const cJSON *v = json_duplicate_key(obj);
    if (v) // JSON readers take the last one, or the first: neither is what the writer meant
        return error_set("%s: key '%s%s%s' is given twice", source, prefix, *prefix ? "." : "", v->string);
    cJSON_ArrayForEach(v, obj) {
        char key[256];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", v->string);
        const config_key *k = config_key_find(key);
        if (k) {
            if (config_set_json(c, k, v, source)) return -1;
        } else if (cJSON_IsObject(v)) {
            if (config_walk(c, v, key, source)) return -1;
        } else {
            return config_unknown(key, source);
        }
    }
    return 0;
}

// config_fail: the message just set, made one line (a key or value from the user may hold a
// newline or other control characters); returns -1.
static int config_fail(void) {
    char one[1024];
    text_one_line(error_msg(), one, sizeof one);
    return error_set("%s", one);
}

static int config_load_text(config *c, const char *json, const char *source) {
    cJSON *root = json_parse_object(json, source, "the configuration");
    if (!root) return -1;
    int rc = config_walk(c, root, "", source);
    cJSON_Delete(root);
    return rc;
}

int config_load_json(config *c, const char *json, const char *source) {
    return config_load_text(c, json, source) ? config_fail() : 0;
}

int config_load_file(config *c, const char *path) {
    size_t len;
    char *buf = file_read_text_len(path, 64u << 20, &len);
    if (!buf) {
        char why[1024];
        snprintf(why, sizeof why, "%s", error_msg());
        error_set("config %s", why); // "config <path>: <reason>"
        return config_fail();
    }
    size_t text = strlen(buf);
    int rc = text < len ? error_set("%s: a NUL byte at offset %zu (a configuration is JSON text)", path, text)
                        : config_load_text(c, buf, path);
    free(buf);
    return rc ? config_fail() : 0;
}

int config_set(config *c, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq) return error_set("override '--%s': expected --key=value", assignment), config_fail();
    char key[256];
    size_t n = (size_t)(eq - assignment);
    if (n >= sizeof key) n = sizeof key - 1;
    memcpy(key, assignment, n);
    key[n] = '\0';
    const config_key *k = config_key_find(key);
    if (!k) return config_unknown(key, "command line"), config_fail();
    return config_set_text(c, k, eq + 1, "command line") ? config_fail() : 0;
}

// Find (or make) the section object of a dotted key in root; returns the leaf name.
static cJSON *config_section(cJSON *root, const char *key, const char **leaf) {
    char part[256];
    cJSON *obj = root;
    const char *p = key, *dot;
    while ((dot = strchr(p, '.'))) {
        snprintf(part, sizeof part, "%.*s", (int)(dot - p), p);
        cJSON *next = cJSON_GetObjectItemCaseSensitive(obj, part);
        if (!next) next = cJSON_AddObjectToObject(obj, part);
        obj = next;
        p = dot + 1;
    }
    *leaf = p;
    return obj;
}

char *config_to_json(const config *c) {
    cJSON *root = cJSON_CreateObject();
    const config_table *t = config_table_get();
    for (int i = 0; i < t->n; i++) {
        const config_key *k = t->by_name[i];
        const char *leaf;
        cJSON *sec = config_section(root, k->key, &leaf);
        const char *field = (const char *)c + k->offset;
        switch (k->type) {
        case CFG_INT:
        case CFG_BYTES: cJSON_AddNumberToObject(sec, leaf, (double)*(const int64_t *)field); break;
        case CFG_FLOAT: cJSON_AddNumberToObject(sec, leaf, *(const double *)field); break;
        case CFG_BOOL: cJSON_AddBoolToObject(sec, leaf, *(const int *)field); break;
        case CFG_STRING: cJSON_AddStringToObject(sec, leaf, field); break;
        case CFG_INT_LIST: {
            const config_int_list *list = (const config_int_list *)field;
            cJSON *arr = cJSON_AddArrayToObject(sec, leaf);
            for (int64_t j = 0; j < list->n; j++) cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)list->v[j]));
            break;
        }
        case CFG_DATA_SETS: {
            const config_data_sets *sets = (const config_data_sets *)field;
            cJSON *arr = cJSON_AddArrayToObject(sec, leaf);
            for (int64_t j = 0; j < sets->n; j++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "path", sets->v[j].path);
                cJSON_AddNumberToObject(o, "weight", sets->v[j].weight);
                cJSON_AddItemToArray(arr, o);
            }
            break;
        }
        }
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

// A declaring file as the repository names it: __FILE__ from its last "/src/" on.
static const char *config_file_shown(const char *file) {
    const char *shown = file;
    for (const char *p = strstr(file, "/src/"); p; p = strstr(p + 1, "/src/")) shown = p + 1;
    return shown;
}

void config_print_keys(FILE *f) {
    const config_table *t = config_table_get();
    for (int i = 0; i < t->n; i++) {
        const config_key *k = t->by_name[i];
        fprintf(f, "| `%s` | %s | `%s` | %s", k->key, config_type_name(k->type), k->def[0] ? k->def : "\"\"", k->doc);
        if (k->choices) { // "a|b" would split a markdown cell: escape the bars
            fputs("; one of ", f);
            for (const char *c = k->choices; *c; c++) fputs(*c == '|' ? "\\|" : (char[]){*c, 0}, f);
        }
        fprintf(f, " | %s |\n", config_file_shown(t->set_of[i]->file));
    }
}

int config_check(const config *c) {
    // (what a mode asks of the keys besides is its prepare hook's: src/modes, e.g. mode_train_prepare)
    for (int s = 0; s < config_n_key_sets; s++)
        if (config_key_sets[s]->check && config_key_sets[s]->check(c)) return config_fail();
    return 0;
}

int config_data_count(const config *c) {
    if (c->data_path[0] && c->data_sets.n > 0)
        return error_set("data.path and data.sets are both set; give one of them (data.path is one training set of "
                         "weight 1)");
    return c->data_sets.n > 0 ? (int)c->data_sets.n : c->data_path[0] ? 1 : 0;
}

const char *config_data_path(const config *c, int i, double *weight) {
    if (c->data_sets.n == 0) {
        if (weight) *weight = 1;
        return c->data_path;
    }
    if (weight) *weight = c->data_sets.v[i].weight;
    return c->data_sets.v[i].path;
}

uint64_t config_hash(const config *c) {
    char *s = config_to_json(c);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    cJSON_free(s);
    return h;
}

void config_test_slow(const config *c, int rank) {
    if (c->test_slow_ms <= 0 || (c->test_slow_teacher != rank && c->test_slow_teacher != -2)) return;
    struct timespec ts = {(time_t)(c->test_slow_ms / 1000), (long)(c->test_slow_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void config_copy_keys(config *to, const config *from, const char *prefix) {
    size_t n = strlen(prefix);
    const config_table *t = config_table_get();
    for (int i = 0; i < t->n; i++) {
        const config_key *k = t->by_name[i];
        if (strncmp(k->key, prefix, n) == 0) memcpy((char *)to + k->offset, (const char *)from + k->offset, k->size);
    }
}
