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
// one warning line with the counts) when its offsets do not increase, an id is outside
// [0, vocab_size), or it has fewer than min_loss_tokens tokens with loss_mask = 1. A file that is
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
} trainset;

// trainset_open: -1 with error_set when the file is unusable (see above). Zero usable samples is
// not an error here (the caller decides).
int trainset_open(trainset *ts, const char *path, int64_t min_loss_tokens);
// trainset_rejected_str: the reasons samples were rejected, "3 whose offsets do not increase, 2 with
// ids outside [0, V), 1 with fewer than M loss tokens" (those that occur; "" for none), into buf.
const char *trainset_rejected_str(const trainset *ts, int64_t min_loss_tokens, char *buf, size_t n);
// trainset_len: length of usable sample i (0 <= i < ts->n).
int64_t trainset_len(const trainset *ts, int64_t i);
// trainset_read: usable sample i into tokens[len] and mask[len] (either may be NULL); -1 on I/O error.
// Mask values are returned as 0/1 (any nonzero value in the file counts as 1, as in the validation).
int trainset_read(trainset *ts, int64_t i, int32_t *tokens, uint8_t *mask);
void trainset_close(trainset *ts);

// Writer: streams samples to "<path>.tmp.<pid>" (extensible chunked datasets, bounded memory),
// renamed over path by trainset_writer_close. trainset_writer_abort (or any failed call) removes
// the temporary file, so a half-written training set never appears under path.
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
