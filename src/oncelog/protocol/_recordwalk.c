/*
 * Record validation for the produce path: walks the records of one (decompressed) v2 record
 * batch without creating a Python object per record.
 *
 * walk(data, count[, base_timestamp[, prefixes]]) -> (null_keys, max_timestamp_delta, index_of_max,
 *                                         lowest, index_of_lowest, highest, index_of_highest
 *                                         [, key_ids, value_ids]) | None
 *
 *   data            the records section of a batch (after its 61-byte header), uncompressed
 *   count           the batch's recordsCount
 *   base_timestamp  the batch's baseTimestamp (default 0)
 *
 * Checks, as Kafka's DefaultRecord.readFrom and LogValidator do:
 *   - exactly `count` records, and no byte after the last one;
 *   - each record's length (zigzag varint) fits in what remains, and its fields use exactly
 *     that many bytes;
 *   - timestampDelta is a varlong, offsetDelta a varint equal to the record's index;
 *   - key and value lengths are -1 (null) or fit in the record;
 *   - the header count is >= 0, header keys are not null, header values -1 or fitting.
 * Returns the number of records with a null key (compacted topics refuse them), the largest
 * timestampDelta with the index of its first record, and the lowest and highest record
 * timestamp (base_timestamp + timestampDelta, wrapping as Java's long does) among the records
 * whose timestamp is not -1 (Kafka's NO_TIMESTAMP), each with the index of its first record
 * (index -1 and timestamp 0 when every record's is -1): the produce path checks
 * message.timestamp.before/after.max.ms on these two alone (None when count is 0).
 * Raises ValueError naming the record and the field on the first violation. Reads only inside
 * `data`; never allocates per record. The pure-Python oracle it is held to lives in
 * tests/unit/test_record_walk.py.
 *
 * Schema ids (`prefixes`: 1 keys, 2 values, 3 both; the topic configs
 * confluent.key/value.schema.validation, oncelog/schema_registry/validation.py): the Confluent
 * wire format starts a key or value with magic byte 0 and a 4-byte big-endian schema id. With
 * `prefixes`, two more items: for keys and for values (None when not asked), the DISTINCT ids
 * met, each with the index of its first record, flattened (id0, index0, id1, index1, ...); id -1
 * stands for a null key/value, -2 for one that does not start with the 5-byte prefix (ids are read
 * unsigned, so they never meet these). A batch
 * with more than MAX_DISTINCT distinct ids on a side gives None there too (the caller then
 * looks at every record: a path no well-behaved producer takes). No object per record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define OK 0
#define TRUNCATED 1
#define TOO_LONG 2
#define MAX_DISTINCT 64
#define ID_NULL (-1)
#define ID_UNFRAMED (-2)

/* The distinct schema ids of one side (keys or values) of a batch, in the order first met. */
typedef struct {
    int64_t id[MAX_DISTINCT];
    Py_ssize_t first[MAX_DISTINCT];
    int n;
    int overflow;
} ids_t;

/* The schema id of a key/value of length `len` (-1: null) starting at p[start]. */
static int64_t schema_id(const uint8_t *p, Py_ssize_t start, int64_t len)
{
    if (len < 0)
        return ID_NULL;
    if (len < 5 || p[start] != 0)
        return ID_UNFRAMED;
    const uint8_t *b = p + start + 1;
    /* unsigned: an id is never negative, so it never meets the sentinels above */
    return (int64_t)(((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3]);
}

static void note_id(ids_t *ids, int64_t id, Py_ssize_t index)
{
    if (ids->overflow)
        return;
    for (int k = ids->n - 1; k >= 0; k--)
        if (ids->id[k] == id)
            return;
    if (ids->n == MAX_DISTINCT) {
        ids->overflow = 1;
        return;
    }
    ids->id[ids->n] = id;
    ids->first[ids->n] = index;
    ids->n++;
}

static PyObject *ids_tuple(const ids_t *ids, int asked)
{
    if (!asked || ids->overflow)
        Py_RETURN_NONE;
    PyObject *t = PyTuple_New(2 * (Py_ssize_t)ids->n);
    if (t == NULL)
        return NULL;
    for (int k = 0; k < ids->n; k++) {
        PyObject *a = PyLong_FromLongLong((long long)ids->id[k]);
        PyObject *b = a ? PyLong_FromSsize_t(ids->first[k]) : NULL;
        if (b == NULL) {
            Py_XDECREF(a);
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, 2 * k, a);
        PyTuple_SET_ITEM(t, 2 * k + 1, b);
    }
    return t;
}

/* Zigzag varint of at most `max_bytes` bytes at p[*pos], not reading at or past `end`. */
static int read_zigzag(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int max_bytes, int64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= end)
            return TRUNCATED;
        uint8_t b = p[(*pos)++];
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (max_bytes == 5 && raw > 0xffffffffULL)
                return TOO_LONG;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return OK;
        }
        shift += 7;
    }
    return TOO_LONG;
}

static PyObject *fail(Py_ssize_t index, const char *field, int code)
{
    const char *why = code == TRUNCATED ? "runs past the end of the record"
                    : code == TOO_LONG ? "is not a valid varint"
                    : "is invalid";
    PyErr_Format(PyExc_ValueError, "record %zd: %s %s", index, field, why);
    return NULL;
}

static PyObject *fail_value(Py_ssize_t index, const char *field, long long value)
{
    PyErr_Format(PyExc_ValueError, "record %zd: %s %lld is invalid", index, field, value);
    return NULL;
}

/* Skip a length-prefixed field (key, value, header key/value) inside [*pos, end). */
static int skip_sized(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int64_t min_len, int64_t *len)
{
    int rc = read_zigzag(p, end, pos, 5, len);
    if (rc != OK)
        return rc;
    if (*len < min_len)
        return -1;
    if (*len > 0) {
        if (*len > end - *pos)
            return TRUNCATED;
        *pos += (Py_ssize_t)*len;
    }
    return OK;
}

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    long long base_ts = 0;
    int prefixes = 0;
    if (!PyArg_ParseTuple(args, "y*n|Li", &view, &count, &base_ts, &prefixes))
        return NULL;
    ids_t key_ids = {{0}, {0}, 0, 0}, value_ids = {{0}, {0}, 0, 0};
    const uint8_t *p = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    Py_ssize_t pos = 0, null_keys = 0, max_index = -1, lo_index = -1, hi_index = -1;
    int64_t max_ts = 0, lo_ts = 0, hi_ts = 0;
    PyObject *result = NULL;
    int rc;

    if (count < 0) {
        PyErr_Format(PyExc_ValueError, "record count %zd is negative", count);
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t len, ts, od, klen, vlen, hcount, hlen;
        if (pos >= n) {
            PyErr_Format(PyExc_ValueError, "record %zd of %zd: the batch ends before it", i, count);
            goto done;
        }
        if ((rc = read_zigzag(p, n, &pos, 5, &len)) != OK) {
            fail(i, "length", rc);
            goto done;
        }
        if (len < 0 || len > n - pos) {
            fail_value(i, "length", (long long)len);
            goto done;
        }
        const Py_ssize_t end = pos + (Py_ssize_t)len;
        if (pos >= end) {
            fail(i, "attributes", TRUNCATED);
            goto done;
        }
        pos += 1; /* attributes: unused in v2 */
        if ((rc = read_zigzag(p, end, &pos, 10, &ts)) != OK) {
            fail(i, "timestampDelta", rc);
            goto done;
        }
        if ((rc = read_zigzag(p, end, &pos, 5, &od)) != OK) {
            fail(i, "offsetDelta", rc);
            goto done;
        }
        if (od != i) {
            fail_value(i, "offsetDelta", (long long)od);
            goto done;
        }
        if ((rc = skip_sized(p, end, &pos, -1, &klen)) != OK) {
            if (rc < 0) fail_value(i, "key length", (long long)klen); else fail(i, "key", rc);
            goto done;
        }
        if (klen == -1)
            null_keys++;
        if (prefixes & 1)
            note_id(&key_ids, schema_id(p, pos - (klen > 0 ? (Py_ssize_t)klen : 0), klen), i);
        if ((rc = skip_sized(p, end, &pos, -1, &vlen)) != OK) {
            if (rc < 0) fail_value(i, "value length", (long long)vlen); else fail(i, "value", rc);
            goto done;
        }
        if (prefixes & 2)
            note_id(&value_ids, schema_id(p, pos - (vlen > 0 ? (Py_ssize_t)vlen : 0), vlen), i);
        if ((rc = read_zigzag(p, end, &pos, 5, &hcount)) != OK) {
            fail(i, "header count", rc);
            goto done;
        }
        if (hcount < 0 || hcount > (end - pos) / 2) {
            fail_value(i, "header count", (long long)hcount);
            goto done;
        }
        for (int64_t h = 0; h < hcount; h++) {
            if ((rc = skip_sized(p, end, &pos, 0, &hlen)) != OK) {
                if (rc < 0) fail_value(i, "header key length", (long long)hlen); else fail(i, "header key", rc);
                goto done;
            }
            if ((rc = skip_sized(p, end, &pos, -1, &hlen)) != OK) {
                if (rc < 0) fail_value(i, "header value length", (long long)hlen); else fail(i, "header value", rc);
                goto done;
            }
        }
        if (pos != end) {
            PyErr_Format(PyExc_ValueError, "record %zd: length %lld but its fields use %zd bytes",
                         i, (long long)len, (Py_ssize_t)(pos - (end - (Py_ssize_t)len)));
            goto done;
        }
        if (max_index < 0 || ts > max_ts) {
            max_ts = ts;
            max_index = i;
        }
        const int64_t abs_ts = (int64_t)((uint64_t)base_ts + (uint64_t)ts); /* Java's long addition */
        if (abs_ts != -1) {
            if (lo_index < 0 || abs_ts < lo_ts) {
                lo_ts = abs_ts;
                lo_index = i;
            }
            if (hi_index < 0 || abs_ts > hi_ts) {
                hi_ts = abs_ts;
                hi_index = i;
            }
        }
    }
    if (pos != n) {
        PyErr_Format(PyExc_ValueError, "%zd bytes after the last of %zd records", n - pos, count);
        goto done;
    }
    if (max_index < 0)
        result = Py_NewRef(Py_None);
    else if (!prefixes)
        result = Py_BuildValue("(nLnLnLn)", null_keys, (long long)max_ts, max_index, (long long)lo_ts, lo_index,
                               (long long)hi_ts, hi_index);
    else {
        PyObject *k = ids_tuple(&key_ids, prefixes & 1);
        PyObject *v = k ? ids_tuple(&value_ids, prefixes & 2) : NULL;
        if (v != NULL)
            result = Py_BuildValue("(nLnLnLnNN)", null_keys, (long long)max_ts, max_index, (long long)lo_ts,
                                   lo_index, (long long)hi_ts, hi_index, k, v);
        else
            Py_XDECREF(k);
    }
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(data, count[, base_timestamp[, prefixes]]) -> (null_keys, "
                                 "max_timestamp_delta, index, lowest, its index, highest, its index"
                                 "[, key_ids, value_ids]) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordwalk", "Record validation for the produce path (see the C source).", -1, methods,
};

PyMODINIT_FUNC PyInit__recordwalk(void)
{
    return PyModule_Create(&module);
}
