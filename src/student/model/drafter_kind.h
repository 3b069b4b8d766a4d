// drafter_kind.h: the drafter kinds behind one table (the config key drafter.kind): what makes a
// kind of drafter itself, its export identity and its parameters, filled by one file per kind
// (drafter_dflash.c: DFlash, drafter_dflash2.c: DFlash2) and listed by the registry in drafter_kind.c.
//
// Adding a kind (docs/student.md, "Drafter kinds"): a file drafter_<kind>.c defining a
// `const drafter_kind drafter_kind_<kind>`, its line in drafter_kind.c's registry and in this
// header's list below, and its kernels. The shared parts (the Qwen3 keys of config.json, the
// flat parameter buffer, loading and export, the planner) know no kind by name.
//
// Forward declarations only: this header sits under drafter_config.h and drafter.h, which use it.
#pragma once
#include <stddef.h>

struct drafter_config;
struct drafter_param;
struct drafter;
struct cJSON;

typedef struct drafter_kind {
    const char *name;          // the drafter.kind value, e.g. "dflash"
    const char *architecture;  // config.json "architectures": the dflash package's class, e.g. "DFlashDraftModel"
    const char *model_type;    // config.json "model_type" of the base decoder, e.g. "qwen3"
    // param_list: the trainable tensors in export order (names as the package's from_pretrained
    // maps them), each at an offset aligned to DRAFTER_ALIGN elements of the flat buffer. Returns
    // the count; fills list (sized by a first call with NULL) when not NULL.
    int (*param_list)(const struct drafter_config *c, struct drafter_param *list);
    // bind: point d's per-tensor pointers (fc, layers[l].*, norm, ...) into its compute copy,
    // by the order param_list gave d->params.
    void (*bind)(struct drafter *d);
    // grad_buckets: bucket_of[i] = the gradient bucket (grad_buckets.h) in which the step's backward
    // finishes d->params[i]; -1 with error_set when d's tensors are not in the kind's layout.
    int (*grad_buckets)(const struct drafter *d, int *bucket_of);
    // defaults: set the kind's own fields of c to the published defaults (before config_parse, and
    // for a drafter shaped from the target). NULL: the kind has none.
    void (*defaults)(struct drafter_config *c);
    // config_parse / config_write: the kind's own config.json keys beyond the shared DFlash ones
    // (root: the object; dflash: its "dflash_config" object, NULL when absent on parse). NULL: the
    // kind has none. config_parse: -1 with error_set naming src and the key.
    int (*config_parse)(struct drafter_config *c, const struct cJSON *root, const struct cJSON *dflash, const char *src);
    void (*config_write)(const struct drafter_config *c, struct cJSON *root, struct cJSON *dflash);
} drafter_kind;

// The kinds (each defined in its own file).
extern const drafter_kind drafter_kind_dflash;  // drafter_dflash.c
extern const drafter_kind drafter_kind_dflash2; // drafter_dflash2.c

// drafter_kind_find: the kind named `name` (a drafter.kind value); NULL with error_set naming the
// key drafter.kind and the known kinds when there is none.
const drafter_kind *drafter_kind_find(const char *name);
// drafter_kind_by_architecture: the kind whose export names `architecture`; NULL (no error) when none.
const drafter_kind *drafter_kind_by_architecture(const char *architecture);
// drafter_kind_default: the kind of a config.json without "architectures" and the default of drafter.kind.
const drafter_kind *drafter_kind_default(void);
// drafter_kind_list: the known kinds' `name`s (field 0) or `architecture`s (field 1), quoted
// when quote = 1, comma-separated into out.
void drafter_kind_list(int field, int quote, char *out, size_t n);
