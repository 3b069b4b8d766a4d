// tool_make_target.c: `dflash_tool make-target OUT_DIR --arch qwen3|llama ...`
//
// Writes a random-weight target model directory in the exact Hugging Face layout (SPEC §2), which
// transformers loads with AutoModelForCausalLM.from_pretrained: config.json, and model.safetensors
// or N shards model-0000k-of-0000N.safetensors + model.safetensors.index.json. It is what the tests
// and the reference fixtures (tests/reference/make_teacher_fixtures.py) run the teacher on.
//
// Weights are a pure function of the arguments: tensor number i (in the order written) draws from
// the Philox stream rng_init(seed, 0, i). The scales are chosen so every part of the forward
// matters and the logits are well separated (transformers' initializer_range of 0.02 would leave
// the MLP of a 64-wide model contributing ~1e-3 of the residual stream, and near-equal logits
// would make the top-k order fragile):
//   linear weights [out, in]       N(0, 1/in)        (each projection keeps the scale of its input)
//   embed_tokens, lm_head [V, H]   N(0, 16/H)        (logits of std ~4 behind the final RMSNorm)
//   RMSNorm weights (all of them)  1 + 0.1 N(0, 1)   (so a missing or misplaced norm shows)
// drawn in fp32 and rounded to --dtype (round to nearest even).
//
// The directory is built under OUT_DIR.tmp.<pid> and renamed to OUT_DIR at the end, so a failed
// run leaves nothing behind. OUT_DIR must not exist yet.
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/core/rng.h"
#include "common/data/safetensors.h"
#include "teacher/target_config.h"
#include "tools/tools.h"

static void make_target_usage(FILE *f) {
    fprintf(f,
            "usage: dflash_tool make-target OUT_DIR --arch qwen3|llama --layers L --hidden H --heads NQ\n"
            "                               --kv-heads NKV --vocab V [--head-dim D] [--intermediate I]\n"
            "                               [--seed S] [--tie] [--rope-theta X] [--rope-llama3 FACTOR]\n"
            "                               [--rope-original-max P0] [--dtype bf16|f16|f32] [--shards N]\n"
            "                               [--max-positions P] [--eps E]\n"
            "\n"
            "Write a random-weight Qwen3ForCausalLM / LlamaForCausalLM model directory in the Hugging Face\n"
            "layout (config.json + model.safetensors, or N shards + model.safetensors.index.json).\n"
            "\n"
            "  --head-dim D          default H / NQ\n"
            "  --intermediate I      MLP width, default 3*H\n"
            "  --seed S              weights are a function of the arguments and S (default 0)\n"
            "  --tie                 tie_word_embeddings: no lm_head.weight, the embedding serves\n"
            "  --rope-theta X        default 10000\n"
            "  --rope-llama3 FACTOR  llama3 RoPE scaling (low_freq_factor 1, high_freq_factor 4)\n"
            "  --rope-original-max P0  its original_max_position_embeddings (default 8192)\n"
            "  --dtype               weight dtype (default bf16)\n"
            "  --shards N            split the weights into N files (default 1)\n"
            "  --max-positions P     max_position_embeddings (default 32768)\n"
            "  --eps E               rms_norm_eps (default 1e-6)\n");
}

// ---------------------------------------------------------------- the tensor list

typedef enum { MT_LINEAR, MT_VOCAB, MT_NORM } mt_kind;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    mt_kind kind;
    int shard; // 0-based file index
} mt_tensor;

typedef struct {
    int n, cap;
    mt_tensor *t;
} mt_list;

// mt_add: "model.layers.{layer}.{name}", or `name` itself when layer < 0; cols 0 = a vector.
static void mt_add(mt_list *l, mt_kind kind, int64_t rows, int64_t cols, int64_t layer, const char *name) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
    }
    mt_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    if (layer < 0) snprintf(t->name, sizeof t->name, "%s", name);
    else snprintf(t->name, sizeof t->name, "model.layers.%lld.%s", (long long)layer, name);
    t->kind = kind;
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
}

// mt_build_list: the SPEC §2 tensor names, in the order written (and numbered for the RNG).
static void mt_build_list(mt_list *l, const target_config *c) {
    int64_t H = c->hidden, D = c->head_dim, I = c->intermediate;
    mt_add(l, MT_VOCAB, c->vocab, H, -1, "model.embed_tokens.weight");
    for (int64_t i = 0; i < c->n_layers; i++) {
        mt_add(l, MT_NORM, H, 0, i, "input_layernorm.weight");
        mt_add(l, MT_LINEAR, c->n_heads * D, H, i, "self_attn.q_proj.weight");
        mt_add(l, MT_LINEAR, c->n_kv_heads * D, H, i, "self_attn.k_proj.weight");
        mt_add(l, MT_LINEAR, c->n_kv_heads * D, H, i, "self_attn.v_proj.weight");
        mt_add(l, MT_LINEAR, H, c->n_heads * D, i, "self_attn.o_proj.weight");
        if (c->arch == ARCH_QWEN3) {
            mt_add(l, MT_NORM, D, 0, i, "self_attn.q_norm.weight");
            mt_add(l, MT_NORM, D, 0, i, "self_attn.k_norm.weight");
        }
        mt_add(l, MT_NORM, H, 0, i, "post_attention_layernorm.weight");
        mt_add(l, MT_LINEAR, I, H, i, "mlp.gate_proj.weight");
        mt_add(l, MT_LINEAR, I, H, i, "mlp.up_proj.weight");
        mt_add(l, MT_LINEAR, H, I, i, "mlp.down_proj.weight");
    }
    mt_add(l, MT_NORM, H, 0, -1, "model.norm.weight");
    if (!c->tie_embeddings) mt_add(l, MT_VOCAB, c->vocab, H, -1, "lm_head.weight");
}

static int64_t mt_numel(const mt_tensor *t) { return t->ndim == 2 ? t->shape[0] * t->shape[1] : t->shape[0]; }

// mt_assign_shards: consecutive runs of tensors of about total/N bytes each, none empty.
static void mt_assign_shards(mt_list *l, int n_shards, size_t elem) {
    int64_t total = 0;
    for (int i = 0; i < l->n; i++) total += mt_numel(&l->t[i]) * (int64_t)elem;
    int s = 0, in_shard = 0;
    int64_t cum = 0;
    for (int i = 0; i < l->n; i++) {
        int shards_left = n_shards - 1 - s; // not yet started
        if (in_shard > 0 && shards_left > 0 &&
            (l->n - i <= shards_left || cum * n_shards >= total * (int64_t)(s + 1))) {
            s++;
            in_shard = 0;
        }
        l->t[i].shard = s;
        in_shard++;
        cum += mt_numel(&l->t[i]) * (int64_t)elem;
    }
}

// mt_fill: tensor number `id`'s values, fp32, into v.
static void mt_fill(const mt_tensor *t, const target_config *c, uint64_t seed, uint32_t id, float *v) {
    rng r;
    rng_init(&r, seed, 0, id);
    int64_t n = mt_numel(t);
    double std = t->kind == MT_LINEAR ? 1.0 / sqrt((double)t->shape[1]) : 4.0 / sqrt((double)c->hidden);
    for (int64_t j = 0; j < n; j++) {
        double z = rng_normal(&r);
        v[j] = (float)(t->kind == MT_NORM ? 1.0 + 0.1 * z : std * z);
    }
}

// ---------------------------------------------------------------- files

static int mt_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return error_set("%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (!ok) return error_set("%s: %s", path, strerror(err));
    return 0;
}

static void mt_fsync_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    fsync(dirfd(d));
    closedir(d);
}

// mt_remove_dir: the temporary directory and the files in it (it holds no subdirectories).
static void mt_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[4600];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void mt_shard_name(char *buf, size_t n, int shard, int n_shards) {
    if (n_shards == 1) snprintf(buf, n, "model.safetensors");
    else snprintf(buf, n, "model-%05d-of-%05d.safetensors", shard + 1, n_shards);
}

// mt_write_model: every file of the model into dir (an empty directory).
static int mt_write_model(const char *dir, const target_config *c, mt_list *l, uint64_t seed, dtype dt,
                          int n_shards) {
    char path[4400], file[64];
    char *json = target_config_to_json(c);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = mt_write_text(path, json);
    free(json);
    if (rc) return -1;

    size_t elem = dtype_size(dt);
    mt_assign_shards(l, n_shards, elem);
    int64_t total_bytes = 0;
    for (int s = 0; s < n_shards && rc == 0; s++) {
        // One shard's tensors are in memory at a time.
        int first = -1, last = -1;
        for (int i = 0; i < l->n; i++)
            if (l->t[i].shard == s) {
                if (first < 0) first = i;
                last = i;
            }
        void **bufs = xcalloc((size_t)(last - first + 1), sizeof *bufs);
        st_writer w;
        safetensors_writer_init(&w);
        safetensors_writer_meta(&w, "format", "pt"); // transformers checks it
        for (int i = first; i <= last && rc == 0; i++) {
            mt_tensor *t = &l->t[i];
            int64_t n = mt_numel(t);
            float *v = xmalloc((size_t)n * sizeof(float));
            mt_fill(t, c, seed, (uint32_t)i, v);
            void *data = v;
            if (dt != DT_F32) {
                data = xmalloc((size_t)n * elem);
                rc = convert_from_f32(data, dt, v, n);
                free(v);
            }
            bufs[i - first] = data;
            total_bytes += n * (int64_t)elem;
            if (rc == 0) rc = safetensors_writer_add(&w, t->name, tensor_make(dt, data, DEVICE_CPU, t->ndim, t->shape));
        }
        mt_shard_name(file, sizeof file, s, n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if (rc == 0) rc = safetensors_writer_write(&w, path);
        safetensors_writer_free(&w);
        for (int i = 0; i <= last - first; i++) free(bufs[i]);
        free(bufs);
    }
    if (rc || n_shards == 1) return rc;

    // model.safetensors.index.json, as transformers' save_pretrained writes it.
    cJSON *index = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total_bytes);
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");
    for (int i = 0; i < l->n; i++) {
        mt_shard_name(file, sizeof file, l->t[i].shard, n_shards);
        cJSON_AddStringToObject(map, l->t[i].name, file);
    }
    char *text = cJSON_Print(index);
    cJSON_Delete(index);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    rc = mt_write_text(path, text);
    free(text);
    return rc;
}

// ---------------------------------------------------------------- arguments

// mt_int / mt_num: a whole-string number, else a usage error (return -1 after printing).
static int mt_int(const char *opt, const char *s, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0') {
        fprintf(stderr, "error: make-target: %s wants an integer, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int mt_num(const char *opt, const char *s, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v)) {
        fprintf(stderr, "error: make-target: %s wants a number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int tool_make_target_main(int argc, char **argv) {
    const char *out_dir = NULL, *arch = NULL, *dtype_name_arg = "bf16";
    int64_t layers = -1, hidden = -1, heads = -1, kv_heads = -1, head_dim = 0, inter = 0, vocab = -1;
    int64_t seed = 0, shards = 1, max_pos = 32768, orig_max = 8192;
    double theta = 10000.0, llama3 = 0.0, eps = 1e-6;
    int tie = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            make_target_usage(stdout);
            return 0;
        }
        if (strcmp(a, "--tie") == 0) {
            tie = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (out_dir) {
                fprintf(stderr, "error: make-target: one OUT_DIR expected, got '%s' and '%s'\n", out_dir, a);
                return 2;
            }
            out_dir = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: make-target: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (strcmp(a, "--arch") == 0) arch = v;
        else if (strcmp(a, "--dtype") == 0) dtype_name_arg = v;
        else if (strcmp(a, "--layers") == 0) bad = mt_int(a, v, &layers);
        else if (strcmp(a, "--hidden") == 0) bad = mt_int(a, v, &hidden);
        else if (strcmp(a, "--heads") == 0) bad = mt_int(a, v, &heads);
        else if (strcmp(a, "--kv-heads") == 0) bad = mt_int(a, v, &kv_heads);
        else if (strcmp(a, "--head-dim") == 0) bad = mt_int(a, v, &head_dim);
        else if (strcmp(a, "--intermediate") == 0) bad = mt_int(a, v, &inter);
        else if (strcmp(a, "--vocab") == 0) bad = mt_int(a, v, &vocab);
        else if (strcmp(a, "--seed") == 0) bad = mt_int(a, v, &seed);
        else if (strcmp(a, "--shards") == 0) bad = mt_int(a, v, &shards);
        else if (strcmp(a, "--max-positions") == 0) bad = mt_int(a, v, &max_pos);
        else if (strcmp(a, "--rope-original-max") == 0) bad = mt_int(a, v, &orig_max);
        else if (strcmp(a, "--rope-theta") == 0) bad = mt_num(a, v, &theta);
        else if (strcmp(a, "--rope-llama3") == 0) bad = mt_num(a, v, &llama3);
        else if (strcmp(a, "--eps") == 0) bad = mt_num(a, v, &eps);
        else {
            fprintf(stderr, "error: make-target: unknown option '%s' (dflash_tool make-target --help)\n", a);
            return 2;
        }
        if (bad) return 2;
    }
    const char *missing = !out_dir ? "OUT_DIR" : !arch ? "--arch" : layers < 0 ? "--layers" : hidden < 0 ? "--hidden"
                        : heads < 0 ? "--heads" : kv_heads < 0 ? "--kv-heads" : vocab < 0 ? "--vocab" : NULL;
    if (missing) {
        fprintf(stderr, "error: make-target: missing %s (dflash_tool make-target --help)\n", missing);
        return 2;
    }

    // Values: each refusal names the option and what is wrong with it.
    target_config c;
    memset(&c, 0, sizeof c);
    dtype dt;
    const char *torch_dtype;
    if (strcmp(dtype_name_arg, "bf16") == 0) dt = DT_BF16, torch_dtype = "bfloat16";
    else if (strcmp(dtype_name_arg, "f16") == 0) dt = DT_F16, torch_dtype = "float16";
    else if (strcmp(dtype_name_arg, "f32") == 0) dt = DT_F32, torch_dtype = "float32";
    else {
        fprintf(stderr, "error: make-target: --dtype '%s' is not one of bf16|f16|f32\n", dtype_name_arg);
        return 2;
    }
    if (strcmp(arch, "qwen3") == 0) c.arch = ARCH_QWEN3;
    else if (strcmp(arch, "llama") == 0) c.arch = ARCH_LLAMA;
    else {
        fprintf(stderr, "error: make-target: --arch '%s' is not one of qwen3|llama\n", arch);
        return 2;
    }
    if (!inter) inter = 3 * hidden;
    const int64_t big = (int64_t)1 << 24;
    const char *why = NULL;
    char msg[256];
    if (layers < 1 || layers > 4096) why = "--layers must be in [1, 4096]";
    else if (hidden < 2 || hidden > big) why = "--hidden must be in [2, 2^24]";
    else if (heads < 1 || heads > hidden) why = "--heads must be in [1, hidden]";
    else if (!head_dim && hidden % heads != 0) {
        snprintf(msg, sizeof msg, "--heads %lld does not divide --hidden %lld (give --head-dim)", (long long)heads,
                 (long long)hidden);
        why = msg;
    } else if (kv_heads < 1 || heads % kv_heads != 0) {
        snprintf(msg, sizeof msg, "--kv-heads %lld does not divide --heads %lld", (long long)kv_heads, (long long)heads);
        why = msg;
    } else if (head_dim && (head_dim < 2 || head_dim % 2 != 0 || head_dim > 4096))
        why = "--head-dim must be even, in [2, 4096]";
    else if (!head_dim && (hidden / heads) % 2 != 0) {
        snprintf(msg, sizeof msg, "head_dim = hidden/heads = %lld is odd (RoPE rotates pairs); give --head-dim",
                 (long long)(hidden / heads));
        why = msg;
    } else if (c.arch == ARCH_LLAMA && hidden % heads != 0)
        why = "--heads must divide --hidden for llama (transformers' LlamaConfig refuses it otherwise)";
    else if (inter < 1 || inter > big) why = "--intermediate must be in [1, 2^24]";
    else if (vocab < 2 || vocab > big) why = "--vocab must be in [2, 2^24]";
    else if (seed < 0) why = "--seed must be >= 0";
    else if (shards < 1 || shards > 99999) why = "--shards must be in [1, 99999]";
    else if (max_pos < 1) why = "--max-positions must be positive";
    else if (!(theta > 1.0)) why = "--rope-theta must be > 1";
    else if (llama3 != 0.0 && !(llama3 >= 1.0)) why = "--rope-llama3 FACTOR must be >= 1";
    else if (llama3 != 0.0 && (orig_max < 1 || orig_max >= max_pos))
        why = "--rope-original-max must be in [1, --max-positions) (transformers warns otherwise)";
    else if (!(eps > 0.0 && eps < 1.0)) why = "--eps must be in (0, 1)";
    if (why) {
        fprintf(stderr, "error: make-target: %s\n", why);
        return 1;
    }
    if (!head_dim) head_dim = hidden / heads;

    c.n_layers = layers;
    c.hidden = hidden;
    c.intermediate = inter;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = head_dim;
    c.vocab = vocab;
    c.max_positions = max_pos;
    c.rms_eps = eps;
    c.rope_theta = theta;
    c.tie_embeddings = tie;
    snprintf(c.arch_name, sizeof c.arch_name, "%s", c.arch == ARCH_QWEN3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
    snprintf(c.torch_dtype, sizeof c.torch_dtype, "%s", torch_dtype);
    if (llama3 != 0.0) {
        c.rope_llama3 = 1;
        c.rope_factor = llama3;
        c.rope_low_freq_factor = 1.0;
        c.rope_high_freq_factor = 4.0;
        c.rope_original_max_positions = orig_max;
    }

    // Our own reader must read back what we write.
    char *json = target_config_to_json(&c);
    target_config back;
    int rc = target_config_parse(&back, json, "make-target config.json");
    free(json);
    if (rc) {
        fprintf(stderr, "error: make-target: %s\n", error_msg());
        return 1;
    }

    mt_list list = {0};
    mt_build_list(&list, &c);
    if (shards > list.n) {
        fprintf(stderr, "error: make-target: --shards %lld is more than the %d tensors\n", (long long)shards, list.n);
        free(list.t);
        return 1;
    }

    char out[4096];
    snprintf(out, sizeof out, "%s", out_dir);
    for (size_t len = strlen(out); len > 1 && out[len - 1] == '/';) out[--len] = '\0';
    out_dir = out;
    struct stat st;
    if (stat(out_dir, &st) == 0) {
        fprintf(stderr, "error: make-target: %s already exists (remove it or choose another OUT_DIR)\n", out_dir);
        free(list.t);
        return 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out_dir, (long)getpid());
    if (mkdir(tmp, 0755) != 0) {
        fprintf(stderr, "error: make-target: cannot create %s: %s\n", tmp, strerror(errno));
        free(list.t);
        return 1;
    }
    rc = mt_write_model(tmp, &c, &list, (uint64_t)seed, dt, (int)shards);
    if (rc == 0) {
        mt_fsync_dir(tmp);
        if (rename(tmp, out_dir) != 0) rc = error_set("rename %s -> %s: %s", tmp, out_dir, strerror(errno));
    }
    if (rc) {
        mt_remove_dir(tmp);
        fprintf(stderr, "error: make-target: %s\n", error_msg());
        free(list.t);
        return 1;
    }
    // Make the rename durable: fsync the parent directory.
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", out_dir);
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = '\0';
    else *slash = '\0';
    mt_fsync_dir(parent);

    int64_t params = 0;
    for (int i = 0; i < list.n; i++) params += mt_numel(&list.t[i]);
    printf("make-target: wrote %s: %s, %lld layers, hidden %lld, %lld/%lld heads x %lld, vocab %lld, %s%s,"
           " %lld parameters in %lld file%s\n",
           out_dir, c.arch_name, (long long)layers, (long long)hidden, (long long)heads, (long long)kv_heads,
           (long long)head_dim, (long long)vocab, dtype_name_arg, tie ? ", tied" : "", (long long)params,
           (long long)shards, shards == 1 ? "" : "s");
    free(list.t);
    return 0;
}
