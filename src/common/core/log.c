// log.c: rank-prefixed logging and the progress line (see log.h).
#include "common/core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_rank_ = 0, log_world_ = 1;
static log_level log_level_ = LOG_INFO;

void log_setup(int rank, int world, log_level level) {
    log_rank_ = rank;
    log_world_ = world;
    log_level_ = level;
}

int log_level_parse(const char *name) {
    static const char *names[] = {"debug", "info", "warn", "error", "quiet"};
    for (int i = 0; i < 5; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

int log_rank(void) { return log_rank_; }
int log_world(void) { return log_world_; }

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Writes "[rN] " when several ranks run; the whole line is built first and written with one
// fputs so lines from different ranks do not interleave mid-line.
void log_msg(log_level level, const char *fmt, ...) {
    if (level < log_level_) return;
    char line[2048];
    int n = 0;
    if (log_world_ > 1) n += snprintf(line + n, sizeof line - (size_t)n, "[r%d] ", log_rank_);
    if (level == LOG_WARN) n += snprintf(line + n, sizeof line - (size_t)n, "warning: ");
    if (level == LOG_ERROR) n += snprintf(line + n, sizeof line - (size_t)n, "error: ");
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    if (len + 1 < sizeof line && (len == 0 || line[len - 1] != '\n')) {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    fputs(line, stderr);
    fflush(stderr);
}

void progress_start(progress *p, const char *label, int64_t total) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total;
    p->t_start = p->t_last = time_now();
    p->last_tenth = -1;
    p->tty = isatty(STDERR_FILENO);
}

static void progress_print(progress *p, int final) {
    double t = time_now(), el = t - p->t_start;
    double rate = el > 0 ? (double)p->done / el : 0;
    char buf[256];
    if (p->total > 0) {
        double frac = (double)p->done / (double)p->total;
        double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
        snprintf(buf, sizeof buf, "%s: %lld/%lld (%.0f%%) %.1f/s %.0fs elapsed %.0fs left", p->label,
                 (long long)p->done, (long long)p->total, 100.0 * frac, rate, el, final ? 0.0 : eta);
    } else {
        snprintf(buf, sizeof buf, "%s: %lld done %.1f/s %.0fs elapsed", p->label, (long long)p->done,
                 rate, el);
    }
    if (p->tty && log_level_ <= LOG_INFO) {
        if (log_world_ > 1) fprintf(stderr, "\r[r%d] %s\033[K%s", log_rank_, buf, final ? "\n" : "");
        else fprintf(stderr, "\r%s\033[K%s", buf, final ? "\n" : "");
        fflush(stderr);
    } else {
        log_info("%s", buf);
    }
    p->t_last = t;
}

void progress_update(progress *p, int64_t done) {
    p->done = done;
    double t = time_now();
    if (p->tty) {
        if (t - p->t_last >= 0.2) progress_print(p, 0);
        return;
    }
    int tenth = p->total > 0 ? (int)(10 * done / p->total) : -1;
    if ((p->total > 0 && tenth > p->last_tenth && tenth < 10) || t - p->t_last >= 30.0) {
        if (tenth > p->last_tenth) p->last_tenth = tenth;
        progress_print(p, 0);
    }
}

void progress_end(progress *p) { progress_print(p, 1); }
