/* A prototype, never shipped: the distinct words of the search index's text, in C.
 *
 * `distinct_words(data)` takes the bytes `services/filters.py` makes of a message's ASCII text
 * (lowercase letters and digits, every other byte a space) and returns each word once, in the
 * order first seen, separated by single spaces. FTS5 pays per word it is given (docs/performance.md),
 * and a Python set pays more per word than FTS5 does; this measures what a word set in C costs.
 * Words are kept as (start, length) slices of the input in an open-addressing table: no object
 * per word.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static PyObject *distinct_words(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *s = view.buf;
    Py_ssize_t n = view.len;
    Py_ssize_t capacity = 64;
    while (capacity < n + 1) {  /* at most n / 2 + 1 words: the table stays under half full */
        capacity <<= 1;
    }
    Py_ssize_t *starts = malloc(sizeof(Py_ssize_t) * (size_t)capacity);
    Py_ssize_t *lengths = calloc((size_t)capacity, sizeof(Py_ssize_t));
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (starts == NULL || lengths == NULL || out == NULL) {
        free(starts);
        free(lengths);
        Py_XDECREF(out);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    char *o = PyBytes_AS_STRING(out);
    Py_ssize_t used = 0;
    Py_ssize_t i = 0;
    Py_BEGIN_ALLOW_THREADS
    while (i < n) {
        while (i < n && s[i] == ' ') {
            i++;
        }
        Py_ssize_t start = i;
        uint64_t hash = 1469598103934665603ULL;  /* FNV-1a */
        while (i < n && s[i] != ' ') {
            hash = (hash ^ s[i]) * 1099511628211ULL;
            i++;
        }
        Py_ssize_t length = i - start;
        if (length == 0) {
            break;
        }
        Py_ssize_t slot = (Py_ssize_t)(hash & (uint64_t)(capacity - 1));
        while (lengths[slot] != 0 &&
               (lengths[slot] != length || memcmp(s + starts[slot], s + start, (size_t)length) != 0)) {
            slot = (slot + 1) & (capacity - 1);
        }
        if (lengths[slot] == 0) {
            starts[slot] = start;
            lengths[slot] = length;
            if (used > 0) {
                o[used++] = ' ';
            }
            memcpy(o + used, s + start, (size_t)length);
            used += length;
        }
    }
    Py_END_ALLOW_THREADS
    free(starts);
    free(lengths);
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&out, used) < 0) {
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"distinct_words", distinct_words, METH_O, "Each space-separated word of the bytes once, in order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "word_set", NULL, -1, methods};

PyMODINIT_FUNC PyInit_word_set(void) { return PyModule_Create(&module); }
