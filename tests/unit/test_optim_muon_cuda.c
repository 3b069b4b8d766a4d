// test_optim_muon_cuda.c: optim_step with train.optimizer = muon on CUDA against the CPU backend
// (skipped, exit 77, without a GPU): the same flat buffer of odd shapes (a norm [5], W 7x13, 13x7,
// a [1, 5] matrix, 64x96, 96x64 (24x40, 40x24 in the emulator), a codebook [6, 4], a conv base kernel [2, 3, 4]), the same inputs,
// three steps with the global-norm clip active; after each, the weights, m and v of every tensor.
// The GPU path: the Muon element-wise kernels of optim_cuda.cu, the Newton-Schulz GEMMs on cuBLAS
// (fp32, no TF32), the norm kept on the device.
// Tolerances (max |cuda - cpu| / max |cpu| per tensor):
//   AdamW's tensors (w, m, v)      1e-5: one fp32 formula per element (FMA contraction at most),
//                                  as test_ops_grad_cuda.c's optimizer kernels
//   a Muon matrix's update W' - W  1e-4: fp32 GEMMs in another summation order through 5
//                                  Newton-Schulz steps (test_optim_muon.c: the CPU is within 2e-6
//                                  of float64); a wrong transpose, coefficient or scale errs by 1e-2+
//   a Muon matrix's momentum m     1e-6: one multiply-add per element
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "student/model/drafter.h"
#include "student/train/optim.h"
#include "testing.h"
#include "testing_device.h"

enum { NP = 8 };
static drafter_param params[NP];
static int64_t numel;
static backend cpu, gpu;

static void make_params(void) {
    int n = 0;
    int64_t off = 0;
    drafter_param_push(params, &n, &off, "norm.weight", 1, (int64_t[]){5}, 1, 0);
    drafter_param_push(params, &n, &off, "q_proj.weight", 2, (int64_t[]){7, 13}, 0, 0);
    drafter_param_push(params, &n, &off, "o_proj.weight", 2, (int64_t[]){13, 7}, 0, 0);
    drafter_param_push(params, &n, &off, "vec.weight", 2, (int64_t[]){1, 5}, 0, 0);
    // (smaller in the emulator, where a kernel runs 10^3-10^5 times slower)
    int64_t a = TEST_EMU_SIZE(64, 24), b = TEST_EMU_SIZE(96, 40);
    drafter_param_push(params, &n, &off, "up_proj.weight", 2, (int64_t[]){a, b}, 0, 0);
    drafter_param_push(params, &n, &off, "down_proj.weight", 2, (int64_t[]){b, a}, 0, 0);
    drafter_param_push(params, &n, &off, "candidate_selector.successor_codebook", 2, (int64_t[]){6, 4}, 0, 0);
    drafter_param_push(params, &n, &off, "mlp_conv.base_kernel", 3, (int64_t[]){2, 3, 4}, 0, 1);
    numel = off;
}

// max |a - b| / max |b| over n, in double
static double rel(const double *a, const double *b, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= e)) e = d;
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return s > 0 ? e / s : e;
}

static void cmp_f(const char *what, const char *name, int step, const float *got, const float *ref, int64_t n, double tol) {
    char op[128];
    snprintf(op, sizeof op, "step %d %s %s", step, name, what);
    test_report(op, test_rel_err(got, ref, (size_t)n), tol);
}

int main(void) {
    int rc = test_open_devices(&cpu, &gpu);
    if (rc) return rc;
    test_rand_seed(31337);
    make_params();
    optim_config c;
    optim_config_default(&c);
    c.lr = 0.02, c.weight_decay = 0.1, c.clip = 0.5, c.total_steps = 10, c.warmup_frac = 0.1, c.muon = 1;
    size_t bytes = optim_bytes(numel, 0) + optim_muon_bytes(params, NP), fb = (size_t)numel * sizeof(float);
    float *w = test_rand_vec((size_t)numel, 0.05f);
    float *d_w = dev_up_raw(&gpu, w, fb), *d_g = dev_alloc(&gpu, fb);
    arena ac, ag;
    CHECK(arena_init(&ac, "muon cpu", &cpu, bytes) == 0 && arena_init(&ag, "muon gpu", &gpu, bytes) == 0);
    optim oc, og;
    optim_init(&oc, &c, &cpu, numel, &ac, w);
    optim_init(&og, &c, &gpu, numel, &ag, d_w);
    optim_muon_init(&oc, params, NP, &ac);
    optim_muon_init(&og, params, NP, &ag);
    CHECK(oc.n_mat == 4 && og.n_mat == 4);
    float *hw = xmalloc(fb), *hm = xmalloc(fb), *hv = xmalloc(fb), *w0 = xmalloc(fb);
    for (int step = 0; step < 3; step++) {
        float *g = test_rand_vec((size_t)numel, 1.0f);
        backend_copy_to_device(&gpu, d_g, g, fb);
        memcpy(w0, w, fb);
        double nc = optim_step(&oc, w, g, 2.0), ng = optim_step(&og, d_w, d_g, 2.0);
        CHECK(nc > c.clip);
        test_report("gradient norm", fabs(ng - nc) / nc, 1e-9);
        backend_copy_to_host(&gpu, hw, d_w, fb);
        backend_copy_to_host(&gpu, hm, og.m, fb);
        backend_copy_to_host(&gpu, hv, og.v, fb);
        for (int i = 0; i < NP; i++) {
            const drafter_param *p = &params[i];
            int64_t o = p->offset, n = p->numel;
            if (!optim_muon_takes(p)) {
                cmp_f("w (AdamW)", p->name, step, hw + o, w + o, n, 1e-5);
                cmp_f("m (AdamW)", p->name, step, hm + o, oc.m + o, n, 1e-5);
                cmp_f("v (AdamW)", p->name, step, hv + o, oc.v + o, n, 1e-5);
                continue;
            }
            double *ug = xcalloc((size_t)n, sizeof(double)), *uc = xcalloc((size_t)n, sizeof(double));
            for (int64_t k = 0; k < n; k++) ug[k] = (double)hw[o + k] - w0[o + k], uc[k] = (double)w[o + k] - w0[o + k];
            double big = 0;
            for (int64_t k = 0; k < n; k++) big = fmax(big, fabs(uc[k]));
            CHECK_MSG(big > 1e-4, "step %d %s: the CPU's Muon update is %g", step, p->name, big);
            char op[128];
            snprintf(op, sizeof op, "step %d %s update (Muon; max %.3g)", step, p->name, big);
            test_report(op, rel(ug, uc, n), 1e-4);
            cmp_f("m (Muon)", p->name, step, hm + o, oc.m + o, n, 1e-6);
            free(ug), free(uc);
        }
        free(g);
        // the GPU's updated weights feed the next step on both sides (no drift between them)
        memcpy(w, hw, fb);
        memcpy(oc.m, hm, fb);
        memcpy(oc.v, hv, fb);
    }
    optim_free(&oc), optim_free(&og);
    arena_free(&ac), arena_free(&ag);
    backend_free(&gpu, d_w), backend_free(&gpu, d_g);
    free(w), free(hw), free(hm), free(hv), free(w0);
    backend_close(&gpu), backend_close(&cpu);
    return test_finish("test_optim_muon_cuda");
}
