// CUDA kernels of Ilargi's GPU backend (ilargi/rewriter/kernels/gpu.py compiles them with CuPy).
//
// REAL is the element type of the large arrays (sources, gathered vectors): `float` or `double`,
// defined by the loader in front of this source. Accumulators and the small per-column vectors
// (weights, gradients, scale a, shift b, centroids) are always double, so float32 data still
// sums in float64.
//
// Conventions: index vectors are int (-1 = absent); every 2-D array is C-contiguous; every kernel
// uses a grid-stride loop, so any grid size is correct; no kernel allocates, synchronizes the
// device or needs shared memory, so every one of them can be captured in a CUDA graph. Reductions
// to one address go through warp_sum_add, which is why no thread returns early.

#ifndef REAL
#define REAL double
#endif

#define ILARGI_INF __longlong_as_double(0x7ff0000000000000LL)

#define GRID_STRIDE_LOOP(t, count)                                                     \
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < (count); \
         t += (long long)gridDim.x * blockDim.x)

// Adds the sum of `value` over the 32 lanes of a warp to *target with one atomic. Every lane of
// the warp must call it with the same target (threads without work pass 0).
__device__ __forceinline__ void warp_sum_add(double* target, double value) {
#ifdef ILARGI_CPU_EMULATION
    atomicAdd(target, value);
#else
    for (int offset = 16; offset > 0; offset >>= 1)
        value += __shfl_down_sync(0xffffffffu, value, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(target, value);
#endif
}

// ------------------------------------------------------------------------------------------------
// The two primitives of every rewrite rule.

// g(Z, rows): out[i, k] = Z[rows[i], k], or 0 where rows[i] = -1 (accumulate != 0: out += that).
extern "C" __global__ void ilargi_gather(const REAL* __restrict__ Z, const int* __restrict__ rows,
                                         long long n, int m, REAL* __restrict__ out,
                                         int accumulate) {
    GRID_STRIDE_LOOP(t, n * m) {
        long long i = m == 1 ? t : t / m;  // skip the 64-bit division in the common 1-column case
        long long k = t - i * m;
        int r = rows[i];
        REAL value = r >= 0 ? Z[(long long)r * m + k] : (REAL)0;
        if (accumulate) out[t] += value;
        else out[t] = value;
    }
}

// s(Y, rows, n_p) by scattering: out[rows[i], k] += Y[i, k] (out zeroed by the caller).
extern "C" __global__ void ilargi_segment_sum_atomic(const REAL* __restrict__ Y,
                                                     const int* __restrict__ rows, long long n,
                                                     int m, double* __restrict__ out) {
    GRID_STRIDE_LOOP(t, n * m) {
        long long i = m == 1 ? t : t / m;
        long long k = t - i * m;
        int r = rows[i];
        if (r >= 0) atomicAdd(&out[(long long)r * m + k], (double)Y[t]);
    }
}

// s(Y, rows, n_p) by segments: target rows order[indptr[j]:indptr[j+1]] take source row j; one
// thread per (j, k) adds them in a fixed order (deterministic, no atomics).
extern "C" __global__ void ilargi_segment_sum_sorted(const REAL* __restrict__ Y,
                                                     const int* __restrict__ order,
                                                     const int* __restrict__ indptr, int n_source,
                                                     int m, double* __restrict__ out) {
    GRID_STRIDE_LOOP(t, (long long)n_source * m) {
        long long j = t / m;
        long long k = t - j * m;
        double sum = 0.0;
        for (int p = indptr[j]; p < indptr[j + 1]; ++p) sum += (double)Y[(long long)order[p] * m + k];
        out[t] = sum;
    }
}

// ------------------------------------------------------------------------------------------------
// One pass over the target rows for the pattern T^T (v * (T y)).
//
// R holds P index vectors of length n (row p: rows_p, identity parts spelled out as 0..n-1).
// U holds every part's S_p y_p, part p starting at offsets[p]; B (zeroed) receives, at the same
// offsets, the segment sums of w = v * (T y): B_p = I_p^T w. c0[0] is b^T y (0 without shift) and
// total[0] (zeroed) receives sum(w), which the shift b needs.
//
// The fact table (an identity part, dense, at most ILARGI_FACT_WIDTH columns) is not in R: its
// rows are read once, here, for both products: q_i += F[i] . (a y)[f_cols] and
// G[f_cols[k]] += sum_i F[i, k] w_i. f_width = 0 when there is none (F, f_cols not read).
// ILARGI_FACT_WIDTH (8, 16, 32 or 64, set by the loader) is a compile-time bound, so the
// per-thread vectors xf and acc live in registers (loops unrolled, guarded by k < f_width).

#ifndef ILARGI_FACT_WIDTH
#define ILARGI_FACT_WIDTH 8
#endif

// sum_p U[offsets[p] + rows_p[i]] over the parts present in target row i.
__device__ __forceinline__ double gather_parts(const int* __restrict__ R, int P, long long n,
                                               long long i, const REAL* __restrict__ U,
                                               const long long* __restrict__ offsets) {
    double sum = 0.0;
    for (int p = 0; p < P; ++p) {
        int r = R[p * n + i];
        if (r >= 0) sum += (double)U[offsets[p] + r];
    }
    return sum;
}

// B[offsets[p] + rows_p[i]] += value for the parts present in target row i.
__device__ __forceinline__ void scatter_parts(const int* __restrict__ R, int P, long long n,
                                              long long i, const long long* __restrict__ offsets,
                                              double* __restrict__ B, double value) {
    for (int p = 0; p < P; ++p) {
        int r = R[p * n + i];
        if (r >= 0) atomicAdd(&B[offsets[p] + r], value);
    }
}

// xf[k] = X[f_cols[k]], times a[f_cols[k]] when has_scale: the fact part's share of X; acc = 0.
__device__ __forceinline__ void start_fact(double* xf, double* acc, int f_width,
                                           const int* __restrict__ f_cols,
                                           const double* __restrict__ X,
                                           const double* __restrict__ scale, int has_scale) {
#pragma unroll
    for (int k = 0; k < ILARGI_FACT_WIDTH; ++k) {
        xf[k] = 0.0;
        acc[k] = 0.0;
        if (k < f_width) {
            int col = f_cols[k];
            xf[k] = has_scale ? X[col] * scale[col] : X[col];
        }
    }
}

// F[i] . xf over the fact part's columns.
__device__ __forceinline__ double fact_dot(const REAL* __restrict__ row, const double* xf,
                                           int f_width) {
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < ILARGI_FACT_WIDTH; ++k)
        if (k < f_width) sum += (double)row[k] * xf[k];
    return sum;
}

// acc += weight * F[i].
__device__ __forceinline__ void fact_accumulate(double* acc, const REAL* __restrict__ row,
                                                double weight, int f_width) {
#pragma unroll
    for (int k = 0; k < ILARGI_FACT_WIDTH; ++k)
        if (k < f_width) acc[k] += (double)row[k] * weight;
}

// G[f_cols[k]] += acc[k] summed over the warp (k < f_width is the same in every lane).
__device__ __forceinline__ void fact_finish(double* __restrict__ G, const double* acc,
                                            const int* __restrict__ f_cols, int f_width) {
#pragma unroll
    for (int k = 0; k < ILARGI_FACT_WIDTH; ++k)
        if (k < f_width) warp_sum_add(&G[f_cols[k]], acc[k]);
}

extern "C" __global__ void ilargi_gramvec_rows(const int* __restrict__ R, int P, long long n,
                                               const REAL* __restrict__ U,
                                               const long long* __restrict__ offsets,
                                               const REAL* __restrict__ F, int f_width,
                                               const int* __restrict__ f_cols,
                                               const double* __restrict__ X,
                                               const double* __restrict__ scale, int has_scale,
                                               const REAL* __restrict__ v, int has_v,
                                               const double* __restrict__ c0,
                                               double* __restrict__ B, double* __restrict__ G,
                                               double* __restrict__ total) {
    double xf[ILARGI_FACT_WIDTH], acc[ILARGI_FACT_WIDTH];
    start_fact(xf, acc, f_width, f_cols, X, scale, has_scale);
    double local = 0.0;
    double start = c0[0];
    GRID_STRIDE_LOOP(i, n) {
        const REAL* row = F + i * f_width;
        double q = start + fact_dot(row, xf, f_width) + gather_parts(R, P, n, i, U, offsets);
        double w = has_v ? (double)v[i] * q : q;
        scatter_parts(R, P, n, i, offsets, B, w);
        fact_accumulate(acc, row, w, f_width);
        local += w;
    }
    warp_sum_add(total, local);
    fact_finish(G, acc, f_cols, f_width);
}

// ------------------------------------------------------------------------------------------------
// Per-part products for the graphed training loops (cuBLAS/cuSPARSE cannot be captured).
// X is a d x m matrix over target columns; part p reads rows cols[k] of it, scaled by a[cols[k]]
// when has_scale (T = T0 diag(a) + 1 b^T).

// U (n_p x m) = S X[cols] for a dense S (n_p x d_p).
extern "C" __global__ void ilargi_dense_part_mm(const REAL* __restrict__ S, int n_p, int d_p,
                                                const int* __restrict__ cols,
                                                const double* __restrict__ scale, int has_scale,
                                                const double* __restrict__ X, int m,
                                                REAL* __restrict__ U) {
    GRID_STRIDE_LOOP(t, (long long)n_p * m) {
        long long j = t / m;
        long long c = t - j * m;
        const REAL* row = S + j * d_p;
        double sum = 0.0;
        for (int k = 0; k < d_p; ++k) {
            int col = cols[k];
            double x = X[(long long)col * m + c];
            if (has_scale) x *= scale[col];
            sum += (double)row[k] * x;
        }
        U[t] = (REAL)sum;
    }
}

// G[cols[k], c] += sum_j S[j, k] B[j, c] for a dense S: one thread per (chunk of rows, k), so a
// warp reads consecutive columns of one row; one atomic per thread and output column.
extern "C" __global__ void ilargi_dense_part_tmm(const REAL* __restrict__ S, int n_p, int d_p,
                                                 const double* __restrict__ B, int m,
                                                 const int* __restrict__ cols, int chunk,
                                                 double* __restrict__ G) {
    long long n_chunks = ((long long)n_p + chunk - 1) / chunk;
    GRID_STRIDE_LOOP(t, n_chunks * d_p) {
        long long q = t / d_p;
        long long k = t - q * d_p;
        long long first = q * chunk;
        long long last = first + chunk < n_p ? first + chunk : n_p;
        for (int c = 0; c < m; ++c) {
            double sum = 0.0;
            for (long long j = first; j < last; ++j) sum += (double)S[j * d_p + k] * B[j * m + c];
            atomicAdd(&G[(long long)cols[k] * m + c], sum);
        }
    }
}

// U (n_p x m) = S X[cols] for a CSR S.
extern "C" __global__ void ilargi_csr_part_mm(const int* __restrict__ indptr,
                                              const int* __restrict__ indices,
                                              const REAL* __restrict__ data, int n_p,
                                              const int* __restrict__ cols,
                                              const double* __restrict__ scale, int has_scale,
                                              const double* __restrict__ X, int m,
                                              REAL* __restrict__ U) {
    GRID_STRIDE_LOOP(t, (long long)n_p * m) {
        long long j = t / m;
        long long c = t - j * m;
        double sum = 0.0;
        for (int e = indptr[j]; e < indptr[j + 1]; ++e) {
            int col = cols[indices[e]];
            double x = X[(long long)col * m + c];
            if (has_scale) x *= scale[col];
            sum += (double)data[e] * x;
        }
        U[t] = (REAL)sum;
    }
}

// G[cols[k], c] += sum_j S[j, k] B[j, c] for a CSR S: one thread per stored entry
// (entry_rows[e] is the row of entry e).
extern "C" __global__ void ilargi_csr_part_tmm(const int* __restrict__ entry_rows,
                                               const int* __restrict__ indices,
                                               const REAL* __restrict__ data, long long nnz,
                                               const double* __restrict__ B, int m,
                                               const int* __restrict__ cols,
                                               double* __restrict__ G) {
    GRID_STRIDE_LOOP(e, nnz) {
        double value = (double)data[e];
        long long row = entry_rows[e];
        long long base = (long long)cols[indices[e]] * m;
        for (int c = 0; c < m; ++c) atomicAdd(&G[base + c], value * B[row * m + c]);
    }
}

// out[c] += sum_k a[k] X[k, c]: launch exactly m blocks (block c owns column c).
extern "C" __global__ void ilargi_column_dot(const double* __restrict__ a,
                                             const double* __restrict__ X, int d, int m,
                                             double* __restrict__ out) {
    long long c = blockIdx.x;
    double local = 0.0;
    for (long long k = threadIdx.x; k < d; k += blockDim.x) local += a[k] * X[k * m + c];
    warp_sum_add(&out[c], local);
}

// out[c] += sum_k X[k, c]^2: launch exactly m blocks.
extern "C" __global__ void ilargi_column_sq_norms(const double* __restrict__ X, int d, int m,
                                                  double* __restrict__ out) {
    long long c = blockIdx.x;
    double local = 0.0;
    for (long long k = threadIdx.x; k < d; k += blockDim.x) {
        double x = X[k * m + c];
        local += x * x;
    }
    warp_sum_add(&out[c], local);
}

extern "C" __global__ void ilargi_fill_zero(double* __restrict__ x, long long n) {
    GRID_STRIDE_LOOP(t, n) x[t] = 0.0;
}

extern "C" __global__ void ilargi_copy(const double* __restrict__ source,
                                       double* __restrict__ target, long long n) {
    GRID_STRIDE_LOOP(t, n) target[t] = source[t];
}

// ------------------------------------------------------------------------------------------------
// Binary logistic regression, one batch gradient step:
//   w <- w - lr (T^T r + l2 w),  b0 <- b0 - lr sum(r),  r = weight * (sigmoid(T w + b0) - y) / total

// Per target row: z = c0 + F[i] . (a w)[f_cols] + sum_p U_p[rows_p[i]] (c0 = b^T w + b0), the
// residual r, B_p += r at rows_p[i], G[f_cols] += r F[i] (the fact part, read once, as in
// ilargi_gramvec_rows), residual_sum += r.
extern "C" __global__ void ilargi_logistic_rows(const int* __restrict__ R, int P, long long n,
                                                const REAL* __restrict__ U,
                                                const long long* __restrict__ offsets,
                                                const REAL* __restrict__ F, int f_width,
                                                const int* __restrict__ f_cols,
                                                const double* __restrict__ X,
                                                const double* __restrict__ scale, int has_scale,
                                                const REAL* __restrict__ y,
                                                const REAL* __restrict__ weights, int has_weights,
                                                double inv_total, const double* __restrict__ c0,
                                                double* __restrict__ B, double* __restrict__ G,
                                                double* __restrict__ residual_sum) {
    double xf[ILARGI_FACT_WIDTH], acc[ILARGI_FACT_WIDTH];
    start_fact(xf, acc, f_width, f_cols, X, scale, has_scale);
    double local = 0.0;
    double start = c0[0];
    GRID_STRIDE_LOOP(i, n) {
        const REAL* row = F + i * f_width;
        double z = start + fact_dot(row, xf, f_width) + gather_parts(R, P, n, i, U, offsets);
        double prob = z >= 0.0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
        double residual = (prob - (double)y[i]) * inv_total;
        if (has_weights) residual *= (double)weights[i];
        scatter_parts(R, P, n, i, offsets, B, residual);
        fact_accumulate(acc, row, residual, f_width);
        local += residual;
    }
    warp_sum_add(residual_sum, local);
    fact_finish(G, acc, f_cols, f_width);
}

// The step itself, from G = T0^T r: gradient = a * G + b * sum(r) + l2 * w.
extern "C" __global__ void ilargi_logistic_update(double* __restrict__ w,
                                                  const double* __restrict__ G,
                                                  const double* __restrict__ scale, int has_scale,
                                                  const double* __restrict__ shift, int has_shift,
                                                  const double* __restrict__ residual_sum, int d,
                                                  double lr, double l2,
                                                  double* __restrict__ intercept,
                                                  int fit_intercept) {
    double total = residual_sum[0];
    GRID_STRIDE_LOOP(k, d) {
        double g = G[k];
        if (has_scale) g *= scale[k];
        if (has_shift) g += shift[k] * total;
        w[k] -= lr * (g + l2 * w[k]);
    }
    if (fit_intercept && blockIdx.x == 0 && threadIdx.x == 0) intercept[0] -= lr * total;
}

// ------------------------------------------------------------------------------------------------
// k-means (Lloyd), one assignment + update step on centroids C (d x K).

#define ILARGI_KMEANS_MAX_K 64

// Per target row: the nearest centroid by ||c||^2 - 2 x.c, with x.c = cb[c] + sum_p U_p[rows_p[i], c]
// (U_p = S_p (a * C)[cols_p], cb = b^T C); B_p[rows_p[i], label] += 1, counts[label] += 1.
extern "C" __global__ void ilargi_kmeans_rows(const int* __restrict__ R, int P, long long n,
                                              const REAL* __restrict__ U,
                                              const long long* __restrict__ offsets, int K,
                                              const double* __restrict__ cb,
                                              const double* __restrict__ norms,
                                              int* __restrict__ labels, double* __restrict__ B,
                                              double* __restrict__ counts) {
    double local[ILARGI_KMEANS_MAX_K];
    for (int c = 0; c < K; ++c) local[c] = 0.0;
    GRID_STRIDE_LOOP(i, n) {
        int best = 0;
        double best_distance = ILARGI_INF;
        for (int c = 0; c < K; ++c) {
            double dot = cb[c];
            for (int p = 0; p < P; ++p) {
                int r = R[p * n + i];
                if (r >= 0) dot += (double)U[(offsets[p] + r) * K + c];
            }
            double distance = norms[c] - 2.0 * dot;
            if (distance < best_distance) {
                best_distance = distance;
                best = c;
            }
        }
        labels[i] = best;
        for (int p = 0; p < P; ++p) {
            int r = R[p * n + i];
            if (r >= 0) atomicAdd(&B[(offsets[p] + r) * K + best], 1.0);
        }
        local[best] += 1.0;
    }
    for (int c = 0; c < K; ++c) warp_sum_add(&counts[c], local[c]);
}

// C[k, c] = (a_k G[k, c] + b_k counts[c]) / counts[c] with G = T0^T A; empty clusters keep C.
extern "C" __global__ void ilargi_kmeans_update(double* __restrict__ C,
                                                const double* __restrict__ G,
                                                const double* __restrict__ counts,
                                                const double* __restrict__ scale, int has_scale,
                                                const double* __restrict__ shift, int has_shift,
                                                int d, int K) {
    GRID_STRIDE_LOOP(t, (long long)d * K) {
        long long k = t / K;
        long long c = t - k * K;
        double count = counts[c];
        if (count > 0.0) {
            double sum = G[t];
            if (has_scale) sum *= scale[k];
            if (has_shift) sum += shift[k] * count;
            C[t] = sum / count;
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Helpers of min/max on CSR sources (double data).

// Per row: min and max of the stored values, and of the implicit zero when the row stores fewer
// than `width` entries. NaN propagates, as in NumPy.
extern "C" __global__ void ilargi_csr_row_extrema(const int* __restrict__ indptr,
                                                  const double* __restrict__ data, int n_rows,
                                                  int width, double* __restrict__ low,
                                                  double* __restrict__ high) {
    GRID_STRIDE_LOOP(i, n_rows) {
        int first = indptr[i], last = indptr[i + 1];
        bool implicit_zero = last - first < width;
        double lo = implicit_zero ? 0.0 : ILARGI_INF;
        double hi = implicit_zero ? 0.0 : -ILARGI_INF;
        for (int e = first; e < last; ++e) {
            double value = data[e];
            if (value != value || value < lo) lo = value;
            if (value != value || value > hi) hi = value;
        }
        low[i] = lo;
        high[i] = hi;
    }
}

// Per row of S diag(a) + b (b for the implicit zeros): the minimum. `order` lists the columns by
// ascending b, so the first column the row does not store gives the implicit minimum.
extern "C" __global__ void ilargi_csr_row_min_affine(const int* __restrict__ indptr,
                                                     const int* __restrict__ indices,
                                                     const double* __restrict__ data,
                                                     const double* __restrict__ scale,
                                                     const double* __restrict__ shift,
                                                     const int* __restrict__ order, int n_rows,
                                                     int width, double* __restrict__ out) {
    GRID_STRIDE_LOOP(i, n_rows) {
        int first = indptr[i], last = indptr[i + 1];
        double best = ILARGI_INF;
        for (int e = first; e < last; ++e) {
            int j = indices[e];
            double value = data[e] * scale[j] + shift[j];
            if (value != value || value < best) best = value;
        }
        for (int q = 0; q < width; ++q) {
            int j = order[q];
            bool stored = false;
            for (int e = first; e < last && !stored; ++e) stored = indices[e] == j;
            if (!stored) {
                double value = shift[j];
                if (value != value || value < best) best = value;
                break;
            }
        }
        out[i] = best;
    }
}
