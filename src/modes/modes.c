// modes.c: the registry of dflash_rank's modes (see mode.h): one line per mode.
#include <stdio.h>
#include <string.h>

#include "common/core/error.h"
#include "modes/mode.h"

// The registry: a new mode is one X(...) here and its file (mode.h).
#define MODE_LIST(X) X(mode_train) X(mode_eval) X(mode_check) X(mode_dump_features) X(mode_regenerate) X(mode_transport_test)

#define MODE_DECLARE(m) extern const mode_def m;
MODE_LIST(MODE_DECLARE)
#define MODE_ENTRY(m) &m,
static const mode_def *const registry[] = {MODE_LIST(MODE_ENTRY)};

int mode_count(void) { return (int)(sizeof registry / sizeof registry[0]); }

const mode_def *mode_at(int i) { return i >= 0 && i < mode_count() ? registry[i] : NULL; }

const mode_def *mode_find(const char *name) {
    char names[256] = "";
    for (int i = 0; i < mode_count(); i++) {
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", registry[i]->name);
    }
    error_set("run.mode %s is not a mode (known: %s)", name, names);
    return NULL;
}
