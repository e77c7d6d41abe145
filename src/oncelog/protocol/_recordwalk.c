/*
 * Record validation for the produce path: walks the records of one (decompressed) v2 record
 * batch without creating a Python object per record.
 *
 * walk(data, count[, base_timestamp]) -> (null_keys, max_timestamp_delta, index_of_max,
 *                                         lowest, index_of_lowest, highest, index_of_highest) | None
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define OK 0
#define TRUNCATED 1
#define TOO_LONG 2

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
    if (!PyArg_ParseTuple(args, "y*n|L", &view, &count, &base_ts))
        return NULL;
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
        if ((rc = skip_sized(p, end, &pos, -1, &vlen)) != OK) {
            if (rc < 0) fail_value(i, "value length", (long long)vlen); else fail(i, "value", rc);
            goto done;
        }
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
    else
        result = Py_BuildValue("(nLnLnLn)", null_keys, (long long)max_ts, max_index, (long long)lo_ts, lo_index,
                               (long long)hi_ts, hi_index);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(data, count[, base_timestamp]) -> (null_keys, max_timestamp_delta, index, "
                                 "lowest, its index, highest, its index) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordwalk", "Record validation for the produce path (see the C source).", -1, methods,
};

PyMODINIT_FUNC PyInit__recordwalk(void)
{
    return PyModule_Create(&module);
}
