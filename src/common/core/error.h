// error.h: recoverable errors for library code.
//
// Functions that can fail on bad input (a malformed file, a bad config value) return -1 (or NULL)
// after error_set("..."), and the caller decides: a tool prints error_msg() and exits 1, a test
// checks the message, a loader adds context with error_prefix(). Messages are one line and name
// the thing that is wrong (file, tensor, dataset, key) and the value found.
#pragma once

// error_set: format the thread's last error; always returns -1 so `return error_set(...)` reads well.
int error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// error_prefix: prepend context, "ctx: <previous message>"; returns -1.
int error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// error_append: add what to change, "<previous message>; <text>" (an out-of-memory failure names
// the keys that size what did not fit); returns -1.
int error_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// error_msg: the last message set on this thread ("" when none).
const char *error_msg(void);
void error_clear(void);
