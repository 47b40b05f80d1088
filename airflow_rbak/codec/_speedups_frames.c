/* Runs of framed records (a u32 length prefix, then the record's JSON): read into records, or checked without
 * keeping them. One call per run spares the interpreter a loop step per record. Both stop before the first
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
        int ok = rbak_decode_fields(s + pos + 4, len, values) == 0;
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
