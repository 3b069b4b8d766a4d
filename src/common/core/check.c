// check.c: the fatal-error path and the libc/MPI/HDF5 check helpers (see check.h).
#include "common/core/check.h"

#include <hdf5.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/core/log.h"

static void (*check_ending_hook)(void);

void check_set_ending_hook(void (*fn)(void)) { check_ending_hook = fn; }

_Noreturn void dflash_fatal(const char *file, int line, const char *hint, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *c = msg; *c; c++) // one line, always
        if (*c == '\n') *c = ' ';
    // the source location only for whoever debugs the program (DFLASH_ERROR_LOCATION=1): the user's
    // line says what is wrong and which setting or file to change, not where the code noticed it
    const char *base = strrchr(file, '/'), *debug = getenv("DFLASH_ERROR_LOCATION");
    base = base ? base + 1 : file;
    char prefix[16] = "", where[160] = "";
    if (log_world() > 1) snprintf(prefix, sizeof prefix, "[r%d] ", log_rank());
    if (debug && debug[0] && strcmp(debug, "0") != 0) snprintf(where, sizeof where, " [%s:%d]", base, line);
    if (hint) fprintf(stderr, "%serror: %s (hint: %s)%s\n", prefix, msg, hint, where); // one call: one line
    else fprintf(stderr, "%serror: %s%s\n", prefix, msg, where);
    fflush(stderr);
    int init = 0, fin = 0, size = 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) {
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (check_ending_hook) check_ending_hook(); // the peers do not report this rank's exit as another error
        // Under Open MPI's mpirun (its HNP) a non-zero exit ends the whole job: exit without MPI_Abort,
        // whose banner (and, racing the exit, ORTE_ERROR_LOG lines) would follow the one error line.
        // Elsewhere (srun, another MPI) MPI_Abort, so that no peer waits for this rank forever.
        if (size > 1 && getenv("OMPI_MCA_orte_hnp_uri")) {
            fflush(NULL);
            _exit(1);
        }
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    exit(1);
}

void dflash_mpi_check(int rc, const char *call, const char *file, int line) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    dflash_fatal(file, line, "a peer rank may have died; check its log", "%s failed: %s", call, text);
}

size_t dflash_size_mul(long long a, long long b, const char *file, int line) {
    size_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow((unsigned long long)a, (unsigned long long)b, &r))
        dflash_fatal(file, line, NULL, "size %lld x %lld is negative or does not fit in 64 bits", a, b);
    return r;
}

// Walk the HDF5 error stack and keep the innermost description (the most specific one).
static herr_t hdf5_error_walk(unsigned n, const H5E_error2_t *err, void *data) {
    if (n == 0 && err->desc) snprintf((char *)data, 256, "%s", err->desc);
    return 0;
}

long long dflash_hdf5_check(long long rc, const char *call, const char *file, int line) {
    if (rc >= 0) return rc;
    char desc[256] = "unknown HDF5 error";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, hdf5_error_walk, desc);
    dflash_fatal(file, line, NULL, "%s failed: %s", call, desc);
}

void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fatal("out of host memory allocating %zu bytes", bytes);
    return p;
}

void *xcalloc(size_t count, size_t bytes) {
    void *p = calloc(count ? count : 1, bytes ? bytes : 1);
    if (!p) fatal("out of host memory allocating %zu x %zu bytes", count, bytes);
    return p;
}

void *xrealloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) fatal("out of host memory reallocating to %zu bytes", bytes);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}
