// dflash_tool: helper programs around the trainer, as subcommands.
//
//   dflash_tool inspect FILE                    safetensors or HDF5: names, shapes, dtypes, samples
//   dflash_tool convert-jsonl IN.jsonl OUT.h5   {"input_ids": [...], "loss_mask": [...]} lines -> training set
//   dflash_tool teacher-dump MODEL TOKENS OUT   the target's features, top-k and LSE for given sequences
//   dflash_tool compare REF OUT                 tensor-by-tensor comparison with a stated tolerance
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/threads.h"
#include "common/core/log.h"
#include "common/core/version.h"
#include "tools/tools.h"

typedef struct {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *usage;
    int computes; // runs models on the CPU: says its thread count when it starts
} tool_command;

static const tool_command tool_commands[] = {
    {"inspect", tool_inspect_main, "inspect FILE                  list tensors (safetensors) or datasets and samples (HDF5)", 0},
    {"convert-jsonl", tool_convert_jsonl_main, "convert-jsonl IN.jsonl OUT.h5  JSON lines with input_ids/loss_mask -> HDF5 training set", 0},
    {"teacher-dump", tool_teacher_dump_main, "teacher-dump MODEL_DIR TOKENS.json OUT.safetensors  run the target on sequences, write features/top-k/LSE", 1},
    {"step-dump", tool_step_dump_main, "step-dump IN.safetensors CONFIG.json OUT.safetensors  one student step: loss and gradients", 1},
    {"compare", tool_compare_main, "compare REF.safetensors OUT.safetensors  tensor-by-tensor errors against a reference", 0},
    {"make-target", tool_make_target_main, "make-target OUT_DIR --arch qwen3|llama ...  random-weight Hugging Face target model directory", 0},
    {"mem-check", tool_mem_check_main, "mem-check [--device cuda] [--preset 8b] ...  the student's memory plan vs its measured use as anchors grow; step time", 1},
    {"make-data", tool_make_data_main, "make-data OUT.h5 --target MODEL_DIR ...  self-distilled toy data: random prompts continued greedily by the target", 1},
};
#define TOOL_NCOMMANDS (sizeof tool_commands / sizeof tool_commands[0])

static void tool_usage(FILE *f) {
    fprintf(f, "dflash_tool %s: helpers for dflash_rank\n\nusage: dflash_tool COMMAND [ARGS]\n\ncommands:\n",
            DFLASH_VERSION);
    for (size_t i = 0; i < TOOL_NCOMMANDS; i++) fprintf(f, "  %s\n", tool_commands[i].usage);
    fprintf(f, "\n'dflash_tool [--threads N] COMMAND ...': N CPU threads (OpenMP and OpenBLAS; default: the cores of\n"
               "this process's affinity mask, never more; docs/config.md, Threads).\n"
               "'dflash_tool COMMAND --help' shows the options of one command.\n");
}

int main(int argc, char **argv) {
    threads_exec_policy(argv); // before any thread starts: the OpenMP wait policy and the BLAS kernel (threads.h)
    // --threads N (before the command, or anywhere after it): taken out before the command reads its arguments
    int threads = 0, m = 1;
    for (int i = 1; i < argc; i++) {
        const char *v = strncmp(argv[i], "--threads=", 10) == 0 ? argv[i] + 10 : NULL;
        if (!v && strcmp(argv[i], "--threads") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "error: --threads needs a count\n");
                return 2;
            }
            v = argv[++i];
        }
        if (!v) {
            argv[m++] = argv[i];
            continue;
        }
        char *end;
        long n = strtol(v, &end, 10);
        if (!*v || *end || n < 0 || n > 4096) {
            fprintf(stderr, "error: --threads '%s' is not a count from 0 to 4096\n", v);
            return 2;
        }
        threads = (int)n;
    }
    argc = m;
    argv[argc] = NULL;
    char why[384];
    int nt = threads_setup(threads, 1, why, sizeof why);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        tool_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("dflash_tool %s (backends: %s)\n", DFLASH_VERSION, DFLASH_BACKENDS);
        return 0;
    }
    for (size_t i = 0; i < TOOL_NCOMMANDS; i++)
        if (strcmp(argv[1], tool_commands[i].name) == 0) {
            if (tool_commands[i].computes) log_info("threads: %d (%s)", nt, why);
            return tool_commands[i].main(argc - 1, argv + 1);
        }
    fprintf(stderr, "error: unknown command '%s' (dflash_tool --help lists them)\n", argv[1]);
    return 2;
}
