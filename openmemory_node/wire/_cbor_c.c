/* The record decoder of openmemory_node.wire in C: an optional accelerator (see
 * openmemory_protocol/native.py). The Python code stays the reference, and the fallback.
 *
 * fast_record(data)  the one-pass decoder of cbor.py (cbor._fast_record): a map of at most 23
 *                    entries with short text keys, whose values are integers, byte and text
 *                    strings, booleans, and arrays or maps of those, decoded with the scan's rules
 *                    (shortest heads, definite lengths, keys strictly increasing bytewise, nesting,
 *                    no trailing bytes). Returns (value, spans) where cbor._fast_record does, None
 *                    where it returns None (the caller then takes the general path).
 * record(data)       fast_record, then the field checks of records.py (record_from_map): returns
 *                    (record, spans) for a valid record, built as codec._decode builds it, or None
 *                    for anything else; the Python path then decides, so every refusal (code,
 *                    message, field) is the Python code's. A text field in printable ASCII is
 *                    checked here; any other text by the table's own Python check.
 * without_entry(prefix, data, start, stop)
 *                    prefix + cbor.without_entry's cut (the signed message, in one allocation).
 * configure(classes, evidence, limits)
 *                    the record classes, Evidence and the limits, from the Python tables (record()
 *                    answers None until it is called).
 *
 * Bytes come from peers: every read is bounded by the buffer's length, every length is checked
 * against what is left before it is used, nesting is at most MAX_NESTING (so the recursion is at
 * most three calls deep), and every Python API call's result is checked.
 *
 * Decoders return 1 (a value: *out a new reference, *next the offset after it), 0 (not this
 * shape, no exception set) or -1 (an error, exception set).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "unbuilt"
#endif

#define MAX_NESTING 2

/* ---------------------------------------------------------------------------------------- */
/* Map keys: the encoded key (bytes) and its name (an interned str), cached by their bytes.   */
/* ---------------------------------------------------------------------------------------- */

#define KEY_SLOTS 256
#define KEY_PROBES 8

typedef struct {
    PyObject *key;  /* bytes: the key's encoding (head and text), or NULL for an empty slot */
    PyObject *name; /* str: the text */
} key_entry;

static key_entry key_cache[KEY_SLOTS];

static unsigned int key_hash(const unsigned char *p, Py_ssize_t n)
{
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return (unsigned int)(h % KEY_SLOTS);
}

/* The name (new reference) of the key encoded at p (n bytes: the head, then n - 1 bytes of
 * text), and its encoding as bytes (new reference) when key is not NULL. 1, 0 (not UTF-8), -1. */
static int key_of(const unsigned char *p, Py_ssize_t n, PyObject **key, PyObject **name)
{
    unsigned int first = key_hash(p, n);
    key_entry *empty = NULL;
    for (unsigned int probe = 0; probe < KEY_PROBES; probe++) {
        key_entry *slot = &key_cache[(first + probe) % KEY_SLOTS];
        if (slot->key == NULL) {
            empty = slot;
            break;
        }
        if (PyBytes_GET_SIZE(slot->key) == n && memcmp(PyBytes_AS_STRING(slot->key), p, (size_t)n) == 0) {
            Py_INCREF(slot->name);
            *name = slot->name;
            if (key != NULL) {
                Py_INCREF(slot->key);
                *key = slot->key;
            }
            return 1;
        }
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p + 1, n - 1, NULL);
    if (text == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    PyUnicode_InternInPlace(&text);
    PyObject *encoded = PyBytes_FromStringAndSize((const char *)p, n);
    if (encoded == NULL) {
        Py_DECREF(text);
        return -1;
    }
    if (empty != NULL) { /* first come, kept: at most KEY_SLOTS keys, never evicted */
        Py_INCREF(encoded);
        Py_INCREF(text);
        empty->key = encoded;
        empty->name = text;
    }
    *name = text;
    if (key != NULL)
        *key = encoded;
    else
        Py_DECREF(encoded);
    return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* The one-pass decoder: cbor._fast_item and cbor._fast_map, step for step.                  */
/* ---------------------------------------------------------------------------------------- */

static int decode_map(const unsigned char *d, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, int depth,
                      PyObject *spans, PyObject **out, Py_ssize_t *next);

static int text_or_bytes(const unsigned char *d, Py_ssize_t start, Py_ssize_t length, int text, PyObject **out)
{
    if (!text) {
        *out = PyBytes_FromStringAndSize((const char *)d + start, length);
        return *out == NULL ? -1 : 1;
    }
    *out = PyUnicode_DecodeUTF8((const char *)d + start, length, NULL);
    if (*out == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    return 1;
}

/* One item at pos (the caller checked pos < end). */
static int decode_item(const unsigned char *d, Py_ssize_t pos, Py_ssize_t end, int depth, PyObject **out,
                       Py_ssize_t *next)
{
    unsigned int initial = d[pos];
    if (initial < 0x18) {
        *out = PyLong_FromLong((long)initial);
        *next = pos + 1;
        return *out == NULL ? -1 : 1;
    }
    if (initial < 0x1C) {
        Py_ssize_t width = (Py_ssize_t)1 << (initial - 0x18);
        if (width > end - pos - 1)
            return 0;
        uint64_t value = 0;
        for (Py_ssize_t i = 1; i <= width; i++)
            value = (value << 8) | d[pos + i];
        uint64_t minimum = width == 1 ? 24u : width == 2 ? 256u : width == 4 ? 65536u : (uint64_t)1 << 32;
        if (value < minimum)
            return 0;
        *out = PyLong_FromUnsignedLongLong((unsigned long long)value);
        *next = pos + 1 + width;
        return *out == NULL ? -1 : 1;
    }
    unsigned int major = initial >> 5;
    if (major == 2 || major == 3) {
        unsigned int info = initial & 0x1F;
        Py_ssize_t start = pos + 1;
        Py_ssize_t length;
        if (info < 24) {
            length = info;
        } else if (info == 24) {
            if (start >= end || d[start] < 24)
                return 0;
            length = d[start];
            start += 1;
        } else if (info == 25) {
            if (2 > end - start)
                return 0;
            length = ((Py_ssize_t)d[start] << 8) | d[start + 1];
            if (length < 256)
                return 0;
            start += 2;
        } else {
            return 0;
        }
        if (length > end - start)
            return 0;
        int got = text_or_bytes(d, start, length, major == 3, out);
        if (got == 1)
            *next = start + length;
        return got;
    }
    if (initial == 0xF4 || initial == 0xF5) {
        *out = initial == 0xF5 ? Py_True : Py_False;
        Py_INCREF(*out);
        *next = pos + 1;
        return 1;
    }
    if (depth >= MAX_NESTING)
        return 0;
    if (initial >= 0x80 && initial <= 0x97) { /* a short array */
        Py_ssize_t count = initial - 0x80;
        PyObject *items = PyList_New(count);
        if (items == NULL)
            return -1;
        pos += 1;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *item;
            int got;
            if (pos >= end) {
                Py_DECREF(items); /* the unset items are NULL: list_dealloc skips them */
                return 0;
            }
            got = decode_item(d, pos, end, depth + 1, &item, &pos);
            if (got != 1) {
                Py_DECREF(items);
                return got;
            }
            PyList_SET_ITEM(items, i, item);
        }
        *out = items;
        *next = pos;
        return 1;
    }
    if (initial >= 0xA0 && initial <= 0xB7) /* a short map */
        return decode_map(d, pos + 1, end, initial - 0xA0, depth + 1, NULL, out, next);
    return 0;
}

/* A map's entries: name (str) and value, new references each. */
typedef struct {
    PyObject *name;
    PyObject *value;
} entry;

#define MAX_ENTRIES 23 /* a map with a one-byte head */

static void release(entry *entries, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(entries[i].name);
        Py_DECREF(entries[i].value);
    }
}

static PyObject *span_of(Py_ssize_t start, Py_ssize_t stop)
{
    PyObject *span = PyTuple_New(2);
    if (span == NULL)
        return NULL;
    PyObject *a = PyLong_FromSsize_t(start), *b = PyLong_FromSsize_t(stop);
    if (a == NULL || b == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_DECREF(span);
        return NULL;
    }
    PyTuple_SET_ITEM(span, 0, a);
    PyTuple_SET_ITEM(span, 1, b);
    return span;
}

/* cbor._fast_map's loop: count (<= MAX_ENTRIES) entries from pos into entries, each key's
 * (start, end) into spans (a dict) when it is not NULL. 1, 0, -1; on 0 and -1 nothing is held. */
static int decode_entries(const unsigned char *d, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, int depth,
                          PyObject *spans, entry *entries, Py_ssize_t *next)
{
    const unsigned char *previous = NULL;
    Py_ssize_t previous_length = 0;
    Py_ssize_t i;
    int got = 0;
    for (i = 0; i < count; i++) {
        if (pos >= end)
            goto not_this;
        unsigned int head = d[pos];
        if (head < 0x60 || head > 0x77) /* keys: short text strings only */
            goto not_this;
        Py_ssize_t key_start = pos;
        Py_ssize_t key_length = (Py_ssize_t)(head - 0x5F);
        if (key_length >= end - pos) /* truncated, or no room for a value */
            goto not_this;
        pos += key_length;
        if (previous != NULL) { /* strictly increasing bytewise: unsorted or duplicate keys are not this */
            Py_ssize_t common = key_length < previous_length ? key_length : previous_length;
            int order = memcmp(d + key_start, previous, (size_t)common);
            if (order < 0 || (order == 0 && key_length <= previous_length))
                goto not_this;
        }
        previous = d + key_start;
        previous_length = key_length;
        PyObject *key = NULL, *name, *value;
        got = key_of(d + key_start, key_length, spans != NULL ? &key : NULL, &name);
        if (got != 1)
            goto fail;
        got = decode_item(d, pos, end, depth, &value, &pos);
        if (got != 1) {
            Py_XDECREF(key);
            Py_DECREF(name);
            goto fail;
        }
        entries[i].name = name;
        entries[i].value = value;
        if (spans != NULL) {
            PyObject *span = span_of(key_start, pos);
            int failed = span == NULL || PyDict_SetItem(spans, key, span) < 0;
            Py_XDECREF(span);
            Py_DECREF(key);
            if (failed) {
                i++;
                got = -1;
                goto fail;
            }
        }
    }
    *next = pos;
    return 1;
not_this:
    got = 0;
fail:
    release(entries, i);
    return got;
}

/* The dict (new reference, or NULL) of count entries, which it releases. */
static PyObject *dict_of(entry *entries, Py_ssize_t count)
{
    PyObject *map = PyDict_New();
    for (Py_ssize_t i = 0; map != NULL && i < count; i++)
        if (PyDict_SetItem(map, entries[i].name, entries[i].value) < 0)
            Py_CLEAR(map);
    release(entries, count);
    return map;
}

/* cbor._fast_map: the dict (new reference) of count entries from pos. */
static int decode_map(const unsigned char *d, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, int depth,
                      PyObject *spans, PyObject **out, Py_ssize_t *next)
{
    entry entries[MAX_ENTRIES];
    int got = decode_entries(d, pos, end, count, depth, spans, entries, next);
    if (got != 1)
        return got;
    *out = dict_of(entries, count);
    return *out == NULL ? -1 : 1;
}

/* The top-level map of a record (cbor._fast_record, before its dict is made): its entries
 * (*count of them) and spans (a new reference). 1, 0, -1; on 0 and -1 nothing is held. */
static int decode_top(PyObject *data, entry *entries, Py_ssize_t *count, PyObject **spans)
{
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data);
    if (end == 0 || d[0] < 0xA0 || d[0] > 0xB7)
        return 0;
    PyObject *found = PyDict_New();
    if (found == NULL)
        return -1;
    Py_ssize_t stop;
    int got = decode_entries(d, 1, end, d[0] - 0xA0, 1, found, entries, &stop);
    if (got != 1) {
        Py_DECREF(found);
        return got;
    }
    if (stop != end) {
        release(entries, d[0] - 0xA0);
        Py_DECREF(found);
        return 0;
    }
    *count = d[0] - 0xA0;
    *spans = found;
    return 1;
}

static PyObject *fast_record(PyObject *module, PyObject *data)
{
    (void)module;
    if (!PyBytes_CheckExact(data)) {
        PyErr_Format(PyExc_TypeError, "fast_record() takes bytes, not %.100s", Py_TYPE(data)->tp_name);
        return NULL;
    }
    entry entries[MAX_ENTRIES];
    Py_ssize_t count = 0;
    PyObject *spans = NULL;
    int got = decode_top(data, entries, &count, &spans);
    if (got < 0)
        return NULL;
    if (got == 0)
        Py_RETURN_NONE;
    PyObject *map = dict_of(entries, count);
    PyObject *pair = map == NULL ? NULL : PyTuple_Pack(2, map, spans);
    Py_XDECREF(map);
    Py_DECREF(spans);
    return pair;
}

/* ---------------------------------------------------------------------------------------- */
/* The field checks of records.py, for the common case; anything else is "not this" (0).     */
/* ---------------------------------------------------------------------------------------- */

enum { LESSON, ATTESTATION, REVOCATION, VOUCH, TYPES };

static const char *const type_names[TYPES] = {"lesson", "attestation", "revocation", "vouch"};

/* Each type's fields in its table's order (records.py: the type's fields, then COMMON_FIELDS). */
#define MAX_FIELDS 8
static const char *const field_names[TYPES][MAX_FIELDS + 1] = {
    {"text", "kind", "strength", "provenance", "derived_from", "signer", "created", "signature", NULL},
    {"lesson_id", "verdict", "met_before", "evidence", "signer", "created", "signature", NULL},
    {"target", "reason_code", "reason", "signer", "created", "signature", NULL},
    {"subject", "signer", "created", "signature", NULL},
};
static const char *const evidence_names[3] = {"sessions", "matched", "window"};

static int configured = 0;
static PyObject *classes[TYPES];      /* the record classes */
static PyObject *type_strings[TYPES]; /* interned "lesson", ... */
static PyObject *fields[TYPES][MAX_FIELDS];
static Py_ssize_t field_counts[TYPES];
static PyObject *evidence_class, *evidence_fields[3];
static PyObject *text_checks[TYPES]; /* the table's Python check of the type's text field (text, reason), or NULL */
static PyObject *s_version, *s_type, *s_cbor, *s_spans, *s_confirmed;
static PyObject *verdicts, *reason_codes; /* frozensets of str */
static PyObject *empty_tuple;
static unsigned long long min_created, max_created, max_strength, max_evidence_count, max_evidence_window;
static Py_ssize_t max_record_bytes, max_text_bytes, max_reason_bytes, max_derived_from, key_bytes, signature_bytes,
    provenance_bytes, id_bytes;
static long version;

static int is_bytes_of(PyObject *v, Py_ssize_t size)
{
    return PyBytes_CheckExact(v) && PyBytes_GET_SIZE(v) == size;
}

static int is_id(PyObject *v)
{
    if (!is_bytes_of(v, id_bytes))
        return 0;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(v);
    return p[0] == 0x12 && p[1] == 0x20;
}

/* 1 if v is an int (not a bool) in [low, high]. */
static int is_uint(PyObject *v, unsigned long long low, unsigned long long high)
{
    if (!PyLong_CheckExact(v))
        return 0;
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or too large: outside the range either way */
        return 0;
    }
    return low <= x && x <= high;
}

/* records.check_text on printable ASCII (the common case); 0 for anything else. */
static int is_ascii_text(PyObject *v, Py_ssize_t min_bytes, Py_ssize_t max_bytes)
{
    if (!PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    if (n > max_bytes || n < min_bytes)
        return 0;
    const unsigned char *p = PyUnicode_1BYTE_DATA(v);
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) { /* eight at a time: all ASCII (it is), none below 0x20, none 0x7F */
        uint64_t w;
        memcpy(&w, p + i, 8);
        uint64_t del = w ^ (0x7F * ones);
        if (((w - 0x20 * ones) & ~w & highs) || ((del - ones) & ~del & highs))
            return 0;
    }
    for (; i < n; i++)
        if (p[i] < 0x20 || p[i] > 0x7E)
            return 0;
    if (min_bytes && n && p[0] == ' ') { /* min_bytes and value.isspace(): only spaces */
        for (i = 1; i < n && p[i] == ' '; i++)
            ;
        if (i == n)
            return 0;
    }
    return 1;
}

/* A text outside printable ASCII: the table's own check decides (records._text: the code
 * points the protocol refuses, Unicode 14's unassigned ones). 1 if it takes v; 0 if it raises
 * anything, which it will raise again when the Python path decides the record. */
static int python_text(int t, PyObject *v)
{
    if (!PyUnicode_CheckExact(v) || text_checks[t] == NULL)
        return 0;
    PyObject *got = PyObject_CallOneArg(text_checks[t], v);
    if (got == NULL) {
        PyErr_Clear();
        return 0;
    }
    int same = got == v;
    Py_DECREF(got);
    return same;
}

/* records._kind: [a-z][a-z0-9-]{0,23}, whole. */
static int is_kind(PyObject *v)
{
    if (!PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    if (n < 1 || n > 24)
        return 0;
    const unsigned char *p = PyUnicode_1BYTE_DATA(v);
    if (p[0] < 'a' || p[0] > 'z')
        return 0;
    for (Py_ssize_t i = 1; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '-'))
            return 0;
    return 1;
}

/* 1 if v is a str in the frozenset allowed; -1 on error. */
static int is_one_of(PyObject *v, PyObject *allowed)
{
    if (!PyUnicode_CheckExact(v))
        return 0;
    return PySet_Contains(allowed, v);
}

/* records._id_list: the tuple (new reference) of a sorted list of distinct ids; 0; -1. */
static int id_tuple(PyObject *v, PyObject **out)
{
    if (!PyList_CheckExact(v))
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(v);
    if (n > max_derived_from)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(v, i);
        if (!is_id(item))
            return 0;
        /* all ids are id_bytes long: bytewise order is memcmp */
        if (i && memcmp(PyBytes_AS_STRING(item), PyBytes_AS_STRING(PyList_GET_ITEM(v, i - 1)), (size_t)id_bytes) <= 0)
            return 0;
    }
    *out = PyList_AsTuple(v);
    return *out == NULL ? -1 : 1;
}

/* A frozen dataclass built from checked values (records._bare: object.__new__, then its
 * __dict__ updated with them): here values becomes its __dict__ (values is not shared: the
 * caller made it for this). New reference, or NULL with an exception set. */
static PyObject *bare(PyObject *cls, PyObject *values)
{
    PyObject *obj = PyBaseObject_Type.tp_new((PyTypeObject *)cls, empty_tuple, NULL);
    if (obj == NULL)
        return NULL;
    if (PyObject_GenericSetDict(obj, values, NULL) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return obj;
}

/* records._evidence: the Evidence (new reference) of a valid evidence map; 0; -1. */
static int evidence_of(PyObject *v, PyObject **out)
{
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != 3)
        return 0;
    PyObject *got[3];
    for (int i = 0; i < 3; i++) {
        got[i] = PyDict_GetItemWithError(v, evidence_fields[i]);
        if (got[i] == NULL)
            return PyErr_Occurred() ? -1 : 0;
    }
    if (!is_uint(got[0], 0, max_evidence_count) || !is_uint(got[1], 0, max_evidence_count)
        || !is_uint(got[2], 1, max_evidence_window))
        return 0;
    int bigger = PyObject_RichCompareBool(got[1], got[0], Py_GT);
    if (bigger != 0)
        return bigger < 0 ? -1 : 0;
    PyObject *values = PyDict_New();
    if (values == NULL)
        return -1;
    for (int i = 0; i < 3; i++) {
        if (PyDict_SetItem(values, evidence_fields[i], got[i]) < 0) {
            Py_DECREF(values);
            return -1;
        }
    }
    *out = bare(evidence_class, values);
    Py_DECREF(values);
    return *out == NULL ? -1 : 1;
}

/* The checked value (new reference) of field i of a record of type t; 0; -1. */
static int field_value(int t, Py_ssize_t i, PyObject *v, PyObject **out)
{
    int ok;
    const char *name = field_names[t][i];
    switch (t * 16 + (int)i) {
    case LESSON * 16 + 0: /* text */
        ok = is_ascii_text(v, 1, max_text_bytes) || python_text(LESSON, v);
        break;
    case LESSON * 16 + 1: /* kind */
        ok = is_kind(v);
        break;
    case LESSON * 16 + 2: /* strength */
        ok = is_uint(v, 0, max_strength);
        break;
    case LESSON * 16 + 3: /* provenance */
        ok = is_bytes_of(v, provenance_bytes);
        break;
    case LESSON * 16 + 4: /* derived_from */
        return id_tuple(v, out);
    case ATTESTATION * 16 + 0: /* lesson_id */
    case REVOCATION * 16 + 0:  /* target */
        ok = is_id(v);
        break;
    case ATTESTATION * 16 + 1: /* verdict */
        ok = is_one_of(v, verdicts);
        break;
    case ATTESTATION * 16 + 2: /* met_before */
        ok = PyBool_Check(v);
        break;
    case ATTESTATION * 16 + 3: /* evidence */
        return evidence_of(v, out);
    case REVOCATION * 16 + 1: /* reason_code */
        ok = is_one_of(v, reason_codes);
        break;
    case REVOCATION * 16 + 2: /* reason */
        ok = is_ascii_text(v, 0, max_reason_bytes) || python_text(REVOCATION, v);
        break;
    case VOUCH * 16 + 0: /* subject */
        ok = is_bytes_of(v, key_bytes);
        break;
    default: /* the common fields: signer, created, signature */
        if (strcmp(name, "signer") == 0)
            ok = is_bytes_of(v, key_bytes);
        else if (strcmp(name, "created") == 0)
            ok = is_uint(v, min_created, max_created);
        else
            ok = is_bytes_of(v, signature_bytes);
    }
    if (ok == 1) {
        Py_INCREF(v);
        *out = v;
    }
    return ok;
}

/* records.record_from_map over the top-level entries, then codec._decode's two entries
 * (_cbor, _spans): the record (new reference), 1; 0 (not a valid record in the common case); -1. */
static int record_of(PyObject *data, const entry *entries, Py_ssize_t count, PyObject *spans, PyObject **out)
{
    PyObject *version_value = NULL, *type_value = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (entries[i].name == s_version) /* names are interned (key_of), as these */
            version_value = entries[i].value;
        else if (entries[i].name == s_type)
            type_value = entries[i].value;
    }
    if (version_value == NULL || !PyLong_CheckExact(version_value))
        return 0;
    long got_version = PyLong_AsLong(version_value);
    if (got_version == -1 && PyErr_Occurred()) {
        PyErr_Clear(); /* too large: not the version */
        return 0;
    }
    if (got_version != version || type_value == NULL || !PyUnicode_CheckExact(type_value))
        return 0;
    int t;
    for (t = 0; t < TYPES; t++) {
        int same = PyUnicode_Compare(type_value, type_strings[t]);
        if (same == -1 && PyErr_Occurred())
            return -1;
        if (same == 0)
            break;
    }
    if (t == TYPES)
        return 0;
    Py_ssize_t n = field_counts[t];
    if (count != n + 2) /* the table's fields, version and type: and no other */
        return 0;
    PyObject *raw[MAX_FIELDS] = {NULL};
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = entries[i].name;
        if (name == s_version || name == s_type)
            continue;
        Py_ssize_t j = 0;
        while (j < n && fields[t][j] != name)
            j++;
        if (j == n)
            return 0; /* an unknown field */
        raw[j] = entries[i].value; /* keys are distinct: each field once */
    }
    for (Py_ssize_t j = 0; j < n; j++)
        if (raw[j] == NULL)
            return 0;
    PyObject *values = PyDict_New();
    if (values == NULL)
        return -1;
    PyObject *got[MAX_FIELDS];
    int result = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *checked;
        result = field_value(t, i, raw[i], &checked);
        if (result != 1)
            goto done;
        got[i] = checked; /* borrowed from values once set */
        int failed = PyDict_SetItem(values, fields[t][i], checked) < 0;
        Py_DECREF(checked);
        if (failed) {
            result = -1;
            goto done;
        }
    }
    /* records._cross_checks */
    if (t == ATTESTATION) {
        int confirmed = PyUnicode_Compare(got[1], s_confirmed);
        if (confirmed == -1 && PyErr_Occurred()) {
            result = -1;
            goto done;
        }
        if (confirmed == 0) {
            PyObject *matched = PyObject_GetAttr(got[3], evidence_fields[1]);
            if (matched == NULL) {
                result = -1;
                goto done;
            }
            int ok = is_uint(matched, 1, max_evidence_count);
            Py_DECREF(matched);
            if (!ok) {
                result = 0;
                goto done;
            }
        }
    } else if (t == VOUCH) {
        int same = PyObject_RichCompareBool(got[0], got[1], Py_EQ); /* subject, signer */
        if (same != 0) {
            result = same < 0 ? -1 : 0;
            goto done;
        }
    }
    PyObject *kept = PyTuple_Pack(2, data, spans);
    if (kept == NULL) {
        result = -1;
        goto done;
    }
    if (PyDict_SetItem(values, s_cbor, data) < 0 || PyDict_SetItem(values, s_spans, kept) < 0) {
        Py_DECREF(kept);
        result = -1;
        goto done;
    }
    Py_DECREF(kept);
    *out = bare(classes[t], values);
    result = *out == NULL ? -1 : 1;
done:
    Py_DECREF(values);
    return result;
}

static PyObject *record(PyObject *module, PyObject *data)
{
    (void)module;
    if (!PyBytes_CheckExact(data)) {
        PyErr_Format(PyExc_TypeError, "record() takes bytes, not %.100s", Py_TYPE(data)->tp_name);
        return NULL;
    }
    if (!configured || PyBytes_GET_SIZE(data) > max_record_bytes) /* (codec.check_size says why) */
        Py_RETURN_NONE;
    entry entries[MAX_ENTRIES];
    Py_ssize_t count = 0;
    PyObject *spans = NULL, *built = NULL;
    int got = decode_top(data, entries, &count, &spans);
    if (got < 0)
        return NULL;
    if (got == 0)
        Py_RETURN_NONE;
    got = record_of(data, entries, count, spans, &built);
    release(entries, count);
    if (got != 1) {
        Py_DECREF(spans);
        if (got < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *pair = PyTuple_Pack(2, built, spans);
    Py_DECREF(built);
    Py_DECREF(spans);
    return pair;
}

/* cbor.without_entry's cut, after a prefix: prefix, then the map's head less one entry, then
 * data[1:start] and data[stop:], in one allocation. (start, stop) is an entry's span, from
 * decoding data: 1 <= start <= stop <= len(data); anything else is a ValueError. */
static PyObject *without_entry(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "without_entry(prefix: bytes, data: bytes, start: int, stop: int)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[2]), stop = PyLong_AsSsize_t(args[3]);
    if ((start == -1 || stop == -1) && PyErr_Occurred())
        return NULL;
    const char *data = PyBytes_AS_STRING(args[1]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[1]), prefix = PyBytes_GET_SIZE(args[0]);
    if (start < 1 || stop < start || stop > size || (unsigned char)data[0] == 0) {
        PyErr_SetString(PyExc_ValueError, "without_entry(): not an entry's span in a map");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, prefix + size - (stop - start));
    if (out == NULL)
        return NULL;
    char *p = PyBytes_AS_STRING(out);
    memcpy(p, PyBytes_AS_STRING(args[0]), (size_t)prefix);
    p[prefix] = (char)((unsigned char)data[0] - 1);
    memcpy(p + prefix + 1, data + 1, (size_t)(start - 1));
    memcpy(p + prefix + start, data + stop, (size_t)(size - stop));
    return out;
}

/* ---------------------------------------------------------------------------------------- */
/* configure(classes, evidence, limits)                                                      */
/* ---------------------------------------------------------------------------------------- */

static int limit_of(PyObject *limits, const char *name, unsigned long long *out)
{
    PyObject *v = PyDict_GetItemString(limits, name);
    if (v == NULL || !PyLong_CheckExact(v)) {
        PyErr_Format(PyExc_ValueError, "configure(): limits[%s] must be an int", name);
        return -1;
    }
    *out = PyLong_AsUnsignedLongLong(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int size_of(PyObject *limits, const char *name, Py_ssize_t *out)
{
    unsigned long long v;
    if (limit_of(limits, name, &v) < 0)
        return -1;
    if (v > 1u << 20) {
        PyErr_Format(PyExc_ValueError, "configure(): limits[%s] is out of range", name);
        return -1;
    }
    *out = (Py_ssize_t)v;
    return 0;
}

static int set_ref(PyObject **slot, PyObject *value)
{
    if (value == NULL)
        return -1;
    Py_XSETREF(*slot, value);
    return 0;
}

static PyObject *configure(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *by_type, *evidence, *limits;
    if (!PyArg_ParseTuple(args, "O!OO!:configure", &PyDict_Type, &by_type, &evidence, &PyDict_Type, &limits))
        return NULL;
    configured = 0;
    unsigned long long v, nesting;
    if (limit_of(limits, "MIN_CREATED", &min_created) < 0 || limit_of(limits, "MAX_CREATED", &max_created) < 0
        || limit_of(limits, "MAX_STRENGTH", &max_strength) < 0
        || limit_of(limits, "MAX_EVIDENCE_COUNT", &max_evidence_count) < 0
        || limit_of(limits, "MAX_EVIDENCE_WINDOW", &max_evidence_window) < 0
        || limit_of(limits, "VERSION", &v) < 0 || limit_of(limits, "MAX_NESTING", &nesting) < 0
        || size_of(limits, "MAX_RECORD_BYTES", &max_record_bytes) < 0
        || size_of(limits, "MAX_TEXT_BYTES", &max_text_bytes) < 0
        || size_of(limits, "MAX_REASON_BYTES", &max_reason_bytes) < 0
        || size_of(limits, "MAX_DERIVED_FROM", &max_derived_from) < 0
        || size_of(limits, "KEY_BYTES", &key_bytes) < 0 || size_of(limits, "SIGNATURE_BYTES", &signature_bytes) < 0
        || size_of(limits, "PROVENANCE_BYTES", &provenance_bytes) < 0 || size_of(limits, "ID_BYTES", &id_bytes) < 0)
        return NULL;
    if (nesting != MAX_NESTING || v > 1000 || id_bytes < 2) {
        PyErr_SetString(PyExc_ValueError,
                        "configure(): MAX_NESTING, VERSION or ID_BYTES is not what this module was written for");
        return NULL;
    }
    version = (long)v;
    PyObject *pattern = PyDict_GetItemString(limits, "KIND_PATTERN");
    if (pattern == NULL || !PyUnicode_Check(pattern)
        || PyUnicode_CompareWithASCIIString(pattern, "[a-z][a-z0-9-]{0,23}") != 0) {
        PyErr_SetString(PyExc_ValueError, "configure(): KIND_PATTERN is not the one this module checks");
        return NULL;
    }
    PyObject *verdict_list = PyDict_GetItemString(limits, "VERDICTS");
    PyObject *reason_list = PyDict_GetItemString(limits, "REASON_CODES");
    if (verdict_list == NULL || reason_list == NULL) {
        PyErr_SetString(PyExc_ValueError, "configure(): limits needs VERDICTS and REASON_CODES");
        return NULL;
    }
    if (set_ref(&verdicts, PyFrozenSet_New(verdict_list)) < 0
        || set_ref(&reason_codes, PyFrozenSet_New(reason_list)) < 0)
        return NULL;
    for (int t = 0; t < TYPES; t++) {
        PyObject *cls = PyDict_GetItemString(by_type, type_names[t]);
        if (cls == NULL || !PyType_Check(cls)) {
            PyErr_Format(PyExc_ValueError, "configure(): no class for %s", type_names[t]);
            return NULL;
        }
        /* its table's fields must be the ones this module checks, in the same order */
        PyObject *table = PyObject_GetAttrString(cls, "_table");
        if (table == NULL)
            return NULL;
        PyObject *names = PySequence_Tuple(table);
        Py_DECREF(table);
        if (names == NULL)
            return NULL;
        Py_ssize_t n = 0;
        while (field_names[t][n] != NULL)
            n++;
        int same = PyTuple_GET_SIZE(names) == n;
        for (Py_ssize_t i = 0; same && i < n; i++) {
            PyObject *name = PyTuple_GET_ITEM(names, i);
            same = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, field_names[t][i]) == 0;
        }
        Py_DECREF(names);
        if (!same) {
            PyErr_Format(PyExc_ValueError, "configure(): the %s table's fields are not the ones this module checks",
                         type_names[t]);
            return NULL;
        }
        field_counts[t] = n;
        for (Py_ssize_t i = 0; i < n; i++)
            if (set_ref(&fields[t][i], PyUnicode_InternFromString(field_names[t][i])) < 0)
                return NULL;
        if (t == LESSON || t == REVOCATION) { /* the text field's check, from the table */
            PyObject *table = PyObject_GetAttrString(cls, "_table");
            PyObject *check = table == NULL ? NULL : PyMapping_GetItemString(table, t == LESSON ? "text" : "reason");
            Py_XDECREF(table);
            if (check == NULL)
                return NULL;
            if (!PyCallable_Check(check)) {
                Py_DECREF(check);
                PyErr_Format(PyExc_ValueError, "configure(): the %s text check is not callable", type_names[t]);
                return NULL;
            }
            Py_XSETREF(text_checks[t], check);
        }
        Py_INCREF(cls);
        Py_XSETREF(classes[t], cls);
        if (set_ref(&type_strings[t], PyUnicode_InternFromString(type_names[t])) < 0)
            return NULL;
    }
    if (!PyType_Check(evidence)) {
        PyErr_SetString(PyExc_ValueError, "configure(): evidence must be the Evidence class");
        return NULL;
    }
    Py_INCREF(evidence);
    Py_XSETREF(evidence_class, evidence);
    for (int i = 0; i < 3; i++)
        if (set_ref(&evidence_fields[i], PyUnicode_InternFromString(evidence_names[i])) < 0)
            return NULL;
    if (set_ref(&s_version, PyUnicode_InternFromString("version")) < 0
        || set_ref(&s_type, PyUnicode_InternFromString("type")) < 0
        || set_ref(&s_cbor, PyUnicode_InternFromString("_cbor")) < 0
        || set_ref(&s_spans, PyUnicode_InternFromString("_spans")) < 0
        || set_ref(&s_confirmed, PyUnicode_InternFromString("confirmed")) < 0
        || set_ref(&empty_tuple, PyTuple_New(0)) < 0)
        return NULL;
    configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fast_record", fast_record, METH_O, "cbor._fast_record in C: (value, spans), or None for the general path."},
    {"record", record, METH_O,
     "The decoder and the field checks: (record, spans) for a valid record in the common case, else None."},
    {"without_entry", (PyCFunction)(void (*)(void))without_entry, METH_FASTCALL,
     "without_entry(prefix, data, start, stop): prefix + cbor.without_entry's cut of the entry at (start, stop)."},
    {"configure", configure, METH_VARARGS, "configure(classes, evidence, limits): the tables record() checks by."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cbor_c", "The record decoder of openmemory_node.wire in C (optional; see _cbor_c.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cbor_c(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
