/* The body's JSON array of byte values, read into bytes.
 *
 * Grammar accepted (strict JSON): '[' ws ( num ws ( ',' ws num ws )* )? ']'
 * where num is 0 or [1-9][0-9]{0,2} with value <= 255.
 *
 * The careful loop reads one value at a time and names the first defect. On
 * x86 CPUs with SSSE3 a vector loop goes first: our writer and serde write
 * the array compact ("104,101,108,..."), and 16 bytes of that (4 to 8
 * values) take one pass of a dozen vector instructions instead of a branch or
 * two per digit. It stops at anything else (whitespace, the closing bracket,
 * a defect) and leaves that to the careful loop, so both accept exactly the
 * same arrays; tests/codec/test_speedups.py runs both. */
#include "_speedups.h"

#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RBAK_SSSE3 1
#include <tmmintrin.h>
#endif

static int use_vectors;

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

#ifdef RBAK_SSSE3
/* For each pattern of commas in 8 bytes of digits and commas that start a value: where each value's
 * digits go (right-aligned in a 4-byte slot as hundreds, tens, ones; 0x80 gives a zero byte), and
 * which slot bytes hold the first digit of a value of 2 or 3 digits (it must not be 0). */
typedef struct {
    unsigned char shuffle[16], lead[16];
} window_plan;

static window_plan plans[256];
static unsigned char plan_count[256]; /* values the 8 bytes complete; 0: not a well-formed run */

static void build_plans(void) {
    for (int m = 0; m < 256; m++) {
        window_plan *p = &plans[m];
        int start = 0, count = 0;
        memset(p->shuffle, 0x80, sizeof p->shuffle);
        memset(p->lead, 0, sizeof p->lead);
        for (int j = 0; j < 8; j++) {
            if (!(m >> j & 1)) continue;
            int len = j - start;
            if (len < 1 || len > 3) { count = 0; break; }
            for (int d = 0; d < len; d++) p->shuffle[4 * count + 3 - len + d] = (unsigned char)(start + d);
            if (len > 1) p->lead[4 * count + 3 - len] = 0xFF;
            count++;
            start = j + 1;
        }
        plan_count[m] = (unsigned char)count;
    }
}

/* The values of the 8-byte window at `offset` of the 16 digits (t = bytes - '0'), its comma mask m:
 * up to 4 bytes at o (4 are written); returns the values' count and sets *used; 0 when not well formed. */
__attribute__((target("ssse3"))) static inline int window(__m128i t, unsigned m, int offset, unsigned char *o, int *used) {
    const __m128i weights = _mm_setr_epi8(100, 10, 1, 0, 100, 10, 1, 0, 100, 10, 1, 0, 100, 10, 1, 0);
    const __m128i low_bytes = _mm_setr_epi8(0, 4, 8, 12, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128);
    const window_plan *p = &plans[m & 0xFF];
    __m128i x = _mm_shuffle_epi8(t, _mm_add_epi8(_mm_loadu_si128((const __m128i *)p->shuffle), _mm_set1_epi8((char)offset)));
    __m128i values = _mm_madd_epi16(_mm_maddubs_epi16(x, weights), _mm_set1_epi16(1));
    __m128i leading_zero = _mm_and_si128(_mm_cmpeq_epi8(x, _mm_setzero_si128()), _mm_loadu_si128((const __m128i *)p->lead));
    int32_t four = _mm_cvtsi128_si32(_mm_shuffle_epi8(values, low_bytes));
    memcpy(o, &four, 4);
    *used = 32 - __builtin_clz((m & 0xFF) | 1);
    if (_mm_movemask_epi8(leading_zero) | _mm_movemask_epi8(_mm_cmpgt_epi32(values, _mm_set1_epi32(255)))) return 0;
    return plan_count[m & 0xFF];
}

/* From s[*i] (the start of a value) while 16 bytes of digits and commas remain: values to o[*k...]. */
__attribute__((target("ssse3"))) static void vector_values(const unsigned char *s, Py_ssize_t n, Py_ssize_t *i, unsigned char *o, Py_ssize_t *k) {
    const __m128i zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9), comma = _mm_set1_epi8(',');
    while (*i + 16 <= n) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + *i)), t = _mm_sub_epi8(v, zero);
        unsigned digits = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(t, nine), t));
        unsigned commas = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, comma));
        int used1, used2, first, second;
        if ((digits | commas) != 0xFFFF || !(first = window(t, commas, 0, o + *k, &used1))) return;
        if (!(second = window(t, commas >> used1, used1, o + *k + first, &used2))) return;
        *k += first + second;
        *i += used1 + used2;
    }
}
#endif

static PyObject *fail(PyObject *out, const char *msg, Py_ssize_t at) {
    Py_XDECREF(out);
    PyErr_Format(PyExc_ValueError, "%s at byte %zd", msg, at);
    return NULL;
}

PyObject *rbak_read_byte_array(const unsigned char *s, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t *end) {
    Py_ssize_t i = pos, k = 0;
    if (pos < 0 || pos > n) return fail(NULL, "start outside the buffer", pos);
    /* Every value takes a digit and a separator, so the output never exceeds half the input;
     * the vector loop stores 4 bytes at a time, hence the slack. */
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n - pos) / 2 + 8);
    if (out == NULL) return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    while (i < n && is_ws(s[i])) i++;
    if (i < n && s[i] == ']') { i++; goto done; }
    for (;;) {
#ifdef RBAK_SSSE3
        if (use_vectors) {
            vector_values(s, n, &i, o, &k);
            while (i < n && is_ws(s[i])) i++; /* it stops after a ',' or where it started */
        }
#endif
        if (i >= n || s[i] < '0' || s[i] > '9') return fail(out, "expected a byte value", i);
        Py_ssize_t start = i++;
        unsigned int v = s[start] - '0';
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (i - start >= 3 || v == 0) return fail(out, "not a byte value", start);
            v = v * 10 + (s[i++] - '0');
        }
        if (v > 255) return fail(out, "byte value over 255", start);
        o[k++] = (unsigned char)v;
        while (i < n && is_ws(s[i])) i++;
        if (i < n && s[i] == ',') { i++; while (i < n && is_ws(s[i])) i++; continue; }
        if (i < n && s[i] == ']') { i++; break; }
        return fail(out, "expected ',' or ']'", i);
    }
done:
    if (_PyBytes_Resize(&out, k) < 0) return NULL;
    *end = i;
    return out;
}

/* vectors(enable) -> bool: whether the vector loop runs; `enable` (None: leave as is) turns it off
 * or back on where the CPU has SSSE3. For tests, which hold the two loops equal. */
PyObject *rbak_vectors(PyObject *self, PyObject *enable) {
#ifdef RBAK_SSSE3
    if (enable != Py_None) use_vectors = PyObject_IsTrue(enable) && __builtin_cpu_supports("ssse3");
#endif
    return PyBool_FromLong(use_vectors);
}

void rbak_init_body(void) {
#ifdef RBAK_SSSE3
    build_plans();
    __builtin_cpu_init();
    use_vectors = __builtin_cpu_supports("ssse3");
#endif
}
