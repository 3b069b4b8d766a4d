// settings.c: the registry of the configuration's keys: every file that declares keys
// (config_key_set, common/core/config.h) is listed here, once. Adding a key: a field in config,
// a row in the set of the file that reads it, and docs/config.md (a test compares it with
// `dflash_rank --config-keys`). Adding a file's keys: its set, and a line here.
#include "common/core/config.h"

// Each set is defined in the file named beside it.
extern const config_key_set run_settings,   // common/core/run_dir.c: run.dir, seed, mode, log_level, resume, overwrite
    backend_settings,                      // common/backend/backend.c: run.device
    threads_settings,                      // common/backend/threads.c: run.threads
    watchdog_settings,                     // common/comm/watchdog.c: run.rank_timeout
    world_settings,                        // common/comm/world.c: world.*
    payload_settings,                      // common/comm/payload_link.c: transport.slots, payload, check_payloads
    grad_allreduce_settings,               // common/comm/nccl_reduce.c: transport.grad_allreduce
    transport_test_settings,               // common/comm/transport_test.c: transport.test_bytes
    data_settings,                         // common/data/dataset.c: data.*
    target_settings,                       // teacher/target_config.c: target.*
    teacher_settings,                      // teacher/teacher_plan.c: teacher.*
    teacher_test_settings,                 // teacher/teacher_loop.c: test.slow_teacher, test.slow_ms
    features_settings,                     // teacher/dump_features.c: features.*
    regen_prompts_settings,                // teacher/regen_prompts.c: regenerate.prompts, stop_ids
    regen_shards_settings,                 // teacher/regen_shards.c: regenerate.shard_prompts
    regen_output_settings,                 // teacher/regen_output.c: regenerate.out, heldout
    regen_sampling_settings,               // teacher/regen_identity.c: regenerate.temperature, top_p, top_k, seed
    regenerate_settings,                   // teacher/regenerate.c: regenerate.max_new_tokens, max_seqs, max_len
    drafter_settings,                      // student/model/drafter_config.c: drafter.*
    train_settings,                        // student/train/train.c: train.steps ... eval_batches, test.stop_at_step
    optim_settings,                        // student/train/optim.c: train.lr, schedule, optimizer, ema
    checkpoint_settings,                   // student/train/checkpoint.c: checkpoint.*
    eval_settings,                         // student/train/train_setup.c: eval.drafter
    loss_settings,                         // student/loss/loss_config.c: loss.*
    loss_selector_settings;                // student/loss/loss_selector.c: loss.selector_weight

// In this order an unknown key's leaf is matched ("seed" -> run.seed before regenerate.seed).
const config_key_set *const config_key_sets[] = {
    &run_settings,       &backend_settings,  &threads_settings,    &watchdog_settings,
    &world_settings,     &payload_settings,  &grad_allreduce_settings, &transport_test_settings, &data_settings,
    &target_settings,    &teacher_settings,  &teacher_test_settings, &features_settings,
    &regen_prompts_settings, &regen_shards_settings, &regen_output_settings, &regen_sampling_settings, &regenerate_settings,
    &drafter_settings,   &train_settings,    &optim_settings,      &checkpoint_settings,  &eval_settings,
    &loss_settings,      &loss_selector_settings,
};
const int config_n_key_sets = (int)(sizeof config_key_sets / sizeof config_key_sets[0]);
