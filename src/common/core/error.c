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

// The message so far with a formatted text before it ("TEXT: old") or after it ("old; TEXT").
static int error_wrap(int before, const char *fmt, va_list ap) {
    char text[512], old[sizeof error_buf];
    vsnprintf(text, sizeof text, fmt, ap);
    memcpy(old, error_buf, sizeof old);
    if (before) snprintf(error_buf, sizeof error_buf, "%s: %s", text, old);
    else snprintf(error_buf, sizeof error_buf, "%s; %s", old, text);
    return -1;
}

int error_prefix(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_wrap(1, fmt, ap);
    va_end(ap);
    return -1;
}

int error_append(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_wrap(0, fmt, ap);
    va_end(ap);
    return -1;
}

const char *error_msg(void) { return error_buf; }

void error_clear(void) { error_buf[0] = '\0'; }
