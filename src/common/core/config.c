// config.c: the key table, JSON loading, command-line overrides (see config.h).
#include "common/core/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"

#define F(field) offsetof(config, field), sizeof(((config *)0)->field)
#define NOLIM -1e18, 1e18
#define SIZES 0, 1e18                  // sizes in bytes: at most 1 EB
#define STEPS_MAX 1e9                  // train.steps and the keys counted in steps

// The table. Adding a key: a field in config.h, a row here, a row in docs/config.md.
const config_key config_keys[] = {
    {"eval.drafter", CFG_STRING, F(eval_drafter), "", "--mode eval: the drafter to evaluate: an exported drafter directory (config.json + model.safetensors, the dflash package's format, e.g. run.dir/drafter or a published one) or a checkpoint directory (run.dir/checkpoints/step-N)", NULL, NOLIM},
    {"run.dir", CFG_STRING, F(run_dir), "runs/dflash", "run directory: metrics.jsonl, checkpoints, the effective config", NULL, NOLIM},
    {"run.seed", CFG_INT, F(seed), "1234", "seed of every random stream (data order, anchors, init)", NULL, 0, 9.2e18},
    {"run.device", CFG_STRING, F(device), "auto", "backend: auto (CUDA when a GPU is visible, else CPU), cpu or cuda", "auto|cpu|cuda", NOLIM},
    {"run.threads", CFG_INT, F(threads), "0", "CPU threads of each rank, for OpenMP and OpenBLAS alike; 0 = OMP_NUM_THREADS when set, else the cores of the rank's affinity mask shared among the ranks of its host. Never more than those cores. Also --threads N (docs/config.md, Threads)", NULL, 0, 4096},
    {"run.log_level", CFG_STRING, F(log_level), "info", "lowest level of log lines printed", "debug|info|warn|error", NOLIM},
    {"run.mode", CFG_STRING, F(mode), "train", "what the job does: train (teachers feed students, the drafter is trained), check (every rank takes its role and backend, opens its inputs, reports, exits) dump-features (every rank is a teacher and writes the offline feature file of data.path into features.dir), regenerate (every rank is a teacher; the target answers regenerate.prompts, written as the training set regenerate.out), eval (a drafter, eval.drafter, evaluated on every sample of the data: run.dir/eval.json) or transport-test (payloads teacher -> student checked element by element, bandwidth printed)", "check|dump-features|eval|regenerate|train|transport-test", NOLIM},
    {"world.teachers", CFG_INT, F(teachers), "-1", "teacher ranks; -1 = world size - students", NULL, -1, 1e6},
    {"world.students", CFG_INT, F(students), "1", "student ranks (the last ranks of the world)", NULL, 1, 1e6},
    {"world.teacher_group_size", CFG_INT, F(teacher_group_size), "1", "G: teacher ranks per teacher; each teacher is G consecutive ranks holding consecutive layer ranges of the target (pipeline stages, balanced by weight bytes), for a target that does not fit one device; the teacher ranks must be a multiple of G (docs/distributed.md)", NULL, 1, 1024},
    {"world.teacher_group_cross_node", CFG_BOOL, F(teacher_group_cross_node), "false", "allow a teacher group to span hosts (by default a group whose ranks are not all on one host is an error: its activations would cross the network at every stage)", NULL, NOLIM},
    {"target.path", CFG_STRING, F(target_path), "", "Hugging Face model directory of the target (config.json + safetensors)", NULL, NOLIM},
    {"target.layer_ids", CFG_INT_LIST, F(target_layer_ids), "", "target layers whose hidden states feed the drafter; empty = SPEC §2 default", NULL, 0, 1e6},
    {"target.n_features", CFG_INT, F(n_features), "5", "number of target layers feeding the drafter when target.layer_ids is empty", NULL, 1, 64},
    {"teacher.topk", CFG_INT, F(teacher_topk), "32", "k of the top-k target logits each teacher sends per token", NULL, 1, 256},
    {"teacher.max_tokens", CFG_INT, F(teacher_max_tokens), "8192", "tokens per packed teacher batch (a longer sample is an error); in train mode the teachers run the students' batches whole, so data.max_tokens_per_batch must not exceed it", NULL, 1, 1073741824},
    {"teacher.mem_budget", CFG_BYTES, F(teacher_mem_budget), "0", "teacher memory budget (weights + work); 0 = no limit; the teacher's batches must fit in it: teacher.max_tokens in dump-features, data.max_tokens_per_batch in train mode (--plan shows the plan)", NULL, SIZES},
    {"teacher.vocab_tile", CFG_INT, F(teacher_vocab_tile), "0", "vocabulary columns of the lm_head per tile; 0 = min(V, 8192)", NULL, 0, 1073741824},
    {"teacher.quant_weights", CFG_STRING, F(teacher_quant_weights), "resident", "a quantised target (config.json's quantization_config: fp8 blocks, mxfp4): resident keeps its quantised weights on the device as stored (codes + scales) and de-quantises each layer's into one scratch, shared by the stage's layers, just before the layer runs (about half the device memory of bf16 weights for FP8, a quarter for MXFP4, plus the largest layer at compute size; --plan counts it so); dequantize de-quantises them at load into the compute dtype (every weight at compute size). The outputs are bit-identical either way (docs/teacher.md, Quantised checkpoints)", "resident|dequantize", NOLIM},
    {"features.dir", CFG_STRING, F(features_dir), "", "directory of the offline feature files (written by dump-features)", NULL, NOLIM},
    {"features.shard_samples", CFG_INT, F(features_shard_samples), "1024", "at most this many samples per feature shard (the unit of work and of resuming); the shard count is rounded up to a multiple of the teachers so each does the same work (a resume with another teacher count makes other shards)", NULL, 1, 1e12},
    {"drafter.kind", CFG_STRING, F(drafter_kind), "dflash", "the kind of drafter trained: dflash or dflash2 (DFlash2DraftModel: grouped dynamic causal convolutions; with its candidate selector; src/student/model/drafter_kind.c lists them); a drafter.config file must be of this kind (--mode eval takes the kind of eval.drafter)", NULL, NOLIM},
    {"regenerate.prompts", CFG_STRING, F(regen_prompts), "", "--mode regenerate: the prompts, JSONL with one {\"input_ids\": [...]} per line (already templated: tools/prepare_data.py --prompts-only makes it from chat messages)", NULL, NOLIM},
    {"regenerate.out", CFG_STRING, F(regen_out), "", "--mode regenerate: the training set written (prompt loss_mask 0, the target's reply 1, /finish_reason, /heldout; written atomically); its parts while it runs are in OUT.parts/", NULL, NOLIM},
    {"regenerate.max_new_tokens", CFG_INT, F(regen_max_new_tokens), "512", "--mode regenerate: most tokens generated per reply (a reply cut there has finish_reason length and no end token)", NULL, 1, 1073741824},
    {"regenerate.stop_ids", CFG_INT_LIST, F(regen_stop_ids), "", "--mode regenerate: token ids that end a reply, besides eos_token_id of the target's generation_config.json (the stop token is the reply's last token, loss 1)", NULL, 0, 2147483647},
    {"regenerate.temperature", CFG_FLOAT, F(regen_temperature), "0", "--mode regenerate: sampling temperature; 0 = greedy", NULL, 0, 100},
    {"regenerate.top_p", CFG_FLOAT, F(regen_top_p), "1", "--mode regenerate: nucleus sampling share (with a temperature > 0); 1 = no cut", NULL, 1e-9, 1},
    {"regenerate.top_k", CFG_INT, F(regen_top_k), "0", "--mode regenerate: sample among the k most probable tokens (with a temperature > 0); 0 = no cut", NULL, 0, 1e9},
    {"regenerate.seed", CFG_INT, F(regen_seed), "0", "--mode regenerate: sampling seed; prompt i's draws are the Philox stream of (seed, i), whichever rank or slot decodes it", NULL, 0, 9.2e18},
    {"regenerate.max_seqs", CFG_INT, F(regen_max_seqs), "0", "--mode regenerate: sequences decoded at once per teacher (continuous batching: a finished one is replaced by the next prompt); 0 = as many as teacher.mem_budget holds, up to 64 (8 without a budget)", NULL, 0, 4096},
    {"regenerate.max_len", CFG_INT, F(regen_max_len), "0", "--mode regenerate: cached positions per sequence (prompt + reply - 1; a reply that fills it ends with finish_reason length, a longer prompt is an error); 0 = the longest prompt + max_new_tokens - 1, at most the target's max_position_embeddings (a value past it is refused)", NULL, 0, 1073741824},
    {"regenerate.shard_prompts", CFG_INT, F(regen_shard_prompts), "64", "--mode regenerate: prompts per shard, the unit of work among teachers (a teacher that finishes one claims the next) and of resuming", NULL, 1, 1e12},
    {"regenerate.heldout", CFG_FLOAT, F(regen_heldout), "16", "--mode regenerate: held-out samples recorded in the set's /heldout (>= 1: a count, below 1: a fraction of the prompts; drawn from regenerate.seed; a rule that takes every prompt is refused); 0 = none (training then holds out its last data.heldout_samples)", NULL, 0, 1e12},
    {"drafter.block_size", CFG_INT, F(block_size), "16", "block size B: slots per anchor (16 or 32 in the public drafters)", NULL, 2, 1024},
    {"drafter.layers", CFG_INT, F(drafter_layers), "1", "drafter decoder layers (the public drafters use 5)", NULL, 1, 64},
    {"drafter.intermediate", CFG_INT, F(drafter_intermediate), "0", "drafter MLP size; 0 = the target's", NULL, 0, 1e7},
    {"drafter.heads", CFG_INT, F(drafter_heads), "0", "drafter query heads; 0 = the target's", NULL, 0, 4096},
    {"drafter.kv_heads", CFG_INT, F(drafter_kv_heads), "0", "drafter key/value heads; 0 = the target's", NULL, 0, 4096},
    {"drafter.head_dim", CFG_INT, F(drafter_head_dim), "0", "drafter head dimension; 0 = the target's", NULL, 0, 1024},
    {"drafter.mask_token_id", CFG_INT, F(mask_token_id), "-1", "MASK token: an unused row of the target vocabulary; -1 = vocab_size - 1 (Qwen3: 151669)", NULL, -1, 1e9},
    {"drafter.sliding_window", CFG_INT, F(sliding_window), "0", "> 0: every layer but the last is a sliding-window layer with this window (the 27B drafter layout)", NULL, 0, 1e9},
    {"drafter.config", CFG_STRING, F(drafter_config_path), "", "a DFlash drafter config.json, or a directory holding one (a published drafter's, or run.dir/drafter of an earlier run): the drafter's shape (layers, heads, sizes, block size, MASK token, sliding window, target layer ids) comes from it instead of the drafter.* keys; its hidden size, vocabulary and num_target_layers must match the target's", NULL, NOLIM},
    {"train.steps", CFG_INT, F(steps), "100", "optimizer steps", NULL, 1, STEPS_MAX},
    {"train.batches_per_step", CFG_INT, F(batches_per_step), "1", "packed batches per optimizer step over all students (a multiple of world.students); the loss is normalised over all of them", NULL, 1, 1e6},
    {"train.max_anchors", CFG_INT, F(max_anchors), "64", "anchors drawn per batch (fewer when the batch has fewer valid positions)", NULL, 1, 1e7},
    {"train.lr", CFG_FLOAT, F(lr), "0.0006", "peak learning rate (AdamW)", NULL, 0, 10},
    {"train.warmup_frac", CFG_FLOAT, F(warmup_frac), "0.04", "share of the steps with linear warmup, then cosine to 0", NULL, 0, 1},
    {"train.weight_decay", CFG_FLOAT, F(weight_decay), "0", "AdamW decoupled weight decay", NULL, 0, 10},
    {"train.grad_clip", CFG_FLOAT, F(grad_clip), "1", "global gradient-norm clip; 0 = none", NULL, 0, 1e9},
    {"train.divergence_factor", CFG_FLOAT, F(divergence_factor), "100", "a training step whose loss or gradient norm exceeds this many times max(1, its running mean over the earlier steps; 100 for the first step of a fresh run) stops the run like a NaN does (before the update); 0 = off", NULL, 0, 1e30},
    {"train.optimizer", CFG_STRING, F(optimizer), "adamw", "adamw (every tensor), or muon: Muon (momentum, then Newton-Schulz orthogonalisation, scaled to AdamW's update size so train.lr serves both) on the drafter's 2-D projection matrices and AdamW on the rest (docs/student.md, Optimizers)", "adamw|muon", NOLIM},
    {"train.muon_momentum", CFG_FLOAT, F(muon_momentum), "0.95", "train.optimizer muon: the momentum of Muon's matrices (Nesterov)", NULL, 0, 0.999},
    {"train.ema", CFG_FLOAT, F(ema_decay), "0", "EMA decay of the weights (e.g. 0.999; below 1); 0 = no EMA", NULL, 0, 1},
    {"train.mem_budget", CFG_BYTES, F(train_mem_budget), "0", "student memory budget (device bytes); 0 = no limit", NULL, SIZES},
    {"train.log_interval", CFG_INT, F(log_interval), "10", "steps between metrics lines", NULL, 1, 1e9},
    {"train.eval_interval", CFG_INT, F(eval_interval), "50", "steps between held-out evaluations (also at the start and the end)", NULL, 1, 1e9},
    {"train.eval_batches", CFG_INT, F(eval_batches), "0", "held-out batches per evaluation: 0 = the whole held-out split (every anchor of every batch, forward only); N = the first N", NULL, 0, 1e9},
    {"loss.alpha", CFG_FLOAT, F(loss_alpha), "0.15", "share of the top-k/tail KL in the slot loss", NULL, 0, 1},
    {"loss.lambda", CFG_FLOAT, F(loss_lambda), "0.1", "weight of the confidence-aware penalty (CAP)", NULL, 0, 100},
    {"loss.gamma", CFG_FLOAT, F(loss_gamma), "0", "slot-weight decay constant; 0 = 7 for B <= 16, 10 above", NULL, 0, 1e6},
    {"loss.selector_weight", CFG_FLOAT, F(loss_selector_weight), "1", "DFlash2 (drafter.kind dflash2): weight of the candidate selector's k-way cross-entropy in the slot loss (the slot's weight applies)", NULL, 0, 100},
    {"loss.weighting", CFG_STRING, F(loss_weighting), "decay", "slot weights: exponential decay or D-PACE", "decay|dpace", NOLIM},
    {"loss.label", CFG_STRING, F(loss_label), "data", "CE label: the data token or the teacher's argmax", "data|teacher", NOLIM},
    {"transport.slots", CFG_INT, F(slots), "2", "batches in flight per teacher and student (credits)", NULL, 1, 64},
    {"transport.grad_allreduce", CFG_STRING, F(grad_allreduce), "auto", "how data-parallel students sum their gradients: nccl (GPU to GPU, in buckets overlapping the backward; needs every student on its own GPU), mpi (through host memory), or auto (nccl when every student has its own GPU, else mpi; the first student's log says which and why)", "auto|mpi|nccl", NOLIM},
    {"transport.test_bytes", CFG_BYTES, F(transport_test_bytes), "64MiB", "--mode transport-test: the largest payload and all-reduce of its tables (sizes from 1 KiB by factors of 4, then this one); above 2 GiB it checks the messages that need 64-bit counts", NULL, 1024, 1e15},
    {"transport.check_payloads", CFG_BOOL, F(check_payloads), "false", "teachers seal every payload with a CRC-32C of its bytes and the students check it on arrival (a mismatch is an error naming the teacher and the batch): for a first run on new hardware or a transport suspected of damaging data; one pass over each payload on both sides", NULL, NOLIM},
    {"transport.payload", CFG_STRING, F(payload), "auto", "how the features travel teacher -> student: nccl (GPU to GPU; needs every rank on its own GPU), mpi (from host memory), or auto (nccl when every rank has its own GPU, else mpi; the job's first log lines say which and why)", "auto|mpi|nccl", NOLIM},
    {"checkpoint.every", CFG_INT, F(ckpt_every), "0", "steps between checkpoints in run.dir/checkpoints (also one at the end); 0 = none", NULL, 0, STEPS_MAX},
    {"checkpoint.every_minutes", CFG_FLOAT, F(ckpt_every_minutes), "0", "also a checkpoint after the step at which this many minutes (wall time, the first student's clock) passed since the last one, and one at the end, so a killed job loses minutes, not hours; fractions allowed; 0 = none", NULL, 0, 1e9},
    {"checkpoint.keep", CFG_INT, F(ckpt_keep), "3", "newest checkpoints kept", NULL, 1, 1e6},
    {"run.resume", CFG_BOOL, F(resume), "false", "continue from the newest complete checkpoint in run.dir (from the start when there is none)", NULL, NOLIM},
    {"run.overwrite", CFG_BOOL, F(overwrite), "false", "start a new run in a run.dir that holds an earlier one (its metrics.jsonl, config.json, checkpoints, drafter, eval.json): those files are removed first (only those: nothing else in run.dir is touched); without it such a start is refused. Likewise for the other modes' outputs (docs/faults.md, Modes): dump-features starts over in a features.dir (its own files removed), regenerate replaces a regenerate.out that is a training set (made with other settings, or by another tool) and removes its OUT.parts; a file this project did not write is never removed or replaced", NULL, NOLIM},
    {"run.rank_timeout", CFG_FLOAT, F(rank_timeout), "600", "seconds a rank waits on a peer (a batch, a request, an all-reduce) before it ends the job naming that rank; a peer process on the same host that dies is noticed at once. Must exceed the longest step, evaluation or checkpoint; 0 = wait forever. Also --rank-timeout S", NULL, 0, 1e9},
    {"test.stop_at_step", CFG_INT, F(test_stop_at_step), "0", "testing: stop after this step's checkpoint, as a preempted job would; 0 = never", NULL, 0, STEPS_MAX},
    {"test.slow_teacher", CFG_INT, F(test_slow_teacher), "-1", "testing: this teacher rank sleeps test.slow_ms per batch (--mode regenerate and dump-features: per shard); -1 = none, -2 = every rank", NULL, -2, 1e6},
    {"test.slow_ms", CFG_INT, F(test_slow_ms), "0", "testing: the slow teacher's delay per batch (ms)", NULL, 0, 1e7},
    {"data.path", CFG_STRING, F(data_path), "", "HDF5 training set (dflash_tool convert-jsonl makes one)", NULL, NOLIM},
    {"data.sets", CFG_DATA_SETS, F(data_sets), "", "several training sets mixed by weight, instead of data.path: [{\"path\": \"a.h5\", \"weight\": 2}, ...] in a file, a.h5:2,b.h5:0.5 on the command line (weight 1 when left out; > 0); each epoch draws round(weight x its training samples) samples of each set", NULL, NOLIM},
    {"data.features", CFG_STRING, F(data_features), "", "offline feature directory (dump-features); set: students train from it with no teacher ranks", NULL, NOLIM},
    {"data.max_tokens_per_batch", CFG_INT, F(max_tokens_per_batch), "2048", "tokens per packed batch", NULL, 1, 1073741824},
    {"data.min_loss_tokens", CFG_INT, F(min_loss_tokens), "2", "a sample is used when it has a valid anchor (two consecutive loss tokens) and at least this many loss tokens (2: every reply with an anchor; before 2026-12 the rule was 2 x drafter.block_size)", NULL, 2, 1e12},
    {"data.heldout_samples", CFG_INT, F(heldout_samples), "16", "samples held out for evaluation (the last usable ones) from the sets that record no split of their own (/heldout: then exactly those)", NULL, 0, 1e12},
    {"data.bucket_size", CFG_INT, F(bucket_size), "256", "samples per length bucket when packing", NULL, 1, 1e12},
};
const int config_nkeys = (int)(sizeof config_keys / sizeof config_keys[0]);

static const char *config_type_name(config_type t) {
    switch (t) {
    case CFG_INT: return "integer";
    case CFG_FLOAT: return "number";
    case CFG_STRING: return "string";
    case CFG_BOOL: return "boolean";
    case CFG_INT_LIST: return "list of integers";
    case CFG_BYTES: return "size in bytes";
    case CFG_DATA_SETS: return "list of training sets";
    }
    return "?";
}

static const config_key *config_find(const char *key) {
    for (int i = 0; i < config_nkeys; i++)
        if (strcmp(config_keys[i].key, key) == 0) return &config_keys[i];
    return NULL;
}

// An unknown key gets a suggestion when another section has the same leaf name, or the key is
// a known one with a typo of one character.
static int config_unknown(const char *key, const char *source) {
    const char *leaf = strrchr(key, '.');
    leaf = leaf ? leaf + 1 : key;
    for (int i = 0; i < config_nkeys; i++) {
        const char *l = strrchr(config_keys[i].key, '.');
        if (l && strcmp(l + 1, leaf) == 0)
            return error_set("%s: unknown key '%s' (did you mean '%s'?)", source, key, config_keys[i].key);
    }
    return error_set("%s: unknown key '%s' (dflash_rank --config-keys lists them)", source, key);
}

static int config_check_range(const config_key *k, double v, const char *source) {
    if (v < k->min || v > k->max)
        return error_set("%s: key '%s' = %.10g is outside [%.10g, %.10g]", source, k->key, v, k->min, k->max);
    return 0;
}

static int config_check_choice(const config_key *k, const char *v, const char *source) {
    if (!k->choices) return 0;
    size_t n = strlen(v);
    for (const char *c = k->choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, v, n) == 0) return 0;
        if (!bar) break;
        c = bar + 1;
    }
    return error_set("%s: key '%s' = \"%s\" is not one of %s", source, k->key, v, k->choices);
}

// Parsers from text (command line, defaults). Each returns -1 with error_set on a bad value.
// text_is_decimal: s is a decimal number as JSON writes one (a sign, digits, a fraction, an
// exponent): strtod alone would also take hexadecimal ("0x10", "0x1p-3"), "inf", "nan" and
// leading spaces, which neither the docs nor a JSON config accept.
static int text_is_decimal(const char *s) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++) digits++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++) digits++;
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return 0;
        while (*p >= '0' && *p <= '9') p++;
    }
    return *p == '\0';
}

// An integer is decimal ("010" is ten), or a number with an exponent that is a whole number
// below 2^53 ("1e6" is a million); never hexadecimal.
static int parse_int(const char *s, int64_t *out) {
    if (!text_is_decimal(s)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!errno && end != s && !*end) {
        *out = v;
        return 0;
    }
    double d = strtod(s, &end);
    if (end == s || *end || !(fabs(d) < 9007199254740992.0) || d != floor(d)) return -1;
    *out = (int64_t)d;
    return 0;
}

// data.sets: every path given, distinct, every weight finite and > 0. sets is the parsed list.
static int data_sets_check(const config_key *k, const config_data_sets *sets, const char *source) {
    for (int64_t i = 0; i < sets->n; i++) {
        const config_data_set *d = &sets->v[i];
        if (!d->path[0]) return error_set("%s: key '%s': set %lld has no path", source, k->key, (long long)i);
        if (!(d->weight > 0) || !isfinite(d->weight))
            return error_set("%s: key '%s': set %lld (%s) has weight %g; a weight must be a finite number > 0", source,
                             k->key, (long long)i, d->path, d->weight);
        for (int64_t j = 0; j < i; j++)
            if (strcmp(sets->v[j].path, d->path) == 0)
                return error_set("%s: key '%s' names %s twice (sets %lld and %lld)", source, k->key, d->path,
                                 (long long)j, (long long)i);
    }
    return 0;
}

// One more set of data.sets (its path checked for length; the caller checks the rest).
static int data_sets_add(const config_key *k, config_data_sets *sets, const char *path, size_t path_len, double weight,
                         const char *source) {
    if (sets->n >= CONFIG_MAX_SETS) return error_set("%s: key '%s' has more than %d sets", source, k->key, CONFIG_MAX_SETS);
    if (path_len >= CONFIG_STR)
        return error_set("%s: key '%s': a path is longer than %d characters", source, k->key, CONFIG_STR - 1);
    config_data_set *d = &sets->v[sets->n++];
    memcpy(d->path, path, path_len);
    d->path[path_len] = '\0';
    d->weight = weight;
    return 0;
}

// "a.h5:2,b.h5:0.5": sets separated by commas (spaces around them ignored), each a path with an
// optional ":WEIGHT" (1 when left out; a last colon followed by text without a '/' is a weight);
// "" is the empty list.
static int data_sets_parse_text(const config_key *k, const char *val, config_data_sets *sets, const char *source) {
    sets->n = 0;
    if (!*val) return 0;
    for (const char *item = val;;) {
        const char *comma = strchr(item, ',');
        const char *start = item; // spaces around a set are not part of it ("a.h5:2, b.h5")
        size_t len = comma ? (size_t)(comma - item) : strlen(item);
        while (len > 0 && (*start == ' ' || *start == '\t')) start++, len--;
        while (len > 0 && (start[len - 1] == ' ' || start[len - 1] == '\t')) len--;
        item = start;
        if (len == 0) return error_set("%s: key '%s' has an empty set in \"%s\"", source, k->key, val);
        size_t path_len = len;
        double weight = 1;
        const char *colon = NULL; // the last one
        for (const char *p = item; p < item + len; p++)
            if (*p == ':') colon = p;
        if (colon && !memchr(colon, '/', (size_t)(item + len - colon))) {
            char num[64];
            size_t nl = (size_t)(item + len - colon - 1);
            snprintf(num, sizeof num, "%.*s", (int)nl, colon + 1);
            char *end;
            weight = strtod(num, &end);
            // (spaces around the weight are allowed; inf and nan are refused below, as not finite)
            if (nl == 0 || nl >= sizeof num || end == num || *end ||
                (isfinite(weight) && !text_is_decimal(num + strspn(num, " \t"))))
                return error_set("%s: key '%s': the weight in \"%.*s\" is not a number", source, k->key, (int)len, item);
            path_len = (size_t)(colon - item);
            while (path_len > 0 && (item[path_len - 1] == ' ' || item[path_len - 1] == '\t')) path_len--;
        }
        if (data_sets_add(k, sets, item, path_len, weight, source)) return -1;
        if (!comma) break;
        item = comma + 1;
    }
    return data_sets_check(k, sets, source);
}

static int config_set_text(config *c, const config_key *k, const char *val, const char *source) {
    char *field = (char *)c + k->offset;
    switch (k->type) {
    case CFG_INT: {
        int64_t v;
        if (parse_int(val, &v)) return error_set("%s: key '%s' wants an integer, got \"%s\"", source, k->key, val);
        if (config_check_range(k, (double)v, source)) return -1;
        *(int64_t *)field = v;
        return 0;
    }
    case CFG_FLOAT: {
        char *end;
        double v = strtod(val, &end);
        if (end == val || *end || !isfinite(v) || !text_is_decimal(val))
            return error_set("%s: key '%s' wants a number, got \"%s\"", source, k->key, val);
        if (config_check_range(k, v, source)) return -1;
        *(double *)field = v;
        return 0;
    }
    case CFG_BOOL:
        if (strcmp(val, "true") == 0 || strcmp(val, "1") == 0) *(int *)field = 1;
        else if (strcmp(val, "false") == 0 || strcmp(val, "0") == 0) *(int *)field = 0;
        else return error_set("%s: key '%s' wants true or false, got \"%s\"", source, k->key, val);
        return 0;
    case CFG_STRING:
        if (strlen(val) >= k->size)
            return error_set("%s: key '%s' is longer than %zu characters", source, k->key, k->size - 1);
        if (config_check_choice(k, val, source)) return -1;
        snprintf(field, k->size, "%s", val);
        return 0;
    case CFG_BYTES: {
        size_t v;
        if (bytes_parse(val, &v)) return error_set("%s: key '%s' wants a size like 80GiB, got \"%s\"", source, k->key, val);
        if (config_check_range(k, (double)v, source)) return -1;
        *(int64_t *)field = (int64_t)v;
        return 0;
    }
    case CFG_INT_LIST: {
        // "1,9,17" (or "" for the empty list)
        config_int_list *list = (config_int_list *)field;
        int64_t n = 0;
        char buf[CONFIG_STR];
        if (strlen(val) >= sizeof buf)
            return error_set("%s: key '%s' is longer than %zu characters", source, k->key, sizeof buf - 1);
        snprintf(buf, sizeof buf, "%s", val);
        for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
            int64_t v;
            if (parse_int(tok, &v)) return error_set("%s: key '%s' wants integers separated by commas, got \"%s\"", source, k->key, val);
            if (n >= CONFIG_MAX_IDS) return error_set("%s: key '%s' has more than %d values", source, k->key, CONFIG_MAX_IDS);
            if (config_check_range(k, (double)v, source)) return -1;
            list->v[n++] = v;
        }
        list->n = n;
        return 0;
    }
    case CFG_DATA_SETS: { // parsed aside, so a bad value leaves the key as it was
        config_data_sets *sets = xmalloc(sizeof *sets);
        int rc = data_sets_parse_text(k, val, sets, source);
        if (rc == 0) memcpy(field, sets, sizeof *sets);
        free(sets);
        return rc;
    }
    }
    return error_set("%s: key '%s' has an unhandled type", source, k->key);
}

void config_defaults(config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < config_nkeys; i++)
        if (config_set_text(c, &config_keys[i], config_keys[i].def, "defaults"))
            fatal("bad default in the config table: %s", error_msg()); // a programming error
}

// A JSON leaf, checked against the key's type.
static int config_set_json(config *c, const config_key *k, const cJSON *v, const char *source) {
    char text[CONFIG_STR];
    switch (k->type) {
    case CFG_INT:
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
            return error_set("%s: key '%s' wants an integer", source, k->key);
        if (config_check_range(k, v->valuedouble, source)) return -1; // 1e300 too, before it is text
        snprintf(text, sizeof text, "%.0f", v->valuedouble);
        return config_set_text(c, k, text, source);
    case CFG_FLOAT:
        if (!cJSON_IsNumber(v)) return error_set("%s: key '%s' wants a number", source, k->key);
        snprintf(text, sizeof text, "%.17g", v->valuedouble);
        return config_set_text(c, k, text, source);
    case CFG_BOOL:
        if (!cJSON_IsBool(v)) return error_set("%s: key '%s' wants true or false", source, k->key);
        return config_set_text(c, k, cJSON_IsTrue(v) ? "true" : "false", source);
    case CFG_STRING:
        if (!cJSON_IsString(v)) return error_set("%s: key '%s' wants a string", source, k->key);
        return config_set_text(c, k, v->valuestring, source);
    case CFG_BYTES:
        if (cJSON_IsString(v)) return config_set_text(c, k, v->valuestring, source);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
            return error_set("%s: key '%s' wants a size (bytes, or a string like \"80GiB\")", source, k->key);
        if (config_check_range(k, v->valuedouble, source)) return -1;
        snprintf(text, sizeof text, "%.0f", v->valuedouble);
        return config_set_text(c, k, text, source);
    case CFG_INT_LIST: {
        if (!cJSON_IsArray(v)) return error_set("%s: key '%s' wants a list of integers", source, k->key);
        size_t n = 0;
        text[0] = '\0';
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
                return error_set("%s: key '%s' wants a list of integers", source, k->key);
            n += (size_t)snprintf(text + n, sizeof text - n, "%s%.0f", n ? "," : "", e->valuedouble);
            if (n >= sizeof text) return error_set("%s: key '%s' has too many values", source, k->key);
        }
        return config_set_text(c, k, text, source);
    }
    case CFG_DATA_SETS: { // [{"path": "a.h5", "weight": 2}, "b.h5", ...]: a bare string is weight 1
        static const char want[] = "wants a list of training sets ({\"path\": \"a.h5\", \"weight\": 2} or \"a.h5\")";
        if (!cJSON_IsArray(v)) return error_set("%s: key '%s' %s", source, k->key, want);
        config_data_sets *sets = xmalloc(sizeof *sets);
        sets->n = 0;
        int rc = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            const char *path = NULL;
            double weight = 1;
            if (cJSON_IsString(e)) {
                path = e->valuestring;
            } else if (cJSON_IsObject(e)) {
                const cJSON *f, *dup = json_duplicate_key(e);
                if (dup) {
                    rc = error_set("%s: key '%s': set %lld gives \"%s\" twice", source, k->key, (long long)sets->n, dup->string);
                    break;
                }
                cJSON_ArrayForEach(f, e) {
                    if (strcmp(f->string, "path") == 0 && cJSON_IsString(f)) path = f->valuestring;
                    else if (strcmp(f->string, "weight") == 0 && cJSON_IsNumber(f)) weight = f->valuedouble;
                    else if (strcmp(f->string, "path") == 0 || strcmp(f->string, "weight") == 0)
                        rc = error_set("%s: key '%s': set %lld: \"%s\" wants a %s", source, k->key, (long long)sets->n,
                                       f->string, f->string[0] == 'p' ? "string" : "number");
                    else rc = error_set("%s: key '%s': set %lld has an unknown key \"%s\" (path, weight)", source, k->key,
                                        (long long)sets->n, f->string);
                    if (rc) break;
                }
                if (rc == 0 && !path) rc = error_set("%s: key '%s': set %lld has no \"path\"", source, k->key, (long long)sets->n);
            } else {
                rc = error_set("%s: key '%s' %s", source, k->key, want);
            }
            if (rc == 0) rc = data_sets_add(k, sets, path, strlen(path), weight, source);
            if (rc) break;
        }
        if (rc == 0) rc = data_sets_check(k, sets, source);
        if (rc == 0) memcpy((char *)c + k->offset, sets, sizeof *sets);
        free(sets);
        return rc;
    }
    }
    return error_set("%s: key '%s' has an unhandled type", source, k->key);
}

static int config_walk(config *c, const cJSON *obj, const char *prefix, const char *source) {
    const cJSON *v = json_duplicate_key(obj);
    if (v) // JSON readers take the last one, or the first: neither is what the writer meant
        return error_set("%s: key '%s%s%s' is given twice", source, prefix, *prefix ? "." : "", v->string);
    cJSON_ArrayForEach(v, obj) {
        char key[256];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", v->string);
        const config_key *k = config_find(key);
        if (k) {
            if (config_set_json(c, k, v, source)) return -1;
        } else if (cJSON_IsObject(v)) {
            if (config_walk(c, v, key, source)) return -1;
        } else {
            return config_unknown(key, source);
        }
    }
    return 0;
}

// config_fail: the message just set, made one line (a key or value from the user may hold a
// newline or other control characters); returns -1.
static int config_fail(void) {
    char one[1024];
    text_one_line(error_msg(), one, sizeof one);
    return error_set("%s", one);
}

static int config_load_text(config *c, const char *json, const char *source) {
    cJSON *root = json_parse_object(json, source, "the configuration");
    if (!root) return -1;
    int rc = config_walk(c, root, "", source);
    cJSON_Delete(root);
    return rc;
}

int config_load_json(config *c, const char *json, const char *source) {
    return config_load_text(c, json, source) ? config_fail() : 0;
}

int config_load_file(config *c, const char *path) {
    size_t len;
    char *buf = file_read_text_len(path, 64u << 20, &len);
    if (!buf) {
        char why[1024];
        snprintf(why, sizeof why, "%s", error_msg());
        error_set("config %s", why); // "config <path>: <reason>"
        return config_fail();
    }
    size_t text = strlen(buf);
    int rc = text < len ? error_set("%s: a NUL byte at offset %zu (a configuration is JSON text)", path, text)
                        : config_load_text(c, buf, path);
    free(buf);
    return rc ? config_fail() : 0;
}

int config_set(config *c, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq) return error_set("override '--%s': expected --key=value", assignment), config_fail();
    char key[256];
    size_t n = (size_t)(eq - assignment);
    if (n >= sizeof key) n = sizeof key - 1;
    memcpy(key, assignment, n);
    key[n] = '\0';
    const config_key *k = config_find(key);
    if (!k) return config_unknown(key, "command line"), config_fail();
    return config_set_text(c, k, eq + 1, "command line") ? config_fail() : 0;
}

// Find (or make) the section object of a dotted key in root; returns the leaf name.
static cJSON *config_section(cJSON *root, const char *key, const char **leaf) {
    char part[256];
    cJSON *obj = root;
    const char *p = key, *dot;
    while ((dot = strchr(p, '.'))) {
        snprintf(part, sizeof part, "%.*s", (int)(dot - p), p);
        cJSON *next = cJSON_GetObjectItemCaseSensitive(obj, part);
        if (!next) next = cJSON_AddObjectToObject(obj, part);
        obj = next;
        p = dot + 1;
    }
    *leaf = p;
    return obj;
}

char *config_to_json(const config *c) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < config_nkeys; i++) {
        const config_key *k = &config_keys[i];
        const char *leaf;
        cJSON *sec = config_section(root, k->key, &leaf);
        const char *field = (const char *)c + k->offset;
        switch (k->type) {
        case CFG_INT:
        case CFG_BYTES: cJSON_AddNumberToObject(sec, leaf, (double)*(const int64_t *)field); break;
        case CFG_FLOAT: cJSON_AddNumberToObject(sec, leaf, *(const double *)field); break;
        case CFG_BOOL: cJSON_AddBoolToObject(sec, leaf, *(const int *)field); break;
        case CFG_STRING: cJSON_AddStringToObject(sec, leaf, field); break;
        case CFG_INT_LIST: {
            const config_int_list *list = (const config_int_list *)field;
            cJSON *arr = cJSON_AddArrayToObject(sec, leaf);
            for (int64_t j = 0; j < list->n; j++) cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)list->v[j]));
            break;
        }
        case CFG_DATA_SETS: {
            const config_data_sets *sets = (const config_data_sets *)field;
            cJSON *arr = cJSON_AddArrayToObject(sec, leaf);
            for (int64_t j = 0; j < sets->n; j++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "path", sets->v[j].path);
                cJSON_AddNumberToObject(o, "weight", sets->v[j].weight);
                cJSON_AddItemToArray(arr, o);
            }
            break;
        }
        }
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

void config_print_keys(FILE *f) {
    for (int i = 0; i < config_nkeys; i++) {
        const config_key *k = &config_keys[i];
        fprintf(f, "| `%s` | %s | `%s` | %s", k->key, config_type_name(k->type), k->def[0] ? k->def : "\"\"", k->doc);
        if (k->choices) { // "a|b" would split a markdown cell: escape the bars
            fputs("; one of ", f);
            for (const char *c = k->choices; *c; c++) fputs(*c == '|' ? "\\|" : (char[]){*c, 0}, f);
        }
        fputs(" |\n", f);
    }
}

int config_check(const config *c) {
    if (config_data_count(c) < 0) return config_fail();
    // (what a mode asks of the keys besides is its prepare hook's: src/modes, e.g. mode_train_prepare)
    if (c->ema_decay >= 1)
        return error_set("train.ema = %g never moves the averaged weights from their start; a decay is below 1 (e.g. 0.999), "
                         "0 = no EMA", c->ema_decay);
    // every block position of a batch is counted in int (rows of the loss, the planner's chunks)
    if (c->max_anchors * c->block_size > (1ll << 24))
        return error_set("train.max_anchors %lld x drafter.block_size %lld = %lld block positions per batch: at most 2^24 "
                         "(16777216)", (long long)c->max_anchors, (long long)c->block_size,
                         (long long)(c->max_anchors * c->block_size));
    return 0;
}

int config_data_count(const config *c) {
    if (c->data_path[0] && c->data_sets.n > 0)
        return error_set("data.path and data.sets are both set; give one of them (data.path is one training set of "
                         "weight 1)");
    return c->data_sets.n > 0 ? (int)c->data_sets.n : c->data_path[0] ? 1 : 0;
}

const char *config_data_path(const config *c, int i, double *weight) {
    if (c->data_sets.n == 0) {
        if (weight) *weight = 1;
        return c->data_path;
    }
    if (weight) *weight = c->data_sets.v[i].weight;
    return c->data_sets.v[i].path;
}

uint64_t config_hash(const config *c) {
    char *s = config_to_json(c);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    cJSON_free(s);
    return h;
}

void config_test_slow(const config *c, int rank) {
    if (c->test_slow_ms <= 0 || (c->test_slow_teacher != rank && c->test_slow_teacher != -2)) return;
    struct timespec ts = {(time_t)(c->test_slow_ms / 1000), (long)(c->test_slow_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void config_copy_keys(config *to, const config *from, const char *prefix) {
    size_t n = strlen(prefix);
    for (int i = 0; i < config_nkeys; i++) {
        const config_key *k = &config_keys[i];
        if (strncmp(k->key, prefix, n) == 0) memcpy((char *)to + k->offset, (const char *)from + k->offset, k->size);
    }
}
