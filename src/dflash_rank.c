// dflash_rank: one binary for every rank of a DFlash drafter training job.
//
//   mpirun -np N dflash_rank --config run.json [--key=value ...]
//
// Each rank reads the same configuration, takes its role from its rank (teachers first, students
// last; SPEC §8), opens its backend (GPU = local rank modulo visible devices) and runs the mode.
// The modes are one table (src/modes/mode.h: one file each): this frame reads a mode's roles,
// inputs, outputs, claim, plan and run from it and applies the same lifecycle to every mode
// (configuration checked before MPI starts, roles assigned, outputs claimed and inputs opened on
// rank 0, every rank agreeing, then the run). `dflash_rank --help` lists the modes.
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/backend.h"
#include "common/backend/blas_kernel.h"
#include "common/backend/threads.h"
#include "common/comm/stop_relay.h"
#include "common/comm/watchdog.h"
#include "common/comm/world.h"
#include "common/core/check.h"
#include "common/core/config.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "common/core/stop.h"
#include "common/core/version.h"
#include "modes/mode.h"
#include "teacher/target_quant.h"
#include "modes/mode_claim.h"
#include "modes/mode_shared_fs.h"
#include "preflight.h"

static void usage(FILE *f) {
    fprintf(f,
            "dflash_rank %s: trains a DFlash speculative-decoding drafter from a frozen target LLM\n"
            "\n"
            "usage: mpirun -np N dflash_rank [--config FILE] [--KEY=VALUE ...] [options]\n"
            "\n"
            "options:\n"
            "  --config FILE        JSON configuration (sections run, world, target, drafter, data)\n"
            "  --KEY=VALUE          override one key, e.g. --run.device=cpu --world.students=1\n"
            "  --device D           same as --run.device=D (auto | cpu | cuda)\n"
            "  --mode M             same as --run.mode=M (the modes below)\n"
            "  --rank-timeout S     same as --run.rank_timeout=S: seconds a rank waits on a peer before ending the job\n"
            "  --threads N          same as --run.threads=N: CPU threads per rank (0 = the rank's share of its cores)\n"
            "  --print-config       print the effective configuration as JSON and exit\n"
            "  --plan               print every role's memory plan (teachers, students) and exit: one process, from\n"
            "                       the configuration and the target's config.json (no weights, data or GPU needed)\n"
            "  --preflight          check roles, GPUs, memory plans, peer access, /dev/shm, NCCL, target, data and\n"
            "                       run.dir on every rank; print one table and exit (non-zero if a run would fail)\n"
            "  --config-keys        print every configuration key (markdown table) and exit\n"
            "  --version            print the version and the compiled backends\n"
            "  --help               this text\n"
            "\n"
            "modes:\n",
            DFLASH_VERSION);
    for (int i = 0; i < mode_count(); i++) fprintf(f, "  %-19s  %s\n", mode_at(i)->name, mode_at(i)->what);
    fprintf(f, "\ndocs/config.md documents every key; README.md shows a first run.\n");
}

// The rank the launcher gave this process (mpirun, srun, PMIx), read before MPI starts: -1 when
// there is no launcher.
static int launcher_rank(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

// The launcher's world size and ranks on this host, read before MPI starts (--plan runs without
// MPI): -1 when there is no launcher.
static int launcher_count(const char *const *vars, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v && atoi(v) > 0) return atoi(v);
    }
    return -1;
}
static int launcher_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
    return launcher_rank() < 0 ? -1 : launcher_count(vars, sizeof vars / sizeof vars[0]);
}
static int launcher_local_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    return launcher_rank() < 0 ? -1 : launcher_count(vars, sizeof vars / sizeof vars[0]);
}

// An error found before MPI starts (a bad argument or config): every rank finds it and exits, and
// the first prints it, so mpirun -np N shows one line, not N.
static void __attribute__((format(printf, 1, 2))) early_error(const char *fmt, ...) {
    if (launcher_rank() > 0) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "error: %s\n", msg);
}
// early_status: the exit status after an early error, returned at once on the first rank (the one
// that printed it) and after a pause of 3 s on the others. Every rank finds the same error; were
// another rank's non-zero exit first, mpirun would end the job and could kill the first rank
// before its line was forwarded (seen: the error line lost). A rank that alone finds an error (a
// file missing on its node) still exits non-zero, only later.
static int early_status(int status) {
    if (launcher_rank() > 0) {
        struct timespec pause = {3, 0};
        while (nanosleep(&pause, &pause) != 0) {}
    }
    return status;
}

static int preflight_only; // --preflight (preflight.h)

// Arguments are read before MPI starts so --help and --version work without mpirun.
// Returns -1 (message printed) on a bad argument, 1 when the program should exit 0 now.
static int args_parse(int argc, char **argv, config *cfg) {
    const char *config_path = NULL;
    int print_config = 0;
    // The config file first, so overrides apply on top of it whatever their order.
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) { early_error("--config needs a file"); return -1; }
            config_path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            config_path = argv[i] + 9;
        }
    }
    config_defaults(cfg);
    if (config_path && config_load_file(cfg, config_path)) {
        early_error("%s", error_msg());
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char buf[CONFIG_STR + 32];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); return 1; }
        if (strcmp(a, "--version") == 0) {
            char blas[640];
            blas_kernel_describe(blas, sizeof blas);
            printf("dflash_rank %s\nbackends: %s\nblas: %s\n", DFLASH_VERSION, DFLASH_BACKENDS, blas);
            return 1;
        }
        if (strcmp(a, "--config-keys") == 0) {
            printf("| key | type | default | meaning | declared in |\n|---|---|---|---|---|\n");
            config_print_keys(stdout);
            return 1;
        }
        if (strcmp(a, "--print-config") == 0) { print_config = 1; continue; }
        if (strcmp(a, "--plan") == 0) { cfg->plan_only = 1; continue; }
        if (strcmp(a, "--preflight") == 0) { preflight_only = 1; continue; }
        if (strcmp(a, "--config") == 0) { i++; continue; }
        if (strncmp(a, "--config=", 9) == 0) continue;
        if ((strcmp(a, "--device") == 0 || strcmp(a, "--mode") == 0) && i + 1 < argc) {
            snprintf(buf, sizeof buf, "run.%s=%s", a + 2, argv[++i]);
            a = buf;
        } else if (strcmp(a, "--rank-timeout") == 0 && i + 1 < argc) {
            snprintf(buf, sizeof buf, "run.rank_timeout=%s", argv[++i]);
            a = buf;
        } else if (strcmp(a, "--threads") == 0 && i + 1 < argc) {
            snprintf(buf, sizeof buf, "run.threads=%s", argv[++i]);
            a = buf;
        } else if (strncmp(a, "--", 2) == 0 && strchr(a, '=')) {
            a += 2;
        } else {
            early_error("unknown argument '%s' (dflash_rank --help lists the options)", a);
            return -1;
        }
        if (config_set(cfg, a)) {
            early_error("%s", error_msg());
            return -1;
        }
    }
    if (print_config) {
        char *s = config_to_json(cfg);
        printf("%s\n", s);
        free(s);
        return 1;
    }
    return 0;
}

// For the watchdog's message when a peer dies or hangs: what the mode says about resuming.
static const config *run_cfg;
static const mode_def *run_mode;
static void report_resume(char *buf, size_t n) {
    if (run_mode && run_mode->report) run_mode->report(run_cfg, buf, n);
}

int main(int argc, char **argv) {
    threads_exec_policy(argv); // before any thread starts: the OpenMP wait policy and the BLAS kernel (threads.h)
    config cfg;
    int a = args_parse(argc, argv, &cfg);
    if (a != 0) return a < 0 ? early_status(2) : 0;

    // a quantised target's weights on the device: one setting for every plan, split and load of this process
    if (target_quant_weights_set(cfg.teacher_quant_weights, "teacher.quant_weights")) {
        early_error("%s", error_msg());
        return early_status(2);
    }
    // What a job cannot start without, said before any rank starts working.
    const mode_def *mode = mode_find(cfg.mode);
    if (!mode || config_check(&cfg) || (mode->prepare && mode->prepare(&cfg))) { // e.g. data.path and data.sets both set
        early_error("%s", error_msg());
        return early_status(2);
    }
    world_want want;
    world_want_make(mode->roles, &cfg, &want);
    // --plan: every role's plan from the configuration and the target's config.json, before MPI
    // starts and without a device (the mode's plan); under mpirun the first rank prints it.
    if (cfg.plan_only && !preflight_only) {
        if (mode->plan(&cfg, &want, launcher_size(), launcher_local_size(), launcher_rank() <= 0) == 0) return 0;
        early_error("%s", error_msg());
        return early_status(1);
    }
    if (!preflight_only && mode->needs && mode->needs(&cfg)) {
        early_error("%s", error_msg());
        return early_status(2);
    }
    // SIGTERM, SIGUSR1/2 and a first SIGINT: the modes that finish their unit and stop (mode.h
    // stops, stop.h), noted from before MPI starts (a signal during start-up stops the job at its
    // first unit).
    if (mode->stops && !preflight_only) stop_install();
    // The watchdog runs from before MPI starts to after it ends: a rank stopped at any moment ends
    // the job within run.rank_timeout (a job of several ranks; watchdog.h).
    if (launcher_size() > 1) watchdog_begin(cfg.rank_timeout);
    world w;
    world_init(&w, &argc, &argv);
    run_cfg = &cfg, run_mode = mode;
    watchdog_start(&w, report_resume);
    if (mode->stops && !preflight_only) stop_relay_open(); // a stop heard by any rank reaches every rank (stop_relay.h)
    log_setup(w.rank, w.size, (log_level)log_level_parse(cfg.log_level));
    // Ranks on one host share its cores unless the user says otherwise (threads.h).
    char threads_why[384];
    int threads = threads_setup((int)cfg.threads, w.local_size, threads_why, sizeof threads_why);
    if (w.rank == 0) log_info("threads: %d per rank (%s)", threads, threads_why);
    else log_debug("threads: %d (%s)", threads, threads_why);
    char bound[512]; // a launcher's binding that leaves cores idle (threads.h), said once
    if (w.rank == 0 && threads_bound_warning(w.local_size, bound, sizeof bound)) log_warn("%s", bound);
    char blas[640];
    blas_kernel_describe(blas, sizeof blas); // the product library and the kernel it runs (blas_kernel.h)
    if (w.rank == 0) log_info("blas: %s", blas);
    if (preflight_only) { // before the roles: a world that does not fit them is a row of its table
        int rc = preflight_run(&w, &cfg, mode);
        watchdog_finalize();
        return rc;
    }
    if (world_assign(&w, w.rank, w.size, &want)) {
        if (w.rank == 0) fprintf(stderr, "error: %s\n", error_msg());
        return mode_exit(&w, 1);
    }
    watchdog_set_roles(&w);
    if (w.rank == 0) log_info("dflash_rank %s: %d rank(s): %d teacher(s), %d student(s); mode %s", DFLASH_VERSION, w.size, w.teachers, w.students, cfg.mode);
    if (w.group_size > 1) { // every group on one host, unless asked otherwise
        watchdog_wait_begin(0, w.size - 1, 5, "the other ranks' host names");
        int cross = world_check_group_hosts(&w, cfg.teacher_group_cross_node);
        watchdog_wait_end();
        if (cross) {
            if (w.rank == 0) fprintf(stderr, "error: %s\n", error_msg());
            return mode_exit(&w, 1);
        }
        if (w.rank == 0)
            log_info("teachers: %d group(s) of %d rank(s) (world.teacher_group_size), each a pipeline over the target's layers",
                     w.groups, w.group_size);
    }
    // Several hosts: every rank sees the outputs' directories as rank 0 does (a shared file system)
    if (mode_shared_fs_check(&w, mode, &cfg)) return mode_exit(&w, 1);

    backend be;
    int status = 0;
    if (backend_open(&be, cfg.device, w.local_rank)) {
        log_error("%s", error_msg());
        status = 1;
    }
    // Rank 0, once for the job (one error line for what every rank would find), before the mode
    // writes anything: no output is an input; the inputs open; the outputs are claimed (locked,
    // and what the mode did not write refused: mode_claim.h).
    if (status == 0 && w.rank == 0 &&
        (mode_claim_distinct(mode, &cfg) || (mode->check_inputs && mode->check_inputs(&w, &cfg)) ||
         (mode->claim && mode->claim(&cfg, 0)))) {
        log_error("%s", error_msg());
        status = 1;
    }
    if (watchdog_agree(status, "the other ranks to open their inputs")) {
        mode_claim_release();
        return mode_exit(&w, 1);
    }
    mode_job job = {.w = &w, .cfg = &cfg, .be = &be};
    status = mode->run(&job);
    mode_claim_release();
    return status;
}
