// safetensors.h: read (mmap) and write safetensors files, and open Hugging Face model directories
// (one model.safetensors, or shards listed by model.safetensors.index.json).
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the data; offsets are relative
// to the start of the data. Opening validates everything before any tensor is used and rejects, with
// one line naming the file and the tensor and the value found: a file shorter than 8 bytes, a header
// longer than the file (or past 100 MB, the reference limit), a header that is not one JSON object
// (a NUL byte or trailing non-space bytes in it included), an entry that is not an object or lacks
// "dtype"/"shape"/"data_offsets" or has them with the wrong JSON types, an unknown dtype, a shape
// with more than TENSOR_MAX_DIMS dims or a dim that is not an integer in [0, 2^53], a byte count
// that overflows 64 bits, offsets with begin > end or past the end of the data, a byte size that
// does not match shape x dtype, duplicate names (cJSON keeps duplicate keys; they are looked for),
// a __metadata__ that is not an object of strings.
//
// Layout rule, as in the reference implementation (Rust crate, Metadata::validate): sorted by
// offset, the tensors must tile the data region exactly, from 0 to the end of the file. A tensor
// starting before the previous one ends is an overlap, one starting after it leaves a hole, and
// bytes after the last tensor are a hole too (so a file with bytes appended is rejected).
// Zero-size tensors (a dim of 0) are legal and take no bytes. Not checked: UTF-8 validity of names.
//
// Alignment: files written by the Python/Rust package and by this writer pad the header to a
// multiple of 8 bytes and place tensors by decreasing element size, so entry data is aligned to its
// element size. Other writers may leave data misaligned (an odd header length is valid): such files
// are accepted, and every entry whose data is not aligned to its element size is copied at open
// into an aligned buffer the st_file owns, so entry data can always be read in place as its dtype.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/core/tensor.h"

typedef struct {
    char *name;
    dtype dt;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    size_t nbytes;
    const void *data; // into the mapping
} st_entry;

typedef struct {
    char *path;
    void *map;         // the whole file, read-only mapping
    size_t size;       // file size
    size_t data_start; // 8 + header length
    int n;             // tensors, in header order
    st_entry *entries;
    int n_meta;        // __metadata__ pairs
    char **meta_keys, **meta_values;
    void *aligned;     // copies of the entries whose data in the file is misaligned (NULL: none)
} st_file;

// safetensors_open: map and validate path. -1 with error_set on any problem (file untouched).
int safetensors_open(st_file *f, const char *path);
// safetensors_find: the entry named name, or NULL (a linear scan).
const st_entry *safetensors_find(const st_file *f, const char *name);
// safetensors_meta: value of a __metadata__ key, or NULL.
const char *safetensors_meta(const st_file *f, const char *key);
void safetensors_close(st_file *f);
// st_entry_tensor: a (read-only, host) tensor view of an entry.
tensor st_entry_tensor(const st_entry *e);

// A model directory: model.safetensors, or model.safetensors.index.json + the shards it names.
// Every shard is validated; a name listed in the index but absent from its shard, listed twice, or
// present in two shards, a shard file missing or invalid, a shard name outside the directory, is an
// error naming the index, the shard and the tensor. Tensors a shard holds beyond the index are kept.
// Neither file present: an error naming the directory.
typedef struct st_dir {
    char *dir;
    int n_files;
    st_file *files;
    int n;                    // tensors over all shards
    const st_entry **entries; // sorted by name (for safetensors_dir_find)
} st_dir;

int safetensors_dir_open(st_dir *d, const char *dir);
const st_entry *safetensors_dir_find(const st_dir *d, const char *name);
void safetensors_dir_close(st_dir *d);

// Writer: collect (name, host tensor) pairs and metadata, then write the file in one go: to
// "<path>.tmp.<pid>", fsync, rename over path, fsync the directory. On any error (disk full, ...)
// before the rename the temporary file is removed, path is left as it was, and -1 is returned with
// error_set naming path and strerror (a failed directory fsync after the rename also returns -1;
// path then already holds the new file). The header is compact JSON with "__metadata__" first and
// the tensors in the order added, padded with spaces so the data starts at a multiple of 8 bytes;
// the data region holds the tensors by decreasing element size (ties in the order added), so each
// is aligned to its element size, as the Python package does. The data pointers must stay valid
// until safetensors_writer_write returns.
typedef struct {
    int n, cap;
    char **names;
    tensor *tensors;
    int n_meta, cap_meta;
    char **meta_keys, **meta_values;
} st_writer;

void safetensors_writer_init(st_writer *w);
// safetensors_writer_add: -1 (error_set) on a duplicate name or a non-host tensor.
int safetensors_writer_add(st_writer *w, const char *name, tensor t);
// safetensors_writer_meta: set a __metadata__ string (a key set twice keeps the last value).
void safetensors_writer_meta(st_writer *w, const char *key, const char *value);
int safetensors_writer_write(st_writer *w, const char *path);
void safetensors_writer_free(st_writer *w);
