/* The column pass of the 8-bit slot-major copy (openmemory_local.recall.columns), in C.
 *
 * openmemory: mirrors columns.py
 * (Columns.relevance's numpy loop is THE implementation; this computes the same bits faster.
 * The build records the digest of columns.py, and openmemory_protocol.native refuses this
 * module when the installed columns.py is another: tests/local/test_columns.py holds the two
 * equal on generated and mutated inputs.)
 *
 * accumulate(blocks, slots, threads) -> None
 *   blocks: a sequence of (codes, weights, out): codes a C-contiguous int8 buffer of shape
 *   (dims, n), weights a float32 buffer of len(slots), out a writable float32 buffer of n;
 *   slots: an int64 buffer of coordinates, each in [0, dims).
 *   For every block and row i: out[i] = codes[s0][i] * w0, then out[i] += codes[s][i] * w for
 *   each further slot, in float32 and in the order of slots: the same operations, in the same
 *   order, as the numpy loop of Columns.relevance, so the same bits (no fused multiply-add: the
 *   product is rounded before the sum, as numpy's two passes round it).
 *   With threads > 1 the rows are shared between that many threads (the GIL released).
 *
 * Every buffer's shape, item size and bounds are checked before any read; a refusal raises
 * ValueError or TypeError and writes nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "unknown"
#endif
#ifndef MIRRORS
#define MIRRORS ""
#endif
#ifndef MIRRORS_SHA256
#define MIRRORS_SHA256 "unknown"
#endif

#define TILE 2048   /* rows per tile: 8 KB of out in L1 while the slots' columns stream past */
#define MAX_THREADS 8

typedef struct {
    const int8_t *codes; /* (dims, n) */
    const float *weights;
    float *out;
    Py_ssize_t n;
} block_t;

typedef struct {
    const block_t *blocks;
    Py_ssize_t nblocks;
    const int64_t *slots;
    Py_ssize_t m;
    Py_ssize_t first_tile, last_tile; /* tiles [first, last) of all blocks' tiles, in order */
} job_t;

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx2", "default"), optimize("O3")))
#elif defined(__GNUC__)
#define CLONES __attribute__((optimize("O3")))
#else
#define CLONES
#endif

CLONES static void tile(const block_t *b, const int64_t *slots, Py_ssize_t m, Py_ssize_t lo, Py_ssize_t hi)
{
    float *out = b->out;
    const Py_ssize_t n = b->n;
    const float *w = b->weights;
    const int8_t *c0 = b->codes + slots[0] * n;
    const float w0 = w[0];
    for (Py_ssize_t i = lo; i < hi; i++)
        out[i] = (float)c0[i] * w0;
    Py_ssize_t s = 1;
    for (; s + 4 <= m; s += 4) {
        const int8_t *p0 = b->codes + slots[s] * n, *p1 = b->codes + slots[s + 1] * n;
        const int8_t *p2 = b->codes + slots[s + 2] * n, *p3 = b->codes + slots[s + 3] * n;
        const float v0 = w[s], v1 = w[s + 1], v2 = w[s + 2], v3 = w[s + 3];
        for (Py_ssize_t i = lo; i < hi; i++) {
            float a = out[i];
            float t0 = (float)p0[i] * v0;
            a = a + t0;
            float t1 = (float)p1[i] * v1;
            a = a + t1;
            float t2 = (float)p2[i] * v2;
            a = a + t2;
            float t3 = (float)p3[i] * v3;
            a = a + t3;
            out[i] = a;
        }
    }
    for (; s < m; s++) {
        const int8_t *p = b->codes + slots[s] * n;
        const float v = w[s];
        for (Py_ssize_t i = lo; i < hi; i++) {
            float t = (float)p[i] * v;
            out[i] = out[i] + t;
        }
    }
}

static void *run(void *arg)
{
    const job_t *job = (const job_t *)arg;
    Py_ssize_t index = 0; /* the global number of the block's first tile */
    for (Py_ssize_t k = 0; k < job->nblocks; k++) {
        const block_t *b = &job->blocks[k];
        Py_ssize_t tiles = (b->n + TILE - 1) / TILE;
        for (Py_ssize_t t = 0; t < tiles; t++, index++) {
            if (index < job->first_tile || index >= job->last_tile)
                continue;
            Py_ssize_t lo = t * TILE, hi = lo + TILE < b->n ? lo + TILE : b->n;
            tile(b, job->slots, job->m, lo, hi);
        }
    }
    return NULL;
}

static int get(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes expected, got %zd", what, itemsize, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *accumulate(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *seq_obj, *slots_obj;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OO|i", &seq_obj, &slots_obj, &threads))
        return NULL;
    if (threads < 1)
        threads = 1;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;

    PyObject *seq = PySequence_Fast(seq_obj, "blocks: a sequence of (codes, weights, out) expected");
    if (seq == NULL)
        return NULL;
    Py_ssize_t nblocks = PySequence_Fast_GET_SIZE(seq);
    Py_buffer slots_view;
    if (get(slots_obj, &slots_view, 0, 8, "slots") < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t m = slots_view.len / 8;
    const int64_t *slots = (const int64_t *)slots_view.buf;

    /* three views per block, released at the end whatever happens */
    Py_buffer *views = PyMem_Calloc(nblocks ? 3 * (size_t)nblocks : 1, sizeof(Py_buffer));
    block_t *blocks = PyMem_Calloc(nblocks ? (size_t)nblocks : 1, sizeof(block_t));
    Py_ssize_t held = 0; /* views[0 .. held) are held */
    PyObject *result = NULL;
    if (views == NULL || blocks == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total_tiles = 0;
    for (Py_ssize_t k = 0; k < nblocks; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "blocks: each a tuple (codes, weights, out)");
            goto done;
        }
        Py_buffer *codes = &views[held];
        if (get(PyTuple_GET_ITEM(item, 0), codes, 0, 1, "codes") < 0)
            goto done;
        held++;
        Py_buffer *weights = &views[held];
        if (get(PyTuple_GET_ITEM(item, 1), weights, 0, 4, "weights") < 0)
            goto done;
        held++;
        Py_buffer *out = &views[held];
        if (get(PyTuple_GET_ITEM(item, 2), out, 1, 4, "out") < 0)
            goto done;
        held++;
        if (codes->ndim != 2) {
            PyErr_SetString(PyExc_ValueError, "codes: a 2-dimensional (dims, rows) buffer expected");
            goto done;
        }
        Py_ssize_t dims = codes->shape[0], n = codes->shape[1];
        if (weights->len / 4 != m) {
            PyErr_Format(PyExc_ValueError, "weights: %zd expected (one per slot), got %zd", m, weights->len / 4);
            goto done;
        }
        if (out->len / 4 != n) {
            PyErr_Format(PyExc_ValueError, "out: %zd rows expected, got %zd", n, out->len / 4);
            goto done;
        }
        for (Py_ssize_t s = 0; s < m; s++) {
            if (slots[s] < 0 || slots[s] >= dims) {
                PyErr_Format(PyExc_ValueError, "slots: %lld is not a coordinate of %zd", (long long)slots[s], dims);
                goto done;
            }
        }
        blocks[k].codes = (const int8_t *)codes->buf;
        blocks[k].weights = (const float *)weights->buf;
        blocks[k].out = (float *)out->buf;
        blocks[k].n = n;
        total_tiles += (n + TILE - 1) / TILE;
    }
    if (m == 0) {
        for (Py_ssize_t k = 0; k < nblocks; k++)
            if (blocks[k].n)
                memset(blocks[k].out, 0, (size_t)blocks[k].n * sizeof(float));
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    if (threads > total_tiles)
        threads = total_tiles > 0 ? (int)total_tiles : 1;
    {
        job_t jobs[MAX_THREADS];
        pthread_t ids[MAX_THREADS];
        int started[MAX_THREADS] = {0};
        for (int t = 0; t < threads; t++) {
            jobs[t].blocks = blocks;
            jobs[t].nblocks = nblocks;
            jobs[t].slots = slots;
            jobs[t].m = m;
            jobs[t].first_tile = total_tiles * t / threads;
            jobs[t].last_tile = total_tiles * (t + 1) / threads;
        }
        Py_BEGIN_ALLOW_THREADS
        for (int t = 1; t < threads; t++)
            started[t] = pthread_create(&ids[t], NULL, run, &jobs[t]) == 0;
        run(&jobs[0]);
        for (int t = 1; t < threads; t++) {
            if (started[t])
                pthread_join(ids[t], NULL);
            else
                run(&jobs[t]); /* no thread to be had: this one does its share */
        }
        Py_END_ALLOW_THREADS
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t v = 0; v < held; v++)
        PyBuffer_Release(&views[v]);
    PyMem_Free(views);
    PyMem_Free(blocks);
    PyBuffer_Release(&slots_view);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"accumulate", accumulate, METH_VARARGS,
     "accumulate(blocks, slots, threads=1): out[i] = sum over slots of codes[slot][i] * weight, in float32, "
     "for each (codes, weights, out) of blocks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns_c", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__columns_c(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0
                      || PyModule_AddStringConstant(m, "MIRRORS", MIRRORS) < 0
                      || PyModule_AddStringConstant(m, "MIRRORS_SHA256", MIRRORS_SHA256) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
