// log.h: rank-prefixed log lines and a progress line.
//
// Every line starts with the rank when the job has more than one ("[r1] "), then the level for
// warnings and errors. Lines go to stderr so stdout stays free for machine-readable output
// (--plan, inspect). A progress line is redrawn in place on a terminal and printed as plain lines
// (at most one per 10 % or per 30 s) when stderr is a file or a pipe.
#pragma once
#include <stdint.h>

typedef enum { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_QUIET = 4 } log_level;

// log_setup: rank and world size (world 1 = no prefix) and the lowest level printed.
void log_setup(int rank, int world, log_level level);
// log_level_parse: "debug" | "info" | "warn" | "error" | "quiet" -> level; -1 if unknown.
int log_level_parse(const char *name);
int log_rank(void);
int log_world(void);

void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

// A progress line for long work: progress_start, progress_update as work is done, progress_end.
typedef struct {
    char label[64];
    int64_t total;     // units of work (0 = unknown)
    int64_t done;
    double t_start;    // seconds (monotonic)
    double t_last;     // last time a line was printed
    int last_tenth;    // last 10 % mark printed (non-terminal mode)
    int tty;           // stderr is a terminal
} progress;

void progress_start(progress *p, const char *label, int64_t total);
void progress_update(progress *p, int64_t done);
void progress_end(progress *p);

// time_now: monotonic seconds.
double time_now(void);
