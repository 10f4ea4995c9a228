// CUDA kernels of Ilargi's GPU backend (ilargi/rewriter/kernels/gpu.py compiles them with CuPy).
//
// REAL is the element type of the sources (`float` or `double`), defined by the loader in front of
// this source. Everything computed (gathered values, segment sums, products, accumulators) is
// double, so float32 data still sums in float64.
//
// Conventions: index vectors are int (-1 = absent); every 2-D array is C-contiguous; kernels loop
// over their work (grid-stride), so any grid size is correct; no kernel allocates or synchronizes
// the device, so every one of them can be captured in a CUDA graph. Kernels that cooperate across
// lanes (shuffles, __syncwarp, shared memory) loop warp-uniformly and never return early.

#ifndef REAL
#define REAL double
#endif

#ifndef ILARGI_DYNAMIC_SHARED  // (the CPU test emulator defines its own)
#define ILARGI_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

#define ILARGI_INF __longlong_as_double(0x7ff0000000000000LL)
#define FULL_MASK 0xffffffffu

#define GRID_STRIDE_LOOP(t, count)                                                     \
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < (count); \
         t += (long long)gridDim.x * blockDim.x)

__device__ __forceinline__ double warp_sum(double value) {
    for (int offset = 16; offset > 0; offset >>= 1)
        value += __shfl_down_sync(FULL_MASK, value, offset);
    return value;
}

// The sum of `value` over the block, valid in thread 0. Every thread of the block must call it.
__device__ double block_sum(double value) {
    __shared__ double partial[32];
    value = warp_sum(value);
    __syncthreads();  // an earlier call has finished reading `partial`
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = value;
    __syncthreads();
    double sum = 0.0;
    if (threadIdx.x < 32) {
        sum = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0;
        sum = warp_sum(sum);
    }
    return sum;
}

// ------------------------------------------------------------------------------------------------
// The two primitives of every rewrite rule, for the generic (per-part) paths.

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

// ------------------------------------------------------------------------------------------------
// A sparse product over "pieces": the workhorse of the stacked passes.
//
//   out[out_rows[q], c] (=, += or atomic +=) sum_{e in piece q} data[e] * weight[j] * X[j, c],
//   j = indices[e], for every piece q and column c < m.
//
// A piece is a CSR row, or a slice of one: long rows are cut into pieces of bounded length (so a
// few huge rows, e.g. a 45-row dimension taken by 400k target rows, still spread over the GPU) and
// their pieces add into the same output row atomically (mode 2). Without cut rows every output row
// has one piece (modes 0/1, no atomics, deterministic). A group of `group` lanes (a power of two)
// shares a (piece, column) pair, strided over its entries, and reduces with shuffles.
// has_data = 0 reads every entry as 1 (the indicator matrices); has_weight = 0 weights 1;
// has_labels != 0 reads X[j, c] as (labels[j] == c), a one-hot matrix (the k-means step).
//
// Uses: U = Z x (the stacked sources, forward), B = I^T Y (segment sums of every part at once),
// G += Z^T B (backward), I_q^T diag(w) S_p (crossprod blocks of the fact table).
extern "C" __global__ void ilargi_csr_mm(const int* __restrict__ indptr,
                                         const int* __restrict__ indices,
                                         const REAL* __restrict__ data, int has_data,
                                         const double* __restrict__ weight, int has_weight,
                                         const double* __restrict__ X,
                                         const int* __restrict__ labels, int has_labels, int m,
                                         int n_pieces, const int* __restrict__ out_rows,
                                         int group, int mode, double* __restrict__ out) {
    const int lane = threadIdx.x & 31, sub = lane & (group - 1);
    const long long per_warp = 32 / group;
    const long long pairs = (long long)n_pieces * m;
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const long long n_warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long first = warp * per_warp; first < pairs; first += n_warps * per_warp) {
        const long long pair = first + lane / group;
        const bool valid = pair < pairs;
        long long piece = 0;
        int c = 0;
        double sum = 0.0;
        if (valid) {
            piece = m == 1 ? pair : pair / m;
            c = (int)(pair - piece * m);
            const int end = indptr[piece + 1];
            for (int e = indptr[piece] + sub; e < end; e += group) {
                const int j = indices[e];
                double value = has_labels ? (labels[j] == c ? 1.0 : 0.0) : X[(long long)j * m + c];
                if (has_data) value *= (double)data[e];
                if (has_weight) value *= weight[j];
                sum += value;
            }
        }
        for (int offset = group >> 1; offset > 0; offset >>= 1)
            sum += __shfl_xor_sync(FULL_MASK, sum, offset);
        if (valid && sub == 0) {
            double* target = &out[(long long)out_rows[piece] * m + c];
            if (mode == 2) atomicAdd(target, sum);
            else if (mode == 1) *target += sum;
            else *target = sum;
        }
    }
}

// ------------------------------------------------------------------------------------------------
// One pass over the target rows (one column): T y, and what T^T needs of it.
//
// Row i's value is q_i = c0 + F[i] . x[f_cols] + sum_p U[offsets[p] + R[p, i]]: F is the fact table
// (an identity part, dense, W <= 64 columns; W = 0 for none), read here; every other part p
// contributes its precomputed U_p = S_p x_p at the source row R[p, i] it takes (-1: none).
//   mode 0: out_i = q_i                                          (T y)
//   mode 1: out_i = w_i = v_i q_i (v_i = 1 without v)            (the gram-vector pattern)
//   mode 2: out_i = w_i = v_i (sigmoid(q_i) - y_i) * inv_total   (the logistic gradient residual)
// Modes 1/2 also add F^T w into G[f_cols] and sum(w) into total[0]; the other parts' share of
// T^T w is a segment sum of `out` (ilargi_csr_mm), done after this pass.
//
// A warp takes 32 consecutive rows at a time: it copies their W * 32 values of F into shared memory
// with coalesced loads (transposed, stride 33: conflict-free in both later phases), then lane r
// computes row r, then lane c sums column c of F weighted by the 32 w_i (lanes c and c + 32 for
// W > 32). So F is read once, in full cache lines, for both products, and F^T w costs one atomic
// per column per block. Dynamic shared memory: 8 * (W + warps * (33 W + 32)) bytes.
#define ILARGI_LOADS 8  // loads of F each lane keeps in flight

extern "C" __global__ void ilargi_rows(const REAL* __restrict__ F, int W,
                                       const int* __restrict__ f_cols,
                                       const double* __restrict__ x, const int* __restrict__ R,
                                       int P, long long n, const double* __restrict__ U,
                                       const long long* __restrict__ offsets,
                                       const double* __restrict__ c0, int mode,
                                       const REAL* __restrict__ v, int has_v,
                                       const REAL* __restrict__ y, double inv_total,
                                       double* __restrict__ out, double* __restrict__ G,
                                       double* __restrict__ total) {
    ILARGI_DYNAMIC_SHARED(double, shared);
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int stride = 33 * W + 32;
    double* xf = shared;
    double* tile = shared + W + (threadIdx.x >> 5) * stride;  // tile[col * 33 + row]
    double* row_weights = tile + 33 * W;
    for (int k = threadIdx.x; k < W; k += blockDim.x) xf[k] = x[f_cols[k]];
    __syncthreads();
    const bool backward = mode != 0;
    const double start = c0[0];
    // This lane's first element of a tile (element e = lane + 32 j is row e / W, column e % W),
    // and the step to its next one, so the loop needs no division.
    const int first_row = W ? lane / W : 0, first_col = W ? lane % W : 0;
    const int step_rows = W ? 32 / W : 0, step_cols = W ? 32 % W : 0;
    double acc_low = 0.0, acc_high = 0.0, local = 0.0;
    const long long n_tiles = (n + 31) >> 5;
    for (long long t = blockIdx.x * (long long)warps + (threadIdx.x >> 5); t < n_tiles;
         t += (long long)gridDim.x * warps) {
        const long long base = t << 5;
        const int rows = n - base < 32 ? (int)(n - base) : 32;
        if (W) {
            const REAL* source = F + base * W;
            const int count = rows * W;
            int row = first_row, col = first_col;
            for (int first = lane; first < count; first += 32 * ILARGI_LOADS) {
                double values[ILARGI_LOADS];  // all loads in flight before the first store
#pragma unroll
                for (int u = 0; u < ILARGI_LOADS; ++u) {
                    const int e = first + 32 * u;
                    values[u] = e < count ? (double)source[e] : 0.0;
                }
#pragma unroll
                for (int u = 0; u < ILARGI_LOADS; ++u) {
                    if (first + 32 * u < count) tile[col * 33 + row] = values[u];
                    row += step_rows;
                    col += step_cols;
                    if (col >= W) {
                        col -= W;
                        ++row;
                    }
                }
            }
            __syncwarp();
        }
        double w = 0.0;
        if (lane < rows) {
            const long long i = base + lane;
            double q = start;
            for (int k = 0; k < W; ++k) q += tile[k * 33 + lane] * xf[k];
            for (int p = 0; p < P; ++p) {
                const int r = R[p * n + i];
                if (r >= 0) q += U[offsets[p] + r];
            }
            if (mode == 0) {
                w = q;
            } else if (mode == 1) {
                w = has_v ? (double)v[i] * q : q;
            } else {
                const double prob = q >= 0.0 ? 1.0 / (1.0 + exp(-q)) : exp(q) / (1.0 + exp(q));
                w = (prob - (double)y[i]) * inv_total;
                if (has_v) w *= (double)v[i];
            }
            out[i] = w;
        }
        local += w;
        if (W) {
            if (backward) {
                row_weights[lane] = w;
                __syncwarp();
                for (int c = lane; c < W; c += 32) {
                    double sum = 0.0;
                    for (int r = 0; r < rows; ++r) sum += tile[c * 33 + r] * row_weights[r];
                    if (c == lane) acc_low += sum;
                    else acc_high += sum;
                }
            }
            __syncwarp();  // the next tile overwrites this one
        }
    }
    if (!backward) return;  // uniform over the block
    local = warp_sum(local);
    if (lane == 0) atomicAdd(total, local);
    if (W) {
        tile[lane] = acc_low;  // each warp's column sums, in its own (finished) tile
        if (lane + 32 < W) tile[lane + 32] = acc_high;
        __syncthreads();
        for (int k = threadIdx.x; k < W; k += blockDim.x) {
            double sum = 0.0;
            for (int wi = 0; wi < warps; ++wi) sum += shared[W + wi * stride + k];
            atomicAdd(&G[f_cols[k]], sum);
        }
    }
}

// out[i, c] (+)= sum_p U[offsets[p] + R[p, i], c]: the gathers of every part at once (m columns).
extern "C" __global__ void ilargi_gather_parts(const int* __restrict__ R, int P, long long n,
                                               const double* __restrict__ U,
                                               const long long* __restrict__ offsets, int m,
                                               int accumulate, double* __restrict__ out) {
    GRID_STRIDE_LOOP(t, n * m) {
        const long long i = m == 1 ? t : t / m;
        const long long c = t - i * m;
        double sum = accumulate ? out[t] : 0.0;
        for (int p = 0; p < P; ++p) {
            const int r = R[p * n + i];
            if (r >= 0) sum += U[(offsets[p] + r) * m + c];
        }
        out[t] = sum;
    }
}

extern "C" __global__ void ilargi_fill_zero(double* __restrict__ x, long long n) {
    GRID_STRIDE_LOOP(t, n) x[t] = 0.0;
}

extern "C" __global__ void ilargi_copy(const double* __restrict__ source,
                                       double* __restrict__ target, long long n) {
    GRID_STRIDE_LOOP(t, n) target[t] = source[t];
}

// ------------------------------------------------------------------------------------------------
// Binary logistic regression, one batch gradient step on coefficients w (T = T0 diag(a) + 1 b^T):
//   w <- w - lr (T^T r + l2 w),  b0 <- b0 - lr sum(r),  r = weight * (sigmoid(T w + b0) - y) / total
// prepare -> U = Z x (csr_mm) -> ilargi_rows (mode 2) -> B = I^T r, G += Z^T B (csr_mm) -> update.
// c0 (the row pass's constant b0 + b . w) is set to b0 by the previous update (or the reset) and
// receives b . w from prepare's blocks, so both kernels spread over the GPU (d can be 50k).

// G = 0, residual_sum = 0, x = a * w (the scaled coefficients the row pass reads), c0 += b . w.
extern "C" __global__ void ilargi_logistic_prepare(const double* __restrict__ coef,
                                                   const double* __restrict__ scale,
                                                   int has_scale,
                                                   const double* __restrict__ shift,
                                                   int has_shift, int d, double* __restrict__ x,
                                                   double* __restrict__ c0,
                                                   double* __restrict__ G,
                                                   double* __restrict__ residual_sum) {
    double dot = 0.0;
    GRID_STRIDE_LOOP(k, d) {
        G[k] = 0.0;
        x[k] = has_scale ? scale[k] * coef[k] : coef[k];
        if (has_shift) dot += shift[k] * coef[k];
    }
    if (has_shift) {  // uniform over the grid
        dot = block_sum(dot);
        if (threadIdx.x == 0) atomicAdd(c0, dot);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) residual_sum[0] = 0.0;
}

// The step itself, from G = T0^T r: gradient = a * G + b * sum(r) + l2 * w; then c0 = b0 for the
// next step's prepare.
extern "C" __global__ void ilargi_logistic_update(double* __restrict__ w,
                                                  const double* __restrict__ G,
                                                  const double* __restrict__ scale, int has_scale,
                                                  const double* __restrict__ shift, int has_shift,
                                                  const double* __restrict__ residual_sum, int d,
                                                  double lr, double l2,
                                                  double* __restrict__ intercept,
                                                  int fit_intercept, double* __restrict__ c0) {
    double total = residual_sum[0];
    GRID_STRIDE_LOOP(k, d) {
        double g = G[k];
        if (has_scale) g *= scale[k];
        if (has_shift) g += shift[k] * total;
        w[k] -= lr * (g + l2 * w[k]);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        if (fit_intercept) intercept[0] -= lr * total;
        c0[0] = intercept[0];
    }
}

// ------------------------------------------------------------------------------------------------
// k-means (Lloyd), one assignment + update step on centroids C (d x K):
// prepare -> U = Z (a * C) (csr_mm) -> rows -> B = I^T onehot(labels), G = Z^T B (csr_mm) -> update.

#define ILARGI_KMEANS_MAX_K 64

// A grid of K * chunks blocks: block (c = b % K, chunk = b / K) adds its chunk of ||C[:, c]||^2 and
// b . C[:, c] into norms[c] and cb[c] (zeroed by the previous update, or the reset); all blocks zero
// G (g_size entries) and counts.
extern "C" __global__ void ilargi_kmeans_prepare(const double* __restrict__ C, int d, int K,
                                                 const double* __restrict__ shift, int has_shift,
                                                 double* __restrict__ norms,
                                                 double* __restrict__ cb,
                                                 double* __restrict__ counts,
                                                 double* __restrict__ G, long long g_size) {
    GRID_STRIDE_LOOP(t, g_size) G[t] = 0.0;
    if (blockIdx.x == 0 && threadIdx.x < K) counts[threadIdx.x] = 0.0;
    const int c = blockIdx.x % K, chunks = gridDim.x / K;
    double squares = 0.0, dot = 0.0;
    for (long long k = (blockIdx.x / K) * (long long)blockDim.x + threadIdx.x; k < d;
         k += (long long)chunks * blockDim.x) {
        const double value = C[k * K + c];
        squares += value * value;
        if (has_shift) dot += shift[k] * value;
    }
    squares = block_sum(squares);
    dot = block_sum(dot);
    if (threadIdx.x == 0) {
        atomicAdd(&norms[c], squares);
        if (has_shift) atomicAdd(&cb[c], dot);
    }
}

// Per target row: the nearest centroid by ||c||^2 - 2 x.c, x.c = cb[c] + sum_p U_p[R[p, i], c]
// (U_p = S_p (a * C)[cols_p]); labels[i] = it; counts[label] += 1 (a per-block histogram).
extern "C" __global__ void ilargi_kmeans_rows(const int* __restrict__ R, int P, long long n,
                                              const double* __restrict__ U,
                                              const long long* __restrict__ offsets, int K,
                                              const double* __restrict__ cb,
                                              const double* __restrict__ norms,
                                              int* __restrict__ labels,
                                              double* __restrict__ counts) {
    __shared__ int histogram[ILARGI_KMEANS_MAX_K];
    for (int c = threadIdx.x; c < K; c += blockDim.x) histogram[c] = 0;
    __syncthreads();
    GRID_STRIDE_LOOP(i, n) {
        int best = 0;
        double best_distance = ILARGI_INF;
        for (int c = 0; c < K; ++c) {
            double dot = cb[c];
            for (int p = 0; p < P; ++p) {
                const int r = R[p * n + i];
                if (r >= 0) dot += U[(offsets[p] + r) * K + c];
            }
            const double distance = norms[c] - 2.0 * dot;
            if (distance < best_distance) {
                best_distance = distance;
                best = c;
            }
        }
        labels[i] = best;
        atomicAdd(&histogram[best], 1);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < K; c += blockDim.x)
        if (histogram[c]) atomicAdd(&counts[c], (double)histogram[c]);
}

// C[k, c] = (a_k G[k, c] + b_k counts[c]) / counts[c] with G = T0^T A; empty clusters keep C.
// Zeroes norms and cb for the next step's prepare.
extern "C" __global__ void ilargi_kmeans_update(double* __restrict__ C,
                                                const double* __restrict__ G,
                                                const double* __restrict__ counts,
                                                const double* __restrict__ scale, int has_scale,
                                                const double* __restrict__ shift, int has_shift,
                                                int d, int K, double* __restrict__ norms,
                                                double* __restrict__ cb) {
    if (blockIdx.x == 0 && threadIdx.x < K) {
        norms[threadIdx.x] = 0.0;
        cb[threadIdx.x] = 0.0;
    }
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
