/* inboxd.services._words: the distinct words of a message's index text, in C.
 *
 * `distinct_words(data)` takes the bytes `services/filters.py` makes of a message's ASCII text
 * (lowercase letters and digits, every other byte a space) and returns its words separated by
 * single spaces, each once, in the order first seen. FTS5 pays for every word it is given and
 * stores what it is given (docs/performance.md, "The search index's words"); a Python set of the
 * words costs more than both. This is the one C in inboxd: setup.py builds it when a compiler is
 * there, and filters.py falls back to handing FTS5 every word when it is not. The answer is the
 * same either way for the index: FTS5 keeps each word of a document once.
 *
 * Mail is hostile: words that collide in the table (crafted against the hash, which is seeded per
 * process) are probed at most MAX_PROBES slots deep, then written out again rather than looked
 * for further. A repeat costs FTS5 a little; it never changes what the index holds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROBES 32

static uint64_t seed;

typedef struct {
    uint32_t start;
    uint32_t length; /* 0: a free slot */
} Slot;

#define RELEASE_BYTES (256 * 1024)

static PyObject *distinct_words(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *s = view.buf;
    Py_ssize_t n = view.len;
    if (n > (Py_ssize_t)UINT32_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "distinct_words takes at most 4 GiB");
        return NULL;
    }
    /* Words are at most one in two bytes: a table of twice as many slots stays under half full. */
    size_t words = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        words += s[i] != ' ' && (i == 0 || s[i - 1] == ' ');
    }
    size_t capacity = 16;
    while (capacity < 2 * words) {
        capacity <<= 1;
    }
    Slot *table = calloc(capacity, sizeof(Slot));
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (table == NULL || out == NULL) {
        free(table);
        Py_XDECREF(out);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    char *o = PyBytes_AS_STRING(out);
    Py_ssize_t used = 0;
    /* The GIL is let go only for a long text: for the few kilobytes of most mail the scan takes
       microseconds, less than handing the GIL to a waiting thread and waiting to take it back. */
    PyThreadState *released = n >= RELEASE_BYTES ? PyEval_SaveThread() : NULL;
    Py_ssize_t i = 0;
    while (i < n) {
        while (i < n && s[i] == ' ') {
            i++;
        }
        Py_ssize_t start = i;
        uint64_t hash = 1469598103934665603ULL ^ seed; /* FNV-1a */
        while (i < n && s[i] != ' ') {
            hash = (hash ^ s[i]) * 1099511628211ULL;
            i++;
        }
        uint32_t length = (uint32_t)(i - start);
        if (length == 0) {
            break;
        }
        size_t slot = (size_t)(hash ^ (hash >> 32)) & (capacity - 1);
        int seen = 0;
        int probes = 0;
        while (table[slot].length != 0 && probes < MAX_PROBES) {
            if (table[slot].length == length && memcmp(s + table[slot].start, s + start, length) == 0) {
                seen = 1;
                break;
            }
            slot = (slot + 1) & (capacity - 1);
            probes++;
        }
        if (seen) {
            continue;
        }
        if (table[slot].length == 0) {
            table[slot].start = (uint32_t)start;
            table[slot].length = length;
        }
        if (used > 0) {
            o[used++] = ' ';
        }
        memcpy(o + used, s + start, length);
        used += length;
    }
    if (released != NULL) {
        PyEval_RestoreThread(released);
    }
    free(table);
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&out, used) < 0) {
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"distinct_words", distinct_words, METH_O,
     "The space-separated words of the bytes, each once, in the order first seen, joined by single spaces."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_words", NULL, -1, methods};

PyMODINIT_FUNC PyInit__words(void) {
    /* The hash's seed: the process's own random bytes (os.urandom), so collisions cannot be
     * crafted once for every server. */
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL) {
        return NULL;
    }
    PyObject *bytes = PyObject_CallMethod(os, "urandom", "i", (int)sizeof(seed));
    Py_DECREF(os);
    if (bytes == NULL) {
        return NULL;
    }
    memcpy(&seed, PyBytes_AS_STRING(bytes), sizeof(seed));
    Py_DECREF(bytes);
    return PyModule_Create(&module);
}
