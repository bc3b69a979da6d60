/* refold._cjklen: a CJK question's postings weighed by length from cjklen.py's packed blocks.
 *
 * A common character's postings (~9,000 at a million messages) joined cjk_lengths one lookup
 * a posting and came back to Python as that many (id, chars) tuples: ~3.5 ms a piece. Here
 * the postings come as one string (SQLite's group_concat of the index's rowids) and their
 * lengths from the blocks: each block the CJK rows of 2^bits ids, as n little-endian u16
 * offsets (ascending) then n u32 values (the length; the top bit set: an inactive row).
 *
 * span(rowids) -> (count, lowest, highest): what to read for them
 * rows(rowids, blocks, extra, bits, include_inactive) -> [(id, chars)]
 *     rowids: "3,17,42" (ascending, as FTS5 gives them; any order is sorted) or None;
 *     blocks: [(block, data)] ascending by block; extra: [(id, chars, active)] ascending by id,
 *     the rows of the blocks not packed yet. The ids found in neither are left out, as the
 *     join leaves out a posting with no cjk_lengths row; inactive ones too unless asked for.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    long long number;
    const unsigned char *data;
    Py_ssize_t count;
} Block;

static int ascending(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* "3,17,42" -> ids (PyMem); -1 with ValueError on anything else */
static Py_ssize_t parse_ids(PyObject *text, long long **out) {
    *out = NULL;
    if (text == Py_None) {
        return 0;
    }
    Py_ssize_t size;
    const char *s = PyUnicode_AsUTF8AndSize(text, &size);
    if (s == NULL) {
        return -1;
    }
    Py_ssize_t most = 1;
    for (Py_ssize_t i = 0; i < size; i++) {
        most += s[i] == ',';
    }
    long long *ids = PyMem_Malloc(sizeof(long long) * (size_t)most);
    if (ids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t n = 0, i = 0;
    int sorted = 1;
    while (i < size) {
        long long v = 0;
        Py_ssize_t start = i;
        while (i < size && s[i] >= '0' && s[i] <= '9' && i - start < 18) {
            v = v * 10 + (s[i++] - '0');
        }
        if (i == start || (i < size && s[i] != ',') || (i == size - 1)) {
            PyMem_Free(ids);
            PyErr_SetString(PyExc_ValueError, "rowids are comma-separated ids");
            return -1;
        }
        i++;  /* the comma */
        if (n && v <= ids[n - 1]) {
            sorted = 0;
        }
        ids[n++] = v;
    }
    if (!sorted) {
        qsort(ids, (size_t)n, sizeof(long long), ascending);
    }
    *out = ids;
    return n;
}

static int load_blocks(PyObject *blocks, Block *out, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(blocks, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(item, 1))) {
            PyErr_SetString(PyExc_TypeError, "a block is (number, data)");
            return -1;
        }
        out[i].number = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        if (out[i].number == -1 && PyErr_Occurred()) {
            return -1;
        }
        PyObject *data = PyTuple_GET_ITEM(item, 1);
        Py_ssize_t size = PyBytes_GET_SIZE(data);
        if (size % 6 || (i && out[i].number <= out[i - 1].number)) {
            PyErr_SetString(PyExc_ValueError, "blocks ascending, 6 bytes a row");
            return -1;
        }
        out[i].data = (const unsigned char *)PyBytes_AS_STRING(data);
        out[i].count = size / 6;
    }
    return 0;
}

/* The value of ``offset`` in block ``b`` (the length, the top bit inactive), or -1. */
static long long in_block(const Block *b, unsigned offset) {
    Py_ssize_t low = 0, high = b->count;
    while (low < high) {
        Py_ssize_t mid = (low + high) / 2;
        unsigned at = b->data[2 * mid] | (unsigned)b->data[2 * mid + 1] << 8;
        if (at < offset) {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    if (low == b->count ||
        (b->data[2 * low] | (unsigned)b->data[2 * low + 1] << 8) != offset) {
        return -1;
    }
    const unsigned char *v = b->data + 2 * b->count + 4 * low;
    return (long long)((uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 |
                       (uint32_t)v[3] << 24);
}

static int append(PyObject *out, long long id, long long chars) {
    PyObject *row = Py_BuildValue("(LL)", id, chars);
    if (row == NULL) {
        return -1;
    }
    int r = PyList_Append(out, row);
    Py_DECREF(row);
    return r;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    PyObject *text, *blocks, *extra;
    int bits, inactive;
    if (!PyArg_ParseTuple(args, "OO!O!ip", &text, &PyList_Type, &blocks, &PyList_Type, &extra,
                          &bits, &inactive)) {
        return NULL;
    }
    if (bits < 1 || bits > 16) {
        PyErr_SetString(PyExc_ValueError, "bits: 1 to 16");
        return NULL;
    }
    long long *ids;
    Py_ssize_t n = parse_ids(text, &ids);
    if (n < 0) {
        return NULL;
    }
    Py_ssize_t nb = PyList_GET_SIZE(blocks), ne = PyList_GET_SIZE(extra);
    Block *loaded = PyMem_Malloc(sizeof(Block) * (size_t)(nb ? nb : 1));
    PyObject *out = PyList_New(0);
    if (loaded == NULL || out == NULL || load_blocks(blocks, loaded, nb) < 0) {
        if (loaded == NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    Py_ssize_t bi = 0, ei = 0;
    long long last_extra = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long id = ids[i], number = id >> bits;
        while (bi < nb && loaded[bi].number < number) {
            bi++;
        }
        if (bi < nb && loaded[bi].number == number) {
            long long value = in_block(&loaded[bi], (unsigned)(id & ((1LL << bits) - 1)));
            if (value >= 0 && (inactive || !(value & 0x80000000LL)) &&
                append(out, id, value & 0x7fffffffLL) < 0) {
                goto fail;
            }
            continue;
        }
        for (; ei < ne; ei++) {  /* the rows not packed: (id, chars, active), ascending */
            PyObject *row = PyList_GET_ITEM(extra, ei);
            if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 3) {
                PyErr_SetString(PyExc_TypeError, "an extra row is (id, chars, active)");
                goto fail;
            }
            long long at = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 0));
            if (at == -1 && PyErr_Occurred()) {
                goto fail;
            }
            if (at <= last_extra) {
                PyErr_SetString(PyExc_ValueError, "extra rows ascending by id");
                goto fail;
            }
            if (at >= id) {
                if (at == id) {
                    long long chars = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 1));
                    int active = PyObject_IsTrue(PyTuple_GET_ITEM(row, 2));
                    if ((chars == -1 && PyErr_Occurred()) || active < 0) {
                        goto fail;
                    }
                    if ((inactive || active) && append(out, id, chars) < 0) {
                        goto fail;
                    }
                }
                break;
            }
            last_extra = at;
        }
    }
    PyMem_Free(ids);
    PyMem_Free(loaded);
    return out;
fail:
    PyMem_Free(ids);
    PyMem_Free(loaded);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *span(PyObject *self, PyObject *text) {
    long long *ids;
    Py_ssize_t n = parse_ids(text, &ids);
    if (n < 0) {
        return NULL;
    }
    PyObject *out = n ? Py_BuildValue("(nLL)", n, ids[0], ids[n - 1])
                      : Py_BuildValue("(nii)", n, 0, -1);
    PyMem_Free(ids);
    return out;
}

static PyMethodDef methods[] = {
    {"span", span, METH_O,
     "span(rowids) -> (count, lowest, highest) of the ids (0, 0, -1: none)"},
    {"rows", rows, METH_VARARGS,
     "rows(rowids, blocks, extra, bits, include_inactive) -> [(id, chars)] of the postings"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "refold._cjklen",
    "CJK postings weighed by length from packed blocks (see store/sqlite/cjklen.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__cjklen(void) { return PyModule_Create(&module); }
