/* Shared state of the codec's optional C accelerator (_speedups*.c).
 *
 * The accelerator reads and writes the common shape of a record; whenever it
 * meets anything else it answers None and records.py takes the pure-Python
 * path, which is the reference: the two give identical results (held equal by
 * tests/codec/test_speedups.py). */
#ifndef RBAK_SPEEDUPS_H
#define RBAK_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define RBAK_API_VERSION 8 /* records.py checks it: bump it when the module's functions change */

enum { N_RECORD = 10, N_PROPS = 13 };
enum { F_BODY, F_PROPERTIES, F_HEADERS, F_EXCHANGE, F_ROUTING_KEY, F_DELIVERY_TAG, F_REDELIVERED, F_BACKED_UP_AT,
       F_SOURCE_QUEUE, F_SOURCE_VHOST };
enum { PROP_TEXT, PROP_U8, PROP_I64 }; /* a property's kind (codec/properties.py) */

/* Set once by configure() from records.py; NULL until then (the functions then answer None). */
typedef struct {
    PyTypeObject *record_type, *props_type, *header_type;
    PyObject *record_slots[N_RECORD]; /* member descriptors, in the spec's field order */
    PyObject *props_slots[N_PROPS];
    PyObject *kind_slot, *value_slot; /* HeaderValue.kind, HeaderValue.value */
    PyObject *record_keys[N_RECORD];  /* the JSON keys as str, spec order */
    PyObject *props_keys[N_PROPS];
    PyObject *void_value;             /* the shared HeaderValue("Void") the Python reader returns */
    PyObject *loads;                  /* orjson.loads: the C reader checks a header value's keys itself */
    PyObject *header_from_json;       /* Python reader of one header value the C reader leaves to it */
    PyObject *header_to_json;         /* Python writer of one header value (returns its JSON bytes) */
    PyObject *staged_headers;         /* Python reader of a staged delivery's header table: (JSON, end) */
} rbak_state;

extern rbak_state rbak;
extern const char *const rbak_record_names[N_RECORD];
extern const char *rbak_props_names[N_PROPS];  /* from codec/properties.py, set by configure() */
extern unsigned char rbak_props_kinds[N_PROPS];

/* The body's JSON array of byte values from s[pos..n), pos just after '['; *end is set just after ']'.
 * NULL with ValueError when the array is malformed. */
PyObject *rbak_read_byte_array(const unsigned char *s, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t *end);

/* A record's fields parsed from its JSON s[0..n) into values (new references, spec order): 0, or -1 when the
 * record is left to the Python path. values must start all NULL; the caller releases them either way. */
int rbak_decode_fields(const unsigned char *s, Py_ssize_t n, PyObject **values);
/* rbak_decode_fields accepting and refusing the same records, with values[F_HEADERS] None: the header values are
 * checked in C without being built (HeaderValue.from_json's rules; what it cannot tell goes to that reader). */
int rbak_check_fields(const unsigned char *s, Py_ssize_t n, PyObject **values);
/* The BackupRecord of the JSON s[0..n), or NULL (an exception may be set) when it is left to the Python path. */
PyObject *rbak_decode(const unsigned char *s, Py_ssize_t n);
/* The BackupRecord of fields rbak_decode_fields read (borrowed), or NULL with an exception set. */
PyObject *rbak_record_of(PyObject *const *values);

/* The length of the framed record whose u32 prefix is at s[pos], or -1 unless prefix and record lie whole in s[0..n). */
static inline Py_ssize_t rbak_framed_length(const unsigned char *s, Py_ssize_t n, Py_ssize_t pos) {
    if (pos < 0 || n - pos < 4) return -1;
    Py_ssize_t len = (Py_ssize_t)((uint32_t)s[pos] | (uint32_t)s[pos + 1] << 8 | (uint32_t)s[pos + 2] << 16 |
                                  (uint32_t)s[pos + 3] << 24);
    return len > n - pos - 4 ? -1 : len;
}

/* Python-facing functions (METH_O). */
PyObject *rbak_decode_record(PyObject *self, PyObject *data);
PyObject *rbak_encode_record(PyObject *self, PyObject *record);
PyObject *rbak_append_record(PyObject *self, PyObject *args);
PyObject *rbak_read_records(PyObject *self, PyObject *args);
PyObject *rbak_scan_records(PyObject *self, PyObject *args);
PyObject *rbak_select_records(PyObject *self, PyObject *args);
PyObject *rbak_vectors(PyObject *self, PyObject *enable);
PyObject *rbak_format_byte_array(PyObject *self, PyObject *arg);
PyObject *rbak_staged_json(PyObject *self, PyObject *args);
void rbak_init_writer(void);
void rbak_init_body(void);

/* A slot of a trusted instance: new reference, NULL with an exception when unset. */
static inline PyObject *rbak_get(PyObject *slot, PyObject *obj) {
    return Py_TYPE(slot)->tp_descr_get(slot, obj, (PyObject *)Py_TYPE(obj));
}

/* Set a slot of a fresh instance (the frozen dataclass's __setattr__ is bypassed, as records._build does). */
static inline int rbak_set(PyObject *slot, PyObject *obj, PyObject *value) {
    return Py_TYPE(slot)->tp_descr_set(slot, obj, value);
}

#endif
