// drafter_kind.c: the registry of drafter kinds (see drafter_kind.h). A new kind is one line here.
#include "student/model/drafter_kind.h"

#include <stdio.h>
#include <string.h>

#include "common/core/error.h"

// X(name): the kind defined as drafter_kind_<name> in drafter_<name>.c; the first is the default.
#define DRAFTER_KINDS(X) \
    X(dflash)            \
    X(dflash2)

#define KIND_EXTERN(k) extern const drafter_kind drafter_kind_##k;
DRAFTER_KINDS(KIND_EXTERN)
#define KIND_ENTRY(k) &drafter_kind_##k,
static const drafter_kind *const kinds[] = {DRAFTER_KINDS(KIND_ENTRY)};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

const drafter_kind *drafter_kind_default(void) { return kinds[0]; }

const drafter_kind *drafter_kind_at(int i) { return i >= 0 && i < N_KINDS ? kinds[i] : NULL; }

void drafter_kind_list(int field, int quote, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < N_KINDS && used < n; i++) {
        const char *s = field ? kinds[i]->architecture : kinds[i]->name;
        int w = snprintf(out + used, n - used, "%s%s%s%s", i ? ", " : "", quote ? "\"" : "", s, quote ? "\"" : "");
        if (w < 0) break;
        used += (size_t)w;
    }
}

const drafter_kind *drafter_kind_find(const char *name) {
    for (int i = 0; i < N_KINDS; i++)
        if (strcmp(kinds[i]->name, name) == 0) return kinds[i];
    char known[256];
    drafter_kind_list(0, 0, known, sizeof known);
    error_set("drafter.kind: \"%s\" is not a drafter kind (known: %s)", name, known);
    return NULL;
}

const drafter_kind *drafter_kind_by_architecture(const char *architecture) {
    for (int i = 0; i < N_KINDS; i++)
        if (strcmp(kinds[i]->architecture, architecture) == 0) return kinds[i];
    return NULL;
}
