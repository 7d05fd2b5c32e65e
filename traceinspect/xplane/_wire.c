/* The hot loop of traceinspect: XSpace protobuf wire format -> columnar buffers.
 *
 * Why hand-written: a trace holds millions of XEvents; building a protobuf object per
 * event and walking it from Python costs ~0.5 us each, which is seconds per trace. This
 * decoder walks the wire bytes once (after a cheap index pass that only hops over
 * events to count them), resolves metadata ids to interned string codes through
 * per-plane tables, and writes the final columns directly. Strings are created only for
 * distinct names and for string-valued stats.
 *
 * Field numbers are those of tsl/profiler/protobuf/xplane.proto; they must match the
 * table in proto.py (tests/test_proto.py checks both decoders against each other).
 * Protobuf semantics kept: unknown fields and groups are skipped, a field with an
 * unexpected wire type is treated as unknown, the last member of a oneof wins, and a
 * repeated map key keeps its last value.
 *
 * Output: a dict of plain Python lists (names) and Column objects (raw little-endian
 * arrays exposing the buffer protocol; numpy.frombuffer wraps them without a copy).
 *
 * Memory: the input is usually a read-only mapping of the file. Its pages count in the
 * process's RSS once touched, and the index pass touches them all, so without help the
 * whole file stays resident while the event columns fill (file + columns at the peak).
 * With release_every > 0 the fill pass hands back to the kernel, every release_every
 * bytes of events and at the end of each plane, the mapped pages it has moved past
 * (madvise MADV_DONTNEED, Linux): they stay in the page cache, and the few read again
 * later (interned strings are compared in place, map entries point into the file) fault
 * back in with the same bytes. Only a read-only mmap is accepted for this: dropped pages
 * of the process's own memory would read back as zeros.
 *
 * A mapped file may change while it is read: the fill pass checks every write against
 * what the index pass allocated, and a read-only mmap is decoded under a SIGBUS guard (a
 * file that shrinks): both end in "the trace changed while it was read" (see GUARD).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* Errors. The decoding itself touches no Python object, so that it may run without the  */
/* GIL (decode(..., release_gil=True): another thread imports or computes meanwhile): a  */
/* failure is recorded here and raised once the GIL is held again (raise_pending).       */

typedef struct {
    PyObject *type; /* NULL: none; PyExc_MemoryError, PyExc_ValueError, ... */
    char msg[160];
} pending_error;

static _Thread_local pending_error pending;

static int set_error(PyObject *type, const char *msg) {
    if (!pending.type) {
        pending.type = type;
        snprintf(pending.msg, sizeof(pending.msg), "%s", msg);
    }
    return -1;
}

static int no_memory(void) { return set_error(PyExc_MemoryError, ""); }

/* Raise the recorded failure (GIL held); a Python error already set is kept. */
static void raise_pending(void) {
    if (pending.type && !PyErr_Occurred()) {
        if (pending.type == PyExc_MemoryError)
            PyErr_NoMemory();
        else
            PyErr_SetString(pending.type, pending.msg);
    }
    pending.type = NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Column: a malloc'ed byte block handed to Python without a copy.                       */

typedef struct {
    PyObject_HEAD char *data;
    Py_ssize_t nbytes;
} ColumnObject;

static void column_dealloc(ColumnObject *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int column_getbuffer(ColumnObject *self, Py_buffer *view, int flags) {
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : empty,
                             self->nbytes, 0, flags);
}

static PyBufferProcs column_as_buffer = {(getbufferproc)column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "traceinspect.xplane._wire.Column",
    .tp_basicsize = sizeof(ColumnObject),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_buffer = &column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Raw column bytes produced by the decoder (use numpy.frombuffer).",
};

/* ------------------------------------------------------------------------------------ */
/* Growable arrays.                                                                      */

typedef struct {
    char *d;
    size_t n, cap, esz;
} vec;

#define HUGE_PAGE ((size_t)2 << 20)

static int vec_reserve(vec *v, size_t want) {
    if (want <= v->cap) return 0;
    size_t nc = v->cap ? v->cap : 256;
    while (nc < want) nc *= 2;
    size_t nbytes = nc * v->esz;
    char *nd = NULL;
#ifdef MADV_HUGEPAGE
    /* Large columns (events of a big trace) on transparent huge pages: filling them
     * then costs one page fault per 2 MB instead of one per 4 KB. */
    if (nbytes >= 2 * HUGE_PAGE) {
        nbytes = (nbytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        if (posix_memalign((void **)&nd, HUGE_PAGE, nbytes) != 0) nd = NULL;
        if (nd) {
            madvise(nd, nbytes, MADV_HUGEPAGE);
            if (v->d) memcpy(nd, v->d, v->n * v->esz);
            free(v->d);
        }
    }
#endif
    if (!nd) nd = realloc(v->d, nbytes);
    if (!nd) return no_memory();
    v->d = nd;
    v->cap = nc;
    return 0;
}

#define VEC_AT(v, T, i) (((T *)(v).d)[i])
#define VEC_PUSH(v, T, val)                                                       \
    do {                                                                          \
        if ((v).n == (v).cap && vec_reserve(&(v), (v).n + 1) < 0) return -1;      \
        ((T *)(v).d)[(v).n++] = (val);                                            \
    } while (0)

static void vec_free(vec *v) {
    free(v->d);
    v->d = NULL;
    v->n = v->cap = 0;
}

/* Hand the first n elements of v to a new Column; v is left empty. */
static PyObject *vec_to_column(vec *v) {
    ColumnObject *col = PyObject_New(ColumnObject, &ColumnType);
    if (!col) return NULL;
    size_t nbytes = v->n * v->esz;
    char *data = v->d;
    if (data && v->cap > v->n && v->cap * v->esz < 2 * HUGE_PAGE) {
        char *shrunk = realloc(data, nbytes ? nbytes : 1);
        if (shrunk) data = shrunk;
    }
    col->data = data;
    col->nbytes = (Py_ssize_t)nbytes;
    v->d = NULL;
    v->n = v->cap = 0;
    return (PyObject *)col;
}

/* ------------------------------------------------------------------------------------ */
/* Wire format reading.                                                                  */

typedef struct {
    const uint8_t *base; /* start of the whole buffer, for error offsets */
} wctx;

typedef struct {
    uint32_t num;
    uint32_t wt;
    uint64_t v;          /* varint / fixed value */
    const uint8_t *data; /* length-delimited payload */
    size_t len;
} field;

static int fail_at(const wctx *w, const uint8_t *at, const char *what) {
    char msg[sizeof(pending.msg)];
    snprintf(msg, sizeof(msg), "malformed protobuf at byte %zd: %s",
             (Py_ssize_t)(at - w->base), what);
    return set_error(PyExc_ValueError, msg);
}

/* The index pass and the fill pass read the same bytes twice; when they disagree (more
 * lines or events the second time), the input changed between them: a file still being
 * written, or rewritten in place. The reader turns this message into its own error. */
#define CHANGED_MSG                                                                       \
    "the trace changed while it was read: is it still being written? read it again when " \
    "it is complete"

static int changed(void) { return set_error(PyExc_ValueError, CHANGED_MSG); }

/* The same words as pydecode.OUT_OF_RANGE. */
#define OUT_OF_RANGE_MSG "an event's start or end is outside the int64 range of nanoseconds"

static inline int read_varint(const wctx *w, const uint8_t **pp, const uint8_t *end,
                              uint64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && !(*p & 0x80)) { /* one-byte fast path */
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    if (end - p >= 10) { /* no bounds checks needed within 10 bytes */
        uint64_t r = 0;
        for (int i = 0; i < 10; i++) {
            uint8_t b = p[i];
            r |= (uint64_t)(b & 0x7f) << (7 * i);
            if (!(b & 0x80)) {
                *out = r;
                *pp = p + i + 1;
                return 0;
            }
        }
        return fail_at(w, p, "varint longer than 10 bytes");
    }
    uint64_t r = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) return fail_at(w, p, "truncated varint");
        uint8_t b = *p++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = r;
            *pp = p;
            return 0;
        }
    }
    return fail_at(w, p, "varint longer than 10 bytes");
}

/* Strings may be absent (NULL, 0) and need not be valid UTF-8. Names read bytes that are
 * not UTF-8 as \xNN text ("backslashreplace"), so that every name is text any output
 * (pandas' Arrow strings, CSV, Parquet, a terminal) takes; stat values keep every byte
 * ("surrogateescape": bytes_value stats hold serialized protobufs). Mirrored in
 * pydecode.py. */
#define NAME_ERRORS "backslashreplace"
#define VALUE_ERRORS "surrogateescape"

static inline PyObject *decode_str(const uint8_t *p, size_t len, const char *errors) {
    return PyUnicode_DecodeUTF8(p ? (const char *)p : "", (Py_ssize_t)len, errors);
}

/* A string of the input, made a Python str only at the end (with the GIL). */
typedef struct {
    const uint8_t *p;
    size_t len;
} strref;

static int push_str(vec *v, const uint8_t *p, size_t len) {
    strref ref = {p, len};
    VEC_PUSH(*v, strref, ref);
    return 0;
}

/* The strings of v as a new list (GIL held). */
static PyObject *str_list(const vec *v, const char *errors) {
    PyObject *list = PyList_New((Py_ssize_t)v->n);
    if (!list) return NULL;
    for (size_t i = 0; i < v->n; i++) {
        const strref *r = &VEC_AT(*v, strref, i);
        PyObject *s = decode_str(r->p, r->len, errors);
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

static int skip_group(const wctx *w, const uint8_t **pp, const uint8_t *end, uint32_t num,
                      int depth);

/* How deep messages and groups may nest: upb's (and protobuf C++'s) default recursion
 * limit, so that both decoders refuse the same inputs. Depth 0 is the XSpace; a group or
 * message field of a message at depth d is at depth d + 1. */
#define MAX_DEPTH 100
enum { D_SPACE = 0, D_PLANE, D_LINE, D_EVENT, D_EVENT_STAT };
#define D_PLANE_STAT D_LINE  /* XPlane.stats */
#define D_MAP_ENTRY D_LINE   /* XPlane.event_metadata / stat_metadata entries */
#define D_METADATA D_EVENT   /* their values */
#define D_METADATA_STAT D_EVENT_STAT

/* Read the next field of a message at `depth`. Returns 1 on a field, 0 at the end, -1 on
 * error. */
static inline int next_field(const wctx *w, const uint8_t **pp, const uint8_t *end, field *f,
                             int depth) {
    const uint8_t *p = *pp;
    if (p >= end) return 0;
    uint64_t tag;
    if (read_varint(w, &p, end, &tag) < 0) return -1;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (uint32_t)(tag & 7);
    if (f->num == 0 || (tag >> 3) > 0x1fffffff) return fail_at(w, *pp, "invalid field number");
    switch (f->wt) {
        case 0:
            if (read_varint(w, &p, end, &f->v) < 0) return -1;
            break;
        case 1:
            if ((size_t)(end - p) < 8) return fail_at(w, p, "truncated fixed64");
            memcpy(&f->v, p, 8);
            p += 8;
            break;
        case 2: {
            uint64_t len;
            if (read_varint(w, &p, end, &len) < 0) return -1;
            if (len > (uint64_t)(end - p)) return fail_at(w, p, "length past end of message");
            f->data = p;
            f->len = (size_t)len;
            p += len;
            break;
        }
        case 3:
            if (skip_group(w, &p, end, f->num, depth + 1) < 0) return -1;
            break;
        case 5: {
            if ((size_t)(end - p) < 4) return fail_at(w, p, "truncated fixed32");
            uint32_t v32;
            memcpy(&v32, p, 4);
            f->v = v32;
            p += 4;
            break;
        }
        default:
            return fail_at(w, *pp, "invalid wire type");
    }
    *pp = p;
    return 1;
}

static int skip_group(const wctx *w, const uint8_t **pp, const uint8_t *end, uint32_t num,
                      int depth) {
    if (depth > MAX_DEPTH) return fail_at(w, *pp, "groups nested too deeply");
    const uint8_t *p = *pp;
    for (;;) {
        if (p >= end) return fail_at(w, p, "unterminated group");
        const uint8_t *start = p;
        uint64_t tag;
        if (read_varint(w, &p, end, &tag) < 0) return -1;
        uint32_t fnum = (uint32_t)(tag >> 3), wt = (uint32_t)(tag & 7);
        if (wt == 4) {
            if (fnum != num) return fail_at(w, start, "mismatched end of group");
            *pp = p;
            return 0;
        }
        if (wt == 3) {
            if (skip_group(w, &p, end, fnum, depth + 1) < 0) return -1;
            continue;
        }
        field f;
        p = start;
        if (next_field(w, &p, end, &f, depth) < 0) return -1;
    }
}

/* ------------------------------------------------------------------------------------ */
/* String interning: (pointer, length) into the input buffer -> dense code.             */

typedef struct {
    const char *p;
    Py_ssize_t len;
    int32_t code;
} slot;

typedef struct {
    slot *slots;
    size_t cap, n;
    vec refs; /* code -> strref (the bytes, in the input) */
} strtab;

static inline uint64_t hash_bytes(const char *p, Py_ssize_t len) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)len;
    for (Py_ssize_t i = 0; i < len; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static int strtab_init(strtab *t) {
    t->cap = 1024;
    t->n = 0;
    t->slots = calloc(t->cap, sizeof(slot));
    t->refs.esz = sizeof(strref);
    if (!t->slots) return no_memory();
    return 0;
}

static void strtab_free(strtab *t) {
    free(t->slots);
    t->slots = NULL;
    vec_free(&t->refs);
}

static int strtab_grow(strtab *t) {
    size_t nc = t->cap * 2;
    slot *ns = calloc(nc, sizeof(slot));
    if (!ns) return no_memory();
    for (size_t i = 0; i < t->cap; i++) {
        slot *s = &t->slots[i];
        if (!s->p) continue;
        size_t j = hash_bytes(s->p, s->len) & (nc - 1);
        while (ns[j].p) j = (j + 1) & (nc - 1);
        ns[j] = *s;
    }
    free(t->slots);
    t->slots = ns;
    t->cap = nc;
    return 0;
}

/* Returns the code of the string, interning it first; -1 on error. */
static int32_t strtab_intern(strtab *t, const char *p, Py_ssize_t len) {
    static const char empty[1] = "";
    if (!p) p = empty; /* slots use a NULL pointer to mean "free" */
    size_t mask = t->cap - 1;
    size_t j = hash_bytes(p, len) & mask;
    while (t->slots[j].p) {
        slot *s = &t->slots[j];
        if (s->len == len && memcmp(s->p, p, (size_t)len) == 0) return s->code;
        j = (j + 1) & mask;
    }
    if (push_str(&t->refs, (const uint8_t *)p, (size_t)len) < 0) return -1;
    int32_t code = (int32_t)t->n++;
    t->slots[j].p = p;
    t->slots[j].len = len;
    t->slots[j].code = code;
    if (t->n * 2 > t->cap && strtab_grow(t) < 0) return -1;
    return code;
}

/* ------------------------------------------------------------------------------------ */
/* Per-plane id -> index maps (metadata ids are per plane; dense or hashed 64-bit).      */

typedef struct {
    int64_t id;
    int64_t seq;
    const uint8_t *data;
    size_t len;
} entry;

typedef struct {
    int64_t *ids;
    int32_t *vals;
    size_t n;
    int32_t *dense;
    int64_t dense_n;
} idmap;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

/* Sorts entries by id and drops repeated ids, keeping the last occurrence. */
static size_t dedupe_entries(entry *e, size_t n) {
    if (n == 0) return 0;
    qsort(e, n, sizeof(entry), cmp_entry);
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && e[i + 1].id == e[i].id) continue;
        e[out++] = e[i];
    }
    return out;
}

static void idmap_free(idmap *m) {
    free(m->ids);
    free(m->vals);
    free(m->dense);
    memset(m, 0, sizeof(*m));
}

/* Entries must be sorted and unique; value i is given to entry i. */
static int idmap_build(idmap *m, const entry *e, size_t n, const int32_t *vals) {
    idmap_free(m);
    m->n = n;
    if (n == 0) return 0;
    if (e[0].id >= 0 && e[n - 1].id < (int64_t)(4 * n + 1024)) {
        m->dense_n = e[n - 1].id + 1;
        m->dense = malloc((size_t)m->dense_n * sizeof(int32_t));
        if (!m->dense) goto nomem;
        for (int64_t i = 0; i < m->dense_n; i++) m->dense[i] = -1;
        for (size_t i = 0; i < n; i++) m->dense[e[i].id] = vals[i];
        return 0;
    }
    m->ids = malloc(n * sizeof(int64_t));
    m->vals = malloc(n * sizeof(int32_t));
    if (!m->ids || !m->vals) goto nomem;
    for (size_t i = 0; i < n; i++) {
        m->ids[i] = e[i].id;
        m->vals[i] = vals[i];
    }
    return 0;
nomem:
    return no_memory();
}

static inline int32_t idmap_get(const idmap *m, int64_t id) {
    if (m->dense) return (id >= 0 && id < m->dense_n) ? m->dense[id] : -1;
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < m->n && m->ids[lo] == id) ? m->vals[lo] : -1;
}

/* ------------------------------------------------------------------------------------ */
/* Decoder state.                                                                        */

enum { KIND_NONE = 0, KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF };

typedef struct {
    vec owner, stat, kind, ival, fval, sval;
} sink;

typedef struct {
    wctx w;
    strtab event_names, stat_names, str_values;
    /* planes */
    vec plane_xid;
    vec plane_names; /* strref */
    /* lines */
    vec line_plane, line_id, line_ts, line_dur, line_display_id, line_count;
    vec line_events, line_first, line_last; /* per line: timed events and their span */
    vec line_names, line_display_names; /* strref */
    /* events (preallocated from the index pass for ev_alloc rows: the fill pass checks
     * every write against it, since a file that changes between the passes may hold more) */
    vec ev_line, ev_name, ev_start, ev_dur;
    size_t ev_alloc;
    /* aggregated events (num_occurrences instead of offset_ps) */
    vec ag_line, ag_name, ag_count, ag_dur;
    /* event metadata rows */
    vec md_plane, md_id, md_name;
    vec md_display_names; /* strref */
    sink ev_stats, ag_stats, plane_stats, md_stats;
    /* per-plane tables */
    idmap stat_map, meta_map;
    vec statmd_name;  /* local stat metadata index -> stat name code */
    vec statmd_ref;   /* local stat metadata index -> str_values code, -1 until used */
    vec statmd_span;  /* local stat metadata index -> entry with the name span */
    vec merged;       /* uint8_t *: map values given twice, concatenated (collect_entries) */
    /* the XSpace's own fields */
    vec planes;                        /* entry */
    vec hostnames, errors, warnings;   /* strref */
    char *strings;                     /* every strref's bytes, copied (own_strings) */
    PyThreadState *thread;             /* while the GIL is released (decode(release_gil)) */
    int32_t empty_event_name, empty_stat_name, empty_str_value;
    /* progress (never called without the GIL: decode refuses both) */
    PyObject *progress;
    size_t since_progress;
    int nogil;
    /* releasing the mapped input behind the event pass (UINTPTR_MAX: never) */
    uintptr_t release_next, released, release_every, page;
} state;

static void sink_init(sink *s) {
    memset(s, 0, sizeof(*s));
    s->owner.esz = 4;
    s->stat.esz = 4;
    s->kind.esz = 1;
    s->ival.esz = 8;
    s->fval.esz = 8;
    s->sval.esz = 4;
}

static void sink_free(sink *s) {
    vec_free(&s->owner);
    vec_free(&s->stat);
    vec_free(&s->kind);
    vec_free(&s->ival);
    vec_free(&s->fval);
    vec_free(&s->sval);
}

static int sink_push(sink *s, int32_t owner, int32_t stat, int8_t kind, int64_t ival,
                     double fval, int32_t sval) {
    VEC_PUSH(s->owner, int32_t, owner);
    VEC_PUSH(s->stat, int32_t, stat);
    VEC_PUSH(s->kind, int8_t, kind);
    VEC_PUSH(s->ival, int64_t, ival);
    VEC_PUSH(s->fval, double, fval);
    VEC_PUSH(s->sval, int32_t, sval);
    return 0;
}

static int32_t empty_code(strtab *t, int32_t *cached) {
    if (*cached < 0) *cached = strtab_intern(t, "", 0);
    return *cached;
}

/* ------------------------------------------------------------------------------------ */
/* XStat                                                                                  */

static int decode_stat(state *st, sink *out, int32_t owner, const uint8_t *p,
                       const uint8_t *end, int depth) {
    const wctx *w = &st->w;
    field f;
    int r;
    int64_t mid = 0, ival = 0;
    double fval = NAN;
    int32_t sval = -1;
    int8_t kind = KIND_NONE;
    uint64_t ref = 0;
    while ((r = next_field(w, &p, end, &f, depth)) > 0) {
        switch (f.num) {
            case 1:
                if (f.wt == 0) mid = (int64_t)f.v;
                break;
            case 2:
                if (f.wt == 1) {
                    kind = KIND_DOUBLE;
                    memcpy(&fval, &f.v, 8);
                    ival = 0;
                    sval = -1;
                }
                break;
            case 3:
            case 4:
                if (f.wt == 0) {
                    kind = f.num == 3 ? KIND_UINT64 : KIND_INT64;
                    ival = (int64_t)f.v;
                    fval = NAN;
                    sval = -1;
                }
                break;
            case 5:
            case 6:
                if (f.wt == 2) {
                    kind = f.num == 5 ? KIND_STR : KIND_BYTES;
                    sval = strtab_intern(&st->str_values, (const char *)f.data,
                                         (Py_ssize_t)f.len);
                    if (sval < 0) return -1;
                    ival = 0;
                    fval = NAN;
                }
                break;
            case 7:
                if (f.wt == 0) {
                    kind = KIND_REF;
                    ref = f.v;
                    ival = 0;
                    fval = NAN;
                    sval = -1;
                }
                break;
            default:
                break;
        }
    }
    if (r < 0) return -1;
    int32_t local = idmap_get(&st->stat_map, mid);
    int32_t stat = local >= 0 ? VEC_AT(st->statmd_name, int32_t, local)
                              : empty_code(&st->stat_names, &st->empty_stat_name);
    if (stat < 0) return -1;
    if (kind == KIND_REF) {
        int32_t target = idmap_get(&st->stat_map, (int64_t)ref);
        if (target >= 0) {
            sval = VEC_AT(st->statmd_ref, int32_t, target);
            if (sval < 0) {
                const entry *e = &VEC_AT(st->statmd_span, entry, target);
                sval = strtab_intern(&st->str_values, (const char *)e->data,
                                     (Py_ssize_t)e->len);
                if (sval < 0) return -1;
                VEC_AT(st->statmd_ref, int32_t, target) = sval;
            }
        } else {
            sval = empty_code(&st->str_values, &st->empty_str_value);
            if (sval < 0) return -1;
        }
        ival = (int64_t)ref;
    }
    return sink_push(out, owner, stat, kind, ival, fval, sval);
}

/* ------------------------------------------------------------------------------------ */
/* Index pass: planes and lines, counting events.                                        */

static int index_line(state *st, int32_t plane_row, const uint8_t *p, const uint8_t *end,
                      size_t *total_events) {
    const wctx *w = &st->w;
    field f;
    int r;
    int64_t id = 0, ts = 0, dur = 0, display_id = 0, count = 0;
    const uint8_t *name = NULL, *dname = NULL;
    size_t name_len = 0, dname_len = 0;
    for (;;) {
        /* Fast path: hop over events (field 4, one-byte tag 0x22) without decoding. */
        while (p < end && *p == 0x22) {
            uint64_t len;
            p++;
            if (read_varint(w, &p, end, &len) < 0) return -1;
            if (len > (uint64_t)(end - p)) return fail_at(w, p, "length past end of message");
            p += len;
            count++;
        }
        if ((r = next_field(w, &p, end, &f, D_LINE)) <= 0) break;
        if (f.wt == 2) {
            if (f.num == 4)
                count++;
            else if (f.num == 2) {
                name = f.data;
                name_len = f.len;
            } else if (f.num == 11) {
                dname = f.data;
                dname_len = f.len;
            }
        } else if (f.wt == 0) {
            if (f.num == 1)
                id = (int64_t)f.v;
            else if (f.num == 3)
                ts = (int64_t)f.v;
            else if (f.num == 9)
                dur = (int64_t)f.v;
            else if (f.num == 10)
                display_id = (int64_t)f.v;
        }
    }
    if (r < 0) return -1;
    VEC_PUSH(st->line_plane, int32_t, plane_row);
    VEC_PUSH(st->line_id, int64_t, id);
    VEC_PUSH(st->line_ts, int64_t, ts);
    VEC_PUSH(st->line_dur, int64_t, dur);
    VEC_PUSH(st->line_display_id, int64_t, display_id);
    VEC_PUSH(st->line_count, int64_t, count);
    if (push_str(&st->line_names, name, name_len) < 0 ||
        push_str(&st->line_display_names, dname, dname_len) < 0)
        return -1;
    *total_events += (size_t)count;
    return 0;
}

static int index_plane(state *st, int32_t plane_row, const uint8_t *p, const uint8_t *end,
                       size_t *total_events) {
    const wctx *w = &st->w;
    field f;
    int r;
    int64_t xid = 0;
    const uint8_t *name = NULL;
    size_t name_len = 0;
    while ((r = next_field(w, &p, end, &f, D_PLANE)) > 0) {
        if (f.num == 1 && f.wt == 0)
            xid = (int64_t)f.v;
        else if (f.num == 2 && f.wt == 2) {
            name = f.data;
            name_len = f.len;
        } else if (f.num == 3 && f.wt == 2) {
            if (index_line(st, plane_row, f.data, f.data + f.len, total_events) < 0) return -1;
        }
    }
    if (r < 0) return -1;
    VEC_PUSH(st->plane_xid, int64_t, xid);
    return push_str(&st->plane_names, name, name_len);
}

/* ------------------------------------------------------------------------------------ */
/* Fill pass.                                                                             */

static int report_progress(state *st, const uint8_t *at) {
    st->since_progress = 0;
    if (st->nogil) return 0;
    if (PyErr_CheckSignals() < 0) return -1;
    if (st->progress && st->progress != Py_None) {
        PyObject *res =
            PyObject_CallFunction(st->progress, "n", (Py_ssize_t)(at - st->w.base));
        if (!res) return -1;
        Py_DECREF(res);
    }
    return 0;
}

/* Drop this process's mapping of the input's whole pages before `at` (see the top of the
 * file). Advisory: a failed madvise leaves the pages mapped, nothing else changes. */
static void release_consumed(state *st, const uint8_t *at) {
    uintptr_t upto = (uintptr_t)at & ~(st->page - 1);
#ifdef MADV_DONTNEED
    if (upto > st->released) {
        (void)madvise((void *)st->released, upto - st->released, MADV_DONTNEED);
        st->released = upto;
    }
#endif
    st->release_next = (uintptr_t)at + st->release_every;
}

static inline int64_t floordiv1000(int64_t x) {
    int64_t q = x / 1000;
    return (x % 1000 < 0) ? q - 1 : q;
}

static inline int64_t floormod1000(int64_t x) {
    int64_t r = x % 1000;
    return r < 0 ? r + 1000 : r;
}

static int decode_event(state *st, int32_t line_row, int64_t ts_ns, const uint8_t *p,
                        const uint8_t *end) {
    const wctx *w = &st->w;
    field f;
    int r;
    int64_t mid = 0, off = 0, dur = 0, occ = 0;
    int aggregated = 0;
    int32_t row = (int32_t)st->ev_line.n;
    size_t stats_start = st->ev_stats.owner.n;
    /* Fast path: every XEvent field has a one-byte tag; anything else (unknown fields,
     * wrong wire types, groups) goes through the generic reader. The assignments are
     * repeated in both paths on purpose: folding them into one switch after the read
     * measured 15% slower on a 5.5M-event trace. */
    r = 0;
    while (p < end) {
        uint64_t v;
        switch (*p) {
            case 0x08: /* metadata_id */
                p++;
                if (read_varint(w, &p, end, &v) < 0) return -1;
                mid = (int64_t)v;
                continue;
            case 0x10: /* offset_ps */
                p++;
                if (read_varint(w, &p, end, &v) < 0) return -1;
                off = (int64_t)v;
                aggregated = 0;
                continue;
            case 0x18: /* duration_ps */
                p++;
                if (read_varint(w, &p, end, &v) < 0) return -1;
                dur = (int64_t)v;
                continue;
            case 0x28: /* num_occurrences */
                p++;
                if (read_varint(w, &p, end, &v) < 0) return -1;
                occ = (int64_t)v;
                aggregated = 1;
                continue;
            default:
                break;
        }
        if ((r = next_field(w, &p, end, &f, D_EVENT)) <= 0) break;
        if (f.wt == 0) {
            switch (f.num) {
                case 1:
                    mid = (int64_t)f.v;
                    break;
                case 2:
                    off = (int64_t)f.v;
                    aggregated = 0;
                    break;
                case 3:
                    dur = (int64_t)f.v;
                    break;
                case 5:
                    occ = (int64_t)f.v;
                    aggregated = 1;
                    break;
                default:
                    break;
            }
        } else if (f.num == 4 && f.wt == 2) {
            if (decode_stat(st, &st->ev_stats, row, f.data, f.data + f.len, D_EVENT_STAT) < 0) return -1;
        }
    }
    if (r < 0) return -1;
    int32_t md = idmap_get(&st->meta_map, mid);
    int32_t name = md >= 0 ? VEC_AT(st->md_name, int32_t, md)
                           : empty_code(&st->event_names, &st->empty_event_name);
    if (name < 0) return -1;
    if (aggregated) {
        /* Move this event's stats to the aggregated events' sink. */
        int32_t arow = (int32_t)st->ag_line.n;
        sink *a = &st->ev_stats;
        for (size_t i = stats_start; i < a->owner.n; i++) {
            if (sink_push(&st->ag_stats, arow, VEC_AT(a->stat, int32_t, i),
                          VEC_AT(a->kind, int8_t, i), VEC_AT(a->ival, int64_t, i),
                          VEC_AT(a->fval, double, i), VEC_AT(a->sval, int32_t, i)) < 0)
                return -1;
        }
        a->owner.n = a->stat.n = a->kind.n = a->ival.n = a->fval.n = a->sval.n = stats_start;
        VEC_PUSH(st->ag_line, int32_t, line_row);
        VEC_PUSH(st->ag_name, int32_t, name);
        VEC_PUSH(st->ag_count, int64_t, occ);
        VEC_PUSH(st->ag_dur, int64_t, dur);
        return 0;
    }
    /* Both ends are floored to whole nanoseconds, so nesting is preserved exactly. The
     * end is exact where offset + duration passes int64 picoseconds (the quotients and
     * the carry of the remainders, as Python's integers give it); a start, end or length
     * past int64 nanoseconds is refused, by both decoders. */
    int64_t q_off = floordiv1000(off), q_dur = floordiv1000(dur);
    int64_t q_sum = q_off + q_dur + (floormod1000(off) + floormod1000(dur) >= 1000);
    int64_t start, stop, length;
    if (__builtin_add_overflow(ts_ns, q_off, &start) ||
        __builtin_add_overflow(ts_ns, q_sum, &stop) ||
        __builtin_sub_overflow(stop, start, &length))
        return set_error(PyExc_ValueError, OUT_OF_RANGE_MSG);
    /* Preallocated in the index pass; never past it, whatever the input holds now. */
    if (st->ev_line.n >= st->ev_alloc) return changed();
    VEC_AT(st->ev_line, int32_t, st->ev_line.n++) = line_row;
    VEC_AT(st->ev_name, int32_t, st->ev_name.n++) = name;
    VEC_AT(st->ev_start, int64_t, st->ev_start.n++) = start;
    VEC_AT(st->ev_dur, int64_t, st->ev_dur.n++) = length;
    if ((uintptr_t)end >= st->release_next) release_consumed(st, end);
    if (++st->since_progress >= (1u << 20)) return report_progress(st, p);
    return 0;
}

static int check_message(const wctx *w, const uint8_t *p, const uint8_t *end, uint32_t nested,
                         int depth);

/* A map entry: key=1 (int64), value=2 (message, field `nested` of it holding messages
 * too). A value given twice is merged, as protobuf does: each is wire-checked on its own,
 * then the entry reads their concatenation (fields of the later win, repeated ones add
 * up), kept in a buffer of the state's (names point into it). */
static int collect_entries(state *st, vec *out, const uint8_t *p, const uint8_t *end,
                           int64_t seq, uint32_t nested) {
    const wctx *w = &st->w;
    field f = {0, 0, 0, NULL, 0};
    int r;
    entry e = {0, seq, NULL, 0};
    while ((r = next_field(w, &p, end, &f, D_MAP_ENTRY)) > 0) {
        if (f.num == 1 && f.wt == 0)
            e.id = (int64_t)f.v;
        else if (f.num == 2 && f.wt == 2) {
            if (!e.data) {
                e.data = f.data;
                e.len = f.len;
                continue;
            }
            if (check_message(w, e.data, e.data + e.len, nested, D_METADATA) < 0 ||
                check_message(w, f.data, f.data + f.len, nested, D_METADATA) < 0 ||
                vec_reserve(&st->merged, st->merged.n + 1) < 0)
                return -1;
            uint8_t *both = malloc(e.len + f.len + 1);
            if (!both) return no_memory();
            memcpy(both, e.data, e.len);
            memcpy(both + e.len, f.data, f.len);
            VEC_AT(st->merged, uint8_t *, st->merged.n++) = both;
            e.data = both;
            e.len += f.len;
        }
    }
    if (r < 0) return -1;
    VEC_PUSH(*out, entry, e);
    return 0;
}

/* Wire-check a message (at `depth`) whose fields are scalars and strings, and, for field
 * `nested` (0: none) of wire type 2, the message inside it too. The protobuf reader checks
 * every map entry, including those a later entry with the same key replaces, so map
 * values that dedupe_entries drops are checked here: both decoders reject the same
 * inputs. */
static int check_message(const wctx *w, const uint8_t *p, const uint8_t *end, uint32_t nested,
                         int depth) {
    field f;
    int r;
    while (p && (r = next_field(w, &p, end, &f, depth)) > 0) {
        if (nested && f.num == nested && f.wt == 2 &&
            check_message(w, f.data, f.data + f.len, 0, depth + 1) < 0)
            return -1;
    }
    return p ? r : 0;
}

static int check_entries(const wctx *w, const vec *entries, uint32_t nested) {
    for (size_t i = 0; i < entries->n; i++) {
        const entry *e = &VEC_AT(*entries, entry, i);
        if (e->data && check_message(w, e->data, e->data + e->len, nested, D_METADATA) < 0)
            return -1;
    }
    return 0;
}

static int build_stat_metadata(state *st, vec *entries) {
    const wctx *w = &st->w;
    if (check_entries(w, entries, 0) < 0) return -1;
    size_t n = dedupe_entries((entry *)entries->d, entries->n);
    st->statmd_name.n = st->statmd_ref.n = st->statmd_span.n = 0;
    if (vec_reserve(&st->statmd_name, n) < 0 || vec_reserve(&st->statmd_ref, n) < 0 ||
        vec_reserve(&st->statmd_span, n) < 0)
        return -1;
    int32_t *vals = malloc((n ? n : 1) * sizeof(int32_t));
    if (!vals) return no_memory();
    for (size_t i = 0; i < n; i++) {
        const entry *e = &VEC_AT(*entries, entry, i);
        const uint8_t *p = e->data, *end = e->data ? e->data + e->len : NULL;
        entry name = {0, 0, NULL, 0};
        field f;
        int r = 0;
        while (p && (r = next_field(w, &p, end, &f, D_METADATA)) > 0) {
            if (f.num == 2 && f.wt == 2) {
                name.data = f.data;
                name.len = f.len;
            }
        }
        int32_t code = r < 0 ? -1
                             : strtab_intern(&st->stat_names, (const char *)name.data,
                                             (Py_ssize_t)name.len);
        if (code < 0) {
            free(vals);
            return -1;
        }
        VEC_AT(st->statmd_name, int32_t, i) = code;
        VEC_AT(st->statmd_ref, int32_t, i) = -1;
        VEC_AT(st->statmd_span, entry, i) = name;
        vals[i] = (int32_t)i;
    }
    st->statmd_name.n = st->statmd_ref.n = st->statmd_span.n = n;
    int rc = idmap_build(&st->stat_map, (entry *)entries->d, n, vals);
    free(vals);
    return rc;
}

static int build_event_metadata(state *st, int32_t plane_row, vec *entries) {
    const wctx *w = &st->w;
    if (check_entries(w, entries, 5) < 0) return -1; /* 5: stats, XStat messages */
    size_t n = dedupe_entries((entry *)entries->d, entries->n);
    int32_t *vals = malloc((n ? n : 1) * sizeof(int32_t));
    if (!vals) return no_memory();
    for (size_t i = 0; i < n; i++) {
        const entry *e = &VEC_AT(*entries, entry, i);
        int32_t row = (int32_t)st->md_plane.n;
        const uint8_t *p = e->data, *end = e->data ? e->data + e->len : NULL;
        const uint8_t *name = NULL, *dname = NULL;
        size_t name_len = 0, dname_len = 0;
        field f;
        int r = 0;
        /* First the names, then the stats (they are owned by this row). */
        while (p && (r = next_field(w, &p, end, &f, D_METADATA)) > 0) {
            if (f.num == 2 && f.wt == 2) {
                name = f.data;
                name_len = f.len;
            } else if (f.num == 4 && f.wt == 2) {
                dname = f.data;
                dname_len = f.len;
            }
        }
        int32_t code = -1;
        if (r >= 0) code = strtab_intern(&st->event_names, (const char *)name, (Py_ssize_t)name_len);
        if (code < 0 || push_str(&st->md_display_names, dname, dname_len) < 0) {
            free(vals);
            return -1;
        }
        if (vec_reserve(&st->md_plane, st->md_plane.n + 1) < 0 ||
            vec_reserve(&st->md_id, st->md_id.n + 1) < 0 ||
            vec_reserve(&st->md_name, st->md_name.n + 1) < 0) {
            free(vals);
            return -1;
        }
        VEC_AT(st->md_plane, int32_t, st->md_plane.n++) = plane_row;
        VEC_AT(st->md_id, int64_t, st->md_id.n++) = e->id;
        VEC_AT(st->md_name, int32_t, st->md_name.n++) = code;
        vals[i] = row;
        p = e->data;
        while (p && (r = next_field(w, &p, end, &f, D_METADATA)) > 0) {
            if (f.num == 5 && f.wt == 2 &&
                decode_stat(st, &st->md_stats, row, f.data, f.data + f.len, D_METADATA_STAT) < 0) {
                free(vals);
                return -1;
            }
        }
        if (r < 0) {
            free(vals);
            return -1;
        }
    }
    int rc = idmap_build(&st->meta_map, (entry *)entries->d, n, vals);
    free(vals);
    return rc;
}

static int push_line_span(state *st, int64_t n, int64_t lo, int64_t hi) {
    VEC_PUSH(st->line_events, int64_t, n);
    VEC_PUSH(st->line_first, int64_t, lo);
    VEC_PUSH(st->line_last, int64_t, hi);
    return 0;
}

static int fill_plane(state *st, int32_t plane_row, int32_t *line_row, const uint8_t *p,
                      const uint8_t *end) {
    const wctx *w = &st->w;
    field f;
    int r;
    int rc = -1;
    vec lines = {NULL, 0, 0, sizeof(entry)}, evmd = {NULL, 0, 0, sizeof(entry)},
        stmd = {NULL, 0, 0, sizeof(entry)}, pstats = {NULL, 0, 0, sizeof(entry)};
    int64_t seq = 0;
    while ((r = next_field(w, &p, end, &f, D_PLANE)) > 0) {
        if (f.wt != 2) continue;
        entry e = {0, seq++, f.data, f.len};
        if (f.num == 3) {
            if (vec_reserve(&lines, lines.n + 1) < 0) goto done;
            VEC_AT(lines, entry, lines.n++) = e;
        } else if (f.num == 4) {
            if (collect_entries(st, &evmd, f.data, f.data + f.len, seq, 5) < 0) goto done;
        } else if (f.num == 5) {
            if (collect_entries(st, &stmd, f.data, f.data + f.len, seq, 0) < 0) goto done;
        } else if (f.num == 6) {
            if (vec_reserve(&pstats, pstats.n + 1) < 0) goto done;
            VEC_AT(pstats, entry, pstats.n++) = e;
        }
    }
    if (r < 0) goto done;
    if (build_stat_metadata(st, &stmd) < 0) goto done;
    if (build_event_metadata(st, plane_row, &evmd) < 0) goto done;
    for (size_t i = 0; i < pstats.n; i++) {
        const entry *e = &VEC_AT(pstats, entry, i);
        if (decode_stat(st, &st->plane_stats, plane_row, e->data, e->data + e->len, D_PLANE_STAT) < 0)
            goto done;
    }
    for (size_t i = 0; i < lines.n; i++) {
        const entry *e = &VEC_AT(lines, entry, i);
        int32_t row = (*line_row)++;
        if ((size_t)row >= st->line_ts.n) {
            changed();
            goto done;
        }
        int64_t ts = VEC_AT(st->line_ts, int64_t, row);
        const uint8_t *q = e->data, *qend = e->data + e->len;
        size_t first_event = st->ev_line.n, first_any = st->ev_line.n + st->ag_line.n;
        for (;;) {
            while (q < qend && *q == 0x22) { /* events: one-byte tag of field 4 */
                uint64_t len;
                q++;
                if (read_varint(w, &q, qend, &len) < 0) goto done;
                if (len > (uint64_t)(qend - q)) {
                    fail_at(w, q, "length past end of message");
                    goto done;
                }
                if (decode_event(st, row, ts, q, q + len) < 0) goto done;
                q += len;
            }
            if ((r = next_field(w, &q, qend, &f, D_LINE)) <= 0) break;
            if (f.num == 4 && f.wt == 2 &&
                decode_event(st, row, ts, f.data, f.data + f.len) < 0)
                goto done;
        }
        if (r < 0) goto done;
        if (st->ev_line.n + st->ag_line.n - first_any !=
            (size_t)VEC_AT(st->line_count, int64_t, row)) {
            changed();
            goto done;
        }
        /* The line's span, while its events are still in cache (0/0 when it has none). */
        int64_t lo = 0, hi = 0;
        const int64_t *starts = (const int64_t *)st->ev_start.d;
        const int64_t *durs = (const int64_t *)st->ev_dur.d;
        if (st->ev_line.n > first_event) {
            lo = INT64_MAX;
            hi = INT64_MIN;
            for (size_t k = first_event; k < st->ev_line.n; k++) {
                if (starts[k] < lo) lo = starts[k];
                if (starts[k] + durs[k] > hi) hi = starts[k] + durs[k];
            }
        }
        if (push_line_span(st, (int64_t)(st->ev_line.n - first_event), lo, hi) < 0) goto done;
    }
    /* The whole plane is decoded, its metadata too (large on GPU and TPU planes). */
    if (st->release_next != UINTPTR_MAX) release_consumed(st, end);
    rc = 0;
done:
    vec_free(&lines);
    vec_free(&evmd);
    vec_free(&stmd);
    vec_free(&pstats);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Entry point.                                                                           */

static int put(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static int put_column(PyObject *d, const char *key, vec *v) {
    return put(d, key, vec_to_column(v));
}

static int put_sink(PyObject *d, const char *prefix, sink *s) {
    PyObject *sub = PyDict_New();
    if (!sub) return -1;
    if (put_column(sub, "owner", &s->owner) < 0 || put_column(sub, "stat", &s->stat) < 0 ||
        put_column(sub, "kind", &s->kind) < 0 || put_column(sub, "int_value", &s->ival) < 0 ||
        put_column(sub, "float_value", &s->fval) < 0 ||
        put_column(sub, "str_value", &s->sval) < 0) {
        Py_DECREF(sub);
        return -1;
    }
    return put(d, prefix, sub);
}

static void state_free(state *st) {
    strtab_free(&st->event_names);
    strtab_free(&st->stat_names);
    strtab_free(&st->str_values);
    vec *vecs[] = {&st->plane_xid, &st->line_plane, &st->line_id, &st->line_ts,
                   &st->line_dur, &st->line_display_id, &st->line_count, &st->line_events,
                   &st->line_first, &st->line_last, &st->ev_line,
                   &st->ev_name, &st->ev_start, &st->ev_dur, &st->ag_line, &st->ag_name,
                   &st->ag_count, &st->ag_dur, &st->md_plane, &st->md_id, &st->md_name,
                   &st->statmd_name, &st->statmd_ref, &st->statmd_span};
    for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) vec_free(vecs[i]);
    sink_free(&st->ev_stats);
    sink_free(&st->ag_stats);
    sink_free(&st->plane_stats);
    sink_free(&st->md_stats);
    idmap_free(&st->stat_map);
    idmap_free(&st->meta_map);
    vec_free(&st->plane_names);
    vec_free(&st->line_names);
    vec_free(&st->line_display_names);
    vec_free(&st->md_display_names);
    for (size_t i = 0; i < st->merged.n; i++) free(VEC_AT(st->merged, uint8_t *, i));
    vec_free(&st->merged);
    vec_free(&st->planes);
    vec_free(&st->hostnames);
    vec_free(&st->errors);
    vec_free(&st->warnings);
    free(st->strings);
}

/* ------------------------------------------------------------------------------------ */
/* Reading a mapped file that shrinks: SIGBUS.                                            */
/* A page of a mapping past the end of its file raises SIGBUS when read. While the        */
/* decoder reads its input, a handler turns that into a jump back to decode_space (the    */
/* fault's address is inside the input: anything else goes to the handler that was        */
/* there before, or kills as it would have), which raises "the trace changed while it was */
/* read". Faults happen only in this file's own reads of the input, never inside malloc   */
/* or Python, and every string is copied out of the input (own_strings) before Python     */
/* objects are made, so the jump leaves nothing half done; the state it frees lives on    */
/* the heap. The handler is installed while any thread decodes (a count), per process.    */

#if defined(SIGBUS) && defined(SA_SIGINFO)
#define GUARD 1
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static int guard_users;
static struct sigaction guard_saved;
static _Thread_local sigjmp_buf guard_env;
static _Thread_local volatile sig_atomic_t guard_on;
static _Thread_local const uint8_t *guard_lo, *guard_hi;

static void guard_handler(int sig, siginfo_t *si, void *uc) {
    const uint8_t *at = (const uint8_t *)si->si_addr;
    if (guard_on && at >= guard_lo && at < guard_hi) {
        guard_on = 0;
        siglongjmp(guard_env, 1);
    }
    if ((guard_saved.sa_flags & SA_SIGINFO) && guard_saved.sa_sigaction) {
        guard_saved.sa_sigaction(sig, si, uc);
        return;
    }
    if (!(guard_saved.sa_flags & SA_SIGINFO) && guard_saved.sa_handler != SIG_DFL &&
        guard_saved.sa_handler != SIG_IGN) {
        guard_saved.sa_handler(sig);
        return;
    }
    /* What would have happened without us: the faulting read runs again and kills. */
    signal(sig, SIG_DFL);
}

static int guard_install(void) {
    int ok = 1;
    pthread_mutex_lock(&guard_mu);
    if (guard_users == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = guard_handler;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        ok = sigaction(SIGBUS, &sa, &guard_saved) == 0;
    }
    if (ok) guard_users++;
    pthread_mutex_unlock(&guard_mu);
    return ok;
}

static void guard_remove(void) {
    guard_on = 0;
    pthread_mutex_lock(&guard_mu);
    if (--guard_users == 0) sigaction(SIGBUS, &guard_saved, NULL);
    pthread_mutex_unlock(&guard_mu);
}
#endif

/* Copy the bytes of every string the result names out of the input, so that nothing
 * reads the input once the guard is off (and a dropped page is not faulted back in). */
static int own_strings(state *st) {
    vec *lists[] = {&st->hostnames, &st->errors, &st->warnings, &st->event_names.refs,
                    &st->stat_names.refs, &st->str_values.refs, &st->plane_names,
                    &st->line_names, &st->line_display_names, &st->md_display_names};
    size_t n = sizeof(lists) / sizeof(lists[0]), total = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < lists[i]->n; k++) total += VEC_AT(*lists[i], strref, k).len;
    st->strings = malloc(total ? total : 1);
    if (!st->strings) return no_memory();
    char *at = st->strings;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < lists[i]->n; k++) {
            strref *r = &VEC_AT(*lists[i], strref, k);
            if (r->len) memcpy(at, r->p, r->len);
            r->p = (const uint8_t *)at;
            at += r->len;
        }
    }
    return 0;
}

/* The wire format to columns, in st (the GIL released, when st->thread is set). */
static int decode_wire(state *st, const uint8_t *buf, size_t size, PyObject *between_passes) {
    if (strtab_init(&st->event_names) < 0 || strtab_init(&st->stat_names) < 0 ||
        strtab_init(&st->str_values) < 0)
        return -1;

    /* XSpace */
    const uint8_t *p = buf, *end = buf + size;
    field f;
    int r;
    while ((r = next_field(&st->w, &p, end, &f, D_SPACE)) > 0) {
        if (f.wt != 2) continue;
        if (f.num == 1) {
            if (vec_reserve(&st->planes, st->planes.n + 1) < 0) return -1;
            entry e = {0, 0, f.data, f.len};
            VEC_AT(st->planes, entry, st->planes.n++) = e;
        } else if (f.num == 2 || f.num == 3 || f.num == 4) {
            vec *list = f.num == 2 ? &st->errors : f.num == 3 ? &st->warnings : &st->hostnames;
            if (push_str(list, f.data, f.len) < 0) return -1;
        }
    }
    if (r < 0) return -1;

    size_t total = 0;
    for (size_t i = 0; i < st->planes.n; i++) {
        const entry *e = &VEC_AT(st->planes, entry, i);
        if (index_plane(st, (int32_t)i, e->data, e->data + e->len, &total) < 0) return -1;
    }
    if (total > (size_t)INT32_MAX)
        return set_error(PyExc_OverflowError, "more than 2**31 events in one file");
    if (vec_reserve(&st->ev_line, total) < 0 || vec_reserve(&st->ev_name, total) < 0 ||
        vec_reserve(&st->ev_start, total) < 0 || vec_reserve(&st->ev_dur, total) < 0)
        return -1;
    st->ev_alloc = total;
    if (between_passes != Py_None) { /* tests: change the input here */
        if (st->thread) PyEval_RestoreThread(st->thread);
        st->thread = NULL;
        PyObject *res = PyObject_CallNoArgs(between_passes);
        if (!res) return -1;
        Py_DECREF(res);
    }

    int32_t line_row = 0;
    for (size_t i = 0; i < st->planes.n; i++) {
        const entry *e = &VEC_AT(st->planes, entry, i);
        if (fill_plane(st, (int32_t)i, &line_row, e->data, e->data + e->len) < 0) return -1;
    }
    if ((size_t)line_row != st->line_ts.n) return changed();
    if (report_progress(st, end) < 0) return -1;
    return own_strings(st);
}

static PyObject *decode_space(const uint8_t *buf, size_t size, PyObject *progress,
                              size_t release_every, int nogil, PyObject *between_passes,
                              int mapped) {
    /* On the heap: decode_wire changes it, and a SIGBUS jumps back past that. */
    state *st = calloc(1, sizeof(state));
    if (!st) return PyErr_NoMemory();
    st->w.base = buf;
    st->progress = progress;
    st->nogil = nogil;
    st->release_next = UINTPTR_MAX;
#ifdef MADV_DONTNEED
    if (release_every > 0) {
        long page = sysconf(_SC_PAGESIZE);
        st->page = page > 0 ? (uintptr_t)page : 4096;
        st->released = ((uintptr_t)buf + st->page - 1) & ~(st->page - 1);
        st->release_every = release_every;
        st->release_next = (uintptr_t)buf + release_every;
    }
#else
    (void)release_every;
#endif
    st->empty_event_name = st->empty_stat_name = st->empty_str_value = -1;
    st->plane_xid.esz = 8;
    st->line_plane.esz = 4;
    st->line_id.esz = st->line_ts.esz = st->line_dur.esz = st->line_display_id.esz =
        st->line_count.esz = st->line_events.esz = st->line_first.esz = st->line_last.esz = 8;
    st->ev_line.esz = st->ev_name.esz = 4;
    st->ev_start.esz = st->ev_dur.esz = 8;
    st->ag_line.esz = st->ag_name.esz = 4;
    st->ag_count.esz = st->ag_dur.esz = 8;
    st->md_plane.esz = st->md_name.esz = 4;
    st->md_id.esz = 8;
    st->statmd_name.esz = st->statmd_ref.esz = 4;
    st->statmd_span.esz = sizeof(entry);
    st->merged.esz = sizeof(uint8_t *);
    st->planes.esz = sizeof(entry);
    sink_init(&st->ev_stats);
    sink_init(&st->ag_stats);
    sink_init(&st->plane_stats);
    sink_init(&st->md_stats);
    st->plane_names.esz = st->line_names.esz = st->line_display_names.esz =
        st->md_display_names.esz = st->hostnames.esz = st->errors.esz = st->warnings.esz =
            sizeof(strref);

    PyObject *result = NULL;
    pending.type = NULL;
    /* From here to the result, no Python object is touched (see pending_error). */
    st->thread = nogil ? PyEval_SaveThread() : NULL;
    int rc;
#ifdef GUARD
    volatile int guarded = mapped && guard_install();
    if (guarded) {
        guard_lo = buf;
        guard_hi = buf + size;
        if (sigsetjmp(guard_env, 1) != 0) {
            guard_remove();
            if (st->thread) PyEval_RestoreThread(st->thread);
            st->thread = NULL;
            changed(); /* the file shrank under its mapping */
            goto fail;
        }
        guard_on = 1;
    }
    rc = decode_wire(st, buf, size, between_passes);
    if (guarded) guard_remove();
#else
    (void)mapped;
    rc = decode_wire(st, buf, size, between_passes);
#endif
    if (st->thread) PyEval_RestoreThread(st->thread);
    st->thread = NULL;
    if (rc < 0) goto fail;

    result = PyDict_New();
    if (!result) goto fail;
    PyObject *sub;
#define PUT_DICT(name, ...)                                        \
    sub = PyDict_New();                                            \
    if (!sub) goto fail;                                           \
    if (put(result, name, sub) < 0) goto fail;                     \
    __VA_ARGS__
    if (put(result, "hostnames", str_list(&st->hostnames, NAME_ERRORS)) < 0 ||
        put(result, "errors", str_list(&st->errors, NAME_ERRORS)) < 0 ||
        put(result, "warnings", str_list(&st->warnings, NAME_ERRORS)) < 0 ||
        put(result, "event_names", str_list(&st->event_names.refs, NAME_ERRORS)) < 0 ||
        put(result, "stat_names", str_list(&st->stat_names.refs, NAME_ERRORS)) < 0 ||
        put(result, "str_values", str_list(&st->str_values.refs, VALUE_ERRORS)) < 0 ||
        put(result, "plane_names", str_list(&st->plane_names, NAME_ERRORS)) < 0 ||
        put(result, "line_names", str_list(&st->line_names, NAME_ERRORS)) < 0 ||
        put(result, "line_display_names", str_list(&st->line_display_names, NAME_ERRORS)) < 0 ||
        put(result, "metadata_display_names", str_list(&st->md_display_names, NAME_ERRORS)) < 0)
        goto fail;
    {
        PUT_DICT("planes", if (put_column(sub, "xplane_id", &st->plane_xid) < 0) goto fail;)
    }
    {
        PUT_DICT("lines", if (put_column(sub, "plane_row", &st->line_plane) < 0 ||
                              put_column(sub, "line_id", &st->line_id) < 0 ||
                              put_column(sub, "timestamp_ns", &st->line_ts) < 0 ||
                              put_column(sub, "duration_ps", &st->line_dur) < 0 ||
                              put_column(sub, "display_id", &st->line_display_id) < 0 ||
                              put_column(sub, "event_count", &st->line_count) < 0 ||
                              put_column(sub, "timed_events", &st->line_events) < 0 ||
                              put_column(sub, "first_start_ns", &st->line_first) < 0 ||
                              put_column(sub, "last_end_ns", &st->line_last) < 0) goto fail;)
    }
    {
        PUT_DICT("events", if (put_column(sub, "line_row", &st->ev_line) < 0 ||
                               put_column(sub, "name", &st->ev_name) < 0 ||
                               put_column(sub, "start_ns", &st->ev_start) < 0 ||
                               put_column(sub, "duration_ns", &st->ev_dur) < 0) goto fail;)
    }
    {
        PUT_DICT("aggregated", if (put_column(sub, "line_row", &st->ag_line) < 0 ||
                                   put_column(sub, "name", &st->ag_name) < 0 ||
                                   put_column(sub, "occurrences", &st->ag_count) < 0 ||
                                   put_column(sub, "duration_ps", &st->ag_dur) < 0) goto fail;)
    }
    {
        PUT_DICT("metadata", if (put_column(sub, "plane_row", &st->md_plane) < 0 ||
                                 put_column(sub, "metadata_id", &st->md_id) < 0 ||
                                 put_column(sub, "name", &st->md_name) < 0) goto fail;)
    }
#undef PUT_DICT
    if (put_sink(result, "event_stats", &st->ev_stats) < 0 ||
        put_sink(result, "aggregated_stats", &st->ag_stats) < 0 ||
        put_sink(result, "plane_stats", &st->plane_stats) < 0 ||
        put_sink(result, "metadata_stats", &st->md_stats) < 0)
        goto fail;
    state_free(st);
    free(st);
    return result;

fail:
    raise_pending();
    Py_XDECREF(result);
    state_free(st);
    free(st);
    return NULL;
}

static PyObject *mmap_type; /* mmap.mmap */

static PyObject *wire_decode(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"data",        "progress",       "release_every",
                             "release_gil", "between_passes", NULL};
    Py_buffer view;
    PyObject *progress = Py_None, *between_passes = Py_None;
    Py_ssize_t release_every = 0;
    int release_gil = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|O$npO:decode", kwlist, &view, &progress,
                                     &release_every, &release_gil, &between_passes))
        return NULL;
    if (release_gil && (progress != Py_None || !view.readonly || between_passes != Py_None)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        "release_gil needs read-only data, no progress callback and no "
                        "between_passes");
        return NULL;
    }
    /* A read-only mmap is a mapping of a file (or of shared or untouched anonymous
     * memory): dropping its pages never changes what it reads. */
    int mapped = view.readonly && view.obj &&
                 PyObject_TypeCheck(view.obj, (PyTypeObject *)mmap_type);
    if (release_every < 0 || (release_every > 0 && !mapped)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        "release_every needs a read-only mmap.mmap and a size >= 0");
        return NULL;
    }
    if (release_every > view.len) release_every = view.len; /* no pointer overflow */
    PyObject *result = decode_space((const uint8_t *)view.buf, (size_t)view.len, progress,
                                    (size_t)release_every, release_gil, between_passes, mapped);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef wire_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))wire_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(data, progress=None, *, release_every=0, release_gil=False,\n"
     "       between_passes=None) -> dict\n\n"
     "Decode serialized XSpace bytes into columns. progress(bytes_done) is called\n"
     "about every million events. With release_every > 0, data must be a read-only\n"
     "mmap.mmap: every release_every bytes, the event pass drops the pages it has\n"
     "decoded from this process's memory (they stay in the page cache). With\n"
     "release_gil, other threads run Python while it decodes (read-only data, no\n"
     "progress callback: it cannot be interrupted). between_passes() is called between\n"
     "the index and the fill pass (tests change the input there). Raises ValueError on\n"
     "malformed input, and on input that changed between the two passes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT, "_wire", "Compiled XSpace wire-format decoder.", -1, wire_methods,
};

PyMODINIT_FUNC PyInit__wire(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    if (!mmap_type) {
        PyObject *mod = PyImport_ImportModule("mmap");
        if (!mod) return NULL;
        mmap_type = PyObject_GetAttrString(mod, "mmap");
        Py_DECREF(mod);
        if (!mmap_type) return NULL;
    }
    PyObject *m = PyModule_Create(&wire_module);
    if (!m) return NULL;
    Py_INCREF(&ColumnType);
    if (PyModule_AddObject(m, "Column", (PyObject *)&ColumnType) < 0) {
        Py_DECREF(&ColumnType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ABI", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
