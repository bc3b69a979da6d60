/* refold._scorer: the word impact index's bm25 scoring in C (optional; plainscore.py and
 * NumPy answer where it is not built).
 *
 * A question of words is scored over every message holding one of its terms: each term's
 * postings (uint16 offsets from a base, term frequencies of one or two bytes, lengths of two
 * or four, little-endian, as wordindex.py packs them; then the per-process tail's (id, count)
 * pairs) are weighed with FTS5's bm25 expression, term by term in fts5_aux.c's order of
 * operations, and summed per message in the order of the terms, as numpy.bincount and
 * plainscore.Words add them: every float is the one the Python paths compute (built with
 * -ffp-contract=off, so no fused multiply-add changes a rounding).
 *
 * merge()  -> (count, ids, totals, masks): the messages holding any term, in id order, as
 *             packed int64 / float64 / uint32 bytes (a mask's bit n: term n holds it); a
 *             question's CJK pieces may come along (rows as merge_rows takes them), their
 *             sum added to that of its words
 * merge_rows() -> the same for CJK pieces: each a list of (id, chars) rows, every row one
 *             occurrence weighed as natural.cjk_best weighs it
 * phrase_rows() -> a phrase's matched rows: the least frequency of its tokens in each, and
 *             each one's length (None: the index lacks one)
 * picked() -> the messages of a list (a session's rows) among them, with their totals
 * kth()    -> the k-th largest score, a message holding every term boosted (-inf if fewer)
 * chosen() -> (ids, totals, masks, uppers) lists of the messages scoring at least a cut
 *             whose upper bound (the largest boost they may get) reaches a bar
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TERMS 32

typedef struct {
    int64_t *ids;
    double *weights;
    double *tfs, *lens;  /* a phrase's token: its frequencies and lengths (else NULL) */
    Py_ssize_t count;
} Term;

static void free_terms(Term *terms, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyMem_Free(terms[i].ids);
        PyMem_Free(terms[i].weights);
        PyMem_Free(terms[i].tfs);
        PyMem_Free(terms[i].lens);
    }
}

static inline double weigh(double idf, double tf, double dl, double avgdl, double k1,
                           double b) {
    /* wordindex.term_weights: idf * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * dl / avgdl))) */
    return idf * ((tf * (k1 + 1.0)) / (tf + k1 * (1.0 - b + b * dl / avgdl)));
}

static int by_id(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sort a term's postings by id when they are not in order already (they are, as stored). */
static int sort_term(Term *t) {
    for (Py_ssize_t i = 1; i < t->count; i++) {
        if (t->ids[i] <= t->ids[i - 1]) {
            goto unsorted;
        }
    }
    return 0;
unsorted:;
    /* pairs of (id, weight bits) sorted by id; a duplicate id keeps its first weight */
    int64_t *pairs = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)(t->count ? t->count : 1));
    if (pairs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->count; i++) {
        pairs[2 * i] = t->ids[i];
        memcpy(&pairs[2 * i + 1], &t->weights[i], sizeof(double));
    }
    /* stable enough: qsort on (id) of 16-byte records; equal ids are not expected */
    qsort(pairs, (size_t)t->count, 2 * sizeof(int64_t), by_id);
    Py_ssize_t out = 0;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        if (out > 0 && t->ids[out - 1] == pairs[2 * i]) {
            continue;
        }
        t->ids[out] = pairs[2 * i];
        memcpy(&t->weights[out], &pairs[2 * i + 1], sizeof(double));
        out++;
    }
    t->count = out;
    PyMem_Free(pairs);
    return 0;
}

static int alloc_term(Term *t, Py_ssize_t total, int raw) {
    size_t size = (size_t)(total ? total : 1);
    t->ids = PyMem_Malloc(sizeof(int64_t) * size);
    t->weights = PyMem_Malloc(sizeof(double) * size);
    t->tfs = raw ? PyMem_Malloc(sizeof(double) * size) : NULL;
    t->lens = raw ? PyMem_Malloc(sizeof(double) * size) : NULL;
    t->count = 0;
    if (t->ids == NULL || t->weights == NULL || (raw && (t->tfs == NULL || t->lens == NULL))) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int read_bytes(PyObject *obj, const unsigned char **data, Py_ssize_t *size) {
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "postings blobs must be bytes");
        return -1;
    }
    *data = (const unsigned char *)PyBytes_AS_STRING(obj);
    *size = PyBytes_GET_SIZE(obj);
    return 0;
}

static void put(Term *t, int64_t id, double tf, double dl, double idf, double avgdl, double k1,
                double b) {
    t->ids[t->count] = id;
    if (t->tfs != NULL) {  /* a phrase's token: its counts and lengths, no weight */
        t->tfs[t->count] = tf;
        t->lens[t->count] = dl;
    } else {
        t->weights[t->count] = weigh(idf, tf, dl, avgdl, k1, b);
    }
    t->count++;
}

/* One term: parts is a list of (base, ids, tfs, lens), tail a list of (id, count). With raw,
 * its frequencies and lengths are kept too, and it is left in stored order (not sorted). */
static int load_term(Term *t, PyObject *parts, PyObject *tail, PyObject *tail_lengths,
                     double idf, double avgdl, double k1, double b, int raw) {
    if (!PyList_Check(parts) || !PyList_Check(tail)) {
        PyErr_SetString(PyExc_TypeError, "a term is (list of parts, list of tail pairs)");
        return -1;
    }
    Py_ssize_t total = PyList_GET_SIZE(tail);
    for (Py_ssize_t p = 0; p < PyList_GET_SIZE(parts); p++) {
        PyObject *part = PyList_GET_ITEM(parts, p);
        if (!PyTuple_Check(part) || PyTuple_GET_SIZE(part) != 4 ||
            !PyBytes_Check(PyTuple_GET_ITEM(part, 1))) {
            PyErr_SetString(PyExc_TypeError, "a part is (base, ids, tfs, lens)");
            return -1;
        }
        total += PyBytes_GET_SIZE(PyTuple_GET_ITEM(part, 1)) / 2;
    }
    if (alloc_term(t, total, raw) < 0) {
        return -1;
    }
    for (Py_ssize_t p = 0; p < PyList_GET_SIZE(parts); p++) {
        PyObject *part = PyList_GET_ITEM(parts, p);
        long long base = PyLong_AsLongLong(PyTuple_GET_ITEM(part, 0));
        if (base == -1 && PyErr_Occurred()) {
            return -1;
        }
        const unsigned char *ids, *tfs, *lens;
        Py_ssize_t ids_size, tfs_size, lens_size;
        if (read_bytes(PyTuple_GET_ITEM(part, 1), &ids, &ids_size) < 0 ||
            read_bytes(PyTuple_GET_ITEM(part, 2), &tfs, &tfs_size) < 0 ||
            read_bytes(PyTuple_GET_ITEM(part, 3), &lens, &lens_size) < 0) {
            return -1;
        }
        Py_ssize_t count = ids_size / 2;
        /* wordindex._width: the narrow width when the blob is exactly that long */
        int tf_width = tfs_size == count ? 1 : 2;
        int len_width = lens_size == 2 * count ? 2 : 4;
        if (tfs_size < count * tf_width || lens_size < count * len_width) {
            PyErr_SetString(PyExc_ValueError, "a postings row's blobs disagree in length");
            return -1;
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t id = (int64_t)base + (int64_t)(ids[2 * i] | (ids[2 * i + 1] << 8));
            double tf = tf_width == 1 ? (double)tfs[i]
                                      : (double)(tfs[2 * i] | (tfs[2 * i + 1] << 8));
            double dl;
            if (len_width == 2) {
                dl = (double)(lens[2 * i] | (lens[2 * i + 1] << 8));
            } else {
                dl = (double)((uint32_t)lens[4 * i] | ((uint32_t)lens[4 * i + 1] << 8) |
                              ((uint32_t)lens[4 * i + 2] << 16) |
                              ((uint32_t)lens[4 * i + 3] << 24));
            }
            put(t, id, tf, dl, idf, avgdl, k1, b);
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tail); i++) {
        PyObject *pair = PyList_GET_ITEM(tail, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a tail posting is (id, count)");
            return -1;
        }
        PyObject *doc = PyTuple_GET_ITEM(pair, 0);
        long long id = PyLong_AsLongLong(doc);
        if (id == -1 && PyErr_Occurred()) {
            return -1;
        }
        double tf = PyFloat_AsDouble(PyTuple_GET_ITEM(pair, 1));
        if (tf == -1.0 && PyErr_Occurred()) {
            return -1;
        }
        double dl = 0.0;
        PyObject *length = PyDict_GetItemWithError(tail_lengths, doc);
        if (length != NULL) {
            dl = PyFloat_AsDouble(length);
            if (dl == -1.0 && PyErr_Occurred()) {
                return -1;
            }
        } else if (PyErr_Occurred()) {
            return -1;
        }
        put(t, (int64_t)id, tf, dl, idf, avgdl, k1, b);
    }
    return raw ? 0 : sort_term(t);
}

/* The messages holding any term, in id order: (count, ids, totals, masks) packed; frees
 * the terms. A message's total is the sum of its terms' weights in term order; with split
 * under n, the terms from split on (a question's CJK pieces) are summed apart and their sum
 * added to the others' (natural.py adds the CJK scores to the words' so). */
static PyObject *union_terms(Term *loaded, Py_ssize_t n, Py_ssize_t split) {
    Py_ssize_t most = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        most += loaded[i].count;
    }
    PyObject *ids_out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int64_t) * most);
    PyObject *totals_out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(double) * most);
    PyObject *masks_out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(uint32_t) * most);
    if (ids_out == NULL || totals_out == NULL || masks_out == NULL) {
        Py_XDECREF(ids_out);
        Py_XDECREF(totals_out);
        Py_XDECREF(masks_out);
        free_terms(loaded, n);
        return NULL;
    }
    int64_t *ids = (int64_t *)PyBytes_AS_STRING(ids_out);
    double *totals = (double *)PyBytes_AS_STRING(totals_out);
    uint32_t *masks = (uint32_t *)PyBytes_AS_STRING(masks_out);
    Py_ssize_t at[MAX_TERMS] = {0};
    Py_ssize_t count = 0;
    if (n == 1) {  /* one term (a one-word query): its postings as they are */
        count = loaded[0].count;
        memcpy(ids, loaded[0].ids, sizeof(int64_t) * (size_t)count);
        memcpy(totals, loaded[0].weights, sizeof(double) * (size_t)count);
        for (Py_ssize_t i = 0; i < count; i++) {
            masks[i] = 1;
        }
        at[0] = count;
    }
    for (;;) {
        /* the least id at the head of any term (a term or two of thousands: a linear scan) */
        int64_t least = INT64_MAX;
        int any = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (at[i] < loaded[i].count && loaded[i].ids[at[i]] < least) {
                least = loaded[i].ids[at[i]];
                any = 1;
            }
        }
        if (!any) {
            break;
        }
        double sums[2] = {0.0, 0.0};
        int held[2] = {0, 0};
        uint32_t mask = 0;
        for (Py_ssize_t i = 0; i < n; i++) {  /* summed in the order of the terms */
            if (at[i] < loaded[i].count && loaded[i].ids[at[i]] == least) {
                int group = i >= split;
                double weight = loaded[i].weights[at[i]];
                sums[group] = held[group] ? sums[group] + weight : weight;
                held[group] = 1;
                mask |= (uint32_t)1 << i;
                at[i]++;
            }
        }
        ids[count] = least;
        totals[count] = held[0] && held[1] ? sums[0] + sums[1] : sums[held[1]];
        masks[count] = mask;
        count++;
    }
    free_terms(loaded, n);
    if (_PyBytes_Resize(&ids_out, (Py_ssize_t)sizeof(int64_t) * count) < 0 ||
        _PyBytes_Resize(&totals_out, (Py_ssize_t)sizeof(double) * count) < 0 ||
        _PyBytes_Resize(&masks_out, (Py_ssize_t)sizeof(uint32_t) * count) < 0) {
        Py_XDECREF(ids_out);
        Py_XDECREF(totals_out);
        Py_XDECREF(masks_out);
        return NULL;
    }
    return Py_BuildValue("(nNNN)", count, ids_out, totals_out, masks_out);
}

static int load_rows(Term *t, PyObject *rows, double idf, double average, double k1, double b);

static PyObject *merge(PyObject *self, PyObject *args) {
    PyObject *terms, *tail_lengths, *idfs, *pieces = NULL, *piece_idfs = NULL;
    double avgdl, k1, b, average = 1.0, ck1 = 1.2, cb = 0.75;
    if (!PyArg_ParseTuple(args, "O!O!O!ddd|O!O!ddd", &PyList_Type, &terms, &PyDict_Type,
                          &tail_lengths, &PyList_Type, &idfs, &avgdl, &k1, &b, &PyList_Type,
                          &pieces, &PyList_Type, &piece_idfs, &average, &ck1, &cb)) {
        return NULL;
    }
    Py_ssize_t split = PyList_GET_SIZE(terms);
    Py_ssize_t n = split + (pieces != NULL ? PyList_GET_SIZE(pieces) : 0);
    if (split < 1 || n > MAX_TERMS || PyList_GET_SIZE(idfs) != split ||
        (pieces != NULL && (piece_idfs == NULL ||
                            PyList_GET_SIZE(piece_idfs) != PyList_GET_SIZE(pieces)))) {
        PyErr_SetString(PyExc_ValueError, "1 to 32 terms and pieces, each with its idf");
        return NULL;
    }
    Term loaded[MAX_TERMS];
    memset(loaded, 0, sizeof(loaded));
    for (Py_ssize_t i = split; i < n; i++) {  /* CJK pieces: rows of (id, chars) */
        double idf = PyFloat_AsDouble(PyList_GET_ITEM(piece_idfs, i - split));
        if ((idf == -1.0 && PyErr_Occurred()) ||
            load_rows(&loaded[i], PyList_GET_ITEM(pieces, i - split), idf, average, ck1,
                      cb) < 0) {
            free_terms(loaded, n);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < split; i++) {
        PyObject *term = PyList_GET_ITEM(terms, i);
        double idf = PyFloat_AsDouble(PyList_GET_ITEM(idfs, i));
        if ((idf == -1.0 && PyErr_Occurred()) || !PyTuple_Check(term) ||
            PyTuple_GET_SIZE(term) != 2) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "a term is (parts, tail)");
            }
            free_terms(loaded, n);
            return NULL;
        }
        if (load_term(&loaded[i], PyTuple_GET_ITEM(term, 0), PyTuple_GET_ITEM(term, 1),
                      tail_lengths, idf, avgdl, k1, b, 0) < 0) {
            free_terms(loaded, n);
            return NULL;
        }
    }
    return union_terms(loaded, n, split);
}

/* One CJK piece: rows is a list of (id, chars), each weighed as one occurrence
 * (natural.cjk_best's NumPy expression, element for element). */
static int load_rows(Term *t, PyObject *rows, double idf, double average, double k1, double b) {
    if (!PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "a piece's rows are a list of (id, chars)");
        return -1;
    }
    Py_ssize_t total = PyList_GET_SIZE(rows);
    if (alloc_term(t, total, 0) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < total; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 2) {
            PyErr_SetString(PyExc_TypeError, "a row is (id, chars)");
            return -1;
        }
        long long id = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 0));
        if (id == -1 && PyErr_Occurred()) {
            return -1;
        }
        double chars = PyFloat_AsDouble(PyTuple_GET_ITEM(row, 1));
        if (chars == -1.0 && PyErr_Occurred()) {
            return -1;
        }
        /* norm = 1.0 - B + B * (chars / average); idf * ((K1 + 1.0) / (1.0 + K1 * norm)) */
        double norm = 1.0 - b + b * (chars / average);
        t->ids[t->count] = (int64_t)id;
        t->weights[t->count] = idf * ((k1 + 1.0) / (1.0 + k1 * norm));
        t->count++;
    }
    return sort_term(t);
}

static PyObject *merge_rows(PyObject *self, PyObject *args) {
    PyObject *pieces, *idfs;
    double average, k1, b;
    if (!PyArg_ParseTuple(args, "O!O!ddd", &PyList_Type, &pieces, &PyList_Type, &idfs,
                          &average, &k1, &b)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(pieces);
    if (n < 1 || n > MAX_TERMS || PyList_GET_SIZE(idfs) != n) {
        PyErr_SetString(PyExc_ValueError, "1 to 32 pieces, each with its idf");
        return NULL;
    }
    Term loaded[MAX_TERMS];
    memset(loaded, 0, sizeof(loaded));
    for (Py_ssize_t i = 0; i < n; i++) {
        double idf = PyFloat_AsDouble(PyList_GET_ITEM(idfs, i));
        if ((idf == -1.0 && PyErr_Occurred()) ||
            load_rows(&loaded[i], PyList_GET_ITEM(pieces, i), idf, average, k1, b) < 0) {
            free_terms(loaded, n);
            return NULL;
        }
    }
    return union_terms(loaded, n, n);
}

/* phrase_rows(matched, tokens, tail_lengths): for each id of matched (ascending: the rows
 * FTS5 matches for a phrase), the least frequency of the phrase's tokens in it and its length
 * (the first token's), as plainscore._phrase reads them from each token's postings (each a
 * (parts, tail) as merge() takes a term); None when a token's postings lack a matched id or
 * are out of order (the index and FTS5 disagree: FTS5 answers). */
static PyObject *phrase_rows(PyObject *self, PyObject *args) {
    PyObject *matched, *tokens, *tail_lengths;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &matched, &PyList_Type, &tokens,
                          &PyDict_Type, &tail_lengths)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(tokens), m = PyList_GET_SIZE(matched);
    if (n < 1 || n > MAX_TERMS) {
        PyErr_SetString(PyExc_ValueError, "1 to 32 tokens");
        return NULL;
    }
    Term loaded[MAX_TERMS];
    memset(loaded, 0, sizeof(loaded));
    PyObject *least = NULL, *lengths = NULL, *out = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *token = PyList_GET_ITEM(tokens, i);
        if (!PyTuple_Check(token) || PyTuple_GET_SIZE(token) != 2) {
            PyErr_SetString(PyExc_TypeError, "a token is (parts, tail)");
            goto done;
        }
        if (load_term(&loaded[i], PyTuple_GET_ITEM(token, 0), PyTuple_GET_ITEM(token, 1),
                      tail_lengths, 1.0, 1.0, 1.2, 0.75, 1) < 0) {
            goto done;
        }
        for (Py_ssize_t j = 1; j < loaded[i].count; j++) {
            if (loaded[i].ids[j] <= loaded[i].ids[j - 1]) {
                out = Py_NewRef(Py_None);
                goto done;
            }
        }
    }
    least = PyList_New(m);
    lengths = PyList_New(m);
    if (least == NULL || lengths == NULL) {
        goto done;
    }
    Py_ssize_t at[MAX_TERMS] = {0};
    int64_t previous = INT64_MIN;
    for (Py_ssize_t k = 0; k < m; k++) {
        long long id = PyLong_AsLongLong(PyList_GET_ITEM(matched, k));
        if (id == -1 && PyErr_Occurred()) {
            goto done;
        }
        if ((int64_t)id <= previous) {
            PyErr_SetString(PyExc_ValueError, "the matched ids must ascend");
            goto done;
        }
        previous = (int64_t)id;
        double low = 0.0, length = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {  /* each token's cursor moves forward only */
            Term *t = &loaded[i];
            while (at[i] < t->count && t->ids[at[i]] < (int64_t)id) {
                at[i]++;
            }
            if (at[i] == t->count || t->ids[at[i]] != (int64_t)id) {
                Py_CLEAR(least);
                Py_CLEAR(lengths);
                out = Py_NewRef(Py_None);
                goto done;
            }
            double tf = t->tfs[at[i]];
            low = i == 0 || tf < low ? tf : low;
            if (i == 0) {
                length = t->lens[at[i]];
            }
        }
        PyObject *low_obj = PyFloat_FromDouble(low);
        PyObject *length_obj = PyLong_FromLongLong((long long)length);
        if (low_obj == NULL || length_obj == NULL) {
            Py_XDECREF(low_obj);
            Py_XDECREF(length_obj);
            goto done;
        }
        PyList_SET_ITEM(least, k, low_obj);
        PyList_SET_ITEM(lengths, k, length_obj);
    }
    out = Py_BuildValue("(NN)", least, lengths);
    least = lengths = NULL;
done:
    Py_XDECREF(least);
    Py_XDECREF(lengths);
    free_terms(loaded, n);
    return out;
}

static int arrays(PyObject *totals_obj, PyObject *masks_obj, const double **totals,
                  const uint32_t **masks, Py_ssize_t *count) {
    if (!PyBytes_Check(totals_obj) || !PyBytes_Check(masks_obj)) {
        PyErr_SetString(PyExc_TypeError, "merge()'s bytes expected");
        return -1;
    }
    *count = PyBytes_GET_SIZE(totals_obj) / (Py_ssize_t)sizeof(double);
    if (PyBytes_GET_SIZE(masks_obj) != *count * (Py_ssize_t)sizeof(uint32_t)) {
        PyErr_SetString(PyExc_ValueError, "totals and masks differ in length");
        return -1;
    }
    *totals = (const double *)PyBytes_AS_STRING(totals_obj);
    *masks = (const uint32_t *)PyBytes_AS_STRING(masks_obj);
    return 0;
}

/* the k-th largest of values[0:count] (quickselect; values is reordered) */
static double select_kth(double *values, Py_ssize_t count, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = count - 1, want = k - 1;  /* want-th in descending order */
    while (lo < hi) {
        double pivot = values[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (values[i] > pivot) i++;
            while (values[j] < pivot) j--;
            if (i <= j) {
                double swap = values[i];
                values[i] = values[j];
                values[j] = swap;
                i++;
                j--;
            }
        }
        if (want <= j) {
            hi = j;
        } else if (want >= i) {
            lo = i;
        } else {
            return values[want];
        }
    }
    return values[want];
}

/* the k-th largest of the bounds, for a small k: one pass keeping the k largest in a
 * min-heap (most values fall under its least and cost one comparison) */
#define HEAP_K 1024
static double heap_kth(const double *totals, const uint32_t *masks, Py_ssize_t count,
                       uint32_t full, double boost, Py_ssize_t k) {
    double heap[HEAP_K];
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        double value = masks[i] == full ? totals[i] * boost : totals[i];
        if (size == k && !(value > heap[0])) {
            continue;
        }
        Py_ssize_t at;
        if (size < k) {  /* sift up */
            at = size++;
            while (at > 0 && heap[(at - 1) / 2] > value) {
                heap[at] = heap[(at - 1) / 2];
                at = (at - 1) / 2;
            }
        } else {  /* replace the least, sift down */
            at = 0;
            for (;;) {
                Py_ssize_t child = 2 * at + 1;
                if (child >= size) {
                    break;
                }
                if (child + 1 < size && heap[child + 1] < heap[child]) {
                    child++;
                }
                if (!(heap[child] < value)) {
                    break;
                }
                heap[at] = heap[child];
                at = child;
            }
        }
        heap[at] = value;
    }
    return heap[0];
}

static PyObject *kth(PyObject *self, PyObject *args) {
    PyObject *totals_obj, *masks_obj;
    unsigned long full;
    double boost;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "OOkdn", &totals_obj, &masks_obj, &full, &boost, &k)) {
        return NULL;
    }
    const double *totals;
    const uint32_t *masks;
    Py_ssize_t count;
    if (arrays(totals_obj, masks_obj, &totals, &masks, &count) < 0) {
        return NULL;
    }
    if (k < 1 || count < k) {
        return PyFloat_FromDouble(-INFINITY);
    }
    if (k <= HEAP_K) {
        return PyFloat_FromDouble(heap_kth(totals, masks, count, (uint32_t)full, boost, k));
    }
    /* a scratch buffer kept between calls (the GIL serializes them): a fresh one of an
     * archive's size each time costs its page faults again */
    static double *values = NULL;
    static Py_ssize_t capacity = 0;
    if (count > capacity) {
        double *grown = PyMem_Realloc(values, sizeof(double) * (size_t)count);
        if (grown == NULL) {
            return PyErr_NoMemory();
        }
        values = grown;
        capacity = count;
    }
    for (Py_ssize_t i = 0; i < count; i++) {  /* plainscore._rank's lower bounds */
        values[i] = masks[i] == (uint32_t)full ? totals[i] * boost : totals[i];
    }
    return PyFloat_FromDouble(select_kth(values, count, k));
}

/* merge()'s three arrays, checked to agree in length */
static int merged_arrays(PyObject *ids_obj, PyObject *totals_obj, PyObject *masks_obj,
                         const int64_t **ids, const double **totals, const uint32_t **masks,
                         Py_ssize_t *count) {
    if (arrays(totals_obj, masks_obj, totals, masks, count) < 0) {
        return -1;
    }
    if (!PyBytes_Check(ids_obj)) {
        PyErr_SetString(PyExc_TypeError, "merge()'s bytes expected");
        return -1;
    }
    if (PyBytes_GET_SIZE(ids_obj) != *count * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "ids and totals differ in length");
        return -1;
    }
    *ids = (const int64_t *)PyBytes_AS_STRING(ids_obj);
    return 0;
}

/* Append one message to the first width of lists (ids, totals, masks, uppers). */
static int append_row(PyObject **lists, int width, int64_t id, double total, uint32_t mask,
                      double upper) {
    PyObject *items[4] = {PyLong_FromLongLong(id), PyFloat_FromDouble(total),
                          PyLong_FromUnsignedLong(mask),
                          width > 3 ? PyFloat_FromDouble(upper) : NULL};
    int bad = 0;
    for (int k = 0; k < width; k++) {
        bad = bad || items[k] == NULL || PyList_Append(lists[k], items[k]) < 0;
    }
    for (int k = 0; k < 4; k++) {
        Py_XDECREF(items[k]);
    }
    return bad ? -1 : 0;
}

/* chosen(ids, totals, masks, cut, bar, full, factors, pairs, anywhere): the messages scoring
 * at least cut whose upper bound reaches bar, as (ids, totals, masks, uppers) lists in id
 * order. A message's upper bound is its total times factors[2 * held + could] (held: its mask
 * is full; could: anywhere, or its mask holds both bits of some pair): plainscore._rank's
 * upper(), the same products of the same doubles. */
static PyObject *chosen(PyObject *self, PyObject *args) {
    PyObject *ids_obj, *totals_obj, *masks_obj, *factors_obj, *pairs_obj;
    double cut, bar;
    unsigned long full;
    int anywhere;
    if (!PyArg_ParseTuple(args, "OOOddkO!O!p", &ids_obj, &totals_obj, &masks_obj, &cut, &bar,
                          &full, &PyTuple_Type, &factors_obj, &PyList_Type, &pairs_obj,
                          &anywhere)) {
        return NULL;
    }
    const int64_t *ids;
    const double *totals;
    const uint32_t *masks;
    Py_ssize_t count;
    if (merged_arrays(ids_obj, totals_obj, masks_obj, &ids, &totals, &masks, &count) < 0) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(factors_obj) != 4) {
        PyErr_SetString(PyExc_ValueError, "four factors: neither, could, held, both");
        return NULL;
    }
    double factors[4];
    for (int k = 0; k < 4; k++) {
        factors[k] = PyFloat_AsDouble(PyTuple_GET_ITEM(factors_obj, k));
        if (factors[k] == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
    }
    Py_ssize_t npairs = PyList_GET_SIZE(pairs_obj);
    if (npairs > 64) {
        PyErr_SetString(PyExc_ValueError, "at most 64 pairs");
        return NULL;
    }
    uint32_t pairs[64];
    for (Py_ssize_t k = 0; k < npairs; k++) {
        unsigned long bits = PyLong_AsUnsignedLong(PyList_GET_ITEM(pairs_obj, k));
        if (bits == (unsigned long)-1 && PyErr_Occurred()) {
            return NULL;
        }
        pairs[k] = (uint32_t)bits;
    }
    PyObject *lists[4] = {PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0)};
    for (int k = 0; k < 4; k++) {
        if (lists[k] == NULL) {
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!(cut <= totals[i])) {
            continue;
        }
        int could = anywhere;
        for (Py_ssize_t k = 0; k < npairs && !could; k++) {
            could = (masks[i] & pairs[k]) == pairs[k];
        }
        int held = masks[i] == (uint32_t)full;
        double upper = totals[i] * factors[2 * held + could];
        if (upper >= bar && append_row(lists, 4, ids[i], totals[i], masks[i], upper) < 0) {
            goto fail;
        }
    }
    return Py_BuildValue("(NNNN)", lists[0], lists[1], lists[2], lists[3]);
fail:
    for (int k = 0; k < 4; k++) {
        Py_XDECREF(lists[k]);
    }
    return NULL;
}

/* picked(ids, totals, masks, wanted): those of wanted (any order, kept) that ids holds, as
 * (ids, totals, masks) lists: a session's rows among the messages holding a term */
static PyObject *picked(PyObject *self, PyObject *args) {
    PyObject *ids_obj, *totals_obj, *masks_obj, *wanted;
    if (!PyArg_ParseTuple(args, "OOOO!", &ids_obj, &totals_obj, &masks_obj, &PyList_Type,
                          &wanted)) {
        return NULL;
    }
    const int64_t *ids;
    const double *totals;
    const uint32_t *masks;
    Py_ssize_t count;
    if (merged_arrays(ids_obj, totals_obj, masks_obj, &ids, &totals, &masks, &count) < 0) {
        return NULL;
    }
    PyObject *lists[3] = {PyList_New(0), PyList_New(0), PyList_New(0)};
    for (int k = 0; k < 3; k++) {
        if (lists[k] == NULL) {
            goto fail;
        }
    }
    for (Py_ssize_t w = 0; w < PyList_GET_SIZE(wanted); w++) {
        long long id = PyLong_AsLongLong(PyList_GET_ITEM(wanted, w));
        if (id == -1 && PyErr_Occurred()) {
            goto fail;
        }
        Py_ssize_t lo = 0, hi = count;  /* ids ascend: the first at or above id */
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (ids[mid] < (int64_t)id) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (lo == count || ids[lo] != (int64_t)id) {
            continue;
        }
        if (append_row(lists, 3, (int64_t)id, totals[lo], masks[lo], 0.0) < 0) {
            goto fail;
        }
    }
    return Py_BuildValue("(NNN)", lists[0], lists[1], lists[2]);
fail:
    for (int k = 0; k < 3; k++) {
        Py_XDECREF(lists[k]);
    }
    return NULL;
}

static PyMethodDef methods[] = {
    {"merge", merge, METH_VARARGS,
     "merge(terms, tail_lengths, idfs, avgdl, k1, b[, pieces, piece_idfs, average, k1, b]) "
     "-> (count, ids, totals, masks)"},
    {"merge_rows", merge_rows, METH_VARARGS,
     "merge_rows(pieces, idfs, average, k1, b) -> (count, ids, totals, masks)"},
    {"picked", picked, METH_VARARGS,
     "picked(ids, totals, masks, wanted) -> (ids, totals, masks) of those wanted held"},
    {"phrase_rows", phrase_rows, METH_VARARGS,
     "phrase_rows(matched, tokens, tail_lengths) -> (least, lengths), or None"},
    {"kth", kth, METH_VARARGS,
     "kth(totals, masks, full, boost, k) -> the k-th largest bound, or -inf"},
    {"chosen", chosen, METH_VARARGS,
     "chosen(ids, totals, masks, cut, bar, full, factors, pairs, anywhere) -> "
     "(ids, totals, masks, uppers)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "refold._scorer",
    "The word impact index's bm25 scoring in C (see plainscore.py for the same in Python).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__scorer(void) { return PyModule_Create(&module); }
