// dflash_tool: helper programs around the trainer, as subcommands.
//
//   dflash_tool inspect FILE                    safetensors or HDF5: names, shapes, dtypes, samples
//   dflash_tool convert-jsonl IN.jsonl OUT.h5   {"input_ids": [...], "loss_mask": [...]} lines -> training set
//   dflash_tool teacher-dump MODEL TOKENS OUT   the target's features, top-k and LSE for given sequences
//   dflash_tool compare REF OUT                 tensor-by-tensor comparison with a stated tolerance
#include <stdio.h>
#include <string.h>

#include "common/core/version.h"
#include "tools/tools.h"

typedef struct {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *usage;
} tool_command;

static const tool_command tool_commands[] = {
    {"inspect", tool_inspect_main, "inspect FILE                  list tensors (safetensors) or datasets and samples (HDF5)"},
    {"convert-jsonl", tool_convert_jsonl_main, "convert-jsonl IN.jsonl OUT.h5  JSON lines with input_ids/loss_mask -> HDF5 training set"},
    {"teacher-dump", tool_teacher_dump_main, "teacher-dump MODEL_DIR TOKENS.json OUT.safetensors  run the target on sequences, write features/top-k/LSE"},
    {"step-dump", tool_step_dump_main, "step-dump IN.safetensors CONFIG.json OUT.safetensors  one student step: loss and gradients"},
    {"compare", tool_compare_main, "compare REF.safetensors OUT.safetensors  tensor-by-tensor errors against a reference"},
    {"make-target", tool_make_target_main, "make-target OUT_DIR --arch qwen3|llama ...  random-weight Hugging Face target model directory"},
    {"mem-check", tool_mem_check_main, "mem-check [--device cuda] [--preset 8b] ...  the student's memory plan vs its measured use as anchors grow; step time"},
    {"make-data", tool_make_data_main, "make-data OUT.h5 --target MODEL_DIR ...  self-distilled toy data: random prompts continued greedily by the target"},
};
#define TOOL_NCOMMANDS (sizeof tool_commands / sizeof tool_commands[0])

static void tool_usage(FILE *f) {
    fprintf(f, "dflash_tool %s: helpers for dflash_rank\n\nusage: dflash_tool COMMAND [ARGS]\n\ncommands:\n",
            DFLASH_VERSION);
    for (size_t i = 0; i < TOOL_NCOMMANDS; i++) fprintf(f, "  %s\n", tool_commands[i].usage);
    fprintf(f, "\n'dflash_tool COMMAND --help' shows the options of one command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        tool_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("dflash_tool %s (backends: %s)\n", DFLASH_VERSION, DFLASH_BACKENDS);
        return 0;
    }
    for (size_t i = 0; i < TOOL_NCOMMANDS; i++)
        if (strcmp(argv[1], tool_commands[i].name) == 0) return tool_commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command '%s' (dflash_tool --help lists them)\n", argv[1]);
    return 2;
}
