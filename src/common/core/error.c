// error.c: a thread-local "last error" buffer (see error.h).
#include "common/core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char error_buf[1024];

int error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_buf, sizeof error_buf, fmt, ap);
    va_end(ap);
    return -1;
}

int error_prefix(const char *fmt, ...) {
    char prefix[512], old[sizeof error_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_buf, sizeof old);
    snprintf(error_buf, sizeof error_buf, "%s: %s", prefix, old);
    return -1;
}

const char *error_msg(void) { return error_buf; }

void error_clear(void) { error_buf[0] = '\0'; }
