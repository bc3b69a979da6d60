/* Passes over request bodies and messages that the proxy makes on every turn, at C speed:
 *
 *   deeper_than(data, limit) -> bool
 *       whether the JSON text ``data`` (already parsed, so valid JSON) nests arrays and objects
 *       more than ``limit`` levels deep: the brackets outside strings are counted, a string is
 *       skipped with memchr to its closing quote. The same answer as a walk of the parsed
 *       value (server/edges.check_depth), without visiting its ~100k nodes.
 *
 *   same(a, b) -> bool
 *       whether two decoded JSON values are the same value *exactly*: the same types at every
 *       level (1, 1.0 and True differ, as in their repr), the same keys in the same order, the
 *       same strings and numbers. ``==`` is not enough for that ({"a": 1} == {"a": True}) and
 *       ``repr(a) == repr(b)`` is exact but builds both texts. Anything but dict, list, str,
 *       int, float, bool and None compares as different (the caller then does the work anew).
 *
 *   prefix(a, b) -> int
 *       how many leading items of two lists are the same value (as ``same``).
 *
 *   copy(fallback, value)
 *       a JSON value copied (messages/model.copy_json): dicts and lists all the way down, str,
 *       int, float, bool and None shared, anything else ``fallback(it)`` (copy.deepcopy).
 *
 *   digit_run(data, length) -> bool
 *       whether ``data`` holds ``length`` or more ASCII digits in a row (fastjson.loads: a
 *       number orjson would read otherwise than json), looking at every length-th byte.
 *
 *   unusual(value) -> bool
 *       whether a value holds a non-finite float (orjson writes it as null, json as NaN), a
 *       key that is not a str, or a value of a type JSON decoding does not build.
 *
 *   anthropic_blocks(messages, marker) -> (list[int], bool)
 *       an Anthropic request's messages with a block holding ``marker`` (cache_control), and
 *       whether a text block (in a content list or a tool_result's) lacks a str "text".
 *
 * All are optional: refold/jsonscan.py falls back to Python when this module is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *deeper_than(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "y*n", &view, &limit)) {
        return NULL;
    }
    const char *p = (const char *)view.buf;
    const char *end = p + view.len;
    Py_ssize_t depth = 0;
    int deeper = 0;
    while (p < end) {
        char c = *p++;
        if (c == '"') {
            /* to the closing quote: one that is not escaped (an even run of backslashes) */
            for (;;) {
                const char *quote = memchr(p, '"', (size_t)(end - p));
                if (quote == NULL) {
                    p = end;
                    break;
                }
                const char *back = quote;
                while (back > p && back[-1] == '\\') {
                    back--;
                }
                p = quote + 1;
                if (((quote - back) & 1) == 0) {
                    break;
                }
            }
        } else if (c == '[' || c == '{') {
            if (++depth > limit) {
                deeper = 1;
                break;
            }
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(deeper);
}

static int same_value(PyObject *a, PyObject *b);

static int same_dict(PyObject *a, PyObject *b) {
    if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b)) {
        return 0;
    }
    Py_ssize_t i = 0, j = 0;
    PyObject *ka, *va, *kb, *vb;
    while (PyDict_Next(a, &i, &ka, &va)) {
        if (!PyDict_Next(b, &j, &kb, &vb)) {
            return 0;
        }
        int same = same_value(ka, kb);
        if (same <= 0) {
            return same;
        }
        same = same_value(va, vb);
        if (same <= 0) {
            return same;
        }
    }
    return 1;
}

static int same_list(PyObject *a, PyObject *b) {
    Py_ssize_t n = PyList_GET_SIZE(a);
    if (n != PyList_GET_SIZE(b)) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* the lists may not change under us: no Python code runs while comparing */
        int same = same_value(PyList_GET_ITEM(a, i), PyList_GET_ITEM(b, i));
        if (same <= 0) {
            return same;
        }
    }
    return 1;
}

/* 1: the same value; 0: not; -1: an error is set (recursion too deep) */
static int same_value(PyObject *a, PyObject *b) {
    if (a == b) {
        return 1;
    }
    PyTypeObject *type = Py_TYPE(a);
    if (type != Py_TYPE(b)) {
        return 0;
    }
    if (type == &PyUnicode_Type) {
        return PyUnicode_Compare(a, b) == 0;  /* (two str never fail to compare) */
    }
    if (type == &PyDict_Type || type == &PyList_Type) {
        if (Py_EnterRecursiveCall(" comparing JSON values")) {
            return -1;
        }
        int same = type == &PyDict_Type ? same_dict(a, b) : same_list(a, b);
        Py_LeaveRecursiveCall();
        return same;
    }
    if (type == &PyLong_Type) {
        return PyObject_RichCompareBool(a, b, Py_EQ);
    }
    if (type == &PyFloat_Type) {
        /* exactly the same number: 0.0 and -0.0 print differently; a NaN is never the same */
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        return memcmp(&x, &y, sizeof x) == 0 && x == x;
    }
    /* True, False and None are singletons (a == b above); anything else is not JSON */
    return 0;
}

static PyObject *same(PyObject *self, PyObject *args) {
    PyObject *a, *b;
    if (!PyArg_ParseTuple(args, "OO", &a, &b)) {
        return NULL;
    }
    int result = same_value(a, b);
    if (result < 0) {
        return NULL;
    }
    return PyBool_FromLong(result);
}

/* whether ``data`` holds a run of ``length`` or more ASCII digits (anywhere: in a string too).
 * Any such run covers one of the positions length-1, 2*length-1, ...: only those are looked at
 * until one is a digit, and then its run is measured both ways. */
static PyObject *digit_run(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "y*n", &view, &length)) {
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len;
    int found = 0;
    if (length <= 1) {
        for (Py_ssize_t i = 0; i < n && !found; i++) {
            found = data[i] >= '0' && data[i] <= '9';
        }
        found = found || length <= 0;
    } else {
        for (Py_ssize_t at = length - 1; at < n; at += length) {
            if (data[at] < '0' || data[at] > '9') {
                continue;
            }
            Py_ssize_t lo = at, hi = at + 1;
            while (lo > 0 && data[lo - 1] >= '0' && data[lo - 1] <= '9') {
                lo--;
            }
            while (hi < n && data[hi] >= '0' && data[hi] <= '9') {
                hi++;
            }
            if (hi - lo >= length) {
                found = 1;
                break;
            }
            /* (the next position looked at is past this run: at + length > hi - 1) */
        }
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(found);
}

/* 1 when ``value`` holds a float that is not finite, or a value of a type JSON decoding does
 * not build (not dict, list, str, int, float, bool, None); 0 when not; -1 on an error */
static int unusual(PyObject *value) {
    PyTypeObject *type = Py_TYPE(value);
    if (type == &PyUnicode_Type || type == &PyLong_Type || type == &PyBool_Type
            || value == Py_None) {
        return 0;
    }
    if (type == &PyFloat_Type) {
        double x = PyFloat_AS_DOUBLE(value);
        return !(x - x == 0.0);  /* NaN and infinities: x - x is NaN */
    }
    if (type != &PyDict_Type && type != &PyList_Type) {
        return 1;
    }
    if (Py_EnterRecursiveCall(" walking a JSON value")) {
        return -1;
    }
    int found = 0;
    if (type == &PyDict_Type) {
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (!found && PyDict_Next(value, &pos, &key, &item)) {
            found = Py_TYPE(key) != &PyUnicode_Type ? 1 : unusual(item);
        }
    } else {
        for (Py_ssize_t i = 0; !found && i < PyList_GET_SIZE(value); i++) {
            found = unusual(PyList_GET_ITEM(value, i));
        }
    }
    Py_LeaveRecursiveCall();
    return found;
}

static PyObject *unusual_value(PyObject *self, PyObject *value) {
    int found = unusual(value);
    if (found < 0) {
        return NULL;
    }
    return PyBool_FromLong(found);
}

/* 1 when ``blocks`` (a list) holds a dict {"type": "text", ...} whose "text" is missing or not a
 * str; 0 otherwise */
static int has_bad_text(PyObject *blocks, PyObject *type_key, PyObject *text_key) {
    if (!PyList_Check(blocks)) {
        return 0;
    }
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(blocks); j++) {
        PyObject *block = PyList_GET_ITEM(blocks, j);
        if (!PyDict_Check(block)) {
            continue;
        }
        PyObject *kind = PyDict_GetItemWithError(block, type_key);
        if (kind == NULL) {
            if (PyErr_Occurred()) {
                return -1;
            }
            continue;
        }
        int is_text = PyUnicode_Check(kind) && PyUnicode_Compare(kind, text_key) == 0  /* "text" */;
        if (!is_text) {
            continue;
        }
        PyObject *text = PyDict_GetItemWithError(block, text_key);
        if (text == NULL && PyErr_Occurred()) {
            return -1;
        }
        if (text == NULL || !PyUnicode_Check(text)) {
            return 1;
        }
    }
    return 0;
}

/* anthropic_blocks(messages, marker) -> (indices, bad_text): which messages (dicts) have a
 * content list holding a block (a dict) with the key ``marker``; and whether any content list,
 * or a tool_result block's content list, holds a text block without a str "text" (the caller
 * then finds and words the first one). Everything else is left to the caller's checks. */
static PyObject *anthropic_blocks(PyObject *self, PyObject *args) {
    PyObject *messages, *marker;
    if (!PyArg_ParseTuple(args, "O!U", &PyList_Type, &messages, &marker)) {
        return NULL;
    }
    PyObject *content_key = PyUnicode_InternFromString("content");
    PyObject *type_key = PyUnicode_InternFromString("type");
    PyObject *text_key = PyUnicode_InternFromString("text");
    PyObject *result_kind = PyUnicode_InternFromString("tool_result");
    PyObject *indices = PyList_New(0);
    int bad = 0;
    if (content_key == NULL || type_key == NULL || text_key == NULL || result_kind == NULL
            || indices == NULL) {
        goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        if (!PyDict_Check(message)) {
            continue;
        }
        PyObject *content = PyDict_GetItemWithError(message, content_key);
        if (content == NULL) {
            if (PyErr_Occurred()) {
                goto fail;
            }
            continue;
        }
        if (!PyList_Check(content)) {
            continue;
        }
        if (!bad) {
            int found = has_bad_text(content, type_key, text_key);
            if (found < 0) {
                goto fail;
            }
            bad = found;
        }
        int marked = 0;
        /* held while looked at: a key's __eq__ (not JSON's, but possible) could run code */
        Py_INCREF(content);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(content); j++) {
            PyObject *block = PyList_GET_ITEM(content, j);
            if (!PyDict_Check(block)) {
                continue;
            }
            Py_INCREF(block);
            int failed = 0;
            if (!marked) {
                int has = PyDict_Contains(block, marker);
                failed = has < 0;
                marked = has > 0;
            }
            if (!failed && !bad) {
                PyObject *kind = PyDict_GetItemWithError(block, type_key);
                failed = kind == NULL && PyErr_Occurred() != NULL;
                if (kind != NULL && PyUnicode_Check(kind)
                        && PyUnicode_Compare(kind, result_kind) == 0) {
                    PyObject *inner = PyDict_GetItemWithError(block, content_key);
                    failed = inner == NULL && PyErr_Occurred() != NULL;
                    if (inner != NULL) {
                        int found = has_bad_text(inner, type_key, text_key);
                        failed = found < 0;
                        bad = found > 0;
                    }
                }
            }
            Py_DECREF(block);
            if (failed) {
                Py_DECREF(content);
                goto fail;
            }
        }
        Py_DECREF(content);
        if (marked) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(indices, index) < 0) {
                Py_XDECREF(index);
                goto fail;
            }
            Py_DECREF(index);
        }
    }
    Py_DECREF(content_key);
    Py_DECREF(type_key);
    Py_DECREF(text_key);
    Py_DECREF(result_kind);
    PyObject *out = Py_BuildValue("(NO)", indices, bad ? Py_True : Py_False);
    return out;
fail:
    Py_XDECREF(content_key);
    Py_XDECREF(type_key);
    Py_XDECREF(text_key);
    Py_XDECREF(result_kind);
    Py_XDECREF(indices);
    return NULL;
}

/* how many leading items of two lists are the same value (same_value) */
static PyObject *prefix(PyObject *self, PyObject *args) {
    PyObject *a, *b;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &a, &PyList_Type, &b)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(a) < PyList_GET_SIZE(b) ? PyList_GET_SIZE(a)
                                                           : PyList_GET_SIZE(b);
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        int same = same_value(PyList_GET_ITEM(a, i), PyList_GET_ITEM(b, i));
        if (same < 0) {
            return NULL;
        }
        if (!same) {
            break;
        }
    }
    return PyLong_FromSsize_t(i);
}

/* A JSON value copied: dicts and lists all the way down, str, int, float, bool and None
 * shared (immutable), anything else handed to ``fallback`` (copy.deepcopy). */
static PyObject *copy_value(PyObject *value, PyObject *fallback);

static PyObject *copy_dict(PyObject *value, PyObject *fallback) {
    PyObject *out = PyDict_New();
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *item;
    Py_ssize_t size = PyDict_GET_SIZE(value);
    while (PyDict_Next(value, &pos, &key, &item)) {
        Py_INCREF(key);
        Py_INCREF(item);
        PyObject *copied = copy_value(item, fallback);
        int failed = copied == NULL || PyDict_SetItem(out, key, copied) < 0;
        Py_XDECREF(copied);
        Py_DECREF(key);
        Py_DECREF(item);
        if (failed) {
            Py_DECREF(out);
            return NULL;
        }
        if (PyDict_GET_SIZE(value) != size) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during copy");
            return NULL;
        }
    }
    return out;
}

static PyObject *copy_list(PyObject *value, PyObject *fallback) {
    Py_ssize_t n = PyList_GET_SIZE(value);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_SIZE(value) != n) {
            Py_DECREF(out);  /* (the slots not filled yet are NULL: list_dealloc skips them) */
            PyErr_SetString(PyExc_RuntimeError, "list changed size during copy");
            return NULL;
        }
        PyObject *item = PyList_GET_ITEM(value, i);
        Py_INCREF(item);
        PyObject *copied = copy_value(item, fallback);
        Py_DECREF(item);
        if (copied == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, copied);
    }
    return out;
}

static PyObject *copy_value(PyObject *value, PyObject *fallback) {
    PyTypeObject *type = Py_TYPE(value);
    if (type == &PyUnicode_Type || type == &PyLong_Type || type == &PyFloat_Type
            || type == &PyBool_Type || value == Py_None) {
        Py_INCREF(value);
        return value;
    }
    if (type == &PyDict_Type || type == &PyList_Type) {
        if (Py_EnterRecursiveCall(" copying a JSON value")) {
            return NULL;
        }
        PyObject *out = type == &PyDict_Type ? copy_dict(value, fallback)
                                             : copy_list(value, fallback);
        Py_LeaveRecursiveCall();
        return out;
    }
    return PyObject_CallOneArg(fallback, value);
}

static PyObject *copy(PyObject *self, PyObject *args) {
    PyObject *fallback, *value;
    if (!PyArg_ParseTuple(args, "OO", &fallback, &value)) {
        return NULL;
    }
    return copy_value(value, fallback);
}

static PyMethodDef methods[] = {
    {"deeper_than", deeper_than, METH_VARARGS,
     "deeper_than(data, limit) -> whether JSON text data nests more than limit levels"},
    {"same", same, METH_VARARGS,
     "same(a, b) -> whether two decoded JSON values are exactly the same (types, key order)"},
    {"digit_run", digit_run, METH_VARARGS,
     "digit_run(data, length) -> whether data holds length or more ASCII digits in a row"},
    {"unusual", unusual_value, METH_O,
     "unusual(value) -> whether value holds a non-finite float, a non-str key or a value of "
     "a type JSON decoding does not build"},
    {"anthropic_blocks", anthropic_blocks, METH_VARARGS,
     "anthropic_blocks(messages, marker) -> (indices of the messages with a block holding "
     "the key marker, whether a text block lacks a str text)"},
    {"prefix", prefix, METH_VARARGS,
     "prefix(a, b) -> how many leading items of lists a and b are the same value (same)"},
    {"copy", copy, METH_VARARGS,
     "copy(fallback, value) -> value copied: dicts and lists all the way down, str, int, "
     "float, bool and None shared, anything else fallback(it)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "refold._jsonscan",
    "A request body's nesting depth and exact JSON equality (see refold/jsonscan.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__jsonscan(void) { return PyModule_Create(&module); }
