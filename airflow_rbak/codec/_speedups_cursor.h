/* The read side's JSON cursor: whitespace, literals, strings (strict UTF-8, escapes), 64-bit integers and
 * the schema's keys, for _speedups_read.c alone (included there once; a unit of its own would only export
 * these helpers). */
#ifndef RBAK_SPEEDUPS_CURSOR_H
#define RBAK_SPEEDUPS_CURSOR_H

#include "_speedups.h"

#include <string.h>

typedef struct {
    const unsigned char *s;
    Py_ssize_t i, n;
    int check; /* check the header values without building them (scan_records keeps none) */
} cursor;

enum { K_OTHER, K_STRING, K_LONG, K_SHORT, K_TIMESTAMP, K_BOOL, K_BYTES, K_FLOAT, K_DOUBLE, K_TABLE, K_ARRAY };

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_ws(cursor *c) {
    while (c->i < c->n && is_ws(c->s[c->i])) c->i++;
}

/* Consume `ch` (after optional whitespace) if it is next. */
static int eat(cursor *c, unsigned char ch) {
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == ch) { c->i++; return 1; }
    return 0;
}

static int hex4(const unsigned char *p, unsigned int *out) {
    unsigned int v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char h = p[k];
        unsigned int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 16;
        if (d > 15) return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

/* The escaped string s[start..end) unescaped into UTF-8 at out (room for end - start bytes); its length or -1. */
static Py_ssize_t unescape(const unsigned char *s, Py_ssize_t i, Py_ssize_t end, unsigned char *out) {
    unsigned char *o = out;
    while (i < end) {
        unsigned int cp, low;
        if (s[i] != '\\') { *o++ = s[i++]; continue; }
        if (i + 1 >= end) return -1;
        switch (s[i + 1]) {
        case '"': case '\\': case '/': *o++ = s[i + 1]; i += 2; continue;
        case 'b': *o++ = '\b'; i += 2; continue;
        case 'f': *o++ = '\f'; i += 2; continue;
        case 'n': *o++ = '\n'; i += 2; continue;
        case 'r': *o++ = '\r'; i += 2; continue;
        case 't': *o++ = '\t'; i += 2; continue;
        case 'u': break;
        default: return -1;
        }
        if (i + 6 > end || !hex4(s + i + 2, &cp)) return -1;
        i += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return -1; /* a lone low surrogate: orjson refuses it */
        if (cp >= 0xD800 && cp <= 0xDBFF) {          /* a pair: 12 bytes of escapes become 4 of UTF-8 */
            if (i + 6 > end || s[i] != '\\' || s[i + 1] != 'u' || !hex4(s + i + 2, &low) || low < 0xDC00 || low > 0xDFFF)
                return -1;
            i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        if (cp < 0x80) { *o++ = (unsigned char)cp; }
        else if (cp < 0x800) { *o++ = 0xC0 | (cp >> 6); *o++ = 0x80 | (cp & 0x3F); }
        else if (cp < 0x10000) { *o++ = 0xE0 | (cp >> 12); *o++ = 0x80 | ((cp >> 6) & 0x3F); *o++ = 0x80 | (cp & 0x3F); }
        else { *o++ = 0xF0 | (cp >> 18); *o++ = 0x80 | ((cp >> 12) & 0x3F); *o++ = 0x80 | ((cp >> 6) & 0x3F); *o++ = 0x80 | (cp & 0x3F); }
    }
    return o - out;
}

/* A JSON string as str (strict UTF-8, as orjson reads it); NULL if there is none or it is malformed. */
static PyObject *read_str(cursor *c) {
    int plain = 1, ascii = 1;
    if (!eat(c, '"')) return NULL;
    Py_ssize_t start = c->i;
    while (c->i < c->n && c->s[c->i] != '"') {
        unsigned char ch = c->s[c->i];
        if (ch < 0x20) return NULL;
        if (ch == '\\') { plain = 0; c->i++; }
        ascii &= ch < 0x80;
        c->i++;
    }
    if (c->i >= c->n) return NULL;
    Py_ssize_t end = c->i++;
    if (plain && ascii) {
        PyObject *str = PyUnicode_New(end - start, 127);
        if (str != NULL) memcpy(PyUnicode_1BYTE_DATA(str), c->s + start, (size_t)(end - start));
        return str;
    }
    if (plain) return PyUnicode_DecodeUTF8((const char *)c->s + start, end - start, "strict");
    unsigned char stack[256], *buf = end - start <= 256 ? stack : PyMem_Malloc((size_t)(end - start));
    if (buf == NULL) return PyErr_NoMemory();
    Py_ssize_t len = unescape(c->s, start, end, buf);
    PyObject *str = len < 0 ? NULL : PyUnicode_DecodeUTF8((const char *)buf, len, "strict");
    if (buf != stack) PyMem_Free(buf);
    return str;
}

/* A JSON integer that fits 64 bits: sign and magnitude. 0 if there is none, or it is a float or too large. */
static int read_int(cursor *c, int *negative, unsigned long long *magnitude) {
    skip_ws(c);
    const unsigned char *s = c->s;
    Py_ssize_t i = c->i, n = c->n, start;
    unsigned long long m = 0;
    *negative = i < n && s[i] == '-';
    i += *negative;
    start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        unsigned int d = s[i++] - '0';
        if (m > (ULLONG_MAX - d) / 10) return 0;
        m = m * 10 + d;
    }
    if (i == start || (s[start] == '0' && i - start > 1)) return 0;
    if (i < n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E')) return 0; /* a float: left to the Python path */
    if (*negative && m > (1ULL << 63)) return 0;
    *negative &= m != 0;
    *magnitude = m;
    c->i = i;
    return 1;
}

/* An integer in [lo, hi] (hi may be ULLONG_MAX: unsigned 64-bit) as int; NULL if none or out of range. */
static PyObject *read_ranged(cursor *c, long long lo, unsigned long long hi) {
    int negative;
    unsigned long long m;
    if (!read_int(c, &negative, &m)) return NULL;
    if (negative) return m <= 0ULL - (unsigned long long)lo && lo < 0 ? PyLong_FromLongLong((long long)(0ULL - m)) : NULL;
    return m <= hi ? PyLong_FromUnsignedLongLong(m) : NULL;
}

static PyObject *read_literal(cursor *c, const char *text, PyObject *value) {
    size_t len = strlen(text);
    skip_ws(c);
    if (c->n - c->i < (Py_ssize_t)len || memcmp(c->s + c->i, text, len) != 0) return NULL;
    c->i += (Py_ssize_t)len;
    return Py_NewRef(value);
}

static PyObject *read_bool(cursor *c) {
    skip_ws(c);
    return c->i < c->n && c->s[c->i] == 't' ? read_literal(c, "true", Py_True) : read_literal(c, "false", Py_False);
}

/* null as None, or what `read` reads. */
static PyObject *read_optional(cursor *c, PyObject *(*read)(cursor *)) {
    skip_ws(c);
    return c->i < c->n && c->s[c->i] == 'n' ? read_literal(c, "null", Py_None) : read(c);
}

static int key_is(const char *name, const unsigned char *key, size_t len) {
    return name[0] == key[0] && strncmp(name, (const char *)key, len) == 0 && name[len] == '\0';
}

/* The index of the key read next in names (a plain ASCII key followed by ':'), or -1. Keys usually
 * come in the spec's order, so the one after the previous key (`expected`) is tried first. */
static int read_key(cursor *c, const char *const *names, int count, int expected) {
    if (!eat(c, '"')) return -1;
    Py_ssize_t start = c->i;
    while (c->i < c->n && c->s[c->i] != '"' && c->s[c->i] != '\\') c->i++;
    if (c->i >= c->n || c->s[c->i] != '"') return -1;
    size_t len = (size_t)(c->i++ - start);
    if (len == 0 || !eat(c, ':')) return -1;
    if (expected < count && key_is(names[expected], c->s + start, len)) return expected;
    for (int k = 0; k < count; k++)
        if (key_is(names[k], c->s + start, len)) return k;
    return -1; /* an unknown key: the Python path ignores it */
}

#endif
