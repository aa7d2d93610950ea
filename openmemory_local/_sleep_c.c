/* The optional C accelerator of sleep's hot steps (openmemory_local._sleep_c).
 *
 * Loaded only through openmemory_protocol.native.load("openmemory_local._sleep_c"); the Python
 * code beside it (embed.py, normalize.py, episodes.py, sleep.py) is the reference and the
 * fallback, and each function here is tested equal to it, value for value and bit for bit (tests/local/test_sleep_c.py):
 *
 *   features(text, stop_words)      embed._features_uncached for an ASCII text (None otherwise:
 *                                   the caller runs the Python code, which NFKC-normalises)
 *   embed_into(feats, out)          embed.embed_features's vector, written into a float32
 *                                   buffer of DIMS (256) values; False when a weight is not a
 *                                   finite float (the caller runs the Python code)
 *   slot(feature)                   embed._slot: (blake2b-64 % 256, +-1.0)
 *   volatile_tail(text)             normalize._volatile_tail for an ASCII text (None otherwise):
 *                                   the regular expressions' substitutions, matched case by case
 *
 * Sums are made in the order the Python code makes them (a slot's weights in the features'
 * order, in doubles); a norm is math.fsum's exactly rounded sum (CPython's algorithm), so the
 * results are the same bits. Plain C99 and the CPython C API; every Python call's result is
 * checked and every reference released on every path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "unknown"
#endif

#define DIMS 256
#define BIGRAM_WEIGHT 0.5

/* --- BLAKE2b (RFC 7693), unkeyed, an 8-byte digest ----------------------------------------- */

static const uint64_t blake2b_iv[8] = {
    0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL, 0xA54FF53A5F1D36F1ULL,
    0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL, 0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL};

static const uint8_t blake2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t rotr64(uint64_t x, unsigned n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64_le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#define G(a, b, c, d, x, y)                  \
    do {                                     \
        v[a] = v[a] + v[b] + (x);            \
        v[d] = rotr64(v[d] ^ v[a], 32);      \
        v[c] = v[c] + v[d];                  \
        v[b] = rotr64(v[b] ^ v[c], 24);      \
        v[a] = v[a] + v[b] + (y);            \
        v[d] = rotr64(v[d] ^ v[a], 16);      \
        v[c] = v[c] + v[d];                  \
        v[b] = rotr64(v[b] ^ v[c], 63);      \
    } while (0)

static void blake2b_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t v[16], m[16];
    for (int i = 0; i < 16; i++) m[i] = load64_le(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = blake2b_iv[i];
    }
    v[12] ^= t; /* the byte counter's low word (inputs here are far below 2**64 bytes) */
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = blake2b_sigma[r];
        G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* blake2b(data, digest_size=8).digest() read as a little-endian unsigned integer */
static uint64_t blake2b_64(const uint8_t *data, size_t len) {
    uint64_t h[8];
    uint8_t block[128];
    uint64_t t = 0;
    memcpy(h, blake2b_iv, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8ULL; /* digest length 8, no key, fanout 1, depth 1 */
    while (len > 128) {
        t += 128;
        blake2b_compress(h, data, t, 0);
        data += 128;
        len -= 128;
    }
    memset(block, 0, sizeof block);
    if (len) memcpy(block, data, len);
    t += len;
    blake2b_compress(h, block, t, 1);
    return h[0]; /* the first 8 bytes of the state, little-endian */
}

/* --- math.fsum (CPython's algorithm: Shewchuk's partials, exactly rounded) ----------------- */

typedef struct {
    double *p;
    Py_ssize_t n, cap;
    double small[32];
} Partials;

static void partials_init(Partials *ps) {
    ps->p = ps->small;
    ps->n = 0;
    ps->cap = 32;
}

static void partials_free(Partials *ps) {
    if (ps->p != ps->small) PyMem_Free(ps->p);
}

/* add a finite x: 1, or 0 when the running sum overflows (math.fsum raises OverflowError: the
 * caller lets the Python code decide), or -1 (with MemoryError) when the partials cannot grow */
static int partials_add(Partials *ps, double x) {
    Py_ssize_t i = 0;
    for (Py_ssize_t j = 0; j < ps->n; j++) {
        double y = ps->p[j];
        if (fabs(x) < fabs(y)) {
            double t = x;
            x = y;
            y = t;
        }
        double hi = x + y;
        if (!isfinite(hi)) return 0;
        double yr = hi - x;
        double lo = y - yr;
        if (lo != 0.0) ps->p[i++] = lo;
        x = hi;
    }
    ps->n = i;
    if (x != 0.0) {
        if (ps->n >= ps->cap) {
            Py_ssize_t cap = ps->cap * 2;
            double *grown = PyMem_Malloc(sizeof(double) * (size_t)cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            memcpy(grown, ps->p, sizeof(double) * (size_t)ps->n);
            if (ps->p != ps->small) PyMem_Free(ps->p);
            ps->p = grown;
            ps->cap = cap;
        }
        ps->p[ps->n++] = x;
    }
    return 1;
}

static double partials_sum(Partials *ps) {
    double hi = 0.0, lo = 0.0, x, y, yr;
    Py_ssize_t n = ps->n;
    double *p = ps->p;
    if (n > 0) {
        hi = p[--n];
        while (n > 0) {
            x = hi;
            y = p[--n];
            hi = x + y;
            yr = hi - x;
            lo = y - yr;
            if (lo != 0.0) break;
        }
        if (n > 0 && ((lo < 0.0 && p[n - 1] < 0.0) || (lo > 0.0 && p[n - 1] > 0.0))) {
            y = lo * 2.0;
            x = hi + y;
            yr = x - hi;
            if (y == yr) hi = x;
        }
    }
    return hi;
}

/* --- features ------------------------------------------------------------------------------ */

static int is_alnum_ascii(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int ends_with(const char *s, Py_ssize_t n, const char *suffix) {
    Py_ssize_t k = (Py_ssize_t)strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, (size_t)k) == 0;
}

/* embed.stem for a lower-case ASCII token s[0:n]: writes the stem into out (n + 1 bytes at
 * least), returns its length */
static Py_ssize_t stem_ascii(const char *s, Py_ssize_t n, char *out) {
    memcpy(out, s, (size_t)n);
    if (n <= 3) return n;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(s[i] >= 'a' && s[i] <= 'z')) return n; /* not isalpha(): kept */
    if (ends_with(s, n, "ies") && n > 4) {
        out[n - 3] = 'y';
        return n - 2;
    }
    static const char *const suffixes[2] = {"ing", "ed"};
    for (int k = 0; k < 2; k++) {
        Py_ssize_t len = (Py_ssize_t)strlen(suffixes[k]);
        if (ends_with(s, n, suffixes[k]) && n - len >= 3) {
            Py_ssize_t base = n - len;
            if (base >= 4 && out[base - 1] == out[base - 2] && out[base - 1] != 'l' && out[base - 1] != 's' &&
                out[base - 1] != 'z')
                base -= 1;
            return base;
        }
    }
    if (ends_with(s, n, "es")) {
        Py_ssize_t m = n - 2;
        if (ends_with(s, m, "s") || ends_with(s, m, "x") || ends_with(s, m, "z") || ends_with(s, m, "ch") ||
            ends_with(s, m, "sh"))
            return m;
    }
    if (ends_with(s, n, "s") && !ends_with(s, n, "ss") && !ends_with(s, n, "us") && !ends_with(s, n, "is"))
        return n - 1;
    return n;
}

/* out[key] += weight (out[key] = weight when absent) */
static int add_weight(PyObject *out, PyObject *key, double weight) {
    PyObject *old = PyDict_GetItemWithError(out, key); /* borrowed */
    double value = weight;
    if (old == NULL) {
        if (PyErr_Occurred()) return -1;
    } else {
        value = PyFloat_AS_DOUBLE(old) + weight; /* only floats are stored here */
    }
    PyObject *f = PyFloat_FromDouble(value);
    if (f == NULL) return -1;
    int rc = PyDict_SetItem(out, key, f);
    Py_DECREF(f);
    return rc;
}

/* The stop words, as C strings in an open-addressing table, made from the set last given (held). */
static PyObject *stop_set = NULL;
static char *stop_chars = NULL;    /* the words, each followed by a NUL */
static Py_ssize_t *stop_slots = NULL; /* offset into stop_chars + 1, 0 when empty */
static size_t stop_mask = 0;

static size_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return (size_t)(h ^ (h >> 32));
}

static int stop_table(PyObject *words) {
    if (words == stop_set) return 0;
    Py_ssize_t chars = 0, count = 0, pos = 0;
    PyObject *word;
    Py_hash_t hash;
    while (_PySet_NextEntry(words, &pos, &word, &hash)) {
        if (PyUnicode_Check(word) && PyUnicode_IS_ASCII(word)) { /* others never equal an ASCII token */
            chars += PyUnicode_GET_LENGTH(word) + 1;
            count++;
        }
    }
    size_t size = 16;
    while (size < (size_t)count * 2 + 1) size <<= 1;
    char *new_chars = PyMem_Malloc((size_t)chars + 1);
    Py_ssize_t *new_slots = PyMem_Calloc(size, sizeof(Py_ssize_t));
    if (new_chars == NULL || new_slots == NULL) {
        PyMem_Free(new_chars);
        PyMem_Free(new_slots);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t at = 0;
    pos = 0;
    while (_PySet_NextEntry(words, &pos, &word, &hash)) {
        if (!(PyUnicode_Check(word) && PyUnicode_IS_ASCII(word))) continue;
        Py_ssize_t n = PyUnicode_GET_LENGTH(word);
        memcpy(new_chars + at, PyUnicode_DATA(word), (size_t)n);
        new_chars[at + n] = '\0';
        size_t i = hash_bytes(new_chars + at, n) & (size - 1);
        while (new_slots[i]) i = (i + 1) & (size - 1);
        new_slots[i] = at + 1;
        at += n + 1;
    }
    PyMem_Free(stop_chars);
    PyMem_Free(stop_slots);
    stop_chars = new_chars;
    stop_slots = new_slots;
    stop_mask = size - 1;
    Py_INCREF(words);
    Py_XSETREF(stop_set, words);
    return 0;
}

static int is_stop(const char *s, Py_ssize_t n) {
    size_t i = hash_bytes(s, n) & stop_mask;
    while (stop_slots[i]) {
        const char *w = stop_chars + stop_slots[i] - 1;
        if ((Py_ssize_t)strlen(w) == n && memcmp(w, s, (size_t)n) == 0) return 1;
        i = (i + 1) & stop_mask;
    }
    return 0;
}

static PyObject *ascii_str(const char *a, Py_ssize_t na, const char *b, Py_ssize_t nb) {
    /* a, or "a b" when b is given: an ASCII str made directly */
    Py_ssize_t n = b ? na + 1 + nb : na;
    PyObject *out = PyUnicode_New(n, 127);
    if (out == NULL) return NULL;
    Py_UCS1 *data = PyUnicode_1BYTE_DATA(out);
    memcpy(data, a, (size_t)na);
    if (b) {
        data[na] = ' ';
        memcpy(data + na + 1, b, (size_t)nb);
    }
    return out;
}

typedef struct {
    Py_ssize_t at, len; /* the stem in the stems buffer */
    char stop;          /* the raw token is a stop word */
    PyObject *str;      /* the stem as a str (owned) */
} Token;

static PyObject *sleep_features(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyAnySet_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "features(text: str, stop_words: set | frozenset)");
        return NULL;
    }
    PyObject *text = args[0];
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NONE; /* NFKC and Unicode letters: the Python code */
    if (stop_table(args[1]) < 0) return NULL;
    const char *s = (const char *)PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    /* at most one token per two characters; stems are no longer than their tokens */
    Py_ssize_t cap = n / 2 + 1;
    Token *toks = PyMem_Malloc(sizeof(Token) * (size_t)cap);
    char *lower = PyMem_Malloc((size_t)n + 1);
    char *stems = PyMem_Malloc((size_t)n + 1);
    Py_ssize_t count = 0, used = 0;
    PyObject *out = NULL;
    if (toks == NULL || lower == NULL || stems == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        lower[i] = (char)((c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c);
    }
    for (Py_ssize_t i = 0; i < n;) {
        if (!is_alnum_ascii((unsigned char)lower[i])) {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        while (i < n && is_alnum_ascii((unsigned char)lower[i])) i++;
        Token *t = &toks[count];
        t->stop = (char)is_stop(lower + start, i - start);
        t->at = used;
        t->len = stem_ascii(lower + start, i - start, stems + used);
        used += t->len;
        t->str = ascii_str(stems + t->at, t->len, NULL, 0);
        if (t->str == NULL) goto done;
        count++;
    }
    out = PyDict_New();
    if (out == NULL) goto done;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (!toks[k].stop && add_weight(out, toks[k].str, 1.0) < 0) goto fail;
    }
    for (Py_ssize_t k = 0; k + 1 < count; k++) {
        if (toks[k].stop && toks[k + 1].stop) continue;
        PyObject *pair = ascii_str(stems + toks[k].at, toks[k].len, stems + toks[k + 1].at, toks[k + 1].len);
        if (pair == NULL) goto fail;
        int rc = add_weight(out, pair, BIGRAM_WEIGHT);
        Py_DECREF(pair);
        if (rc < 0) goto fail;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    if (toks != NULL)
        for (Py_ssize_t k = 0; k < count; k++) Py_DECREF(toks[k].str);
    PyMem_Free(toks);
    PyMem_Free(lower);
    PyMem_Free(stems);
    return out;
}

/* --- the embedding ------------------------------------------------------------------------- */

/* a feature's slot: -1 on error */
static int feature_slot(PyObject *feature, int *index, double *sign) {
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize(feature, &len);
    if (utf8 == NULL) return -1;
    uint64_t h = blake2b_64((const uint8_t *)utf8, (size_t)len);
    *index = (int)(h % DIMS);
    *sign = (h >> 63) ? -1.0 : 1.0;
    return 0;
}

static PyObject *sleep_slot(PyObject *Py_UNUSED(self), PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "a feature is a str");
        return NULL;
    }
    int index;
    double sign;
    if (feature_slot(arg, &index, &sign) < 0) return NULL;
    return Py_BuildValue("(id)", index, sign);
}

static PyObject *sleep_embed_into(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *feats, *target;
    if (!PyArg_ParseTuple(args, "O!O:embed_into", &PyDict_Type, &feats, &target)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(target, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (view.len != (Py_ssize_t)(DIMS * sizeof(float))) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the target holds 256 float32 values");
        return NULL;
    }
    double sums[DIMS];
    int order[DIMS]; /* the slots in the order first met (what the Python dict of slots keeps) */
    char seen[DIMS];
    int used = 0;
    memset(seen, 0, sizeof seen);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(feats, &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyFloat_CheckExact(value) || !isfinite(PyFloat_AS_DOUBLE(value))) {
            PyBuffer_Release(&view);
            Py_RETURN_FALSE; /* not a features dict of finite floats: the Python code decides */
        }
        int index;
        double sign;
        if (feature_slot(key, &index, &sign) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        double add = sign * PyFloat_AS_DOUBLE(value);
        if (!seen[index]) {
            seen[index] = 1;
            order[used++] = index;
            sums[index] = 0.0 + add;
        } else {
            sums[index] = sums[index] + add;
        }
    }
    Partials ps;
    partials_init(&ps);
    for (int k = 0; k < used; k++) {
        double v = sums[order[k]];
        double square = v * v;
        if (!isfinite(square)) {
            partials_free(&ps);
            PyBuffer_Release(&view);
            Py_RETURN_FALSE;
        }
        int rc = partials_add(&ps, square);
        if (rc <= 0) {
            partials_free(&ps);
            PyBuffer_Release(&view);
            if (rc < 0) return NULL;
            Py_RETURN_FALSE;
        }
    }
    double norm = sqrt(partials_sum(&ps));
    partials_free(&ps);
    float *out = (float *)view.buf;
    for (int i = 0; i < DIMS; i++) {
        double v = seen[i] ? sums[i] : 0.0;
        if (norm > 0.0) v = v / norm;
        out[i] = (float)v;
    }
    PyBuffer_Release(&view);
    Py_RETURN_TRUE;
}

/* --- exact cosines of feature dicts (verify) ----------------------------------------------- */

/* math.fsum(w * w for w in feats.values()) into *out; 1 done, 0 not a dict of finite floats (the
 * Python code decides), -1 error */
static int squares_sum(PyObject *feats, double *out) {
    Partials ps;
    partials_init(&ps);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int rc = 1;
    while (PyDict_Next(feats, &pos, &key, &value)) {
        if (!PyFloat_CheckExact(value)) {
            rc = 0;
            break;
        }
        double w = PyFloat_AS_DOUBLE(value);
        double square = w * w;
        if (!isfinite(square)) {
            rc = 0;
            break;
        }
        if ((rc = partials_add(&ps, square)) <= 0) break;
    }
    if (rc == 1) *out = partials_sum(&ps);
    partials_free(&ps);
    return rc;
}

static PyObject *sleep_feature_norm(PyObject *Py_UNUSED(self), PyObject *feats) {
    if (!PyDict_Check(feats)) Py_RETURN_NONE;
    double sum;
    int rc = squares_sum(feats, &sum);
    if (rc < 0) return NULL;
    if (rc == 0) Py_RETURN_NONE;
    return PyFloat_FromDouble(sqrt(sum));
}

/* a norm argument: None (to be computed: 1), a float (2), anything else (0: the Python code) */
static int norm_arg(PyObject *arg, double *out) {
    if (arg == Py_None) return 1;
    if (!PyFloat_CheckExact(arg)) return 0;
    *out = PyFloat_AS_DOUBLE(arg);
    return 2;
}

/* feature_cosine's value into *out: 1, 0 (what C does not take: the Python code decides), -1 error.
 * kind_a/kind_b: 1 the norm is to be computed, 2 it is given (norm_a/norm_b). */
static int cosine(PyObject *a, PyObject *b, int kind_a, double norm_a, int kind_b, double norm_b, double *out) {
    PyObject *small = a, *big = b;
    if (PyDict_GET_SIZE(a) > PyDict_GET_SIZE(b)) {
        small = b;
        big = a;
    }
    Partials ps;
    partials_init(&ps);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int rc = 1;
    while (PyDict_Next(small, &pos, &key, &value)) {
        PyObject *other = PyDict_GetItemWithError(big, key); /* borrowed */
        if (other == NULL) {
            if (PyErr_Occurred()) {
                rc = -1;
                break;
            }
            continue;
        }
        if (!PyFloat_CheckExact(value) || !PyFloat_CheckExact(other)) {
            rc = 0;
            break;
        }
        double product = PyFloat_AS_DOUBLE(value) * PyFloat_AS_DOUBLE(other);
        if (!isfinite(product)) {
            rc = 0;
            break;
        }
        if ((rc = partials_add(&ps, product)) <= 0) break;
    }
    double dot = rc == 1 ? partials_sum(&ps) : 0.0;
    partials_free(&ps);
    if (rc <= 0) return rc;
    if (dot == 0.0) {
        *out = 0.0;
        return 1;
    }
    double sum;
    if (kind_a == 1) {
        if ((rc = squares_sum(a, &sum)) <= 0) return rc;
        norm_a = sqrt(sum);
    }
    if (kind_b == 1) {
        if ((rc = squares_sum(b, &sum)) <= 0) return rc;
        norm_b = sqrt(sum);
    }
    double denominator = norm_a * norm_b;
    if (denominator == 0.0) return 0; /* the Python code raises ZeroDivisionError */
    *out = dot / denominator;
    return 1;
}

static PyObject *sleep_feature_cosine(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "feature_cosine(a, b, norm_a, norm_b)");
        return NULL;
    }
    PyObject *a = args[0], *b = args[1];
    if (!PyDict_CheckExact(a) || !PyDict_CheckExact(b)) Py_RETURN_NONE;
    double norm_a = 0.0, norm_b = 0.0, value;
    int kind_a = norm_arg(args[2], &norm_a), kind_b = norm_arg(args[3], &norm_b);
    if (kind_a == 0 || kind_b == 0) Py_RETURN_NONE;
    int rc = cosine(a, b, kind_a, norm_a, kind_b, norm_b, &value);
    if (rc < 0) return NULL;
    if (rc == 0) Py_RETURN_NONE;
    return PyFloat_FromDouble(value);
}

/* --- verify: the probes a facet matches ------------------------------------------------------ */

/* situations.probe_matches(probe, facet): 1, 0, -1 error; *tokens: set(facet.split()), made once */
static int probe_matches(PyObject *probe, PyObject *facet, PyObject *aliases, PyObject **tokens) {
    PyObject *need = PyDict_GetItemString(probe, "require"); /* borrowed */
    if (need != NULL) {
        int truth = PyObject_IsTrue(need);
        if (truth < 0) return -1;
        if (truth) {
            int in = PySequence_Contains(facet, need);
            if (in <= 0) return in;
        }
    }
    PyObject *words = PyDict_GetItemString(probe, "words"); /* borrowed */
    if (words == NULL) return 1;
    int truth = PyObject_IsTrue(words);
    if (truth <= 0) return truth < 0 ? -1 : 1;
    if (*tokens == NULL) {
        PyObject *split = PyUnicode_Split(facet, NULL, -1);
        if (split == NULL) return -1;
        *tokens = PySet_New(split);
        Py_DECREF(split);
        if (*tokens == NULL) return -1;
    }
    PyObject *iter = PyObject_GetIter(words);
    if (iter == NULL) return -1;
    PyObject *word;
    int all = 1;
    while ((word = PyIter_Next(iter)) != NULL) {
        int in = PySet_Contains(*tokens, word);
        if (in == 0) {
            PyObject *alias = PyDict_GetItemWithError(aliases, word); /* borrowed */
            if (alias == NULL && PyErr_Occurred()) in = -1;
            else in = PySet_Contains(*tokens, alias ? alias : Py_None);
        }
        Py_DECREF(word);
        if (in <= 0) {
            all = in;
            break;
        }
    }
    Py_DECREF(iter);
    if (all >= 0 && PyErr_Occurred()) return -1;
    return all;
}

static PyObject *sleep_facet_hits(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* facet_hits(facet, feats, probe_rows, postings, threshold, aliases): sleep._facet_hits's tuple,
     * or None (what C does not take: the Python code decides) */
    if (nargs != 6 || !PyUnicode_Check(args[0]) || !PyDict_CheckExact(args[1]) || !PyList_Check(args[2]) ||
        !PyDict_Check(args[3]) || !PyDict_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "facet_hits(facet: str, feats: dict, probe_rows: list, postings: dict, "
                                         "threshold: float, aliases: dict)");
        return NULL;
    }
    PyObject *facet = args[0], *feats = args[1], *rows = args[2], *postings = args[3], *aliases = args[5];
    if (!PyFloat_CheckExact(args[4])) Py_RETURN_NONE; /* another kind of number: the Python code compares */
    double threshold = PyFloat_AS_DOUBLE(args[4]);
    Py_ssize_t nrows = PyList_GET_SIZE(rows);
    char *marked = PyMem_Calloc((size_t)nrows + 1, 1);
    if (marked == NULL) return PyErr_NoMemory();
    PyObject *out = NULL, *tokens = NULL, *hits = NULL;
    int any = 0;
    Py_ssize_t pos = 0;
    PyObject *feature, *weight;
    while (PyDict_Next(feats, &pos, &feature, &weight)) {
        PyObject *posting = PyDict_GetItemWithError(postings, feature); /* borrowed */
        if (posting == NULL) {
            if (PyErr_Occurred()) goto done;
            continue;
        }
        if (!PyList_Check(posting)) goto fallback;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(posting); k++) {
            Py_ssize_t row = PyLong_AsSsize_t(PyList_GET_ITEM(posting, k));
            if (row == -1 && PyErr_Occurred()) goto done;
            if (row < 0 || row >= nrows) goto fallback;
            marked[row] = 1;
            any = 1;
        }
    }
    if (!any) {
        out = PyTuple_New(0);
        goto done;
    }
    hits = PyList_New(0);
    if (hits == NULL) goto done;
    int norm_known = 0;
    double norm = 0.0;
    for (Py_ssize_t k = 0; k < nrows; k++) { /* the probes in order (sorted) */
        if (!marked[k]) continue;
        PyObject *row = PyList_GET_ITEM(rows, k);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 5) goto fallback;
        PyObject *i = PyTuple_GET_ITEM(row, 0), *probe = PyTuple_GET_ITEM(row, 1);
        PyObject *probe_feats = PyTuple_GET_ITEM(row, 2), *probe_norm = PyTuple_GET_ITEM(row, 3);
        if (!PyDict_Check(probe) || !PyDict_CheckExact(probe_feats) || !PyFloat_CheckExact(probe_norm))
            goto fallback;
        int match = probe_matches(probe, facet, aliases, &tokens);
        if (match < 0) goto done;
        if (!match) continue;
        if (!norm_known) {
            double sum;
            int rc = squares_sum(feats, &sum);
            if (rc < 0) goto done;
            if (rc == 0) goto fallback;
            norm = sqrt(sum);
            norm_known = 1;
        }
        double sim;
        int rc = cosine(probe_feats, feats, 2, PyFloat_AS_DOUBLE(probe_norm), 2, norm, &sim);
        if (rc < 0) goto done;
        if (rc == 0) goto fallback;
        if (sim >= threshold) {
            PyObject *hit = Py_BuildValue("(OOd)", i, probe, sim);
            if (hit == NULL) goto done;
            int appended = PyList_Append(hits, hit);
            Py_DECREF(hit);
            if (appended < 0) goto done;
        }
    }
    out = PyList_AsTuple(hits);
    goto done;
fallback:
    if (!PyErr_Occurred()) out = Py_NewRef(Py_None);
done:
    Py_XDECREF(hits);
    Py_XDECREF(tokens);
    PyMem_Free(marked);
    return out;
}

/* --- the programs of a shell command line (episodes.command_heads) --------------------------- */

static int is_space_ascii(unsigned char c) { /* str.isspace() for ASCII */
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static int in_set(PyObject *set, const char *s, Py_ssize_t n) { /* 1, 0, -1 error */
    PyObject *word = ascii_str(s, n, NULL, 0);
    if (word == NULL) return -1;
    int in = PySet_Contains(set, word);
    Py_DECREF(word);
    return in;
}

typedef struct {
    const char *s;
    Py_ssize_t n;
} Span;

/* a word like NAME=value (episodes._ENV_ASSIGN) */
static int env_assign(Span w) {
    unsigned char c = (unsigned char)w.s[0];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_')) return 0;
    for (Py_ssize_t i = 1; i < w.n; i++) {
        c = (unsigned char)w.s[i];
        if (c == '=') return 1;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 0;
    }
    return 0;
}

static int span_is(Span w, const char *word) {
    return (Py_ssize_t)strlen(word) == w.n && memcmp(w.s, word, (size_t)w.n) == 0;
}

/* episodes._subcommand's word: a letter, then letters, digits, _ . : - */
static int subcommand_word(Span w) {
    unsigned char c = (unsigned char)w.s[0];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) return 0;
    for (Py_ssize_t i = 1; i < w.n; i++) {
        c = (unsigned char)w.s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

/* the heads of one segment (already stripped), appended to heads; -1 error */
static int segment_heads(const char *seg, Py_ssize_t n, PyObject *heads, PyObject *multi, PyObject *wrappers,
                         PyObject *filters, PyObject *not_after) {
    Span stack[64];
    Span *words = stack;
    Py_ssize_t count = 0, cap = 64;
    int rc = -1;
    for (Py_ssize_t i = 0; i < n;) { /* segment.split(), without the NAME=value words */
        if (is_space_ascii((unsigned char)seg[i])) {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        while (i < n && !is_space_ascii((unsigned char)seg[i])) i++;
        Span w = {seg + start, i - start};
        if (env_assign(w)) continue;
        if (count == cap) {
            Span *grown = PyMem_Malloc(sizeof(Span) * (size_t)cap * 2);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            memcpy(grown, words, sizeof(Span) * (size_t)count);
            if (words != stack) PyMem_Free(words);
            words = grown;
            cap *= 2;
        }
        words[count++] = w;
    }
    Py_ssize_t first = 0;
    while (first < count) {
        int in = in_set(wrappers, words[first].s, words[first].n);
        if (in < 0) goto done;
        if (!in) break;
        first++;
        while (first < count && (words[first].s[0] == '-' || (words[first].s[0] >= '0' && words[first].s[0] <= '9')))
            first++;
    }
    if (first == count) {
        rc = 0;
        goto done;
    }
    Span prog = words[first];
    for (Py_ssize_t i = prog.n - 1; i >= 0; i--) { /* rsplit("/", 1)[-1] */
        if (prog.s[i] == '/') {
            prog.s += i + 1;
            prog.n -= i + 1;
            break;
        }
    }
    int filter = in_set(filters, prog.s, prog.n);
    if (filter < 0) goto done;
    if (filter) {
        int never = in_set(not_after, prog.s, prog.n);
        if (never < 0) goto done;
        if (PyList_GET_SIZE(heads) > 0 || never) {
            rc = 0;
            goto done;
        }
    }
    Span sub = {NULL, 0};
    int dash_m = 0;
    int is_multi = in_set(multi, prog.s, prog.n);
    if (is_multi < 0) goto done;
    if (is_multi) {
        Py_ssize_t k = first + 1;
        if (count - k > 1 && span_is(words[k], "-m")) {
            dash_m = 1;
            sub = words[k + 1];
        } else {
            while (k < count) {
                Span w = words[k];
                if (span_is(w, "-C") || span_is(w, "-c") || span_is(w, "--git-dir") || span_is(w, "--work-tree") ||
                    span_is(w, "--prefix") || span_is(w, "--cwd")) {
                    k += 2;
                    continue;
                }
                if (w.s[0] == '-') {
                    k++;
                    continue;
                }
                if (subcommand_word(w)) sub = w;
                break;
            }
        }
    }
    PyObject *head;
    if (sub.s != NULL) {
        Py_ssize_t len = prog.n + 1 + (dash_m ? 3 : 0) + sub.n;
        head = PyUnicode_New(len, 127);
        if (head == NULL) goto done;
        Py_UCS1 *d = PyUnicode_1BYTE_DATA(head);
        memcpy(d, prog.s, (size_t)prog.n);
        d += prog.n;
        *d++ = ' ';
        if (dash_m) {
            memcpy(d, "-m ", 3);
            d += 3;
        }
        memcpy(d, sub.s, (size_t)sub.n);
    } else {
        head = ascii_str(prog.s, prog.n, NULL, 0);
        if (head == NULL) goto done;
    }
    rc = PyList_Append(heads, head);
    Py_DECREF(head);
done:
    if (words != stack) PyMem_Free(words);
    return rc;
}

/* a segment s[a:b] stripped, its heads appended; -1 error */
static int stripped_segment(const char *s, Py_ssize_t a, Py_ssize_t b, PyObject *heads, PyObject *const *sets) {
    while (a < b && is_space_ascii((unsigned char)s[a])) a++;
    while (b > a && is_space_ascii((unsigned char)s[b - 1])) b--;
    if (a == b) return 0;
    return segment_heads(s + a, b - a, heads, sets[0], sets[1], sets[2], sets[3]);
}

static PyObject *sleep_command_heads(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* command_heads(command, multi, wrappers, filters, not_after) -> list | None (not ASCII) */
    if (nargs != 5 || !PyUnicode_Check(args[0]) || !PyAnySet_Check(args[1]) || !PyAnySet_Check(args[2]) ||
        !PyAnySet_Check(args[3]) || !PyAnySet_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "command_heads(command: str, multi, wrappers, filters, not_after: sets)");
        return NULL;
    }
    PyObject *command = args[0];
    if (!PyUnicode_IS_ASCII(command)) Py_RETURN_NONE;
    const char *s = (const char *)PyUnicode_DATA(command);
    Py_ssize_t n = PyUnicode_GET_LENGTH(command);
    /* the first line: text.lstrip().split("\n", 1)[0].rstrip() */
    Py_ssize_t a = 0;
    while (a < n && is_space_ascii((unsigned char)s[a])) a++;
    Py_ssize_t b = a;
    while (b < n && s[b] != '\n') b++;
    while (b > a && is_space_ascii((unsigned char)s[b - 1])) b--;
    PyObject *heads = PyList_New(0);
    if (heads == NULL) return NULL;
    /* the segments outside quotes (episodes._split_shell's tokens: quotes, && || ; | split, & does not) */
    Py_ssize_t start = a, i = a;
    while (i < b) {
        char c = s[i];
        if (c == '\'') {
            i++;
            while (i < b && s[i] != '\'') i++;
            if (i < b) i++;
        } else if (c == '"') {
            i++;
            while (i < b) {
                if (s[i] == '\\') {
                    if (i + 1 < b) { /* \\. (the line holds no new line) */
                        i += 2;
                        continue;
                    }
                    break; /* a final backslash ends the quoted token; the next token takes it */
                }
                if (s[i] == '"') break;
                i++;
            }
            if (i < b && s[i] == '"') i++;
        } else if ((c == '&' && i + 1 < b && s[i + 1] == '&') || (c == '|' && i + 1 < b && s[i + 1] == '|')) {
            if (stripped_segment(s, start, i, heads, args + 1) < 0) goto fail;
            i += 2;
            start = i;
        } else if (c == ';' || c == '|') {
            if (stripped_segment(s, start, i, heads, args + 1) < 0) goto fail;
            i += 1;
            start = i;
        } else {
            i++;
        }
    }
    if (stripped_segment(s, start, b, heads, args + 1) < 0) goto fail;
    return heads;
fail:
    Py_DECREF(heads);
    return NULL;
}

/* --- normalize._volatile_tail: the volatile tokens of an ASCII text ------------------------- */
/* normalize._ids_times_numbers (UUIDs, ISO times, clock times, hashes, numbers, in that order,
 * each pass re.sub's leftmost non-overlapping scan over the previous pass's output), then
 * _PATH_TOKEN.sub(_path_ids) and the white space collapsed and stripped. Each matcher below
 * tries what the regular expression tries, in the order its backtracking tries it, and returns
 * the match's end or -1. For an ASCII str, \w is [A-Za-z0-9_], \d [0-9], \s is_space_ascii. */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
} Buf;

static int buf_put(Buf *b, const char *s, Py_ssize_t n) { /* 0, -1 (MemoryError set) */
    if (n > PY_SSIZE_T_MAX / 2 - b->n) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->n + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        char *p = PyMem_Realloc(b->p, (size_t)cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    return 0;
}

static inline int vw(unsigned char c) { /* \w */
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static inline int vhex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
static inline int valpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
#define VDIG(p) ((p) < n && s[p] >= '0' && s[p] <= '9')

static int vbound(const char *s, Py_ssize_t n, Py_ssize_t p) { /* \b at p */
    int before = p > 0 && vw((unsigned char)s[p - 1]);
    int after = p < n && vw((unsigned char)s[p]);
    return before != after;
}

static Py_ssize_t vdigits(const char *s, Py_ssize_t n, Py_ssize_t p) { /* the digits from p */
    Py_ssize_t q = p;
    while (VDIG(q)) q++;
    return q - p;
}

static Py_ssize_t match_uuid(const char *s, Py_ssize_t n, Py_ssize_t i) {
    /* \b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b */
    static const int groups[5] = {8, 4, 4, 4, 12};
    if (n - i < 36 || !vbound(s, n, i)) return -1;
    Py_ssize_t p = i;
    for (int g = 0; g < 5; g++) {
        if (g > 0) {
            if (s[p] != '-') return -1;
            p++;
        }
        for (int k = 0; k < groups[g]; k++, p++)
            if (!vhex((unsigned char)s[p])) return -1;
    }
    return vbound(s, n, p) ? p : -1;
}

static Py_ssize_t iso_zone(const char *s, Py_ssize_t n, Py_ssize_t t) {
    /* (?:Z|[+-]\d{2}:?\d{2})?\b at t */
    if (t < n && s[t] == 'Z') {
        if (vbound(s, n, t + 1)) return t + 1;
    } else if (t < n && (s[t] == '+' || s[t] == '-') && VDIG(t + 1) && VDIG(t + 2)) {
        Py_ssize_t u = t + 3;
        if (u < n && s[u] == ':' && VDIG(u + 1) && VDIG(u + 2) && vbound(s, n, u + 3)) return u + 3;
        if (VDIG(u) && VDIG(u + 1) && vbound(s, n, u + 2)) return u + 2;
    }
    return vbound(s, n, t) ? t : -1;
}

static Py_ssize_t clock_tail(const char *s, Py_ssize_t n, Py_ssize_t i, int zone) {
    /* \d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)? at i, then the zone (iso_zone) or \b: the first end */
    for (int k = 2; k >= 1; k--) {
        if (!VDIG(i) || (k == 2 && !VDIG(i + 1))) continue;
        Py_ssize_t q = i + k;
        if (!(q < n && s[q] == ':' && VDIG(q + 1) && VDIG(q + 2))) continue;
        q += 3;
        if (q < n && s[q] == ':' && VDIG(q + 1) && VDIG(q + 2)) {
            Py_ssize_t r = q + 3;
            if (r < n && (s[r] == '.' || s[r] == ',') && VDIG(r + 1)) {
                for (Py_ssize_t len = vdigits(s, n, r + 1); len >= 1; len--) {
                    Py_ssize_t e = zone ? iso_zone(s, n, r + 1 + len) : (vbound(s, n, r + 1 + len) ? r + 1 + len : -1);
                    if (e >= 0) return e;
                }
            }
            Py_ssize_t e = zone ? iso_zone(s, n, r) : (vbound(s, n, r) ? r : -1);
            if (e >= 0) return e;
        }
        Py_ssize_t e = zone ? iso_zone(s, n, q) : (vbound(s, n, q) ? q : -1);
        if (e >= 0) return e;
    }
    return -1;
}

static Py_ssize_t match_iso(const char *s, Py_ssize_t n, Py_ssize_t i) {
    /* \b\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b */
    if (n - i < 10 || !vbound(s, n, i)) return -1;
    if (!(VDIG(i) && VDIG(i + 1) && VDIG(i + 2) && VDIG(i + 3) && s[i + 4] == '-' && VDIG(i + 5) && VDIG(i + 6) &&
          s[i + 7] == '-' && VDIG(i + 8) && VDIG(i + 9)))
        return -1;
    Py_ssize_t p = i + 10;
    if (p < n && (s[p] == 'T' || s[p] == ' ')) {
        Py_ssize_t e = clock_tail(s, n, p + 1, 1);
        if (e >= 0) return e;
    }
    return vbound(s, n, p) ? p : -1;
}

static Py_ssize_t match_clock(const char *s, Py_ssize_t n, Py_ssize_t i) {
    /* \b\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\b */
    if (!vbound(s, n, i)) return -1;
    return clock_tail(s, n, i, 0);
}

static Py_ssize_t match_hash(const char *s, Py_ssize_t n, Py_ssize_t i) {
    /* \b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,64}\b */
    if (!vbound(s, n, i)) return -1;
    Py_ssize_t run = 0;
    int digit = 0, letter = 0;
    while (i + run < n && vhex((unsigned char)s[i + run])) {
        if (s[i + run] <= '9') digit = 1;
        else letter = 1;
        run++;
    }
    if (!digit || !letter || run < 7) return -1;
    for (Py_ssize_t k = run < 64 ? run : 64; k >= 7; k--)
        if (vbound(s, n, i + k)) return i + k;
    return -1;
}

static Py_ssize_t number_unit(const char *s, Py_ssize_t n, Py_ssize_t p) {
    /* (?:[A-Za-z]{1,3})?(?![A-Za-z0-9_]) at p */
    Py_ssize_t letters = 0;
    while (letters < 3 && p + letters < n && valpha((unsigned char)s[p + letters])) letters++;
    for (Py_ssize_t l = letters; l >= 0; l--)
        if (p + l >= n || !vw((unsigned char)s[p + l])) return p + l;
    return -1;
}

static Py_ssize_t match_number(const char *s, Py_ssize_t n, Py_ssize_t i) {
    /* (?<![A-Za-z0-9_])\d+(?:[.,]\d+)*(?:[A-Za-z]{1,3})?(?![A-Za-z0-9_]). A \d+ given back leaves
     * a digit next, where nothing after it can match: only each repetition's longest run counts,
     * tried from the last repetition back; before the last one, the [.,] that follows ends the
     * match (it is not \w). */
    if ((i > 0 && vw((unsigned char)s[i - 1])) || !VDIG(i)) return -1;
    Py_ssize_t e = i + vdigits(s, n, i), previous = -1;
    while (e < n && (s[e] == '.' || s[e] == ',') && VDIG(e + 1)) {
        previous = e;
        e = e + 1 + vdigits(s, n, e + 1);
    }
    Py_ssize_t end = number_unit(s, n, e);
    return end >= 0 ? end : previous;
}

typedef Py_ssize_t (*vmatcher)(const char *, Py_ssize_t, Py_ssize_t);

static int vsub(const Buf *in, Buf *out, vmatcher match, const char *repl) { /* re.sub; 0, -1 */
    const char *s = in->p;
    Py_ssize_t n = in->n, i = 0, copied = 0, rn = (Py_ssize_t)strlen(repl);
    out->n = 0;
    while (i < n) {
        Py_ssize_t e = match(s, n, i);
        if (e > i) {
            if (buf_put(out, s + copied, i - copied) < 0 || buf_put(out, repl, rn) < 0) return -1;
            i = copied = e;
        } else {
            i++;
        }
    }
    return buf_put(out, s + copied, n - copied);
}

static int vhas(const Buf *b, char c) { return b->n > 0 && memchr(b->p, c, (size_t)b->n) != NULL; }

static int vhas_digit(const Buf *b) {
    for (Py_ssize_t i = 0; i < b->n; i++)
        if (b->p[i] >= '0' && b->p[i] <= '9') return 1;
    return 0;
}

static int path_char(unsigned char c) { /* [^\s'"`()\[\]{}<>,;|&=] */
    return !is_space_ascii(c) && strchr("'\"`()[]{}<>,;|&=", c) == NULL;
}

static int path_ids(const char *s, Py_ssize_t n, Buf *out) {
    /* normalize._path_ids of the token s[:n] (a placeholder holds no digit: a part with a digit
     * keeps one once its placeholders are out) */
    int digit = 0;
    for (Py_ssize_t i = 0; i < n; i++) digit |= (s[i] >= '0' && s[i] <= '9');
    if (!digit) return buf_put(out, s, n);
    Py_ssize_t a = 0;
    while (1) {
        Py_ssize_t b = a;
        while (b < n && s[b] != '/') b++;
        int part_digit = 0;
        Py_ssize_t dot = -1;
        for (Py_ssize_t k = a; k < b; k++) {
            if (s[k] >= '0' && s[k] <= '9') part_digit = 1;
            if (s[k] == '.') dot = k;
        }
        if (!part_digit) {
            if (buf_put(out, s + a, b - a) < 0) return -1;
        } else {
            if (buf_put(out, "{id}", 4) < 0) return -1;
            /* stem, dot, ext = part.rpartition("."); dot and stem and ext.isalpha() and len(ext) <= 5 */
            if (dot > a && b - dot - 1 >= 1 && b - dot - 1 <= 5) {
                int alpha = 1;
                for (Py_ssize_t k = dot + 1; k < b; k++) alpha &= valpha((unsigned char)s[k]);
                if (alpha && buf_put(out, s + dot, b - dot) < 0) return -1;
            }
        }
        if (b >= n) return 0;
        if (buf_put(out, "/", 1) < 0) return -1;
        a = b + 1;
    }
}

static int vpaths(const Buf *in, Buf *out) { /* _PATH_TOKEN.sub(_path_ids): each run of path chars with a / */
    const char *s = in->p;
    Py_ssize_t n = in->n, i = 0;
    out->n = 0;
    while (i < n) {
        if (!path_char((unsigned char)s[i])) {
            if (buf_put(out, s + i, 1) < 0) return -1;
            i++;
            continue;
        }
        Py_ssize_t j = i;
        int slash = 0;
        while (j < n && path_char((unsigned char)s[j])) slash |= s[j++] == '/';
        if ((slash ? path_ids(s + i, j - i, out) : buf_put(out, s + i, j - i)) < 0) return -1;
        i = j;
    }
    return 0;
}

static PyObject *sleep_volatile_tail(PyObject *Py_UNUSED(self), PyObject *text) {
    /* volatile_tail(text) -> str | None (not ASCII): normalize._volatile_tail */
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "volatile_tail(text: str)");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NONE;
    Buf a = {NULL, 0, 0}, b = {NULL, 0, 0};
    PyObject *result = NULL;
    if (buf_put(&a, (const char *)PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)) < 0) goto done;
#define VPASS(call)                                                                                                    \
    do {                                                                                                               \
        if ((call) < 0) goto done;                                                                                     \
        Buf t = a;                                                                                                     \
        a = b;                                                                                                         \
        b = t;                                                                                                         \
    } while (0)
    if (vhas(&a, '-')) VPASS(vsub(&a, &b, match_uuid, "{id}"));
    if (vhas_digit(&a)) {
        if (vhas(&a, '-')) VPASS(vsub(&a, &b, match_iso, "{time}"));
        if (vhas(&a, ':')) VPASS(vsub(&a, &b, match_clock, "{time}"));
        VPASS(vsub(&a, &b, match_hash, "{hash}"));
        VPASS(vsub(&a, &b, match_number, "{num}"));
    }
    if (vhas(&a, '/')) VPASS(vpaths(&a, &b));
#undef VPASS
    /* _SPACE.sub(" ", text).strip() */
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < a.n;) {
        if (is_space_ascii((unsigned char)a.p[i])) {
            while (i < a.n && is_space_ascii((unsigned char)a.p[i])) i++;
            if (n > 0 && i < a.n) a.p[n++] = ' ';
        } else {
            a.p[n++] = a.p[i++];
        }
    }
    result = PyUnicode_New(n, 127);
    if (result != NULL && n > 0) memcpy(PyUnicode_1BYTE_DATA(result), a.p, (size_t)n);
done:
    PyMem_Free(a.p);
    PyMem_Free(b.p);
    return result;
}
#undef VDIG

/* --- the module ---------------------------------------------------------------------------- */

static PyMethodDef sleep_methods[] = {
    {"features", (PyCFunction)(void (*)(void))sleep_features, METH_FASTCALL,
     "features(text, stop_words) -> dict | None: embed._features_uncached for an ASCII text, else None."},
    {"embed_into", sleep_embed_into, METH_VARARGS,
     "embed_into(feats, out) -> bool: embed.embed_features's vector written into out (256 float32); "
     "False (nothing written) when a weight is not a finite float."},
    {"slot", sleep_slot, METH_O, "slot(feature) -> (index, sign): embed._slot."},
    {"feature_norm", sleep_feature_norm, METH_O,
     "feature_norm(feats) -> float | None: embed.feature_norm (None: not a dict of finite floats)."},
    {"feature_cosine", (PyCFunction)(void (*)(void))sleep_feature_cosine, METH_FASTCALL,
     "feature_cosine(a, b, norm_a, norm_b) -> float | None: embed.feature_cosine (None: the Python code decides)."},
    {"facet_hits", (PyCFunction)(void (*)(void))sleep_facet_hits, METH_FASTCALL,
     "facet_hits(facet, feats, probe_rows, postings, threshold, aliases) -> tuple | None: sleep._facet_hits."},
    {"command_heads", (PyCFunction)(void (*)(void))sleep_command_heads, METH_FASTCALL,
     "command_heads(command, multi, wrappers, filters, not_after) -> list | None: "
     "episodes._command_heads_uncached for an ASCII command, else None."},
    {"volatile_tail", sleep_volatile_tail, METH_O,
     "volatile_tail(text) -> str | None: normalize._volatile_tail for an ASCII text, else None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef sleep_module = {PyModuleDef_HEAD_INIT, "_sleep_c",
                                          "Sleep's hot steps in C (see openmemory_local/_sleep_c.c).", -1,
                                          sleep_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__sleep_c(void) {
    PyObject *m = PyModule_Create(&sleep_module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
