/* Writing a record's JSON exactly as orjson.dumps(record.to_json()) does (serde's
 * compact form, spec order). Strings, integers, booleans and the body are written
 * here; header variants other than strings, integers, Bool and Void (floats,
 * bytes, tables, arrays) are written by orjson through a Python callback. Any
 * value of an unexpected type makes the writer answer None, and records.py's
 * Python path then writes the record or raises its RecordError. */
#include "_speedups.h"

#include <string.h>

#include "_speedups_wbuf.h"

/* Each byte value as JSON text with its comma ("0," ... "255,", padded to 4 bytes) and that text's length. */
typedef struct {
    char text[4];
    uint32_t len;
} byte_text;

static byte_text byte_texts[256];

void rbak_init_writer(void) {
    for (int v = 0; v < 256; v++) {
        char tmp[8] = {0};
        byte_texts[v].len = (uint32_t)PyOS_snprintf(tmp, sizeof tmp, "%d,", v);
        memcpy(byte_texts[v].text, tmp, 4);
    }
}


/* Every byte's text is stored 4 bytes wide and the output advances by its true length; four bytes of
 * the body per step (one load) keep the table lookups independent of one another. */
static char *put_byte_values(const unsigned char *restrict s, Py_ssize_t n, char *restrict p) {
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
#if defined(__GNUC__) || defined(__clang__)
        if ((i & 63) == 0) __builtin_prefetch(s + i + 512);
#endif
        const byte_text *t0 = &byte_texts[s[i]], *t1 = &byte_texts[s[i + 1]], *t2 = &byte_texts[s[i + 2]], *t3 = &byte_texts[s[i + 3]];
        memcpy(p, t0->text, 4);
        p += t0->len;
        memcpy(p, t1->text, 4);
        p += t1->len;
        memcpy(p, t2->text, 4);
        p += t2->len;
        memcpy(p, t3->text, 4);
        p += t3->len;
    }
    for (; i < n; i++) {
        memcpy(p, byte_texts[s[i]].text, 4);
        p += byte_texts[s[i]].len;
    }
    return p;
}

static int put_body(wbuf *b, PyObject *body) {
    if (!PyBytes_CheckExact(body)) return -1;
    Py_ssize_t n = PyBytes_GET_SIZE(body);
    if (n == 0) return PUT_LITERAL(b, "null");
    if (reserve(b, 4 * n + 4) < 0) return -1;
    char *p = put_byte_values((const unsigned char *)PyBytes_AS_STRING(body), n, b->p + 1);
    b->p[0] = '[';
    p[-1] = ']';
    b->p = p;
    return 0;
}

static int put_properties(wbuf *b, PyObject *props) {
    if (Py_TYPE(props) != rbak.props_type) return -1;
    for (int i = 0; i < N_PROPS; i++) {
        if (put_key(b, i, rbak_props_names[i]) < 0) return -1;
        PyObject *v = rbak_get(rbak.props_slots[i], props);
        int rc = v == NULL ? -1 : put_scalar(b, v, rbak_props_kinds[i] != PROP_TEXT);
        Py_XDECREF(v);
        if (rc < 0) return -1;
    }
    return put(b, "}", 1);
}

/* {"Kind":value} for the string, integer and Bool variants, "Void", or orjson's bytes for the rest. */
static int put_header_value(wbuf *b, PyObject *hv, PyObject *kind, PyObject *value) {
    Py_ssize_t n;
    const char *k = PyUnicode_CheckExact(kind) ? PyUnicode_AsUTF8AndSize(kind, &n) : NULL;
    if (k == NULL) return -1;
    int is_str = (n == 10 && memcmp(k, "LongString", 10) == 0) || (n == 11 && memcmp(k, "ShortString", 11) == 0);
    int is_int = (n == 4 && memcmp(k, "Long", 4) == 0) || (n == 5 && memcmp(k, "Short", 5) == 0) ||
                 (n == 9 && memcmp(k, "Timestamp", 9) == 0);
    int is_bool = n == 4 && memcmp(k, "Bool", 4) == 0 && PyBool_Check(value);
    if (n == 4 && memcmp(k, "Void", 4) == 0 && value == Py_None) return PUT_LITERAL(b, "\"Void\"");
    if ((is_str && PyUnicode_CheckExact(value)) || (is_int && PyLong_CheckExact(value)) || is_bool) {
        if (put(b, "{", 1) < 0 || put_str(b, kind) < 0 || put(b, ":", 1) < 0) return -1;
        int rc = is_bool ? (value == Py_True ? PUT_LITERAL(b, "true") : PUT_LITERAL(b, "false"))
                 : is_int ? put_int(b, value) : put_str(b, value);
        return rc < 0 ? -1 : put(b, "}", 1);
    }
    PyObject *raw = PyObject_CallOneArg(rbak.header_to_json, hv);
    int rc = raw != NULL && PyBytes_CheckExact(raw) ? put(b, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw)) : -1;
    Py_XDECREF(raw);
    return rc;
}

static int put_headers(wbuf *b, PyObject *headers) {
    if (!PyTuple_CheckExact(headers) || put(b, "[", 1) < 0) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(headers); i++) {
        PyObject *pair = PyTuple_GET_ITEM(headers, i), *hv;
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0)))
            return -1;
        hv = PyTuple_GET_ITEM(pair, 1);
        if (Py_TYPE(hv) != rbak.header_type) return -1;
        if ((i && put(b, ",", 1) < 0) || put(b, "[", 1) < 0 || put_str(b, PyTuple_GET_ITEM(pair, 0)) < 0 ||
            put(b, ",", 1) < 0)
            return -1;
        PyObject *kind = rbak_get(rbak.kind_slot, hv), *value = kind ? rbak_get(rbak.value_slot, hv) : NULL;
        int rc = value == NULL ? -1 : put_header_value(b, hv, kind, value);
        Py_XDECREF(kind);
        Py_XDECREF(value);
        if (rc < 0 || put(b, "]", 1) < 0) return -1;
    }
    return put(b, "]", 1);
}

static int put_field(wbuf *b, int i, PyObject *v) {
    if (put_key(b, i, rbak_record_names[i]) < 0) return -1;
    switch (i) {
    case F_BODY: return put_body(b, v);
    case F_PROPERTIES: return put_properties(b, v);
    case F_HEADERS: return put_headers(b, v);
    case F_DELIVERY_TAG:
    case F_BACKED_UP_AT: return put_int(b, v);
    case F_REDELIVERED: return v == Py_True ? PUT_LITERAL(b, "true") : v == Py_False ? PUT_LITERAL(b, "false") : -1;
    default: return PyUnicode_CheckExact(v) ? put_str(b, v) : -1;
    }
}

static int put_record(wbuf *b, PyObject *record) {
    for (int i = 0; i < N_RECORD; i++) {
        PyObject *v = rbak_get(rbak.record_slots[i], record);
        int rc = v == NULL ? -1 : put_field(b, i, v);
        Py_XDECREF(v);
        if (rc < 0) return -1;
    }
    return put(b, "}", 1);
}

/* Room for a record's JSON: the body's array takes at most 4 bytes per byte. */
static Py_ssize_t size_hint(PyObject *record) {
    PyObject *body = rbak_get(rbak.record_slots[F_BODY], record);
    Py_ssize_t size = body != NULL && PyBytes_Check(body) ? 4 * PyBytes_GET_SIZE(body) + 512 : 512;
    Py_XDECREF(body);
    PyErr_Clear();
    return size;
}

/* The record's JSON as a new bytes object, or NULL with no exception: leave the record to Python.
 * It is written into a buffer of its own: a header value written by the Python callback may let
 * another thread run, and nothing else may move the memory being written meanwhile. */
static PyObject *record_json(PyObject *record) {
    if (rbak.record_type == NULL || Py_TYPE(record) != rbak.record_type) return NULL;
    Py_ssize_t size = size_hint(record);
    wbuf b = {PyBytes_FromStringAndSize(NULL, size), NULL, NULL};
    if (b.out == NULL) { PyErr_Clear(); return NULL; }
    b.p = PyBytes_AS_STRING(b.out);
    b.end = b.p + size;
    if (put_record(&b, record) < 0 || _PyBytes_Resize(&b.out, b.p - PyBytes_AS_STRING(b.out)) < 0) {
        Py_XDECREF(b.out);
        PyErr_Clear();
        return NULL;
    }
    return b.out;
}

PyObject *rbak_encode_record(PyObject *self, PyObject *record) {
    PyObject *json = record_json(record);
    return json != NULL ? json : Py_NewRef(Py_None);
}

/* append_record(buffer, used, record) -> int: the record's u32 length prefix and JSON written into
 * the bytearray at offset `used`; returns the offset after it, or -1 to leave the record to Python.
 * Bytes past `used` are the caller's scratch: SegmentWriter keeps one buffer for all its segments.
 *
 * The JSON goes straight into the buffer when the room set aside for it is enough (it nearly always
 * is). The buffer is exported meanwhile, so a header value written by the Python callback (which may
 * let another thread run) cannot resize the memory being written; otherwise it is written apart. */
PyObject *rbak_append_record(PyObject *self, PyObject *args) {
    PyObject *buffer, *record;
    Py_ssize_t used;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "O!nO", &PyByteArray_Type, &buffer, &used, &record)) return NULL;
    Py_ssize_t size = PyByteArray_GET_SIZE(buffer), room = 4 + size_hint(record);
    if (used < 0 || used > size) return PyErr_Format(PyExc_ValueError, "offset %zd is outside the buffer", used);
    if (rbak.record_type == NULL || Py_TYPE(record) != rbak.record_type) return PyLong_FromLong(-1);
    if (used + room > size && PyByteArray_Resize(buffer, used + room > size + size / 2 ? used + room : size + size / 2) < 0)
        return NULL; /* no memory, or the buffer is exported (a memoryview of it is alive) */
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE) < 0) return NULL;
    char *at = (char *)view.buf + used;
    wbuf b = {NULL, at + 4, at + room};
    int written = put_record(&b, record) == 0;
    Py_ssize_t length = b.p - at - 4;
    PyBuffer_Release(&view);
    if (!written || length > 0xFFFFFFFFLL) {
        PyErr_Clear();
        PyObject *json = record_json(record); /* room ran out, or a shape left to Python */
        if (json == NULL) return PyLong_FromLong(-1);
        length = PyBytes_GET_SIZE(json);
        Py_ssize_t need = used + 4 + length;
        if (length > 0xFFFFFFFFLL || (need > PyByteArray_GET_SIZE(buffer) && PyByteArray_Resize(buffer, need) < 0)) {
            Py_DECREF(json);
            return length > 0xFFFFFFFFLL ? PyLong_FromLong(-1) : NULL;
        }
        at = PyByteArray_AS_STRING(buffer) + used;
        memcpy(at + 4, PyBytes_AS_STRING(json), (size_t)length);
        Py_DECREF(json);
    }
    for (int k = 0; k < 4; k++) at[k] = (char)((length >> (8 * k)) & 0xFF);
    return PyLong_FromSsize_t(used + 4 + length);
}

/* format_byte_array(buffer) -> bytes: "[0,1,255]", compact, exactly as orjson writes a numpy uint8 array
 * (the capture builds record JSON from its parts and embeds this as an orjson.Fragment). */
PyObject *rbak_format_byte_array(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t n = view.len;
    /* At most "255," per value, '[' and the slack of the last four-byte copy. */
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 * n + 6);
    if (out == NULL) { PyBuffer_Release(&view); return NULL; }
    char *o = PyBytes_AS_STRING(out);
    o[0] = '[';
    char *p = put_byte_values((const unsigned char *)view.buf, n, o + 1);
    PyBuffer_Release(&view);
    if (n == 0) p++; /* no trailing comma to overwrite */
    p[-1] = ']';
    if (_PyBytes_Resize(&out, p - o) < 0) return NULL;
    return out;
}

static uint64_t le64(const unsigned char *s) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = v << 8 | s[k];
    return v;
}

static int put_u64(wbuf *b, unsigned long long u) {
    char tmp[24], *q = tmp + sizeof tmp;
    do { *--q = (char)('0' + u % 10); u /= 10; } while (u);
    return put(b, q, tmp + sizeof tmp - q);
}

/* A short string as JSON text: strictly UTF-8 (exchange, routing key), or with U+FFFD for each bad sequence
 * (a property, as staged_records._replaced makes it). -1 with no exception set when strict decoding fails. */
static int put_text(wbuf *b, const unsigned char *s, Py_ssize_t n, int strict) {
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, strict ? "strict" : "replace");
    if (text == NULL) { PyErr_Clear(); return -1; }
    int rc = put_str(b, text);
    Py_DECREF(text);
    return rc;
}

/* The bit that announces property i (codec/properties.py's order) in the flag word: the wire order has
 * headers (bit 13) third. */
#define PROPERTY_FLAG(i) (1u << ((i) < 2 ? 15 - (i) : 14 - (i)))
#define HEADERS_FLAG (1u << 13)

/* The header table at p[*pos] of a property list of plen bytes: its JSON (a new reference) from the Python
 * callback staged_records.py configured, *pos moved past it; NULL with no exception set: leave the record. */
static PyObject *staged_headers(const unsigned char *p, Py_ssize_t plen, Py_ssize_t *pos, int dropped) {
    if (rbak.staged_headers == NULL) return NULL;
    PyObject *list = PyBytes_FromStringAndSize((const char *)p, plen);
    PyObject *made = list ? PyObject_CallFunction(rbak.staged_headers, "Oni", list, *pos, dropped) : NULL;
    Py_XDECREF(list);
    PyObject *json = NULL;
    Py_ssize_t end;
    if (made != NULL && PyArg_ParseTuple(made, "Sn", &json, &end) && end > *pos && end <= plen) {
        Py_INCREF(json);
        *pos = end;
    } else {
        json = NULL;
    }
    Py_XDECREF(made);
    PyErr_Clear();
    return json;
}

/* The record JSON of a staged record (codec/staged_records.py's layout) into b, or -1: leave it to the Python
 * reader, which reads it or names its defect. Records with more than one flag word, a header table the
 * callback does not read, or anything out of place are left to it. *headers holds the table's JSON (the
 * caller releases it). */
static int put_staged(wbuf *b, const unsigned char *s, Py_ssize_t n, PyObject *queue, PyObject *vhost,
                      uint64_t *stamp, PyObject **headers) {
    enum { HEAD = 19 };
    if (n < HEAD + 2 || s[0] != 1 || s[1] > 2) return -1;
    int redelivered = s[2] != 0;
    uint64_t tag = le64(s + 11);
    *stamp = le64(s + 3);
    Py_ssize_t exchange = HEAD, routing_key = exchange + 1 + s[exchange];
    if (routing_key >= n) return -1;
    Py_ssize_t props = routing_key + 1 + s[routing_key];
    if (props > n - 4) return -1;
    Py_ssize_t plen = (Py_ssize_t)((uint32_t)s[props] | (uint32_t)s[props + 1] << 8 | (uint32_t)s[props + 2] << 16 |
                                   (uint32_t)s[props + 3] << 24);
    props += 4;
    if (plen > n - props || plen < 2) return -1;
    const unsigned char *p = s + props, *body = p + plen;
    unsigned flags = (unsigned)p[0] << 8 | p[1];
    if (flags & 1u) return -1;
    Py_ssize_t body_len = n - props - plen;
    if (put_key(b, F_BODY, rbak_record_names[F_BODY]) < 0) return -1;
    if (body_len == 0) {
        if (PUT_LITERAL(b, "null") < 0) return -1;
    } else {
        if (reserve(b, 4 * body_len + 4) < 0) return -1;
        char *end = put_byte_values(body, body_len, b->p + 1);
        b->p[0] = '[';
        end[-1] = ']';
        b->p = end;
    }
    if (put_key(b, F_PROPERTIES, rbak_record_names[F_PROPERTIES]) < 0) return -1;
    Py_ssize_t pos = 2;
    for (int i = 0; i < N_PROPS; i++) {
        if (i == 2 && (flags & HEADERS_FLAG) && (*headers = staged_headers(p, plen, &pos, s[1])) == NULL) return -1;
        if (put_key(b, i, rbak_props_names[i]) < 0) return -1;
        int rc;
        if (!(flags & PROPERTY_FLAG(i))) {
            rc = PUT_LITERAL(b, "null");
        } else if (rbak_props_kinds[i] == PROP_TEXT) {
            if (pos >= plen || p[pos] > plen - pos - 1) return -1;
            rc = put_text(b, p + pos + 1, p[pos], 0);
            pos += 1 + p[pos];
        } else if (rbak_props_kinds[i] == PROP_U8) {
            if (pos >= plen) return -1;
            rc = put_u64(b, p[pos]);
            pos += 1;
        } else {
            if (plen - pos < 8) return -1;
            uint64_t v = 0;
            for (int k = 0; k < 8; k++) v = v << 8 | p[pos + k];
            rc = put_u64(b, v);
            pos += 8;
        }
        if (rc < 0) return -1;
    }
    if (put(b, "}", 1) < 0 || put_key(b, F_HEADERS, rbak_record_names[F_HEADERS]) < 0 ||
        (*headers ? put(b, PyBytes_AS_STRING(*headers), PyBytes_GET_SIZE(*headers)) : PUT_LITERAL(b, "[]")) < 0 ||
        put_key(b, F_EXCHANGE, rbak_record_names[F_EXCHANGE]) < 0 ||
        put_text(b, s + exchange + 1, s[exchange], 1) < 0 ||
        put_key(b, F_ROUTING_KEY, rbak_record_names[F_ROUTING_KEY]) < 0 ||
        put_text(b, s + routing_key + 1, s[routing_key], 1) < 0 ||
        put_key(b, F_DELIVERY_TAG, rbak_record_names[F_DELIVERY_TAG]) < 0 || put_u64(b, tag) < 0 ||
        put_key(b, F_REDELIVERED, rbak_record_names[F_REDELIVERED]) < 0 ||
        (redelivered ? PUT_LITERAL(b, "true") : PUT_LITERAL(b, "false")) < 0 ||
        put_key(b, F_BACKED_UP_AT, rbak_record_names[F_BACKED_UP_AT]) < 0 || put_u64(b, *stamp) < 0 ||
        put_key(b, F_SOURCE_QUEUE, rbak_record_names[F_SOURCE_QUEUE]) < 0 || put_str(b, queue) < 0 ||
        put_key(b, F_SOURCE_VHOST, rbak_record_names[F_SOURCE_VHOST]) < 0 || put_str(b, vhost) < 0)
        return -1;
    return put(b, "}", 1);
}

/* staged_json(staged, queue, vhost) -> (record JSON, backed_up_at), or None: leave it to staged_records.py. */
PyObject *rbak_staged_json(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *queue, *vhost;
    if (!PyArg_ParseTuple(args, "y*UU", &view, &queue, &vhost)) return NULL;
    if (rbak.props_type == NULL) { PyBuffer_Release(&view); Py_RETURN_NONE; }
    Py_ssize_t size = 4 * view.len + 512;
    wbuf b = {PyBytes_FromStringAndSize(NULL, size), NULL, NULL};
    if (b.out == NULL) { PyBuffer_Release(&view); return NULL; }
    b.p = PyBytes_AS_STRING(b.out);
    b.end = b.p + size;
    uint64_t stamp = 0;
    PyObject *headers = NULL;
    int rc = put_staged(&b, (const unsigned char *)view.buf, view.len, queue, vhost, &stamp, &headers);
    Py_XDECREF(headers);
    PyBuffer_Release(&view);
    if (rc < 0 || _PyBytes_Resize(&b.out, b.p - PyBytes_AS_STRING(b.out)) < 0) {
        Py_XDECREF(b.out);
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NK)", b.out, (unsigned long long)stamp);
}
