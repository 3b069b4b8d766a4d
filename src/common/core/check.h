// check.h: fatal errors that end the whole job cleanly.
//
// Every failure the program cannot recover from goes through dflash_fatal(): one line on stderr,
//   [rN] error: <what went wrong> (hint: <what to try>)
// (with DFLASH_ERROR_LOCATION=1 in the environment, the source location follows: " [file.c:123]")
// then, when several MPI ranks are running, _exit(1) under Open MPI's mpirun (which ends the whole
// job at a non-zero exit: no MPI_ABORT banner after the line) or MPI_Abort elsewhere (so no rank
// hangs waiting for a dead peer), else exit(1). The *_check macros wrap the return codes of libc, MPI and HDF5; the CUDA, cuBLAS
// and NCCL ones live in check_cuda.h (CUDA sources only).
#pragma once
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Noreturn void dflash_fatal(const char *file, int line, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// check_set_ending_hook: fn runs after the error line and before MPI_Abort (the watchdog registers
// the call that tells this rank's peers it ends the job itself, so they do not report its exit as
// another error). NULL removes it.
void check_set_ending_hook(void (*fn)(void));

// fatal("fmt", ...): abort the job with a formatted message.
#define fatal(...) dflash_fatal(__FILE__, __LINE__, NULL, __VA_ARGS__)
// fatal_hint("hint", "fmt", ...): same, with a suggestion for the user.
#define fatal_hint(hint, ...) dflash_fatal(__FILE__, __LINE__, (hint), __VA_ARGS__)

// libc_check(cond, "what"): cond false -> "what: strerror(errno)".
#define libc_check(cond, ...)                                                                   \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            int errno_ = errno;                                                                 \
            char what_[512];                                                                    \
            snprintf(what_, sizeof what_, __VA_ARGS__);                                         \
            dflash_fatal(__FILE__, __LINE__, NULL, "%s: %s", what_, strerror(errno_));          \
        }                                                                                       \
    } while (0)

// mpi_check(MPI_Xxx(...)): any code but MPI_SUCCESS is fatal, with MPI's own error text.
#define mpi_check(call) dflash_mpi_check((call), #call, __FILE__, __LINE__)
void dflash_mpi_check(int rc, const char *call, const char *file, int line);

// hdf5_check(H5Xxx(...)): a negative herr_t/hid_t is fatal; the innermost HDF5 error is shown.
#define hdf5_check(call) dflash_hdf5_check((long long)(call), #call, __FILE__, __LINE__)
long long dflash_hdf5_check(long long rc, const char *call, const char *file, int line);

// size_mul(a, b): a * b as a size_t, both int64_t-or-narrower counts; a negative factor or a
// product past SIZE_MAX is fatal, naming both factors (a size computed from a count never wraps).
#define size_mul(a, b) dflash_size_mul((long long)(a), (long long)(b), __FILE__, __LINE__)
size_t dflash_size_mul(long long a, long long b, const char *file, int line);

// xmalloc/xcalloc/xrealloc: libc allocation that never returns NULL (fatal with the size instead).
void *xmalloc(size_t bytes);
void *xcalloc(size_t count, size_t bytes);
void *xrealloc(void *p, size_t bytes);
char *xstrdup(const char *s);
