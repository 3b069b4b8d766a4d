// dflash_rank: one binary for every rank of a DFlash drafter training job.
//
//   mpirun -np N dflash_rank --config run.json [--key=value ...]
//
// Each rank reads the same configuration, takes its role from its rank (teachers first, students
// last; SPEC §8), opens its backend (GPU = local rank modulo visible devices) and runs the mode.
// Modes so far:
//   check          every rank starts, takes its role and backend, opens the inputs it would use
//                  (teachers: the target directory; students: the training set); rank 0 prints
//                  one line per rank
//   dump-features  every rank is a teacher: the offline feature file of data.path, sharded over
//                  the ranks, into features.dir (resumable)
//   transport-test deterministic payloads teacher -> student, checked element by element
//   train          teachers serve batches, students train the drafter (with data.features set:
//                  every rank a student, reading the offline features)
//   eval           the same roles: eval.drafter evaluated on every sample of the data, forward only
//                  (run.dir/eval.json: tau_decode first)
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/backend/threads.h"
#include "common/comm/nccl_link.h"
#include "common/comm/nccl_reduce.h"
#include "common/comm/transport_test.h"
#include "common/comm/watchdog.h"
#include "common/comm/world.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/config.h"
#include "common/core/error.h"
#include "common/core/log.h"
#include "common/core/stop.h"
#include "common/core/version.h"
#include "common/data/dataset.h"
#include "common/data/safetensors.h"
#include "preflight.h"
#include "student/train/checkpoint.h"
#include "student/train/plan_world.h"
#include "student/train/train.h"
#include "student/train/train_setup.h"
#include "teacher/dump_features.h"
#include "teacher/regenerate.h"
#include "teacher/target.h"
#include "teacher/teacher_loop.h"

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
            "  --mode M             same as --run.mode=M (train | eval | check | dump-features | regenerate | transport-test)\n"
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
            "docs/config.md documents every key; README.md shows a first run.\n",
            DFLASH_VERSION);
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
            printf("dflash_rank %s\nbackends: %s\n", DFLASH_VERSION, DFLASH_BACKENDS);
            return 1;
        }
        if (strcmp(a, "--config-keys") == 0) {
            printf("| key | type | default | meaning |\n|---|---|---|---|\n");
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

// Who watches whom in a training job: a student every rank, a teacher the students and the other
// stages of its group.
static int run_teachers, run_group_size = 1;
static int train_watches(int watcher, int peer) {
    return watcher >= run_teachers || peer >= run_teachers || watcher / run_group_size == peer / run_group_size;
}

// For the watchdog's message when a peer dies or hangs: where the run can be resumed from.
static const config *run_cfg;
static void report_checkpoint(char *buf, size_t n) {
    if (strcmp(run_cfg->mode, "train") != 0) return; // no checkpoints to name
    int found = 0;
    int64_t step = checkpoint_latest(run_cfg->run_dir, &found);
    if (found)
        snprintf(buf, n, "last checkpoint: step %lld in %s/checkpoints (resume with the same command and --run.resume=true)",
                 (long long)step, run_cfg->run_dir);
    else if (run_cfg->ckpt_every > 0)
        snprintf(buf, n, "no checkpoint yet in %s/checkpoints", run_cfg->run_dir);
    else
        snprintf(buf, n, "no checkpoints (checkpoint.every = 0)");
}

// NCCL's asynchronous errors, polled by the watchdog thread: the payload links (NULL: none) and the
// students' gradient communicators (nccl_reduce.h keeps the open ones).
static int links_check(void *links, char *msg, size_t n) {
    return nccl_links_check((nccl_links *)links, msg, n) || nccl_reduce_check(NULL, msg, n);
}

// The payload path of a live training job (transport.payload auto or nccl): NCCL links when every
// rank has a GPU of its own, else MPI; rank 0 says which and why. -1 (rank 0 printed the error)
// when nccl was asked for and cannot be had. Collective.
static int train_payload_links(const world *w, const config *cfg, backend *be, nccl_links **links) {
    char why[256] = "";
    if (nccl_links_open(links, w, be->kind == BACKEND_CUDA ? be->device_id : -1, why, sizeof why))
        fatal("%s", error_msg());
    if (!*links && strcmp(cfg->payload, "nccl") == 0) {
        if (w->rank == 0) early_error("transport.payload = nccl, but NCCL cannot carry the payloads: %s", why);
        return -1;
    }
    if (w->rank == 0) {
        if (*links) log_info("payloads: features over NCCL, GPU to GPU; tokens, top-k and LSE over MPI");
        else log_info("payloads: over MPI from host memory (NCCL not used: %s)", why);
    }
    if (*links) watchdog_add_check(links_check, *links);
    return 0;
}

// The target's layers split into the groups' stages (target_stage_split checks the group size).
static int groups_check(const config *cfg, const world *w) {
    target_config tc;
    if (target_config_load(&tc, cfg->target_path)) return -1;
    int64_t *bounds = xmalloc(((size_t)w->group_size + 1) * sizeof(int64_t));
    int rc = target_stage_split(&tc, DT_BF16, w->group_size, bounds);
    free(bounds);
    return rc;
}

// check mode: what this rank would open, as one line for rank 0's table. Returns 0 or 1.
static int mode_check(const world *w, const config *cfg, backend *be, char *line, size_t n) {
    int used = snprintf(line, n, "rank %d  %-7s %d/%d  local %d  backend %s", w->rank, role_name(w->role),
                        w->role_index, w->role == ROLE_TEACHER ? w->teachers : w->students, w->local_rank,
                        be->name);
    if (w->role == ROLE_TEACHER && cfg->target_path[0]) {
        st_dir d;
        target_config tc; // its config.json, as the job reads it (bounds included), then the files
        if (target_config_load(&tc, cfg->target_path) || safetensors_dir_open(&d, cfg->target_path)) {
            snprintf(line + used, n - (size_t)used, "  target: %s", error_msg());
            return 1;
        }
        size_t bytes = 0;
        for (int i = 0; i < d.n; i++) bytes += d.entries[i]->nbytes;
        char b[32];
        snprintf(line + used, n - (size_t)used, "  target: %d tensors, %s in %d file(s)", d.n,
                 bytes_format(bytes, b, sizeof b), d.n_files);
        safetensors_dir_close(&d);
    }
    if (w->role == ROLE_STUDENT && config_data_count(cfg) != 0) { // each training set: its samples and tokens
        dataset ds;
        if (dataset_open(&ds, cfg, 2 * cfg->block_size)) {
            snprintf(line + used, n - (size_t)used, "  data: %s", error_msg());
            return 1;
        }
        for (int i = 0; i < ds.n_sets && (size_t)used < n; i++) {
            const trainset *ts = &ds.sets[i];
            char name[CONFIG_STR + 48] = "";
            if (ds.n_sets > 1) snprintf(name, sizeof name, " %s (weight %g)", ts->path, ds.weights[i]);
            used += snprintf(line + used, n - (size_t)used, "  data%s: %lld usable samples of %lld, %lld tokens, %lld loss tokens",
                             name, (long long)ts->n, (long long)ts->n_raw, (long long)ts->n_tokens, (long long)ts->loss_tokens);
        }
        dataset_close(&ds);
    }
    return 0;
}

// agreed_exit: end MPI and give this rank's exit status after a result every rank agreed on, whose
// error line (if any) the first rank printed: status on rank 0, 0 on the others. mpirun ends the
// job at the first non-zero exit; were it another rank's, rank 0 could be killed before its line
// was forwarded (seen: the error line lost). mpirun's own status stays non-zero from rank 0.
static int agreed_exit(const world *w, int status) {
    watchdog_finalize();
    return status && w->rank == 0 ? 1 : 0;
}

int main(int argc, char **argv) {
    threads_exec_passive(argv); // before any thread starts: how idle OpenMP threads wait (threads.h)
    config cfg;
    int a = args_parse(argc, argv, &cfg);
    if (a != 0) return a < 0 ? early_status(2) : 0;

    // What a training job cannot start without, said before any rank starts working.
    if (config_check(&cfg)) { // e.g. data.path and data.sets both set
        early_error("%s", error_msg());
        return early_status(2);
    }
    int job = strcmp(cfg.mode, "train") == 0 || strcmp(cfg.mode, "eval") == 0; // teachers feed students
    if (strcmp(cfg.mode, "eval") == 0 && eval_config_prepare(&cfg)) { // the drafter's shape, every sample held out
        early_error("%s", error_msg());
        return early_status(2);
    }
    // --plan: every role's plan from the configuration and the target's config.json, before MPI
    // starts and without a device (plan_world.h); under mpirun the first rank prints it.
    if (cfg.plan_only && !preflight_only) {
        if (plan_world(&cfg, launcher_size(), launcher_local_size(), launcher_rank() <= 0) == 0) return 0;
        early_error("%s", error_msg());
        return early_status(1);
    }
    if (!preflight_only && job && (!cfg.target_path[0] || (!config_data_count(&cfg) && !cfg.data_features[0]))) {
        early_error("%s needs target.path (the target model directory) and data.path (a training set), "
                    "data.sets (several) or data.features (an offline feature directory)", cfg.mode);
        return early_status(2);
    }
    // SIGTERM, SIGUSR1/2 and a first SIGINT: the modes that finish their unit and stop (stop.h),
    // noted from before MPI starts (a signal during start-up stops the job at its first unit).
    if (job || strcmp(cfg.mode, "dump-features") == 0 || strcmp(cfg.mode, "regenerate") == 0) stop_install();
    // The watchdog runs from before MPI starts to after it ends: a rank stopped at any moment ends
    // the job within run.rank_timeout (a job of several ranks; watchdog.h).
    if (launcher_size() > 1) watchdog_begin(cfg.rank_timeout);
    world w;
    world_init(&w, &argc, &argv);
    run_cfg = &cfg;
    watchdog_start(&w, report_checkpoint);
    log_setup(w.rank, w.size, (log_level)log_level_parse(cfg.log_level));
    // Ranks on one host share its cores unless the user says otherwise (threads.h).
    char threads_why[384];
    int threads = threads_setup((int)cfg.threads, w.local_size, threads_why, sizeof threads_why);
    if (w.rank == 0) log_info("threads: %d per rank (%s)", threads, threads_why);
    else log_debug("threads: %d (%s)", threads, threads_why);
    if (preflight_only) { // before the roles: a world that does not fit them is a row of its table
        int rc = preflight_run(&w, &cfg);
        watchdog_finalize();
        return rc;
    }
    int regen = strcmp(cfg.mode, "regenerate") == 0; // every rank a teacher answering prompts
    int dump = strcmp(cfg.mode, "dump-features") == 0 || regen; // every rank a teacher
    int offline = job && cfg.data_features[0]; // every rank a student
    long long want_t = dump ? w.size : offline ? 0 : cfg.teachers, want_s = dump ? 0 : offline ? w.size : cfg.students;
    if (world_roles(&w, w.rank, w.size, want_t, want_s) ||
        (!offline && strcmp(cfg.mode, "transport-test") != 0 && world_set_groups(&w, cfg.teacher_group_size))) {
        if (w.rank == 0) fprintf(stderr, "error: %s\n", error_msg());
        return agreed_exit(&w, 1);
    }
    watchdog_set_roles(&w);
    if (w.rank == 0) log_info("dflash_rank %s: %d rank(s): %d teacher(s), %d student(s); mode %s", DFLASH_VERSION, w.size, w.teachers, w.students, cfg.mode);
    if (w.group_size > 1) { // every group on one host, unless asked otherwise
        watchdog_wait_begin(0, w.size - 1, 5, "the other ranks' host names");
        int cross = world_check_group_hosts(&w, cfg.teacher_group_cross_node);
        watchdog_wait_end();
        if (cross) {
            if (w.rank == 0) fprintf(stderr, "error: %s\n", error_msg());
            return agreed_exit(&w, 1);
        }
        if (w.rank == 0)
            log_info("teachers: %d group(s) of %d rank(s) (world.teacher_group_size), each a pipeline over the target's layers",
                     w.groups, w.group_size);
    }

    backend be;
    int status = 0;
    if (backend_open(&be, cfg.device, w.local_rank)) {
        log_error("%s", error_msg());
        status = 1;
    }
    // The training sets exist: checked on rank 0 only, so a missing file is one error line, not one per rank.
    if (status == 0 && w.rank == 0 && ((dump && !regen) || (job && !offline)) && dataset_preflight(&cfg)) {
        log_error("%s", error_msg());
        status = 1;
    }
    // A training job's inputs, once on rank 0: one error line for what every rank would find.
    if (status == 0 && w.rank == 0 && job && train_check_inputs(&w, &cfg)) {
        log_error("%s", error_msg());
        status = 1;
    }
    // Teacher groups: as many stages as the target has layers at most (once, on rank 0).
    if (status == 0 && w.rank == 0 && w.group_size > 1 && (job || dump) && !offline && groups_check(&cfg, &w)) {
        log_error("%s", error_msg());
        status = 1;
    }
    if (watchdog_agree(status, "the other ranks to open their inputs")) return agreed_exit(&w, 1);

    if (strcmp(cfg.mode, "transport-test") == 0) {
        if (w.teachers < 1 || w.students < 1) fatal("transport-test needs at least one teacher and one student rank");
        long long wrong = transport_test_run(&w, &be, 5, 64ll << 20);
        if (wrong < 0) fatal("%s", error_msg());
        backend_close(&be);
        watchdog_finalize();
        return wrong ? 1 : 0;
    }
    if (job) {
        if (w.size > 1) {
            run_teachers = w.teachers, run_group_size = w.group_size;
            watchdog_set_watchers(train_watches);
            watchdog_add_check(links_check, NULL); // the students' gradient communicators (links: below)
        }
        nccl_links *links = NULL;
        if (!offline && strcmp(cfg.payload, "mpi") != 0 && train_payload_links(&w, &cfg, &be, &links)) {
            watchdog_finalize();
            return 1;
        }
        MPI_Comm role_comm; // the students' all-reduce runs among students only
        watchdog_wait_begin(0, w.size - 1, 5, "the other ranks to split the roles");
        mpi_check(MPI_Comm_split(MPI_COMM_WORLD, w.role, w.rank, &role_comm));
        watchdog_wait_end();
        int rc = w.role == ROLE_TEACHER ? teacher_serve(&w, &cfg, &be, links) : student_train(&w, &cfg, &be, role_comm, links);
        if (rc == WORLD_REPORTED_ELSEWHERE) { // another rank of the role prints the reason and ends the job
            for (int i = 0; i < 600; i++) {
                struct timespec pause = {0, 100 * 1000 * 1000};
                nanosleep(&pause, NULL);
            }
            fatal("the rank that stopped the job did not end it within 60 s");
        }
        if (rc) fatal("%s", error_msg()); // one line naming the rank; MPI_Abort so no peer waits forever
        for (int r = 0; r < w.size; r++) watchdog_watch(r, 0); // the peers finish now: their exit is no news
        watchdog_add_check(NULL, NULL);                        // before the links it polls are closed
        nccl_links_close(links);
        mpi_check(MPI_Comm_free(&role_comm));
        backend_close(&be);
        watchdog_finalize();
        return 0;
    }
    if (dump) {
        for (int r = 0; r < w.size; r++) watchdog_watch(r, 1); // a dead peer on this host is noticed at once
        nccl_links *links = NULL; // a teacher group's stages: activations GPU to GPU when they can
        if (w.group_size > 1 && strcmp(cfg.payload, "mpi") != 0 && train_payload_links(&w, &cfg, &be, &links)) {
            watchdog_finalize();
            return 1;
        }
        status = (regen ? teacher_regenerate(&w, &cfg, &be, links) : teacher_dump_features(&w, &cfg, &be, links)) ? 1 : 0;
        if (links) watchdog_add_check(NULL, NULL); // the watchdog stops polling the links before they close
        nccl_links_close(links);
        backend_close(&be);
        watchdog_finalize();
        return status;
    }

    // mode "check": every rank reports one line to rank 0, which prints them in rank order.
    char line[1024] = {0};
    status = mode_check(&w, &cfg, &be, line, sizeof line);
    char *all = w.rank == 0 ? xmalloc(sizeof line * (size_t)w.size) : NULL;
    MPI_Request gather;
    mpi_check(MPI_Igather(line, sizeof line, MPI_CHAR, all, sizeof line, MPI_CHAR, 0, MPI_COMM_WORLD, &gather));
    watchdog_mpi_wait(&gather, NULL, 0, w.size - 1, 5, "the other ranks' check lines");
    status = watchdog_agree(status, "the other ranks' check lines");
    if (w.rank == 0) {
        for (int r = 0; r < w.size; r++) printf("%s\n", all + (size_t)r * sizeof line);
        printf(status ? "check: FAILED (see the lines above)\n" : "check: every rank is ready\n");
        fflush(stdout);
        free(all);
    }
    backend_close(&be);
    return agreed_exit(&w, status);
}
