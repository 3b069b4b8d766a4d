// tool_inspect.c: `dflash_tool inspect FILE`: what is in a safetensors or HDF5 file, on stdout.
//
// The format is told by content: a file starting with the HDF5 signature is HDF5, anything else is
// read as safetensors. For HDF5, every dataset (name, type, shape) and the root attributes are
// listed; when /tokens and /offsets are there the file is a training set (SPEC §7, or a feature
// file built on one) and it is opened and validated like the trainer does, followed by the sample,
// token and loss-token counts and the sample lengths. For safetensors: every tensor (name, dtype,
// shape, bytes), the metadata and the totals.
#include <errno.h>
#include <hdf5.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/fsutil.h"
#include "common/core/log.h"
#include "common/data/h5safe.h"
#include "common/data/safetensors.h"
#include "common/data/trainset.h"
#include "tools/tools.h"

static void inspect_usage(FILE *f) {
    fprintf(f,
            "usage: dflash_tool inspect [--min-loss-tokens N] FILE\n"
            "\n"
            "List what FILE holds. safetensors: tensors (name, dtype, shape, bytes), metadata, totals.\n"
            "HDF5: datasets (type, shape) and attributes; for a training set also the samples\n"
            "(usable and rejected, by reason), tokens, loss tokens and sample lengths.\n"
            "\n"
            "  --min-loss-tokens N   reject samples with no valid anchor or fewer than N loss tokens,\n"
            "                        as the trainer does with data.min_loss_tokens (default 0: none)\n");
}

// ---------------------------------------------------------------- HDF5

static const char *h5_type_str(hid_t type, char *buf, size_t n) {
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    switch (cls) {
    case H5T_INTEGER:
        snprintf(buf, n, "%s%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", 8 * size);
        break;
    case H5T_FLOAT: snprintf(buf, n, "float%zu", 8 * size); break;
    case H5T_STRING:
        if (H5Tis_variable_str(type) > 0) snprintf(buf, n, "string");
        else snprintf(buf, n, "string%zu", size);
        break;
    case H5T_ENUM: snprintf(buf, n, "enum%zu", 8 * size); break;
    case H5T_COMPOUND: snprintf(buf, n, "compound(%zu bytes)", size); break;
    case H5T_ARRAY: snprintf(buf, n, "array(%zu bytes)", size); break;
    case H5T_OPAQUE: snprintf(buf, n, "opaque(%zu bytes)", size); break;
    case H5T_BITFIELD: snprintf(buf, n, "bitfield%zu", 8 * size); break;
    case H5T_VLEN: snprintf(buf, n, "vlen"); break;
    case H5T_REFERENCE: snprintf(buf, n, "reference"); break;
    default: snprintf(buf, n, "unknown"); break;
    }
    return buf;
}

// "[3, 4]" for a simple dataspace, "scalar" or "null" otherwise.
static const char *h5_space_str(hid_t space, char *buf, size_t n) {
    H5S_class_t cls = H5Sget_simple_extent_type(space);
    if (cls == H5S_SCALAR) return snprintf(buf, n, "scalar"), buf;
    if (cls != H5S_SIMPLE) return snprintf(buf, n, "null"), buf;
    hsize_t dims[H5S_MAX_RANK];
    int nd = H5Sget_simple_extent_dims(space, dims, NULL);
    size_t at = 0;
    at += (size_t)snprintf(buf + at, n - at, "[");
    for (int i = 0; i < nd && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
    return buf;
}

// The listing goes to a memory buffer first and to stdout only when the whole file was read, so a
// file that fails midway gives its error line and nothing else.
static FILE *out;

// Print an attribute's value: numbers (up to 16), strings quoted, anything else by its type. Values
// are read through h5safe (type, count and storage checked first; a variable-length string in a
// child process): -1 with error_set when the attribute is corrupt.
static int print_attr_value(hid_t a, const char *path, const char *name) {
    char tn[64], e[256];
    hid_t type = H5Aget_type(a), space = H5Aget_space(a);
    if (type < 0 || space < 0) {
        if (type >= 0) H5Tclose(type);
        if (space >= 0) H5Sclose(space);
        return error_set("%s: attribute '%s' is corrupt (%s)", path, name, h5safe_error(e));
    }
    hssize_t np = H5Sget_simple_extent_npoints(space);
    H5T_class_t cls = H5Tget_class(type);
    int list = H5Sget_simple_extent_type(space) == H5S_SIMPLE, rc = 0;
    if (cls == H5T_INTEGER && np >= 1 && np <= 16) {
        int64_t iv[16];
        if ((rc = h5safe_attr_int(a, path, name, iv, 16)) >= 0) {
            fprintf(out, "%s", list ? "[" : "");
            for (hssize_t i = 0; i < np; i++) fprintf(out, "%s%" PRId64, i ? ", " : "", iv[i]);
            fprintf(out, "%s", list ? "]" : "");
        }
    } else if (cls == H5T_FLOAT && np >= 1 && np <= 16 && H5Tget_size(type) <= 8) {
        double fv[16];
        if (H5Aget_storage_size(a) != (hsize_t)np * H5Tget_size(type) || H5Aread(a, H5T_NATIVE_DOUBLE, fv) < 0) {
            rc = error_set("%s: attribute '%s' is corrupt (%s)", path, name, h5safe_error(e));
        } else {
            fprintf(out, "%s", list ? "[" : "");
            for (hssize_t i = 0; i < np; i++) fprintf(out, "%s%.9g", i ? ", " : "", fv[i]);
            fprintf(out, "%s", list ? "]" : "");
        }
    } else if (cls == H5T_STRING && np == 1) {
        char sv[4096];
        if ((rc = h5safe_attr_str(a, path, name, sv, sizeof sv)) == 0) fprintf(out, "\"%s\"", sv);
    } else {
        char sp[128];
        fprintf(out, "<%s %s>", h5_type_str(type, tn, sizeof tn), h5_space_str(space, sp, sizeof sp));
    }
    H5Sclose(space);
    H5Tclose(type);
    return rc < 0 ? -1 : 0;
}

typedef struct {
    const char *path, *indent;
} attr_ctx;

static herr_t print_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data) {
    (void)info;
    const attr_ctx *c = data;
    char e[256];
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return error_set("%s: attribute '%s': %s", c->path, name, h5safe_error(e));
    fprintf(out, "%s%s = ", c->indent, name);
    int rc = print_attr_value(a, c->path, name);
    fprintf(out, "\n");
    H5Aclose(a);
    return rc;
}

// All attributes of obj; -1 (error_set) when one is corrupt or the list cannot be read.
static int print_attrs(hid_t obj, const char *path, const char *indent) {
    char e[256];
    attr_ctx c = {path, indent};
    error_clear();
    herr_t rc = H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, NULL, print_attr, &c);
    if (rc < 0 && !error_msg()[0]) error_set("%s: cannot list attributes: %s", path, h5safe_error(e));
    return rc < 0 ? -1 : 0;
}

// One line per dataset ("  /name  type  [shape]"), its attributes below it; groups as "/name/".
// -1 (error_set) stops the walk: an object that cannot be opened is a corrupt file.
static herr_t print_link(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    const char *path = data;
    char tn[64], sp[256], e[256];
    if (info->type != H5L_TYPE_HARD) {
        fprintf(out, "  /%s  (link)\n", name);
        return 0;
    }
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    if (o < 0) return error_set("%s: cannot open /%s: %s", path, name, h5safe_error(e));
    H5I_type_t t = H5Iget_type(o);
    int rc = 0;
    if (t == H5I_DATASET) {
        hid_t type = H5Dget_type(o), space = H5Dget_space(o), dcpl = H5Dget_create_plist(o);
        if (type < 0 || space < 0 || dcpl < 0) {
            rc = error_set("%s: dataset /%s is corrupt (%s)", path, name, h5safe_error(e));
        } else {
            fprintf(out, "  /%s  %s  %s", name, h5_type_str(type, tn, sizeof tn), h5_space_str(space, sp, sizeof sp));
            H5D_layout_t layout = H5Pget_layout(dcpl);
            if (layout == H5D_CHUNKED) {
                hsize_t chunk[H5S_MAX_RANK];
                int nd = H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk);
                fprintf(out, "  chunks [");
                for (int i = 0; i < nd; i++) fprintf(out, "%s%llu", i ? ", " : "", (unsigned long long)chunk[i]);
                fprintf(out, "]");
            } else if (layout == H5D_VIRTUAL) {
                fprintf(out, "  virtual");
            }
            if (H5Pget_external_count(dcpl) > 0) fprintf(out, "  external");
            fprintf(out, "\n");
            rc = print_attrs(o, path, "      @");
        }
        if (dcpl >= 0) H5Pclose(dcpl);
        if (space >= 0) H5Sclose(space);
        if (type >= 0) H5Tclose(type);
    } else if (t == H5I_GROUP) {
        fprintf(out, "  /%s/\n", name);
    }
    H5Oclose(o);
    return rc;
}

static void print_trainset(const trainset *ts, int64_t min_loss_tokens) {
    int64_t lmin = 0, lmax = 0, usable_tokens = 0;
    for (int64_t i = 0; i < ts->n; i++) {
        int64_t l = trainset_len(ts, i);
        if (i == 0 || l < lmin) lmin = l;
        if (i == 0 || l > lmax) lmax = l;
        usable_tokens += l;
    }
    int64_t rejected = ts->rejected_offsets + ts->rejected_ids + ts->rejected_short;
    fprintf(out, "training set:\n");
    fprintf(out, "  samples: %" PRId64 "\n", ts->n_raw);
    fprintf(out, "  usable samples: %" PRId64 "\n", ts->n);
    fprintf(out, "  rejected samples: %" PRId64 " (offsets not increasing %" PRId64 ", ids out of range %" PRId64
           ", no valid anchor or fewer than %" PRId64 " loss tokens %" PRId64 ")\n",
           rejected, ts->rejected_offsets, ts->rejected_ids, min_loss_tokens, ts->rejected_short);
    fprintf(out, "  tokens: %" PRId64 "\n", ts->n_tokens);
    fprintf(out, "  usable tokens: %" PRId64 "\n", usable_tokens);
    fprintf(out, "  loss tokens: %" PRId64 "\n", ts->loss_tokens);
    if (ts->n > 0)
        fprintf(out, "  sample length: min %" PRId64 ", mean %.2f, max %" PRId64 "\n", lmin,
               (double)usable_tokens / (double)ts->n, lmax);
    else fprintf(out, "  sample length: no usable samples\n");
}

// The file's listing into out; -1 with error_set when any part cannot be read. A training set is
// opened (and validated, the tokenizer last) before anything else is read.
static int inspect_hdf5_file(hid_t f, const char *path, int64_t min_loss_tokens) {
    char e[256];
    htri_t has_tokens = H5Lexists(f, "/tokens", H5P_DEFAULT), has_offsets = H5Lexists(f, "/offsets", H5P_DEFAULT);
    if (has_tokens < 0 || has_offsets < 0)
        return error_set("%s: cannot read the root group: %s", path, h5safe_error(e));
    int is_trainset = has_tokens > 0 && has_offsets > 0;
    trainset ts;
    if (is_trainset && trainset_open(&ts, path, min_loss_tokens) < 0) return -1;
    fprintf(out, "file: %s\nformat: HDF5\ndatasets:\n", path);
    int rc = 0;
    error_clear();
    if (H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, print_link, (void *)path) < 0) {
        if (!error_msg()[0]) error_set("%s: cannot list the file's groups: %s", path, h5safe_error(e));
        rc = -1;
    }
    if (rc == 0) {
        fprintf(out, "attributes:\n");
        hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
        if (root < 0) rc = error_set("%s: cannot open the root group: %s", path, h5safe_error(e));
        else {
            rc = print_attrs(root, path, "  ");
            H5Gclose(root);
        }
    }
    if (is_trainset) {
        if (rc == 0) print_trainset(&ts, min_loss_tokens);
        trainset_close(&ts);
    }
    return rc;
}

static int inspect_hdf5(const char *path, int64_t min_loss_tokens) {
    char e[256];
    h5safe_quiet q = h5safe_quiet_begin();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int rc = f < 0 ? error_set("%s: cannot open as HDF5: %s", path, h5safe_error(e))
                   : inspect_hdf5_file(f, path, min_loss_tokens);
    if (f >= 0) H5Fclose(f);
    h5safe_quiet_end(q);
    return rc;
}

// ---------------------------------------------------------------- safetensors

static int inspect_safetensors(const char *path) {
    st_file f;
    if (safetensors_open(&f, path) < 0) return error_prefix("no HDF5 signature, so read as safetensors");
    int width = 4;
    for (int i = 0; i < f.n; i++)
        if ((int)strlen(f.entries[i].name) > width) width = (int)strlen(f.entries[i].name);
    fprintf(out, "file: %s\nformat: safetensors\ntensors: %d\n", path, f.n);
    int64_t elements = 0;
    size_t bytes = 0;
    for (int i = 0; i < f.n; i++) {
        const st_entry *e = &f.entries[i];
        char sh[256];
        int64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) numel *= e->shape[d];
        fprintf(out, "  %-*s  %-4s  %-20s  %zu bytes\n", width, e->name, dtype_name(e->dt),
               shape_str(e->ndim, e->shape, sh, sizeof sh), e->nbytes);
        elements += numel;
        bytes += e->nbytes;
    }
    fprintf(out, "metadata: %d\n", f.n_meta);
    for (int i = 0; i < f.n_meta; i++) fprintf(out, "  %s = %s\n", f.meta_keys[i], f.meta_values[i]);
    fprintf(out, "total: %d tensors, %" PRId64 " elements, %zu bytes of data, %zu bytes of file\n", f.n, elements,
           bytes, f.size);
    safetensors_close(&f);
    return 0;
}

// ---------------------------------------------------------------- main

int tool_inspect_main(int argc, char **argv) {
    const char *path = NULL;
    int64_t min_loss_tokens = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            inspect_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--min-loss-tokens") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            long long v = strtoll(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || v < 0) {
                fprintf(stderr, "error: --min-loss-tokens: '%s' is not a count\n", argv[i]);
                inspect_usage(stderr);
                return 2;
            }
            min_loss_tokens = v;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "error: unknown or incomplete option '%s'\n", argv[i]);
            inspect_usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "error: one FILE only ('%s' and '%s')\n", path, argv[i]);
            inspect_usage(stderr);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        inspect_usage(stderr);
        return 2;
    }

    unsigned char sig[8] = {0};
    FILE *fp = fs_fopen_regular(path, NULL); // a FIFO or a device is refused (fsutil.h)
    if (!fp) {
        log_error("%s", error_msg());
        return 1;
    }
    size_t got = fread(sig, 1, sizeof sig, fp);
    fclose(fp);
    int hdf5 = got == 8 && memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0;
    char *text = NULL;
    size_t text_len = 0;
    out = open_memstream(&text, &text_len);
    if (!out) {
        log_error("%s: open_memstream: %s", path, strerror(errno));
        return 1;
    }
    int rc = hdf5 ? inspect_hdf5(path, min_loss_tokens) : inspect_safetensors(path);
    fclose(out);
    out = NULL;
    if (rc == 0) fwrite(text, 1, text_len, stdout);
    free(text);
    fflush(stdout);
    if (rc < 0) {
        log_error("%s", error_msg());
        return 1;
    }
    return 0;
}
