// test_arena.c: carving, alignment, high-water mark, mark/reset, dry mode, the over-capacity
// fatal error (in a forked child), and bytes_format / bytes_parse.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/core/bytes.h"
#include "testing.h"

static int aligned(const void *p) { return ((uintptr_t)p % ARENA_ALIGN) == 0; }

static void test_alignment_and_bounds(backend *be) {
    arena a;
    CHECK(arena_init(&a, "align", be, 10000) == 0);
    CHECK(a.capacity == 10240); // rounded up to ARENA_ALIGN
    CHECK(aligned(a.base));
    static const size_t sizes[] = {1, 3, 255, 256, 257, 0, 1000, 17};
    size_t expect_used = 0;
    int ok = 1;
    char *prev_end = a.base;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *p = arena_alloc(&a, sizes[i]);
        ok &= aligned(p) && p >= prev_end && p + sizes[i] <= a.base + a.capacity;
        prev_end = p + sizes[i];
        expect_used += (sizes[i] + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
        ok &= a.used == expect_used;
        memset(p, 0xAB, sizes[i]); // the memory is really there (ASan would object otherwise)
    }
    CHECK_MSG(ok, "carves are not aligned, in bounds and accounted (%s)", be ? "backend" : "host");
    // exactly filling the capacity is allowed
    char *last = arena_alloc(&a, a.capacity - a.used);
    CHECK(last != NULL && a.used == a.capacity);
    arena_free(&a);
    CHECK(a.base == NULL && a.capacity == 0);
    arena_free(&a); // twice is harmless
}

// A carving sequence with scoped scratch, run against any arena; returns the expected high water.
static size_t carve_sequence(arena *a) {
    arena_alloc(a, 1000); // 1024
    int64_t shape[2] = {3, 5};
    tensor t = arena_tensor(a, DT_BF16, 2, shape); // 30 B -> 256
    (void)t;
    size_t m = arena_mark(a); // 1280
    arena_alloc(a, 5000);     // +5120 = 6400
    arena_alloc(a, 1);        // +256 = 6656  <- high water
    arena_reset(a, m);        // back to 1280
    arena_alloc(a, 300);      // +512 = 1792
    m = arena_mark(a);
    arena_alloc(a, 4096); // +4096 = 5888, below the earlier peak
    arena_reset(a, m);
    return 6656;
}

static void test_high_water_and_dry(void) {
    arena real, dry;
    CHECK(arena_init(&real, "real", NULL, 8192) == 0);
    arena_init_dry(&dry, "dry");
    size_t expect = carve_sequence(&real);
    carve_sequence(&dry);
    CHECK(arena_high_water(&real) == expect);
    CHECK(real.used == 1792);
    CHECK(arena_high_water(&dry) == arena_high_water(&real));
    CHECK(dry.used == real.used);
    CHECK(dry.dry && dry.base == NULL && arena_alloc(&dry, 10) == NULL);
    // high water survives a full reset
    arena_reset(&real, 0);
    CHECK(real.used == 0 && arena_high_water(&real) == expect);
    arena_free(&real);
    arena_free(&dry);
}

static void test_tensor_from_arena(backend *be) {
    arena a;
    CHECK(arena_init(&a, "tensors", be, 1 << 16) == 0);
    int64_t shape[3] = {2, 3, 7};
    tensor t = arena_tensor(&a, DT_F32, 3, shape);
    CHECK(t.dt == DT_F32 && t.ndim == 3 && t.shape[2] == 7 && aligned(t.data));
    CHECK(t.device == (be ? be->device : DEVICE_CPU));
    CHECK(tensor_bytes(&t) == 2 * 3 * 7 * 4 && a.used == 256);
    tensor u = arena_tensor(&a, DT_I64, 3, shape);
    CHECK((char *)u.data == (char *)t.data + 256);
    arena_free(&a);
}

// fatal_child: run fn in a child process with stderr captured; returns the exit status (or -1 if
// it did not exit normally) and the first line of stderr in msg.
static int fatal_child(void (*fn)(void), char *msg, size_t n) {
    int fd[2];
    if (pipe(fd) != 0) return -2;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        _exit(0); // fn should not return
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fd[0], msg + got, n - 1 - got)) > 0) got += (size_t)r;
    msg[got] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void over_capacity(void) {
    arena a;
    if (arena_init(&a, "activations", NULL, 4096) != 0) _exit(3);
    arena_alloc(&a, 1000);
    arena_alloc(&a, 8192);
    _exit(0);
}

static void dry_overflow(void) {
    arena a;
    arena_init_dry(&a, "plan");
    arena_alloc(&a, 100);
    arena_alloc(&a, SIZE_MAX - 300); // fits, but would wrap around when rounded: must still be fatal
    _exit(0);
}

static void reset_past_used(void) {
    arena a;
    arena_init_dry(&a, "scratch");
    arena_alloc(&a, 100);
    arena_reset(&a, 100000);
    _exit(0);
}

static void test_fatal(void) {
    char msg[2048];
    int rc = fatal_child(over_capacity, msg, sizeof msg);
    CHECK_MSG(rc == 1, "over-capacity child exited with %d: %s", rc, msg);
    CHECK_MSG(strstr(msg, "arena 'activations'") && strstr(msg, "8.00 KiB requested") &&
                  strstr(msg, "1.00 KiB used") && strstr(msg, "4.00 KiB capacity"),
              "over-capacity message: %s", msg);
    CHECK_MSG(strchr(msg, '\n') == msg + strlen(msg) - 1, "not one line: %s", msg);
    // the message names the budgets to raise, not "please report it" (issue 27 item 9)
    CHECK_MSG(strstr(msg, "train.mem_budget") && strstr(msg, "teacher.mem_budget") && !strstr(msg, "report"),
              "over-capacity hint: %s", msg);
    rc = fatal_child(dry_overflow, msg, sizeof msg);
    CHECK_MSG(rc == 1 && strstr(msg, "memory plan 'plan'") && strstr(msg, "overflows 64 bits"), "dry overflow: exit %d, %s",
              rc, msg);
    rc = fatal_child(reset_past_used, msg, sizeof msg);
    CHECK_MSG(rc == 1 && strstr(msg, "arena 'scratch'"), "reset past used: exit %d, %s", rc, msg);
}

static void test_init_failure(void) {
    arena a;
    CHECK_ERR(arena_init(&a, "huge", NULL, SIZE_MAX - 5), "arena 'huge'");
    CHECK(a.base == NULL);
#ifndef __SANITIZE_ADDRESS__ // ASan aborts on impossible allocations instead of returning NULL
    CHECK_ERR(arena_init(&a, "weights", NULL, (size_t)1 << 62), "arena 'weights'");
    CHECK(a.base == NULL);
#endif
    CHECK(arena_init(&a, "empty", NULL, 0) == 0 && a.capacity == 0);
    CHECK(arena_alloc(&a, 0) != NULL); // zero bytes fit in an empty arena
    arena_free(&a);
}

static void test_bytes_parse(void) {
    static const struct {
        const char *s;
        size_t want;
    } good[] = {
        {"0", 0},
        {"123", 123},
        {"12B", 12},
        {"4k", 4096},
        {"4K", 4096},
        {"1kib", 1024},
        {"1KB", 1000},
        {"64MiB", 64ull << 20},
        {"500M", 500ull << 20},
        {"500MB", 500000000ull},
        {"2G", 2ull << 30},
        {"1.5GiB", 3ull << 29},
        {"1.50 GiB", 3ull << 29},
        {"0.5K", 512},
        {"1.1K", 1126}, // 1126.4 truncated
        {"3T", 3ull << 40},
        {"1TB", 1000000000000ull},
        {"0.000000000000000000001G", 0}, // digits past 18 are ignored
        {"18446744073709551615", 18446744073709551615ull},
        {"16777215.5TiB", (16777215ull << 40) + (1ull << 39)},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        size_t v = 1234567;
        int rc = bytes_parse(good[i].s, &v);
        CHECK_MSG(rc == 0 && v == good[i].want, "bytes_parse(\"%s\") = %d, %zu; want %zu (%s)",
                  good[i].s, rc, v, good[i].want, error_msg());
    }
    static const char *bad[] = {"",        "12X",    "-1",    "1.5.5G", "+1",   " 1",    "1 ",
                                ".5G",     "1.G",    "G",     "1e9",    "0x10", "1.5",   "1.5B",
                                "1  G",    "1GiBs",  "1 G B", "18446744073709551616",
                                "17179869184G",      "16777216T",       "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t v = 42;
        error_clear();
        int rc = bytes_parse(bad[i], &v);
        CHECK_MSG(rc == -1 && v == 42 && strstr(error_msg(), "invalid size"),
                  "bytes_parse(\"%s\") accepted (%zu) or bad message '%s'", bad[i], v, error_msg());
    }
}

static void test_bytes_format(void) {
    char b[32];
    CHECK(strcmp(bytes_format(0, b, sizeof b), "0 B") == 0);
    CHECK(strcmp(bytes_format(512, b, sizeof b), "512 B") == 0);
    CHECK(strcmp(bytes_format(1023, b, sizeof b), "1023 B") == 0);
    CHECK(strcmp(bytes_format(1024, b, sizeof b), "1.00 KiB") == 0);
    CHECK(strcmp(bytes_format(3ull << 29, b, sizeof b), "1.50 GiB") == 0);
    CHECK(strcmp(bytes_format(12ull << 20, b, sizeof b), "12.0 MiB") == 0);
    CHECK(strcmp(bytes_format(100ull << 20, b, sizeof b), "100 MiB") == 0);
    CHECK(strcmp(bytes_format((10ull << 30) - 1, b, sizeof b), "10.0 GiB") == 0); // not "10.00"
    CHECK(strcmp(bytes_format(SIZE_MAX, b, sizeof b), "16.0 EiB") == 0);
    // format -> parse gives the size back to within the 3 printed digits
    size_t sizes[] = {1500, 123456789, 7ull << 33, 999999999999ull};
    for (size_t i = 0; i < 4; i++) {
        size_t v = 0;
        CHECK(bytes_parse(bytes_format(sizes[i], b, sizeof b), &v) == 0);
        CHECK_CLOSE((double)v / (double)sizes[i], 1.0, 0.005);
    }
}

int main(void) {
    backend cpu;
    CHECK(backend_open(&cpu, "cpu", 0) == 0);
    test_alignment_and_bounds(NULL);
    test_alignment_and_bounds(&cpu);
    test_high_water_and_dry();
    test_tensor_from_arena(NULL);
    test_tensor_from_arena(&cpu);
    test_fatal();
    test_init_failure();
    test_bytes_parse();
    test_bytes_format();
    backend_close(&cpu);
    return test_finish("test_arena");
}
