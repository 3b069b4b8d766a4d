// target_decode.h: decoding with a KV cache over a loaded target_model (the teacher's weights),
// greedy or sampled, for making self-distilled data (dflash_rank --mode regenerate, dflash_tool
// make-data).
//
// A decoder holds up to max_seqs sequences decoded in lockstep. Each sequence is prefilled with its
// prompt (the packed forward's layer code over the prompt's tokens, keys and values after RoPE stored
// in the cache; several prompts are prefilled as one pack of variable-length sequences, at most
// `rows` tokens, in one pass over the weights), then every step feeds one token per sequence: only the new
// token's layer outputs are computed, its query attends to the cached keys/values of its own
// sequence, and RoPE positions continue from the prompt (a sequence's positions are 0, 1, 2, ...).
// Sequences may have prompts of different lengths; each keeps its own position.
//
// Qwen3.5 / Qwen3.6 hybrid targets (SPEC §2.1): the full-attention layers cache keys and values as
// above (gated attention: the mixer's attn_project, the attention, its attn_finish; target_arch.h);
// each Gated DeltaNet layer keeps, per sequence, the conv's last K-1 inputs and the delta rule's
// fp32 state (transformers' conv_state and recurrent_state), zeroed at the prefill. A prefill runs
// the packed forward's mixer (target_mixer_qwen3_5) over its pack, each prompt one sequence with its
// slot's state; a step runs it over n_seq rows, each its own sequence of one token.
//
// Continuous batching (regenerate.h): the live sequences always occupy slots 0 .. n_seq-1.
// target_decoder_add_batch prefills k new prompts into slots n_seq .. n_seq+k-1 (one pack) while the
// others keep their caches;
// target_decoder_remove ends the sequence of slot s and moves the last live sequence into that slot
// (its cached keys/values and linear states are copied), so a step always runs over n_seq rows.
// A sequence's numbers do not depend on the slot it sits in nor on its neighbours, except through
// GEMM rounding over a different number of rows (a prompt prefilled alone or in a pack: on the CPU
// the same bits while the pack has at most 32 rows, gemm_rows.c; on CUDA, and past 32 rows, cuBLAS /
// OpenBLAS may sum in another order, and the Gated DeltaNet's form on CUDA follows the pack's
// tokens per sequence).
//
// The greedy token is the argmax of the lm_head logits (lowest id on ties), computed over vocabulary
// tiles by the teacher's running top-k (k = 1): the same rule as topk_idx[t][0] of target_forward.
// A decoder made with sampling settings also keeps every row's full logits [max_seqs, V] f32 and
// samples with ops_sample (ops_decode.h; decode_sample.h's rule) from one draw per row that the
// caller makes on the host (its Philox stream) and passes in.
//
// A stage of a teacher group (m's layer range, target.h): the decoder caches and runs its own layers
// only; a stage after the first does not embed (the caller puts the previous stage's residual
// stream, [R, H] act, in w.x before add / step), a stage before the last computes no token (its
// output is w.x, the caller sends it on; next is left as it was). regen_link.h drives the stages.
//
// Memory: one arena on the backend, sized up front for max_seqs x max_len cached positions and the
// work buffers of a prefill pack of rows = max(max_len, max_seqs) tokens and up to max_seqs
// sequences; nothing is allocated while decoding.
//
// Backend: CPU (fp32) or CUDA (bf16 activations, fp32 states and softmax). Everything runs through
// the backend ops on the device: the layers (ops.h, ops_moe.h, backend_gemm), the
// cache append and the single-query attention over the cache (ops_kv_append, ops_attention_decode),
// the state moves of target_decoder_remove (ops_copy_2d), the running argmax and the sampling. The
// host uploads a step's token ids and positions (and the draws) and reads back only the n_seq
// chosen token ids.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/arena.h"
#include "teacher/decode_sample.h"
#include "teacher/target.h"

typedef struct {
    target_model *m;
    int max_seqs;             // sequences decoded in lockstep
    int max_len;              // cached positions per sequence (prompt + generated - 1)
    int rows;                 // rows of the work buffers: max(max_len, max_seqs)
    int vocab_tile;           // lm_head tile
    arena mem;                // everything below, on the backend
    // The work buffers [rows, ...] as a target_work view, so the layer code of the packed forward
    // (target_arch.h: the Qwen3.5 mixer, the halves of its gated attention) runs on them: x, xn, q,
    // k, v, att, gate, up (act), tokens, pos, cu_seqlens ([max_seqs + 1] i32), and for Qwen3.5 the
    // hybrid buffers of its mixer's work_carve. Its logits and outputs are unused (NULL).
    target_work w;
    int n_att, n_lin;         // attention layers (K/V cache) and Gated DeltaNet layers (conv + recurrent state)
    int *slot;                // host [n_layers]: layer l's index among the attention or among the linear layers
    void *k_cache, *v_cache;  // [n_att, max_seqs, max_len, kvd_max] act (keys after RoPE); slot a's rows are
                              // slot_kvd[a] = its layer's nkv*hd wide, packed from the slot's start
    int *slot_kvd;            // host [n_att]
    size_t kvd_max;           // the widest layer's nkv*hd (Gemma 4's full layers have heads of their own)
    void *conv_state;         // [n_lin, max_seqs, K-1, C] act: the conv's last K-1 inputs per sequence
    float *rec_state;         // [n_lin, max_seqs, Hv, dk, dv] f32: the delta rule's state per sequence
    void *last;               // [max_seqs, H] act: each sequence's newest hidden state
    void *att_work;           // ops_attention_decode's work (CPU: a step's scores; CUDA: none)
    int sampling;             // made for sampling (smp.temperature > 0)
    decode_sampling smp;
    int logits_ld;            // V when sampling, else vocab_tile
    float *logits;            // [max_seqs, logits_ld] f32: one tile, or every row's full logits when sampling
    void *smp_work;           // ops_sample's work (sampling only)
    double *u;                // [max_seqs] f64: a step's draws
    float *top_val, *run_m, *run_s, *lse; // [max_seqs] f32: running argmax / LSE state
    int32_t *top_idx;         // [max_seqs] i32
    int n_seq;                // sequences of the current batch (0 before a prefill)
    int *len;                 // host [max_seqs]: positions cached per sequence
    int32_t *pos_host;        // host [rows]
    int32_t *cu_host;         // host [max_seqs + 1]
} target_decoder;

// target_decoder_bytes: the arena size target_decoder_init allocates for these sizes.
size_t target_decoder_bytes(const target_model *m, int max_seqs, int max_len, int vocab_tile,
                            const decode_sampling *smp);
// target_decoder_init: -1 with error_set on sizes < 1, a head_dim the CUDA decode attention does not
// take (> OPS_DECODE_HD_MAX), or when the arena cannot be allocated. vocab_tile 0 = min(V, 8192).
// smp: the sampling settings (NULL or temperature <= 0: greedy only; otherwise the decoder also
// keeps every row's full logits for ops_sample).
int target_decoder_init(target_decoder *d, target_model *m, int max_seqs, int max_len, int vocab_tile,
                        const decode_sampling *smp);
void target_decoder_free(target_decoder *d);

// target_decoder_prefill: start n_seq sequences (1..max_seqs) with prompts[s][0:plen[s]] (host),
// 1 <= plen[s] <= max_len, ids in [0, V). next[s] (host) = each sequence's greedy next token.
// Replaces whatever was cached; consecutive prompts are prefilled in packs of at most rows tokens.
// -1 with error_set on bad input.
int target_decoder_prefill(target_decoder *d, int n_seq, const int32_t *const *prompts, const int *plen,
                           int32_t *next);
// target_decoder_step: append tokens[s] (host, one per sequence) to every sequence and compute
// next[s], the greedy token after it. -1 with error_set when a sequence's cache is full (max_len
// positions) or a token is outside the vocabulary.
int target_decoder_step(target_decoder *d, const int32_t *tokens, int32_t *next);
// target_decoder_generate: prefill, then gen_len greedy tokens per sequence into
// out[s * gen_len + j] (host). Needs plen[s] + gen_len - 1 <= max_len.
int target_decoder_generate(target_decoder *d, int n_seq, const int32_t *const *prompts, const int *plen,
                            int gen_len, int32_t *out);

// target_decoder_step_sample: target_decoder_step, where next[s] is sampled (ops_sample, the
// decoder's settings) with the draw u[s] (host [n_seq], in [0, 1)) when u is not NULL (the decoder
// must have been made with sampling settings), else greedy.
int target_decoder_step_sample(target_decoder *d, const int32_t *tokens, const double *u, int32_t *next);

// target_decoder_reset: no live sequence (the caches are reused by the next target_decoder_add).
static inline void target_decoder_reset(target_decoder *d) { d->n_seq = 0; }
// target_decoder_add: prefill prompt[0:plen] (host, 1 <= plen <= max_len, ids in [0, V)) into slot
// n_seq while the live sequences keep theirs; *next = its next token: greedy when u is NULL, else
// sampled with the draw *u (as target_decoder_step_sample). Returns the slot (the old n_seq), or -1
// with error_set when every slot is taken or the prompt is bad.
int target_decoder_add(target_decoder *d, const int32_t *prompt, int plen, const double *u, int32_t *next);
// target_decoder_add_batch: target_decoder_add of k prompts in one pass over the weights: prompt i
// is plen[i] tokens of ids (host, packed one after another, sum plen <= rows), into slot n_seq + i;
// next[i] its next token (u NULL: greedy; else sampled with the draw u[i]). Returns the first slot
// (the old n_seq), or -1 with error_set when fewer than k slots are free, the pack exceeds the work
// buffers (rows tokens) or a prompt is bad. k = 1 is target_decoder_add.
int target_decoder_add_batch(target_decoder *d, int k, const int32_t *ids, const int *plen, const double *u,
                             int32_t *next);
// target_decoder_remove: end the sequence in slot s (0 <= s < n_seq); the sequence of slot n_seq-1,
// when s is not that slot, moves into slot s (the caller renumbers it). n_seq decreases by one.
void target_decoder_remove(target_decoder *d, int s);
