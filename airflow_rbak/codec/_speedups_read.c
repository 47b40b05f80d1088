/* Reading a record: a parser that knows the BackupRecord schema builds the record
 * straight from its JSON, with the checks record_from_json makes, and without the
 * intermediate dicts and lists a general JSON parser creates. Header values other
 * than strings, integers, Bool and Void go through orjson.loads and
 * HeaderValue.from_json, their keys checked here (skip_header_value). Anything
 * this reader does not accept (an unusual shape, an unknown or repeated key, a
 * wrong type, a value out of range, malformed JSON) makes it answer None;
 * records.py's Python path then reads the record or reports what is wrong with it. */
#include "_speedups.h"

#include <math.h>
#include <string.h>

#include "_speedups_cursor.h"


static int is_tracked(PyObject *obj) { return PyObject_IS_GC(obj) && PyObject_GC_IsTracked(obj); }

/* Leave `obj` out of the cycle collector when it holds no object the collector tracks.
 *
 * A record, its properties, its header pairs and scalar header values hold only
 * str, int, bool, bytes, None and such untracked objects, so they can never be part
 * of a reference cycle (the classes are frozen). CPython untracks tuples and dicts
 * of that kind itself; doing it for these objects at creation keeps the collector
 * from walking every record a caller holds, which cost about as much as parsing
 * the bodies when a segment's records were kept in a list. */
static void untrack_if_atomic(PyObject *obj, PyObject *const *values, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++)
        if (is_tracked(values[i])) return;
    if (is_tracked(obj)) PyObject_GC_UnTrack(obj);
}

/* A fresh instance of a trusted class with `count` slots set from values (borrowed). */
static PyObject *build(PyTypeObject *cls, PyObject *const *slots, PyObject *const *values, int count) {
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (obj == NULL) return NULL;
    for (int i = 0; i < count; i++)
        if (rbak_set(slots[i], obj, values[i]) < 0) { Py_DECREF(obj); return NULL; }
    untrack_if_atomic(obj, values, count);
    return obj;
}

static int kind_code(const unsigned char *s, Py_ssize_t n) {
    if (n == 10 && memcmp(s, "LongString", 10) == 0) return K_STRING;
    if (n == 11 && memcmp(s, "ShortString", 11) == 0) return K_STRING;
    if (n == 4 && memcmp(s, "Long", 4) == 0) return K_LONG;
    if (n == 5 && memcmp(s, "Short", 5) == 0) return K_SHORT;
    if (n == 9 && memcmp(s, "Timestamp", 9) == 0) return K_TIMESTAMP;
    if (n == 4 && memcmp(s, "Bool", 4) == 0) return K_BOOL;
    if (n == 5 && memcmp(s, "Bytes", 5) == 0) return K_BYTES;
    if (n == 5 && memcmp(s, "Float", 5) == 0) return K_FLOAT;
    if (n == 6 && memcmp(s, "Double", 6) == 0) return K_DOUBLE;
    if (n == 5 && memcmp(s, "Table", 5) == 0) return K_TABLE;
    if (n == 5 && memcmp(s, "Array", 5) == 0) return K_ARRAY;
    return K_OTHER;
}

/* How deep skip_header_value follows containers: deeper values are left to the Python path, which refuses them
 * (HeaderValue.from_json's MAX_DEPTH of 64 header levels is at most 3 JSON levels each) or reads them. */
#define SKIP_DEPTH 256

/* Move past one header value's JSON object or array (strings skipped whole); 0 if it does not end, nests deeper
 * than SKIP_DEPTH, or holds an object with a second key.
 *
 * Every object in a header value is a variant's one-key object ({"Table": [...]}), so an object with two keys,
 * repeated or not, is never valid: the Python reader refuses the record and names why. Seeing the second key here,
 * while the value is walked anyway, is the repeated-key check of bounded_json.loads_unique at no extra pass, and
 * the value is then parsed by orjson alone. */
static int skip_header_value(cursor *c) {
    unsigned char open[SKIP_DEPTH];
    Py_ssize_t depth = 0;
    while (c->i < c->n) {
        unsigned char ch = c->s[c->i++];
        if (ch == '"') {
            while (c->i < c->n && c->s[c->i] != '"') c->i += c->s[c->i] == '\\' ? 2 : 1;
            c->i++;
        } else if (ch == '{' || ch == '[') {
            if (depth == SKIP_DEPTH) return 0;
            open[depth++] = ch;
        } else if (ch == '}' || ch == ']') {
            if (--depth == 0) return c->i <= c->n;
        } else if (ch == ',' && depth > 0 && open[depth - 1] == '{') {
            return 0;
        }
    }
    return 0;
}

/* A header value the C reader leaves to Python: orjson reads it (skip_header_value has checked its keys),
 * HeaderValue.from_json checks it. */
static PyObject *header_value_generic(cursor *c, Py_ssize_t start) {
    c->i = start;
    if (!skip_header_value(c)) return NULL;
    PyObject *raw = PyBytes_FromStringAndSize((const char *)c->s + start, c->i - start), *data = NULL, *value = NULL;
    if (raw != NULL) data = PyObject_CallOneArg(rbak.loads, raw);
    if (data != NULL) value = PyObject_CallOneArg(rbak.header_from_json, data);
    Py_XDECREF(raw);
    Py_XDECREF(data);
    return value;
}

/* One header value: "Void", {"Kind": scalar} for the string, integer and Bool variants, or the generic path. */
static PyObject *header_value(cursor *c) {
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == '"') {
        PyObject *text = read_str(c);
        int is_void = text != NULL && PyUnicode_CompareWithASCIIString(text, "Void") == 0;
        Py_XDECREF(text);
        return is_void ? Py_NewRef(rbak.void_value) : NULL;
    }
    Py_ssize_t start = c->i, len;
    if (!eat(c, '{')) return NULL;
    PyObject *kind = read_str(c), *value = NULL, *hv = NULL;
    const char *name = kind == NULL ? NULL : PyUnicode_AsUTF8AndSize(kind, &len);
    if (name == NULL || !eat(c, ':')) { Py_XDECREF(kind); return NULL; }
    switch (kind_code((const unsigned char *)name, len)) {
    case K_STRING: value = read_str(c); break;
    case K_LONG: value = read_ranged(c, INT64_MIN, INT64_MAX); break;
    case K_SHORT: value = read_ranged(c, -32768, 32767); break;
    case K_TIMESTAMP: value = read_ranged(c, 0, ULLONG_MAX); break;
    case K_BOOL: value = read_bool(c); break;
    default: Py_DECREF(kind); return header_value_generic(c, start);
    }
    if (value != NULL && eat(c, '}')) {
        PyObject *slots[2] = {rbak.kind_slot, rbak.value_slot}, *values[2] = {kind, value};
        hv = build(rbak.header_type, slots, values, 2);
    }
    Py_DECREF(kind);
    Py_XDECREF(value);
    return hv;
}

/* Checking a header value without building it, for scan_records: 1 when HeaderValue.from_json would accept the
 * value (the cursor is then after it), 0 when this cannot tell (the caller then reads it as read_records does, so
 * the answer and any refusal stay the Python reader's). Only shapes from_json surely accepts answer 1. */
#define HEADER_MAX_DEPTH 64 /* headers.py's MAX_DEPTH */
static int check_value(cursor *c, int depth);

/* Accept any string (its UTF-8 checked as read_str checks it), and only that. */
static int check_str(cursor *c) {
    PyObject *text = read_str(c);
    Py_XDECREF(text);
    return text != NULL;
}

/* A Bytes array: byte values 0-255 only. */
static int check_bytes(cursor *c) {
    int negative;
    unsigned long long m;
    if (!eat(c, '[')) return 0;
    if (eat(c, ']')) return 1;
    do {
        if (!read_int(c, &negative, &m) || negative || m > 255) return 0;
    } while (eat(c, ','));
    return eat(c, ']');
}

/* A Float's or Double's value: null, or a JSON number (strict grammar) well inside the type's finite range. */
static int check_number(cursor *c, int f32) {
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == 'n') {
        PyObject *null = read_literal(c, "null", Py_None);
        Py_XDECREF(null);
        return null != NULL;
    }
    const unsigned char *s = c->s;
    Py_ssize_t i = c->i, n = c->n, start = c->i, digits;
    char text[64];
    i += i < n && s[i] == '-';
    for (digits = i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
    if (i == digits || (s[digits] == '0' && i - digits > 1)) return 0;
    if (i < n && s[i] == '.') {
        for (digits = ++i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
        if (i == digits) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i += i + 1 < n && (s[i + 1] == '+' || s[i + 1] == '-') ? 2 : 1;
        for (digits = i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
        if (i == digits) return 0;
    }
    if (i - start >= (Py_ssize_t)sizeof text) return 0;
    memcpy(text, s + start, (size_t)(i - start));
    text[i - start] = '\0';
    double value = PyOS_string_to_double(text, NULL, NULL);
    if (value == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (!(fabs(value) <= (f32 ? 3.4e38 : 1e308))) return 0; /* near a bound (or not finite): Python decides */
    c->i = i;
    return 1;
}

/* A Table's [[key, value], ...] (pairs) or an Array's [value, ...], each value one level deeper. */
static int check_list(cursor *c, int depth, int pairs) {
    if (!eat(c, '[')) return 0;
    if (eat(c, ']')) return 1;
    do {
        if (pairs ? !(eat(c, '[') && check_str(c) && eat(c, ',') && check_value(c, depth + 1) && eat(c, ']'))
                  : !check_value(c, depth + 1))
            return 0;
    } while (eat(c, ','));
    return eat(c, ']');
}

static int check_value(cursor *c, int depth) {
    Py_ssize_t len;
    int ok = 0;
    if (depth > HEADER_MAX_DEPTH) return 0;
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == '"') {
        PyObject *text = read_str(c);
        ok = text != NULL && PyUnicode_CompareWithASCIIString(text, "Void") == 0;
        Py_XDECREF(text);
        return ok;
    }
    if (!eat(c, '{')) return 0;
    PyObject *kind = read_str(c), *value = NULL;
    const char *name = kind == NULL ? NULL : PyUnicode_AsUTF8AndSize(kind, &len);
    if (name != NULL && eat(c, ':')) {
        switch (kind_code((const unsigned char *)name, len)) {
        case K_STRING: ok = check_str(c); break;
        case K_LONG: ok = (value = read_ranged(c, INT64_MIN, INT64_MAX)) != NULL; break;
        case K_SHORT: ok = (value = read_ranged(c, -32768, 32767)) != NULL; break;
        case K_TIMESTAMP: ok = (value = read_ranged(c, 0, ULLONG_MAX)) != NULL; break;
        case K_BOOL: ok = (value = read_bool(c)) != NULL; break;
        case K_BYTES: ok = check_bytes(c); break;
        case K_FLOAT: ok = check_number(c, 1); break;
        case K_DOUBLE: ok = check_number(c, 0); break;
        case K_TABLE: ok = check_list(c, depth, 1); break;
        case K_ARRAY: ok = check_list(c, depth, 0); break;
        default: ok = 0;
        }
    }
    Py_XDECREF(kind);
    Py_XDECREF(value);
    if (PyErr_Occurred()) PyErr_Clear();
    return ok && eat(c, '}'); /* a second key: not one-key, so not valid; the Python reader names why */
}

/* The header table checked (None) as read_headers would read it: each value in C, or when check_value cannot
 * tell, by the reader itself; NULL when a pair is not accepted. */
static PyObject *check_headers(cursor *c) {
    if (!eat(c, '[')) return NULL;
    if (eat(c, ']')) return Py_NewRef(Py_None);
    do {
        if (!eat(c, '[') || !check_str(c) || !eat(c, ',')) return NULL;
        Py_ssize_t start = c->i;
        if (!check_value(c, 1)) {
            c->i = start;
            PyObject *value = header_value(c);
            if (value == NULL) return NULL;
            Py_DECREF(value);
        }
        if (!eat(c, ']')) return NULL;
    } while (eat(c, ','));
    return eat(c, ']') ? Py_NewRef(Py_None) : NULL;
}

/* [[key, value], ...] as a tuple of (str, HeaderValue) pairs; in check mode None once every pair is valid. */
static PyObject *read_headers(cursor *c) {
    if (c->check) return check_headers(c);
    PyObject *pairs = PyList_New(0), *out = NULL;
    if (pairs == NULL || !eat(c, '[')) goto done;
    if (!eat(c, ']')) {
        do {
            PyObject *key = NULL, *value = NULL, *pair = NULL;
            if (eat(c, '[') && (key = read_str(c)) != NULL && eat(c, ',') && (value = header_value(c)) != NULL && eat(c, ']'))
                pair = PyTuple_Pack(2, key, value);
            if (pair != NULL) untrack_if_atomic(pair, &PyTuple_GET_ITEM(pair, 0), 2);
            Py_XDECREF(key);
            Py_XDECREF(value);
            if (pair == NULL || PyList_Append(pairs, pair) < 0) { Py_XDECREF(pair); goto done; }
            Py_DECREF(pair);
        } while (eat(c, ','));
        if (!eat(c, ']')) goto done;
    }
    out = PyList_AsTuple(pairs);
    if (out != NULL) untrack_if_atomic(out, &PyTuple_GET_ITEM(out, 0), PyTuple_GET_SIZE(out));
done:
    Py_XDECREF(pairs);
    return out;
}

static PyObject *read_text(cursor *c) { return read_str(c); }
static PyObject *read_u8(cursor *c) { return read_ranged(c, 0, 255); }
static PyObject *read_i64(cursor *c) { return read_ranged(c, INT64_MIN, INT64_MAX); }

/* The properties object: absent keys are None; an unknown or repeated key sends the record to the Python path. */
static PyObject *read_properties(cursor *c) {
    PyObject *values[N_PROPS] = {NULL}, *props = NULL;
    int k = -1;
    if (!eat(c, '{')) return NULL;
    if (!eat(c, '}')) {
        do {
            k = read_key(c, rbak_props_names, N_PROPS, k + 1);
            if (k < 0 || values[k] != NULL) goto done;
            values[k] = read_optional(c, rbak_props_kinds[k] == PROP_U8 ? read_u8 : rbak_props_kinds[k] == PROP_I64 ? read_i64 : read_text);
            if (values[k] == NULL) goto done;
        } while (eat(c, ','));
        if (!eat(c, '}')) goto done;
    }
    for (int j = 0; j < N_PROPS; j++)
        if (values[j] == NULL) values[j] = Py_NewRef(Py_None);
    props = build(rbak.props_type, rbak.props_slots, values, N_PROPS);
done:
    for (int j = 0; j < N_PROPS; j++) Py_XDECREF(values[j]);
    return props;
}

static PyObject *read_body(cursor *c) {
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == 'n') {
        PyObject *null = read_literal(c, "null", Py_None);
        Py_XDECREF(null);
        return null == NULL ? NULL : PyBytes_FromStringAndSize(NULL, 0);
    }
    if (!eat(c, '[')) return NULL;
    PyObject *body = rbak_read_byte_array(c->s, c->n, c->i, &c->i);
    if (body == NULL) PyErr_Clear();
    return body;
}

static PyObject *read_field(cursor *c, int k) {
    switch (k) {
    case F_BODY: return read_body(c);
    case F_PROPERTIES: return read_properties(c);
    case F_HEADERS: return read_headers(c);
    case F_DELIVERY_TAG: return read_ranged(c, 0, ULLONG_MAX);
    case F_REDELIVERED: return read_bool(c);
    case F_BACKED_UP_AT: return read_i64(c);
    default: return read_str(c);
    }
}

/* The record's fields into values: see _speedups.h. */
static int read_fields(const unsigned char *s, Py_ssize_t n, PyObject **values, int check) {
    cursor c = {s, 0, n, check};
    int k = -1;
    if (!eat(&c, '{')) return -1;
    do {
        k = read_key(&c, rbak_record_names, N_RECORD, k + 1);
        if (k < 0 || values[k] != NULL || (values[k] = read_field(&c, k)) == NULL) return -1;
    } while (eat(&c, ','));
    if (!eat(&c, '}')) return -1;
    skip_ws(&c);
    if (c.i != c.n) return -1;
    for (int j = 0; j < N_RECORD; j++)
        if (values[j] == NULL) return -1; /* a missing field: the Python path names it */
    return 0;
}

int rbak_decode_fields(const unsigned char *s, Py_ssize_t n, PyObject **values) { return read_fields(s, n, values, 0); }

int rbak_check_fields(const unsigned char *s, Py_ssize_t n, PyObject **values) { return read_fields(s, n, values, 1); }

PyObject *rbak_record_of(PyObject *const *values) {
    return build(rbak.record_type, rbak.record_slots, values, N_RECORD);
}

PyObject *rbak_decode(const unsigned char *s, Py_ssize_t n) {
    PyObject *values[N_RECORD] = {NULL}, *record = NULL;
    if (rbak_decode_fields(s, n, values) == 0) record = rbak_record_of(values);
    for (int j = 0; j < N_RECORD; j++) Py_XDECREF(values[j]);
    return record;
}

PyObject *rbak_decode_record(PyObject *self, PyObject *data) {
    Py_buffer view;
    if (rbak.loads == NULL) Py_RETURN_NONE;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) { PyErr_Clear(); Py_RETURN_NONE; }
    PyObject *record = rbak_decode((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    if (record == NULL) { PyErr_Clear(); Py_RETURN_NONE; }
    return record;
}
