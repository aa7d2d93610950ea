/* Ed25519 verification of many signatures in one call, without the GIL: the accelerator of
 * openmemory_node.wire.codec.verify_signatures (the Python loop over verify_signature is the
 * reference and the fallback).
 *
 * It calls libsodium's crypto_sign_verify_detached from the libsodium PyNaCl already loaded
 * (nacl._sodium, which links it statically and exports its symbols): configure() takes that
 * library's path and the address of its crypto_sign_open as cffi sees it, opens it only if it is
 * loaded already (RTLD_NOLOAD: no code is ever loaded by this module) and refuses it unless the
 * function cffi calls for crypto_sign_open lies in that same library (dladdr).
 * crypto_sign_open(sig + message, key), what verify_signature calls, is
 * crypto_sign_verify_detached(sig, message, key) once the 64 bytes are cut off, in libsodium.
 *
 * verify(items): items is a list of (signature, message, key) tuples of bytes; returns bytes
 * of the same length, 1 where the signature is 64 bytes, the key 32 and the signature verifies
 * the message under the key, 0 otherwise (the caller lets the Python code decide, and word,
 * every 0). The loop runs with the GIL released over buffers this call holds references to.
 */
#define _GNU_SOURCE /* dladdr */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <string.h>

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 ""
#endif

typedef int (*verify_fn)(const unsigned char *sig, const unsigned char *m, unsigned long long mlen,
                         const unsigned char *pk);

static verify_fn verify_detached = NULL;

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *path = NULL;
    unsigned long long expected = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&K", PyUnicode_FSConverter, &path, &expected))
        return NULL;
    void *handle = dlopen(PyBytes_AS_STRING(path), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    Py_DECREF(path);
    if (handle == NULL) {
        PyErr_SetString(PyExc_OSError, "that library is not loaded in this process");
        return NULL;
    }
    void *verify_sym = dlsym(handle, "crypto_sign_verify_detached");
    Dl_info ours, theirs;
    void *expected_ptr = (void *)(uintptr_t)expected;
    if (verify_sym == NULL || dladdr(verify_sym, &ours) == 0 || dladdr(expected_ptr, &theirs) == 0
        || ours.dli_fbase != theirs.dli_fbase) {
        dlclose(handle);
        PyErr_SetString(PyExc_OSError, "not the libsodium PyNaCl calls");
        return NULL;
    }
    /* (the handle stays open: the function stays loaded for the process's life) */
    memcpy(&verify_detached, &verify_sym, sizeof verify_detached);
    Py_RETURN_NONE;
}

static PyObject *
verify(PyObject *self, PyObject *items)
{
    (void)self;
    if (verify_detached == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "not configured");
        return NULL;
    }
    if (!PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "verify() takes a list of (signature, message, key) tuples");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *held = PyTuple_New(n); /* the tuples, kept alive while the GIL is released */
    if (held == NULL)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) {
        Py_DECREF(held);
        return NULL;
    }
    const unsigned char **ptr = NULL;
    unsigned long long *len = NULL;
    if (n > 0) {
        ptr = PyMem_Malloc((size_t)n * 3 * sizeof *ptr);
        len = PyMem_Malloc((size_t)n * sizeof *len);
        if (ptr == NULL || len == NULL) {
            PyMem_Free(ptr);
            PyMem_Free(len);
            Py_DECREF(held);
            Py_DECREF(out);
            return PyErr_NoMemory();
        }
    }
    char *result = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3 || !PyBytes_CheckExact(PyTuple_GET_ITEM(item, 0))
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(item, 1)) || !PyBytes_CheckExact(PyTuple_GET_ITEM(item, 2))) {
            PyErr_SetString(PyExc_TypeError, "verify() takes a list of (signature, message, key) tuples of bytes");
            PyMem_Free(ptr);
            PyMem_Free(len);
            Py_DECREF(held);
            Py_DECREF(out);
            return NULL;
        }
        Py_INCREF(item);
        PyTuple_SET_ITEM(held, i, item);
        PyObject *sig = PyTuple_GET_ITEM(item, 0), *msg = PyTuple_GET_ITEM(item, 1), *key = PyTuple_GET_ITEM(item, 2);
        if (PyBytes_GET_SIZE(sig) != 64 || PyBytes_GET_SIZE(key) != 32) {
            ptr[3 * i] = NULL; /* not verified here */
            result[i] = 0;
            continue;
        }
        ptr[3 * i] = (const unsigned char *)PyBytes_AS_STRING(sig);
        ptr[3 * i + 1] = (const unsigned char *)PyBytes_AS_STRING(msg);
        ptr[3 * i + 2] = (const unsigned char *)PyBytes_AS_STRING(key);
        len[i] = (unsigned long long)PyBytes_GET_SIZE(msg);
    }
    verify_fn fn = verify_detached;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ptr[3 * i] != NULL)
            result[i] = fn(ptr[3 * i], ptr[3 * i + 1], len[i], ptr[3 * i + 2]) == 0 ? 1 : 0;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(ptr);
    PyMem_Free(len);
    Py_DECREF(held);
    return out;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(path, address): use the libsodium loaded from path, which must hold address."},
    {"verify", verify, METH_O,
     "verify(items): bytes, 1 where (signature, message, key) verifies, 0 otherwise; without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_verify_c", "Ed25519 verification of many signatures without the GIL.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__verify_c(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
