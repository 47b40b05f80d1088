/* Optional accelerator for the codec's hot loops: a record's body (a JSON array
 * of byte values) and the objects built around it. records.py holds the
 * reference pure-Python path; this module only makes it faster.
 *
 * This file: the module and its configuration. The body array:
 * _speedups_body.c; a record read: _speedups_read.c; runs of framed records
 * read or checked: _speedups_frames.c; written: _speedups_write.c. */
#include "_speedups.h"

rbak_state rbak;

const char *const rbak_record_names[N_RECORD] = {
    "body", "properties", "headers", "exchange", "routing_key", "delivery_tag", "redelivered", "backed_up_at",
    "source_queue", "source_vhost"};
/* Filled by configure() from codec/properties.py's table: the C code keeps no list of its own. */
const char *rbak_props_names[N_PROPS];
unsigned char rbak_props_kinds[N_PROPS];

/* parse_byte_array(buffer, pos) -> (bytes, end): pos is just after '['; end is just after ']'. */
static PyObject *parse_byte_array(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    if (!PyArg_ParseTuple(args, "y*n", &view, &pos)) return NULL;
    PyObject *body = rbak_read_byte_array((const unsigned char *)view.buf, view.len, pos, &end);
    PyBuffer_Release(&view);
    return body == NULL ? NULL : Py_BuildValue("(Nn)", body, end);
}

/* The member descriptor of `name` on a slotted class, checked to be one. */
static PyObject *slot_of(PyTypeObject *cls, const char *name) {
    PyObject *slot = PyObject_GetAttrString((PyObject *)cls, name);
    if (slot != NULL && !(PyObject_TypeCheck(slot, &PyMemberDescr_Type))) {
        Py_DECREF(slot);
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", cls->tp_name, name);
        return NULL;
    }
    return slot;
}

static int fill(PyTypeObject *cls, const char *const *names, int count, PyObject **slots, PyObject **keys) {
    for (int i = 0; i < count; i++) {
        Py_XSETREF(slots[i], slot_of(cls, names[i]));
        Py_XSETREF(keys[i], PyUnicode_InternFromString(names[i]));
        if (slots[i] == NULL || keys[i] == NULL) return -1;
    }
    return 0;
}

/* The properties table, ((json_name, kind), ...) in order: names (kept alive by props_keys) and kinds. */
static int fill_properties(PyTypeObject *cls, PyObject *table) {
    if (!PyTuple_Check(table) || PyTuple_GET_SIZE(table) != N_PROPS) {
        PyErr_Format(PyExc_ValueError, "the properties table must be a tuple of %d (name, kind) pairs", N_PROPS);
        return -1;
    }
    for (int i = 0; i < N_PROPS; i++) {
        const char *name, *kind;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(table, i), "ss", &name, &kind)) return -1;
        if (strcmp(kind, "shortstr") == 0) rbak_props_kinds[i] = PROP_TEXT;
        else if (strcmp(kind, "octet") == 0) rbak_props_kinds[i] = PROP_U8;
        else if (strcmp(kind, "timestamp") == 0) rbak_props_kinds[i] = PROP_I64;
        else {
            PyErr_Format(PyExc_ValueError, "property %s: unknown kind %s", name, kind);
            return -1;
        }
        Py_XSETREF(rbak.props_slots[i], slot_of(cls, name));
        Py_XSETREF(rbak.props_keys[i], PyUnicode_InternFromString(name));
        if (rbak.props_slots[i] == NULL || rbak.props_keys[i] == NULL) return -1;
        rbak_props_names[i] = PyUnicode_AsUTF8(rbak.props_keys[i]);
        if (rbak_props_names[i] == NULL) return -1;
    }
    return 0;
}

/* The properties as configured: ((json_name, kind), ...), for the test that holds them to the table. */
static PyObject *properties(PyObject *self, PyObject *unused) {
    static const char *const kinds[] = {"shortstr", "octet", "timestamp"};
    if (rbak.props_type == NULL) Py_RETURN_NONE;
    PyObject *out = PyTuple_New(N_PROPS);
    for (int i = 0; out != NULL && i < N_PROPS; i++) {
        PyObject *pair = Py_BuildValue("(ss)", rbak_props_names[i], kinds[rbak_props_kinds[i]]);
        if (pair == NULL) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, i, pair);
    }
    return out;
}

/* configure(BackupRecord, BackupProperties, properties table, HeaderValue, VOID, header_from_json, header_to_json, loads) */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyTypeObject *record_type, *props_type, *header_type;
    PyObject *table, *void_value, *from_json, *to_json, *loads;
    if (!PyArg_ParseTuple(args, "O!O!OO!OOOO", &PyType_Type, &record_type, &PyType_Type, &props_type, &table,
                          &PyType_Type, &header_type, &void_value, &from_json, &to_json, &loads))
        return NULL;
    if (fill(record_type, rbak_record_names, N_RECORD, rbak.record_slots, rbak.record_keys) < 0 ||
        fill_properties(props_type, table) < 0)
        return NULL;
    Py_XSETREF(rbak.kind_slot, slot_of(header_type, "kind"));
    Py_XSETREF(rbak.value_slot, slot_of(header_type, "value"));
    if (rbak.kind_slot == NULL || rbak.value_slot == NULL) return NULL;
    Py_INCREF(record_type); Py_XSETREF(rbak.record_type, record_type);
    Py_INCREF(props_type); Py_XSETREF(rbak.props_type, props_type);
    Py_INCREF(header_type); Py_XSETREF(rbak.header_type, header_type);
    Py_INCREF(void_value); Py_XSETREF(rbak.void_value, void_value);
    Py_INCREF(from_json); Py_XSETREF(rbak.header_from_json, from_json);
    Py_INCREF(to_json); Py_XSETREF(rbak.header_to_json, to_json);
    Py_INCREF(loads); Py_XSETREF(rbak.loads, loads);
    Py_RETURN_NONE;
}

/* configure_staged(read_headers): staged_records.py's reader of a header table, (property list, offset, dropped
 * headers code) -> (its JSON, the offset after it); staged_json leaves records with a table to Python until then. */
static PyObject *configure_staged(PyObject *self, PyObject *callback) {
    if (!PyCallable_Check(callback)) return PyErr_Format(PyExc_TypeError, "configure_staged takes a callable");
    Py_INCREF(callback);
    Py_XSETREF(rbak.staged_headers, callback);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"parse_byte_array", parse_byte_array, METH_VARARGS, "Parse a JSON array of byte values into bytes."},
    {"configure", configure, METH_VARARGS, "Give the accelerator the record classes, the properties and the Python fallbacks."},
    {"properties", properties, METH_NOARGS, "The properties table configure() was given, as the C code holds it."},
    {"decode_record", rbak_decode_record, METH_O, "A record's JSON as a BackupRecord, or None: use the Python path."},
    {"encode_record", rbak_encode_record, METH_O, "A BackupRecord's JSON as bytes, or None: use the Python path."},
    {"read_records", rbak_read_records, METH_VARARGS, "Decode a run of framed records: (list, next offset)."},
    {"scan_records", rbak_scan_records, METH_VARARGS, "Check a run of framed records, keeping counts and timestamps."},
    {"select_records", rbak_select_records, METH_VARARGS, "Decode the records of a run a filter may select: (pairs, pos, count)."},
    {"vectors", rbak_vectors, METH_O, "Whether the body reader's SSSE3 loop runs; True/False turns it on/off (tests)."},
    {"append_record", rbak_append_record, METH_VARARGS, "Frame a BackupRecord into a bytearray at an offset; -1: use Python."},
    {"format_byte_array", rbak_format_byte_array, METH_O, "Write bytes as a compact JSON array of byte values."},
    {"configure_staged", configure_staged, METH_O, "Give staged_json the Python reader of a header table."},
    {"staged_json", rbak_staged_json, METH_VARARGS, "A staged record's JSON and backed_up_at, or None: use the Python path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", "RBAK codec accelerator.", -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    rbak_init_writer();
    rbak_init_body();
    PyObject *m = PyModule_Create(&module);
    /* records.py uses the module only when this matches: a stale build is ignored, not half used. */
    if (m != NULL && PyModule_AddIntConstant(m, "API_VERSION", RBAK_API_VERSION) < 0) Py_CLEAR(m);
    return m;
}
