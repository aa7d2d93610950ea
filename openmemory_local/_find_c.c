/* The optional C accelerator of finding a surprise's group (openmemory_local._find_c).
 *
 * Loaded only through openmemory_protocol.native.load("openmemory_local._find_c"); the numpy code
 * of cluster.GroupIndex.find is the reference and the fallback (tests/local/test_find_c.py):
 *
 *   score(sums, rows, vector, threshold)
 *       the decision of GroupIndex._score_numpy (the cosine of the surprise's vector with the
 *       centroid sum of each row of `rows`, the first maximum, joined when it reaches threshold),
 *       made only when no rounding can change it: (row, cosine), row -1 when no row joins, or
 *       None when the decision is too close to call (the caller runs the numpy code).
 *
 * Why a bound and not the same bits: numpy's row sums (einsum) and its matrix-vector product
 * (OpenBLAS's dgemv) add the products in an order of their own, which depends on the CPU's kernel
 * and on a row's place in the matrix; a sum made in C in another order differs in its last bits.
 * Every such computed cosine, numpy's and this code's, is within a bound of the exact one: for a
 * dot product of n terms in any order (FMA or not), |fl(x.y) - x.y| <= gamma_n sum|x_i y_i| with
 * gamma_n = n u / (1 - n u), u = 2^-53; a sum of squares is within gamma_n of itself relatively,
 * a square root and a division add one rounding each. And sum|x_i y_i| <= |x| |y| (Cauchy-Schwarz),
 * so with r the norm of x and c = d / r as computed here, every computed cosine lies within
 *     E = 2 (gamma_n |y| + |c| (gamma_n + 3u)) + 2^-530
 * of the exact one (the factor 2 covers the bound's own roundings and the second-order terms;
 * the absolute term, underflow), and numpy's within B = 2E of this code's. The decision is taken
 * here only when it holds for every value in those intervals:
 *   - no join: every row's c + B is below the threshold (numpy's maximum is below it too);
 *   - a join of the first maximum m: c_m - B_m reaches the threshold, every row before m has
 *     c + B < c_m - B_m and every row after it c + B <= c_m - B_m (numpy's first maximum is m).
 * Anything else (a tie or near tie, a cosine at the threshold within ~2e-13, a value that is not
 * finite, a row too small to square without underflow, a row index numpy would wrap or refuse, sums
 * that are not a C-contiguous 2-D float64 buffer, a vector that is not float32/float64 of their width)
 * is left to the numpy code. The returned cosine is this code's value (within B of numpy's); sleep
 * does not use it.
 *
 * Plain C99 and the CPython C API; every read bounded by the buffers' shapes, every result checked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "unknown"
#endif

#define UNIT_ROUNDOFF 0x1p-53
#define ABSOLUTE_SLACK 0x1p-530 /* far above the underflow a product of two doubles can lose, and
                                   far below any difference a decision looks at */
#define SMALLEST_SQUARES 1e-280 /* a row whose squares sum below this: underflow may have eaten them */
#define LARGEST_SUM 1e300       /* a sum above this: another order might overflow */

/* s = sum x_k^2 and d = sum x_k y_k, each in eight interleaved partial sums (any order is within the
 * bound): with GCC or clang, in pairs of doubles (SSE2's registers on x86-64), else one by one */
#if defined(__GNUC__) || defined(__clang__)
typedef double pair __attribute__((vector_size(16)));

static void row_sums(const double *x, const double *y, Py_ssize_t n, double *s_out, double *d_out) {
    pair s0 = {0, 0}, s1 = {0, 0}, s2 = {0, 0}, s3 = {0, 0}, d0 = {0, 0}, d1 = {0, 0}, d2 = {0, 0}, d3 = {0, 0};
    Py_ssize_t k = 0;
    for (; k + 8 <= n; k += 8) {
        pair x0, x1, x2, x3, y0, y1, y2, y3;
        memcpy(&x0, x + k, sizeof x0); /* unaligned loads, without undefined behaviour */
        memcpy(&x1, x + k + 2, sizeof x1);
        memcpy(&x2, x + k + 4, sizeof x2);
        memcpy(&x3, x + k + 6, sizeof x3);
        memcpy(&y0, y + k, sizeof y0);
        memcpy(&y1, y + k + 2, sizeof y1);
        memcpy(&y2, y + k + 4, sizeof y2);
        memcpy(&y3, y + k + 6, sizeof y3);
        s0 += x0 * x0;
        s1 += x1 * x1;
        s2 += x2 * x2;
        s3 += x3 * x3;
        d0 += x0 * y0;
        d1 += x1 * y1;
        d2 += x2 * y2;
        d3 += x3 * y3;
    }
    pair st = (s0 + s1) + (s2 + s3), dt = (d0 + d1) + (d2 + d3);
    double s = st[0] + st[1], d = dt[0] + dt[1];
    for (; k < n; k++) {
        s += x[k] * x[k];
        d += x[k] * y[k];
    }
    *s_out = s;
    *d_out = d;
}

#else
static void row_sums(const double *x, const double *y, Py_ssize_t n, double *s_out, double *d_out) {
    double s[8] = {0}, d[8] = {0};
    Py_ssize_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++) {
            s[j] += x[k + j] * x[k + j];
            d[j] += x[k + j] * y[k + j];
        }
    for (; k < n; k++) {
        s[0] += x[k] * x[k];
        d[0] += x[k] * y[k];
    }
    *s_out = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    *d_out = ((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7]));
}
#endif

/* the row asked for the cache while the one before it is summed (rows are scattered: each a cold
 * start for the hardware's prefetcher); nothing is read through the hint */
static void prefetch_row(const double *x, Py_ssize_t dims) {
#if defined(__GNUC__) || defined(__clang__)
    const char *p = (const char *)x;
    for (size_t off = 0; off < (size_t)dims * sizeof(double); off += 64) __builtin_prefetch(p + off, 0, 3);
#else
    (void)x, (void)dims;
#endif
}

static int all_zero(const double *x, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++)
        if (x[k] != 0.0) return 0;
    return 1;
}

#define UNDECIDED (-2)
#define NO_JOIN (-1)
#define FAILED (-3) /* an exception is set */

/* The decision over rows[0..n) of sums (see the top of this file): the index into rows of the row
 * joined, NO_JOIN, UNDECIDED (including sums or a vector this does not take, and rows that are not
 * rows of sums) or FAILED; *best_cos, this code's best cosine. */
static Py_ssize_t decide(const Py_buffer *sums, const Py_buffer *vec, const int64_t *rows, Py_ssize_t n,
                         double threshold, double *best_cos) {
    if (sums->ndim != 2 || sums->format == NULL || strcmp(sums->format, "d") != 0 || sums->itemsize != 8 ||
        vec->ndim != 1 || vec->format == NULL || n <= 0)
        return UNDECIDED;
    Py_ssize_t height = sums->shape[0], dims = sums->shape[1];
    if (vec->shape[0] != dims || dims <= 0 || (double)dims * UNIT_ROUNDOFF > 0.01) return UNDECIDED;
    int is_float = strcmp(vec->format, "f") == 0 && vec->itemsize == 4;
    int is_double = strcmp(vec->format, "d") == 0 && vec->itemsize == 8;
    if (!is_float && !is_double) return UNDECIDED;
    for (Py_ssize_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= height) return UNDECIDED; /* numpy wraps or refuses it: its call */
    Py_ssize_t outcome = UNDECIDED;
    double *y = PyMem_Malloc(sizeof(double) * ((size_t)dims + 2 * (size_t)n));
    if (y == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    double *cos = y + dims, *bound = cos + n;
    double norm_y = 0.0; /* Cauchy-Schwarz: sum |x_k y_k| <= |x| |y|, so a / r is at most |y| (within roundings) */
    for (Py_ssize_t k = 0; k < dims; k++) {
        y[k] = is_float ? (double)((const float *)vec->buf)[k] : ((const double *)vec->buf)[k];
        if (!isfinite(y[k]) || fabs(y[k]) > 1e150) goto done;
        norm_y += y[k] * y[k];
    }
    norm_y = sqrt(norm_y);
    const double n_u = (double)dims * UNIT_ROUNDOFF;
    const double gamma = n_u / (1.0 - n_u);
    const double *base = (const double *)sums->buf;
    Py_ssize_t best = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const double *x = base + (size_t)rows[i] * (size_t)dims;
        if (i + 1 < n) prefetch_row(base + (size_t)rows[i + 1] * (size_t)dims, dims);
        double sq, d;
        row_sums(x, y, dims, &sq, &d);
        if (!(sq < LARGEST_SUM)) goto done; /* also NaN */
        if (sq < SMALLEST_SQUARES) {
            if (!all_zero(x, dims)) goto done;
            cos[i] = 0.0; /* numpy: a norm of 0 is taken as 1, and the products are all exactly 0 */
            bound[i] = 0.0;
        } else {
            double r = sqrt(sq);
            double c = d / r;
            cos[i] = c;
            bound[i] = 4.0 * (gamma * norm_y + fabs(c) * (gamma + 3.0 * UNIT_ROUNDOFF)) + 2.0 * ABSOLUTE_SLACK;
        }
        if (cos[i] > cos[best]) best = i;
    }
    double highest = -INFINITY;
    for (Py_ssize_t i = 0; i < n; i++)
        if (cos[i] + bound[i] > highest) highest = cos[i] + bound[i];
    if (highest < threshold) {
        outcome = NO_JOIN;
    } else {
        double low = cos[best] - bound[best];
        if (low >= threshold) {
            outcome = best;
            for (Py_ssize_t i = 0; i < n; i++) {
                double high = cos[i] + bound[i];
                if (i != best && (i < best ? high >= low : high > low)) {
                    outcome = UNDECIDED;
                    break;
                }
            }
        }
    }
    *best_cos = cos[best];
done:
    PyMem_Free(y);
    return outcome;
}

/* sums' and vector's buffers (0), or 1 when either is not a C-contiguous buffer (nothing held) */
static int get_buffers(PyObject *sums_obj, PyObject *vec_obj, Py_buffer *sums, Py_buffer *vec) {
    if (PyObject_GetBuffer(sums_obj, sums, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 1;
    }
    if (PyObject_GetBuffer(vec_obj, vec, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyBuffer_Release(sums);
        return 1;
    }
    return 0;
}

/* a list's rows as a PyMem array (to free) of *n_out; an item that is not an int, or out of int64's
 * range, becomes -1 (not a row: undecided); NULL with an exception set on error */
static int64_t *list_rows(PyObject *list, Py_ssize_t *n_out) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    int64_t *rows = PyMem_Malloc(sizeof(int64_t) * ((size_t)n + 1));
    if (rows == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        int overflow = 0;
        long long row = PyLong_Check(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : -1;
        if (row == -1 && PyErr_Occurred()) {
            PyMem_Free(rows);
            return NULL;
        }
        rows[i] = overflow ? -1 : (int64_t)row;
    }
    *n_out = n;
    return rows;
}

static PyObject *find_score(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "score(sums, rows: list, vector, threshold)");
        return NULL;
    }
    PyObject *list = args[1];
    double threshold = PyFloat_AsDouble(args[3]);
    if (threshold == -1.0 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = 0;
    int64_t *rows = list_rows(list, &n);
    if (rows == NULL) return NULL;
    Py_buffer sums, vec;
    if (get_buffers(args[0], args[2], &sums, &vec)) { /* numpy decides (or raises its error) */
        PyMem_Free(rows);
        Py_RETURN_NONE;
    }
    double best = 0.0;
    Py_ssize_t outcome = decide(&sums, &vec, rows, n, threshold, &best);
    PyBuffer_Release(&vec);
    PyBuffer_Release(&sums);
    int64_t row = outcome >= 0 ? rows[outcome] : -1;
    PyMem_Free(rows);
    if (outcome == FAILED) return NULL;
    if (outcome == UNDECIDED) Py_RETURN_NONE;
    return Py_BuildValue("(Ld)", (long long)row, best);
}

/* --- a member's vector added to its group's sum ------------------------------------------------ */

/* sums[row] += vector (numpy's in-place add: each element one IEEE addition of the float32 or
 * float64 value, so the same bits): 1 done, 0 not taken (sums or vector not what this takes, a row
 * not one of its rows: numpy's add does it, or raises its error) */
static int add_into(PyObject *sums_obj, long long row, PyObject *vec_obj) {
    Py_buffer sums, vec;
    if (PyObject_GetBuffer(sums_obj, &sums, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (PyObject_GetBuffer(vec_obj, &vec, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&sums);
        return 0;
    }
    int done = 0;
    if (sums.ndim == 2 && sums.format != NULL && strcmp(sums.format, "d") == 0 && sums.itemsize == 8 &&
        vec.ndim == 1 && vec.format != NULL && vec.shape[0] == sums.shape[1] && row >= 0 && row < sums.shape[0]) {
        Py_ssize_t dims = sums.shape[1];
        double *x = (double *)sums.buf + (size_t)row * (size_t)dims;
        if (strcmp(vec.format, "f") == 0 && vec.itemsize == 4) {
            const float *v = vec.buf;
            for (Py_ssize_t k = 0; k < dims; k++) x[k] += (double)v[k];
            done = 1;
        } else if (strcmp(vec.format, "d") == 0 && vec.itemsize == 8) {
            const double *v = vec.buf;
            for (Py_ssize_t k = 0; k < dims; k++) x[k] += v[k];
            done = 1;
        }
    }
    PyBuffer_Release(&vec);
    PyBuffer_Release(&sums);
    return done;
}

static PyObject *find_add_row(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* add_row(sums, row, vector) -> bool: add_into (False: numpy's add does it) */
    if (nargs != 3 || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "add_row(sums, row: int, vector)");
        return NULL;
    }
    int overflow = 0;
    long long row = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (row == -1 && PyErr_Occurred()) return NULL;
    return PyBool_FromLong(!overflow && add_into(args[0], row, args[2]));
}

/* --- the inverted index, by rows ------------------------------------------------------------ */

/* A key's postings: a dict {feature: bytearray}, each bytearray the rows (native int32, in the order
 * indexed) of the groups whose signatures have that feature. */

/* for each feature of feats not in mine (a set), add it to mine and row to postings[feature] (a
 * bytearray, made when absent); -1 with an exception set on error */
static int index_into(PyObject *postings, PyObject *feats, PyObject *mine, PyObject *row_obj) {
    long long value = PyLong_AsLongLong(row_obj);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a row is from 0 to 2**31 - 1");
        return -1;
    }
    int32_t row = (int32_t)value;
    Py_ssize_t pos = 0;
    PyObject *feature, *weight;
    while (PyDict_Next(feats, &pos, &feature, &weight)) {
        Py_INCREF(feature); /* a set's or dict's comparison may run Python code */
        int has = PySet_Contains(mine, feature);
        if (has != 0) {
            Py_DECREF(feature);
            if (has < 0) return -1;
            continue;
        }
        if (PySet_Add(mine, feature) < 0) {
            Py_DECREF(feature);
            return -1;
        }
        PyObject *posting = PyDict_GetItemWithError(postings, feature);
        if (posting != NULL) {
            Py_INCREF(posting); /* held until written: nothing else may free it meanwhile */
        } else if (PyErr_Occurred() || (posting = PyByteArray_FromStringAndSize(NULL, 0)) == NULL ||
                   PyDict_SetItem(postings, feature, posting) < 0) {
            Py_XDECREF(posting);
            Py_DECREF(feature);
            return -1;
        }
        Py_DECREF(feature);
        int ok = PyByteArray_CheckExact(posting);
        if (!ok) PyErr_SetString(PyExc_TypeError, "a posting is a bytearray");
        Py_ssize_t size = ok ? PyByteArray_GET_SIZE(posting) : 0;
        if (ok && (ok = PyByteArray_Resize(posting, size + (Py_ssize_t)sizeof row) == 0))
            memcpy(PyByteArray_AS_STRING(posting) + size, &row, sizeof row);
        Py_DECREF(posting);
        if (!ok) return -1;
    }
    return 0;
}

static PyObject *find_index_rows(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* index_rows(postings, feats, mine, row): index_into */
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) || !PySet_Check(args[2]) ||
        !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "index_rows(postings: dict, feats: dict, mine: set, row: int)");
        return NULL;
    }
    if (index_into(args[0], args[1], args[2], args[3]) < 0) return NULL;
    Py_RETURN_NONE;
}

typedef struct {
    int32_t row;
    Py_ssize_t count;
} Cand;

static int compare_int64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* GroupIndex._candidate_rows_python over a key's postings by rows: the shortest `prefix` postings of the
 * surprise's features (of at most posting_cap rows; ties in the features' order), all their rows or
 * the `candidates` most shared (ties to the first met), sorted: a PyMem array of *n_out rows (to free),
 * NULL with an exception set on error */
static int64_t *candidates_of(PyObject *postings, PyObject *feats, Py_ssize_t posting_cap, Py_ssize_t prefix,
                              Py_ssize_t candidates, Py_ssize_t *n_out) {
    Py_ssize_t nfeats = PyDict_GET_SIZE(feats), nlists = 0;
    PyObject **lists = PyMem_Calloc((size_t)nfeats + 1, sizeof(PyObject *)); /* owned references */
    Cand *items = NULL;
    int32_t *slots = NULL;
    int64_t *rows = NULL;
    Py_ssize_t nrows = 0;
    int ok = 0;
    if (lists == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *feature, *weight;
    /* every look-up first (they may run Python code), then only C reads the postings */
    while (PyDict_Next(feats, &pos, &feature, &weight) && nlists <= nfeats) {
        Py_INCREF(feature);
        PyObject *posting = PyDict_GetItemWithError(postings, feature); /* borrowed */
        Py_DECREF(feature);
        if (posting == NULL) {
            if (PyErr_Occurred()) goto done;
            continue;
        }
        if (!PyByteArray_CheckExact(posting) || PyByteArray_GET_SIZE(posting) % (Py_ssize_t)sizeof(int32_t)) {
            PyErr_SetString(PyExc_TypeError, "a posting is a bytearray of int32 rows");
            goto done;
        }
        Py_ssize_t len = PyByteArray_GET_SIZE(posting) / (Py_ssize_t)sizeof(int32_t);
        if (len > 0 && len <= posting_cap) {
            Py_INCREF(posting);
            lists[nlists++] = posting;
        }
    }
    if (nlists == 0) {
        ok = 1;
        goto done;
    }
#define LEN(b) (PyByteArray_GET_SIZE(b) / (Py_ssize_t)sizeof(int32_t))
    /* the shortest first, ties in the order met (list.sort(key=len) is stable): an insertion sort */
    for (Py_ssize_t i = 1; i < nlists; i++) {
        PyObject *x = lists[i];
        Py_ssize_t j = i;
        while (j > 0 && LEN(lists[j - 1]) > LEN(x)) {
            lists[j] = lists[j - 1];
            j--;
        }
        lists[j] = x;
    }
    Py_ssize_t used = nlists;
    if (prefix < 0) prefix = used + prefix < 0 ? 0 : used + prefix; /* lists[:prefix], as Python cuts */
    if (used > prefix) used = prefix;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < used; i++) total += LEN(lists[i]);
    /* each row counted in an open-addressing table (slot: index into items + 1), items in the order first met */
    size_t size = 16;
    while (size < (size_t)total * 2) size <<= 1;
    items = PyMem_Malloc(sizeof(Cand) * ((size_t)total + 1));
    slots = PyMem_Calloc(size, sizeof(int32_t));
    if (items == NULL || slots == NULL || total >= INT32_MAX) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < used; i++) {
        const char *data = PyByteArray_AS_STRING(lists[i]);
        Py_ssize_t len = LEN(lists[i]);
        for (Py_ssize_t k = 0; k < len; k++) {
            int32_t row;
            memcpy(&row, data + k * (Py_ssize_t)sizeof row, sizeof row);
            if (row < 0) {
                PyErr_SetString(PyExc_ValueError, "a posting holds rows from 0");
                goto done;
            }
            size_t h = ((uint32_t)row * 0x9E3779B1u) & (size - 1);
            while (slots[h] && items[slots[h] - 1].row != row) h = (h + 1) & (size - 1);
            if (slots[h]) {
                items[slots[h] - 1].count++;
            } else {
                items[n].row = row;
                items[n].count = 1;
                slots[h] = (int32_t)++n;
            }
        }
    }
#undef LEN
    /* every row met, or the `candidates` most shared (ties to the first met: cluster._most_shared) */
    Py_ssize_t chosen = n, cutoff = 0, ties = 0;
    int all = n <= candidates;
    if (!all) {
        if (candidates <= 0) {
            ok = 1;
            goto done;
        }
        /* the largest cutoff with at least `candidates` rows counted at least that often (a count is
         * at most `used`, unless a posting holds a row twice: the largest count bounds the table) */
        Py_ssize_t top = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (items[i].count > top) top = items[i].count;
        Py_ssize_t *histogram = PyMem_Calloc((size_t)top + 1, sizeof(Py_ssize_t));
        if (histogram == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) histogram[items[i].count]++;
        Py_ssize_t reached = 0;
        for (cutoff = top; cutoff > 0; cutoff--) {
            if (reached + histogram[cutoff] >= candidates) break;
            reached += histogram[cutoff];
        }
        PyMem_Free(histogram);
        ties = candidates - reached; /* rows at the cutoff taken, the first met */
        chosen = candidates;
    }
    rows = PyMem_Malloc(sizeof(int64_t) * ((size_t)chosen + 1));
    if (rows == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n && nrows < chosen; i++) {
        if (!all) {
            if (items[i].count < cutoff) continue;
            if (items[i].count == cutoff) {
                if (ties == 0) continue;
                ties--;
            }
        }
        rows[nrows++] = items[i].row;
    }
    qsort(rows, (size_t)nrows, sizeof(int64_t), compare_int64);
    ok = 1;
done:
    for (Py_ssize_t i = 0; i < nlists; i++) Py_DECREF(lists[i]);
    PyMem_Free(lists);
    PyMem_Free(items);
    PyMem_Free(slots);
    if (ok && rows == NULL && (rows = PyMem_Malloc(sizeof(int64_t))) == NULL) PyErr_NoMemory();
    if (!ok) {
        PyMem_Free(rows);
        return NULL;
    }
    *n_out = rows == NULL ? 0 : nrows;
    return rows;
}

static PyObject *rows_list(const int64_t *rows, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyLong_FromLongLong((long long)rows[i]);
        if (r == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, r);
    }
    return list;
}

static PyObject *find_candidate_rows(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* candidate_rows(postings, feats, posting_cap, prefix, candidates) -> list: candidates_of */
    if (nargs != 5 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "candidate_rows(postings: dict, feats: dict, posting_cap, prefix, candidates)");
        return NULL;
    }
    Py_ssize_t numbers[3];
    for (int i = 0; i < 3; i++) {
        numbers[i] = PyNumber_AsSsize_t(args[2 + i], PyExc_OverflowError);
        if (numbers[i] == -1 && PyErr_Occurred()) return NULL;
    }
    Py_ssize_t n = 0;
    int64_t *rows = candidates_of(args[0], args[1], numbers[0], numbers[1], numbers[2], &n);
    if (rows == NULL) return NULL;
    PyObject *list = rows_list(rows, n);
    PyMem_Free(rows);
    return list;
}

/* --- the whole find ------------------------------------------------------------------------- */

static PyObject *name_exact, *name_by_key, *name_exhaustive_max, *name_key_rows, *name_row_postings,
    *name_posting_cap, *name_prefix, *name_candidates, *name_sums, *name_gid;

/* an attribute of the index as a Py_ssize_t; -1 with an exception set on error */
static Py_ssize_t int_attribute(PyObject *index, PyObject *name) {
    PyObject *value = PyObject_GetAttr(index, name);
    if (value == NULL) return -1;
    Py_ssize_t n = PyNumber_AsSsize_t(value, PyExc_OverflowError);
    Py_DECREF(value);
    return n;
}

static PyObject *find_find(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* find(index, key, sig, feats, vector, threshold) -> (gid | None, cosine) | None: GroupIndex.find
     * (the exact signature, else the key's groups or the candidates, scored by `decide`); None when
     * the Python code must answer (the key's rows not made yet, a decision too close to call) */
    if (nargs != 6 || !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "find(index, key, sig, feats: dict, vector, threshold)");
        return NULL;
    }
    PyObject *index = args[0], *key = args[1], *feats = args[3];
    double threshold = PyFloat_AsDouble(args[5]);
    if (threshold == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *result = NULL, *exact = NULL, *by_key = NULL, *key_rows = NULL, *row_postings = NULL, *sums = NULL,
             *gids = NULL, *probe = NULL;
    int64_t *rows = NULL;
    Py_ssize_t n = 0;
    int python = 0; /* 1: the Python code answers */
    if ((exact = PyObject_GetAttr(index, name_exact)) == NULL) goto done;
    if (!PyDict_Check(exact)) {
        python = 1;
        goto done;
    }
    if ((probe = PyTuple_Pack(2, key, args[2])) == NULL) goto done;
    PyObject *gid = PyDict_GetItemWithError(exact, probe); /* borrowed */
    if (gid == NULL && PyErr_Occurred()) goto done;
    if (gid != NULL && gid != Py_None) {
        result = Py_BuildValue("(Od)", gid, 1.0);
        goto done;
    }
    if ((by_key = PyObject_GetAttr(index, name_by_key)) == NULL) goto done;
    if (!PyDict_Check(by_key)) {
        python = 1;
        goto done;
    }
    PyObject *groups = PyDict_GetItemWithError(by_key, key); /* borrowed */
    if (groups == NULL && PyErr_Occurred()) goto done;
    if (groups != NULL && !PyList_Check(groups)) {
        python = 1;
        goto done;
    }
    Py_ssize_t ngroups = groups == NULL ? 0 : PyList_GET_SIZE(groups); /* groups not used past here */
    if (ngroups == 0) {
        result = Py_BuildValue("(Od)", Py_None, 0.0);
        goto done;
    }
    Py_ssize_t exhaustive_max = int_attribute(index, name_exhaustive_max);
    if (exhaustive_max == -1 && PyErr_Occurred()) goto done;
    if (ngroups <= exhaustive_max) {
        if ((key_rows = PyObject_GetAttr(index, name_key_rows)) == NULL) goto done;
        PyObject *list = PyDict_Check(key_rows) ? PyDict_GetItemWithError(key_rows, key) : NULL; /* borrowed */
        if (list == NULL && PyErr_Occurred()) goto done;
        if (list == NULL || !PyList_Check(list)) { /* made by the Python code, once per change of the key */
            python = 1;
            goto done;
        }
        if ((rows = list_rows(list, &n)) == NULL) goto done;
    } else {
        if ((row_postings = PyObject_GetAttr(index, name_row_postings)) == NULL) goto done;
        if (!PyDict_Check(row_postings)) {
            python = 1;
            goto done;
        }
        PyObject *postings = PyDict_GetItemWithError(row_postings, key); /* borrowed */
        if (postings == NULL && PyErr_Occurred()) goto done;
        if (postings == NULL) {
            result = Py_BuildValue("(Od)", Py_None, 0.0);
            goto done;
        }
        if (!PyDict_Check(postings)) {
            python = 1;
            goto done;
        }
        Py_INCREF(postings); /* held while the look-ups run */
        Py_ssize_t numbers[3];
        PyObject *names[3] = {name_posting_cap, name_prefix, name_candidates};
        for (int i = 0; i < 3; i++) {
            numbers[i] = int_attribute(index, names[i]);
            if (numbers[i] == -1 && PyErr_Occurred()) {
                Py_DECREF(postings);
                goto done;
            }
        }
        rows = candidates_of(postings, feats, numbers[0], numbers[1], numbers[2], &n);
        Py_DECREF(postings);
        if (rows == NULL) goto done;
        if (n == 0) {
            result = Py_BuildValue("(Od)", Py_None, 0.0);
            goto done;
        }
    }
    if ((sums = PyObject_GetAttr(index, name_sums)) == NULL || (gids = PyObject_GetAttr(index, name_gid)) == NULL)
        goto done;
    Py_buffer sums_view, vec_view;
    if (!PyList_Check(gids) || get_buffers(sums, args[4], &sums_view, &vec_view)) {
        python = 1;
        goto done;
    }
    double best = 0.0;
    Py_ssize_t outcome = decide(&sums_view, &vec_view, rows, n, threshold, &best);
    PyBuffer_Release(&vec_view);
    PyBuffer_Release(&sums_view);
    if (outcome == FAILED) goto done;
    if (outcome == UNDECIDED || (outcome >= 0 && rows[outcome] >= PyList_GET_SIZE(gids))) {
        python = 1;
        goto done;
    }
    result = Py_BuildValue("(Od)", outcome >= 0 ? PyList_GET_ITEM(gids, rows[outcome]) : Py_None, best);
done:
    PyMem_Free(rows);
    Py_XDECREF(probe);
    Py_XDECREF(exact);
    Py_XDECREF(by_key);
    Py_XDECREF(key_rows);
    Py_XDECREF(row_postings);
    Py_XDECREF(sums);
    Py_XDECREF(gids);
    if (python && result == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

static PyObject *name_row, *name_indexed, *name_features;

static PyObject *find_join(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* join(index, gid, key, sig, feats, vector, max_indexed) -> bool: GroupIndex.join (the vector added
     * to the group's sum, the signature to the exact map and, for the group's first max_indexed
     * signatures, its features to the postings by rows); False, nothing changed: the Python code does it */
    if (nargs != 7 || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "join(index, gid, key, sig, feats: dict, vector, max_indexed)");
        return NULL;
    }
    PyObject *index = args[0], *gid = args[1], *key = args[2], *feats = args[4];
    Py_ssize_t max_indexed = PyNumber_AsSsize_t(args[6], PyExc_OverflowError);
    if (max_indexed == -1 && PyErr_Occurred()) return NULL;
    PyObject *result = NULL, *row_of = NULL, *sums = NULL, *exact = NULL, *indexed = NULL, *features = NULL,
             *row_postings = NULL, *probe = NULL, *postings = NULL, *count = NULL, *row = NULL, *mine = NULL;
    if ((row_of = PyObject_GetAttr(index, name_row)) == NULL || (sums = PyObject_GetAttr(index, name_sums)) == NULL ||
        (exact = PyObject_GetAttr(index, name_exact)) == NULL ||
        (indexed = PyObject_GetAttr(index, name_indexed)) == NULL ||
        (features = PyObject_GetAttr(index, name_features)) == NULL ||
        (row_postings = PyObject_GetAttr(index, name_row_postings)) == NULL)
        goto done;
    if (!PyDict_Check(row_of) || !PyDict_Check(exact) || !PyDict_Check(indexed) || !PyDict_Check(features) ||
        !PyDict_Check(row_postings)) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    /* each held (the dictionaries' operations below may run Python code) */
    if ((row = PyDict_GetItemWithError(row_of, gid)) == NULL && PyErr_Occurred()) goto done;
    Py_XINCREF(row);
    if ((mine = PyDict_GetItemWithError(features, gid)) == NULL && PyErr_Occurred()) goto done;
    Py_XINCREF(mine);
    if ((count = PyDict_GetItemWithError(indexed, gid)) == NULL && PyErr_Occurred()) goto done;
    Py_XINCREF(count);
    int overflow = 0;
    long long r = row != NULL && PyLong_CheckExact(row) ? PyLong_AsLongLongAndOverflow(row, &overflow) : -1;
    if (r == -1 && PyErr_Occurred()) goto done;
    if (mine == NULL || !PySet_Check(mine) || count == NULL || !PyLong_CheckExact(count) || overflow || r < 0 ||
        r > INT32_MAX || !add_into(sums, r, args[5])) { /* anything unusual: the Python code (and its errors) */
        result = Py_NewRef(Py_False);
        goto done;
    }
    /* from here on, the Python code's steps in its order */
    if ((probe = PyTuple_Pack(2, key, args[3])) == NULL) goto done;
    PyObject *had = PyDict_SetDefault(exact, probe, gid); /* borrowed */
    if (had == NULL) goto done;
    Py_ssize_t n = PyLong_AsSsize_t(count);
    if (n == -1 && PyErr_Occurred()) goto done;
    if (n >= max_indexed) {
        result = Py_NewRef(Py_True);
        goto done;
    }
    PyObject *next = PyLong_FromSsize_t(n + 1);
    if (next == NULL) goto done;
    int rc = PyDict_SetItem(indexed, gid, next);
    Py_DECREF(next);
    if (rc < 0) goto done;
    postings = PyDict_GetItemWithError(row_postings, key);
    if (postings == NULL && PyErr_Occurred()) goto done;
    if (postings != NULL) {
        Py_INCREF(postings);
    } else if ((postings = PyDict_New()) == NULL || PyDict_SetItem(row_postings, key, postings) < 0) {
        goto done;
    }
    if (!PyDict_Check(postings)) {
        PyErr_SetString(PyExc_TypeError, "a key's postings are a dict");
        goto done;
    }
    if (index_into(postings, feats, mine, row) == 0) result = Py_NewRef(Py_True);
done:
    Py_XDECREF(row);
    Py_XDECREF(mine);
    Py_XDECREF(count);
    Py_XDECREF(postings);
    Py_XDECREF(probe);
    Py_XDECREF(row_of);
    Py_XDECREF(sums);
    Py_XDECREF(exact);
    Py_XDECREF(indexed);
    Py_XDECREF(features);
    Py_XDECREF(row_postings);
    return result;
}

/* --- the module ---------------------------------------------------------------------------- */

static PyMethodDef find_methods[] = {
    {"score", (PyCFunction)(void (*)(void))find_score, METH_FASTCALL,
     "score(sums, rows, vector, threshold) -> (row, cosine) | None: GroupIndex._score_numpy's decision when no "
     "rounding can change it (row -1: no join), else None."},
    {"find", (PyCFunction)(void (*)(void))find_find, METH_FASTCALL,
     "find(index, key, sig, feats, vector, threshold) -> (gid | None, cosine) | None: GroupIndex.find (None: the "
     "Python code answers)."},
    {"join", (PyCFunction)(void (*)(void))find_join, METH_FASTCALL,
     "join(index, gid, key, sig, feats, vector, max_indexed) -> bool: GroupIndex.join (False: the Python code "
     "does it)."},
    {"add_row", (PyCFunction)(void (*)(void))find_add_row, METH_FASTCALL,
     "add_row(sums, row, vector) -> bool: sums[row] += vector (False: not taken, numpy's add does it)."},
    {"index_rows", (PyCFunction)(void (*)(void))find_index_rows, METH_FASTCALL,
     "index_rows(postings, feats, mine, row): GroupIndex._index_signature's loop, over a key's postings by rows."},
    {"candidate_rows", (PyCFunction)(void (*)(void))find_candidate_rows, METH_FASTCALL,
     "candidate_rows(postings, feats, posting_cap, prefix, candidates) -> list[int]: GroupIndex._candidate_rows "
     "over a key's postings by rows."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef find_module = {PyModuleDef_HEAD_INIT, "_find_c",
                                         "Finding a surprise's group in C (see openmemory_local/_find_c.c).", -1,
                                         find_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__find_c(void) {
    PyObject *m = PyModule_Create(&find_module);
    if (m == NULL) return NULL;
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {{&name_exact, "_exact"}, {&name_by_key, "_by_key"}, {&name_exhaustive_max, "exhaustive_max"},
                 {&name_key_rows, "_key_rows"}, {&name_row_postings, "_row_postings"},
                 {&name_posting_cap, "posting_cap"}, {&name_prefix, "prefix"}, {&name_candidates, "candidates"},
                 {&name_sums, "_sums"}, {&name_gid, "_gid"}, {&name_row, "_row"}, {&name_indexed, "_indexed"},
                 {&name_features, "_features"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL) {
            Py_DECREF(m);
            return NULL;
        }
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
