// attn_tc.cu: the DFlash attention on tensor cores (see attn_tc.h).
//
// The work unit is one anchor's query rows for one kv head. The G = nq / nkv query heads of a kv
// head read the same keys, so an anchor's rows are taken slot-major, r = k * G + g (slot k, query
// head kh * G + g): G * B rows, cut into tiles of BQ. The keys of a query tile are listed as the
// context rows its slots may see (from the lowest window start among them up to the anchor), then
// the block's slots; each row's own mask (SPEC §3, as seen_by in attention_cuda.cu) is applied
// element by element when scores become probabilities.
//
// Tiles live in shared memory: bf16 operands [rows][hdp + 8] (hdp: head_dim rounded up to 16 and
// zero padded; the +8 spreads rows over the banks), fp32 scores and accumulators. Products are
// WMMA 16x16x16 (bf16 in, fp32 accumulate), their 16x16 output tiles spread over the block's 4 warps
// (tile_mma); masks, softmax and rescaling are fp32 on all 128 threads, TPR = 128 / BQ per row.
//
//   fwd  query tile x its key tiles: S = Q K^T, online softmax (running max m and sum l per row, O
//        rescaled by exp(m_old - m_new)), O += P V; out = O / l, lse = m + log l.
//   dq   query tile x its key tiles: P = exp(scale S - lse), dP = dO V^T, dS = P (dP - D) with
//        D = rowsum(dO * out); dQ += scale dS K.
//   dkv  key tile x every query tile that sees it: dV += P^T dO, dK += scale dS^T Q. An anchor's
//        block keys are written (bf16); a context tile, seen by every anchor after it in its
//        sequence, is added to the fp32 dkc/dvc by the one block that owns it (no atomics).
//
// The target's causal attention (attn_tc_causal, causal_prob) runs the fwd kernel over the packed
// batch: a query tile's keys run from its first token's first visible key (its sequence start, or
// with a sliding window t - window + 1) to its last token, each row masked to its own range; a sink
// (gpt-oss: a logit per query head) joins the row's m and l after the last key tile.
//
// P and dS are rounded to bf16 for their products (as flash-attention does): ~2^-9 relative per
// term, inside the bf16 tolerance the tests hold the scalar kernels to.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <mma.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/kernels/attn_tc.h"

typedef __nv_bfloat16 bf16;
using namespace nvcuda;

#define TC_THREADS 128
#define TC_WARPS (TC_THREADS / 32)
#define TC_FULL 0xffffffffu
#define TC_CTX_BLOCKS 512 // context-tile blocks per kv head (grid-stride: the context length is on the device)

// ---------------------------------------------------------------------------- shared-memory plans

// Row strides (elements) of the tiles, from head_dim and the key tile width BK.
struct tc_strides {
    int hdp; // head_dim rounded up to 16
    int ldh; // bf16 [.][hdp] operands
    int ldo; // fp32 [.][hdp] accumulators
    int lds; // fp32 [BQ][BK] scores
    int ldp; // bf16 [BQ][BK] probabilities
};
static __host__ __device__ tc_strides strides_of(int hd, int BK) {
    tc_strides s;
    s.hdp = (hd + 15) / 16 * 16;
    s.ldh = s.hdp + 8;
    s.ldo = s.hdp + 4;
    s.lds = BK + 4;
    s.ldp = BK + 8;
    return s;
}

// Byte offsets of a kernel's tiles in its dynamic shared memory, each 128-byte aligned.
static __host__ __device__ size_t bump(size_t *at, size_t bytes) {
    size_t o = *at;
    *at += (bytes + 127) / 128 * 128;
    return o;
}

// The three kernels' tiles; a kernel's unused ones take no space.
enum tc_kind { TC_FWD, TC_DQ, TC_DKV };
struct tc_tiles {
    size_t q, dout, k, v; // bf16 operands: [BQ][ldh] query-side, [BK][ldh] key-side
    size_t s, dp;         // fp32 [BQ][lds]: scores, dO V^T
    size_t p, ds;         // bf16 [BQ][ldp]: probabilities, dS
    size_t acc;           // fp32 [BQ][ldo]: O (fwd) or dQ (dq)
    size_t dk, dv;        // fp32 [BK][ldo] (dkv)
    size_t misc;          // the context length, found by a dkv block
    size_t total;
};
static __host__ __device__ tc_tiles tc_layout(int kind, int BQ, int BK, int hd) {
    tc_strides st = strides_of(hd, BK);
    bool fwd = kind == TC_FWD, dkv = kind == TC_DKV;
    size_t qh = (size_t)BQ * st.ldh * 2, kh = (size_t)BK * st.ldh * 2, sf = (size_t)BQ * st.lds * 4;
    size_t pb = (size_t)BQ * st.ldp * 2, kacc = (size_t)BK * st.ldo * 4, at = 0;
    tc_tiles L;
    L.q = bump(&at, qh);
    L.dout = bump(&at, fwd ? 0 : qh);
    L.k = bump(&at, kh);
    L.v = bump(&at, kh);
    L.s = bump(&at, sf);
    L.dp = bump(&at, fwd ? 0 : sf);
    L.p = bump(&at, kind == TC_DQ ? 0 : pb);
    L.ds = bump(&at, fwd ? 0 : pb);
    L.acc = bump(&at, dkv ? 0 : (size_t)BQ * st.ldo * 4);
    L.dk = bump(&at, dkv ? kacc : 0);
    L.dv = bump(&at, dkv ? kacc : 0);
    L.misc = bump(&at, dkv ? 4 : 0);
    L.total = at;
    return L;
}

// 128-byte units of dynamic shared memory (WMMA wants 32-byte aligned tiles)
struct __align__(128) tc_line {
    unsigned char b[128];
};

// A kernel's tiles as pointers into its dynamic shared memory (tc_layout's offsets).
struct tc_ptrs {
    bf16 *q, *dout, *k, *v, *p, *ds;
    float *s, *dp, *acc, *dk, *dv;
    int *misc;
};
static __device__ tc_ptrs tiles_at(tc_line *smem, int kind, int BQ, int BK, int hd) {
    tc_tiles L = tc_layout(kind, BQ, BK, hd);
    char *sm = (char *)smem;
    return {(bf16 *)(sm + L.q),  (bf16 *)(sm + L.dout), (bf16 *)(sm + L.k),   (bf16 *)(sm + L.v),
            (bf16 *)(sm + L.p),  (bf16 *)(sm + L.ds),   (float *)(sm + L.s),  (float *)(sm + L.dp),
            (float *)(sm + L.acc), (float *)(sm + L.dk), (float *)(sm + L.dv), (int *)(sm + L.misc)};
}

// ---------------------------------------------------------------------------- rows and masks

static __device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }

// One anchor's query rows (q, dout or out; lse by index): tile row i is r = r0 + i, slot r / G of
// the anchor (global row row0 + r / G), query head kh * G + r % G; -1 past the rows in use.
struct q_rows {
    int64_t row0;
    int nq, G, kh, r0, rows;
    __device__ int64_t index(int i) const {
        int r = r0 + i;
        if (i < 0 || r >= rows) return -1;
        return (row0 + r / G) * nq + kh * G + r % G;
    }
    __device__ int slot(int i) const { return (r0 + i) / G; }
};

// A key list: nctx context rows from c_lo, then block rows (global row blk0 + j) up to nk keys.
struct key_list {
    int c_lo, nctx, nk;
    int64_t blk0;
    int nkv, kh;
    __device__ int64_t index(int t, bool *is_ctx) const { // row index (times nkv, plus kh) of key t
        *is_ctx = t < nctx;
        return (t < nctx ? (int64_t)(c_lo + t) : blk0 + t - nctx) * nkv + kh;
    }
};

// Does slot k of the anchor at a (its sequence starting at st) see context row c < a?
static __device__ __forceinline__ bool ctx_seen(int c, int k, int a, int st, int window) {
    return c >= st && (window <= 0 || c >= a + k - (window - 1));
}

// dst[rows][ld] <- the rows src(i) (nullptr: a zero row), zero past head_dim. 16-byte vectors when
// vec (head_dim a multiple of 8 and the buffers 16-byte aligned, so every row is), else elements.
template <class Src>
static __device__ void load_tile(bf16 *dst, int ld, int rows, int hd, int hdp, int vec, const Src &src) {
    if (vec) {
        int vpr = hdp / 8;
        for (int u = threadIdx.x; u < rows * vpr; u += TC_THREADS) {
            int i = u / vpr, c = (u % vpr) * 8;
            const bf16 *s = src(i);
            uint4 v = make_uint4(0, 0, 0, 0);
            if (s && c < hd) v = *(const uint4 *)(s + c);
            *(uint4 *)(dst + (size_t)i * ld + c) = v;
        }
    } else {
        for (int u = threadIdx.x; u < rows * hdp; u += TC_THREADS) {
            int i = u / hdp, c = u % hdp;
            const bf16 *s = src(i);
            dst[(size_t)i * ld + c] = s && c < hd ? s[c] : __float2bfloat16(0.0f);
        }
    }
}

// Row sources for load_tile.
struct q_src {
    const bf16 *base;
    q_rows rows;
    int hd;
    __device__ const bf16 *operator()(int i) const {
        int64_t g = rows.index(i);
        return g < 0 ? nullptr : base + g * hd;
    }
};
struct key_src {
    const bf16 *ctx, *blk;
    key_list keys;
    int t0, hd;
    __device__ const bf16 *operator()(int i) const {
        int t = t0 + i;
        if (t >= keys.nk) return nullptr;
        bool is_ctx;
        int64_t g = keys.index(t, &is_ctx);
        return (is_ctx ? ctx : blk) + g * hd;
    }
};

// ---------------------------------------------------------------------------- tensor-core products

// C[M][N] = (acc ? C : 0) + op(A) op(B), all in shared memory, fp32 C, bf16 A and B; M, N, K
// multiples of 16. LA = row_major: A stored [M][K] (lda), col_major: stored [K][M]; LB = row_major:
// B stored [K][N], col_major: stored [N][K]. The output is dealt to the block's warps in blocks of
// R x R 16x16 tiles: with R = 2 a warp loads 2 A and 2 B fragments per k step for 4 products, half
// the shared-memory traffic of R = 1 (shared-memory bandwidth, not the tensor cores, bounds these
// small products). R = 2 is used when M and N are multiples of 32 and every warp gets a block.
template <class LA, class LB, int R>
static __device__ void tile_mma_r(float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb, int M, int N,
                                  int K, bool acc) {
    const bool a_col = std::is_same<LA, wmma::col_major>::value, b_col = std::is_same<LB, wmma::col_major>::value;
    const int E = 16 * R; // the block edge
    int warp = threadIdx.x / 32, bn = N / E, blocks = (M / E) * bn;
    for (int t = warp; t < blocks; t += TC_WARPS) {
        int i0 = (t / bn) * E, j0 = (t % bn) * E;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[R][R];
#pragma unroll
        for (int x = 0; x < R; x++)
#pragma unroll
            for (int y = 0; y < R; y++) {
                float *cp = C + (size_t)(i0 + 16 * x) * ldc + j0 + 16 * y;
                if (acc) wmma::load_matrix_sync(c[x][y], cp, ldc, wmma::mem_row_major);
                else wmma::fill_fragment(c[x][y], 0.0f);
            }
        for (int l = 0; l < K; l += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa[R];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb[R];
#pragma unroll
            for (int x = 0; x < R; x++) {
                int i = i0 + 16 * x, j = j0 + 16 * x;
                wmma::load_matrix_sync(fa[x], a_col ? A + (size_t)l * lda + i : A + (size_t)i * lda + l, lda);
                wmma::load_matrix_sync(fb[x], b_col ? B + (size_t)j * ldb + l : B + (size_t)l * ldb + j, ldb);
            }
#pragma unroll
            for (int x = 0; x < R; x++)
#pragma unroll
                for (int y = 0; y < R; y++) wmma::mma_sync(c[x][y], fa[x], fb[y], c[x][y]);
        }
#pragma unroll
        for (int x = 0; x < R; x++)
#pragma unroll
            for (int y = 0; y < R; y++)
                wmma::store_matrix_sync(C + (size_t)(i0 + 16 * x) * ldc + j0 + 16 * y, c[x][y], ldc,
                                        wmma::mem_row_major);
    }
}
template <class LA, class LB>
static __device__ void tile_mma(float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb, int M, int N,
                                int K, bool acc) {
    if (M % 32 == 0 && N % 32 == 0 && (M / 32) * (N / 32) >= TC_WARPS)
        tile_mma_r<LA, LB, 2>(C, ldc, A, lda, B, ldb, M, N, K, acc);
    else tile_mma_r<LA, LB, 1>(C, ldc, A, lda, B, ldb, M, N, K, acc);
}
typedef wmma::row_major RM;
typedef wmma::col_major CM;

// Sum over the TPR consecutive lanes that share a row.
template <int TPR> static __device__ __forceinline__ float row_sum(float v) {
    for (int o = 1; o < TPR; o <<= 1) v += __shfl_xor_sync(TC_FULL, v, o);
    return v;
}
template <int TPR> static __device__ __forceinline__ float row_max(float v) {
    for (int o = 1; o < TPR; o <<= 1) v = fmaxf(v, __shfl_xor_sync(TC_FULL, v, o));
    return v;
}

// The key list of query tile r0 of anchor ci: context from the lowest window start of its slots.
static __device__ key_list keys_of_tile(int a, int st, int64_t blk0, int k_lo, int k_hi, int B, int nkv, int kh,
                                        int window, int block_causal) {
    key_list kl;
    kl.c_lo = st;
    if (window > 0 && a + k_lo - (window - 1) > kl.c_lo) kl.c_lo = a + k_lo - (window - 1);
    kl.nctx = a > kl.c_lo ? a - kl.c_lo : 0;
    kl.nk = kl.nctx + (block_causal ? k_hi + 1 : B);
    kl.blk0 = blk0;
    kl.nkv = nkv;
    kl.kh = kh;
    return kl;
}

// Does row slot k see key t of the list?
static __device__ __forceinline__ bool key_seen(const key_list &kl, int t, int k, int a, int st, int window,
                                                int block_causal) {
    if (t >= kl.nk) return false;
    if (t < kl.nctx) return ctx_seen(kl.c_lo + t, k, a, st, window);
    return !block_causal || t - kl.nctx <= k;
}

// ---------------------------------------------------------------------------- forward

// A forward problem tells the kernel, per block, its query rows and key list (tile_ctx), per row
// what its mask depends on (row_ctx), and whether row i sees key t. Two problems share the kernel:
// the DFlash attention and the target's causal attention over packed sequences.
struct tile_ctx {
    q_rows qr;
    key_list kl;
    int a, st; // DFlash: the anchor and its sequence start
};
struct row_ctx {
    int k, start; // DFlash: slot k; causal: token k and its sequence's first token
};

struct dflash_prob {
    const int32_t *anchors, *seq_start;
    int B, window, block_causal;
    // block (ci * q_tiles + tile, kh): anchor ci's rows [tile * BQ, +BQ)
    __device__ tile_ctx tile(int bq, int G, int nq, int nkv, int q_tiles) const {
        tile_ctx t;
        int ci = blockIdx.x / q_tiles, kh = blockIdx.y;
        t.qr = {(int64_t)ci * B, nq, G, kh, (int)(blockIdx.x % q_tiles) * bq, G * B};
        t.a = anchors[ci], t.st = seq_start[ci];
        int k_hi = (min(t.qr.rows, t.qr.r0 + bq) - 1) / G;
        t.kl = keys_of_tile(t.a, t.st, (int64_t)ci * B, t.qr.r0 / G, k_hi, B, nkv, kh, window, block_causal);
        return t;
    }
    __device__ row_ctx row(const tile_ctx &t, int i) const { return {t.qr.slot(i), 0}; }
    __device__ bool seen(const tile_ctx &t, const row_ctx &r, int key) const {
        return key_seen(t.kl, key, r.k, t.a, t.st, window, block_causal);
    }
    __device__ float sink(const tile_ctx &, int) const { return -INFINITY; } // no sinks
};

// the first token of the sequence holding token t: the last s with cu[s] <= t (cu[0] = 0 <= t < cu[n])
static __device__ int seq_first(const int32_t *cu, int n_seq, int t) {
    int lo = 0, hi = n_seq;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid;
    }
    return cu[lo];
}

// window > 0: token t sees keys max(start, t - window + 1) .. t; sinks: NULL or [nq] logits, one per
// query head, that join each row's softmax denominator (ops_attention_ext, attention.h)
struct causal_prob {
    const int32_t *cu_seqlens;
    int n_seq, T, window;
    const float *sinks;
    // the first key token t sees
    __device__ int first_key(int t) const {
        int st = seq_first(cu_seqlens, n_seq, t);
        return window > 0 && t - window + 1 > st ? t - window + 1 : st;
    }
    // block (tile, kh): rows [tile * BQ, +BQ) of the T * G rows (token-major); keys from the first
    // token's first key to the last token
    __device__ tile_ctx tile(int bq, int G, int nq, int nkv, int q_tiles) const {
        tile_ctx t;
        int kh = blockIdx.y;
        t.qr = {0, nq, G, kh, (int)blockIdx.x * bq, G * T};
        int t_lo = t.qr.r0 / G, t_hi = (min(t.qr.rows, t.qr.r0 + bq) - 1) / G;
        t.kl = {first_key(t_lo), 0, 0, 0, nkv, kh};
        t.kl.nctx = t.kl.nk = t_hi + 1 - t.kl.c_lo;
        t.a = t.st = 0;
        return t;
    }
    __device__ row_ctx row(const tile_ctx &t, int i) const {
        int tok = t.qr.slot(i);
        return {tok, t.qr.index(i) >= 0 ? first_key(tok) : 0};
    }
    __device__ bool seen(const tile_ctx &t, const row_ctx &r, int key) const {
        int c = t.kl.c_lo + key;
        return key < t.kl.nk && c >= r.start && c <= r.k;
    }
    __device__ float sink(const tile_ctx &t, int i) const {
        int64_t g = t.qr.index(i);
        return sinks && g >= 0 ? sinks[g % t.qr.nq] : -INFINITY;
    }
};

// grid (tiles, nkv), TC_THREADS threads; lse may be null (not kept)
template <int BQ, int BK, class Prob>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_fwd_kernel(Prob pb, bf16 *out, float *lse, const bf16 *q, const bf16 *kb, const bf16 *vb, const bf16 *kc,
                  const bf16 *vc, int nq, int nkv, int hd, float scale, int q_tiles, int vec) {
    extern __shared__ tc_line tc_smem[];
    const int TPR = TC_THREADS / BQ;
    tc_strides sd = strides_of(hd, BK);
    tc_ptrs T = tiles_at(tc_smem, TC_FWD, BQ, BK, hd);
    bf16 *Qs = T.q, *Ks = T.k, *Vs = T.v, *Ps = T.p;
    float *Ss = T.s, *Os = T.acc;

    tile_ctx tc = pb.tile(BQ, nq / nkv, nq, nkv, q_tiles);
    const key_list &kl = tc.kl;
    load_tile(Qs, sd.ldh, BQ, hd, sd.hdp, vec, q_src{q, tc.qr, hd});
    for (int u = threadIdx.x; u < BQ * sd.ldo; u += TC_THREADS) Os[u] = 0.0f;
    int i = threadIdx.x / TPR, part = threadIdx.x % TPR; // this thread's row and column share
    int64_t gi = tc.qr.index(i);
    row_ctx rc = pb.row(tc, i);
    float m = -INFINITY, l = 0.0f;
    for (int t0 = 0; t0 < kl.nk; t0 += BK) {
        __syncthreads(); // the previous tile's K, V and P are consumed
        load_tile(Ks, sd.ldh, BK, hd, sd.hdp, vec, key_src{kc, kb, kl, t0, hd});
        load_tile(Vs, sd.ldh, BK, hd, sd.hdp, vec, key_src{vc, vb, kl, t0, hd});
        __syncthreads();
        tile_mma<RM, CM>(Ss, sd.lds, Qs, sd.ldh, Ks, sd.ldh, BQ, BK, sd.hdp, false); // S = Q K^T
        __syncthreads();
        float *srow = Ss + (size_t)i * sd.lds;
        float mt = -INFINITY;
        for (int c = part; c < BK; c += TPR) {
            float s = gi >= 0 && pb.seen(tc, rc, t0 + c) ? srow[c] * scale : -INFINITY;
            srow[c] = s;
            mt = fmaxf(mt, s);
        }
        float mn = fmaxf(m, row_max<TPR>(mt));
        float base = mn == -INFINITY ? 0.0f : mn; // nothing seen yet: every p is 0
        float corr = expf(m - base), ps = 0.0f;
        for (int c = part; c < BK; c += TPR) {
            float p = expf(srow[c] - base);
            ps += p;
            Ps[(size_t)i * sd.ldp + c] = __float2bfloat16(p);
        }
        l = l * corr + row_sum<TPR>(ps);
        m = mn;
        for (int d = part; d < sd.hdp; d += TPR) Os[(size_t)i * sd.ldo + d] *= corr;
        __syncthreads();
        tile_mma<RM, RM>(Os, sd.ldo, Ps, sd.ldp, Vs, sd.ldh, BQ, sd.hdp, BK, true); // O += P V
    }
    __syncthreads();
    float sk = pb.sink(tc, i);
    float corr = 1.0f;
    if (sk != -INFINITY) { // a sink joins the max and the sum (and no column): rescale to max(m, sink)
        float mn = fmaxf(m, sk);
        corr = expf(m - mn);
        l = l * corr + expf(sk - mn);
        m = mn;
    }
    if (gi >= 0) { // every used row sees at least itself: l > 0
        float inv = corr / l;
        for (int d = part; d < hd; d += TPR) out[gi * hd + d] = __float2bfloat16(Os[(size_t)i * sd.ldo + d] * inv);
        if (lse && part == 0) lse[gi] = m + logf(l);
    }
}

// ---------------------------------------------------------------------------- backward: dq

// D = rowsum(dout * out) of tile row i, over the TPR threads of the row (dout from the tile).
template <int TPR>
static __device__ float row_dot_out(const bf16 *dOs_row, const bf16 *out, int64_t gi, int hd, int part) {
    float s = 0.0f;
    if (gi >= 0)
        for (int d = part; d < hd; d += TPR) s += bf(dOs_row[d]) * bf(out[gi * hd + d]);
    return row_sum<TPR>(s);
}

// grid (C * q_tiles, nkv), TC_THREADS threads
template <int BQ, int BK>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_dq_kernel(dflash_prob pb, bf16 *dq, const bf16 *dout, const bf16 *out, const float *lse, const bf16 *q,
                 const bf16 *kb, const bf16 *vb, const bf16 *kc, const bf16 *vc, int nq, int nkv, int hd, float scale,
                 int q_tiles, int vec) {
    extern __shared__ tc_line tc_smem[];
    const int TPR = TC_THREADS / BQ;
    tc_strides sd = strides_of(hd, BK);
    tc_ptrs T = tiles_at(tc_smem, TC_DQ, BQ, BK, hd);
    bf16 *Qs = T.q, *dOs = T.dout, *Ks = T.k, *Vs = T.v, *dSs = T.ds;
    float *Ss = T.s, *dPs = T.dp, *dQs = T.acc;

    tile_ctx tc = pb.tile(BQ, nq / nkv, nq, nkv, q_tiles); // the forward's query tile and keys
    const key_list &kl = tc.kl;
    load_tile(Qs, sd.ldh, BQ, hd, sd.hdp, vec, q_src{q, tc.qr, hd});
    load_tile(dOs, sd.ldh, BQ, hd, sd.hdp, vec, q_src{dout, tc.qr, hd});
    for (int u = threadIdx.x; u < BQ * sd.ldo; u += TC_THREADS) dQs[u] = 0.0f;
    int i = threadIdx.x / TPR, part = threadIdx.x % TPR;
    int64_t gi = tc.qr.index(i);
    row_ctx rc = pb.row(tc, i);
    float Lr = gi >= 0 ? lse[gi] : 0.0f;
    __syncthreads();
    float Dr = row_dot_out<TPR>(dOs + (size_t)i * sd.ldh, out, gi, hd, part);
    for (int t0 = 0; t0 < kl.nk; t0 += BK) {
        __syncthreads();
        load_tile(Ks, sd.ldh, BK, hd, sd.hdp, vec, key_src{kc, kb, kl, t0, hd});
        load_tile(Vs, sd.ldh, BK, hd, sd.hdp, vec, key_src{vc, vb, kl, t0, hd});
        __syncthreads();
        tile_mma<RM, CM>(Ss, sd.lds, Qs, sd.ldh, Ks, sd.ldh, BQ, BK, sd.hdp, false);   // S = Q K^T
        tile_mma<RM, CM>(dPs, sd.lds, dOs, sd.ldh, Vs, sd.ldh, BQ, BK, sd.hdp, false); // dP = dO V^T
        __syncthreads();
        for (int c = part; c < BK; c += TPR) {
            float ds = 0.0f;
            if (gi >= 0 && pb.seen(tc, rc, t0 + c)) {
                float p = expf(Ss[(size_t)i * sd.lds + c] * scale - Lr);
                ds = p * (dPs[(size_t)i * sd.lds + c] - Dr) * scale;
            }
            dSs[(size_t)i * sd.ldp + c] = __float2bfloat16(ds);
        }
        __syncthreads();
        tile_mma<RM, RM>(dQs, sd.ldo, dSs, sd.ldp, Ks, sd.ldh, BQ, sd.hdp, BK, true); // dQ += dS K
    }
    __syncthreads();
    if (gi >= 0)
        for (int d = part; d < hd; d += TPR) dq[gi * hd + d] = __float2bfloat16(dQs[(size_t)i * sd.ldo + d]);
}

// ---------------------------------------------------------------------------- backward: dk, dv

// The keys of a dkv block: nkey rows, tile-local key c is context row c0 + c (context tiles) or
// block slot j0 + c of the anchor (block tiles).
struct kv_tile {
    int context, c0, j0, nkey;
};

// Does row slot k of the anchor at a (start st) see tile-local key c?
static __device__ __forceinline__ bool tile_key_seen(const kv_tile &kt, int c, int k, int a, int st, int window,
                                                     int block_causal) {
    if (c >= kt.nkey) return false;
    if (kt.context) return kt.c0 + c < a && ctx_seen(kt.c0 + c, k, a, st, window);
    return !block_causal || kt.j0 + c <= k;
}

// Adds to dK, dV (shared) what the query rows [r0, rows) of anchor ci give the block's key tile.
template <int BQ, int BK>
static __device__ void dkv_accumulate(const tc_ptrs &T, const tc_strides &sd, const kv_tile &kt, int ci, int r0,
                                      int rows, const bf16 *dout, const bf16 *out, const float *lse, const bf16 *q,
                                      int a, int st, int B, int nq, int nkv, int hd, float scale, int window,
                                      int block_causal, int vec) {
    const int TPR = TC_THREADS / BQ;
    bf16 *Ks = T.k, *Vs = T.v, *Qs = T.q, *dOs = T.dout, *Ps = T.p, *dSs = T.ds;
    float *Ss = T.s, *dPs = T.dp, *dKs = T.dk, *dVs = T.dv;
    int G = nq / nkv, kh = blockIdx.y;
    q_rows qr = {(int64_t)ci * B, nq, G, kh, r0, rows};
    __syncthreads(); // the previous query tile is consumed
    load_tile(Qs, sd.ldh, BQ, hd, sd.hdp, vec, q_src{q, qr, hd});
    load_tile(dOs, sd.ldh, BQ, hd, sd.hdp, vec, q_src{dout, qr, hd});
    int i = threadIdx.x / TPR, part = threadIdx.x % TPR;
    int64_t gi = qr.index(i);
    int k = gi >= 0 ? qr.slot(i) : 0;
    float Lr = gi >= 0 ? lse[gi] : 0.0f;
    __syncthreads();
    float Dr = row_dot_out<TPR>(dOs + (size_t)i * sd.ldh, out, gi, hd, part);
    tile_mma<RM, CM>(Ss, sd.lds, Qs, sd.ldh, Ks, sd.ldh, BQ, BK, sd.hdp, false);   // S = Q K^T
    tile_mma<RM, CM>(dPs, sd.lds, dOs, sd.ldh, Vs, sd.ldh, BQ, BK, sd.hdp, false); // dP = dO V^T
    __syncthreads();
    for (int c = part; c < BK; c += TPR) {
        float p = 0.0f, ds = 0.0f;
        if (gi >= 0 && tile_key_seen(kt, c, k, a, st, window, block_causal)) {
            p = expf(Ss[(size_t)i * sd.lds + c] * scale - Lr);
            ds = p * (dPs[(size_t)i * sd.lds + c] - Dr) * scale;
        }
        Ps[(size_t)i * sd.ldp + c] = __float2bfloat16(p);
        dSs[(size_t)i * sd.ldp + c] = __float2bfloat16(ds);
    }
    __syncthreads();
    tile_mma<CM, RM>(dVs, sd.ldo, Ps, sd.ldp, dOs, sd.ldh, BK, sd.hdp, BQ, true); // dV += P^T dO
    tile_mma<CM, RM>(dKs, sd.ldo, dSs, sd.ldp, Qs, sd.ldh, BK, sd.hdp, BQ, true); // dK += dS^T Q
}

// Block tiles: grid (C * kb_tiles, nkv); context tiles: grid (TC_CTX_BLOCKS, nkv), striding over
// the context up to the last anchor (found here: the anchors live on the device).
template <int BQ, int BK>
static __global__ void __launch_bounds__(TC_THREADS)
    tc_dkv_kernel(bf16 *dkb, bf16 *dvb, float *dkc, float *dvc, const bf16 *dout, const bf16 *out, const float *lse,
                  const bf16 *q, const bf16 *kb, const bf16 *vb, const bf16 *kc, const bf16 *vc,
                  const int32_t *anchors, const int32_t *seq_start, int C, int B, int nq, int nkv, int hd, float scale,
                  int window, int block_causal, int context, int kb_tiles, int vec) {
    extern __shared__ tc_line tc_smem[];
    tc_strides sd = strides_of(hd, BK);
    tc_ptrs T = tiles_at(tc_smem, TC_DKV, BQ, BK, hd);
    bf16 *Ks = T.k, *Vs = T.v;
    float *dKs = T.dk, *dVs = T.dv;
    int kh = blockIdx.y, G = nq / nkv, R = G * B;

    if (!context) {
        int ci = blockIdx.x / kb_tiles;
        kv_tile kt = {0, 0, (int)(blockIdx.x % kb_tiles) * BK, 0};
        kt.nkey = min(BK, B - kt.j0);
        key_list kl = {0, 0, B, (int64_t)ci * B, nkv, kh};
        load_tile(Ks, sd.ldh, BK, hd, sd.hdp, vec, key_src{kc, kb, kl, kt.j0, hd});
        load_tile(Vs, sd.ldh, BK, hd, sd.hdp, vec, key_src{vc, vb, kl, kt.j0, hd});
        for (int u = threadIdx.x; u < BK * sd.ldo; u += TC_THREADS) dKs[u] = dVs[u] = 0.0f;
        int a = anchors[ci], st = seq_start[ci];
        for (int r0 = block_causal ? kt.j0 * G : 0; r0 < R; r0 += BQ) // causal: slots k >= j0 only
            dkv_accumulate<BQ, BK>(T, sd, kt, ci, r0, R, dout, out, lse, q, a, st, B, nq, nkv, hd, scale, window,
                                   block_causal, vec);
        __syncthreads();
        for (int u = threadIdx.x; u < kt.nkey * hd; u += TC_THREADS) {
            int c = u / hd, d = u % hd;
            int64_t g = (((int64_t)ci * B + kt.j0 + c) * nkv + kh) * hd + d;
            dkb[g] = __float2bfloat16(dKs[(size_t)c * sd.ldo + d]);
            dvb[g] = __float2bfloat16(dVs[(size_t)c * sd.ldo + d]);
        }
        return;
    }

    int *s_seen = T.misc;
    if (threadIdx.x == 0) *s_seen = 0;
    __syncthreads();
    int mx = 0;
    for (int ci = threadIdx.x; ci < C; ci += TC_THREADS) mx = max(mx, anchors[ci]);
    atomicMax(s_seen, mx);
    __syncthreads();
    int S = *s_seen; // context rows [0, S) can be seen
    for (int c0 = blockIdx.x * BK; c0 < S; c0 += gridDim.x * BK) {
        kv_tile kt = {1, c0, 0, min(BK, S - c0)};
        key_list kl = {c0, kt.nkey, kt.nkey, 0, nkv, kh};
        __syncthreads(); // the previous tile's dK, dV are written out
        load_tile(Ks, sd.ldh, BK, hd, sd.hdp, vec, key_src{kc, kb, kl, 0, hd});
        load_tile(Vs, sd.ldh, BK, hd, sd.hdp, vec, key_src{vc, vb, kl, 0, hd});
        for (int u = threadIdx.x; u < BK * sd.ldo; u += TC_THREADS) dKs[u] = dVs[u] = 0.0f;
        for (int ci = 0; ci < C; ci++) {
            int a = anchors[ci], st = seq_start[ci];
            if (c0 >= a || c0 + kt.nkey <= st) continue; // the tile is not in [st, a)
            int k_top = B - 1;                           // the last slot whose window reaches the tile
            if (window > 0) k_top = min(k_top, c0 + kt.nkey - 1 - a + window - 1);
            if (k_top < 0) continue;
            int rows = (k_top + 1) * G;
            for (int r0 = 0; r0 < rows; r0 += BQ)
                dkv_accumulate<BQ, BK>(T, sd, kt, ci, r0, rows, dout, out, lse, q, a, st, B, nq, nkv, hd, scale,
                                       window, block_causal, vec);
        }
        __syncthreads();
        for (int u = threadIdx.x; u < kt.nkey * hd; u += TC_THREADS) {
            int c = u / hd, d = u % hd;
            int64_t g = ((int64_t)(c0 + c) * nkv + kh) * hd + d;
            dkc[g] += dKs[(size_t)c * sd.ldo + d];
            dvc[g] += dVs[(size_t)c * sd.ldo + d];
        }
    }
}

// ---------------------------------------------------------------------------- host side

// Tile shapes (BQ, BK) in order of preference. The first whose shared memory fits 113 KiB (two
// blocks per SM on sm_90's 227 KiB) is taken, else the first that fits the device at all.
// The narrow shapes let a small shared memory (sm_120: 99 KiB per block) run head_dim 256.
enum tc_cfg { CFG_64_64, CFG_64_32, CFG_32_32, CFG_32_16, CFG_16_32, CFG_COUNT, CFG_NONE = -1 };
static const int cfg_bq[CFG_COUNT] = {64, 64, 32, 32, 16}, cfg_bk[CFG_COUNT] = {64, 32, 32, 16, 32};
#define TC_SMEM_PREFERRED (113 * 1024)

// The current device's opt-in shared memory per block, asked once per device (every attention
// call picks its tile shape from it).
static int device_smem_optin(void) {
    static int known[64]; // 0: not asked yet
    int dev = 0, v = 0;
    cuda_check(cudaGetDevice(&dev));
    if (dev >= 0 && dev < 64 && known[dev]) return known[dev];
    cuda_check(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (dev >= 0 && dev < 64) known[dev] = v;
    return v;
}

static size_t smem_bytes(int kind, int cfg, int hd) { return tc_layout(kind, cfg_bq[cfg], cfg_bk[cfg], hd).total; }
static int pick_cfg(int kind, int hd) {
    size_t lim = (size_t)device_smem_optin();
    for (int pass = 0; pass < 2; pass++) {
        size_t cap = pass == 0 && lim > TC_SMEM_PREFERRED ? TC_SMEM_PREFERRED : lim;
        for (int c = 0; c < CFG_COUNT; c++)
            if (smem_bytes(kind, c, hd) <= cap) return c;
    }
    return CFG_NONE;
}

// DFLASH_CUDA_ATTN: "tiled" (the default: tile shape by head_dim), "scalar", or "tiled-BQxBK" (one of
// the shapes, forced: for tests and benchmarks). Returns the configuration, CFG_NONE for the scalar path, or
// CFG_COUNT for "pick one".
static int tc_wanted(void) {
    const char *e = getenv("DFLASH_CUDA_ATTN");
    if (!e || !*e || strcmp(e, "tiled") == 0) return CFG_COUNT;
    if (strcmp(e, "scalar") == 0) return CFG_NONE;
    for (int c = 0; c < CFG_COUNT; c++) {
        char name[32];
        snprintf(name, sizeof name, "tiled-%dx%d", cfg_bq[c], cfg_bk[c]);
        if (strcmp(e, name) == 0) return c;
    }
    fatal("DFLASH_CUDA_ATTN=%s: expected tiled, scalar or tiled-BQxBK (64x64, 64x32, 32x32, 32x16, 16x32)", e);
}

// The configuration for a kernel kind at this head_dim, or CFG_NONE (the scalar kernels run).
static int choose_cfg(int kind, int hd) {
    int want = tc_wanted();
    if (want == CFG_NONE || want == CFG_COUNT) return want == CFG_NONE ? CFG_NONE : pick_cfg(kind, hd);
    if (smem_bytes(kind, want, hd) > (size_t)device_smem_optin())
        fatal("DFLASH_CUDA_ATTN=%s: the tiles need %zu bytes of shared memory at head_dim %d, more than the device's %d",
              getenv("DFLASH_CUDA_ATTN"), smem_bytes(kind, want, hd), hd, device_smem_optin());
    return want;
}

extern "C" int attn_tc_path_fits(const char *path, int hd, int backward) {
    for (int c = 0; c < CFG_COUNT; c++) {
        char name[32];
        snprintf(name, sizeof name, "tiled-%dx%d", cfg_bq[c], cfg_bk[c]);
        if (!path || strcmp(path, name) != 0) continue;
        size_t lim = (size_t)device_smem_optin();
        return smem_bytes(TC_FWD, c, hd) <= lim &&
               (!backward || (smem_bytes(TC_DQ, c, hd) <= lim && smem_bytes(TC_DKV, c, hd) <= lim));
    }
    return 1;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <class K> static void allow_smem(K kernel, size_t smem) {
    if (smem > 48 * 1024) cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

struct tc_args {
    cudaStream_t st;
    int C, B, nq, nkv, hd, window, block_causal, vec;
    float scale;
};

// job.run<BQ, BK>() for the tile shape cfg: each kernel is instantiated for every shape.
template <class Job> static void dispatch(int cfg, const Job &job) {
    switch (cfg) {
    case CFG_64_64: job.template run<64, 64>(); break;
    case CFG_64_32: job.template run<64, 32>(); break;
    case CFG_32_32: job.template run<32, 32>(); break;
    case CFG_32_16: job.template run<32, 16>(); break;
    default: job.template run<16, 32>(); break;
    }
}

// units x (rows per unit / BQ) query tiles per kv head: anchors (DFlash) or the one packed batch (causal)
template <class Prob> struct fwd_job {
    tc_args A;
    Prob pb;
    int rows, units;
    bf16 *out;
    float *lse;
    const bf16 *q, *kb, *vb, *kc, *vc;
    template <int BQ, int BK> void run() const {
        int q_tiles = (rows + BQ - 1) / BQ;
        size_t smem = tc_layout(TC_FWD, BQ, BK, A.hd).total;
        auto kernel = tc_fwd_kernel<BQ, BK, Prob>;
        allow_smem(kernel, smem);
        kernel<<<dim3((unsigned)(units * q_tiles), (unsigned)A.nkv), TC_THREADS, smem, A.st>>>(
            pb, out, lse, q, kb, vb, kc, vc, A.nq, A.nkv, A.hd, A.scale, q_tiles, A.vec);
        cuda_check_launch();
    }
};

struct bwd_job {
    tc_args A;
    bf16 *dq, *dkb, *dvb;
    float *dkc, *dvc;
    const bf16 *dout, *out;
    const float *lse;
    const bf16 *q, *kb, *vb, *kc, *vc;
    const int32_t *anchors, *seq_start;
    int kind; // TC_DQ or TC_DKV
    template <int BQ, int BK> void run() const {
        size_t smem = tc_layout(kind, BQ, BK, A.hd).total;
        if (kind == TC_DQ) {
            int q_tiles = (A.nq / A.nkv * A.B + BQ - 1) / BQ;
            auto kernel = tc_dq_kernel<BQ, BK>;
            allow_smem(kernel, smem);
            dflash_prob pb = {anchors, seq_start, A.B, A.window, A.block_causal};
            kernel<<<dim3((unsigned)(A.C * q_tiles), (unsigned)A.nkv), TC_THREADS, smem, A.st>>>(
                pb, dq, dout, out, lse, q, kb, vb, kc, vc, A.nq, A.nkv, A.hd, A.scale, q_tiles, A.vec);
            cuda_check_launch();
            return;
        }
        int kb_tiles = (A.B + BK - 1) / BK;
        auto kernel = tc_dkv_kernel<BQ, BK>;
        allow_smem(kernel, smem);
        for (int context = 0; context < 2; context++) {
            dim3 grid(context ? TC_CTX_BLOCKS : (unsigned)(A.C * kb_tiles), (unsigned)A.nkv);
            kernel<<<grid, TC_THREADS, smem, A.st>>>(dkb, dvb, dkc, dvc, dout, out, lse, q, kb, vb, kc, vc, anchors,
                                                     seq_start, A.C, A.B, A.nq, A.nkv, A.hd, A.scale, A.window,
                                                     A.block_causal, context, kb_tiles, A.vec);
            cuda_check_launch();
        }
    }
};

// The grid's x extent (query tiles of 16 rows at the least) and y extent nkv must fit; otherwise
// the scalar kernels run.
static int grid_fits(int64_t units, int64_t rows_per_unit, int nq, int nkv) {
    return nkv >= 1 && nkv <= 65535 && nq % nkv == 0 && units * ((rows_per_unit + 15) / 16) < INT32_MAX;
}

extern "C" int dflash_tc_forward(backend *be, void *out, float *lse, const void *q, const void *kb, const void *vb,
                                 const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start,
                                 int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal) {
    int cfg = choose_cfg(TC_FWD, hd);
    if (cfg == CFG_NONE || !grid_fits(C, (int64_t)nq / nkv * B, nq, nkv)) return 0;
    tc_args A = {(cudaStream_t)cuda_stream(be), C, B, nq, nkv, hd, window, block_causal, 0, scale};
    A.vec = hd % 8 == 0 && aligned16(out) && aligned16(q) && aligned16(kb) && aligned16(vb) && aligned16(kc) &&
            aligned16(vc);
    fwd_job<dflash_prob> job = {A, {anchors, seq_start, B, window, block_causal}, nq / nkv * B, C, (bf16 *)out, lse,
                                (const bf16 *)q, (const bf16 *)kb, (const bf16 *)vb, (const bf16 *)kc,
                                (const bf16 *)vc};
    dispatch(cfg, job);
    return 1;
}

extern "C" int dflash_tc_backward(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc,
                                  const void *dout, const void *out, const float *lse, const void *q, const void *kb,
                                  const void *vb, const void *kc, const void *vc, const int32_t *anchors,
                                  const int32_t *seq_start, int C, int B, int nq, int nkv, int hd, float scale,
                                  int window, int block_causal) {
    int cfg_dq = choose_cfg(TC_DQ, hd), cfg_kv = choose_cfg(TC_DKV, hd);
    if (cfg_dq == CFG_NONE || cfg_kv == CFG_NONE || !grid_fits(C, (int64_t)nq / nkv * B, nq, nkv)) return 0;
    tc_args A = {(cudaStream_t)cuda_stream(be), C, B, nq, nkv, hd, window, block_causal, 0, scale};
    A.vec = hd % 8 == 0 && aligned16(dout) && aligned16(q) && aligned16(kb) && aligned16(vb) && aligned16(kc) &&
            aligned16(vc);
    bwd_job job = {A, (bf16 *)dq, (bf16 *)dkb, (bf16 *)dvb, dkc, dvc, (const bf16 *)dout, (const bf16 *)out, lse,
                   (const bf16 *)q, (const bf16 *)kb, (const bf16 *)vb, (const bf16 *)kc, (const bf16 *)vc,
                   anchors, seq_start, TC_DQ};
    dispatch(cfg_dq, job);
    job.kind = TC_DKV;
    dispatch(cfg_kv, job);
    return 1;
}

extern "C" int attn_tc_causal(backend *be, void *out, const void *q, const void *k, const void *v,
                              const int32_t *cu_seqlens, int n_seq, int T, int nq, int nkv, int hd, float scale,
                              int window, const float *sinks) {
    int cfg = choose_cfg(TC_FWD, hd);
    if (cfg == CFG_NONE || nkv < 1 || nq % nkv || !grid_fits(1, (int64_t)nq / nkv * T, nq, nkv)) return 0;
    tc_args A = {(cudaStream_t)cuda_stream(be), 0, 0, nq, nkv, hd, 0, 1, 0, scale};
    A.vec = hd % 8 == 0 && aligned16(out) && aligned16(q) && aligned16(k) && aligned16(v);
    // all rows of a kv head (T tokens x its query heads), cut into tiles; keys in the "context" slot
    fwd_job<causal_prob> job = {A, {cu_seqlens, n_seq, T, window, sinks}, nq / nkv * T, 1, (bf16 *)out, nullptr, (const bf16 *)q,
                                nullptr, nullptr, (const bf16 *)k, (const bf16 *)v};
    dispatch(cfg, job);
    return 1;
}
