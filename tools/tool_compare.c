// tool_compare.c: `dflash_tool compare REF.safetensors OUT.safetensors [--tol T] [--only a,b]`
//
// Checks OUT against a reference, tensor by tensor, and prints one line per tensor:
//   name  shape  max_abs_err  scale  rel_err  (wrong elements / total)  ok|FAIL
// Float tensors (F32/F16/BF16): rel_err = max |out - ref| / scale, scale = max(|ref|) (the tensor's
// own magnitude: for logits, "1e-4 relative to the logit scale"); an element is wrong when its
// error exceeds tol * scale. Integer tensors must match exactly, with one exception: "topk_idx"
// rows where the reference has near-ties. A differing id at rank j is excused when the companion
// "topk_val" shows a tie there: the reference value of the id OUT put at rank j (found elsewhere in
// the reference row, or at the row's end) is within tol * scale of the reference value at rank j.
// Every tensor of REF must be in OUT with the same shape (extra tensors in OUT are ignored).
// Exit 0 when everything is within tolerance, 1 otherwise.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/data/safetensors.h"
#include "tools/tools.h"

static int compare_is_float(dtype dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16 || dt == DT_F64; }

static double *compare_to_double(const st_entry *e, int64_t n) {
    double *d = xmalloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        const char *p = (const char *)e->data;
        switch (e->dt) {
        case DT_F32: { float v; memcpy(&v, p + 4 * i, 4); d[i] = v; break; }
        case DT_F64: { double v; memcpy(&v, p + 8 * i, 8); d[i] = v; break; }
        case DT_F16: { uint16_t v; memcpy(&v, p + 2 * i, 2); d[i] = f32_from_f16(v); break; }
        case DT_BF16: { uint16_t v; memcpy(&v, p + 2 * i, 2); d[i] = f32_from_bf16(v); break; }
        case DT_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); d[i] = v; break; }
        case DT_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); d[i] = (double)v; break; }
        case DT_U8: d[i] = (uint8_t)p[i]; break;
        case DT_I8: d[i] = (int8_t)p[i]; break;
        default: d[i] = NAN;
        }
    }
    return d;
}

static int64_t compare_numel(const st_entry *e) {
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++) n *= e->shape[i];
    return n;
}

// Is the mismatch at [row, j] a near-tie in the reference? (see the header comment)
static int compare_topk_tie(const double *ref_idx, const double *ref_val, const double *out_idx, int64_t row,
                            int64_t k, int64_t j, double tol_abs) {
    const double *ri = ref_idx + row * k, *rv = ref_val + row * k;
    for (int64_t i = 0; i < k; i++)
        if (ri[i] == out_idx[row * k + j]) return fabs(rv[i] - rv[j]) <= tol_abs;
    // not in the reference's top-k at all: only a tie with the reference's last value excuses it
    return fabs(rv[k - 1] - rv[j]) <= tol_abs;
}

int tool_compare_main(int argc, char **argv) {
    const char *paths[2] = {0}, *only = NULL;
    double tol = 1e-4;
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: dflash_tool compare REF.safetensors OUT.safetensors [--tol 1e-4] [--only name,name]\n");
            return 0;
        } else if (strcmp(argv[i], "--tol") == 0 && i + 1 < argc) {
            tol = atof(argv[++i]);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (argv[i][0] != '-' && np < 2) {
            paths[np++] = argv[i];
        } else {
            fprintf(stderr, "usage: dflash_tool compare REF.safetensors OUT.safetensors [--tol 1e-4] [--only name,name]\n");
            return 2;
        }
    }
    if (np != 2 || !(tol >= 0)) {
        fprintf(stderr, "usage: dflash_tool compare REF.safetensors OUT.safetensors [--tol 1e-4] [--only name,name]\n");
        return 2;
    }
    st_file ref, out;
    if (safetensors_open(&ref, paths[0])) { fprintf(stderr, "error: %s\n", error_msg()); return 1; }
    if (safetensors_open(&out, paths[1])) { fprintf(stderr, "error: %s\n", error_msg()); safetensors_close(&ref); return 1; }

    int failures = 0, compared = 0;
    printf("%-24s %-16s %12s %12s %10s %16s\n", "tensor", "shape", "max_abs_err", "scale", "rel_err", "wrong/total");
    for (int t = 0; t < ref.n; t++) {
        const st_entry *r = &ref.entries[t];
        if (only) { // exact name match within the comma list
            const char *p = strstr(only, r->name);
            size_t len = strlen(r->name);
            while (p && !((p == only || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))) p = strstr(p + 1, r->name);
            if (!p) continue;
        }
        char shape[64];
        shape_str(r->ndim, r->shape, shape, sizeof shape);
        const st_entry *o = safetensors_find(&out, r->name);
        int same = o && o->ndim == r->ndim;
        for (int i = 0; same && i < r->ndim; i++) same = o->shape[i] == r->shape[i];
        if (!same) {
            char oshape[64] = "missing";
            if (o) shape_str(o->ndim, o->shape, oshape, sizeof oshape);
            printf("%-24s %-16s FAIL: %s has %s\n", r->name, shape, paths[1], oshape);
            failures++;
            continue;
        }
        compared++;
        int64_t n = compare_numel(r), wrong = 0, excused = 0;
        double *a = compare_to_double(r, n), *b = compare_to_double(o, n);
        double scale = 0, maxerr = 0;
        for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(a[i]));
        if (compare_is_float(r->dt)) {
            double s = scale > 0 ? scale : 1;
            for (int64_t i = 0; i < n; i++) {
                double e = fabs(a[i] - b[i]);
                if (!(e <= tol * s)) wrong++; // NaN counts as wrong
                maxerr = isnan(e) ? INFINITY : fmax(maxerr, e);
            }
            printf("%-24s %-16s %12.4g %12.4g %10.3g %8lld/%-8lld %s\n", r->name, shape, maxerr, scale, maxerr / s,
                   (long long)wrong, (long long)n, wrong ? "FAIL" : "ok");
        } else {
            const st_entry *rv = strcmp(r->name, "topk_idx") == 0 ? safetensors_find(&ref, "topk_val") : NULL;
            double *vals = rv && r->ndim == 2 && compare_numel(rv) == n ? compare_to_double(rv, n) : NULL;
            double vscale = 0;
            for (int64_t i = 0; vals && i < n; i++) vscale = fmax(vscale, fabs(vals[i]));
            for (int64_t i = 0; i < n; i++) {
                if (a[i] == b[i]) continue;
                if (vals && compare_topk_tie(a, vals, b, i / r->shape[1], r->shape[1], i % r->shape[1], tol * vscale)) excused++;
                else wrong++;
            }
            free(vals);
            printf("%-24s %-16s %12s %12s %10s %8lld/%-8lld %s", r->name, shape, "-", "-", "exact", (long long)wrong,
                   (long long)n, wrong ? "FAIL" : "ok");
            if (excused) printf(" (%lld near-tie swaps)", (long long)excused);
            printf("\n");
        }
        if (wrong) failures++;
        free(a);
        free(b);
    }
    if (compared == 0 && failures == 0) {
        fprintf(stderr, "error: compare: no tensor of %s was compared\n", paths[0]);
        failures = 1;
    }
    printf("compare: %d tensor(s) compared, %d failed (tol %g)\n", compared, failures, tol);
    safetensors_close(&ref);
    safetensors_close(&out);
    return failures ? 1 : 0;
}
