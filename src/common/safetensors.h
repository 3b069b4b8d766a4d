// safetensors.h: read (mmap) and write safetensors files, and open Hugging Face model directories
// (one model.safetensors, or shards listed by model.safetensors.index.json).
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the data; offsets are relative
// to the start of the data. Opening validates everything before any tensor is used and rejects, with
// one line naming the file and the tensor: a header longer than the file, bad JSON, an unknown
// dtype, offsets out of range, overlapping or leaving holes, a byte size that does not match the
// shape, and duplicate names.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/tensor.h"

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
    int n;             // tensors, in file order
    st_entry *entries;
    int n_meta;        // __metadata__ pairs
    char **meta_keys, **meta_values;
} st_file;

// safetensors_open: map and validate path. -1 with error_set on any problem (file untouched).
int safetensors_open(st_file *f, const char *path);
const st_entry *safetensors_find(const st_file *f, const char *name);
// safetensors_meta: value of a __metadata__ key, or NULL.
const char *safetensors_meta(const st_file *f, const char *key);
void safetensors_close(st_file *f);
// st_entry_tensor: a (read-only, host) tensor view of an entry.
tensor st_entry_tensor(const st_entry *e);

// A model directory: model.safetensors, or model.safetensors.index.json + the shards it names.
// Every shard is validated; a name listed in the index but absent from its shard, or present in
// two shards, is an error.
typedef struct {
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
// "<path>.tmp.<pid>", fsync, rename over path. On any error (disk full, ...) the temporary file
// is removed, path is left as it was, and -1 is returned with error_set. Tensors are written in
// the order added; the data pointers must stay valid until safetensors_writer_write returns.
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
void safetensors_writer_meta(st_writer *w, const char *key, const char *value);
int safetensors_writer_write(st_writer *w, const char *path);
void safetensors_writer_free(st_writer *w);
