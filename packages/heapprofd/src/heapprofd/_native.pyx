# cython: language_level=3, binding=False, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True
"""The compiled core: the SharedRingBuffer and the allocator hooks of the client.

The ring buffer follows upstream's layout: a metadata page (spinlock, read and write
positions, stats) followed by a power-of-two data area that is mapped twice back to back, so
a record that wraps is still contiguous in memory. Records are framed by an 8-byte header
whose first 4 bytes hold the record size (0 while the record is being written).

The hooks wrap Python's raw, mem and object allocators (`PyMem_SetAllocator`), sample like
upstream's sampler (exponential intervals, allocations at least as large as the interval
always sampled), capture the Python stack of sampled allocations, intern its frames (each
frame is sent once per connection) and write Malloc/Free records into the ring buffer.
"""

from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t, uintptr_t

cdef extern from *:
    """
    #include <dlfcn.h>
    #include <errno.h>
    #include <math.h>
    #include <sched.h>
    #include <stdint.h>
    #include <string.h>
    #include <sys/mman.h>
    #include <sys/socket.h>
    #include <sys/stat.h>
    #include <sys/syscall.h>
    #include <time.h>
    #include <unistd.h>
    #define Py_BUILD_CORE 1
    #include "internal/pycore_frame.h"
    #undef Py_BUILD_CORE

    #include "heapprofd/_ring.h"
    #include "heapprofd/_native_sampler.h"

    static uint64_t hp_sampler_call(hp_sampler_t *s, const uint8_t *regs, const uint8_t *stack,
                                    uint64_t stack_len, uint64_t sp, const uint8_t *ids,
                                    uint64_t ids_len, const uint64_t **pcs, int *n,
                                    int *error) {
        return s->run(s->self, regs, stack, stack_len, sp, ids, ids_len, pcs, n, error);
    }

    /* ---- Python stacks (CPython's interpreter frames; 3.13 moved the current one into the
       thread state and named its code f_executable) ---- */
    #if PY_VERSION_HEX >= 0x030D0000
    #define HP_CURRENT_FRAME(ts) ((ts)->current_frame)
    #define HP_FRAME_CODE(f) ((PyObject *)(f)->f_executable)
    #else
    #define HP_CURRENT_FRAME(ts) ((ts)->cframe == NULL ? NULL : (ts)->cframe->current_frame)
    #define HP_FRAME_CODE(f) ((PyObject *)(f)->f_code)
    #endif
    /* The code objects of `heapprofd run`'s own frames (and runpy's), outside the program:
       a stack's outermost frames among them are not the program's and are left out. */
    #define HP_MAX_RUNNER_CODES 32
    static PyObject *hp_runner_codes[HP_MAX_RUNNER_CODES];
    static int hp_runner_count;

    static int hp_is_runner(PyObject *code) {
        for (int i = 0; i < hp_runner_count; i++)
            if (hp_runner_codes[i] == code) return 1;
        return 0;
    }

    static int hp_walk_thread(PyThreadState *ts, PyObject **codes, int *lastis, int max) {
        if (ts == NULL) return 0;
        _PyInterpreterFrame *f = HP_CURRENT_FRAME(ts);
        int n = 0;
        while (f != NULL && n < max) {
            if (!_PyFrame_IsIncomplete(f) && PyCode_Check(HP_FRAME_CODE(f))) {
                codes[n] = HP_FRAME_CODE(f);
                lastis[n] = _PyInterpreterFrame_LASTI(f);
                n++;
            }
            f = f->previous;
        }
        if (f == NULL)
            while (n > 0 && hp_is_runner(codes[n - 1])) n--;
        return n;
    }

    static int hp_walk(PyObject **codes, int *lastis, int max) {
        return hp_walk_thread(_PyThreadState_UncheckedGet(), codes, lastis, max);
    }

    /* This thread's frames, with or without the GIL: a thread without it is in C code, so
       its frames (and the code objects they hold) stay as they are. */
    static int hp_walk_this_thread(PyObject **codes, int *lastis, int max) {
        return hp_walk_thread(PyGILState_GetThisThreadState(), codes, lastis, max);
    }

    /* The address of a local variable of this thread's innermost evaluation loop (on its C
       stack), 0 when none runs: 3.11's and 3.12's thread state points at the loop's cframe,
       3.13's frame chain holds the loop's entry frame (owned by the C stack). */
    static uintptr_t hp_eval_loop_local(void) {
        PyThreadState *ts = PyGILState_GetThisThreadState();
        if (ts == NULL) return 0;
    #if PY_VERSION_HEX >= 0x030D0000
        for (_PyInterpreterFrame *f = ts->current_frame; f != NULL; f = f->previous)
            if (f->owner == FRAME_OWNED_BY_CSTACK) return (uintptr_t)f;
        return 0;
    #else
        return ts->cframe == NULL || ts->cframe == &ts->root_cframe ? 0 : (uintptr_t)ts->cframe;
    #endif
    }

    /* A str's UTF-8 without the GIL: compact ASCII strings only, else NULL. */
    static const char *hp_ascii(PyObject *s, Py_ssize_t *len) {
        if (!PyUnicode_Check(s) || !PyUnicode_IS_COMPACT_ASCII(s)) return NULL;
        *len = PyUnicode_GET_LENGTH(s);
        return (const char *)(((PyASCIIObject *)s) + 1);
    }
    static PyObject *hp_code_qualname(PyObject *code) { return ((PyCodeObject *)code)->co_qualname; }
    static PyObject *hp_code_filename(PyObject *code) { return ((PyCodeObject *)code)->co_filename; }

    /* The frame table's lock: the native client's thread may read it without the GIL. */
    static uint8_t hp_frames_locked;
    static int hp_frames_trylock(void) {
        for (int i = 0; i < 4096; i++)
            if (!__atomic_exchange_n(&hp_frames_locked, 1, __ATOMIC_ACQUIRE)) return 1;
        return 0;
    }
    static void hp_frames_lock(void) { while (!hp_frames_trylock()) sched_yield(); }
    static void hp_frames_unlock(void) { __atomic_store_n(&hp_frames_locked, 0, __ATOMIC_RELEASE); }

    static int hp_code_line(PyObject *code, int lasti) {
        return PyCode_Addr2Line((PyCodeObject *)code, lasti * (int)sizeof(_Py_CODEUNIT));
    }

    /* ---- the Python heap's allocator hooks ----
       An allocation that is not sampled costs a thread-local byte countdown and a tail call
       into the original allocator; a free costs a look at the count of sampled addresses (and,
       when some are live, one byte of a counting filter). Everything else is the slow path. */
    #define HP_LIKELY(x) __builtin_expect(!!(x), 1)
    #define HP_UNLIKELY(x) __builtin_expect(!!(x), 0)
    #define HP_PYMALLOC_SMALL 512u

    typedef struct {
        int64_t to_next;  /* bytes left until this thread's next sample */
        uint64_t epoch;   /* the hp_epoch that to_next was drawn for */
        uint64_t rng;
        int nested;       /* inside a mem/object allocation that may reach the raw allocator */
        int in_hook;      /* inside the sampled path */
    } hp_tls_t;
    static __thread hp_tls_t hp_tls __attribute__((tls_model("initial-exec")));

    typedef struct { uint64_t *keys; uint64_t cap; uint64_t count; uint8_t *filter; } hp_set_t;
    static hp_set_t hp_py_sampled;            /* live sampled addresses of the Python heap */
    static uint64_t hp_interval = 0;          /* the Python heap's interval; 0: not sampling */
    static uint64_t hp_large = UINT64_MAX;    /* sizes of at least this take the slow path */
    /* pymalloc's sizes that may take the fast path: 1 to min(512, interval - 1) */
    static uint64_t hp_py_fast_max = HP_PYMALLOC_SMALL;
    static uint64_t hp_epoch = 1;             /* changes with the interval: countdowns redraw */

    typedef struct { PyMemAllocatorEx orig; int raw; } hp_domain_t;
    static hp_domain_t hp_domains[3];
    static void (*hp_on_sample)(int raw, void *p, uint64_t size, uint64_t sample);
    static void (*hp_on_free)(int raw, void *p);

    /* The native preload library's guard, when it is loaded: while this thread is in the
       sampled path, the library does not sample the allocations it makes either. */
    typedef void (*hp_preload_in_hook_fn)(int v);
    static hp_preload_in_hook_fn hp_preload_in_hook;

    static int hp_get_in_hook(void) { return hp_tls.in_hook; }
    static void hp_set_in_hook(int v) {
        hp_tls.in_hook = v;
        if (hp_preload_in_hook != NULL) hp_preload_in_hook(v);
    }

    static inline uint64_t hp_filter_slot(uint64_t k) { return ((k >> 4) ^ (k >> 20)) & 0xffff; }

    static void hp_set_python_interval(uint64_t interval) {
        hp_interval = interval;
        hp_large = interval ? interval : UINT64_MAX;
        hp_py_fast_max = interval && interval - 1 < HP_PYMALLOC_SMALL ? interval - 1
                                                                      : HP_PYMALLOC_SMALL;
        hp_epoch++;
    }

    static int64_t hp_draw(hp_tls_t *t, uint64_t interval) {
        if (t->rng == 0) t->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)(uintptr_t)t << 16);
        t->rng ^= t->rng << 13;
        t->rng ^= t->rng >> 7;
        t->rng ^= t->rng << 17;
        double u = ((t->rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        return (int64_t)(-log(u) * (double)interval) + 1;
    }

    /* Upstream's sampler on this thread's countdown: 0 when not sampled, else the bytes
       the sample stands for. */
    static uint64_t hp_sample(hp_tls_t *t, uint64_t size) {
        uint64_t interval = hp_interval, n = 0;
        if (t->epoch != hp_epoch) {
            t->epoch = hp_epoch;
            t->to_next = interval ? hp_draw(t, interval) : INT64_MAX;
        }
        if (interval == 0) { t->to_next = INT64_MAX; return 0; }
        if (size >= interval) return size;
        t->to_next -= (int64_t)size;
        while (t->to_next <= 0) { t->to_next += hp_draw(t, interval); n++; }
        return n * interval;
    }

    /* 1 (the countdown taken) when an allocation of `size`, known to be less than the
       interval, is not sampled. */
    static inline int hp_skip_small(hp_tls_t *t, uint64_t size) {
        int64_t left = t->to_next - (int64_t)size;
        if (HP_LIKELY(t->epoch == hp_epoch && left > 0)) {
            t->to_next = left;
            return 1;
        }
        return 0;
    }

    static inline int hp_skip(hp_tls_t *t, uint64_t size) {
        return HP_LIKELY(size < hp_large) && hp_skip_small(t, size);
    }

    static inline int hp_maybe_sampled(void *p) {
        return HP_UNLIKELY(hp_py_sampled.count != 0)
            && hp_py_sampled.filter[hp_filter_slot((uint64_t)(uintptr_t)p)] && p != NULL;
    }

    static void hp_after_alloc(hp_domain_t *d, hp_tls_t *t, void *p, uint64_t size) {
        uint64_t sample = hp_sample(t, size);
        if (sample && !t->in_hook) hp_on_sample(d->raw, p, size, sample);
    }

    static inline uint64_t hp_calloc_size(size_t nelem, size_t elsize) {
        size_t size;
        return __builtin_mul_overflow(nelem, elsize, &size) ? UINT64_MAX : (uint64_t)size;
    }

    /* Each hook is a fast path ending in a tail call to the original allocator; the rest
       is in separate functions so that the fast path needs no stack frame. */
    #define HP_SLOW __attribute__((noinline, cold))

    static HP_SLOW void *hp_malloc_slow(hp_domain_t *d, size_t size) {
        hp_tls_t *t = &hp_tls;
        void *p;
        if (d->raw) {
            p = d->orig.malloc(d->orig.ctx, size);
        } else {
            t->nested++;
            p = d->orig.malloc(d->orig.ctx, size);
            t->nested--;
        }
        if (p) hp_after_alloc(d, t, p, size);
        return p;
    }

    static HP_SLOW void *hp_calloc_slow(hp_domain_t *d, size_t nelem, size_t elsize) {
        hp_tls_t *t = &hp_tls;
        void *p;
        if (d->raw) {
            p = d->orig.calloc(d->orig.ctx, nelem, elsize);
        } else {
            t->nested++;
            p = d->orig.calloc(d->orig.ctx, nelem, elsize);
            t->nested--;
        }
        if (p) hp_after_alloc(d, t, p, hp_calloc_size(nelem, elsize));
        return p;
    }

    static HP_SLOW void *hp_realloc_slow(hp_domain_t *d, void *ptr, size_t size) {
        hp_tls_t *t = &hp_tls;
        void *p;
        if (d->raw) {
            p = d->orig.realloc(d->orig.ctx, ptr, size);
        } else {
            t->nested++;
            p = d->orig.realloc(d->orig.ctx, ptr, size);
            t->nested--;
        }
        if (p) {
            if (hp_maybe_sampled(ptr)) hp_on_free(d->raw, ptr);
            hp_after_alloc(d, t, p, size);
        }
        return p;
    }

    static HP_SLOW void hp_free_slow(hp_domain_t *d, void *ptr) {
        hp_on_free(d->raw, ptr);
        d->orig.free(d->orig.ctx, ptr);
    }

    /* The raw domain: a call made by pymalloc on behalf of a mem/object allocation
       (nested) was counted there. */
    static void *hp_raw_malloc(void *ctx, size_t size) {
        hp_domain_t *d = (hp_domain_t *)ctx;
        hp_tls_t *t = &hp_tls;
        if (HP_LIKELY(t->nested || hp_skip(t, size))) return d->orig.malloc(d->orig.ctx, size);
        return hp_malloc_slow(d, size);
    }

    static void *hp_raw_calloc(void *ctx, size_t nelem, size_t elsize) {
        hp_domain_t *d = (hp_domain_t *)ctx;
        hp_tls_t *t = &hp_tls;
        if (HP_LIKELY(t->nested || hp_skip(t, hp_calloc_size(nelem, elsize))))
            return d->orig.calloc(d->orig.ctx, nelem, elsize);
        return hp_calloc_slow(d, nelem, elsize);
    }

    static void *hp_raw_realloc(void *ctx, void *ptr, size_t size) {
        hp_domain_t *d = (hp_domain_t *)ctx;
        hp_tls_t *t = &hp_tls;
        if (HP_LIKELY(t->nested || (!hp_maybe_sampled(ptr) && hp_skip(t, size))))
            return d->orig.realloc(d->orig.ctx, ptr, size);
        return hp_realloc_slow(d, ptr, size);
    }

    /* The mem and object domains (pymalloc): blocks of up to 512 bytes never reach the raw
       allocator; larger ones (and every realloc) are marked nested while they run. */
    static void *hp_py_malloc(void *ctx, size_t size) {
        hp_domain_t *d = (hp_domain_t *)ctx;
        if (HP_LIKELY(size - 1 < hp_py_fast_max && hp_skip_small(&hp_tls, size)))
            return d->orig.malloc(d->orig.ctx, size);
        return hp_malloc_slow(d, size);
    }

    static void *hp_py_calloc(void *ctx, size_t nelem, size_t elsize) {
        hp_domain_t *d = (hp_domain_t *)ctx;
        uint64_t size = hp_calloc_size(nelem, elsize);
        if (HP_LIKELY(size - 1 < hp_py_fast_max && hp_skip_small(&hp_tls, size)))
            return d->orig.calloc(d->orig.ctx, nelem, elsize);
        return hp_calloc_slow(d, nelem, elsize);
    }

    static void *hp_py_realloc(void *ctx, void *ptr, size_t size) {
        return hp_realloc_slow((hp_domain_t *)ctx, ptr, size);
    }

    /* Frees: the free of a sampled address is reported before the block can be reused. */
    static void hp_hook_free(void *ctx, void *ptr) {
        hp_domain_t *d = (hp_domain_t *)ctx;
        if (hp_maybe_sampled(ptr)) {
            hp_free_slow(d, ptr);
            return;
        }
        d->orig.free(d->orig.ctx, ptr);
    }
    """
    ctypedef struct hp_meta_t:
        uint8_t spinlock_locked
        uint8_t spinlock_poisoned
        uint64_t read_pos
        uint64_t write_pos
        uint64_t client_spinlock_blocked_us
        uint64_t failed_spinlocks
        uint64_t error_state
        uint8_t shutting_down
        uint8_t reader_paused
        uint64_t bytes_written
        uint64_t num_writes_succeeded
        uint64_t num_writes_corrupt
        uint64_t num_writes_overflow
        uint64_t num_reads_succeeded
        uint64_t num_reads_corrupt
        uint64_t num_reads_nodata

    ctypedef struct hp_ring_t:
        hp_meta_t *meta
        uint8_t *mem
        uint64_t size
        int fd

    int hp_ring_map(hp_ring_t *r, int fd) nogil
    void hp_ring_unmap(hp_ring_t *r) nogil
    int64_t hp_ring_write(hp_ring_t *r, const void *a, uint64_t la, const void *b,
                          uint64_t lb, const void *c, uint64_t lc) nogil
    ctypedef struct hp_cursor_t:
        uint64_t count
    int hp_cursor_open(hp_ring_t *r, hp_cursor_t *c) nogil
    int hp_cursor_next(hp_ring_t *r, hp_cursor_t *c, uint8_t **data, uint64_t *size) nogil
    void hp_cursor_close(hp_ring_t *r, hp_cursor_t *c) nogil
    int hp_ring_begin_read(hp_ring_t *r, uint8_t **data, uint64_t *size) nogil
    void hp_ring_end_read(hp_ring_t *r, uint64_t size) nogil
    uint64_t hp_coarse_ns() nogil
    int hp_memfd(uint64_t size) nogil
    int hp_peer_closed(int fd) nogil
    int hp_send_byte(int fd) nogil
    int hp_walk(PyObject **codes, int *lastis, int maxn)
    PyObject *hp_runner_codes[32]
    int hp_runner_count
    int hp_walk_this_thread(PyObject **codes, int *lastis, int maxn) nogil
    uintptr_t hp_eval_loop_local() nogil
    const char *hp_ascii(PyObject *s, Py_ssize_t *length) nogil
    PyObject *hp_code_qualname(PyObject *code) nogil
    PyObject *hp_code_filename(PyObject *code) nogil
    int hp_frames_trylock() nogil
    void hp_frames_lock() nogil
    void hp_frames_unlock() nogil
    int hp_code_line(PyObject *code, int lasti) nogil
    void *dlsym(void *handle, const char *name) nogil
    void *RTLD_DEFAULT
    ctypedef void (*hp_preload_in_hook_fn)(int v) noexcept nogil
    hp_preload_in_hook_fn hp_preload_in_hook
    int hp_get_in_hook() nogil
    void hp_set_in_hook(int v) nogil
    uint64_t __atomic_load_n(uint64_t *p, int order) nogil
    uint8_t __atomic_exchange_n(uint8_t *p, uint8_t v, int order) nogil
    void __atomic_store_n(void *p, uint64_t v, int order) nogil
    int __ATOMIC_RELAXED
    int __ATOMIC_ACQUIRE

from cpython.ref cimport Py_INCREF
from libc.errno cimport errno
from libc.math cimport log
from libc.string cimport memcpy, memset
from libc.stdlib cimport calloc as c_calloc, free as c_free

cdef extern from "Python.h":
    ctypedef enum PyMemAllocatorDomain:
        PYMEM_DOMAIN_RAW
        PYMEM_DOMAIN_MEM
        PYMEM_DOMAIN_OBJ
    ctypedef struct PyMemAllocatorEx:
        void *ctx
        void *(*malloc)(void *ctx, size_t size) noexcept
        void *(*calloc)(void *ctx, size_t nelem, size_t elsize) noexcept
        void *(*realloc)(void *ctx, void *ptr, size_t new_size) noexcept
        void (*free)(void *ctx, void *ptr) noexcept
    void PyMem_GetAllocator(PyMemAllocatorDomain domain, PyMemAllocatorEx *allocator)
    void PyMem_SetAllocator(PyMemAllocatorDomain domain, PyMemAllocatorEx *allocator)
    int PyGILState_Check() nogil
    void Py_IncRef(PyObject *o) nogil
    const char *PyUnicode_AsUTF8AndSize(object o, Py_ssize_t *size) except NULL

cdef extern from *:
    ctypedef struct hp_set_t:
        uint64_t *keys
        uint64_t cap
        uint64_t count
        uint8_t *filter  # counts of members per 16-bit address hash: 0 means surely absent
    ctypedef struct hp_domain_t:
        PyMemAllocatorEx orig
        int raw
    hp_set_t hp_py_sampled
    hp_domain_t hp_domains[3]
    void (*hp_on_sample)(int raw, void *p, uint64_t size, uint64_t sample) noexcept
    void (*hp_on_free)(int raw, void *p) noexcept
    uint64_t hp_filter_slot(uint64_t k) nogil
    void hp_set_python_interval(uint64_t interval) nogil
    void *hp_raw_malloc(void *ctx, size_t size) noexcept
    void *hp_raw_calloc(void *ctx, size_t nelem, size_t elsize) noexcept
    void *hp_raw_realloc(void *ctx, void *ptr, size_t size) noexcept
    void *hp_py_malloc(void *ctx, size_t size) noexcept
    void *hp_py_calloc(void *ctx, size_t nelem, size_t elsize) noexcept
    void *hp_py_realloc(void *ctx, void *ptr, size_t size) noexcept
    void hp_hook_free(void *ctx, void *ptr) noexcept

cdef extern from "unistd.h":
    int usleep(unsigned int usec) nogil
    int close(int fd) nogil

# ---- record layout (see docs/heapprofd.md) ----
cdef enum:
    RECORD_FREE = 0
    RECORD_MALLOC = 1
    RECORD_HEAP_NAME = 2
    RECORD_PYTHON_FRAME = 3
    ALLOC_METADATA_SIZE = 328
    FREE_ENTRY_SIZE = 24
    HEAP_NAME_SIZE = 80
    PYTHON_FRAME_SIZE = 24
    HEAP_NAME_SZ = 64
    MAX_FRAMES = 128
    MAX_HEAPS = 64
    RESEND_BACKOFF_US = 100

RECORD_SIZES = {
    "alloc_metadata": ALLOC_METADATA_SIZE,
    "free_entry": FREE_ENTRY_SIZE,
    "heap_name": HEAP_NAME_SIZE,
    "python_frame": PYTHON_FRAME_SIZE,
}


cdef class SharedRingBuffer:
    """A ring buffer in shared memory, created by the daemon or attached by the client."""

    cdef hp_ring_t ring

    def __cinit__(self):
        memset(&self.ring, 0, sizeof(hp_ring_t))
        self.ring.fd = -1

    @staticmethod
    def create(size: int) -> SharedRingBuffer:
        """A new buffer of `size` bytes (a power of two, a multiple of the page size) in a memfd
        sealed against shrinking, growing and unsealing; OSError when it cannot be sealed."""
        cdef int fd
        cdef SharedRingBuffer buf = SharedRingBuffer()
        cdef long page = 4096
        import mmap as _mmap
        page = _mmap.PAGESIZE
        if size < page or size % page or size & (size - 1):
            raise ValueError(f"ring buffer size {size} is not a power-of-two number of pages")
        fd = hp_memfd(size + page)
        if fd == -2:
            raise OSError(errno, "the kernel cannot seal a memfd; an unsealed ring buffer"
                          " is never passed to a client")
        if fd < 0:
            raise OSError(errno, "memfd_create failed")
        if hp_ring_map(&buf.ring, fd) != 0:
            close(fd)
            raise OSError(errno, "cannot map the ring buffer")
        return buf

    @staticmethod
    def attach(fd: int) -> SharedRingBuffer:
        """Maps the buffer whose descriptor is `fd` (the buffer takes ownership of `fd`); it
        must be sealed against shrinking, growing and unsealing, as `create` makes it."""
        cdef SharedRingBuffer buf = SharedRingBuffer()
        cdef int rc = hp_ring_map(&buf.ring, fd)
        if rc == -2:
            raise ValueError("the ring buffer size is invalid")
        if rc == -3:
            raise ValueError("the ring buffer is not sealed")
        if rc != 0:
            raise OSError(errno, "cannot map the ring buffer")
        return buf

    def __dealloc__(self):
        self._release()

    cdef void _release(self):
        if self.ring.meta != NULL:
            hp_ring_unmap(&self.ring)
        if self.ring.fd >= 0:
            close(self.ring.fd)
            self.ring.fd = -1

    def close(self) -> None:
        """Unmaps the buffer and closes its descriptor."""
        self._release()

    cdef inline void _check(self) except *:
        if self.ring.meta == NULL:
            raise ValueError("the ring buffer is closed")

    @property
    def fd(self) -> int:
        return self.ring.fd

    @property
    def size(self) -> int:
        return self.ring.size

    def write(self, const unsigned char[::1] record) -> int:
        """Writes one record; returns the bytes that were free, or -1 full, -2 locked, -3 bad."""
        self._check()
        cdef uint64_t n = record.shape[0]
        if n == 0:
            return -3
        return hp_ring_write(&self.ring, &record[0], n, NULL, 0, NULL, 0)

    def read(self) -> bytes | None:
        """The next complete record, None when there is none; ValueError when corrupt."""
        self._check()
        cdef uint8_t *data
        cdef uint64_t size
        cdef int rc = hp_ring_begin_read(&self.ring, &data, &size)
        if rc == 0:
            return None
        if rc < 0:
            raise ValueError("the ring buffer is corrupt")
        out = (<char *>data)[:size]
        hp_ring_end_read(&self.ring, size)
        return out

    def read_batch(self, int max_records) -> tuple:
        """Up to `max_records` records as (records, corrupt)."""
        self._check()
        cdef uint8_t *data
        cdef uint64_t size
        cdef int rc
        cdef list out = []
        cdef bint corrupt = False
        while len(out) < max_records:
            rc = hp_ring_begin_read(&self.ring, &data, &size)
            if rc == 0:
                break
            if rc < 0:
                corrupt = True
                break
            out.append((<char *>data)[:size])
            hp_ring_end_read(&self.ring, size)
        return out, corrupt

    def read_avail(self) -> int:
        self._check()
        return (__atomic_load_n(&self.ring.meta.write_pos, __ATOMIC_ACQUIRE)
                - __atomic_load_n(&self.ring.meta.read_pos, __ATOMIC_RELAXED))

    def stats(self) -> dict:
        """The metadata page's stats."""
        self._check()
        cdef hp_meta_t *m = self.ring.meta
        return {
            "bytes_written": m.bytes_written,
            "num_writes_succeeded": m.num_writes_succeeded,
            "num_writes_corrupt": m.num_writes_corrupt,
            "num_writes_overflow": m.num_writes_overflow,
            "num_reads_succeeded": m.num_reads_succeeded,
            "num_reads_corrupt": m.num_reads_corrupt,
            "num_reads_nodata": m.num_reads_nodata,
            "failed_spinlocks": m.failed_spinlocks,
            "client_spinlock_blocked_us": m.client_spinlock_blocked_us,
            "error_state": m.error_state,
        }

    def set_error_state(self, int state) -> None:
        self._check()
        __atomic_store_n(&self.ring.meta.error_state, state, __ATOMIC_RELAXED)

    def set_shutting_down(self) -> None:
        self._check()
        __atomic_store_n(&self.ring.meta.shutting_down, 1, __ATOMIC_RELAXED)

    @property
    def shutting_down(self) -> bool:
        self._check()
        return self.ring.meta.shutting_down != 0

    def set_reader_paused(self) -> None:
        self._check()
        __atomic_store_n(&self.ring.meta.reader_paused, 1, __ATOMIC_RELAXED)

    def get_and_reset_reader_paused(self) -> bool:
        self._check()
        return __atomic_exchange_n(&self.ring.meta.reader_paused, 0, __ATOMIC_RELAXED) != 0


# ---- the client's sampler and hooks ----

cdef struct frame_entry_t:
    PyObject *code
    int lasti
    uint64_t frame_id

cdef struct heap_t:
    uint64_t interval
    double rate
    int64_t to_next
    uint32_t heap_id
    bint enabled
    hp_set_t *sampled  # the Python heap's is hp_py_sampled, which the hooks read
    hp_set_t own
    uint64_t sequence

cdef uint64_t _malloc_header[42]  # record type + AllocMetadata; registers stay zero
cdef bint _hooks_installed = False
cdef bint _active = False
cdef hp_ring_t *_ring = NULL
cdef int _sock = -1
cdef bint _block_client = False
cdef uint64_t _max_tries = 1
cdef heap_t _heaps[MAX_HEAPS]
cdef uint32_t _num_heaps = 0
cdef uint64_t _rng = <uint64_t>0x9E3779B97F4A7C15ULL
cdef frame_entry_t *_frames = NULL
cdef uint64_t _frames_cap = 0
cdef uint64_t _frames_count = 0
cdef uint64_t _next_frame_id = 1
# Frames a thread without the GIL added to the table: their code objects get the table's
# reference at the next lookup made with the GIL (the sampled thread's own frames hold them
# until then).
cdef PyObject *_pending_refs[1024]
cdef int _pending_count = 0
cdef uint64_t _sampled_total = 0
cdef uint64_t _dropped = 0
cdef SharedRingBuffer _ring_owner = None

cdef inline void *_raw_alloc(size_t n) noexcept nogil:
    return c_calloc(1, n)  # libc's allocator is never hooked

cdef inline void _raw_free(void *p) noexcept nogil:
    c_free(p)

cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    x ^= x >> 33
    x *= <uint64_t>0xff51afd7ed558ccdULL
    x ^= x >> 33
    return x

cdef bint _set_grow(hp_set_t *s) noexcept nogil:
    cdef uint64_t new_cap = s.cap * 2 if s.cap else 1024
    cdef uint64_t *keys = <uint64_t *>_raw_alloc(new_cap * 8)
    cdef uint64_t i, k, j
    if keys == NULL:
        return False
    memset(keys, 0, new_cap * 8)
    for i in range(s.cap):
        k = s.keys[i]
        if k:
            j = _mix(k) & (new_cap - 1)
            while keys[j]:
                j = (j + 1) & (new_cap - 1)
            keys[j] = k
    if s.keys != NULL:
        _raw_free(s.keys)
    s.keys = keys
    s.cap = new_cap
    return True

cdef void _set_add(hp_set_t *s, uint64_t k) noexcept nogil:
    cdef uint64_t j
    if (s.count + 1) * 4 > s.cap:
        if not _set_grow(s):
            return
    if s.filter == NULL:
        s.filter = <uint8_t *>_raw_alloc(0x10000)
        if s.filter == NULL:
            return
    j = _mix(k) & (s.cap - 1)
    while s.keys[j]:
        if s.keys[j] == k:
            return
        j = (j + 1) & (s.cap - 1)
    s.keys[j] = k
    s.count += 1
    j = hp_filter_slot(k)
    if s.filter[j] < 255:
        s.filter[j] += 1

cdef bint _set_remove(hp_set_t *s, uint64_t k) noexcept nogil:
    """Removes `k` (backward-shift deletion); True when it was present."""
    cdef uint64_t mask, j, i, home
    cdef uint64_t slot = hp_filter_slot(k)
    if s.count == 0 or s.filter[slot] == 0:
        return False
    mask = s.cap - 1
    j = _mix(k) & mask
    while s.keys[j] != k:
        if s.keys[j] == 0:
            return False
        j = (j + 1) & mask
    i = j
    while True:
        s.keys[i] = 0
        while True:
            j = (j + 1) & mask
            if s.keys[j] == 0:
                s.count -= 1
                if s.filter[slot] < 255:  # a saturated count stays (lookups then probe)
                    s.filter[slot] -= 1
                return True
            home = _mix(s.keys[j]) & mask
            # keep keys[j] where it is when its home lies cyclically in (i, j]
            if (i <= j and i < home and home <= j) or (i > j and (home > i or home <= j)):
                continue
            break
        s.keys[i] = s.keys[j]
        i = j

cdef void _set_clear(hp_set_t *s) noexcept nogil:
    # the count first: a raw-domain free on a thread without the GIL reads the filter only
    # when the count is not zero
    s.count = 0
    if s.keys != NULL:
        _raw_free(s.keys)
    if s.filter != NULL:
        _raw_free(s.filter)
    s.filter = NULL
    s.keys = NULL
    s.cap = 0

cdef inline double _uniform() noexcept nogil:
    global _rng
    _rng ^= _rng << 13
    _rng ^= _rng >> 7
    _rng ^= _rng << 17
    return ((_rng >> 11) + 0.5) * (1.0 / 9007199254740992.0)

cdef inline int64_t _next_interval(heap_t *h) noexcept nogil:
    return <int64_t>(-log(_uniform()) / h.rate) + 1

cdef inline uint64_t _sample_size(heap_t *h, uint64_t size) noexcept nogil:
    """0 when not sampled, else the bytes this sample stands for (upstream's Sampler)."""
    cdef uint64_t n = 0
    if size >= h.interval:
        return size
    h.to_next -= <int64_t>size
    if h.to_next > 0:
        return 0
    while h.to_next <= 0:
        h.to_next += _next_interval(h)
        n += 1
    return n * h.interval

cdef void _deactivate() noexcept nogil:
    global _active
    _active = False
    hp_set_python_interval(0)

cdef int64_t _send(const void *a, uint64_t la, const void *b, uint64_t lb,
                   const void *c, uint64_t lc) noexcept nogil:
    """Writes a record, retrying when blocking; on failure the client disconnects."""
    cdef uint64_t tries = 0
    cdef int64_t res
    while True:
        if _ring.meta.shutting_down:
            _deactivate()
            return -1
        res = hp_ring_write(_ring, a, la, b, lb, c, lc)
        if res >= 0:
            return res
        tries += 1
        if _block_client and res > -3 and (_max_tries == 0 or tries < _max_tries):
            if hp_peer_closed(_sock):
                break
            usleep(RESEND_BACKOFF_US)
            continue
        break
    if not hp_peer_closed(_sock):
        __atomic_store_n(&_ring.meta.error_state, 1, __ATOMIC_RELAXED)  # kHitTimeout
    _deactivate()
    return -1

cdef void _wake() noexcept nogil:
    if __atomic_exchange_n(&_ring.meta.reader_paused, 0, __ATOMIC_RELAXED):
        if hp_send_byte(_sock) < 0:
            _deactivate()

cdef int _frame_lookup(PyObject *code, int lasti, uint64_t *out) noexcept:
    """Finds or adds the frame (code, lasti); 1 when it is new (and must be sent)."""
    hp_frames_lock()
    _take_pending_refs()
    cdef int found = _frame_lookup_locked(code, lasti, out)
    hp_frames_unlock()
    return found

cdef inline void _take_pending_refs() noexcept:
    """With the GIL and the table's lock: the references of frames added without the GIL."""
    global _pending_count
    cdef int i
    for i in range(_pending_count):
        Py_INCREF(<object>_pending_refs[i])
    _pending_count = 0

cdef int _frame_lookup_locked(PyObject *code, int lasti, uint64_t *out) noexcept:
    global _frames, _frames_cap, _frames_count, _next_frame_id
    cdef uint64_t mask, j, i, new_cap
    cdef frame_entry_t *table
    cdef frame_entry_t *e
    if (_frames_count + 1) * 2 > _frames_cap:
        new_cap = _frames_cap * 2 if _frames_cap else 4096
        table = <frame_entry_t *>_raw_alloc(new_cap * sizeof(frame_entry_t))
        if table == NULL:
            return -1
        memset(table, 0, new_cap * sizeof(frame_entry_t))
        for i in range(_frames_cap):
            e = &_frames[i]
            if e.code != NULL:
                j = _mix(<uint64_t>e.code ^ (<uint64_t>e.lasti << 48)) & (new_cap - 1)
                while table[j].code != NULL:
                    j = (j + 1) & (new_cap - 1)
                table[j] = e[0]
        if _frames != NULL:
            _raw_free(_frames)
        _frames = table
        _frames_cap = new_cap
    mask = _frames_cap - 1
    j = _mix(<uint64_t>code ^ (<uint64_t>lasti << 48)) & mask
    while _frames[j].code != NULL:
        if _frames[j].code == code and _frames[j].lasti == lasti:
            out[0] = _frames[j].frame_id
            return 0
        j = (j + 1) & mask
    Py_INCREF(<object>code)  # keeps the address unique for the life of the table
    _frames[j].code = code
    _frames[j].lasti = lasti
    _frames[j].frame_id = _next_frame_id
    _next_frame_id += 1
    _frames_count += 1
    out[0] = _frames[j].frame_id
    return 1

cdef bint _send_frame(uint64_t frame_id, object code, int lasti) noexcept:
    cdef uint64_t header[4]
    cdef Py_ssize_t name_len = 0, file_len = 0
    cdef const char *name
    cdef const char *filename
    cdef uint64_t rtype = RECORD_PYTHON_FRAME
    try:
        name = PyUnicode_AsUTF8AndSize(code.co_qualname, &name_len)
        filename = PyUnicode_AsUTF8AndSize(code.co_filename, &file_len)
    except BaseException:
        return False
    header[0] = frame_id
    (<uint32_t *>&header[1])[0] = <uint32_t>max(hp_code_line(<PyObject *>code, lasti), 0)
    (<uint32_t *>&header[1])[1] = <uint32_t>name_len
    (<uint32_t *>&header[2])[0] = <uint32_t>file_len
    (<uint32_t *>&header[2])[1] = 0
    # record type, then the 24-byte PythonFrame header, then the two strings
    cdef bytes blob = (<char *>&rtype)[:8] + (<char *>header)[:PYTHON_FRAME_SIZE] + \
        name[:name_len] + filename[:file_len]
    return _send(<const char *>blob, len(blob), NULL, 0, NULL, 0) >= 0

ctypedef int (*python_frames_fn)(uint64_t *ids, int max_ids, uintptr_t *eval_local) noexcept nogil
ctypedef void (*set_python_frames_fn)(python_frames_fn fn) noexcept nogil

cdef int _native_python_frames(uint64_t *ids, int max_ids, uintptr_t *eval_local) noexcept nogil:
    """This thread's Python frame ids, innermost first, for a sample of the native client
    (which shares this connection), with or without the GIL, and in `eval_local` the address
    of a local of its innermost evaluation loop (0 if unknown). A frame not yet in the table
    is described with a new id and added when the table has room (it grows only with the
    GIL). 0 when none can be had."""
    global _next_frame_id, _frames_count, _pending_count
    cdef PyObject *codes[MAX_FRAMES]
    cdef int lastis[MAX_FRAMES]
    cdef int n, i
    cdef uint64_t mask, j = 0, fid
    cdef bint found, has_gil
    if not _active or hp_get_in_hook():
        return 0
    n = hp_walk_this_thread(codes, lastis, max_ids if max_ids < MAX_FRAMES else MAX_FRAMES)
    eval_local[0] = hp_eval_loop_local() if n else 0
    has_gil = PyGILState_Check()
    for i in range(n):
        if not hp_frames_trylock():
            return 0  # this thread is inside the table's own allocation
        found = False
        if _frames_cap:
            mask = _frames_cap - 1
            j = _mix(<uint64_t>codes[i] ^ (<uint64_t>lastis[i] << 48)) & mask
            while _frames[j].code != NULL:
                if _frames[j].code == codes[i] and _frames[j].lasti == lastis[i]:
                    ids[i] = _frames[j].frame_id
                    found = True
                    break
                j = (j + 1) & mask
        if not found:
            fid = _next_frame_id
            _next_frame_id += 1
            # interned when there is room without growing the table (no allocation here)
            if (_frames_cap and (_frames_count + 1) * 2 <= _frames_cap
                    and (has_gil or _pending_count < 1024)):
                _frames[j].code = codes[i]
                _frames[j].lasti = lastis[i]
                _frames[j].frame_id = fid
                _frames_count += 1
                if has_gil:  # the frame may return (and free its code) before any lookup
                    Py_IncRef(codes[i])
                else:
                    _pending_refs[_pending_count] = codes[i]
                    _pending_count += 1
        hp_frames_unlock()
        if not found:
            if not _send_frame_nogil(fid, codes[i], lastis[i]):
                return 0
            ids[i] = fid
    return n

cdef bint _send_frame_nogil(uint64_t frame_id, PyObject *code, int lasti) noexcept nogil:
    """A PythonFrame record made without the GIL (names that are not ASCII are replaced)."""
    cdef uint64_t rec[4]
    cdef Py_ssize_t name_len = 0, file_len = 0
    cdef const char *name = hp_ascii(hp_code_qualname(code), &name_len)
    cdef const char *filename = hp_ascii(hp_code_filename(code), &file_len)
    if name == NULL:
        name = "<non-ascii name>"
        name_len = 16
    if filename == NULL:
        filename = "<non-ascii path>"
        file_len = 16
    rec[0] = RECORD_PYTHON_FRAME
    rec[1] = frame_id
    (<uint32_t *>&rec[2])[0] = <uint32_t>max(hp_code_line(code, lasti), 0)
    (<uint32_t *>&rec[2])[1] = <uint32_t>name_len
    (<uint32_t *>&rec[3])[0] = <uint32_t>file_len
    (<uint32_t *>&rec[3])[1] = 0
    return _send(rec, 8 + PYTHON_FRAME_SIZE, name, name_len, filename, file_len) >= 0

cdef void _share_python_frames() noexcept nogil:
    """Gives the native preload library, when loaded, this thread's Python frames, and makes
    it skip the allocations of the client's own sampled path (a re-entrancy guard per
    thread, as upstream's client has)."""
    global hp_preload_in_hook
    cdef set_python_frames_fn set_fn = <set_python_frames_fn>dlsym(
        RTLD_DEFAULT, "heapprofd_preload_set_python_frames")
    if set_fn != NULL:
        set_fn(_native_python_frames)
    hp_preload_in_hook = <hp_preload_in_hook_fn>dlsym(RTLD_DEFAULT, "heapprofd_preload_in_hook")

cdef void _record_malloc(heap_t *h, uint64_t addr, uint64_t size, uint64_t sample_size) noexcept:
    cdef PyObject *codes[MAX_FRAMES]
    cdef int lastis[MAX_FRAMES]
    cdef uint64_t ids[MAX_FRAMES]
    cdef uint64_t *header = _malloc_header
    cdef int n, i, is_new
    cdef int64_t free_bytes
    global _sampled_total
    n = hp_walk(codes, lastis, MAX_FRAMES)
    for i in range(n):
        is_new = _frame_lookup(codes[i], lastis[i], &ids[i])
        if is_new < 0:
            return
        if is_new and not _send_frame(ids[i], <object>codes[i], lastis[i]):
            return
        if not _active:
            return
    h.sequence += 1
    header[0] = RECORD_MALLOC
    header[1] = h.sequence
    header[2] = size
    header[3] = sample_size
    header[4] = addr
    header[5] = 0
    header[6] = hp_coarse_ns()
    (<uint32_t *>&header[41])[0] = h.heap_id
    free_bytes = _send(header, 8 + ALLOC_METADATA_SIZE, ids, <uint64_t>n * 8, NULL, 0)
    if free_bytes < 0:
        return
    _set_add(h.sampled, addr)
    _sampled_total += 1
    if <uint64_t>free_bytes < _ring.size // 2:
        _wake()

cdef void _record_free(heap_t *h, uint64_t addr) noexcept nogil:
    cdef uint64_t rec[4]
    cdef int64_t free_bytes
    h.sequence += 1
    rec[0] = RECORD_FREE
    rec[1] = h.sequence
    rec[2] = addr
    rec[3] = h.heap_id
    free_bytes = _send(rec, 8 + FREE_ENTRY_SIZE, NULL, 0, NULL, 0)
    if free_bytes >= 0 and <uint64_t>free_bytes < _ring.size // 2:
        _wake()

# The slow paths of the C hooks: the mem and object domains always call them with the GIL
# held; the raw domain may not, so they check before touching anything shared.

cdef void _on_sample(int raw, void *p, uint64_t size, uint64_t sample) noexcept:
    if not _active or (raw and not PyGILState_Check()) or hp_get_in_hook():
        return
    hp_set_in_hook(1)
    _record_malloc(&_heaps[0], <uint64_t>p, size, sample)
    hp_set_in_hook(0)

cdef void _on_free(int raw, void *p) noexcept:
    # a Free record is plain C work: it may be written even from inside a sampled Malloc
    if raw and not PyGILState_Check():
        return
    if _set_remove(&hp_py_sampled, <uint64_t>p) and _active:
        _record_free(&_heaps[0], <uint64_t>p)


def install_hooks() -> None:
    """Wraps the raw, mem and object allocators."""
    global _hooks_installed, hp_on_sample, hp_on_free
    cdef PyMemAllocatorEx hook
    cdef int i
    cdef PyMemAllocatorDomain doms[3]
    if _hooks_installed:
        return
    doms[0] = PYMEM_DOMAIN_RAW
    doms[1] = PYMEM_DOMAIN_MEM
    doms[2] = PYMEM_DOMAIN_OBJ
    hp_on_sample = _on_sample
    hp_on_free = _on_free
    for i in range(3):
        PyMem_GetAllocator(doms[i], &hp_domains[i].orig)
        hp_domains[i].raw = i == 0
    for i in range(3):
        hook.ctx = &hp_domains[i]
        hook.malloc = hp_raw_malloc if i == 0 else hp_py_malloc
        hook.calloc = hp_raw_calloc if i == 0 else hp_py_calloc
        hook.realloc = hp_raw_realloc if i == 0 else hp_py_realloc
        hook.free = hp_hook_free
        PyMem_SetAllocator(doms[i], &hook)
    _hooks_installed = True


def uninstall_hooks() -> None:
    """Puts the original allocators back (the hooks cost nothing between sessions)."""
    global _hooks_installed
    if not _hooks_installed:
        return
    _deactivate()
    PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &hp_domains[0].orig)
    PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &hp_domains[1].orig)
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &hp_domains[2].orig)
    _hooks_installed = False


def register_heap() -> int:
    """A new heap id (0 is Python's own allocators)."""
    global _num_heaps
    if _num_heaps >= MAX_HEAPS:
        raise ValueError(f"at most {MAX_HEAPS} heaps per process")
    memset(&_heaps[_num_heaps], 0, sizeof(heap_t))
    _heaps[_num_heaps].heap_id = _num_heaps + 1
    if _num_heaps == 0:
        _heaps[0].sampled = &hp_py_sampled
    else:
        _heaps[_num_heaps].sampled = &_heaps[_num_heaps].own
    _num_heaps += 1
    return _num_heaps - 1


def activate(SharedRingBuffer ring, int sock, intervals: list, bint block_client,
             uint64_t block_client_timeout_us) -> None:
    """Starts writing into `ring`; `intervals[i]` is heap i's interval (0: disabled)."""
    global _ring, _ring_owner, _sock, _block_client, _max_tries, _active
    global _next_frame_id, _frames_count, _pending_count
    cdef uint32_t i
    cdef uint64_t interval
    _active = False
    for i in range(_num_heaps):
        _set_clear(_heaps[i].sampled)
        interval = intervals[i] if i < len(intervals) else 0
        _heaps[i].interval = interval
        _heaps[i].enabled = interval > 0
        _heaps[i].sequence = 0
        if interval:
            _heaps[i].rate = 1.0 / interval
            _heaps[i].to_next = _next_interval(&_heaps[i])
    # a new connection starts a new frame table: frames are sent again
    hp_frames_lock()
    if _frames != NULL:
        memset(_frames, 0, _frames_cap * sizeof(frame_entry_t))
    _frames_count = 0
    _next_frame_id = 1
    _pending_count = 0  # dropped from the table before they got its reference
    hp_frames_unlock()
    _ring_owner = ring
    _ring = &ring.ring
    _sock = sock
    install_hooks()
    _block_client = block_client
    if not block_client:
        _max_tries = 1
    elif block_client_timeout_us == 0:
        _max_tries = 0
    else:
        _max_tries = max(1, block_client_timeout_us // RESEND_BACKOFF_US)
    _active = True
    hp_set_python_interval(_heaps[0].interval)
    _share_python_frames()


_runner_codes: list = []  # holds the references of hp_runner_codes


def set_runner_codes(codes: list) -> None:
    """The code objects of the frames that run the program (heapprofd's own and runpy's): the
    outermost frames of a stack among them are left out of its samples (at most 32)."""
    global hp_runner_count, _runner_codes
    cdef int i
    _runner_codes = list(codes[:32])
    for i in range(len(_runner_codes)):
        hp_runner_codes[i] = <PyObject *>_runner_codes[i]
    hp_runner_count = len(_runner_codes)


def set_own_thread(bint own) -> bool:
    """While `own`, this thread's allocations are heapprofd's own and are not sampled (the
    re-entrancy guard of the sampled path); returns the previous state."""
    cdef bint previous = hp_get_in_hook() != 0
    hp_set_in_hook(1 if own else 0)
    return previous


def deactivate() -> None:
    """Stops writing; the hooks stay in place and pass through."""
    _deactivate()


def is_active() -> bool:
    return _active


def send_heap_name(int heap, bytes name, uint64_t interval) -> bool:
    """Writes the HeapName record of heap `heap`."""
    cdef uint64_t rec[11]  # record type + HeapName
    if not _active:
        return False
    memset(rec, 0, sizeof(rec))
    rec[0] = RECORD_HEAP_NAME
    rec[1] = interval
    (<uint32_t *>&rec[2])[0] = _heaps[heap].heap_id
    memcpy((<char *>&rec[2]) + 4, <const char *>name, min(len(name), HEAP_NAME_SZ - 1))
    return _send(rec, 8 + HEAP_NAME_SIZE, NULL, 0, NULL, 0) >= 0


def heap_enabled(int heap) -> bool:
    return _active and _heaps[heap].enabled


def report_allocation(int heap, uint64_t addr, uint64_t size) -> bool:
    """Samples an allocation of a custom heap; True when it was sampled and sent."""
    cdef heap_t *h = &_heaps[heap]
    cdef uint64_t sample
    if not _active or not h.enabled:
        return False
    sample = _sample_size(h, size)
    if sample == 0:
        return False
    hp_set_in_hook(1)
    _record_malloc(h, addr, size, sample)
    hp_set_in_hook(0)
    return _active


def report_free(int heap, uint64_t addr) -> bool:
    """Reports the free of a custom heap's sampled allocation; True when it was sent."""
    cdef heap_t *h = &_heaps[heap]
    if not _active or not _set_remove(h.sampled, addr):
        return False
    _record_free(h, addr)
    return True


def client_stats() -> dict:
    return {"sampled": _sampled_total, "frames": _frames_count, "tracked": hp_py_sampled.count}


def set_heap_interval(int heap, uint64_t interval) -> None:
    """Enables heap `heap` with `interval` (0 disables it) on the current connection."""
    cdef heap_t *h = &_heaps[heap]
    h.interval = interval
    h.enabled = interval > 0
    if interval:
        h.rate = 1.0 / interval
        h.to_next = _next_interval(h)
    if heap == 0 and _active:
        hp_set_python_interval(interval)


cdef extern from *:
    ctypedef struct hp_sampler_t:
        pass
    const char *HP_SAMPLER_CAPSULE
    uint64_t hp_sampler_call(hp_sampler_t *s, const uint8_t *regs, const uint8_t *stack,
                             uint64_t stack_len, uint64_t sp, const uint8_t *ids,
                             uint64_t ids_len, const uint64_t **pcs, int *n, int *error) nogil

from cpython.pycapsule cimport PyCapsule_GetPointer

# a Malloc record: the type word, then AllocMetadata (its register data at 8 + 48, the
# native stack's length and Python frame count in register words 17 and 18, the heap id
# at 8 + 320, arch at 8 + 324), then the payload
cdef enum:
    _REGISTERS = 8 + 48
    _NATIVE_LENGTHS = 8 + 48 + 17 * 8
    _PAYLOAD = 8 + 328
    _ARCH_X86_64 = 4


def read_events(
    SharedRingBuffer ring, int max_records, dict callstacks, object native=None
) -> tuple:
    """Reads up to `max_records` records as bookkeeping events, in order.

    A Malloc with a Python stack (arch 0) whose payload bytes are in `callstacks` becomes
    `(heap_id, address, sample_size, callstack_id)`, a Free `(heap_id, address)`. A native
    Malloc (arch not 0) is unwound here by `native` (a NativeUnwinder, or None) and becomes
    the same event when the unwinder remembers its callstack; otherwise it becomes
    `(heap_id, address, sample_size, record, python_ids_length, pcs, error)` (pcs None when
    it was not unwound). Any other record is left as its bytes. The indexes of the events
    that are not final are listed in `slow`. A native Malloc after such a record ends the
    read (it is read next time, once the slow ones are parsed: they may change what the
    unwinder remembers). Returns (events, slow, corrupt, unwinding_errors, more), `more`
    when records may be left.
    """
    ring._check()
    cdef uint8_t *data
    cdef uint64_t size
    cdef uint64_t kind
    cdef uint64_t *words
    cdef int rc
    cdef hp_cursor_t cursor, before
    cdef list events = []
    cdef list slow = []
    cdef bint corrupt = False
    cdef bint more = False
    cdef int errors = 0
    cdef bytes key
    cdef hp_sampler_t *sampler = NULL
    cdef uint32_t arch
    cdef uint64_t stack_len, count, avail, ids_len, cs
    cdef const uint64_t *pcs
    cdef int i, n, error
    if native is not None:
        sampler = <hp_sampler_t *>PyCapsule_GetPointer(native.sampler(), HP_SAMPLER_CAPSULE)
    if hp_cursor_open(&ring.ring, &cursor) != 0:
        return events, slow, True, errors, False
    while True:
        if <int>cursor.count >= max_records:
            more = True
            break
        before = cursor
        rc = hp_cursor_next(&ring.ring, &cursor, &data, &size)
        if rc == 0:
            break
        if rc < 0:
            corrupt = True
            break
        words = <uint64_t *>data
        kind = words[0] if size >= 8 else 0xffffffffffffffffULL
        arch = (<uint32_t *>(data + 8 + 324))[0] if size >= _PAYLOAD else 0
        if (kind == RECORD_MALLOC and size >= _PAYLOAD and size % 8 == 0
                and arch == 0):  # a Python stack
            key = (<char *>data)[_PAYLOAD:size]
            cs = callstacks.get(key, 0)
            if cs:
                events.append(((<uint32_t *>(data + 8 + 320))[0], words[4], words[3], cs))
            else:
                slow.append(len(events))
                events.append((<char *>data)[:size])
        elif kind == RECORD_MALLOC and size >= _PAYLOAD and arch != 0:  # a native stack
            if slow:
                cursor = before
                more = True
                break
            # the payload: the stack, then the Python frame ids (else all of it is the stack)
            avail = size - _PAYLOAD
            stack_len = words[_NATIVE_LENGTHS // 8]
            count = words[_NATIVE_LENGTHS // 8 + 1]
            ids_len = avail - stack_len if stack_len <= avail else 0
            if stack_len > avail or ids_len % 8 or count != ids_len // 8:
                stack_len = avail
                ids_len = 0
            if sampler != NULL and arch == _ARCH_X86_64:
                with nogil:
                    cs = hp_sampler_call(
                        sampler, data + _REGISTERS, data + _PAYLOAD, stack_len, words[5],
                        data + _PAYLOAD + stack_len, ids_len, &pcs, &n, &error)
                if cs:
                    if error or n == 0:
                        errors += 1
                    events.append(((<uint32_t *>(data + 8 + 320))[0], words[4], words[3], cs))
                    continue
                pcs_tuple = tuple([pcs[i] for i in range(n)])
            else:
                pcs_tuple, error = None, True
            slow.append(len(events))
            events.append((
                (<uint32_t *>(data + 8 + 320))[0], words[4], words[3], (<char *>data)[:size],
                ids_len, pcs_tuple, bool(error),
            ))
        elif kind == RECORD_FREE and size == 8 + FREE_ENTRY_SIZE:
            events.append(((<uint32_t *>(data + 24))[0], words[2]))
        else:
            slow.append(len(events))
            events.append((<char *>data)[:size])
    hp_cursor_close(&ring.ring, &cursor)
    return events, slow, corrupt, errors, more


register_heap()  # heap 0: Python's own allocators
