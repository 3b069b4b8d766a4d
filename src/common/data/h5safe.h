// h5safe.h: defensive HDF5 reading shared by the data readers (trainset.c, featreader.c) and
// `dflash_tool inspect`: HDF5's error printing off, its innermost error as text, type names for
// messages, datasets whose data must lie in the file itself, and attributes read only after their
// type, shape and storage size were checked.
//
// Attributes: a fixed-length string or a number is read from the attribute's own storage (the
// object header), checked first against its type size and element count. A variable-length string
// lives in the file's global heap (a GCOL block), and libhdf5 1.10 crashes or loops reading a
// corrupt one (H5HG_read trusts the object sizes there); such a string is read in a forked child
// process with stderr closed and a time limit, so a corrupt heap becomes an error ("attribute
// 'tokenizer' is corrupt"), never a crash of the caller. Only legacy files (written before the
// trainset writer switched to fixed-length strings) or files of other writers need the child.
#pragma once
#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    H5E_auto2_t func;
    void *data;
} h5safe_quiet;

// h5safe_quiet_begin: HDF5 prints nothing until h5safe_quiet_end restores the caller's setting.
h5safe_quiet h5safe_quiet_begin(void);
void h5safe_quiet_end(h5safe_quiet s);
// h5safe_error: the innermost (most specific) description on the HDF5 error stack, in buf.
const char *h5safe_error(char buf[256]);
// h5safe_type_name: "int32", "uint8", "float32", "string", ... for messages.
const char *h5safe_type_name(hid_t type, char *buf, size_t n);
// h5safe_open_dataset: dataset name of file (path names it in messages) opened into *out, after
// checking that name is a hard link (an external link, whose data lies in another file HDF5 would
// open and follow, or a soft link is refused) and, once open, h5safe_check_stored and its size: a
// logical size past 2048 x its stored bytes + 1 MiB (unallocated chunks, read as fill values) is
// refused before anything is allocated or read by it. -1 with error_set
// ("missing dataset NAME" + missing_hint when absent); *out is set (to close) once opened.
int h5safe_open_dataset(hid_t file, const char *path, const char *name, const char *missing_hint, hid_t *out);
// h5safe_check_stored: -1 (error_set naming path and dataset) when dataset d is virtual or has
// external storage: its data would come from other files (or zeros when they are missing).
int h5safe_check_stored(hid_t d, const char *path, const char *name);
// h5safe_attr_int: attribute a (named name, of file path) as integers into v[max]; returns the
// count, -1 with error_set when it is not an integer of at most 8 bytes, has 0 or more than max
// values, or its storage does not match its type and count.
int h5safe_attr_int(hid_t a, const char *path, const char *name, int64_t *v, int max);
// h5safe_root_attr_int: the same for attribute name of the root group obj, opened here; a missing
// one is an error ("missing root attribute NAME").
int h5safe_root_attr_int(hid_t obj, const char *path, const char *name, int64_t *v, int max);
// h5safe_attr_str: one string value (fixed or variable length) of attribute a into out[n] (cut to
// fit); -1 with error_set for another type, more than one value, a size past 1 MiB or storage that
// does not match, and for a variable-length string whose read fails or crashes (in the child).
int h5safe_attr_str(hid_t a, const char *path, const char *name, char *out, size_t n);
