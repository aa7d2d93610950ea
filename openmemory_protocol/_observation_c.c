/* The observation rule's hot path in C (openmemory_protocol/observation.py stays the reference).
 *
 * Loaded only through openmemory_protocol.native.load("openmemory_protocol._observation_c"); the
 * rule calls it for a text whose canonical form is ASCII, and for the counts and the clause scan
 * on any clauses. Each function here does exactly what the Python function it is named after in
 * its comment does, answer for answer (tests/protocol/test_rule_native.py):
 *
 *   forms(canonical, selection) -> _select(canonical): the lowered forms, the patterns they select
 *                                and whether to look for a reported instruction (by a table of the
 *                                words the rule asks about: no str is made for a word)
 *   clauses(canonical)        -> _clauses(canonical): _prose, _split and the token walk, with a
 *                                token cache of its own found by the token's bytes (as _TOKENS:
 *                                emptied when it holds cache_limit tokens)
 *   next_clause(clauses, i)   -> _next_clause(clauses, i, verbs): the imperative walk's quick exit
 *   counts(clauses)           -> _counts(clauses): the language check's counts
 *   token(raw)                -> _token(raw) then the cache's step (tests)
 *   setup(...)                   the tables, given once by the Python code
 *
 * Texts come from peers: every read is bounded by the string's length, every allocation and API
 * call is checked, every reference released on every path. The regular expression searches stay
 * in Python's re; markup (links, tags, emphasis) is removed by the Python _prose, called back.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "unknown"
#endif

/* The tables (strong references, set by setup). */
static PyObject *g_clause_words; /* frozenset */
static PyObject *g_is_english;   /* callable: is_english_word */
static PyObject *g_prose;        /* callable: _prose */
static PyObject *g_verbs;        /* dict */
static PyObject *g_opening;      /* frozenset */
static PyObject *g_kind[6];      /* "word", "code", "target", "number", "other", "symbol" */
static Py_ssize_t g_cache_limit = 65536;
static PyObject *g_selection;    /* (vocabulary, addressed patterns, obligation patterns): see forms() */
enum { K_W, K_C, K_T, K_N, K_O, K_S };

/* ASCII white space as str.split() and str.isspace() read it. */
static unsigned char WS[256];
static unsigned char SPLIT_FIRST[256]; /* where a match of _SPLIT may start */
/* what forms() and the token walk ask of a character, one lookup */
enum { C_SEP = 1, C_ALPHA = 2, C_DIGIT = 4, C_HYPHEN = 8, C_LOWER = 16 };
static unsigned char CLS[256];   /* C_SEP: white space or a backtick (both separate tokens) */
static unsigned char LOWER[256]; /* A-Z to a-z, the rest as they are */
#define FNV_OFFSET 1469598103934665603ULL
#define FNV_PRIME 1099511628211ULL

#define IS_LOWER(c) ((c) >= 'a' && (c) <= 'z')
#define IS_UPPER(c) ((c) >= 'A' && (c) <= 'Z')
#define IS_ALPHA(c) (IS_LOWER(c) || IS_UPPER(c))
#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')

static int ready(void) {
    if (g_verbs == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_observation_c.setup was not called");
        return 0;
    }
    return 1;
}

static const unsigned char *ascii_data(PyObject *text, Py_ssize_t *n) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "a str is required");
        return NULL;
    }
    if (PyUnicode_READY(text) < 0)
        return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "an ASCII str is required");
        return NULL;
    }
    *n = PyUnicode_GET_LENGTH(text);
    return PyUnicode_1BYTE_DATA(text);
}

static PyObject *ascii_str(const unsigned char *s, Py_ssize_t n) {
    PyObject *out = PyUnicode_New(n, 127);
    if (out != NULL && n > 0)
        memcpy(PyUnicode_1BYTE_DATA(out), s, (size_t)n);
    return out;
}

static int same_str(PyObject *a, PyObject *b) { /* a == b, for two str */
    if (a == b)
        return 1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    if (n != PyUnicode_GET_LENGTH(b) || PyUnicode_KIND(a) != PyUnicode_KIND(b))
        return 0;
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * PyUnicode_KIND(a)) == 0;
}

static uint64_t hash_bytes(const unsigned char *s, Py_ssize_t n) { /* FNV-1a */
    uint64_t h = FNV_OFFSET;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ s[i]) * FNV_PRIME;
    return h;
}

/* A table of ASCII str keys found by their bytes (no str made to look one up), each with a
   value; both references owned. Open addressing, at most half full. */
typedef struct {
    uint64_t hash;
    PyObject *key;   /* NULL: an empty slot */
    PyObject *value;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;     /* capacity - 1 (a power of 2), or 0 when there are no slots */
    Py_ssize_t used;
} Table;

static void table_clear(Table *t) {
    if (t->slots != NULL) {
        for (size_t i = 0; i <= t->mask; i++) {
            Py_CLEAR(t->slots[i].key);
            Py_CLEAR(t->slots[i].value);
        }
    }
    t->used = 0;
}

/* The value of the key of bytes s[0:n] (borrowed), or NULL. */
static PyObject *table_get(const Table *t, const unsigned char *s, Py_ssize_t n, uint64_t h) {
    if (t->slots == NULL)
        return NULL;
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        const Slot *slot = &t->slots[i];
        if (slot->key == NULL)
            return NULL;
        if (slot->hash == h && PyUnicode_GET_LENGTH(slot->key) == n &&
            memcmp(PyUnicode_1BYTE_DATA(slot->key), s, (size_t)n) == 0)
            return slot->value;
    }
}

/* Adds an ASCII key that is not in the table (steals nothing: increfs both). */
static int table_add(Table *t, PyObject *key, PyObject *value, uint64_t h) {
    if (t->slots == NULL || (size_t)(t->used + 1) * 2 > t->mask + 1) {
        size_t capacity = t->slots == NULL ? 256 : (t->mask + 1) * 2;
        if (capacity > ((size_t)PY_SSIZE_T_MAX / sizeof(Slot)))
            return PyErr_NoMemory(), -1;
        Slot *slots = PyMem_Calloc(capacity, sizeof(Slot));
        if (slots == NULL)
            return PyErr_NoMemory(), -1;
        if (t->slots != NULL) {
            for (size_t i = 0; i <= t->mask; i++) {
                Slot *old = &t->slots[i];
                if (old->key == NULL)
                    continue;
                size_t k = (size_t)old->hash & (capacity - 1);
                while (slots[k].key != NULL)
                    k = (k + 1) & (capacity - 1);
                slots[k] = *old;
            }
            PyMem_Free(t->slots);
        }
        t->slots = slots;
        t->mask = capacity - 1;
    }
    size_t i = (size_t)h & t->mask;
    while (t->slots[i].key != NULL)
        i = (i + 1) & t->mask;
    Py_INCREF(key);
    Py_INCREF(value);
    t->slots[i].hash = h;
    t->slots[i].key = key;
    t->slots[i].value = value;
    t->used++;
    return 0;
}

static Table g_cache;      /* raw token -> its token (a tuple), or None for a clause word */

/* ---- setup ---------------------------------------------------------------------------- */

static PyObject *setup(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *clause_words, *is_english, *prose, *verbs, *opening, *kinds;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "O!OOO!O!O!n:setup", &PyFrozenSet_Type, &clause_words, &is_english, &prose,
                          &PyDict_Type, &verbs, &PyFrozenSet_Type, &opening, &PyTuple_Type, &kinds, &limit))
        return NULL;
    if (!PyCallable_Check(is_english) || !PyCallable_Check(prose)) {
        PyErr_SetString(PyExc_TypeError, "is_english and prose must be callable");
        return NULL;
    }
    if (PyTuple_GET_SIZE(kinds) != 6) {
        PyErr_SetString(PyExc_ValueError, "six token kinds are required");
        return NULL;
    }
    for (int k = 0; k < 6; k++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(kinds, k))) {
            PyErr_SetString(PyExc_TypeError, "token kinds must be str");
            return NULL;
        }
    }
    if (limit < 1) {
        PyErr_SetString(PyExc_ValueError, "the cache limit must be positive");
        return NULL;
    }
    table_clear(&g_cache); /* (the tables may differ: tokens are classified again) */
    Py_INCREF(clause_words);
    Py_XSETREF(g_clause_words, clause_words);
    Py_INCREF(is_english);
    Py_XSETREF(g_is_english, is_english);
    Py_INCREF(prose);
    Py_XSETREF(g_prose, prose);
    Py_INCREF(verbs);
    Py_XSETREF(g_verbs, verbs);
    Py_INCREF(opening);
    Py_XSETREF(g_opening, opening);
    for (int k = 0; k < 6; k++) {
        PyObject *kind = PyTuple_GET_ITEM(kinds, k);
        Py_INCREF(kind);
        Py_XSETREF(g_kind[k], kind);
    }
    g_cache_limit = limit;
    Py_RETURN_NONE;
}

/* ---- forms: the lowered text, its de-hyphenated and un-leeted forms, and their word set ---- */

/* The vocabulary of the pattern selection: each word the rule asks about, with the patterns it
   selects (bit i of bits[0]: addressed pattern i; of bits[1]: obligation pattern i) and, in
   bits[2], 1 for "to" and 2 for a reporting verb. The word "" holds the patterns always tried.
   Open addressing on the word's bytes, at most half full, made once per selection object. */
typedef struct {
    uint64_t hash;
    PyObject *key; /* NULL: an empty slot */
    uint64_t bits[3];
} Selecting;

static Selecting *g_selecting;
static size_t g_selecting_mask;
static uint64_t g_always[3];

static const Selecting *selecting_get(const unsigned char *s, Py_ssize_t n, uint64_t h) {
    if (g_selecting == NULL)
        return NULL;
    for (size_t i = (size_t)h & g_selecting_mask;; i = (i + 1) & g_selecting_mask) {
        const Selecting *slot = &g_selecting[i];
        if (slot->key == NULL)
            return NULL;
        if (slot->hash == h && PyUnicode_GET_LENGTH(slot->key) == n &&
            memcmp(PyUnicode_1BYTE_DATA(slot->key), s, (size_t)n) == 0)
            return slot;
    }
}

static void selecting_free(Selecting *slots, size_t mask) {
    if (slots == NULL)
        return;
    for (size_t i = 0; i <= mask; i++)
        Py_CLEAR(slots[i].key);
    PyMem_Free(slots);
}

/* The selection's table made when it is another object than the last one. */
static int use_selection(PyObject *selection) {
    if (selection == g_selection)
        return 0;
    PyObject *vocabulary, *lists[2];
    if (!PyTuple_Check(selection) || PyTuple_GET_SIZE(selection) != 3 ||
        !PyDict_Check(vocabulary = PyTuple_GET_ITEM(selection, 0)) ||
        !PyTuple_Check(lists[0] = PyTuple_GET_ITEM(selection, 1)) ||
        !PyTuple_Check(lists[1] = PyTuple_GET_ITEM(selection, 2))) {
        PyErr_SetString(PyExc_TypeError, "the selection is a (dict, tuple, tuple) tuple");
        return -1;
    }
    if (PyTuple_GET_SIZE(lists[0]) > 64 || PyTuple_GET_SIZE(lists[1]) > 64) {
        PyErr_SetString(PyExc_ValueError, "at most 64 patterns a list");
        return -1;
    }
    size_t capacity = 16;
    while (capacity < (size_t)PyDict_GET_SIZE(vocabulary) * 2)
        capacity *= 2;
    Selecting *slots = PyMem_Calloc(capacity, sizeof(Selecting));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t always[3] = {0, 0, 0};
    Py_ssize_t pos = 0;
    PyObject *word, *value;
    while (PyDict_Next(vocabulary, &pos, &word, &value)) {
        uint64_t bits[3];
        if (!PyUnicode_Check(word) || PyUnicode_READY(word) < 0 || !PyUnicode_IS_ASCII(word) ||
            !PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 3) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "the vocabulary maps ASCII str to three bit masks");
            goto fail;
        }
        for (int k = 0; k < 3; k++) {
            PyObject *item = PyTuple_GET_ITEM(value, k);
            bits[k] = PyLong_Check(item) ? PyLong_AsUnsignedLongLong(item) : (uint64_t)-1;
            if (!PyLong_Check(item) || PyErr_Occurred() ||
                (k < 2 && PyTuple_GET_SIZE(lists[k]) < 64 && bits[k] >> PyTuple_GET_SIZE(lists[k]) != 0)) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "a bit mask names a pattern the selection does not hold");
                goto fail;
            }
        }
        Py_ssize_t n = PyUnicode_GET_LENGTH(word);
        if (n == 0) {
            for (int k = 0; k < 3; k++)
                always[k] = bits[k];
            continue;
        }
        const unsigned char *data = PyUnicode_1BYTE_DATA(word);
        uint64_t h = hash_bytes(data, n);
        size_t i = (size_t)h & (capacity - 1);
        while (slots[i].key != NULL)
            i = (i + 1) & (capacity - 1);
        Py_INCREF(word);
        slots[i].key = word;
        slots[i].hash = h;
        for (int k = 0; k < 3; k++)
            slots[i].bits[k] = bits[k];
    }
    selecting_free(g_selecting, g_selecting_mask);
    g_selecting = slots;
    g_selecting_mask = capacity - 1;
    for (int k = 0; k < 3; k++)
        g_always[k] = always[k];
    Py_INCREF(selection);
    Py_XSETREF(g_selection, selection);
    return 0;
fail:
    selecting_free(slots, capacity - 1);
    return -1;
}

/* The bits of the words among the runs of a-z of s[0:n], or-ed into bits. */
static void select_words(uint64_t *bits, const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (!IS_LOWER(s[i])) {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        uint64_t h = FNV_OFFSET;
        while (i < n && IS_LOWER(s[i])) {
            h = (h ^ s[i]) * FNV_PRIME;
            i++;
        }
        const Selecting *slot = selecting_get(s + start, i - start, h);
        if (slot != NULL) {
            for (int k = 0; k < 3; k++)
                bits[k] |= slot->bits[k];
        }
    }
}

/* The patterns of list k of the selection whose bits are set, in order (the selection the call
   was given, which its caller holds: g_selection could change while a list is allocated). */
static PyObject *patterns_of(PyObject *selection, int k, uint64_t bits) {
    PyObject *list = PyList_New(0), *patterns = PyTuple_GET_ITEM(selection, 1 + k);
    if (list == NULL)
        return NULL;
    Py_ssize_t size = PyTuple_GET_SIZE(patterns) < 64 ? PyTuple_GET_SIZE(patterns) : 64;
    for (Py_ssize_t i = 0; i < size && bits >> i != 0; i++) {
        if ((bits >> i & 1) && PyList_Append(list, PyTuple_GET_ITEM(patterns, i)) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

static int append_str(PyObject *list, const unsigned char *s, Py_ssize_t n) {
    PyObject *text = ascii_str(s, n);
    if (text == NULL)
        return -1;
    int r = PyList_Append(list, text);
    Py_DECREF(text);
    return r;
}

static const unsigned char LEET[10] = {'o', 'i', '2', 'e', 'a', 's', '6', 't', '8', '9'};

static PyObject *forms(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "forms(canonical, selection)");
        return NULL;
    }
    PyObject *arg = args[0];
    Py_ssize_t n;
    const unsigned char *s = ascii_data(arg, &n);
    if (s == NULL || use_selection(args[1]) < 0)
        return NULL;
    if (n > (PY_SSIZE_T_MAX - 3) / 3)
        return PyErr_NoMemory();
    unsigned char *buf = PyMem_Malloc((size_t)n * 3 + 3);
    if (buf == NULL)
        return PyErr_NoMemory();
    unsigned char *low = buf, *hyph = buf + n + 1, *leet = buf + 2 * n + 2;
    PyObject *texts = NULL, *addressed = NULL, *obligation = NULL, *out = NULL;

    /* " ".join(canonical.replace("`", " ").split()).lower() */
    Py_ssize_t m = 0;
    int pending = 0, flags = 0, digit_by_letter = 0, previous = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        int f = CLS[c];
        if (f & C_SEP) {
            pending = m > 0;
            continue;
        }
        if (pending) {
            low[m++] = ' ';
            pending = previous = 0;
        }
        flags |= f;
        /* _digit_by_letter: a digit beside a letter (the leet form is made only then) */
        digit_by_letter |= ((f | previous) & (C_ALPHA | C_DIGIT)) == (C_ALPHA | C_DIGIT);
        previous = f;
        low[m++] = LOWER[c];
    }
    int has_hyphen = flags & C_HYPHEN;

    /* _HYPHENATED.sub("", lowered): a run of hyphens between two letters removed */
    Py_ssize_t h = 0;
    int hyphenated = 0;
    if (has_hyphen) {
        Py_ssize_t i = 0;
        while (i < m) {
            if (low[i] != '-') {
                hyph[h++] = low[i++];
                continue;
            }
            Py_ssize_t end = i;
            while (end < m && low[end] == '-')
                end++;
            if (i > 0 && IS_LOWER(low[i - 1]) && end < m && IS_LOWER(low[end])) {
                hyphenated = 1;
            } else {
                memcpy(hyph + h, low + i, (size_t)(end - i));
                h += end - i;
            }
            i = end;
        }
    }

    /* _LEET_WORD.sub(_unleet, lowered): a run of letters and digits holding both, not beside a
       letter, digit or underscore, its digits read as letters */
    int leeted = 0;
    if (digit_by_letter) {
        Py_ssize_t i = 0;
        while (i < m) {
            unsigned char c = low[i];
            if (!(IS_LOWER(c) || IS_DIGIT(c))) {
                leet[i] = c;
                i++;
                continue;
            }
            Py_ssize_t start = i;
            int letters = 0, digits = 0;
            while (i < m && (IS_LOWER(low[i]) || IS_DIGIT(low[i]))) {
                letters |= IS_LOWER(low[i]);
                digits |= IS_DIGIT(low[i]);
                i++;
            }
            int whole = (start == 0 || low[start - 1] != '_') && (i == m || low[i] != '_');
            for (Py_ssize_t k = start; k < i; k++) {
                unsigned char d = low[k];
                leet[k] = (whole && letters && digits && IS_DIGIT(d)) ? LEET[d - '0'] : d;
            }
            if (whole && letters && digits)
                leeted = 1;
        }
    }

    uint64_t bits[3] = {g_always[0], g_always[1], g_always[2]};
    select_words(bits, low, m);
    if (hyphenated)
        select_words(bits, hyph, h);
    if (leeted)
        select_words(bits, leet, m);
    /* the role-token patterns are selected by the character they start with */
    for (int k = 0; k < 2; k++) {
        const unsigned char *mark = (const unsigned char *)(k ? "[" : "<");
        if (memchr(low, mark[0], (size_t)m) != NULL) {
            const Selecting *slot = selecting_get(mark, 1, hash_bytes(mark, 1));
            if (slot != NULL) {
                for (int j = 0; j < 3; j++)
                    bits[j] |= slot->bits[j];
            }
        }
    }
    texts = PyList_New(0);
    if (texts == NULL || append_str(texts, low, m) < 0 || (hyphenated && append_str(texts, hyph, h) < 0) ||
        (leeted && append_str(texts, leet, m) < 0))
        goto done;
    if ((addressed = patterns_of(args[1], 0, bits[0])) == NULL ||
        (obligation = patterns_of(args[1], 1, bits[1])) == NULL)
        goto done;
    out = PyTuple_Pack(4, texts, addressed, obligation, (bits[2] & 3) == 3 ? Py_True : Py_False);
done:
    PyMem_Free(buf);
    Py_XDECREF(texts);
    Py_XDECREF(addressed);
    Py_XDECREF(obligation);
    return out;
}

/* ---- tokens ------------------------------------------------------------------------------ */

/* _token(raw) for an ASCII token without white space, then the cache's step: a word gets
   whether it is English, a clause word is None. A new reference. */
static PyObject *classify(PyObject *raw, const unsigned char *s, Py_ssize_t n) {
    int letters = 0, alnum = 0, apostrophes = 0, upper = 0, slash = 0, number = n > 0 && IS_DIGIT(s[0]);
    Py_ssize_t apostrophe_at = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (IS_ALPHA(c)) {
            letters++;
            upper |= IS_UPPER(c);
        } else if (c == '\'') {
            apostrophes++;
            apostrophe_at = i;
        }
        if (IS_ALPHA(c) || IS_DIGIT(c))
            alnum = 1;
        if (!(IS_DIGIT(c) || c == '.' || c == ','))
            number = 0;
        slash |= c == '/';
    }
    /* text.isalpha() and text.isascii() or _WORD.fullmatch(text): [A-Za-z]+(?:'[A-Za-z]+)? */
    int word = n > 0 && (letters == n || (apostrophes == 1 && letters == n - 1 && apostrophe_at > 0 &&
                                          apostrophe_at < n - 1));
    if (word) {
        PyObject *lower;
        if (upper) {
            lower = PyUnicode_New(n, 127);
            if (lower == NULL)
                return NULL;
            unsigned char *d = PyUnicode_1BYTE_DATA(lower);
            for (Py_ssize_t i = 0; i < n; i++)
                d[i] = IS_UPPER(s[i]) ? (unsigned char)(s[i] + 32) : s[i];
        } else {
            lower = raw;
            Py_INCREF(lower);
        }
        int clause = PySet_Contains(g_clause_words, lower);
        if (clause < 0) {
            Py_DECREF(lower);
            return NULL;
        }
        if (clause) {
            Py_DECREF(lower);
            Py_RETURN_NONE;
        }
        PyObject *is_english = g_is_english; /* (held: Python code runs in the call, setup may too) */
        Py_INCREF(is_english);
        PyObject *english = PyObject_CallOneArg(is_english, lower);
        Py_DECREF(is_english);
        if (english == NULL) {
            Py_DECREF(lower);
            return NULL;
        }
        PyObject *token = PyTuple_Pack(4, g_kind[K_W], raw, lower, english);
        Py_DECREF(lower);
        Py_DECREF(english);
        return token;
    }
    int kind;
    if (!alnum)
        kind = K_S;
    else if (number)
        kind = K_N;
    else if (slash || s[0] == '-' || s[0] == '~' || s[0] == '$' || s[0] == '.')
        kind = K_T;
    else
        kind = K_O;
    return PyTuple_Pack(3, g_kind[kind], raw, raw);
}

/* The token of raw text s[0:n], from the cache or classified and cached (the cache, like
   observation._TOKENS, is emptied when it holds g_cache_limit tokens). A new reference. */
static PyObject *token_of(const unsigned char *s, Py_ssize_t n, uint64_t h) {
    PyObject *token = table_get(&g_cache, s, n, h);
    if (token != NULL) {
        Py_INCREF(token);
        return token;
    }
    PyObject *raw = ascii_str(s, n);
    if (raw == NULL)
        return NULL;
    token = classify(raw, s, n);
    if (token != NULL) {
        if (g_cache.used >= g_cache_limit)
            table_clear(&g_cache);
        if (table_add(&g_cache, raw, token, h) < 0)
            Py_CLEAR(token);
    }
    Py_DECREF(raw);
    return token;
}

static PyObject *token_py(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_ssize_t n;
    const unsigned char *s = ascii_data(arg, &n);
    if (s == NULL || !ready())
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (WS[s[i]] || s[i] == '`') {
            PyErr_SetString(PyExc_ValueError, "a token holds no white space");
            return NULL;
        }
    }
    return token_of(s, n, hash_bytes(s, n));
}

static PyObject *cached(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(arg)) {
    return PyLong_FromSsize_t(g_cache.used);
}

/* ---- clauses ----------------------------------------------------------------------------- */

typedef struct {
    PyObject *clauses; /* list of (tokens, quoted, asks) */
    PyObject *stack;   /* list of the token lists a bracket or quote interrupted */
    PyObject *current; /* list */
} Walk;

/* clauses.append((current, quoted, asks)) if current, then current = [] */
static int close_clause(Walk *w, int quoted, int asks) {
    if (PyList_GET_SIZE(w->current) == 0)
        return 0;
    PyObject *clause = PyTuple_Pack(3, w->current, quoted ? Py_True : Py_False, asks ? Py_True : Py_False);
    if (clause == NULL)
        return -1;
    int r = PyList_Append(w->clauses, clause);
    Py_DECREF(clause);
    if (r < 0)
        return -1;
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return -1;
    Py_SETREF(w->current, fresh);
    return 0;
}

/* current = stack.pop() (the stack is not empty) */
static int pop_stack(Walk *w) {
    Py_ssize_t depth = PyList_GET_SIZE(w->stack);
    PyObject *outer = PyList_GET_ITEM(w->stack, depth - 1);
    Py_INCREF(outer);
    if (PyList_SetSlice(w->stack, depth - 1, depth, NULL) < 0) {
        Py_DECREF(outer);
        return -1;
    }
    Py_SETREF(w->current, outer);
    return 0;
}

/* The tokens of a text between two matches of the split, s[a:b]; *last_at and *last_n get where
   the last raw token is. */
static int walk_text(Walk *w, const unsigned char *s, Py_ssize_t a, Py_ssize_t b, Py_ssize_t *last_at,
                     Py_ssize_t *last_n) {
    Py_ssize_t i = a;
    while (i < b) {
        if (CLS[s[i]] & C_SEP) {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        uint64_t h = FNV_OFFSET;
        while (i < b && !(CLS[s[i]] & C_SEP)) {
            h = (h ^ s[i]) * FNV_PRIME;
            i++;
        }
        PyObject *token = token_of(s + start, i - start, h);
        if (token == NULL)
            return -1;
        *last_at = start;
        *last_n = i - start;
        int r;
        if (token == Py_None) /* a clause word: then, so, but ... */
            r = close_clause(w, PyList_GET_SIZE(w->stack) > 0, 0);
        else
            r = PyList_Append(w->current, token);
        Py_DECREF(token);
        if (r < 0)
            return -1;
    }
    return 0;
}

enum { M_NONE, M_CODE, M_BOUND, M_MARK };

/* _SPLIT_BODY.match(s, p): which group matched, and its end. */
static int split_match(const unsigned char *s, Py_ssize_t n, Py_ssize_t p, Py_ssize_t *end) {
    unsigned char c = s[p];
    Py_ssize_t q = p;
    switch (c) {
    case '`': { /* (`+[^`]*`+) */
        while (q < n && s[q] == '`')
            q++;
        Py_ssize_t r = q;
        while (r < n && s[r] != '`')
            r++;
        if (r < n) {
            while (r < n && s[r] == '`')
                r++;
            *end = r;
            return M_CODE;
        }
        if (q - p >= 2) { /* no closing run: the opening run, less one, and its last backtick */
            *end = q;
            return M_CODE;
        }
        return M_NONE;
    }
    case '.': case '!': case '?': case ';': case ':': /* [.!?;:]+(?=[ \n"')\]}]|$) */
        while (q < n && (s[q] == '.' || s[q] == '!' || s[q] == '?' || s[q] == ';' || s[q] == ':'))
            q++;
        if (q == n || s[q] == ' ' || s[q] == '\n' || s[q] == '"' || s[q] == '\'' || s[q] == ')' || s[q] == ']' ||
            s[q] == '}') {
            *end = q;
            return M_BOUND;
        }
        return M_NONE;
    case ',': case '\n':
        *end = p + 1;
        return M_BOUND;
    case '-': /* -(?:(?<=^-)|(?<=[ \n]-))-*(?![^ \n]) */
        if (p > 0 && s[p - 1] != ' ' && s[p - 1] != '\n')
            return M_NONE;
        while (q < n && s[q] == '-')
            q++;
        if (q == n || s[q] == ' ' || s[q] == '\n') {
            *end = q;
            return M_BOUND;
        }
        return M_NONE;
    case '(': case ')': case '[': case ']': case '{': case '}': case '"':
        *end = p + 1;
        return M_MARK;
    case '\'': /* '(?:(?<=^')|(?<=[^A-Za-z]')|(?![A-Za-z])) */
        if (p == 0 || !IS_ALPHA(s[p - 1]) || p + 1 == n || !IS_ALPHA(s[p + 1])) {
            *end = p + 1;
            return M_MARK;
        }
        return M_NONE;
    default:
        return M_NONE;
    }
}

static int has_markup(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '[' || c == '<' || c == '*' || c == '~' || c == '_')
            return 1;
        if (c == '-' && i + 2 < n && s[i + 1] == '-' && s[i + 2] == '>')
            return 1;
    }
    return 0;
}

static int walk_prose(Walk *w, const unsigned char *s, Py_ssize_t n) {
    int quote_open[2] = {0, 0}; /* '"' and "'" alternate, each on its own */
    Py_ssize_t last = 0, at = 0;
    for (;;) {
        Py_ssize_t end = 0;
        int group = M_NONE;
        while (at < n) {
            if (SPLIT_FIRST[s[at]] && (group = split_match(s, n, at, &end)) != M_NONE)
                break;
            at++;
        }
        if (at >= n)
            group = M_NONE;
        /* the text before the match (or the rest) */
        Py_ssize_t a = last, b = group == M_NONE ? n : at;
        Py_ssize_t last_at = 0, last_n = -1;
        int spoken = 0; /* text and not text.isspace() */
        for (Py_ssize_t i = a; i < b; i++) {
            if (!WS[s[i]]) {
                spoken = 1;
                break;
            }
        }
        if (spoken && walk_text(w, s, a, b, &last_at, &last_n) < 0)
            return -1;
        if (group == M_NONE)
            return 0;
        /* a call: expect(response) */
        if (group == M_MARK && s[at] == '(' && b > a && !WS[s[b - 1]] && s[b - 1] != '`' && last_n >= 0 &&
            PyList_GET_SIZE(w->current) > 0) {
            Py_ssize_t k = PyList_GET_SIZE(w->current) - 1;
            PyObject *prev = PyList_GET_ITEM(w->current, k); /* (a tuple: the walk made it) */
            PyObject *text = PyTuple_GET_ITEM(prev, 1);
            if (PyUnicode_IS_ASCII(text) && PyUnicode_GET_LENGTH(text) == last_n &&
                memcmp(PyUnicode_1BYTE_DATA(text), s + last_at, (size_t)last_n) == 0) {
                PyObject *call = PyTuple_Pack(3, g_kind[K_O], text, text);
                if (call == NULL)
                    return -1;
                PyList_SET_ITEM(w->current, k, call); /* steals call */
                Py_DECREF(prev);
            }
        }
        if (group == M_CODE) {
            PyObject *code = ascii_str(s + at, end - at);
            if (code == NULL)
                return -1;
            PyObject *token = PyTuple_Pack(3, g_kind[K_C], code, code);
            Py_DECREF(code);
            if (token == NULL)
                return -1;
            int r = PyList_Append(w->current, token);
            Py_DECREF(token);
            if (r < 0)
                return -1;
        } else if (group == M_BOUND) {
            int stacked = PyList_GET_SIZE(w->stack) > 0;
            int asks = !stacked && memchr(s + at, '?', (size_t)(end - at)) != NULL;
            if (close_clause(w, stacked, asks) < 0)
                return -1;
        } else {
            unsigned char mark = s[at];
            int opens;
            if (mark == '"' || mark == '\'') {
                int *state = &quote_open[mark == '\''];
                *state = !*state;
                opens = *state;
            } else {
                opens = mark == '(' || mark == '[' || mark == '{';
            }
            if (opens) {
                if (PyList_Append(w->stack, w->current) < 0)
                    return -1;
                PyObject *fresh = PyList_New(0);
                if (fresh == NULL)
                    return -1;
                Py_SETREF(w->current, fresh);
            } else {
                if (close_clause(w, 1, 0) < 0)
                    return -1;
                if (PyList_GET_SIZE(w->stack) > 0 && pop_stack(w) < 0) /* (else current is empty) */
                    return -1;
            }
        }
        last = at = end;
    }
}

static PyObject *clauses(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_ssize_t n;
    const unsigned char *s = ascii_data(arg, &n);
    if (s == NULL || !ready())
        return NULL;
    PyObject *prose = NULL;
    unsigned char *spaced = NULL;
    Walk w = {PyList_New(0), PyList_New(0), PyList_New(0)};
    PyObject *out = NULL;
    if (w.clauses == NULL || w.stack == NULL || w.current == NULL)
        goto done;
    if (has_markup(s, n)) { /* links, tags, emphasis: the Python _prose */
        PyObject *function = g_prose; /* (held, as is_english above) */
        Py_INCREF(function);
        prose = PyObject_CallOneArg(function, arg);
        Py_DECREF(function);
        if (prose == NULL || (s = ascii_data(prose, &n)) == NULL)
            goto done;
    } else {
        /* line breaks as U+000A, other white space as U+0020 */
        Py_ssize_t i = 0;
        while (i < n && !(WS[s[i]] && s[i] != ' ' && s[i] != '\n'))
            i++;
        if (i < n) {
            spaced = PyMem_Malloc((size_t)n + 1);
            if (spaced == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            for (Py_ssize_t k = 0; k < n; k++) {
                unsigned char c = s[k];
                spaced[k] = (c == '\t' || c == 0x1f) ? ' ' : (WS[c] && c != ' ') ? '\n' : c;
            }
            s = spaced;
        }
    }
    if (walk_prose(&w, s, n) < 0)
        goto done;
    for (;;) {
        Py_ssize_t depth = PyList_GET_SIZE(w.stack);
        if (close_clause(&w, depth > 0, 0) < 0)
            goto done;
        if (depth == 0)
            break;
        if (pop_stack(&w) < 0)
            goto done;
    }
    out = w.clauses;
    w.clauses = NULL;
done:
    PyMem_Free(spaced);
    Py_XDECREF(prose);
    Py_XDECREF(w.clauses);
    Py_XDECREF(w.stack);
    Py_XDECREF(w.current);
    return out;
}

/* ---- the clause scan and the counts (any clauses: also those of the Python path) ------------ */

/* Which of the kinds a token's kind is (its index), or -1: by identity first (the kinds are the
   rule's own str objects), then by value. */
static int kind_of(PyObject *value) {
    for (int k = 0; k < 6; k++) {
        if (value == g_kind[k])
            return k;
    }
    if (!PyUnicode_Check(value))
        return -1;
    for (int k = 0; k < 6; k++) {
        if (same_str(value, g_kind[k]))
            return k;
    }
    return -1;
}

/* clauses[i] as (tokens, quoted, asks), checked */
static int clause_at(PyObject *clauses, Py_ssize_t i, PyObject **tokens, PyObject **asks) {
    PyObject *clause = PyList_GET_ITEM(clauses, i);
    if (!PyTuple_Check(clause) || PyTuple_GET_SIZE(clause) != 3 || !PyList_Check(PyTuple_GET_ITEM(clause, 0))) {
        PyErr_SetString(PyExc_TypeError, "a clause is a (list, bool, bool) tuple");
        return -1;
    }
    *tokens = PyTuple_GET_ITEM(clause, 0);
    if (asks != NULL)
        *asks = PyTuple_GET_ITEM(clause, 2);
    return 0;
}

static PyObject *token_item(PyObject *token, Py_ssize_t k) {
    if (!PyTuple_Check(token) || PyTuple_GET_SIZE(token) <= k) {
        PyErr_SetString(PyExc_TypeError, "a token is a (kind, text, lower-case text[, english]) tuple");
        return NULL;
    }
    return PyTuple_GET_ITEM(token, k);
}

/* A clause's or a word's flag, which the rule makes a bool: so that no Python code runs here (a
   truth test could), and every borrowed reference stays good. */
static int flag(PyObject *value) {
    if (value == Py_True)
        return 1;
    if (value == Py_False)
        return 0;
    PyErr_SetString(PyExc_TypeError, "a clause's and a word's flags are bools");
    return -1;
}

static int ends_with_ly(PyObject *word) {
    if (!PyUnicode_Check(word))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    return n >= 2 && PyUnicode_READ_CHAR(word, n - 2) == 'l' && PyUnicode_READ_CHAR(word, n - 1) == 'y';
}

/* The index of the first clause from start that asks, or whose first token may open an order
   (the quick exit of observation_violation's walk fails), or len(clauses). */
static PyObject *next_clause(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "next_clause(clauses: list, start: int)");
        return NULL;
    }
    PyObject *list = args[0];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if ((start == -1 && PyErr_Occurred()) || !ready())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list); /* (no Python code runs in the loop: the list stays as it is) */
    for (Py_ssize_t i = start < 0 ? 0 : start; i < n; i++) {
        PyObject *tokens, *asks, *first, *kind;
        if (clause_at(list, i, &tokens, &asks) < 0)
            return NULL;
        int r = flag(asks);
        if (r < 0)
            return NULL;
        if (r || PyList_GET_SIZE(tokens) == 0)
            return PyLong_FromSsize_t(i);
        first = PyList_GET_ITEM(tokens, 0);
        if ((kind = token_item(first, 0)) == NULL)
            return NULL;
        int k = kind_of(kind);
        if (k == K_C)
            continue;
        if (k != K_W)
            return PyLong_FromSsize_t(i);
        PyObject *text, *lower, *english;
        if ((english = token_item(first, 3)) == NULL)
            return NULL;
        text = PyTuple_GET_ITEM(first, 1);
        lower = PyTuple_GET_ITEM(first, 2);
        if (!PyUnicode_CheckExact(text) || !PyUnicode_CheckExact(lower)) {
            PyErr_SetString(PyExc_TypeError, "a word token's texts are str");
            return NULL;
        }
        if ((r = flag(english)) <= 0) {
            if (r < 0)
                return NULL;
            return PyLong_FromSsize_t(i);
        }
        if ((r = PyDict_Contains(g_verbs, lower)) != 0) {
            if (r < 0)
                return NULL;
            return PyLong_FromSsize_t(i);
        }
        if ((r = PySet_Contains(g_opening, lower)) != 0) {
            if (r < 0)
                return NULL;
            return PyLong_FromSsize_t(i);
        }
        if (ends_with_ly(lower) || PyUnicode_CompareWithASCIIString(text, "Open") == 0)
            return PyLong_FromSsize_t(i);
    }
    return PyLong_FromSsize_t(n);
}

/* word[0] != lower[0] and word[1:] == lower[1:] */
static int capitalised(PyObject *word, PyObject *lower) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    if (n == 0 || n != PyUnicode_GET_LENGTH(lower))
        return 0;
    if (PyUnicode_READ_CHAR(word, 0) == PyUnicode_READ_CHAR(lower, 0))
        return 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (PyUnicode_READ_CHAR(word, i) != PyUnicode_READ_CHAR(lower, i))
            return 0;
    }
    return 1;
}

/* (counted, foreign, symbols, tokens_seen, candidates) of _language */
static PyObject *counts(PyObject *Py_UNUSED(self), PyObject *arg) {
    if (!PyList_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "clauses must be a list");
        return NULL;
    }
    if (!ready())
        return NULL;
    Py_ssize_t counted = 0, foreign = 0, symbols = 0, seen = 0, candidates = 0;
    Py_ssize_t n = PyList_GET_SIZE(arg);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *tokens;
        if (clause_at(arg, i, &tokens, NULL) < 0)
            return NULL;
        int first = 1;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(tokens); j++) {
            PyObject *token = PyList_GET_ITEM(tokens, j), *kind;
            if ((kind = token_item(token, 0)) == NULL)
                return NULL;
            int k = kind_of(kind);
            if (k == K_C)
                continue;
            seen++;
            if (k == K_S) {
                symbols++;
                continue;
            }
            if (k != K_W)
                continue;
            PyObject *english = token_item(token, 3);
            if (english == NULL)
                return NULL;
            PyObject *word = PyTuple_GET_ITEM(token, 1), *lower = PyTuple_GET_ITEM(token, 2);
            if (!PyUnicode_Check(word) || !PyUnicode_Check(lower)) {
                PyErr_SetString(PyExc_TypeError, "a word token's texts are str");
                return NULL;
            }
            int is_english = flag(english);
            if (is_english < 0)
                return NULL;
            candidates += !is_english;
            if (same_str(word, lower) || (first && capitalised(word, lower))) {
                counted++;
                foreign += !is_english;
            }
            first = 0;
        }
    }
    if (candidates < 2) /* the word test cannot refuse: not counted */
        counted = foreign = 0;
    Py_ssize_t values[5] = {counted, foreign, symbols, seen, candidates};
    PyObject *out = PyTuple_New(5);
    if (out == NULL)
        return NULL;
    for (int k = 0; k < 5; k++) {
        PyObject *value = PyLong_FromSsize_t(values[k]);
        if (value == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k, value);
    }
    return out;
}

/* ---- the module ------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(clause_words, is_english_word, prose, verbs, opening, kinds, cache_limit): the tables"},
    {"forms", (PyCFunction)(void (*)(void))forms, METH_FASTCALL,
     "forms(canonical, selection) -> (texts, addressed, obligation, reported): observation._select(canonical)"},
    {"clauses", clauses, METH_O, "clauses(canonical) -> the clauses of an ASCII text (observation._clauses)"},
    {"next_clause", (PyCFunction)(void (*)(void))next_clause, METH_FASTCALL,
     "next_clause(clauses, start) -> observation._next_clause"},
    {"counts", counts, METH_O, "counts(clauses) -> (counted, foreign, symbols, tokens_seen, candidates)"},
    {"token", token_py, METH_O, "token(raw) -> the token of an ASCII raw token, through the cache"},
    {"cached", cached, METH_NOARGS, "cached() -> how many tokens the cache holds"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_observation_c", "The observation rule's hot path (observation.py is the reference).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__observation_c(void) {
    for (int c = 0; c < 256; c++) {
        WS[c] = (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
        CLS[c] = (unsigned char)((WS[c] || c == '`' ? C_SEP : 0) | (IS_ALPHA(c) ? C_ALPHA : 0) |
                                 (IS_DIGIT(c) ? C_DIGIT : 0) | (c == '-' ? C_HYPHEN : 0) | (IS_LOWER(c) ? C_LOWER : 0));
        LOWER[c] = (unsigned char)(IS_UPPER(c) ? c + 32 : c);
        SPLIT_FIRST[c] = c != 0 && strchr("`.!?;:,\n-()[]{}\"'", c) != NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
