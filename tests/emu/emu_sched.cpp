// emu_sched.cpp: the emulator's kernel launch: every CUDA thread of a block is a fiber, and the
// scheduler runs them until each one reaches a barrier or ends (see cuda_emu.h).
//
// Per block: all fibers start READY. The scheduler runs every READY fiber in thread order (in
// reverse order in every other block, so that a missing barrier between a write by one thread and
// a read by another shows whichever of the two comes first in thread order) until it
// blocks (at __syncthreads: BAR_BLOCK; at a shuffle: BAR_WARP) or returns (DONE). Then it releases
// a barrier whose participants have all arrived: the block barrier when every live thread waits at
// it, a warp barrier when every live lane of that warp does. Exited threads count as arrived, as
// on a GPU since Volta. When nothing can run and nothing can be released, some threads wait at a
// barrier the others never reach (e.g. __syncthreads inside a branch only part of the block takes,
// or a shuffle inside a divergent branch): the emulator names the kernel and stops.
//
// The fiber switch is a few instructions of assembly on x86-64 (callee-saved registers, stack
// pointer, MXCSR and the x87 control word); other architectures use ucontext.
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "emu_internal.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace emu {

thread_local thread_ctx *cur_thread;
thread_local launch_ctx *cur_launch;

enum fiber_state { READY, BAR_BLOCK, BAR_WARP, DONE };

static const size_t STACK_BYTES = 256 << 10; // per fiber; the kernels keep small local arrays
static const int MAX_THREADS = 1024;

#if defined(__x86_64__)
// emu_switch(save, to): saves the current context's stack pointer in *save, continues at `to`.
extern "C" void emu_switch(void **save, void *to);
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch, .-emu_switch\n");
#endif

struct fiber {
    thread_ctx ctx;
    fiber_state state;
    char *stack;
#if defined(__x86_64__)
    void *sp;
#else
    ucontext_t uc;
#endif
};

// Per host thread: the fiber pool and the scheduler's own context.
struct sched {
    std::vector<fiber> fibers;
    char *stacks = nullptr;
    int current = -1;
    body_fn body = nullptr;
    void *arg = nullptr;
    // warp exchange slots
    uint64_t slot[MAX_THREADS / 32][32];
    // per-warp scratch for the warp-collective WMMA operations (cuda_emu.h)
    float wmma[MAX_THREADS / 32][256];
#if defined(__x86_64__)
    void *main_sp = nullptr;
#else
    ucontext_t main_uc;
#endif
};
static thread_local sched *S;

[[noreturn]] static void die(const char *msg) {
    fprintf(stderr, "cuda emulator: %s in kernel %s (block %u,%u,%u)\n", msg,
            cur_launch && cur_launch->kernel ? cur_launch->kernel : "?", cur_launch ? cur_launch->bid.x : 0,
            cur_launch ? cur_launch->bid.y : 0, cur_launch ? cur_launch->bid.z : 0);
    abort();
}

static void to_scheduler() {
    fiber &f = S->fibers[S->current];
#if defined(__x86_64__)
    emu_switch(&f.sp, S->main_sp);
#else
    swapcontext(&f.uc, &S->main_uc);
#endif
}

static void fiber_main() {
    fiber &f = S->fibers[S->current];
    S->body(S->arg);
    f.state = DONE;
    to_scheduler();
    die("a finished fiber was resumed");
}

#if !defined(__x86_64__)
static void fiber_main_uc() { fiber_main(); }
#endif

static void fiber_start(fiber &f) {
    f.state = READY;
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)(f.stack + STACK_BYTES)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;              // alignment: at fiber_main's entry rsp + 8 is 16-byte aligned
    *--sp = (void *)&fiber_main;  // emu_switch's ret goes here
    for (int i = 0; i < 6; i++) *--sp = nullptr; // rbp rbx r12 r13 r14 r15
    uint32_t *ctl = (uint32_t *)--sp;
    ctl[0] = 0x1F80; // MXCSR: round to nearest, exceptions masked
    ctl[1] = 0x037F; // x87 control word, default
    f.sp = sp;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = STACK_BYTES;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, fiber_main_uc, 0);
#endif
}

static void resume(int i) {
    S->current = i;
    cur_thread = &S->fibers[i].ctx;
#if defined(__x86_64__)
    emu_switch(&S->main_sp, S->fibers[i].sp);
#else
    swapcontext(&S->main_uc, &S->fibers[i].uc);
#endif
    S->current = -1;
    cur_thread = nullptr;
}

static sched *sched_get() {
    if (!S) {
        S = new sched();
        S->fibers.resize(MAX_THREADS);
        S->stacks = (char *)mmap(nullptr, (size_t)MAX_THREADS * STACK_BYTES, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (S->stacks == MAP_FAILED) {
            perror("cuda emulator: fiber stacks");
            abort();
        }
        for (int i = 0; i < MAX_THREADS; i++) S->fibers[i].stack = S->stacks + (size_t)i * STACK_BYTES;
    }
    return S;
}

void sync_block() {
    if (!cur_thread) die("__syncthreads outside a kernel");
    S->fibers[S->current].state = BAR_BLOCK;
    to_scheduler();
}

uint64_t warp_exchange(uint64_t v, int src) {
    if (!cur_thread) die("a warp shuffle outside a kernel");
    thread_ctx &t = *cur_thread;
    uint64_t *slot = S->slot[t.warp];
    slot[t.lane] = v;
    S->fibers[S->current].state = BAR_WARP;
    to_scheduler(); // every live lane has published
    int first = t.warp * 32, n = (int)(cur_launch->block.x * cur_launch->block.y * cur_launch->block.z);
    uint64_t r = (src >= 0 && src < 32 && first + src < n && S->fibers[first + src].state != DONE) ? slot[src] : v;
    S->fibers[S->current].state = BAR_WARP;
    to_scheduler(); // every live lane has read
    return r;
}

void *dynamic_smem() { return cur_launch->smem; }

float *warp_scratch() {
    if (!cur_thread) die("a WMMA operation outside a kernel");
    int n = (int)(cur_launch->block.x * cur_launch->block.y * cur_launch->block.z);
    if ((cur_thread->warp + 1) * 32 > n) die("a WMMA operation in a partial warp (it needs all 32 lanes)");
    return S->wmma[cur_thread->warp];
}

void fail(const char *msg) { die(msg); }

// Runs the block's fibers to the end.
static void run_block(int n, bool reverse) {
    std::vector<fiber> &F = S->fibers;
    for (int i = 0; i < n; i++) fiber_start(F[i]);
    int warps = (n + 31) / 32;
    for (;;) {
        for (int j = 0; j < n; j++) {
            int i = reverse ? n - 1 - j : j;
            if (F[i].state == READY) resume(i);
        }
        // everything is blocked or done: release what can be released
        int live = 0, at_block = 0;
        for (int i = 0; i < n; i++) {
            live += F[i].state != DONE;
            at_block += F[i].state == BAR_BLOCK;
        }
        if (live == 0) return;
        int released = 0;
        if (at_block == live) {
            for (int i = 0; i < n; i++)
                if (F[i].state == BAR_BLOCK) F[i].state = READY;
            continue;
        }
        for (int w = 0; w < warps; w++) {
            int lanes = 0, waiting = 0;
            for (int i = w * 32; i < n && i < w * 32 + 32; i++) {
                lanes += F[i].state != DONE;
                waiting += F[i].state == BAR_WARP;
            }
            if (lanes > 0 && waiting == lanes) {
                for (int i = w * 32; i < n && i < w * 32 + 32; i++)
                    if (F[i].state == BAR_WARP) F[i].state = READY;
                released = 1;
            }
        }
        if (!released)
            die("deadlock: some threads wait at __syncthreads or a shuffle that others of their block or warp "
                "never reach");
    }
}

// Launch limits of a current GPU (sm_80 .. sm_120).
static int launch_error(dim3 grid, dim3 block, size_t smem, size_t smem_limit) {
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (threads == 0 || threads > (uint64_t)MAX_THREADS || block.z > 64) return 1;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) return 1;
    if (smem > smem_limit) return 1;
    return 0;
}

} // namespace emu

// The runtime keeps the launch error for cudaGetLastError and the opted-in shared memory per kernel
// (emu_runtime.cpp).
void emu_set_last_error(cudaError_t e);
size_t emu_smem_limit(const void *kernel);

// Launch counts (emu_internal.h): every kernel launch (run_kernel, failed ones included) here, the
// cuBLAS calls in emu_cublas.cpp (emu_cublas_call_count), process-wide. With
// DFLASH_EMU_LAUNCH_REPORT=1 each process prints them at exit:
//     cuda emulator: launches: K kernels, G cuBLAS calls
static std::atomic<long long> launches_kernel;

static void emu_launch_report(void) {
    fprintf(stderr, "cuda emulator: launches: %lld kernels, %lld cuBLAS calls\n", launches_kernel.load(),
            emu_cublas_call_count());
}

extern "C" void emu_launch_counts(long long *kernels, long long *library) {
    if (kernels) *kernels = launches_kernel.load();
    if (library) *library = emu_cublas_call_count();
}

namespace emu {

void run_kernel(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem, body_fn body, void *arg) {
    if (cur_thread) die("a kernel launch from inside a kernel");
    static std::once_flag report_once;
    std::call_once(report_once, [] {
        const char *r = getenv("DFLASH_EMU_LAUNCH_REPORT");
        if (r && strcmp(r, "1") == 0) atexit(emu_launch_report);
    });
    launches_kernel++;
    if (launch_error(grid, block, smem, emu_smem_limit(kernel))) {
        emu_set_last_error(cudaErrorInvalidConfiguration);
        return;
    }
    sched *s = sched_get();
    int n = (int)(block.x * block.y * block.z);
    std::vector<unsigned char> smem_buf(smem + 128);
    launch_ctx L;
    L.grid = grid;
    L.block = block;
    L.kernel = name;
    L.smem = (void *)(((uintptr_t)smem_buf.data() + 127) & ~(uintptr_t)127); // as a GPU's shared window
    for (int i = 0; i < n; i++) {
        thread_ctx &t = s->fibers[i].ctx;
        t.linear = i;
        t.tid = make_uint3((unsigned)i % block.x, (unsigned)i / block.x % block.y, (unsigned)i / (block.x * block.y));
        t.lane = i % 32;
        t.warp = i / 32;
    }
    s->body = body;
    s->arg = arg;
    cur_launch = &L;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                L.bid = make_uint3(x, y, z);
                // shared memory starts as garbage on a GPU: NaN-patterned here, so a kernel that
                // reads it before writing shows it
                if (smem) memset(L.smem, 0xFF, smem);
                run_block(n, (x + y + z) & 1);
            }
    cur_launch = nullptr;
}

} // namespace emu
