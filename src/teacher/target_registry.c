// target_registry.c: the list of architecture tables (see target_registry.h). Adding an
// architecture is one line here (docs/teacher.md, "Adding an architecture").
#include "teacher/target_registry.h"

// X(name): the table target_arch_<name>, defined in the file named beside it.
#define TARGET_ARCH_LIST(X)                                                                                  \
    X(qwen3)       /* target_dense.c */                                                                      \
    X(llama)       /* target_dense.c */                                                                      \
    X(qwen3_5)     /* target_qwen3_5.c */                                                                    \
    X(qwen3_moe)   /* target_moe.c */                                                                        \
    X(qwen3_5_moe) /* target_moe.c */                                                                        \
    X(qwen2)       /* target_dense.c */                                                                      \
    X(mistral)     /* target_dense.c */                                                                      \
    X(gemma3)      /* target_gemma.c */                                                                      \
    X(gemma4)      /* target_gemma.c */                                                                      \
    X(glm4_moe)    /* target_glm4_moe.c */                                                                   \
    X(deepseek_v3) /* target_deepseek_v3.c */                                                                \
    X(gpt_oss)     /* target_gpt_oss.c */

#define TARGET_ARCH_DECLARE(name) extern const target_arch target_arch_##name;
TARGET_ARCH_LIST(TARGET_ARCH_DECLARE)
#define TARGET_ARCH_ENTRY(name) &target_arch_##name,
const target_arch *const target_archs[] = {TARGET_ARCH_LIST(TARGET_ARCH_ENTRY)};
const int target_n_archs = (int)(sizeof target_archs / sizeof target_archs[0]);
