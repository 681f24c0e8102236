/* Optional accelerator for launcher.metrics.parser: verl step lines -> one JSON text for orjson.

   encode(rests) takes the text after "step:" of many step lines ("12 - actor/lr:1e-06 - ...") and returns
   (body, declined, patches):
     body      JSON bytes of a list with one entry per line: [step, {key: value, ...}] or null (declined);
     declined  indices of the lines it did not take: the caller reads those with the reference parser;
     patches   (index, key, float) for values JSON cannot carry (nan, inf, a finite value too large for a
               double): the caller sets them after orjson.loads; body holds null at their place.

   It accepts a line only when the reference (`_items` in parser.py, `_parse` for the step number) reads it,
   and only as it reads it; anything else is declined, never guessed. What it accepts:
     step      ASCII digits, at most 18 significant, then the end or " - ";
     item      split on " - " left to right; the key is the text before the item's LAST ':', not empty
               (escaped for JSON), the value the text after it;
     value     True | False | np.True_ | np.False_
             | number: -?D+ (int, at most 18 significant digits) | -?D+.D+ [(e|E)[+-]?D+] | -?D+e[+-]D+ | -?inf | -?nan
             | np.TYPE(strict): TYPE as parser._NP_WRAPPED; strict as number but the exponent after a fraction
               must be `e` with a sign (the reference reads the inside with _INT / _FLOAT, not with float()).
   Numbers reach orjson normalised to JSON (no leading zeros, "-0" integer as 0); orjson's float reading is
   correctly rounded, as float() is, and tests/test_metrics_parser.py checks the two agree. Mantissas of more
   than 19 significant digits and magnitudes near the double's limit are patched with PyOS_string_to_double,
   which is what float() uses. Duplicate keys are kept: JSON objects, as dicts, keep the first position and
   the last value, as the reference does. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Out;

static int out_reserve(Out *o, Py_ssize_t more) {
    if (o->len + more <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + more) cap *= 2;
    char *b = PyMem_Realloc(o->buf, cap);
    if (!b) { PyErr_NoMemory(); return -1; }
    o->buf = b;
    o->cap = cap;
    return 0;
}

#define PUT(o, c) ((o)->buf[(o)->len++] = (char)(c))
static void put_mem(Out *o, const char *s, Py_ssize_t n) { memcpy(o->buf + o->len, s, n); o->len += n; }

/* Byte classes of the item scan (set up in PyInit__stepjson); 0 for every other byte. C_ESCAPE: what a JSON
   string needs escaped, control characters (NUL included), '"' and '\\'. */
enum { C_COLON = 1, C_BLANK = 2, C_ESCAPE = 3 };
static unsigned char CLASS[256];

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* numpy scalar type names parser._NP_WRAPPED accepts, each followed by '(' in the text. */
static const char *NP_TYPES[] = {
    "float16", "float32", "float64", "float128", "float", "longdouble", "uint8", "uint16", "uint32", "uint64",
    "uint", "int8", "int16", "int32", "int64", "int", "longlong", "intc", "intp", NULL,
};

enum { V_DECLINE = 0, V_EMITTED = 1, V_PATCH = 2 };

/* Emit the number in s[0:n] as JSON, or say it needs a patch (nan/inf/huge/long) or is not one.
   strict: the reference's _INT/_FLOAT grammar (inside a numpy repr); else also float()'s forms with a '.'. */
static int number(Out *o, const char *s, Py_ssize_t n, int strict) {
    Py_ssize_t k = 0;
    int neg = 0;
    if (k < n && s[k] == '-') { neg = 1; k++; }
    if (n - k == 3 && (memcmp(s + k, "inf", 3) == 0 || memcmp(s + k, "nan", 3) == 0)) return V_PATCH;
    Py_ssize_t i0 = k;
    while (k < n && is_digit(s[k])) k++;
    Py_ssize_t i1 = k;
    if (i1 == i0) return V_DECLINE;
    Py_ssize_t z = i0;  /* first significant integer digit */
    while (z < i1 - 1 && s[z] == '0') z++;
    if (k == n) {  /* an integer */
        if (i1 - z > 18) return V_DECLINE;  /* beyond what orjson keeps an int: the reference decides */
        if (neg && !(i1 - z == 1 && s[z] == '0')) PUT(o, '-');
        put_mem(o, s + z, i1 - z);
        return V_EMITTED;
    }
    Py_ssize_t f0 = k, f1 = k;
    int frac = 0;
    if (s[k] == '.') {
        k++;
        f0 = k;
        while (k < n && is_digit(s[k])) k++;
        f1 = k;
        if (f1 == f0) return V_DECLINE;
        frac = 1;
    }
    Py_ssize_t e0 = k;
    long expv = 0;
    if (k < n) {
        if (s[k] == 'e' || (s[k] == 'E' && frac && !strict)) k++;
        else return V_DECLINE;
        int eneg = 0;
        if (k < n && (s[k] == '+' || s[k] == '-')) { eneg = s[k] == '-'; k++; }
        else if (strict || !frac) return V_DECLINE;  /* "1e5", "np.float64(1.5e5)": the reference refuses */
        Py_ssize_t d0 = k;
        while (k < n && is_digit(s[k])) { if (expv < 100000) expv = expv * 10 + (s[k] - '0'); k++; }
        if (k == d0 || k != n) return V_DECLINE;
        if (eneg) expv = -expv;
    } else if (!frac) {
        return V_DECLINE;
    }
    /* Significant digits of the mantissa and the decimal magnitude: orjson refuses a double that overflows,
       and a very long mantissa is left to float()'s own reading. */
    Py_ssize_t lead = (i1 - z == 1 && s[z] == '0') ? 0 : i1 - z;
    Py_ssize_t sig = lead;
    if (frac) {
        Py_ssize_t f = f0;
        if (!lead) while (f < f1 && s[f] == '0') f++;
        sig += f1 - f;
    }
    if (sig > 19 || lead + expv > 300) return V_PATCH;
    if (neg) PUT(o, '-');
    put_mem(o, s + z, i1 - z);
    if (frac) { PUT(o, '.'); put_mem(o, s + f0, f1 - f0); }
    put_mem(o, s + e0, n - e0);
    return V_EMITTED;
}

static int value(Out *o, const char *s, Py_ssize_t n) {
    if (n == 4 && memcmp(s, "True", 4) == 0) { put_mem(o, "true", 4); return V_EMITTED; }
    if (n == 5 && memcmp(s, "False", 5) == 0) { put_mem(o, "false", 5); return V_EMITTED; }
    if (n >= 3 && memcmp(s, "np.", 3) == 0) {
        if (n == 8 && memcmp(s, "np.True_", 8) == 0) { put_mem(o, "true", 4); return V_EMITTED; }
        if (n == 9 && memcmp(s, "np.False_", 9) == 0) { put_mem(o, "false", 5); return V_EMITTED; }
        for (const char **t = NP_TYPES; *t; t++) {
            if ((*t)[0] != s[3]) continue;
            Py_ssize_t tl = (Py_ssize_t)strlen(*t);
            if (n > 3 + tl + 1 && memcmp(s + 3, *t, tl) == 0 && s[3 + tl] == '(') {
                if (s[n - 1] != ')') return V_DECLINE;
                return number(o, s + 4 + tl, n - 5 - tl, 1);
            }
        }
        return V_DECLINE;
    }
    return number(o, s, n, 0);
}

/* One line's JSON entry; V_DECLINE leaves o as it was. Patches are appended to `patches` with `index`. */
static int line(Out *o, const char *s, Py_ssize_t n, Py_ssize_t index, PyObject *patches) {
    Py_ssize_t start = o->len;
    if (out_reserve(o, 6 * n + 64) < 0) return -1;  /* worst case: every key byte escaped as \u00XX */
    Py_ssize_t k = 0;
    while (k < n && is_digit(s[k])) k++;
    if (k == 0) return V_DECLINE;
    Py_ssize_t z = 0;
    while (z < k - 1 && s[z] == '0') z++;
    if (k - z > 18) return V_DECLINE;
    if (k < n && !(n - k >= 3 && s[k] == ' ' && s[k + 1] == '-' && s[k + 2] == ' ')) return V_DECLINE;
    PUT(o, '[');
    put_mem(o, s + z, k - z);
    put_mem(o, ",{", 2);
    if (k < n) {
        Py_ssize_t p = k + 3;
        int first = 1;
        for (;;) {
            /* One pass to the item's end (the next " - "), noting its last ':' (the key ends there) and whether a
               byte needs escaping. The text is NUL-terminated (PyUnicode_AsUTF8AndSize), and NUL has a class, so
               the inner loop needs no bounds check. */
            Py_ssize_t e = p, colon = -1;
            int escape = 0;
            for (;;) {
                while (!CLASS[(unsigned char)s[e]]) e++;
                if (e >= n) { e = n; break; }
                unsigned char c = CLASS[(unsigned char)s[e]];
                if (c == C_BLANK) {
                    if (e + 2 < n && s[e + 1] == '-' && s[e + 2] == ' ') break;
                } else if (c == C_COLON) {
                    colon = e;
                } else {
                    escape = 1;
                }
                e++;
            }
            if (colon <= p) goto decline;  /* no colon, or an empty key */
            if (!first) PUT(o, ',');
            first = 0;
            PUT(o, '"');
            if (!escape) {
                put_mem(o, s + p, colon - p);
            } else {
                for (Py_ssize_t j = p; j < colon; j++) {  /* keys holding '"', '\\' or a control character */
                    unsigned char c = (unsigned char)s[j];
                    if (CLASS[c] == C_ESCAPE) {
                        static const char hex[] = "0123456789abcdef";
                        put_mem(o, "\\u00", 4);
                        PUT(o, hex[c >> 4]);
                        PUT(o, hex[c & 15]);
                    } else {
                        PUT(o, c);
                    }
                }
            }
            put_mem(o, "\":", 2);
            int v = value(o, s + colon + 1, e - colon - 1);
            if (v == V_DECLINE) goto decline;
            if (v == V_PATCH) {
                /* float() of the text (the reference's reading of nan, inf and the rest), set after loads */
                const char *t = s + colon + 1;
                Py_ssize_t tn = e - colon - 1;
                if (tn > 3 && memcmp(t, "np.", 3) == 0) {  /* the inside of np.TYPE(...) */
                    const char *open = memchr(t, '(', tn);
                    tn = tn - (open - t) - 2;
                    t = open + 1;
                }
                char *text = PyMem_Malloc(tn + 1);
                if (!text) { PyErr_NoMemory(); return -1; }
                memcpy(text, t, tn);
                text[tn] = 0;
                double d = PyOS_string_to_double(text, NULL, NULL);
                PyMem_Free(text);
                if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); goto decline; }
                PyObject *key = PyUnicode_DecodeUTF8(s + p, colon - p, "strict");
                if (!key) { PyErr_Clear(); goto decline; }
                PyObject *item = Py_BuildValue("(nNd)", index, key, d);
                if (!item) return -1;
                int rc = PyList_Append(patches, item);
                Py_DECREF(item);
                if (rc < 0) return -1;
                put_mem(o, "null", 4);
            }
            if (e >= n) break;
            p = e + 3;
        }
    }
    put_mem(o, "}]", 2);
    return V_EMITTED;
decline:
    o->len = start;
    return V_DECLINE;
}

static PyObject *encode(PyObject *Py_UNUSED(self), PyObject *arg) {
    if (!PyList_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "encode() takes a list of str");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(arg);
    Out o = {NULL, 0, 0};
    PyObject *declined = PyList_New(0), *patches = PyList_New(0), *body = NULL;
    if (!declined || !patches || out_reserve(&o, 16) < 0) goto fail;
    PUT(&o, '[');
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(arg, i);
        if (!PyUnicode_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "encode() takes a list of str");
            goto fail;
        }
        if (out_reserve(&o, 8) < 0) goto fail;
        if (i) PUT(&o, ',');
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(item, &n);  /* no copy for ASCII text */
        int r = V_DECLINE;
        Py_ssize_t npatches = PyList_GET_SIZE(patches);
        if (!s) PyErr_Clear();  /* a lone surrogate: not UTF-8, the reference decides */
        else if ((r = line(&o, s, n, i, patches)) < 0) goto fail;
        if (r == V_DECLINE) {
            /* the patches of a line declined after them go too */
            if (PyList_SetSlice(patches, npatches, PY_SSIZE_T_MAX, NULL) < 0) goto fail;
            if (out_reserve(&o, 4) < 0) goto fail;
            put_mem(&o, "null", 4);
            PyObject *idx = PyLong_FromSsize_t(i);
            if (!idx || PyList_Append(declined, idx) < 0) { Py_XDECREF(idx); goto fail; }
            Py_DECREF(idx);
        }
    }
    if (out_reserve(&o, 1) < 0) goto fail;
    PUT(&o, ']');
    body = PyBytes_FromStringAndSize(o.buf, o.len);
    PyMem_Free(o.buf);
    if (!body) goto fail_objs;
    return Py_BuildValue("(NNN)", body, declined, patches);
fail:
    PyMem_Free(o.buf);
fail_objs:
    Py_XDECREF(declined);
    Py_XDECREF(patches);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_O,
     "encode(rests: list[str]) -> (body: bytes, declined: list[int], patches: list[tuple[int, str, float]])\n\n"
     "The text after 'step:' of verl step lines as one JSON list for orjson.loads (see parser.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stepjson", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__stepjson(void) {
    for (int c = 0; c < 0x20; c++) CLASS[c] = C_ESCAPE;
    CLASS['"'] = CLASS['\\'] = C_ESCAPE;
    CLASS[':'] = C_COLON;
    CLASS[' '] = C_BLANK;
    return PyModule_Create(&module);
}
