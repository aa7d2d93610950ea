/* The optional C accelerator of verify's situation texts (openmemory_local._facets_c).
 *
 * Loaded only through openmemory_protocol.native.load("openmemory_local._facets_c"); the Python
 * code beside it (situations.py, normalize.py) is the reference and the fallback, and each
 * function here is tested equal to it, value for value (tests/local/test_facets_c.py):
 *
 *   command_facets(line, volatile_tail)
 *       situations._command_facets_uncached(line, None, None) for an ASCII line (None otherwise):
 *       normalize.command_segments (the heredoc, the quoted strings, the separators, the
 *       redirections, matched case by case as their regular expressions match), each segment
 *       normalised without a cwd or branch (``volatile_tail``: normalize._volatile_tail, the
 *       caller's, called through Python), its first 12 words, and one facet per path argument.
 *   untimed_facets(before, lines, needles, volatile_tail, cap)
 *       situations._untimed(before + the command_facets of each line): an episode's facets
 *       without times (a session's heads and its lines' facets; an error's signature, heads and
 *       command's facets), each distinct non-empty one once, the first ``cap``, as a tuple;
 *       None unless every line is an ASCII str holding none of ``needles`` (normalize's
 *       context_free: nothing a session's cwd or branch would take out of it).
 *   record_hits(names, fam_hits, hits_for, found, sid, eid, created, now_iso, is_session)
 *       sleep._record_hits for an episode without times (each facet dated at ``created``): the
 *       same dictionaries, changed in the same order; comparisons are Python's (rich compare).
 *
 * For an ASCII str, \w is [A-Za-z0-9_], \d [0-9], \s and str.split()'s white space the ASCII
 * characters str.isspace() accepts (\t-\r, \x1c-\x1f, the space). Plain C99 and the CPython C
 * API; every read is bounded by the text's length, every Python call's result is checked and
 * every reference released on every path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "unknown"
#endif

#define SEGMENTS_CHARS 4000 /* command_segments reads command[:4000] */
#define FACET_WORDS 12      /* situations._FACET_WORDS */
#define PATH_FACETS 20      /* one facet per path argument, at most 20 */

static int is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_word(unsigned char c) { return is_digit(c) || is_alpha(c) || c == '_'; }

typedef struct {
    const char *s;
    Py_ssize_t n;
} Span;

/* --- normalize.command_segments -------------------------------------------------------------- */

/* _HEREDOC = <<-?\s*['"]?(\w+)['"]?.* (re.S): where its leftmost match starts, or n. Each
 * optional part, when taken, leaves a character no later part can start with, so the first
 * path its backtracking tries is the only one that can match. */
static Py_ssize_t heredoc_at(const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i + 1 < n; i++) {
        if (s[i] != '<' || s[i + 1] != '<') continue;
        Py_ssize_t j = i + 2;
        if (j < n && s[j] == '-') j++;
        while (j < n && is_space((unsigned char)s[j])) j++;
        if (j < n && (s[j] == '\'' || s[j] == '"')) j++;
        if (j < n && is_word((unsigned char)s[j])) return i;
    }
    return n;
}

/* _QUOTED = "(?:\\.|[^"\\])*"?|'[^']*'?|\$\((?:[^()]|\([^()]*\))*\) at i: the match's end, or -1 */
static Py_ssize_t quoted_at(const char *s, Py_ssize_t n, Py_ssize_t i) {
    Py_ssize_t j;
    if (s[i] == '"') {
        j = i + 1;
        for (;;) {
            if (j + 1 < n && s[j] == '\\' && s[j + 1] != '\n') j += 2; /* \\. (a dot is not a new line) */
            else if (j < n && s[j] != '"' && s[j] != '\\') j += 1;
            else break;
        }
        if (j < n && s[j] == '"') j++;
        return j;
    }
    if (s[i] == '\'') {
        j = i + 1;
        while (j < n && s[j] != '\'') j++;
        return j < n ? j + 1 : j;
    }
    if (s[i] == '$' && i + 1 < n && s[i + 1] == '(') {
        /* the greedy loop stops at ')', at a '(' it cannot close, or at the end; giving back any
         * of its steps leaves a character other than ')' next, so only the first case matches */
        j = i + 2;
        for (;;) {
            if (j < n && s[j] != '(' && s[j] != ')') {
                j++;
            } else if (j < n && s[j] == '(') {
                Py_ssize_t k = j + 1;
                while (k < n && s[k] != '(' && s[k] != ')') k++;
                if (k < n && s[k] == ')') j = k + 1;
                else break;
            } else {
                break;
            }
        }
        return (j < n && s[j] == ')') ? j + 1 : -1;
    }
    return -1;
}

/* _REDIRECT = (?:^|\s)(?:\d?>>?&?\d?|&>|<)\s*(?:/dev/null|&?\d|\S+)? at i: the match's end, or -1.
 * Everything after the operator is optional, so the first path tried (each part greedy) matches. */
static Py_ssize_t redirect_from(const char *s, Py_ssize_t n, Py_ssize_t q) {
    Py_ssize_t r;
    if (q < n && (s[q] == '>' || (is_digit((unsigned char)s[q]) && q + 1 < n && s[q + 1] == '>'))) {
        r = s[q] == '>' ? q + 1 : q + 2;
        if (r < n && s[r] == '>') r++;
        if (r < n && s[r] == '&') r++;
        if (r < n && is_digit((unsigned char)s[r])) r++;
    } else if (q + 1 < n && s[q] == '&' && s[q + 1] == '>') {
        r = q + 2;
    } else if (q < n && s[q] == '<') {
        r = q + 1;
    } else {
        return -1;
    }
    while (r < n && is_space((unsigned char)s[r])) r++;
    if (n - r >= 9 && memcmp(s + r, "/dev/null", 9) == 0) return r + 9;
    if (r + 1 < n && s[r] == '&' && is_digit((unsigned char)s[r + 1])) return r + 2;
    if (r < n && is_digit((unsigned char)s[r])) return r + 1;
    while (r < n && !is_space((unsigned char)s[r])) r++; /* \S+, or nothing */
    return r;
}

static Py_ssize_t redirect_at(const char *s, Py_ssize_t n, Py_ssize_t i) {
    if (i == 0) { /* ^ first, then \s */
        Py_ssize_t r = redirect_from(s, n, 0);
        if (r >= 0) return r;
    }
    if (i < n && is_space((unsigned char)s[i])) return redirect_from(s, n, i + 1);
    return -1;
}

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
        Py_ssize_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        char *p = PyMem_Realloc(b->p, (size_t)cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n > 0) memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    return 0;
}

/* The words of s[0:n] (str.split()) into *words (grown as needed); their count, or -1. */
static Py_ssize_t split_words(const char *s, Py_ssize_t n, Span **words, Py_ssize_t *cap) {
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n;) {
        if (is_space((unsigned char)s[i])) {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        while (i < n && !is_space((unsigned char)s[i])) i++;
        if (count == *cap) {
            Py_ssize_t grown = *cap ? *cap * 2 : 64;
            Span *w = PyMem_Realloc(*words, (size_t)grown * sizeof(Span));
            if (w == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            *words = w;
            *cap = grown;
        }
        (*words)[count].s = s + start;
        (*words)[count].n = i - start;
        count++;
    }
    return count;
}

static int span_is(Span w, const char *word) {
    return (Py_ssize_t)strlen(word) == w.n && memcmp(w.s, word, (size_t)w.n) == 0;
}

/* the programs command_segments drops (cd, output filters) */
static const char *const SKIPPED[] = {"cd",   "echo", "true",  "false", "head",   "tail",  "wc",     "sort",
                                      "cat",  "tee",  "xargs", "printf", "sleep", "less",  "source", "."};

static int skipped_program(Span w) {
    Py_ssize_t at = w.n;
    while (at > 0 && w.s[at - 1] != '/') at--; /* words[0].rsplit("/", 1)[-1] */
    Span prog = {w.s + at, w.n - at};
    for (size_t k = 0; k < sizeof(SKIPPED) / sizeof(SKIPPED[0]); k++)
        if (span_is(prog, SKIPPED[k])) return 1;
    return 0;
}

/* normalize.path_like */
static int path_like(Span w) {
    if (memchr(w.s, '/', (size_t)w.n) != NULL) return 1;
    Py_ssize_t dot = w.n - 1;
    while (dot >= 0 && w.s[dot] != '.') dot--;
    if (dot <= 0) return 0; /* no dot, or no stem */
    Py_ssize_t ext = w.n - dot - 1;
    if (ext < 1 || ext > 5 || w.s[0] == '-') return 0;
    for (Py_ssize_t i = dot + 1; i < w.n; i++)
        if (!is_alpha((unsigned char)w.s[i])) return 0;
    return 1;
}

/* list.append(" ".join(words[0:count]) + (" " + extra if extra)); 0, -1 */
static int append_joined(PyObject *list, Buf *b, const Span *words, Py_ssize_t count, const Span *extra) {
    b->n = 0;
    for (Py_ssize_t k = 0; k < count; k++)
        if ((k > 0 && buf_put(b, " ", 1) < 0) || buf_put(b, words[k].s, words[k].n) < 0) return -1;
    if (extra != NULL && (buf_put(b, " ", 1) < 0 || buf_put(b, extra->s, extra->n) < 0)) return -1;
    PyObject *str = PyUnicode_New(b->n, 127);
    if (str == NULL) return -1;
    if (b->n > 0) memcpy(PyUnicode_1BYTE_DATA(str), b->p, (size_t)b->n);
    int rc = PyList_Append(list, str);
    Py_DECREF(str);
    return rc;
}

/* The facets of one normalised segment (situations._command_facets_uncached's loop body). */
static int segment_facets(PyObject *norm, PyObject *out, Buf *b, Span **words, Py_ssize_t *cap) {
    if (!PyUnicode_Check(norm) || !PyUnicode_IS_ASCII(norm)) {
        PyErr_SetString(PyExc_TypeError, "volatile_tail gave no ASCII str for an ASCII text");
        return -1;
    }
    Py_ssize_t count = split_words((const char *)PyUnicode_DATA(norm), PyUnicode_GET_LENGTH(norm), words, cap);
    if (count <= 0) return (int)count; /* no words: nothing (or -1) */
    Span *w = *words;
    if (append_joined(out, b, w, count < FACET_WORDS ? count : FACET_WORDS, NULL) < 0) return -1;
    Py_ssize_t head = (count > 1 && w[1].s[0] != '-') ? 2 : 1;
    Py_ssize_t paths = 0;
    for (Py_ssize_t k = 1; k < count && paths < 2; k++) paths += path_like(w[k]);
    if (paths > 1) {
        Py_ssize_t made = 0;
        for (Py_ssize_t k = 1; k < count && made < PATH_FACETS; k++) {
            if (!path_like(w[k])) continue;
            if (append_joined(out, b, w, head, &w[k]) < 0) return -1;
            made++;
        }
    }
    return 0;
}

/* The buffers one call reuses from line to line. */
typedef struct {
    Buf text, seg, joined;
    Span *words;
    Py_ssize_t cap;
} Work;

static void work_free(Work *w) {
    PyMem_Free(w->text.p);
    PyMem_Free(w->seg.p);
    PyMem_Free(w->joined.p);
    PyMem_Free(w->words);
}

/* The facets of one ASCII line appended to out (situations._command_facets_uncached(line, None,
 * None)); 0, -1 */
static int line_facets(const char *src, Py_ssize_t n, PyObject *volatile_tail, PyObject *out, Work *w) {
    if (n > SEGMENTS_CHARS) n = SEGMENTS_CHARS;
    n = heredoc_at(src, n); /* _HEREDOC.sub("", text): its first match runs to the end */
    w->text.n = 0;
    for (Py_ssize_t i = 0; i < n;) { /* _QUOTED.sub(" ", text) */
        Py_ssize_t end = quoted_at(src, n, i);
        if (end >= 0) {
            if (buf_put(&w->text, " ", 1) < 0) return -1;
            i = end;
        } else {
            Py_ssize_t j = i + 1;
            while (j < n && src[j] != '"' && src[j] != '\'' && src[j] != '$') j++;
            if (buf_put(&w->text, src + i, j - i) < 0) return -1;
            i = j;
        }
    }
    const char *t = w->text.p;
    Py_ssize_t tn = w->text.n;
    for (Py_ssize_t start = 0; start <= tn;) { /* _SEPARATOR.split(text) */
        Py_ssize_t stop = start, next = tn + 1;
        for (; stop < tn; stop++) {
            char c = t[stop];
            if ((c == '&' || c == '|') && stop + 1 < tn && t[stop + 1] == c) {
                next = stop + 2;
                break;
            }
            if (c == ';' || c == '|' || c == '\n') {
                next = stop + 1;
                break;
            }
        }
        w->seg.n = 0; /* _REDIRECT.sub(" ", segment) */
        const char *s = t + start;
        Py_ssize_t sn = stop - start;
        for (Py_ssize_t i = 0; i < sn;) {
            Py_ssize_t end = redirect_at(s, sn, i);
            if (end >= 0) {
                if (buf_put(&w->seg, " ", 1) < 0) return -1;
                i = end;
            } else {
                if (buf_put(&w->seg, s + i, 1) < 0) return -1;
                i++;
            }
        }
        start = next;
        Py_ssize_t count = split_words(w->seg.p, w->seg.n, &w->words, &w->cap);
        if (count < 0) return -1;
        Span *words = w->words;
        Py_ssize_t first = 0; /* the NAME=value words before the program */
        while (first < count && memchr(words[first].s, '=', (size_t)words[first].n) != NULL && words[first].s[0] != '-')
            first++;
        if (first == count || skipped_program(words[first])) continue;
        w->joined.n = 0;
        for (Py_ssize_t k = first; k < count; k++)
            if ((k > first && buf_put(&w->joined, " ", 1) < 0) || buf_put(&w->joined, words[k].s, words[k].n) < 0)
                return -1;
        PyObject *segment = PyUnicode_New(w->joined.n, 127);
        if (segment == NULL) return -1;
        memcpy(PyUnicode_1BYTE_DATA(segment), w->joined.p, (size_t)w->joined.n);
        PyObject *norm = PyObject_CallOneArg(volatile_tail, segment);
        Py_DECREF(segment);
        if (norm == NULL) return -1;
        int rc = segment_facets(norm, out, &w->joined, &w->words, &w->cap);
        Py_DECREF(norm);
        if (rc < 0) return -1;
    }
    return 0;
}

static PyObject *facets_command_facets(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* command_facets(line, volatile_tail) -> list[str] | None (not ASCII) */
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "command_facets(line: str, volatile_tail: callable)");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(args[0])) Py_RETURN_NONE;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Work w = {{NULL, 0, 0}, {NULL, 0, 0}, {NULL, 0, 0}, NULL, 0};
    int rc = line_facets((const char *)PyUnicode_DATA(args[0]), PyUnicode_GET_LENGTH(args[0]), args[1], out, &w);
    work_free(&w);
    if (rc < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* Whether every needle is a non-empty str (-1 with TypeError if not). */
static int needles_ok(PyObject *needles) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(needles); k++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, k);
        if (!PyUnicode_Check(needle) || PyUnicode_GET_LENGTH(needle) == 0) {
            PyErr_SetString(PyExc_TypeError, "each needle a non-empty str");
            return -1;
        }
    }
    return 0;
}

/* Whether every item of lines is an ASCII str holding none of the needles (what C takes). */
static int lines_ok(PyObject *lines, PyObject *needles) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lines); i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_CheckExact(line) || !PyUnicode_IS_ASCII(line)) return 0;
        const char *s = (const char *)PyUnicode_DATA(line);
        size_t n = (size_t)PyUnicode_GET_LENGTH(line);
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(needles); k++) {
            PyObject *needle = PyTuple_GET_ITEM(needles, k);
            if (!PyUnicode_IS_ASCII(needle)) continue; /* not in an ASCII line */
            size_t m = (size_t)PyUnicode_GET_LENGTH(needle);
            const char *p = (const char *)PyUnicode_DATA(needle);
            for (size_t at = 0; m <= n && at <= n - m; at++) {
                const char *hit = memchr(s + at, p[0], n - m - at + 1);
                if (hit == NULL) break;
                at = (size_t)(hit - s);
                if (memcmp(hit, p, m) == 0) return 0;
            }
        }
    }
    return 1;
}

/* The facets of each line in turn appended to out (lines_ok checked); 0, -1 */
static int all_lines_facets(PyObject *lines, PyObject *volatile_tail, PyObject *out) {
    Work w = {{NULL, 0, 0}, {NULL, 0, 0}, {NULL, 0, 0}, NULL, 0};
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(lines); i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_CheckExact(line) || !PyUnicode_IS_ASCII(line)) { /* the tail changed the list */
            PyErr_SetString(PyExc_RuntimeError, "the lines changed");
            rc = -1;
            break;
        }
        Py_INCREF(line); /* held while the tail (Python code) runs */
        rc = line_facets((const char *)PyUnicode_DATA(line), PyUnicode_GET_LENGTH(line), volatile_tail, out, &w);
        Py_DECREF(line);
    }
    work_free(&w);
    return rc;
}

/* each distinct non-empty str of items into seen/out, until out holds `cap`; 0, -1 */
static int distinct_into(PyObject *items, PyObject *seen, PyObject *out, Py_ssize_t cap) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items) && PyList_GET_SIZE(out) < cap; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (PyUnicode_GET_LENGTH(item) == 0) continue; /* filter(None, ...) */
        int in = PySet_Contains(seen, item);
        if (in < 0) return -1;
        if (in) continue;
        if (PySet_Add(seen, item) < 0 || PyList_Append(out, item) < 0) return -1;
    }
    return 0;
}

static int all_str(PyObject *items) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(items, i))) return 0;
    return 1;
}

static PyObject *facets_untimed_facets(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* untimed_facets(before, lines, needles, volatile_tail, cap) -> tuple[str, ...] | None:
     * situations._untimed(before + the lines' facets): each distinct non-empty one once, the first
     * `cap`; None when a line is not an ASCII str free of the needles, or an item of before not a str */
    if (nargs != 5 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyTuple_Check(args[2]) ||
        !PyCallable_Check(args[3]) || !PyLong_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "untimed_facets(before: list, lines: list, needles: tuple, "
                                         "volatile_tail: callable, cap: int)");
        return NULL;
    }
    Py_ssize_t cap = PyLong_AsSsize_t(args[4]);
    if (cap == -1 && PyErr_Occurred()) return NULL;
    if (cap < 0) {
        PyErr_SetString(PyExc_ValueError, "untimed_facets: cap >= 0");
        return NULL;
    }
    if (needles_ok(args[2]) < 0) return NULL;
    if (!all_str(args[0]) || !lines_ok(args[1], args[2])) Py_RETURN_NONE;
    PyObject *made = PyList_New(0), *seen = PySet_New(NULL), *out = PyList_New(0), *result = NULL;
    if (made == NULL || seen == NULL || out == NULL) goto done;
    if (all_lines_facets(args[1], args[3], made) < 0) goto done;
    if (!all_str(args[0])) { /* the tail changed them */
        PyErr_SetString(PyExc_RuntimeError, "untimed_facets: the facets changed");
        goto done;
    }
    if (distinct_into(args[0], seen, out, cap) < 0 || distinct_into(made, seen, out, cap) < 0) goto done;
    result = PyList_AsTuple(out);
done:
    Py_XDECREF(made);
    Py_XDECREF(seen);
    Py_XDECREF(out);
    return result;
}

/* --- sleep._record_hits: one episode's matches, no time known ----------------------------- */

static PyObject *str_first = NULL, *str_failure = NULL; /* "first", "failure" */

static int less(PyObject *a, PyObject *b, int op) { return PyObject_RichCompareBool(a, b, op); } /* 1, 0, -1 */

/* one hit (i, role, made, sim) of a facet met at `when` (made < when <= now checked by the caller);
 * the dictionaries are held while comparisons (which may be Python code) run */
static int record_in(PyObject *per, PyObject *seen, PyObject *sid, PyObject *eid, PyObject *when, PyObject *facet,
                     PyObject *role, PyObject *sim) {
    if (seen != NULL) {
        PyObject *had = PyDict_GetItemWithError(seen, role);
        if (had == NULL && PyErr_Occurred()) return -1;
        if (had != NULL) { /* seen[role][1] <= when (whatever seen[role] is: "first" is a role too) */
            PyObject *at = PyTuple_Check(had) && PyTuple_GET_SIZE(had) > 1 ? Py_NewRef(PyTuple_GET_ITEM(had, 1))
                                                                           : PySequence_GetItem(had, 1);
            if (at == NULL) return -1;
            int earlier = less(at, when, Py_LE);
            Py_DECREF(at);
            if (earlier < 0) return -1;
            if (earlier) return 0;
        }
    }
    PyObject *match = PyTuple_Pack(4, eid, when, facet, sim);
    if (match == NULL) return -1;
    int rc;
    if (seen == NULL) { /* {"first": when, role: match}, in that order */
        PyObject *fresh = PyDict_New();
        rc = fresh == NULL ? -1 : PyDict_SetItem(fresh, str_first, when);
        if (rc == 0) rc = PyDict_SetItem(fresh, role, match);
        if (rc == 0) rc = PyDict_SetItem(per, sid, fresh);
        Py_XDECREF(fresh);
        Py_DECREF(match);
        return rc;
    }
    rc = PyDict_SetItem(seen, role, match);
    Py_DECREF(match);
    if (rc < 0) return -1;
    PyObject *first = PyDict_GetItemWithError(seen, str_first);
    if (first == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, str_first);
        return -1;
    }
    Py_INCREF(first);
    int sooner = less(when, first, Py_LT);
    Py_DECREF(first);
    if (sooner < 0) return -1;
    return sooner ? PyDict_SetItem(seen, str_first, when) : 0;
}

static int record_one(PyObject *found, PyObject *sid, PyObject *eid, PyObject *when, PyObject *facet, PyObject *i,
                      PyObject *role, PyObject *sim) {
    PyObject *per = PyDict_GetItemWithError(found, i); /* None as missing (found.get) */
    if (per == NULL && PyErr_Occurred()) return -1;
    if (per != NULL && per != Py_None && !PyDict_Check(per)) {
        PyErr_SetString(PyExc_TypeError, "record_hits: a prediction's matches are a dict");
        return -1;
    }
    if (per == NULL || per == Py_None) {
        per = PyDict_New();
        if (per == NULL) return -1;
        if (PyDict_SetItem(found, i, per) < 0) {
            Py_DECREF(per);
            return -1;
        }
    } else {
        Py_INCREF(per);
    }
    PyObject *seen = PyDict_GetItemWithError(per, sid);
    int rc = -1;
    if (seen == NULL && PyErr_Occurred()) goto done;
    if (seen == Py_None) seen = NULL;
    if (seen != NULL && !PyDict_Check(seen)) {
        PyErr_SetString(PyExc_TypeError, "record_hits: a session's matches are a dict");
        goto done;
    }
    Py_XINCREF(seen);
    rc = record_in(per, seen, sid, eid, when, facet, role, sim);
    Py_XDECREF(seen);
done:
    Py_DECREF(per);
    return rc;
}

static PyObject *facets_record_hits(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* record_hits(names, fam_hits, hits_for, found, sid, eid, created, now_iso, is_session) -> None:
     * sleep._record_hits(names, None, ...) */
    if (nargs != 9 || !PyTuple_Check(args[0]) || !PyDict_Check(args[1]) || !PyCallable_Check(args[2]) ||
        !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "record_hits(names: tuple, fam_hits: dict, hits_for, found: dict, sid, eid, "
                                         "created, now_iso, is_session)");
        return NULL;
    }
    PyObject *names = args[0], *fam_hits = args[1], *hits_for = args[2], *found = args[3], *sid = args[4],
             *eid = args[5], *created = args[6], *now_iso = args[7];
    int is_session = PyObject_IsTrue(args[8]);
    if (is_session < 0) return NULL;
    for (Py_ssize_t n = 0; n < PyTuple_GET_SIZE(names); n++) {
        PyObject *facet = PyTuple_GET_ITEM(names, n);
        PyObject *hits = PyDict_GetItemWithError(fam_hits, facet); /* borrowed */
        if (hits == NULL) {
            if (PyErr_Occurred()) return NULL;
            hits = PyObject_CallOneArg(hits_for, facet);
            if (hits == NULL) return NULL;
            int rc = PyDict_SetItem(fam_hits, facet, hits);
            Py_DECREF(hits); /* held by fam_hits */
            if (rc < 0) return NULL;
        }
        if (!PyTuple_Check(hits)) {
            PyErr_SetString(PyExc_TypeError, "record_hits: hits_for gives a tuple");
            return NULL;
        }
        Py_INCREF(hits); /* held while the dictionaries change */
        int failure = !is_session && n == 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(hits); k++) {
            PyObject *hit = PyTuple_GET_ITEM(hits, k);
            if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 4) {
                PyErr_SetString(PyExc_TypeError, "record_hits: a hit is (position, role, made, similarity)");
                goto fail;
            }
            PyObject *i = PyTuple_GET_ITEM(hit, 0), *role = PyTuple_GET_ITEM(hit, 1), *made = PyTuple_GET_ITEM(hit, 2),
                     *sim = PyTuple_GET_ITEM(hit, 3);
            /* when = first if made < first <= now_iso else last if made < last <= now_iso else None, first and
             * last being created: the second test is the first again */
            int after = less(made, created, Py_LT);
            if (after < 0) goto fail;
            if (after) {
                after = less(created, now_iso, Py_LE);
                if (after < 0) goto fail;
            }
            if (!after) {
                int again = less(made, created, Py_LT); /* (the chained comparison asked for `last`) */
                if (again < 0) goto fail;
                if (again) {
                    again = less(created, now_iso, Py_LE);
                    if (again < 0) goto fail;
                }
                if (!again) continue;
            }
            int is_failure = PyObject_RichCompareBool(role, str_failure, Py_EQ);
            if (is_failure < 0) goto fail;
            if (is_failure && !failure) continue;
            if (record_one(found, sid, eid, created, facet, i, role, sim) < 0) goto fail;
        }
        Py_DECREF(hits);
        continue;
    fail:
        Py_DECREF(hits);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* --- the module ---------------------------------------------------------------------------- */

static PyMethodDef facets_methods[] = {
    {"command_facets", (PyCFunction)(void (*)(void))facets_command_facets, METH_FASTCALL,
     "command_facets(line, volatile_tail) -> list[str] | None: situations._command_facets_uncached(line, None, "
     "None) for an ASCII line, else None."},
    {"untimed_facets", (PyCFunction)(void (*)(void))facets_untimed_facets, METH_FASTCALL,
     "untimed_facets(before, lines, needles, volatile_tail, cap) -> tuple | None: situations._untimed of "
     "before and the lines' facets."},
    {"record_hits", (PyCFunction)(void (*)(void))facets_record_hits, METH_FASTCALL,
     "record_hits(names, fam_hits, hits_for, found, sid, eid, created, now_iso, is_session): sleep._record_hits for "
     "an episode without times."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef facets_module = {PyModuleDef_HEAD_INIT, "_facets_c",
                                           "Verify's situation texts in C (see openmemory_local/_facets_c.c).", -1,
                                           facets_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__facets_c(void) {
    if (str_first == NULL && (str_first = PyUnicode_InternFromString("first")) == NULL) return NULL;
    if (str_failure == NULL && (str_failure = PyUnicode_InternFromString("failure")) == NULL) return NULL;
    PyObject *m = PyModule_Create(&facets_module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
