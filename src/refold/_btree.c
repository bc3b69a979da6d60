/* SQLite b-tree pages read for the read-ahead of a cold search (store/sqlite/readahead.py,
 * which does the same in Python where this is not built): the children of an interior page
 * that hold some rowid spans or index keys, every child, and the first overflow pages of some
 * rows of a table leaf. The page format: https://www.sqlite.org/fileformat2.html. Every read
 * is bounds-checked: a page that is not what it should be (newer in the WAL, reused, garbage)
 * raises ValueError, which the caller takes as "stop here". */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define TABLE_INTERIOR 0x05
#define TABLE_LEAF 0x0D
#define INDEX_INTERIOR 0x02

typedef struct {
    const unsigned char *data;
    Py_ssize_t size;
    Py_ssize_t at; /* where the b-tree header starts (100 on page 1) */
    int kind;
    Py_ssize_t cells;
} Page;

static int bad(void) {
    PyErr_SetString(PyExc_ValueError, "not a b-tree page");
    return -1;
}

static int u16(const Page *p, Py_ssize_t at, Py_ssize_t *out) {
    if (at < 0 || at + 2 > p->size) return bad();
    *out = ((Py_ssize_t)p->data[at] << 8) | p->data[at + 1];
    return 0;
}

static int u32(const Page *p, Py_ssize_t at, long long *out) {
    if (at < 0 || at + 4 > p->size) return bad();
    *out = ((long long)p->data[at] << 24) | ((long long)p->data[at + 1] << 16) |
           ((long long)p->data[at + 2] << 8) | p->data[at + 3];
    return 0;
}

/* SQLite's varint at *at: its value, *at moved past it */
static int varint(const Page *p, Py_ssize_t *at, long long *out) {
    unsigned long long v = 0;
    for (int i = 0; i < 9; i++) {
        if (*at + i >= p->size) return bad();
        unsigned char c = p->data[*at + i];
        if (i == 8) {
            v = (v << 8) | c;
            *at += 9;
            *out = (long long)v;
            return 0;
        }
        v = (v << 7) | (c & 0x7F);
        if (c < 0x80) {
            *at += i + 1;
            *out = (long long)v;
            return 0;
        }
    }
    return bad(); /* unreachable */
}

static int open_page(PyObject *page, Py_ssize_t at, Page *p) {
    p->data = (const unsigned char *)PyBytes_AS_STRING(page);
    p->size = PyBytes_GET_SIZE(page);
    p->at = at;
    if (p->at < 0 || p->at + 8 > p->size) return bad();
    p->kind = p->data[p->at];
    return u16(p, p->at + 3, &p->cells);
}

/* the offset of cell n */
static int cell(const Page *p, Py_ssize_t n, Py_ssize_t *out) {
    int interior = p->kind == TABLE_INTERIOR || p->kind == INDEX_INTERIOR;
    if (u16(p, p->at + (interior ? 12 : 8) + 2 * n, out) < 0) return -1;
    if (*out >= p->size) return bad();
    return 0;
}

/* child n of an interior page (n == cells: the right-most) */
static int child(const Page *p, Py_ssize_t n, long long *out) {
    if (n == p->cells) return u32(p, p->at + 8, out);
    Py_ssize_t at;
    if (cell(p, n, &at) < 0) return -1;
    return u32(p, at, out);
}

static int table_key(const Page *p, Py_ssize_t n, long long *out) {
    Py_ssize_t at;
    if (cell(p, n, &at) < 0) return -1;
    at += 4;
    return varint(p, &at, out);
}

/* the first column of cell n of an index interior page: its bytes (the local part) */
static int index_key(const Page *p, Py_ssize_t n, const unsigned char **key, Py_ssize_t *len) {
    Py_ssize_t at;
    long long skip, header, type;
    if (cell(p, n, &at) < 0) return -1;
    at += 4;
    if (varint(p, &at, &skip) < 0) return -1; /* the payload's size */
    Py_ssize_t record = at;
    if (varint(p, &at, &header) < 0 || varint(p, &at, &type) < 0) return -1;
    *key = p->data;
    *len = 0;
    if (type < 12) return 0;
    Py_ssize_t start = record + (Py_ssize_t)header;
    if (header < 0 || start > p->size) return bad();
    Py_ssize_t want = (Py_ssize_t)((type - 12) / 2);
    *key = p->data + start;
    *len = start + want > p->size ? p->size - start : want;
    return 0;
}

static int compare(const unsigned char *a, Py_ssize_t alen, const char *b, Py_ssize_t blen) {
    int c = memcmp(a, b, (size_t)(alen < blen ? alen : blen));
    return c ? c : (alen < blen ? -1 : alen > blen);
}

/* the first cell whose key is at least the rowid (a table interior page) */
static int first_rowid(const Page *p, long long rowid, Py_ssize_t *out) {
    Py_ssize_t low = 0, high = p->cells;
    while (low < high) {
        Py_ssize_t mid = (low + high) / 2;
        long long key;
        if (table_key(p, mid, &key) < 0) return -1;
        if (key < rowid) low = mid + 1;
        else high = mid;
    }
    *out = low;
    return 0;
}

static int first_key(const Page *p, const char *want, Py_ssize_t wlen, Py_ssize_t *out) {
    Py_ssize_t low = 0, high = p->cells;
    while (low < high) {
        Py_ssize_t mid = (low + high) / 2;
        const unsigned char *key;
        Py_ssize_t len;
        if (index_key(p, mid, &key, &len) < 0) return -1;
        if (compare(key, len, want, wlen) < 0) low = mid + 1;
        else high = mid;
    }
    *out = low;
    return 0;
}

static int add(PyObject *out, long long kid, PyObject *target) {
    PyObject *pair = Py_BuildValue("(LO)", kid, target);
    if (pair == NULL) return -1;
    int r = PyList_Append(out, pair);
    Py_DECREF(pair);
    return r;
}

/* route(page, at, targets) -> [(child, target)]: for each target (a (low, high) rowid span
 * of a table interior page, a key of an index interior page), the children holding it */
static PyObject *route(PyObject *self, PyObject *args) {
    Page p;
    PyObject *page, *targets;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "SnO!", &page, &at, &PyList_Type, &targets)
        || open_page(page, at, &p) < 0) return NULL;
    if (p.kind != TABLE_INTERIOR && p.kind != INDEX_INTERIOR) return bad(), NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(targets); t++) {
        PyObject *target = PyList_GET_ITEM(targets, t);
        Py_ssize_t n;
        long long kid;
        if (p.kind == INDEX_INTERIOR) {
            char *want;
            Py_ssize_t wlen;
            if (PyBytes_AsStringAndSize(target, &want, &wlen) < 0) goto fail;
            if (first_key(&p, want, wlen, &n) < 0 || child(&p, n, &kid) < 0
                || add(out, kid, target) < 0) goto fail;
            continue;
        }
        long long low, high, key = 0;
        if (!PyArg_ParseTuple(target, "LL", &low, &high)) goto fail;
        if (first_rowid(&p, low, &n) < 0) goto fail;
        for (;;) { /* child n holds keys up to key(n); the last, the rest */
            if (child(&p, n, &kid) < 0 || add(out, kid, target) < 0) goto fail;
            if (n >= p.cells) break;
            if (table_key(&p, n, &key) < 0) goto fail;
            if (key >= high) break;
            n++;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* children(page, at) -> every child of an interior page, the right-most last */
static PyObject *children(PyObject *self, PyObject *args) {
    Page p;
    PyObject *page;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "Sn", &page, &at) || open_page(page, at, &p) < 0) return NULL;
    if (p.kind != TABLE_INTERIOR && p.kind != INDEX_INTERIOR) return bad(), NULL;
    PyObject *out = PyList_New(p.cells + 1);
    if (out == NULL) return NULL;
    for (Py_ssize_t n = 0; n <= p.cells; n++) {
        long long kid;
        PyObject *number;
        if (child(&p, n, &kid) < 0 || (number = PyLong_FromLongLong(kid)) == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, n, number);
    }
    return out;
}

/* the rowid, payload size and payload start of cell n of a table leaf */
static int leaf_cell(const Page *p, Py_ssize_t n, long long *rowid, long long *size,
                     Py_ssize_t *body) {
    Py_ssize_t at;
    if (cell(p, n, &at) < 0 || varint(p, &at, size) < 0 || varint(p, &at, rowid) < 0)
        return -1;
    *body = at;
    return 0;
}

/* overflow(page, at, usable, rowids) -> the first overflow page of each row of a table leaf
 * whose rowid is in rowids (sorted) and whose payload is longer than the page holds */
static PyObject *overflow(PyObject *self, PyObject *args) {
    Page p;
    PyObject *page, *rowids;
    Py_ssize_t at, usable;
    if (!PyArg_ParseTuple(args, "SnnO!", &page, &at, &usable, &PyList_Type, &rowids)
        || open_page(page, at, &p) < 0) return NULL;
    if (usable < 480) return bad(), NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL || p.kind != TABLE_LEAF || p.cells == 0) return out;
    long long most = usable - 35, least = (usable - 12) * 32 / 255 - 23;
    long long first, last, size;
    Py_ssize_t body, low = 0;
    if (leaf_cell(&p, 0, &first, &size, &body) < 0
        || leaf_cell(&p, p.cells - 1, &last, &size, &body) < 0) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rowids); i++) {
        long long wanted = PyLong_AsLongLong(PyList_GET_ITEM(rowids, i)), rowid;
        if (wanted == -1 && PyErr_Occurred()) goto fail;
        if (wanted < first) continue;
        if (wanted > last) break;
        Py_ssize_t high = p.cells;
        while (low < high) { /* the first cell at or after the wanted rowid */
            Py_ssize_t mid = (low + high) / 2;
            if (leaf_cell(&p, mid, &rowid, &size, &body) < 0) goto fail;
            if (rowid < wanted) low = mid + 1;
            else high = mid;
        }
        if (low >= p.cells) break;
        if (leaf_cell(&p, low, &rowid, &size, &body) < 0) goto fail;
        if (rowid != wanted || size <= most) continue;
        long long local = least + (size - least) % (usable - 4);
        if (local > most) local = least;
        long long page;
        PyObject *number;
        if (u32(&p, body + (Py_ssize_t)local, &page) < 0) goto fail;
        if ((number = PyLong_FromLongLong(page)) == NULL) goto fail;
        int r = PyList_Append(out, number);
        Py_DECREF(number);
        if (r < 0) goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"route", route, METH_VARARGS,
     "route(page, at, targets) -> [(child, target)] of an interior page"},
    {"children", children, METH_VARARGS, "children(page, at) -> every child of an interior page"},
    {"overflow", overflow, METH_VARARGS,
     "overflow(page, at, usable, rowids) -> the first overflow pages of those rows of a leaf"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "refold._btree",
    "SQLite b-tree pages read for a cold search's read-ahead (see readahead.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__btree(void) { return PyModule_Create(&module); }
