/* Optional accelerator for the two hot loops Python cannot do quickly: reading a
 * record's body, a JSON array of byte values, into bytes, and writing one. The
 * pure-Python paths in records.py give identical results; this module only makes
 * them faster.
 * Grammar accepted (strict JSON): '[' ws ( num ws ( ',' ws num ws )* )? ']'
 * where num is 0 or [1-9][0-9]{0,2} with value <= 255. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static PyObject *fail(Py_buffer *view, PyObject *out, const char *msg, Py_ssize_t at) {
    Py_XDECREF(out);
    PyBuffer_Release(view);
    PyErr_Format(PyExc_ValueError, "%s at byte %zd", msg, at);
    return NULL;
}

/* parse_byte_array(buffer, pos) -> (bytes, end): pos is just after '['; end is just after ']'. */
static PyObject *parse_byte_array(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*n", &view, &pos)) return NULL;
    const unsigned char *s = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, i = pos, k = 0;
    if (pos < 0 || pos > n) return fail(&view, NULL, "start outside the buffer", pos);
    /* Every value takes a digit and a separator, so the output never exceeds half the input. */
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n - pos) / 2 + 1);
    if (out == NULL) { PyBuffer_Release(&view); return NULL; }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    while (i < n && is_ws(s[i])) i++;
    if (i < n && s[i] == ']') { i++; goto done; }
    for (;;) {
        if (i >= n || s[i] < '0' || s[i] > '9') return fail(&view, out, "expected a byte value", i);
        unsigned int v = s[i] - '0';
        Py_ssize_t start = i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (i - start >= 3 || (v == 0)) return fail(&view, out, "not a byte value", start);
            v = v * 10 + (s[i++] - '0');
        }
        if (v > 255) return fail(&view, out, "byte value over 255", start);
        o[k++] = (unsigned char)v;
        while (i < n && is_ws(s[i])) i++;
        if (i < n && s[i] == ',') { i++; while (i < n && is_ws(s[i])) i++; continue; }
        if (i < n && s[i] == ']') { i++; break; }
        return fail(&view, out, "expected ',' or ']'", i);
    }
done:
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&out, k) < 0) return NULL;
    return Py_BuildValue("(Nn)", out, i);
}

/* Each byte value's decimal digits, padded to four bytes so that one fixed-size copy writes any of them. */
static char digits[256][4];
static unsigned char digits_len[256];

/* format_byte_array(buffer) -> bytes: "[0,1,255]", compact, exactly as orjson writes a numpy uint8 array. */
static PyObject *format_byte_array(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *s = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, k = 0;
    /* At most "255," per value, two brackets, and the slack of the last four-byte copy. */
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 * n + 6);
    if (out == NULL) { PyBuffer_Release(&view); return NULL; }
    char *o = PyBytes_AS_STRING(out);
    o[k++] = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(o + k, digits[s[i]], 4);
        k += digits_len[s[i]];
        o[k++] = ',';
    }
    if (n) k--;
    o[k++] = ']';
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&out, k) < 0) return NULL;
    return out;
}

static PyMethodDef methods[] = {
    {"parse_byte_array", parse_byte_array, METH_VARARGS, "Parse a JSON array of byte values into bytes."},
    {"format_byte_array", format_byte_array, METH_O, "Write bytes as a compact JSON array of byte values."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", "RBAK codec accelerator.", -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    for (int v = 0; v < 256; v++) digits_len[v] = (unsigned char)snprintf(digits[v], sizeof digits[v], "%d", v);
    return PyModule_Create(&module);
}
