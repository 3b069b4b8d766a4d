// identity.h: what a run's inputs are, recorded with what it writes and compared on reading it
// back: the one place that checks inputs against each other (issue 27, item 1).
//
// A run_identity holds the target (architecture, hidden size, layers, vocabulary, the CRC32C of
// its config.json and its weights' fingerprint, identity_weights_crc), the target layers the
// features come from, the feature convention, the training set (usable samples, and the CRC32C of
// their lengths as little-endian int64: the offsets' fingerprint), and the held-out split (its
// sample indices' CRC32C: a resume on the same set with another /heldout would evaluate on samples
// it trained on). Every field may be unknown (a file written before it was recorded, or a run that
// does not have it): -1, n_layer_ids < 0, "". Written into features.json ("identity") and every
// checkpoint's state.json ("identity"); compared with the run's in a student-only run
// (data.features), a resumed dump-features (per shard: a feature shard records the target's
// config.json CRC and weights' fingerprint too, featfile.h) and a resumed training run.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define IDENTITY_MAX_LAYERS 64

typedef struct {
    char target_arch[64];
    int64_t target_hidden, target_layers, target_vocab;
    int64_t target_config_crc;    // CRC32C of the target's config.json (-1: unknown)
    int64_t target_weights_crc;   // its *.safetensors files' fingerprint (identity_weights_crc; -1: unknown)
    int n_layer_ids;              // -1: unknown
    int64_t layer_ids[IDENTITY_MAX_LAYERS];
    char feature_convention[32];  // "hidden_states[id+1]"
    int64_t data_samples;         // usable samples
    int64_t data_lengths_crc;     // CRC32C of their lengths (-1: unknown)
    int64_t data_tokens_crc;      // CRC32C of their tokens (int32 LE, in order; -1: unknown; a
                                  // feature shard's, compared by a resumed dump-features)
    int64_t heldout_samples;      // the held-out split: how many samples (-1: unknown)
    int64_t heldout_crc;          // CRC32C of their indices, increasing, as int64 LE (-1: unknown)
} run_identity;

void identity_init(run_identity *id); // everything unknown
// identity_set_target: the target's fields; the CRC of target_dir/config.json and the fingerprint
// of its weights (each unknown when it cannot be read: the loader names that problem).
void identity_set_target(run_identity *id, const char *arch, int64_t hidden, int64_t layers, int64_t vocab,
                         const char *target_dir);
// identity_weights_crc: the target's weights by content, cheaply (no full read, whatever their
// size): the CRC32C, over every *.safetensors file of dir in name order, of its name, its size
// (int64 LE), its header (the tensor names, dtypes, shapes and offsets) and IDENTITY_WEIGHT_BLOCKS
// blocks of IDENTITY_WEIGHT_BLOCK bytes of its data spread evenly over it (other weights of the same
// shapes, a fine-tune of the same base, differ there). A file that cannot be opened adds nothing;
// -1 when dir holds no readable *.safetensors file. Regenerate's target_weights_crc32c and the
// identity's target_weights_crc32c (features.json, every feature shard, every checkpoint).
#define IDENTITY_WEIGHT_BLOCKS 16
#define IDENTITY_WEIGHT_BLOCK 4096
int64_t identity_weights_crc(const char *dir);
// identity_set_data: n samples of these lengths.
void identity_set_data(run_identity *id, const int64_t *lengths, int64_t n);
// identity_set_heldout: the held-out split, n sample indices in any order.
void identity_set_heldout(run_identity *id, const int64_t *idx, int64_t n);
// identity_check: every field known on both sides equal; else -1 with error_set: "<recorded_what>
// was made with <field> X, this run has Y (<advice>)", naming every field that differs.
int identity_check(const run_identity *recorded, const char *recorded_what, const run_identity *now, const char *advice);
// identity_to_json: a JSON object of the known fields (malloc'd text; the caller frees).
char *identity_to_json(const run_identity *id);
// identity_from_json: the fields of a JSON object (a cJSON *, as void * so that this header needs no
// cJSON) present in it; absent ones unknown. -1 with error_set (naming where) on a malformed field.
int identity_from_json(const void *obj, const char *where, run_identity *id);
