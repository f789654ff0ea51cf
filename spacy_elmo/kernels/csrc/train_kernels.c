/* CPU kernels: the elementwise part of one LSTM time step in one pass (bf16 training, forward and
 * backward; bf16 and float32 inference), the char CNN's max-pooling, and the sampled softmax's
 * rows in bf16 training (both at the end of the file).
 *
 * Used by spacy_elmo/kernels/native.py (compiled on first use, called through ctypes). For the LSTM
 * step: the eager version runs each step as ~10 separate passes over the
 * gate tensors plus dtype conversions, which cost more than the step's matrix products.
 * Every tensor is [2 directions, n rows, width] with contiguous rows; each pointer comes with
 * its stride between directions (in elements). "low" tensors are the products' operands and
 * results: bfloat16 (raw uint16 bits) in the *_bf16 functions, float32 in the *_f32 ones.
 * The maths is the same as the eager code in fused_train.py, operation for operation:
 * nonlinearities, cell state, clipping and gradients in float32; rounding to bfloat16 is
 * round-to-nearest-even, NaN kept NaN (as torch converts).
 *
 * NaN: the file is compiled with -ffast-math (for glibc's vector expf/tanhf), which lets the
 * compiler assume there is none, so fminf/fmaxf clipping and float comparisons may drop one.
 * Where the eager code keeps a NaN (clamp, hardtanh's gradient, torch.max), the test is made on
 * the bits (is_nan), which the compiler cannot fold away.
 *
 * The Python side (native.py) checks every argument before calling: shapes, strides, dtypes,
 * no output overlapping another argument (the row functions use restrict), widths >= 1.
 *
 * Scratch: a row's temporaries (the inference gates, the backward's output-gate gradient, the
 * pooling's positions) come from the heap, one slice per part, taken by the entry point for the
 * call (scratch_get): never from a thread's stack, whatever the width (thread stacks are small on
 * musl and macOS, and follow RLIMIT_STACK under glibc). An entry point that returns int returns
 * -1 when that allocation fails, having done nothing.
 *
 * Threads: every entry point takes `threads` (the caller passes torch's thread count when the work
 * is big enough to pay for starting threads). Its rows are split into that many contiguous
 * parts, the calling thread runs the first and fresh threads the others, joined before the
 * function returns: no pool outlives a call, so nothing is left to break in a forked child. Each
 * row is computed by one thread with the same code, so results do not depend on the thread count,
 * except the bias gradient of cell_backward: summed per part, then the parts in order.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static inline float load_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t store_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? 0x7fc0u : rounded);
}

static inline int is_nan(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x7fffffffu) > 0x7f800000u;
}

/* clamp(v, -limit, limit) keeping a NaN NaN (as torch.clamp) */
static inline float clip_keep_nan(float v, float limit) {
    float clipped = fminf(fmaxf(v, -limit), limit);
    return is_nan(v) ? v : clipped;
}

/* hardtanh's gradient mask: v reached the clip (a NaN did not, as in torch) */
static inline int was_clipped(float v, float limit) {
    return !is_nan(v) && (v <= -limit || v >= limit);
}

static inline float load_f32(float f) { return f; }
static inline float store_f32(float f) { return f; }

/* 1 / (1 + e^-x) from e = e^-|x|, which never overflows: under -ffast-math the vector expf of a
 * large argument gives inf and 1 / (1 + inf) came out NaN, not 0 (a pre-activation below -88 made
 * the step NaN). A NaN stays NaN: e is NaN, and so is either quotient. */
static inline float sigmoid(float x) {
    float e = expf(-fabsf(x));
    float r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

/* ---------------------------------------------------------------------------------- scratch */

/* The calling thread keeps its scratch buffer for its next calls (up to KEEP_BYTES; freed when
 * the thread exits): a fresh allocation per call cost page faults on every call (glibc gave the
 * freed top of the heap back to the system), up to 1.5x on small steps. */
#define KEEP_BYTES ((size_t)8 << 20)

struct kept {
    void *data;
    size_t bytes;
};

static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;
static int kept_ok;

static void kept_free(void *p) {
    struct kept *k = p;
    free(k->data);
    free(k);
}

static void kept_init(void) { kept_ok = pthread_key_create(&kept_key, kept_free) == 0; }

/* at least `bytes` of scratch for this call (uninitialised), or NULL; give it back with scratch_put */
static void *scratch_get(size_t bytes) {
    pthread_once(&kept_once, kept_init);
    if (!kept_ok || bytes > KEEP_BYTES) return malloc(bytes);
    struct kept *k = pthread_getspecific(kept_key);
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k || pthread_setspecific(kept_key, k) != 0) {
            free(k);
            return malloc(bytes);
        }
    }
    if (k->bytes < bytes) {
        void *grown = 0; /* 64-byte aligned, like a vector register (a row's slices stay aligned) */
        if (posix_memalign(&grown, 64, bytes) != 0) return 0;
        free(k->data);
        k->data = grown, k->bytes = bytes;
    }
    return k->data;
}

static void scratch_put(void *p) {
    struct kept *k = kept_ok ? pthread_getspecific(kept_key) : 0;
    if (!k || p != k->data) free(p);
}

/* ---------------------------------------------------------------------------------- threads */

#define MAX_THREADS 256

typedef void (*part_fn)(void *ctx, int64_t begin, int64_t end, int64_t part);

struct part {
    part_fn fn;
    void *ctx;
    int64_t begin, end, index;
};

static void *run_part(void *arg) {
    struct part *p = (struct part *)arg;
    p->fn(p->ctx, p->begin, p->end, p->index);
    return 0;
}

/* how many parts parallel_for splits n items into for `threads` (the scratch slices a call needs) */
static int64_t parts_for(int64_t n, int64_t threads) {
    if (threads > n) threads = n;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    return threads < 1 ? 1 : threads;
}

/* fn(ctx, begin, end, part) over [0, n) in parts_for(n, threads) contiguous parts at once; a part
 * whose thread cannot be started runs on the calling thread after the first. */
static void parallel_for(part_fn fn, void *ctx, int64_t n, int64_t threads) {
    threads = parts_for(n, threads);
    if (threads <= 1) {
        if (n > 0) fn(ctx, 0, n, 0);
        return;
    }
    pthread_t ids[MAX_THREADS];
    struct part parts[MAX_THREADS];
    int started[MAX_THREADS];
    for (int64_t k = 0; k < threads; k++)
        parts[k] = (struct part){fn, ctx, n * k / threads, n * (k + 1) / threads, k};
    for (int64_t k = 1; k < threads; k++) started[k] = pthread_create(&ids[k], 0, run_part, &parts[k]) == 0;
    fn(ctx, parts[0].begin, parts[0].end, 0);
    for (int64_t k = 1; k < threads; k++) {
        if (started[k])
            pthread_join(ids[k], 0);
        else
            fn(ctx, parts[k].begin, parts[k].end, k);
    }
}

/* The two directions' rows as one range: q in [0, 2n) is row q % n of direction q / n. */
#define FOR_ROWS(Q, D, R, BEGIN, END, N)                                                          \
    for (int64_t Q = (BEGIN), D = (BEGIN) / (N), R = (BEGIN) % (N); Q < (END);                    \
         Q++, R = (R + 1 == (N)) ? 0 : R + 1, D = (R == 0) ? D + 1 : D)

#define DEFINE_CELL(SUFFIX, LOW, LOAD, STORE)                                                     \
    struct forward_args_##SUFFIX {                                                              \
        int64_t n, hid, z_ds, cp_ds, g_ds, cn_ds, tc_ds, m_ds;                                  \
        const LOW *z;                                                                           \
        const float *c_prev;                                                                    \
        float *gates, *c_new, *tc;                                                              \
        LOW *m;                                                                                 \
        float cell_clip;                                                                        \
    };                                                                                          \
                                                                                                \
    static void forward_part_##SUFFIX(void *ctx, int64_t begin, int64_t end, int64_t part) {    \
        const struct forward_args_##SUFFIX *a = ctx;                                            \
        int64_t hid = a->hid;                                                                   \
        (void)part;                                                                             \
        FOR_ROWS(q, d, r, begin, end, a->n) {                                                   \
            const LOW *zr = a->z + d * a->z_ds + r * 4 * hid;                                   \
            float *g = a->gates + d * a->g_ds + r * 4 * hid;                                    \
            const float *cp = a->c_prev + d * a->cp_ds + r * hid;                               \
            float *cn = a->c_new + d * a->cn_ds + r * hid;                                      \
            float *t = a->tc + d * a->tc_ds + r * hid;                                          \
            LOW *mr = a->m + d * a->m_ds + r * hid;                                             \
            for (int64_t k = 0; k < hid; k++) g[k] = sigmoid(LOAD(zr[k]));                      \
            for (int64_t k = hid; k < 2 * hid; k++) g[k] = tanhf(LOAD(zr[k]));                  \
            for (int64_t k = 2 * hid; k < 4 * hid; k++) g[k] = sigmoid(LOAD(zr[k]));            \
            const float *i = g, *j = g + hid, *f = g + 2 * hid, *o = g + 3 * hid;               \
            for (int64_t k = 0; k < hid; k++) {                                                 \
                float c = f[k] * cp[k] + i[k] * j[k];                                           \
                if (a->cell_clip > 0.0f) c = clip_keep_nan(c, a->cell_clip);                    \
                cn[k] = c;                                                                      \
            }                                                                                   \
            for (int64_t k = 0; k < hid; k++) t[k] = tanhf(cn[k]);                              \
            for (int64_t k = 0; k < hid; k++) mr[k] = STORE(t[k] * o[k]);                       \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* z = x W_x + b + h W_h (low) -> gates i, j, f, o activated (float32), c_t (clipped),       \
       tanh(c_t), and m = o * tanh(c_t) (low, the projection's input) */                        \
    void cell_forward_##SUFFIX(int64_t n, int64_t hid, const LOW *z, int64_t z_ds,              \
                               const float *c_prev, int64_t cp_ds, float *gates, int64_t g_ds,  \
                               float *c_new, int64_t cn_ds, float *tc, int64_t tc_ds, LOW *m,   \
                               int64_t m_ds, float cell_clip, int64_t threads) {                \
        struct forward_args_##SUFFIX a = {n, hid, z_ds, cp_ds, g_ds, cn_ds, tc_ds, m_ds,         \
                                          z, c_prev, gates, c_new, tc, m, cell_clip};           \
        parallel_for(forward_part_##SUFFIX, &a, 2 * n, threads);                                \
    }                                                                                           \
                                                                                                \
    struct hidden_args_##SUFFIX {                                                               \
        int64_t n, n_next, proj, go_ds, dn_ds, h_ds, dh_ds;                                     \
        const float *grad_out;                                                                  \
        const LOW *dh_next, *hidden;                                                            \
        float proj_clip;                                                                        \
        LOW *dh;                                                                                \
    };                                                                                          \
                                                                                                \
    static void hidden_part_##SUFFIX(void *ctx, int64_t begin, int64_t end, int64_t part) {     \
        const struct hidden_args_##SUFFIX *a = ctx;                                             \
        int64_t proj = a->proj;                                                                 \
        (void)part;                                                                             \
        FOR_ROWS(q, d, r, begin, end, a->n) {                                                   \
            const float *go = a->grad_out + d * a->go_ds + r * proj;                            \
            const LOW *hr = a->hidden + d * a->h_ds + r * proj;                                 \
            LOW *out = a->dh + d * a->dh_ds + r * proj;                                         \
            const LOW *dn = r < a->n_next ? a->dh_next + d * a->dn_ds + r * proj : 0;           \
            for (int64_t k = 0; k < proj; k++) {                                                \
                float v = go[k];                                                                \
                if (dn) v += LOAD(dn[k]);                                                       \
                if (a->proj_clip > 0.0f) {                                                      \
                    float h = LOAD(hr[k]);                                                      \
                    if (was_clipped(h, a->proj_clip)) v = 0.0f;                                 \
                }                                                                               \
                out[k] = STORE(v);                                                              \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* dh = grad_out + dh_next (first n_next rows), zero where h was clipped -> low */          \
    void hidden_grad_##SUFFIX(int64_t n, int64_t n_next, int64_t proj, const float *grad_out,   \
                              int64_t go_ds, const LOW *dh_next, int64_t dn_ds,                 \
                              const LOW *hidden, int64_t h_ds, float proj_clip, LOW *dh,        \
                              int64_t dh_ds, int64_t threads) {                                 \
        struct hidden_args_##SUFFIX a = {n, n_next, proj, go_ds, dn_ds, h_ds, dh_ds,            \
                                         grad_out, dh_next, hidden, proj_clip, dh};             \
        parallel_for(hidden_part_##SUFFIX, &a, 2 * n, threads);                                 \
    }                                                                                           \
    /* one row of cell_backward, in three simple loops that the compiler vectorises */          \
    static void backward_row_##SUFFIX(                                                          \
        int64_t hid, const LOW *restrict dmr, const float *restrict i, const float *restrict j, \
        const float *restrict f, const float *restrict o, const float *restrict cn,             \
        const float *restrict cp, const float *restrict t, const float *restrict dcn,           \
        float cell_clip, LOW *restrict dzr, float *restrict dco, float *restrict db,            \
        float *restrict d_o) {                                                                  \
        for (int64_t k = 0; k < hid; k++) {                                                     \
            float dmk = LOAD(dmr[k]);                                                           \
            d_o[k] = dmk * t[k];                                                                \
            float dc = dmk * o[k];                                                              \
            dco[k] = dc - dc * (t[k] * t[k]);                                                   \
        }                                                                                       \
        if (dcn)                                                                                \
            for (int64_t k = 0; k < hid; k++) dco[k] += dcn[k];                                 \
        if (cell_clip > 0.0f)                                                                   \
            for (int64_t k = 0; k < hid; k++)                                                   \
                dco[k] = was_clipped(cn[k], cell_clip) ? 0.0f : dco[k];                         \
        for (int64_t k = 0; k < hid; k++) {                                                     \
            float dc = dco[k], dci = dc * i[k];                                                 \
            LOW zi = STORE((dc * j[k]) * (i[k] - i[k] * i[k]));                                 \
            dzr[k] = zi;                                                                        \
            db[k] += LOAD(zi);                                                                  \
            LOW zj = STORE(dci - dci * (j[k] * j[k]));                                          \
            dzr[hid + k] = zj;                                                                  \
            db[hid + k] += LOAD(zj);                                                            \
        }                                                                                       \
        for (int64_t k = 0; k < hid; k++) {                                                     \
            float dc = dco[k];                                                                  \
            LOW zf = STORE((dc * cp[k]) * (f[k] - f[k] * f[k]));                                \
            dzr[2 * hid + k] = zf;                                                              \
            db[2 * hid + k] += LOAD(zf);                                                        \
            LOW zo = STORE(d_o[k] * (o[k] - o[k] * o[k]));                                      \
            dzr[3 * hid + k] = zo;                                                              \
            db[3 * hid + k] += LOAD(zo);                                                        \
            dco[k] = dc * f[k];                                                                 \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    struct backward_args_##SUFFIX {                                                             \
        int64_t n, n_next, hid, dm_ds, g_ds, cn_ds, cp_ds, tc_ds, dcn_ds, dz_ds, dco_ds;        \
        const LOW *dm;                                                                          \
        const float *gates, *c_new, *c_prev, *tc, *dc_next;                                     \
        float cell_clip;                                                                        \
        LOW *dz;                                                                                \
        float *dc_out, *dbias; /* dbias: [parts][2][4 hid], one slice per part */               \
        float *scratch;        /* [parts][hid]: each part's output-gate gradient of a row */    \
    };                                                                                          \
                                                                                                \
    static void backward_part_##SUFFIX(void *ctx, int64_t begin, int64_t end, int64_t part) {   \
        const struct backward_args_##SUFFIX *a = ctx;                                           \
        int64_t hid = a->hid;                                                                   \
        float *db = a->dbias + part * 2 * 4 * hid;                                              \
        float *d_o = a->scratch + part * hid;                                                   \
        FOR_ROWS(q, d, r, begin, end, a->n) {                                                   \
            const float *dcn = (a->dc_next && r < a->n_next) ? a->dc_next + d * a->dcn_ds + r * hid : 0; \
            const float *g = a->gates + d * a->g_ds + r * 4 * hid;                              \
            backward_row_##SUFFIX(hid, a->dm + d * a->dm_ds + r * hid, g, g + hid, g + 2 * hid, \
                                  g + 3 * hid, a->c_new + d * a->cn_ds + r * hid,               \
                                  a->c_prev + d * a->cp_ds + r * hid,                           \
                                  a->tc + d * a->tc_ds + r * hid, dcn, a->cell_clip,            \
                                  a->dz + d * a->dz_ds + r * 4 * hid,                           \
                                  a->dc_out + d * a->dco_ds + r * hid, db + d * 4 * hid, d_o);  \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* dm = dh W_p^T (low) -> dz (low, the gate pre-activations' gradient) and dc_out = dc f    \
       (float32, the cell gradient reaching c_{t-1}); dc_next: first n_next rows, or NULL;      \
       dbias [2, 4 hid] (float32) accumulates the sum of dz over rows (the bias's gradient).     \
       Returns 0, or -1 (nothing written) when the threads' scratch cannot be allocated. */     \
    int cell_backward_##SUFFIX(int64_t n, int64_t n_next, int64_t hid, const LOW *dm,           \
                               int64_t dm_ds, const float *gates, int64_t g_ds,                 \
                               const float *c_new, int64_t cn_ds, const float *c_prev,          \
                               int64_t cp_ds, const float *tc, int64_t tc_ds,                   \
                               const float *dc_next, int64_t dcn_ds, float cell_clip, LOW *dz,  \
                               int64_t dz_ds, float *dc_out, int64_t dco_ds, float *dbias,      \
                               int64_t threads) {                                               \
        threads = parts_for(2 * n, threads);                                                    \
        struct backward_args_##SUFFIX a = {n, n_next, hid, dm_ds, g_ds, cn_ds, cp_ds, tc_ds,    \
                                           dcn_ds, dz_ds, dco_ds, dm, gates, c_new, c_prev, tc, \
                                           dc_next, cell_clip, dz, dc_out, dbias, 0};           \
        /* one part: straight into dbias, rows in order; more: a bias slice per part too */    \
        size_t per_part = (size_t)hid + (threads > 1 ? (size_t)2 * 4 * hid : 0);                \
        float *scratch = scratch_get((size_t)threads * per_part * sizeof(float));               \
        if (!scratch) return -1;                                                                \
        a.scratch = scratch;                                                                    \
        if (threads > 1) {                                                                      \
            a.dbias = scratch + (size_t)threads * hid;                                          \
            memset(a.dbias, 0, (size_t)threads * 2 * 4 * hid * sizeof(float));                 \
        }                                                                                       \
        parallel_for(backward_part_##SUFFIX, &a, 2 * n, threads);                               \
        if (threads > 1)                                                                        \
            for (int64_t p = 0; p < threads; p++)                                               \
                for (int64_t k = 0; k < 2 * 4 * hid; k++) dbias[k] += a.dbias[p * 2 * 4 * hid + k]; \
        scratch_put(scratch);                                                                   \
        return 0;                                                                               \
    }

DEFINE_CELL(bf16, uint16_t, load_bf16, store_bf16)
DEFINE_CELL(f32, float, load_f32, store_f32)

/* The char CNN's max-pooling for bf16 training (char_conv_train.py): conv [tokens, positions,
 * filters] bfloat16, filters in groups of one width each (group g: `counts[g]` filters from
 * `starts[g]`, valid positions 0 .. positions - widths[g]) -> the maximum of each filter over
 * its valid positions (float32) and the first position that reaches it (as torch.max: a NaN is
 * the maximum). */
static inline int is_nan_bf16(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

/* one group of filters: for each, its maximum and the first position reaching it (as torch.max).
 * First without a NaN test (a vectorised max), noting per filter whether a value was a NaN
 * (|bits| + 0x7f reaches bit 15 exactly for a NaN's bfloat16 bits). Only a group that holds one
 * runs again, with the test on each value (the first NaN wins). */
static void max_pool_group(int64_t n_filters, const uint16_t *restrict conv, int64_t count,
                           int64_t valid, float *restrict best, int32_t *restrict where,
                           uint16_t *restrict seen) {
    for (int64_t k = 0; k < count; k++) {
        best[k] = load_bf16(conv[k]), where[k] = 0;
        seen[k] = (uint16_t)((conv[k] & 0x7fffu) + 0x7fu);
    }
    for (int64_t p = 1; p < valid; p++) {
        const uint16_t *row = conv + p * n_filters;
        for (int64_t k = 0; k < count; k++) {
            float v = load_bf16(row[k]);
            int take = v > best[k];
            best[k] = take ? v : best[k];
            where[k] = take ? (int32_t)p : where[k];
            seen[k] |= (uint16_t)((row[k] & 0x7fffu) + 0x7fu);
        }
    }
    uint16_t any = 0;
    for (int64_t k = 0; k < count; k++) any |= seen[k];
    if (!(any & 0x8000u)) return;
    for (int64_t k = 0; k < count; k++) best[k] = load_bf16(conv[k]), where[k] = 0;
    for (int64_t p = 1; p < valid; p++) {
        const uint16_t *row = conv + p * n_filters;
        for (int64_t k = 0; k < count; k++) {
            int take = is_nan_bf16(row[k]) ? !is_nan(best[k]) : load_bf16(row[k]) > best[k];
            best[k] = take ? load_bf16(row[k]) : best[k];
            where[k] = take ? (int32_t)p : where[k];
        }
    }
}

struct pool_args {
    int64_t positions, n_filters, n_groups;
    const uint16_t *conv;
    const int64_t *starts, *counts, *widths;
    float *values;
    int64_t *index;
    int32_t *where; /* [parts][n_filters]: each part's positions of a token */
    uint16_t *seen; /* [parts][n_filters]: each part's NaN sightings of a token */
};

static void pool_part(void *ctx, int64_t begin, int64_t end, int64_t part) {
    const struct pool_args *a = ctx;
    int64_t nf = a->n_filters;
    int32_t *where = a->where + part * nf;
    uint16_t *seen = a->seen + part * nf;
    for (int64_t n = begin; n < end; n++) {
        const uint16_t *token = a->conv + n * a->positions * nf;
        float *value_row = a->values + n * nf;
        for (int64_t g = 0; g < a->n_groups; g++)
            max_pool_group(nf, token + a->starts[g], a->counts[g], a->positions - a->widths[g] + 1,
                           value_row + a->starts[g], where + a->starts[g], seen + a->starts[g]);
        for (int64_t k = 0; k < nf; k++) a->index[n * nf + k] = where[k];
    }
}

/* returns 0, or -1 (nothing written) when the threads' scratch cannot be allocated */
int max_pool_bf16(int64_t tokens, int64_t positions, int64_t n_filters, const uint16_t *conv,
                  int64_t n_groups, const int64_t *starts, const int64_t *counts,
                  const int64_t *widths, float *values, int64_t *index, int64_t threads) {
    threads = parts_for(tokens, threads);
    int32_t *where = scratch_get((size_t)threads * n_filters * (sizeof(int32_t) + sizeof(uint16_t)));
    if (!where) return -1;
    uint16_t *seen = (uint16_t *)(where + threads * n_filters);
    struct pool_args a = {positions, n_filters, n_groups, conv, starts, counts, widths, values, index, where, seen};
    parallel_for(pool_part, &a, tokens, threads);
    scratch_put(where);
    return 0;
}

/* One time step of *inference* (bf16.py's run_layer in bfloat16, lstm.py's in float32), for the
 * rows still running: z = (bias + x W_x) + h W_h summed in float32 from the two products, the
 * gates, the cell state updated in place (float32, clipped), and m = o * tanh(c) (rounded to
 * bfloat16 in the bf16 version) for the output projection. No activations are kept (there is
 * no backward). Each direction's rows come as a pointer of their own (the products write each
 * direction's result on its own); `step_rows` (or NULL) maps each row to its row of `step`:
 * the first layer's x W_x is made once per distinct token and read through it. */
#define DEFINE_INFER(SUFFIX, LOW, LOAD, STORE)                                                    \
    static void infer_row_##SUFFIX(int64_t hid, const float *restrict bias,                     \
                                   const LOW *restrict step, const LOW *restrict rec,           \
                                   float *restrict c, LOW *restrict m, float cell_clip,         \
                                   float *restrict g) {                                         \
        for (int64_t k = 0; k < 4 * hid; k++) g[k] = (bias[k] + LOAD(step[k])) + LOAD(rec[k]);  \
        for (int64_t k = 0; k < hid; k++) g[k] = sigmoid(g[k]);                                 \
        for (int64_t k = hid; k < 2 * hid; k++) g[k] = tanhf(g[k]);                             \
        for (int64_t k = 2 * hid; k < 4 * hid; k++) g[k] = sigmoid(g[k]);                       \
        const float *i = g, *j = g + hid, *f = g + 2 * hid, *o = g + 3 * hid;                   \
        for (int64_t k = 0; k < hid; k++) {                                                     \
            float v = c[k] * f[k] + i[k] * j[k];                                                \
            if (cell_clip > 0.0f) v = clip_keep_nan(v, cell_clip);                              \
            c[k] = v;                                                                           \
        }                                                                                       \
        for (int64_t k = 0; k < hid; k++) m[k] = STORE(tanhf(c[k]) * o[k]);                     \
    }                                                                                           \
                                                                                                \
    struct infer_args_##SUFFIX {                                                                \
        int64_t n, hid;                                                                         \
        const float *bias;                                                                      \
        const LOW *const *step, *const *rec;                                                    \
        const int64_t *const *step_rows;                                                        \
        float *const *c;                                                                        \
        LOW *const *m;                                                                          \
        float cell_clip;                                                                        \
        float *scratch; /* [parts][4 hid]: each part's gates of a row */                        \
    };                                                                                          \
                                                                                                \
    static void infer_part_##SUFFIX(void *ctx, int64_t begin, int64_t end, int64_t part) {      \
        const struct infer_args_##SUFFIX *a = ctx;                                              \
        int64_t hid = a->hid;                                                                   \
        float *g = a->scratch + part * 4 * hid;                                                 \
        FOR_ROWS(q, d, r, begin, end, a->n) {                                                   \
            int64_t row = a->step_rows ? a->step_rows[d][r] : r;                                \
            infer_row_##SUFFIX(hid, a->bias + d * 4 * hid, a->step[d] + row * 4 * hid,          \
                               a->rec[d] + r * 4 * hid, a->c[d] + r * hid, a->m[d] + r * hid,   \
                               a->cell_clip, g);                                                \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* each of step, rec, c, m (and step_rows, or NULL): one pointer per direction. Returns 0, \
       or -1 (nothing written) when the threads' scratch cannot be allocated. */                \
    int lstm_step_infer_##SUFFIX(int64_t n, int64_t hid, const float *bias,                     \
                                 const LOW *const *step, const int64_t *const *step_rows,       \
                                 const LOW *const *rec, float *const *c, LOW *const *m,         \
                                 float cell_clip, int64_t threads) {                            \
        threads = parts_for(2 * n, threads);                                                    \
        float *scratch = scratch_get((size_t)threads * 4 * hid * sizeof(float));                \
        if (!scratch) return -1;                                                                \
        struct infer_args_##SUFFIX a = {n, hid, bias, step, rec, step_rows, c, m, cell_clip,    \
                                        scratch};                                               \
        parallel_for(infer_part_##SUFFIX, &a, 2 * n, threads);                                  \
        scratch_put(scratch);                                                                   \
        return 0;                                                                               \
    }

DEFINE_INFER(bf16, uint16_t, load_bf16, store_bf16)
DEFINE_INFER(f32, float, load_f32, store_f32)

/* The sampled softmax's rows for bf16 training (training/sampled_softmax.py). Row r's logits
 * are `first[r]` (the true word's, float32) and `cols` bfloat16 values (the sampled words', -inf
 * where a sample is the row's own target). The forward needs each row's log-sum-exp; the backward
 * each softmax probability rounded to bfloat16 (the operand of two products), written over the
 * logits in place, and their sums over rows (the sampled words' bias gradient). The eager code
 * makes a float32 copy of all the logits beside the true one, normalises it (log_softmax) and
 * exponentiates it again in the backward: four passes over a [rows, cols + 1] float32 buffer and
 * a product with a row of ones, against one pass over the bfloat16 logits here each way.
 * -inf is tested on the bits (0xff80: the compiler may assume no infinities under -ffast-math),
 * and a NaN anywhere in a row makes its log-sum-exp NaN, as log_softmax does. */
#define BF16_NEG_INF 0xff80u

struct lse_args {
    int64_t cols;
    const float *first;
    const uint16_t *logits;
    float *lse;
};

static void lse_part(void *ctx, int64_t begin, int64_t end, int64_t part) {
    const struct lse_args *a = ctx;
    (void)part;
    for (int64_t r = begin; r < end; r++) {
        const uint16_t *restrict row = a->logits + r * a->cols;
        float top = a->first[r];
        int nan = is_nan(top);
        for (int64_t k = 0; k < a->cols; k++) {
            top = fmaxf(top, load_bf16(row[k]));
            nan |= is_nan_bf16(row[k]);
        }
        float sum = expf(a->first[r] - top);
        for (int64_t k = 0; k < a->cols; k++) {
            float e = expf(load_bf16(row[k]) - top);
            sum += row[k] == BF16_NEG_INF ? 0.0f : e;
        }
        a->lse[r] = nan ? NAN : top + logf(sum);
    }
}

/* lse[r] = log(exp(first[r]) + sum_k exp(logits[r, k])) for rows [0, rows) */
int softmax_lse_bf16(int64_t rows, int64_t cols, const float *first, const uint16_t *logits,
                     float *lse, int64_t threads) {
    struct lse_args a = {cols, first, logits, lse};
    parallel_for(lse_part, &a, rows, threads);
    return 0;
}

struct softmax_grad_args {
    int64_t cols;
    const float *lse;
    uint16_t *logits;
    float *sums; /* [parts][cols]: each part's column sums */
};

static void softmax_grad_part(void *ctx, int64_t begin, int64_t end, int64_t part) {
    const struct softmax_grad_args *a = ctx;
    float *restrict sums = a->sums + part * a->cols;
    memset(sums, 0, (size_t)a->cols * sizeof(float));
    for (int64_t r = begin; r < end; r++) {
        uint16_t *restrict row = a->logits + r * a->cols;
        float lse = a->lse[r];
        for (int64_t k = 0; k < a->cols; k++) {
            float e = expf(load_bf16(row[k]) - lse);
            uint16_t p = store_bf16(row[k] == BF16_NEG_INF ? 0.0f : e);
            row[k] = p;
            sums[k] += load_bf16(p);
        }
    }
}

/* logits[r, k] <- bf16(exp(logits[r, k] - lse[r])) in place, and sums[k] = the rounded values
 * summed over rows (float32; with several threads, per part, then the parts in order). Returns 0,
 * or -1 (nothing written) when the threads' scratch cannot be allocated. */
int softmax_grad_bf16(int64_t rows, int64_t cols, const float *lse, uint16_t *logits, float *sums,
                      int64_t threads) {
    threads = parts_for(rows, threads);
    float *scratch = sums;
    if (threads > 1) {
        scratch = scratch_get((size_t)threads * cols * sizeof(float));
        if (!scratch) return -1;
    }
    struct softmax_grad_args a = {cols, lse, logits, scratch};
    if (rows == 0) memset(sums, 0, (size_t)cols * sizeof(float));
    parallel_for(softmax_grad_part, &a, rows, threads);
    if (threads > 1) {
        memcpy(sums, scratch, (size_t)cols * sizeof(float));
        for (int64_t p = 1; p < threads; p++)
            for (int64_t k = 0; k < cols; k++) sums[k] += scratch[p * cols + k];
        scratch_put(scratch);
    }
    return 0;
}

/* ---- int8 inference: each row of activations quantized on its own (kernels/int8.py) ----
 *
 * Row r of x (cols floats; rows x_stride floats apart) -> q[r, :] (uint8, cols apart) and
 * scale[r]: with a = max |x[r, :]|, scale = a / levels (1 for an all-zero row) and
 * q = clamp(rint(x * (levels / a)), -levels, levels) + levels + 1 (the zero point levels + 1),
 * rint rounding half to even as torch.round does. A row holding a NaN or an infinity gets scale
 * NaN and every q at the zero point, so its products come out NaN (the test is on the bits, which
 * -ffast-math cannot fold away). Two passes over the row, none over a copy; rows are independent,
 * so the result is the same whatever the thread count. */
static inline int not_finite(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x7f800000u) == 0x7f800000u;
}

struct quantize_args {
    int64_t cols, x_stride, levels;
    const float *x;
    uint8_t *q;
    float *scale;
};

static void quantize_part(void *ctx, int64_t begin, int64_t end, int64_t part) {
    const struct quantize_args *a = ctx;
    (void)part;
    const int64_t cols = a->cols;
    const float levels = (float)a->levels;
    const float zero = (float)(a->levels + 1);
    for (int64_t r = begin; r < end; r++) {
        const float *restrict row = a->x + r * a->x_stride;
        uint8_t *restrict out = a->q + r * cols;
        float top = 0.0f;
        int bad = 0;
        for (int64_t k = 0; k < cols; k++) {
            top = fmaxf(top, fabsf(row[k]));
            bad |= not_finite(row[k]);
        }
        if (bad) {
            a->scale[r] = NAN;
            memset(out, (int)(a->levels + 1), (size_t)cols);
            continue;
        }
        const float inv = top > 0.0f ? levels / top : 1.0f;
        a->scale[r] = top > 0.0f ? top / levels : 1.0f;
        for (int64_t k = 0; k < cols; k++) {
            float v = fminf(fmaxf(rintf(row[k] * inv), -levels), levels); /* finite here: no NaN to keep */
            out[k] = (uint8_t)(int32_t)(v + zero);
        }
    }
}

void quantize_rows_u8(int64_t rows, int64_t cols, const float *x, int64_t x_stride, int64_t levels, uint8_t *q,
                      float *scale, int64_t threads) {
    struct quantize_args a = {cols, x_stride, levels, x, q, scale};
    parallel_for(quantize_part, &a, rows, threads);
}

/* ---- the char CNN at inference as table lookups (kernels/char_table.py) ----
 *
 * A convolution of width w over character embeddings e(c) is, at position t,
 * bias + sum_j W_j e(c[t + j]); e(c) takes one of `vocab` values, so each W_j e(c) is a row of a
 * table T_j = E W_j^T [vocab, filters] computed once, and the convolution is w row additions
 * per position instead of w * char_dim multiply-adds per filter. The maximum over positions is
 * taken on the fly, so the [positions, filters] output is never written.
 *
 * ids [tokens, positions] (int32, < vocab); tables: one float buffer holding, per group g of
 * filters (width widths[g], counts[g] filters, output columns starts[g] ..), its widths[g]
 * tables [vocab, counts[g]] from table_offsets[g]; bias [n_filters]; out [tokens, n_filters]
 * (each filter's maximum, bias included, before the activation). A token's positions from the
 * first of its uniform tail (the run of its last id) are all alike, so its windows stop after
 * the first that lies wholly in that tail (the same maximum; `widest` is the widest width).
 * Per token and filter the sum runs in the same order (bias, then j = 0 .. w - 1) whatever the
 * batch, the positions given or the thread count. The caller checks the tables are finite. */
struct table_args {
    int64_t positions, vocab, n_filters, n_groups, widest;
    const int32_t *ids;
    const float *tables, *bias;
    const int64_t *table_offsets, *starts, *counts, *widths;
    float *out;
};

#define TABLE_BLOCK 64

static void table_group(const int32_t *restrict ids, int64_t windows, int64_t width, int64_t vocab,
                        int64_t count, const float *restrict table, const float *restrict bias,
                        float *restrict out) {
    for (int64_t f0 = 0; f0 < count; f0 += TABLE_BLOCK) {
        int64_t nb = count - f0 < TABLE_BLOCK ? count - f0 : TABLE_BLOCK;
        float best[TABLE_BLOCK], acc[TABLE_BLOCK];
        for (int64_t t = 0; t < windows; t++) {
            for (int64_t k = 0; k < nb; k++) acc[k] = bias[f0 + k];
            for (int64_t j = 0; j < width; j++) {
                const float *restrict row = table + (j * vocab + ids[t + j]) * count + f0;
                for (int64_t k = 0; k < nb; k++) acc[k] += row[k];
            }
            if (t == 0)
                for (int64_t k = 0; k < nb; k++) best[k] = acc[k];
            else
                for (int64_t k = 0; k < nb; k++) best[k] = acc[k] > best[k] ? acc[k] : best[k];
        }
        for (int64_t k = 0; k < nb; k++) out[f0 + k] = best[k];
    }
}

static void table_part(void *ctx, int64_t begin, int64_t end, int64_t part) {
    const struct table_args *a = ctx;
    (void)part;
    for (int64_t n = begin; n < end; n++) {
        const int32_t *token = a->ids + n * a->positions;
        int64_t word = a->positions; /* positions before the uniform tail */
        while (word > 0 && token[word - 1] == token[a->positions - 1]) word--;
        int64_t keep = word + a->widest < a->positions ? word + a->widest : a->positions;
        for (int64_t g = 0; g < a->n_groups; g++) {
            int64_t w = a->widths[g];
            int64_t windows = keep - w + 1;
            table_group(token, windows, w, a->vocab, a->counts[g], a->tables + a->table_offsets[g],
                        a->bias + a->starts[g], a->out + n * a->n_filters + a->starts[g]);
        }
    }
}

void char_table_max_f32(int64_t tokens, int64_t positions, const int32_t *ids, int64_t vocab, int64_t n_groups,
                        const float *tables, const int64_t *table_offsets, const int64_t *starts,
                        const int64_t *counts, const int64_t *widths, int64_t widest, const float *bias,
                        int64_t n_filters, float *out, int64_t threads) {
    struct table_args a = {positions, vocab, n_filters, n_groups, widest, ids, tables, bias,
                           table_offsets, starts, counts, widths, out};
    parallel_for(table_part, &a, tokens, threads);
}
