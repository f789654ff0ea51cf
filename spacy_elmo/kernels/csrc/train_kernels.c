/* Kernels for bf16 training on the CPU: the elementwise part of one LSTM time step, forward and
 * backward, each in one pass; and the char CNN's max-pooling (at the end of the file).
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
 */
#include <math.h>
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

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#define DEFINE_CELL(SUFFIX, LOW, LOAD, STORE)                                                     \
    /* z = x W_x + b + h W_h (low) -> gates i, j, f, o activated (float32), c_t (clipped),       \
       tanh(c_t), and m = o * tanh(c_t) (low, the projection's input) */                        \
    void cell_forward_##SUFFIX(int64_t n, int64_t hid, const LOW *z, int64_t z_ds,              \
                               const float *c_prev, int64_t cp_ds, float *gates, int64_t g_ds,  \
                               float *c_new, int64_t cn_ds, float *tc, int64_t tc_ds, LOW *m,   \
                               int64_t m_ds, float cell_clip) {                                 \
        for (int64_t d = 0; d < 2; d++) {                                                       \
            for (int64_t r = 0; r < n; r++) {                                                   \
                const LOW *zr = z + d * z_ds + r * 4 * hid;                                     \
                float *g = gates + d * g_ds + r * 4 * hid;                                      \
                const float *cp = c_prev + d * cp_ds + r * hid;                                 \
                float *cn = c_new + d * cn_ds + r * hid;                                        \
                float *t = tc + d * tc_ds + r * hid;                                            \
                LOW *mr = m + d * m_ds + r * hid;                                               \
                for (int64_t k = 0; k < hid; k++) g[k] = sigmoid(LOAD(zr[k]));                  \
                for (int64_t k = hid; k < 2 * hid; k++) g[k] = tanhf(LOAD(zr[k]));              \
                for (int64_t k = 2 * hid; k < 4 * hid; k++) g[k] = sigmoid(LOAD(zr[k]));        \
                const float *i = g, *j = g + hid, *f = g + 2 * hid, *o = g + 3 * hid;           \
                for (int64_t k = 0; k < hid; k++) {                                             \
                    float c = f[k] * cp[k] + i[k] * j[k];                                       \
                    if (cell_clip > 0.0f) c = clip_keep_nan(c, cell_clip);                         \
                    cn[k] = c;                                                                  \
                }                                                                               \
                for (int64_t k = 0; k < hid; k++) t[k] = tanhf(cn[k]);                          \
                for (int64_t k = 0; k < hid; k++) mr[k] = STORE(t[k] * o[k]);                   \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* dh = grad_out + dh_next (first n_next rows), zero where h was clipped -> low */          \
    void hidden_grad_##SUFFIX(int64_t n, int64_t n_next, int64_t proj, const float *grad_out,   \
                              int64_t go_ds, const LOW *dh_next, int64_t dn_ds,                 \
                              const LOW *hidden, int64_t h_ds, float proj_clip, LOW *dh,        \
                              int64_t dh_ds) {                                                  \
        for (int64_t d = 0; d < 2; d++) {                                                       \
            for (int64_t r = 0; r < n; r++) {                                                   \
                const float *go = grad_out + d * go_ds + r * proj;                              \
                const LOW *hr = hidden + d * h_ds + r * proj;                                   \
                LOW *out = dh + d * dh_ds + r * proj;                                           \
                const LOW *dn = r < n_next ? dh_next + d * dn_ds + r * proj : 0;                \
                for (int64_t k = 0; k < proj; k++) {                                            \
                    float v = go[k];                                                            \
                    if (dn) v += LOAD(dn[k]);                                                   \
                    if (proj_clip > 0.0f) {                                                     \
                        float h = LOAD(hr[k]);                                                  \
                        if (was_clipped(h, proj_clip)) v = 0.0f;                                \
                    }                                                                           \
                    out[k] = STORE(v);                                                          \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    /* one row of cell_backward, in three simple loops that the compiler vectorises */          \
    static void backward_row_##SUFFIX(                                                          \
        int64_t hid, const LOW *restrict dmr, const float *restrict i, const float *restrict j, \
        const float *restrict f, const float *restrict o, const float *restrict cn,             \
        const float *restrict cp, const float *restrict t, const float *restrict dcn,           \
        float cell_clip, LOW *restrict dzr, float *restrict dco, float *restrict db) {          \
        float d_o[hid];                                                                         \
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
    /* dm = dh W_p^T (low) -> dz (low, the gate pre-activations' gradient) and dc_out = dc f    \
       (float32, the cell gradient reaching c_{t-1}); dc_next: first n_next rows, or NULL;      \
       dbias [2, 4 hid] (float32) accumulates the sum of dz over rows (the bias's gradient) */  \
    void cell_backward_##SUFFIX(int64_t n, int64_t n_next, int64_t hid, const LOW *dm,          \
                                int64_t dm_ds, const float *gates, int64_t g_ds,                \
                                const float *c_new, int64_t cn_ds, const float *c_prev,         \
                                int64_t cp_ds, const float *tc, int64_t tc_ds,                  \
                                const float *dc_next, int64_t dcn_ds, float cell_clip, LOW *dz, \
                                int64_t dz_ds, float *dc_out, int64_t dco_ds, float *dbias) {   \
        for (int64_t d = 0; d < 2; d++) {                                                       \
            for (int64_t r = 0; r < n; r++) {                                                   \
                const float *dcn = (dc_next && r < n_next) ? dc_next + d * dcn_ds + r * hid : 0; \
                const float *g = gates + d * g_ds + r * 4 * hid;                                \
                backward_row_##SUFFIX(hid, dm + d * dm_ds + r * hid, g, g + hid, g + 2 * hid,   \
                                      g + 3 * hid, c_new + d * cn_ds + r * hid,                 \
                                      c_prev + d * cp_ds + r * hid, tc + d * tc_ds + r * hid,   \
                                      dcn, cell_clip, dz + d * dz_ds + r * 4 * hid,              \
                                      dc_out + d * dco_ds + r * hid, dbias + d * 4 * hid);      \
            }                                                                                   \
        }                                                                                       \
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

void max_pool_bf16(int64_t tokens, int64_t positions, int64_t n_filters, const uint16_t *conv,
                   int64_t n_groups, const int64_t *starts, const int64_t *counts,
                   const int64_t *widths, float *values, int64_t *index) {
    int32_t where[n_filters];
    uint16_t seen[n_filters];
    for (int64_t n = 0; n < tokens; n++) {
        const uint16_t *token = conv + n * positions * n_filters;
        float *value_row = values + n * n_filters;
        for (int64_t g = 0; g < n_groups; g++)
            max_pool_group(n_filters, token + starts[g], counts[g], positions - widths[g] + 1,
                           value_row + starts[g], where + starts[g], seen + starts[g]);
        for (int64_t k = 0; k < n_filters; k++) index[n * n_filters + k] = where[k];
    }
}

/* One time step of bfloat16 *inference* (bf16.py's run_layer), for the rows still running:
 * z = (bias + x W_x) + h W_h summed in float32 from the two bfloat16 products, the gates, the
 * cell state updated in place (float32, clipped), and m = o * tanh(c) rounded to bfloat16 for
 * the output projection. No activations are kept (there is no backward). */
static void infer_row(int64_t hid, const float *restrict bias, const uint16_t *restrict step,
                      const uint16_t *restrict rec, float *restrict c, uint16_t *restrict m,
                      float cell_clip, float *restrict g) {
    for (int64_t k = 0; k < 4 * hid; k++) g[k] = (bias[k] + load_bf16(step[k])) + load_bf16(rec[k]);
    for (int64_t k = 0; k < hid; k++) g[k] = sigmoid(g[k]);
    for (int64_t k = hid; k < 2 * hid; k++) g[k] = tanhf(g[k]);
    for (int64_t k = 2 * hid; k < 4 * hid; k++) g[k] = sigmoid(g[k]);
    const float *i = g, *j = g + hid, *f = g + 2 * hid, *o = g + 3 * hid;
    for (int64_t k = 0; k < hid; k++) {
        float v = c[k] * f[k] + i[k] * j[k];
        if (cell_clip > 0.0f) v = clip_keep_nan(v, cell_clip);
        c[k] = v;
    }
    for (int64_t k = 0; k < hid; k++) m[k] = store_bf16(tanhf(c[k]) * o[k]);
}

void lstm_step_infer_bf16(int64_t n, int64_t hid, const float *bias, int64_t b_ds,
                          const uint16_t *step, int64_t s_ds, const uint16_t *rec, int64_t r_ds,
                          float *c, int64_t c_ds, uint16_t *m, int64_t m_ds, float cell_clip) {
    float g[4 * hid];
    for (int64_t d = 0; d < 2; d++)
        for (int64_t r = 0; r < n; r++)
            infer_row(hid, bias + d * b_ds, step + d * s_ds + r * 4 * hid, rec + d * r_ds + r * 4 * hid,
                      c + d * c_ds + r * hid, m + d * m_ds + r * hid, cell_clip, g);
}
