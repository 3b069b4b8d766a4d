// trainset.h: the HDF5 training set of SPEC §7, read and written.
//
//   /tokens    int32 [N]    all samples' token ids, concatenated
//   /offsets   int64 [n+1]  sample i is tokens[offsets[i]:offsets[i+1]]
//   /loss_mask uint8 [N]    1 = a token the drafter is trained on (assistant turns)
//   attributes on the root: vocab_size (int64), format_version (int64, = 1), tokenizer (string;
//   written as a fixed-length UTF-8 string, a variable-length one of older files is read too)
//
// Datasets are chunked (readable by h5py and by partial reads). Opening reads the offsets, then
// streams through tokens and mask once to validate every sample; a sample is rejected (counted,
// one warning line with the counts, printed by rank 0 only: once per run) when its offsets do not increase, an id is outside
// [0, vocab_size), or (min_loss_tokens > 0: the training data's rule, data.min_loss_tokens) it has no
// valid anchor (SPEC §4: two consecutive tokens with loss_mask = 1) or fewer than min_loss_tokens
// tokens with loss_mask = 1; min_loss_tokens 0 keeps every well-formed sample (readers of the
// files this project wrote: feature shards, regenerate's parts). A file that is
// not HDF5, lacks a dataset, has a dataset of the wrong type or rank, a virtual dataset or one with
// external storage (its data would come from other files), offsets that run outside /tokens, a
// first offset other than 0 or a last one other than the length of /tokens (tokens no sample
// holds) is an error naming the dataset; so is a missing vocab_size or format_version attribute, a
// format_version other than 1, or an attribute whose type, size or storage is wrong (tokenizer is
// optional: "" when absent). Attributes are read defensively (h5safe.h): a corrupt legacy
// variable-length tokenizer is an error naming the file, never a crash.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define TRAINSET_FORMAT_VERSION 1

typedef struct {
    char *path;
    int64_t file, d_tokens, d_mask;     // HDF5 handles (hid_t)
    int64_t n_tokens;                   // N
    int64_t n_raw;                      // samples in the file
    int64_t *offsets;                   // [n_raw + 1]
    int64_t n;                          // usable samples
    int64_t *index;                     // [n]: usable sample -> raw sample
    int64_t vocab_size;
    int64_t format_version;
    char tokenizer[256];
    int64_t rejected_offsets, rejected_ids, rejected_short; // counts of rejected samples by reason
    int64_t loss_tokens;                // tokens with loss_mask = 1 over the usable samples
    int64_t n_heldout;                  // /heldout elements; -1 = the file has no /heldout
    int64_t *heldout;                   // [n_heldout] raw sample indices, increasing
    char heldout_rule[256];             // root attribute heldout_rule ("" when absent)
    int64_t *heldout_usable;            // [n_heldout_usable] the held-out samples' usable indices, increasing
    int64_t n_heldout_usable, heldout_rejected; // held-out samples usable / rejected by the checks above
} trainset;

// trainset_open: -1 with error_set when the file is unusable (see above). Zero usable samples is
// not an error here (the caller decides).
int trainset_open(trainset *ts, const char *path, int64_t min_loss_tokens);
// Optional parts (SPEC §7, a regenerated set, dflash_rank --mode regenerate):
//   /heldout       int64 [m]  the held-out samples (raw indices, increasing), chosen once when the
//                             set was made; the root attribute heldout_rule says how
//   /finish_reason uint8 [n]  0 = the reply ended at a stop id, 1 = at the length limit
// A /heldout whose indices do not increase or lie outside [0, n) is an error naming it. Mask values
// other than 0 and 1 are an error naming the element.
//
// trainset_attr_str: root attribute name as a string into out[n]: 1 when present, 0 when absent
// (out = ""), -1 with error_set on a bad one.
int trainset_attr_str(trainset *ts, const char *name, char *out, size_t n);
// trainset_read_u8: a uint8 dataset of one value per raw sample (e.g. "/finish_reason") into out[n_raw].
int trainset_read_u8(trainset *ts, const char *name, uint8_t *out);
// trainset_usable_of_raw: the usable index of raw sample raw, -1 when it was rejected.
int64_t trainset_usable_of_raw(const trainset *ts, int64_t raw);
// trainset_heldout_draw: the held-out split of a new set of n samples, chosen once: spec >= 1 a
// count (at most n), 0 < spec < 1 a fraction (floor(spec * n), at least 1), 0 none. The samples are
// the first of a Fisher-Yates shuffle of 0..n-1 by the Philox stream (seed, 0, TRAINSET_HELDOUT_RNG),
// sorted, into idx[n] (caller's); the rule as text into rule[rule_n]. Returns the count.
#define TRAINSET_HELDOUT_RNG 0x484fu // "HO"
int64_t trainset_heldout_draw(int64_t n, double spec, uint64_t seed, int64_t *idx, char *rule, size_t rule_n);
// trainset_rejected_str: the reasons samples were rejected, "3 whose offsets do not increase, 2 with
// ids outside [0, V), 1 with no valid anchor or fewer than M loss tokens" (those that occur; "" for none), into buf.
const char *trainset_rejected_str(const trainset *ts, int64_t min_loss_tokens, char *buf, size_t n);
// trainset_len: length of usable sample i (0 <= i < ts->n).
int64_t trainset_len(const trainset *ts, int64_t i);
// trainset_read: usable sample i into tokens[len] and mask[len] (either may be NULL); -1 on I/O error.
int trainset_read(trainset *ts, int64_t i, int32_t *tokens, uint8_t *mask);
void trainset_close(trainset *ts);

// Writer: streams samples to "<path>.tmp.<pid>" (no modification times: the same samples give a
// byte-identical file) (extensible chunked datasets, bounded memory),
// renamed over path by trainset_writer_close. Every HDF5 call's status is checked, the closes and
// the final flush included (a full disk fails the close, naming the OS reason); only a complete,
// fsynced file is renamed. trainset_writer_abort (or any failed call) closes every handle and
// removes the temporary file, so a half-written training set never appears under path.
typedef struct {
    char *path, *tmp_path;
    int64_t file, d_tokens, d_mask, d_offsets; // hid_t
    int64_t n_tokens, n_samples;
    int64_t vocab_size;                // as given at open (<= 0: not known yet)
    int64_t max_id;                    // largest id appended so far (-1: none)
    char tokenizer[256];
    // buffered appends (flushed in chunks)
    int32_t *buf_tokens;
    uint8_t *buf_mask;
    int64_t *buf_offsets;
    int64_t buf_n, buf_cap, buf_noff, buf_cap_off;
} trainset_writer;

// vocab_size <= 0: not known yet; it becomes (largest id + 1) at close.
int trainset_writer_open(trainset_writer *w, const char *path, int64_t vocab_size, const char *tokenizer);
// trainset_writer_append: one sample of n >= 1 tokens (mask values 0/1; mask NULL = all ones); ids
// outside [0, vocab_size), an empty sample or a mask value > 1 are an error (-1, error_set naming
// the sample index and the value), and like any failed call they abort the writer.
int trainset_writer_append(trainset_writer *w, const int32_t *tokens, const uint8_t *mask, int64_t n);
// trainset_writer_close: flush, write the attributes, fsync, rename over path. Afterwards (success
// or not) the handles and buffers are released; on success n_samples, n_tokens and vocab_size (the
// final value) stay readable for a summary.
int trainset_writer_close(trainset_writer *w);
void trainset_writer_abort(trainset_writer *w);
// trainset_writer_discard: the temporary file truncated to 0 (its blocks freed), for a caller that
// writes datasets of its own into w->file (featfile.h) and abandons it: called before it closes
// them, so that their closes, which flush what HDF5 still holds, find space on a full disk (a
// failed close leaves HDF5 half-closed, and its clean-up at exit crashes). The abort follows.
void trainset_writer_discard(trainset_writer *w);
// trainset_writer_attr: a root attribute: a string (str), else one double (f64), else n_ints int64
// values (a list; n_ints 0 = an empty one, -1 = the scalar ints[0]). trainset_writer_dataset: a rank-1 dataset of n values,
// uint8 (is_u8) or int64, written at once (e.g. /finish_reason, /heldout). Any failure aborts the writer.
int trainset_writer_attr(trainset_writer *w, const char *name, const char *str, const int64_t *ints, int64_t n_ints,
                         const double *f64);
int trainset_writer_dataset(trainset_writer *w, const char *name, int is_u8, const void *v, int64_t n);
