// config.h: the run configuration: JSON file + command-line overrides, checked against the keys the
// code declares.
//
// Every key is declared by the file that reads it, with a type, a default, bounds and a line of
// documentation (a config_key_set: the data set's keys in src/common/data/dataset.c, the loss's in
// src/student/loss/loss_config.c, ...); src/settings.c lists the sets. This core parses, checks and
// prints them: `dflash_rank --config-keys` prints every key with the file declaring it, and
// docs/config.md must match it (a test checks).
// In the JSON file keys nest by section ({"train": {"lr": 3e-4}}); on the command line they are
// dotted (--train.lr=3e-4). An unknown key, a key given twice in one object, a NUL in a string, or
// a value of the wrong type or outside its bounds is a one-line error that names the key, the
// expected type or range and what was found.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_IDS 64
#define CONFIG_STR 512

typedef struct {
    int64_t n;
    int64_t v[CONFIG_MAX_IDS];
} config_int_list;

// data.sets: training sets mixed by weight (see dataset.h for what the weights mean).
#define CONFIG_MAX_SETS 32
typedef struct {
    char path[CONFIG_STR];
    double weight;      // > 0, finite
} config_data_set;
typedef struct {
    int64_t n;
    config_data_set v[CONFIG_MAX_SETS];
} config_data_sets;

typedef struct {
    // run
    char run_dir[CONFIG_STR];
    int64_t seed;
    char device[16];      // auto | cpu | cuda
    int64_t threads;      // CPU threads per rank; 0 = automatic (common/backend/threads.h)
    char log_level[16];   // debug | info | warn | error
    char mode[32];        // train | check | dump-features | regenerate | eval | transport-test
    char eval_drafter[CONFIG_STR]; // --mode eval: the drafter (exported directory or checkpoint)
    // world
    int64_t teachers;     // -1: world size - students
    int64_t students;
    int64_t teacher_group_size;   // G: consecutive teacher ranks that hold one target as pipeline stages
    int teacher_group_cross_node; // a group may span hosts (default: refused)
    // target
    char target_path[CONFIG_STR];
    config_int_list target_layer_ids;
    int64_t n_features;   // used when target_layer_ids is empty
    // teacher
    int64_t teacher_topk;
    int64_t teacher_max_tokens;
    int64_t teacher_mem_budget; // bytes, 0 = no limit
    int64_t teacher_vocab_tile;
    char teacher_quant_weights[16]; // resident | dequantize: a quantised target's weights on the device (target_quant.h)
    // features (offline feature files)
    char features_dir[CONFIG_STR];
    int64_t features_shard_samples;
    // regenerate (run.mode = regenerate: the target answers prompts, the result is a training set)
    char regen_prompts[CONFIG_STR];  // JSONL, {"input_ids": [...]} per line
    char regen_out[CONFIG_STR];      // the training set written
    int64_t regen_max_new_tokens;
    config_int_list regen_stop_ids;  // besides generation_config.json's eos_token_id
    double regen_temperature, regen_top_p;
    int64_t regen_top_k, regen_seed;
    int64_t regen_max_seqs;          // batch slots; 0 = from teacher.mem_budget
    int64_t regen_max_len;           // cached positions per slot; 0 = longest prompt + max_new_tokens - 1
    int64_t regen_shard_prompts;     // prompts per shard (the unit of work and of resuming)
    double regen_heldout;            // held-out samples: >= 1 a count, (0, 1) a fraction, 0 none
    // drafter (shape defaults come from the target)
    char drafter_kind[CONFIG_STR];  // drafter.kind: the drafter kind (src/student/model/drafter_kind.h)
    int64_t block_size;
    int64_t drafter_layers;
    int64_t drafter_intermediate;   // 0 = the target's
    int64_t drafter_heads, drafter_kv_heads, drafter_head_dim; // 0 = the target's
    int64_t mask_token_id;          // -1 = vocab - 1
    int64_t sliding_window;         // > 0: every layer but the last slides with this window
    char drafter_config_path[CONFIG_STR]; // drafter.config: a DFlash config.json giving the shape ("" = the keys above)
    // training
    int64_t steps;
    int64_t batches_per_step;       // packed batches per optimizer step, over all students
    int64_t max_anchors;            // per batch
    double lr, warmup_frac, weight_decay, grad_clip, ema_decay;
    char optimizer[16];             // adamw | muon (train.optimizer)
    double muon_momentum;           // train.muon_momentum
    double divergence_factor; // train.divergence_factor (train.c: train_diverged)
    int64_t train_mem_budget;       // bytes, 0 = no limit
    int64_t log_interval, eval_interval, eval_batches;
    // loss
    double loss_alpha, loss_lambda, loss_gamma; // gamma 0 = from the block size
    double loss_selector_weight;               // DFlash2's selector term
    char loss_weighting[16], loss_label[16];
    // transport
    int64_t slots;                  // in-flight batches per teacher and student
    char payload[16];               // auto | mpi | nccl: how the features travel teacher -> student
    char grad_allreduce[16];        // auto | mpi | nccl: how the students sum their gradients
    int64_t transport_test_bytes;   // --mode transport-test: the largest size of its tables
    int check_payloads;             // transport.check_payloads: CRC-32C of every payload, checked on arrival
    int64_t test_slow_teacher, test_slow_ms;
    int64_t ckpt_every, ckpt_keep;
    double ckpt_every_minutes;      // a checkpoint when this many minutes passed since the last; 0 = none
    int resume;
    int overwrite; // run.overwrite
    double rank_timeout;            // seconds a rank waits on a peer before ending the job; 0 = forever
    int64_t test_stop_at_step;
    int plan_only;                  // --plan (command line only): print the memory plans and exit
    int eval_only;                  // not a key: set by --mode eval's prepare (the job evaluates eval.drafter, trains nothing)
    // data
    char data_path[CONFIG_STR];
    config_data_sets data_sets;       // several training sets with weights (exclusive with data_path)
    char data_features[CONFIG_STR];   // offline feature directory: student-only training
    int64_t max_tokens_per_batch, heldout_samples, bucket_size, min_loss_tokens;
} config;

typedef enum { CFG_INT, CFG_FLOAT, CFG_STRING, CFG_BOOL, CFG_INT_LIST, CFG_BYTES, CFG_DATA_SETS } config_type;

typedef struct {
    const char *key;        // dotted: "train.lr"
    config_type type;
    size_t offset;          // into config
    size_t size;            // string capacity / list capacity
    const char *def;        // default, as it would be written on the command line
    const char *doc;        // one line
    const char *choices;    // "auto|cpu|cuda" for enumerated strings, else NULL
    double min, max;        // bounds for numbers (inclusive)
} config_key;

// config_key_set: the keys one file declares, and the checks across them (run by config_check once
// everything is applied; NULL = none). Declared as
//   static const config_key data_keys[] = {{"data.path", CFG_STRING, CONFIG_F(data_path), ...}, ...};
//   const config_key_set data_settings = CONFIG_KEY_SET(data_keys, data_config_check);
// (src/common/data/dataset.c)
// and listed in src/settings.c. A key name is declared once (config_defaults fails otherwise).
typedef struct config_key_set {
    const char *file; // __FILE__ of the declaring file (printed from its src/ on)
    const config_key *keys;
    int n;
    int (*check)(const config *c);
} config_key_set;
#define CONFIG_KEY_SET(keys, check) {__FILE__, keys, (int)(sizeof keys / sizeof keys[0]), check}
#define CONFIG_F(field) offsetof(config, field), sizeof(((config *)0)->field) // a key's place in config
#define CONFIG_NOLIM -1e18, 1e18   // bounds of a key with none
#define CONFIG_SIZES 0, 1e18       // sizes in bytes: at most 1 EB
#define CONFIG_STEPS_MAX 1e9       // train.steps and the keys counted in steps

// config_key_sets: every set, in the order of config_unknown's suggestions (src/settings.c).
extern const config_key_set *const config_key_sets[];
extern const int config_n_key_sets;

// config_key_find: the key of that dotted name, or NULL.
const config_key *config_key_find(const char *key);
// config_defaults: every key at its default.
void config_defaults(config *c);
// config_load_file: apply a JSON file (nested sections) on top of c. -1 with error_set naming the
// file and the key on any problem.
int config_load_file(config *c, const char *path);
// config_load_json: the same from a string (source names it in messages).
int config_load_json(config *c, const char *json, const char *source);
// config_set: one override "key=value" (the leading "--" already stripped). -1 on an unknown key
// or a value that does not parse as the key's type or lies outside its bounds.
int config_set(config *c, const char *assignment);
// config_to_json: the effective configuration as nested JSON (for the run directory and logs).
char *config_to_json(const config *c); // caller frees
// config_print_keys: every key, sorted by name, as markdown rows
// ("| key | type | default | meaning | declared in |").
void config_print_keys(FILE *f);
// config_check: the checks across keys, once everything is applied (the file, then the overrides):
// each set's check (data.path and data.sets both set, train.ema = 1, the block positions of a
// batch, ...). What a mode asks besides (a training job's run.dir, eval's eval.drafter) its prepare
// hook checks (src/modes).
// -1 with error_set naming the keys.
int config_check(const config *c);
// config_data_count: the training sets the configuration names: the entries of data.sets, or 1 for
// data.path, 0 for neither; -1 with error_set when both are set (as config_check).
int config_data_count(const config *c);
// config_data_path: path of training set i (0 <= i < config_data_count), its weight in *weight
// (data.path: 1).
const char *config_data_path(const config *c, int i, double *weight);
// config_hash: FNV-1a of the effective JSON, for checkpoints.
uint64_t config_hash(const config *c);
// config_copy_keys: every key of the table whose name starts with prefix ("loss.", "drafter.", or a
// whole key's name), from `from` into `to`.
void config_copy_keys(config *to, const config *from, const char *prefix);

// config_test_slow: testing only: sleeps test.slow_ms when this rank is test.slow_teacher (-2: every rank);
// called once per unit of work (a teacher's batch, a regenerate shard)
void config_test_slow(const config *c, int rank);
