// regenerate.h: `dflash_rank --mode regenerate`: every rank is a teacher; the target answers the
// prompts of regenerate.prompts and the answers are written as a training set (SPEC §7,
// "Regenerated training set"), token ids end to end (nothing is detokenised or re-tokenised).
//
//   input   JSONL, one prompt per line: {"input_ids": [ids...]} (already templated; other keys
//           ignored, blank lines skipped). Prompt i is the i-th non-blank line.
//   decode  the KV-cached decode of target_decode.h with continuous batching: regenerate.max_seqs
//           slots; a slot whose reply ended takes the next waiting prompt while the others keep
//           decoding. Greedy by default, sampled with regenerate.temperature / top_p / top_k
//           (decode_sample.h), prompt i drawing from the Philox stream (regenerate.seed, i).
//           A reply ends at a stop id (eos_token_id of the target's generation_config.json, an id
//           or a list, plus regenerate.stop_ids; the stop token is the reply's last token,
//           finish_reason 0) or after regenerate.max_new_tokens tokens or when the sequence fills
//           its cache of regenerate.max_len positions (finish_reason 1, no end token).
//   shards  prompts are cut into shards of regenerate.shard_prompts consecutive prompts, claimed
//           by the teachers (a rank, or a group of ranks) as they become free: a claim file per
//           shard made with O_EXCL in OUT.parts/claims-JOB/ (rank 0 makes that directory per job
//           and removes earlier jobs' claims), so a teacher that finishes early takes more shards.
//           Each shard is decoded on its own (its slots start
//           empty and drain at its end), so a shard's replies depend only on its prompts and the
//           settings, not on the rank, the number of ranks or an earlier interruption. A finished
//           shard is a training-set file OUT.parts/part-SSSSS-of-NNNNN.h5 (written under a temporary
//           name, renamed when complete; its "settings" attribute records what made it). A rerun
//           skips the shards already there (and refuses ones made with other settings, naming each
//           field that differs), so a killed regeneration resumes where it stopped.
//   identity the settings name the inputs by content: the prompts file's size and CRC32C, the
//           target's weights (CRC32C of each safetensors file's name, size, header and 16 sampled
//           blocks of data), its config.json's CRC32C, the vocabulary, the generation settings and
//           the stop ids. An existing regenerate.out made with the same settings is nothing to do;
//           one made with other settings, a file regenerate did not make (without run.overwrite),
//           the prompts file or a directory is refused at the start.
//   checks  refused at the start, naming the key: regenerate.max_len past max_position_embeddings,
//           a held-out rule that takes every prompt, a shard's reply buffer (sized by what its
//           prompts can need, the sums and products checked) past half of the machine's memory,
//           an eos_token_id in generation_config.json that is not an integer in the vocabulary
//           (a key given twice counts with its last value, as in transformers).
//   output  rank 0, once every shard is done, merges the parts in prompt order into
//           regenerate.out (the trainset writer: a temporary name renamed at the end) and removes
//           OUT.parts: sample i = prompt i (loss_mask 0) + its reply (loss_mask 1); /finish_reason
//           uint8 [n]; /heldout int64 (regenerate.heldout samples drawn with the seed, rule in the
//           heldout_rule attribute; trainset_heldout_draw); attributes target, prompts,
//           target_weights_crc32c, target_config_crc32c, prompts_crc32c, prompts_bytes, stop_ids,
//           max_new_tokens, max_len, temperature, top_p, top_k, seed, settings; tokenizer: the
//           CRC32C of the target's tokenizer.json, else its real path. The same settings give a
//           byte-identical file, interrupted or not, on any number of ranks.
//   progress each rank prints the prompts and shards it decoded and generated tokens/s (every
//           10 s and at the end).
//
// Backends: CPU or CUDA (the whole decode on the device, target_decode.h). Teacher groups
// (world.teacher_group_size = G > 1): G consecutive ranks are one teacher, each stage holding its
// layers of the target and their caches; shards go to group s mod groups, the group's first stage
// reads the prompts, drives the decode along the stages (regen_link.h: the rows over NCCL when
// the payload link carries device blocks) and writes the parts. The file is the same as one rank's.
//
// The code by concern: regenerate.c (the set-up in order, the decode loop, this teacher's shards,
// the end), regen_prompts.h (the prompts index and the stop ids), regen_identity.h (the settings
// record and its comparison), regen_shards.h (the shards' size and claims), regen_output.h (the
// parts, the merge, the output's claim and tidy-up), regen_job.h (the job's state they share).
#pragma once

#include "common/backend/backend.h"
#include "common/comm/payload_link.h"
#include "common/comm/world.h"
#include "common/core/config.h"

// teacher_regenerate: a collective call (every rank); 0 on success, -1 when any rank failed (the
// first failing rank logs its own error, the others one line naming it).
// links: the job's payload link (a teacher group's stages pass their rows over it).
int teacher_regenerate(const world *w, const config *cfg, backend *be, payload_link *links);
