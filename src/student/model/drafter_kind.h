// drafter_kind.h: the drafter kinds behind one table (the config key drafter.kind): what makes a
// kind of drafter itself: its export identity, its parameters, and its part of the step (its
// layers' forward and backward, what it computes on the scored rows, what the decode walk follows),
// filled by one file per kind (drafter_dflash.c: DFlash, drafter_dflash2.c: DFlash2) and listed by
// the registry in drafter_kind.c.
//
// Adding a kind (docs/student.md, "Adding a drafter kind"): a file drafter_<kind>.c defining a
// `const drafter_kind drafter_kind_<kind>`, its line in drafter_kind.c's registry, and its tests.
// The shared parts (the Qwen3 keys of config.json, the flat parameter buffer, loading and export,
// the planner, the step's chunk machinery in step.c) know no kind by name.
//
// Forward declarations only: this header sits under drafter_config.h and drafter.h, which use it.
#pragma once
#include <stddef.h>
#include <stdint.h>

struct drafter_config;
struct drafter_param;
struct drafter;
struct cJSON;
struct arena;
struct student_work;
struct step_stats;

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

    // The step (step.c runs the chunk: embeddings, the layer loop, the loss, chunking, the buffers;
    // these hooks are what a kind computes in it; student_work: step_work.h). Required: the layer
    // hooks and decode_choice; the rest may be NULL (the kind has none).
    // layer_forward: layer l over the chunk's C anchors (N = C * block_size rows), from
    // w->saved[l].h_in [N, H] to the layer's output in w->h_final, keeping what layer_backward needs.
    void (*layer_forward)(struct drafter *d, struct student_work *w, int l, int C);
    // layer_backward: from w->dh = d(loss)/d(layer l's output) to w->dh = d(loss)/d(its input); adds
    // the layer's weight gradients to d->grad and its context K/V gradients to w->dkc[l] / w->dvc[l].
    void (*layer_backward)(struct drafter *d, struct student_work *w, int l, int C);
    // row_topk: the student's top-K candidates per scored row the kind reads from the loss
    // (loss_rows.s_topk_*); the step keeps max(this, the tree metric's 8), sorted.
    int (*row_topk)(const struct drafter_config *c);
    // work_create: the kind's own step buffers for chunks of up to N block and R scored rows, carved
    // from a (possibly dry: a->dry, the planner's) arena with the chunk's activations; returns the
    // host struct that holds them (work_destroy frees it), stored in w->kind.
    void *(*work_create)(const struct drafter *d, struct arena *a, int64_t N, int64_t R);
    void (*work_destroy)(void *kind_work);
    // rows: after the loss, the kind's own terms on the chunk's scored rows (w->xs, the loss's
    // w->rows); dx not NULL: their gradients added to the kind's tensors and to dx [R, H].
    void (*rows)(struct drafter *d, struct student_work *w, int C, void *dx);
    // decode_choice (host, after the chunk's loss rows are on the host in w->h_*): per scored row r,
    // the token the chain acceptance and the decode walk follow at that slot into choice[r] (the
    // logits' argmax w->h_argmax, or the kind's own choice); the kind's own statistics into st.
    void (*decode_choice)(const struct drafter *d, struct student_work *w, int C, int32_t *choice, struct step_stats *st);
} drafter_kind;

// drafter_kind_find: the kind named `name` (a drafter.kind value); NULL with error_set naming the
// key drafter.kind and the known kinds when there is none.
const drafter_kind *drafter_kind_find(const char *name);
// drafter_kind_by_architecture: the kind whose export names `architecture`; NULL (no error) when none.
const drafter_kind *drafter_kind_by_architecture(const char *architecture);
// drafter_kind_default: the kind of a config.json without "architectures" and the default of drafter.kind.
const drafter_kind *drafter_kind_default(void);
// drafter_kind_at: the i-th registered kind (0: the default); NULL past the last.
const drafter_kind *drafter_kind_at(int i);
// drafter_kind_list: the known kinds' `name`s (field 0) or `architecture`s (field 1), quoted
// when quote = 1, comma-separated into out.
void drafter_kind_list(int field, int quote, char *out, size_t n);
