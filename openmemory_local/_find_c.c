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
 * Anything else (a tie or near tie, a cosine at the threshold within ~1e-13, a value that is not
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

static int all_zero(const double *x, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++)
        if (x[k] != 0.0) return 0;
    return 1;
}

static PyObject *find_score(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "score(sums, rows: list, vector, threshold)");
        return NULL;
    }
    PyObject *rows = args[1];
    double threshold = PyFloat_AsDouble(args[3]);
    if (threshold == -1.0 && PyErr_Occurred()) return NULL;
    Py_buffer sums, vec;
    /* sums or a vector that is not a C-contiguous buffer: the numpy code decides (or raises its error) */
    if (PyObject_GetBuffer(args[0], &sums, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (PyObject_GetBuffer(args[2], &vec, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&sums);
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    double *y = NULL, *cos = NULL, *bound = NULL;
    Py_ssize_t nrows = PyList_GET_SIZE(rows);
    int undecided = 1;
    if (sums.ndim != 2 || sums.format == NULL || strcmp(sums.format, "d") != 0 || sums.itemsize != 8 ||
        vec.ndim != 1 || vec.format == NULL || nrows == 0)
        goto done;
    Py_ssize_t height = sums.shape[0], dims = sums.shape[1];
    if (vec.shape[0] != dims || dims <= 0 || (double)dims * UNIT_ROUNDOFF > 0.01) goto done;
    int is_float = strcmp(vec.format, "f") == 0 && vec.itemsize == 4;
    int is_double = strcmp(vec.format, "d") == 0 && vec.itemsize == 8;
    if (!is_float && !is_double) goto done;
    y = PyMem_Malloc(sizeof(double) * (size_t)dims);
    cos = PyMem_Malloc(sizeof(double) * (size_t)nrows);
    bound = PyMem_Malloc(sizeof(double) * (size_t)nrows);
    if (y == NULL || cos == NULL || bound == NULL) {
        PyErr_NoMemory();
        undecided = 0;
        goto done;
    }
    for (Py_ssize_t k = 0; k < dims; k++) {
        y[k] = is_float ? (double)((const float *)vec.buf)[k] : ((const double *)vec.buf)[k];
        if (!isfinite(y[k]) || fabs(y[k]) > 1e150) goto done;
    }
    double norm_y = 0.0; /* Cauchy-Schwarz: sum |x_k y_k| <= |x| |y|, so a / r is at most |y| (within roundings) */
    for (Py_ssize_t k = 0; k < dims; k++) norm_y += y[k] * y[k];
    norm_y = sqrt(norm_y);
    const double n_u = (double)dims * UNIT_ROUNDOFF;
    const double gamma = n_u / (1.0 - n_u);
    const double *base = (const double *)sums.buf;
    Py_ssize_t best = 0;
    for (Py_ssize_t i = 0; i < nrows; i++) {
        PyObject *item = PyList_GET_ITEM(rows, i);
        if (!PyLong_Check(item)) goto done; /* numpy decides (and says what is wrong) */
        int overflow = 0;
        long long row = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (row == -1 && PyErr_Occurred()) {
            undecided = 0;
            goto done;
        }
        if (overflow || row < 0 || row >= height) goto done;
        const double *x = base + (size_t)row * (size_t)dims;
        double s, d;
        row_sums(x, y, dims, &s, &d);
        if (!(s < LARGEST_SUM)) goto done; /* also NaN */
        if (s < SMALLEST_SQUARES) {
            if (!all_zero(x, dims)) goto done;
            cos[i] = 0.0; /* numpy: a norm of 0 is taken as 1, and the products are all exactly 0 */
            bound[i] = 0.0;
        } else {
            double r = sqrt(s);
            double c = d / r;
            cos[i] = c;
            bound[i] = 4.0 * (gamma * norm_y + fabs(c) * (gamma + 3.0 * UNIT_ROUNDOFF)) + 2.0 * ABSOLUTE_SLACK;
        }
        if (cos[i] > cos[best]) best = i;
    }
    double highest = -INFINITY;
    for (Py_ssize_t i = 0; i < nrows; i++)
        if (cos[i] + bound[i] > highest) highest = cos[i] + bound[i];
    Py_ssize_t chosen = -2; /* -2: undecided */
    if (highest < threshold) {
        chosen = -1;
    } else {
        double low = cos[best] - bound[best];
        if (low >= threshold) {
            chosen = best;
            for (Py_ssize_t i = 0; i < nrows; i++) {
                double high = cos[i] + bound[i];
                if (i != best && (i < best ? high >= low : high > low)) {
                    chosen = -2;
                    break;
                }
            }
        }
    }
    if (chosen == -2) goto done;
    undecided = 0;
    long long row_out = -1;
    if (chosen >= 0) row_out = PyLong_AsLongLong(PyList_GET_ITEM(rows, chosen));
    result = Py_BuildValue("(Ld)", row_out, cos[best]);
done:
    PyMem_Free(y);
    PyMem_Free(cos);
    PyMem_Free(bound);
    PyBuffer_Release(&vec);
    PyBuffer_Release(&sums);
    if (result == NULL && undecided && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

/* --- the module ---------------------------------------------------------------------------- */

static PyMethodDef find_methods[] = {
    {"score", (PyCFunction)(void (*)(void))find_score, METH_FASTCALL,
     "score(sums, rows, vector, threshold) -> (row, cosine) | None: GroupIndex._score_numpy's decision when no "
     "rounding can change it (row -1: no join), else None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef find_module = {PyModuleDef_HEAD_INIT, "_find_c",
                                         "Finding a surprise's group in C (see openmemory_local/_find_c.c).", -1,
                                         find_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__find_c(void) {
    PyObject *m = PyModule_Create(&find_module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
