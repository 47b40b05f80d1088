/* Runs of framed records (a u32 length prefix, then the record's JSON): read into records, checked without
 * keeping them, or read keeping only those a filter may select. One call per run spares the interpreter a loop step per record. Both stop before the first
 * record that does not lie whole in the buffer or that the C reader leaves to Python (an unusual shape or a
 * defect): the Python reader then reads it or names what is wrong. */
#include "_speedups.h"

/* read_records(payload, pos, limit) -> (list, pos): at most `limit` records framed from byte `pos` on. */
PyObject *rbak_read_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, limit;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &limit)) return NULL;
    const unsigned char *s = (const unsigned char *)view.buf;
    PyObject *out = PyList_New(0);
    while (out != NULL && rbak.loads != NULL && limit-- > 0) {
        Py_ssize_t len = rbak_framed_length(s, view.len, pos);
        if (len < 0) break;
        PyObject *record = rbak_decode(s + pos + 4, len);
        if (record == NULL) { PyErr_Clear(); break; }
        if (PyList_Append(out, record) < 0) Py_CLEAR(out);
        Py_DECREF(record);
        pos += 4 + len;
    }
    PyBuffer_Release(&view);
    return out == NULL ? NULL : Py_BuildValue("(Nn)", out, pos);
}

/* scan_records(payload, pos, limit, vhost, queue) -> (pos, count, foreign, first, last, lowest, highest)
 *
 * Checks the records read_records would read, each parsed as strictly, but keeps of them only what a deep
 * check needs: `foreign` counts those whose source is not vhost/queue; `first` and `last` are the first and
 * last record's backed_up_at, `lowest` and `highest` the extremes (all 0 when none was read). */
PyObject *rbak_scan_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, limit, count = 0, foreign = 0;
    PyObject *vhost, *queue;
    long long first = 0, last = 0, lowest = 0, highest = 0;
    if (!PyArg_ParseTuple(args, "y*nnUU", &view, &pos, &limit, &vhost, &queue)) return NULL;
    const unsigned char *s = (const unsigned char *)view.buf;
    while (rbak.loads != NULL && count < limit) {
        Py_ssize_t len = rbak_framed_length(s, view.len, pos);
        if (len < 0) break;
        PyObject *values[N_RECORD] = {NULL};
        int ok = rbak_check_fields(s + pos + 4, len, values) == 0;
        long long stamp = ok ? PyLong_AsLongLong(values[F_BACKED_UP_AT]) : 0; /* in range: read as a signed 64-bit */
        int other = ok && (PyUnicode_Compare(values[F_SOURCE_QUEUE], queue) != 0 ||
                           PyUnicode_Compare(values[F_SOURCE_VHOST], vhost) != 0);
        for (int j = 0; j < N_RECORD; j++) Py_XDECREF(values[j]);
        if (!ok || PyErr_Occurred()) { PyErr_Clear(); break; }
        if (count == 0) first = lowest = highest = stamp;
        lowest = stamp < lowest ? stamp : lowest;
        highest = stamp > highest ? stamp : highest;
        last = stamp;
        foreign += other;
        count++;
        pos += 4 + len;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnnLLLL)", pos, count, foreign, first, last, lowest, highest);
}

/* Whether a record's headers (a tuple of (name, HeaderValue)) may satisfy "header `name` equals `text`": one of
 * that name whose value is text equal to `text`, or of another type (the Python test compares those); 1, 0, or
 * -1 with an exception set. No name: 1. */
static int header_may_match(PyObject *headers, PyObject *name, PyObject *text) {
    if (PyUnicode_GET_LENGTH(name) == 0) return 1;
    Py_ssize_t n = PyTuple_Check(headers) ? PyTuple_GET_SIZE(headers) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(headers, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) return 1; /* not the usual shape: Python decides */
        PyObject *key = PyTuple_GET_ITEM(pair, 0);
        if (!PyUnicode_Check(key) || PyUnicode_Compare(key, name) != 0) continue;
        if (text == Py_None) return 1;
        PyObject *value = rbak_get(rbak.value_slot, PyTuple_GET_ITEM(pair, 1));
        if (value == NULL) return -1;
        int may = !PyUnicode_Check(value) || PyUnicode_Compare(value, text) == 0;
        Py_DECREF(value);
        if (may) return 1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* select_records(payload, pos, limit, needle, since, until, key_text, header_name, header_text)
 *   -> (pairs, pos, count)
 *
 * Reads the records read_records would read, each parsed as strictly, but builds a record only where a filter
 * may select it: its backed_up_at within [since, until], its body holding `needle`, its routing key holding
 * `key_text`, and a header `header_name` that may equal `header_text` (None: any value); empty texts hold
 * everywhere. `pairs` holds (index, record), the index counted from the run's first record; `count` is how many
 * records were read. A search's own conditions are then tested on the records returned. */
PyObject *rbak_select_records(PyObject *self, PyObject *args) {
    Py_buffer view, needle;
    Py_ssize_t pos, limit, count = 0;
    long long since, until;
    PyObject *key_text, *header_name, *header_text;
    if (!PyArg_ParseTuple(args, "y*nny*LLUUO", &view, &pos, &limit, &needle, &since, &until, &key_text,
                          &header_name, &header_text)) return NULL;
    const unsigned char *s = (const unsigned char *)view.buf;
    PyObject *out = PyList_New(0);
    while (out != NULL && rbak.loads != NULL && count < limit) {
        Py_ssize_t len = rbak_framed_length(s, view.len, pos);
        if (len < 0) break;
        PyObject *values[N_RECORD] = {NULL};
        PyObject *record = NULL;
        int ok = rbak_decode_fields(s + pos + 4, len, values) == 0;
        long long stamp = ok ? PyLong_AsLongLong(values[F_BACKED_UP_AT]) : 0; /* in range: read as a signed 64-bit */
        int keep = ok && !PyErr_Occurred() && stamp >= since && stamp <= until;
        if (keep && needle.len > 0) {
            PyObject *body = values[F_BODY];
            keep = PyBytes_Check(body) &&
                   memmem(PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body), needle.buf, (size_t)needle.len) != NULL;
        }
        if (keep && PyUnicode_GET_LENGTH(key_text) > 0) {
            PyObject *key = values[F_ROUTING_KEY];
            keep = PyUnicode_Check(key) && PyUnicode_Find(key, key_text, 0, PY_SSIZE_T_MAX, 1) >= 0;
        }
        if (keep) keep = header_may_match(values[F_HEADERS], header_name, header_text);
        if (keep > 0) record = rbak_record_of(values);
        for (int j = 0; j < N_RECORD; j++) Py_XDECREF(values[j]);
        if (!ok || PyErr_Occurred()) { Py_XDECREF(record); PyErr_Clear(); break; }
        if (record != NULL) {
            PyObject *pair = Py_BuildValue("(nN)", count, record);
            if (pair == NULL || PyList_Append(out, pair) < 0) Py_CLEAR(out);
            Py_XDECREF(pair);
        }
        count++;
        pos += 4 + len;
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&needle);
    return out == NULL ? NULL : Py_BuildValue("(Nnn)", out, pos, count);
}
