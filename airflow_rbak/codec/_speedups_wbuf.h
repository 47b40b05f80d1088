/* The write side's JSON buffer: a growing (or caller-bounded) byte buffer and the strings, integers and keys
 * written into it as serde writes them, for _speedups_write.c alone (included there once). */
#ifndef RBAK_SPEEDUPS_WBUF_H
#define RBAK_SPEEDUPS_WBUF_H

#include "_speedups.h"

#include <string.h>

static const char HEX[] = "0123456789abcdef";

typedef struct {
    PyObject *out; /* a bytes object of its own, grown as needed and cut to size at the end;
                      NULL: a fixed region of the caller's buffer, and running out of it fails */
    char *p, *end;
} wbuf;

static int reserve(wbuf *b, Py_ssize_t need) {
    if (b->end - b->p >= need) return 0;
    if (b->out == NULL) return -1;
    Py_ssize_t used = b->p - PyBytes_AS_STRING(b->out), size = PyBytes_GET_SIZE(b->out) * 3 / 2;
    if (size < used + need) size = used + need;
    if (_PyBytes_Resize(&b->out, size) < 0) return -1;
    b->p = PyBytes_AS_STRING(b->out) + used;
    b->end = PyBytes_AS_STRING(b->out) + size;
    return 0;
}

static int put(wbuf *b, const char *s, Py_ssize_t n) {
    if (reserve(b, n) < 0) return -1;
    memcpy(b->p, s, (size_t)n);
    b->p += n;
    return 0;
}

#define PUT_LITERAL(b, s) put((b), (s), (Py_ssize_t)(sizeof(s) - 1))

/* A JSON string as serde and orjson escape it: '"', '\\' and control characters only. */
static int put_str(wbuf *b, PyObject *str) {
    Py_ssize_t n, extra = 0;
    const unsigned char *u = (const unsigned char *)PyUnicode_AsUTF8AndSize(str, &n);
    if (u == NULL) return -1; /* lone surrogates: orjson refuses them, so the Python path reports it */
    for (Py_ssize_t i = 0; i < n; i++)
        if (u[i] < 0x20 || u[i] == '"' || u[i] == '\\')
            extra += (u[i] == '\b' || u[i] == '\f' || u[i] == '\n' || u[i] == '\r' || u[i] == '\t' || u[i] >= 0x20) ? 1 : 5;
    if (reserve(b, n + extra + 2) < 0) return -1;
    char *p = b->p;
    *p++ = '"';
    if (extra == 0) {
        memcpy(p, u, (size_t)n);
        p += n;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned char c = u[i];
            if (c >= 0x20 && c != '"' && c != '\\') { *p++ = (char)c; continue; }
            *p++ = '\\';
            switch (c) {
            case '"': *p++ = '"'; break;
            case '\\': *p++ = '\\'; break;
            case '\b': *p++ = 'b'; break;
            case '\f': *p++ = 'f'; break;
            case '\n': *p++ = 'n'; break;
            case '\r': *p++ = 'r'; break;
            case '\t': *p++ = 't'; break;
            default: *p++ = 'u'; *p++ = '0'; *p++ = '0'; *p++ = HEX[c >> 4]; *p++ = HEX[c & 15];
            }
        }
    }
    *p++ = '"';
    b->p = p;
    return 0;
}

/* An int that fits 64 bits, signed or unsigned (orjson's range; beyond it the Python path raises). */
static int put_int(wbuf *b, PyObject *v) {
    char tmp[24], *q = tmp + sizeof tmp;
    int overflow, negative = 0;
    unsigned long long u;
    if (!PyLong_CheckExact(v)) return -1;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow < 0) return -1;
    if (overflow > 0) {
        u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    } else {
        negative = x < 0;
        u = negative ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    }
    do { *--q = (char)('0' + u % 10); u /= 10; } while (u);
    if (negative) *--q = '-';
    return put(b, q, tmp + sizeof tmp - q);
}

/* `{"name":` for the first key of an object, `,"name":` for the others (names are short ASCII). */
static int put_key(wbuf *b, int index, const char *name) {
    size_t len = strlen(name);
    if (reserve(b, (Py_ssize_t)len + 4) < 0) return -1;
    char *p = b->p;
    *p++ = index ? ',' : '{';
    *p++ = '"';
    memcpy(p, name, len);
    p += len;
    *p++ = '"';
    *p++ = ':';
    b->p = p;
    return 0;
}

/* Optional str or int (None is null); anything else is left to the Python path. */
static int put_scalar(wbuf *b, PyObject *v, int is_int) {
    if (v == Py_None) return PUT_LITERAL(b, "null");
    if (is_int) return put_int(b, v);
    return PyUnicode_CheckExact(v) ? put_str(b, v) : -1;
}

#endif
