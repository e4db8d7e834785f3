/* heapprofd's native client: an LD_PRELOAD library (glibc, x86-64) whose malloc family
   samples allocations of the whole process into heapprofd's heap "libc.malloc".

   At load it connects to the daemon (the handshake of docs/heapprofd.md), waiting up to
   $HEAPPROFD_WAIT_S seconds for a session. A sampled allocation writes upstream's Malloc
   record: AllocMetadata with the stack pointer, the x86-64 registers (DWARF order, rax..r15,
   rip) and arch, then the raw stack from the stack pointer up to the thread's stack end (at
   most HP_MAX_STACK bytes) as the payload, which the daemon unwinds. In a Python process
   whose Python client shares this connection, the thread's Python frame ids follow the stack
   (our extension: register_data[17] holds the stack's length and register_data[18] the
   number of frame ids), so the daemon puts them where the stack runs the interpreter's
   evaluation loop; the daemon's unwind then ends in the innermost evaluation loop, so the
   stack is copied only up to a local variable of that loop (its return address from the
   callee lies below its locals). The free of a sampled
   address writes a Free record. The real allocators are glibc's __libc_* entry points, so no
   dlsym bootstrapping is needed; a thread-local flag keeps the hooks' own allocations
   (pthread_getattr_np, the handshake) out of the profile. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "_ring.h"

#if !defined(__x86_64__)
#error "the heapprofd preload library supports x86-64 only"
#endif

#define HP_EXPORT __attribute__((visibility("default")))
#define HP_CONFIG_SIZE 4656
#define HP_HEAP_NAME_SZ 64
#define HP_MAX_HEAPS 64
#define HP_ALLOC_METADATA 328
#define HP_REGS 17
#define HP_ARCH_X86_64 4 /* upstream's (unwindstack's) ArchEnum */
#define HP_MALLOC_HEAP_ID 0 /* upstream's heap id of libc.malloc */
#define HP_MAX_STACK (64u * 1024u)
#define HP_RESEND_BACKOFF_US 100
#define HP_MAX_PYTHON_FRAMES 128
#define HP_LOCK_RETRIES 64
#define HP_EXIT_WAIT_US (5u * 1000u * 1000u)

typedef int (*hp_python_frames_fn)(uint64_t *ids, int max_ids, uintptr_t *eval_local);
static hp_python_frames_fn hp_python_frames;

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);

/* ---- connection state (set once by the constructor, cleared on disconnect or fork) ---- */
static hp_ring_t hp_ring;
static int hp_sock = -1;
static int hp_ring_fd = -1;
static uint8_t hp_config[HP_CONFIG_SIZE];
static volatile int hp_active;
static uint64_t hp_interval;
static double hp_rate;
static int hp_block;
static uint64_t hp_block_timeout_us;
/* written by every sampled record: on a cache line of its own, away from what every hook
   reads */
static struct { uint64_t value; uint8_t pad[56]; } __attribute__((aligned(64))) hp_sequence;

/* ---- per thread ---- */
static __thread int hp_in_hook __attribute__((tls_model("initial-exec")));
static __thread int64_t hp_to_next __attribute__((tls_model("initial-exec")));
static __thread uint64_t hp_rng __attribute__((tls_model("initial-exec")));
static __thread uintptr_t hp_stack_end __attribute__((tls_model("initial-exec")));

/* ---- the sampled addresses: an open-addressing set under a spinlock, with a counting
   filter in front (how many live sampled addresses hash to each slot), so that a free of an
   address never sampled costs one load and writes nothing shared ---- */
#define HP_FILTER_SLOTS (1u << 18)
static uint16_t hp_filter[HP_FILTER_SLOTS] __attribute__((aligned(64)));
static uint64_t *hp_keys;
static uint64_t hp_cap, hp_count, hp_used;
static uint8_t hp_set_lock;
#define HP_TOMBSTONE 1ull

static inline uint64_t hp_mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static inline uint16_t *hp_filter_slot(uint64_t h) { return &hp_filter[h % HP_FILTER_SLOTS]; }

/* A slot's count; one that reached the top stays there (it is never decremented). */
static void hp_filter_add(uint64_t h, int delta) {
    uint16_t *slot = hp_filter_slot(h);
    uint16_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    while (v != UINT16_MAX &&
           !__atomic_compare_exchange_n(slot, &v, (uint16_t)(v + delta), 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

static void hp_set_lock_take(void) {
    while (__atomic_exchange_n(&hp_set_lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}
static void hp_set_lock_drop(void) { __atomic_store_n(&hp_set_lock, 0, __ATOMIC_RELEASE); }

static int hp_set_grow(void) {
    uint64_t cap = hp_cap ? hp_cap * 2 : 4096;
    uint64_t *keys = mmap(NULL, cap * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (keys == MAP_FAILED) return 0;
    for (uint64_t i = 0; i < hp_cap; i++) {
        uint64_t k = hp_keys[i];
        if (k <= HP_TOMBSTONE) continue;
        uint64_t j = hp_mix(k) & (cap - 1);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = k;
    }
    if (hp_keys) munmap(hp_keys, hp_cap * 8);
    hp_keys = keys;
    hp_cap = cap;
    hp_used = hp_count;
    return 1;
}

static void hp_set_add(uint64_t k) {
    uint64_t h = hp_mix(k);
    /* counted before it is in the set: a free racing with this sample must look */
    hp_filter_add(h, 1);
    hp_set_lock_take();
    if ((hp_used + 1) * 2 > hp_cap && !hp_set_grow()) {
        hp_set_lock_drop();
        hp_filter_add(h, -1);
        return;
    }
    uint64_t j = h & (hp_cap - 1);
    while (hp_keys[j] > HP_TOMBSTONE && hp_keys[j] != k) j = (j + 1) & (hp_cap - 1);
    int added = hp_keys[j] != k;
    if (added) {
        if (hp_keys[j] == 0) hp_used++;
        hp_keys[j] = k;
        hp_count++;
    }
    hp_set_lock_drop();
    if (!added) hp_filter_add(h, -1); /* already counted */
}

/* Whether k was sampled; removes it. */
static int hp_set_remove(uint64_t k) {
    uint64_t h = hp_mix(k);
    if (__atomic_load_n(hp_filter_slot(h), __ATOMIC_RELAXED) == 0) return 0;
    int found = 0;
    hp_set_lock_take();
    if (hp_cap) {
        for (uint64_t j = h & (hp_cap - 1); hp_keys[j]; j = (j + 1) & (hp_cap - 1)) {
            if (hp_keys[j] == k) { hp_keys[j] = HP_TOMBSTONE; hp_count--; found = 1; break; }
        }
    }
    hp_set_lock_drop();
    if (found) hp_filter_add(h, -1);
    return found;
}

/* ---- the sampler (upstream's: exponential intervals, large allocations always sampled) ---- */
static inline double hp_uniform(void) {
    if (hp_rng == 0) hp_rng = hp_mix((uint64_t)(uintptr_t)&hp_rng ^ hp_coarse_ns()) | 1;
    hp_rng ^= hp_rng << 13; hp_rng ^= hp_rng >> 7; hp_rng ^= hp_rng << 17;
    return ((hp_rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline int64_t hp_next_interval(void) { return (int64_t)(-log(hp_uniform()) / hp_rate) + 1; }

static inline uint64_t hp_sample_size(uint64_t size) {
    if (size >= hp_interval) return size;
    if (hp_to_next == 0) hp_to_next = hp_next_interval();
    hp_to_next -= (int64_t)size;
    if (hp_to_next > 0) return 0;
    uint64_t n = 0;
    while (hp_to_next <= 0) { hp_to_next += hp_next_interval(); n++; }
    return n * hp_interval;
}

/* ---- writing records ---- */
static void hp_deactivate(void) { hp_active = 0; }

static int64_t hp_send(const void *a, uint64_t la, const void *b, uint64_t lb, const void *c,
                       uint64_t lc) {
    uint64_t waited_us = 0;
    int lock_retries = 0;
    for (;;) {
        if (hp_ring.meta->shutting_down) { hp_deactivate(); return -1; }
        int64_t res = hp_ring_write(&hp_ring, a, la, b, lb, c, lc);
        if (res >= 0) return res;
        if (hp_block && res > -3 && (hp_block_timeout_us == 0 || waited_us < hp_block_timeout_us)) {
            if (hp_peer_closed(hp_sock)) break;
            usleep(HP_RESEND_BACKOFF_US);
            waited_us += HP_RESEND_BACKOFF_US;
            continue;
        }
        /* the Python client of the process writes too: a busy lock is retried a few times */
        if (!hp_block && res == -2 && ++lock_retries < HP_LOCK_RETRIES) continue;
        break;
    }
    if (!hp_peer_closed(hp_sock))
        __atomic_store_n(&hp_ring.meta->error_state, 1, __ATOMIC_RELAXED); /* kHitTimeout */
    hp_deactivate();
    return -1;
}

static void hp_wake(int64_t free_bytes) {
    if ((uint64_t)free_bytes >= hp_ring.size / 2) return;
    if (__atomic_exchange_n(&hp_ring.meta->reader_paused, 0, __ATOMIC_RELAXED)) {
        if (hp_send_byte(hp_sock) < 0) hp_deactivate();
    }
}

static uintptr_t hp_thread_stack_end(void) {
    if (hp_stack_end) return hp_stack_end;
    pthread_attr_t attr;
    void *base;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
    if (pthread_attr_getstack(&attr, &base, &size) == 0) hp_stack_end = (uintptr_t)base + size;
    pthread_attr_destroy(&attr);
    return hp_stack_end;
}

/* Captures the registers at this point and the stack above them, and writes the record. */
static __attribute__((noinline)) void hp_record_malloc(uint64_t addr, uint64_t size,
                                                       uint64_t sample_size) {
    uint64_t header[1 + HP_ALLOC_METADATA / 8];
    uint64_t *regs = &header[7];
    __asm__ volatile(
        "movq %%rax, 0(%0)\n\t"
        "movq %%rdx, 8(%0)\n\t"
        "movq %%rcx, 16(%0)\n\t"
        "movq %%rbx, 24(%0)\n\t"
        "movq %%rsi, 32(%0)\n\t"
        "movq %%rdi, 40(%0)\n\t"
        "movq %%rbp, 48(%0)\n\t"
        "movq %%rsp, 56(%0)\n\t"
        "movq %%r8, 64(%0)\n\t"
        "movq %%r9, 72(%0)\n\t"
        "movq %%r10, 80(%0)\n\t"
        "movq %%r11, 88(%0)\n\t"
        "movq %%r12, 96(%0)\n\t"
        "movq %%r13, 104(%0)\n\t"
        "movq %%r14, 112(%0)\n\t"
        "movq %%r15, 120(%0)\n\t"
        "leaq 1f(%%rip), %%rax\n\t"
        "movq %%rax, 128(%0)\n"
        "1:\n\t"
        : : "r"(regs) : "rax", "memory");
    uintptr_t sp = (uintptr_t)regs[7];
    uint64_t python_ids[HP_MAX_PYTHON_FRAMES];
    uintptr_t eval_local = 0;
    hp_python_frames_fn python_frames = __atomic_load_n(&hp_python_frames, __ATOMIC_ACQUIRE);
    int n_python = python_frames ? python_frames(python_ids, HP_MAX_PYTHON_FRAMES, &eval_local) : 0;
    uintptr_t end = hp_thread_stack_end();
    if (n_python > 0 && eval_local > sp && eval_local < end) end = eval_local;
    uint64_t len = end > sp ? end - sp : 0;
    if (len > HP_MAX_STACK) len = HP_MAX_STACK;
    memset(&regs[HP_REGS], 0, 272 - HP_REGS * 8);
    regs[HP_REGS] = len;
    regs[HP_REGS + 1] = n_python > 0 ? (uint64_t)n_python : 0;
    header[0] = 1; /* RECORD_MALLOC */
    header[1] = __atomic_add_fetch(&hp_sequence.value, 1, __ATOMIC_RELAXED);
    header[2] = size;
    header[3] = sample_size;
    header[4] = addr;
    header[5] = sp;
    header[6] = hp_coarse_ns();
    uint32_t *tail = (uint32_t *)&header[41];
    tail[0] = HP_MALLOC_HEAP_ID;
    tail[1] = HP_ARCH_X86_64;
    hp_set_add(addr); /* before the record: a free racing with it must find the address */
    int64_t free_bytes = hp_send(header, 8 + HP_ALLOC_METADATA, (const void *)sp, len,
                                 python_ids, regs[HP_REGS + 1] * 8);
    if (free_bytes >= 0) hp_wake(free_bytes);
}

static void hp_on_alloc(void *p, size_t size) {
    if (!hp_active || p == NULL || hp_in_hook) return;
    hp_in_hook = 1;
    uint64_t sample = hp_sample_size(size);
    if (sample) hp_record_malloc((uint64_t)(uintptr_t)p, size, sample);
    hp_in_hook = 0;
}

static void hp_on_free(void *p) {
    if (!hp_active || p == NULL || hp_in_hook) return;
    if (!hp_set_remove((uint64_t)(uintptr_t)p)) return;
    hp_in_hook = 1;
    uint64_t rec[4] = {0 /* RECORD_FREE */,
                       __atomic_add_fetch(&hp_sequence.value, 1, __ATOMIC_RELAXED),
                       (uint64_t)(uintptr_t)p, HP_MALLOC_HEAP_ID};
    int64_t free_bytes = hp_send(rec, sizeof rec, NULL, 0, NULL, 0);
    if (free_bytes >= 0) hp_wake(free_bytes);
    hp_in_hook = 0;
}

/* ---- the hooks ---- */
HP_EXPORT void *malloc(size_t size) {
    void *p = __libc_malloc(size);
    hp_on_alloc(p, size);
    return p;
}

HP_EXPORT void free(void *p) {
    hp_on_free(p);
    __libc_free(p);
}

HP_EXPORT void *calloc(size_t n, size_t size) {
    void *p = __libc_calloc(n, size);
    hp_on_alloc(p, n * size); /* glibc's calloc failed on overflow: p is NULL then */
    return p;
}

HP_EXPORT void *realloc(void *old, size_t size) {
    hp_on_free(old);
    void *p = __libc_realloc(old, size);
    hp_on_alloc(p, size);
    return p;
}

HP_EXPORT void *reallocarray(void *old, size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) { errno = ENOMEM; return NULL; }
    return realloc(old, total);
}

HP_EXPORT void *memalign(size_t alignment, size_t size) {
    void *p = __libc_memalign(alignment, size);
    hp_on_alloc(p, size);
    return p;
}

HP_EXPORT void *aligned_alloc(size_t alignment, size_t size) { return memalign(alignment, size); }

HP_EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
    if (alignment % sizeof(void *) || (alignment & (alignment - 1)) || alignment == 0)
        return EINVAL;
    void *p = __libc_memalign(alignment, size);
    if (p == NULL) return ENOMEM;
    hp_on_alloc(p, size);
    *out = p;
    return 0;
}

HP_EXPORT void *valloc(size_t size) {
    void *p = __libc_valloc(size);
    hp_on_alloc(p, size);
    return p;
}

/* ---- the connection ---- */

/* The heap's interval from the ClientConfiguration (upstream's GetHeapSamplingInterval). */
static uint64_t hp_config_interval(const uint8_t *c) {
    uint64_t default_interval, num;
    memcpy(&default_interval, c, 8);
    memcpy(&num, c + 16, 8);
    if (num > HP_MAX_HEAPS) num = HP_MAX_HEAPS;
    for (uint64_t i = 0; i < num; i++) {
        const uint8_t *heap = c + 40 + i * 72;
        if (strncmp((const char *)heap, "libc.malloc", HP_HEAP_NAME_SZ) == 0) {
            uint64_t interval;
            memcpy(&interval, heap + 64, 8);
            return interval;
        }
    }
    return c[40 + HP_MAX_HEAPS * 72 + 3] ? default_interval : 0; /* all_heaps */
}

/* One handshake: 1 connected, 0 no session (the daemon closed), -1 no daemon. */
static int hp_handshake(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) { close(fd); return -1; }
    int fds[2] = {open("/proc/self/maps", O_RDONLY | O_CLOEXEC),
                  open("/proc/self/mem", O_RDONLY | O_CLOEXEC)};
    char byte = 'x';
    struct iovec iov = {&byte, 1};
    union { char buf[CMSG_SPACE(sizeof fds)]; struct cmsghdr align; } control;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = sizeof control.buf};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent = fds[0] >= 0 && fds[1] >= 0 ? sendmsg(fd, &msg, MSG_NOSIGNAL) : -1;
    close(fds[0]);
    close(fds[1]);
    if (sent != 1) { close(fd); return -1; }
    size_t got = 0;
    int ring_fd = -1;
    while (got < HP_CONFIG_SIZE) {
        union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } rcontrol;
        struct iovec riov = {hp_config + got, HP_CONFIG_SIZE - got};
        struct msghdr rmsg = {.msg_iov = &riov, .msg_iovlen = 1, .msg_control = rcontrol.buf,
                              .msg_controllen = sizeof rcontrol.buf};
        ssize_t n = recvmsg(fd, &rmsg, MSG_CMSG_CLOEXEC);
        if (n <= 0) {
            if (ring_fd >= 0) close(ring_fd);
            close(fd);
            return n == 0 ? 0 : -1;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&rmsg); c; c = CMSG_NXTHDR(&rmsg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                if (ring_fd >= 0) close(ring_fd);
                memcpy(&ring_fd, CMSG_DATA(c), sizeof ring_fd);
            }
        }
        got += (size_t)n;
    }
    if (ring_fd < 0 || hp_ring_map(&hp_ring, ring_fd) != 0) {
        if (ring_fd >= 0) close(ring_fd);
        close(fd);
        return -1;
    }
    hp_sock = fd;
    hp_ring_fd = ring_fd;
    return 1;
}

static void hp_write_heap_name(void) {
    uint64_t rec[1 + 10] = {2 /* RECORD_HEAP_NAME */, hp_interval};
    uint32_t heap_id = HP_MALLOC_HEAP_ID;
    memcpy(&rec[2], &heap_id, 4);
    memcpy((uint8_t *)&rec[2] + 4, "libc.malloc", sizeof "libc.malloc");
    hp_send(rec, sizeof rec, NULL, 0, NULL, 0);
}

static void hp_after_fork_in_child(void) { hp_active = 0; }

__attribute__((constructor)) static void hp_start(void) {
    const char *path = getenv("PERFETTO_HEAPPROFD_SOCK_NAME");
    if (path == NULL || *path == 0)
        path = access("/dev/socket", W_OK) == 0 ? "/dev/socket/heapprofd" : "/tmp/perfetto-heapprofd";
    const char *wait = getenv("HEAPPROFD_WAIT_S");
    double wait_s = wait ? atof(wait) : 0;
    /* the program's children inherit LD_PRELOAD, not the wait: each tries once */
    unsetenv("HEAPPROFD_WAIT_S");
    uint64_t deadline = hp_coarse_ns() + (uint64_t)(wait_s * 1e9);
    hp_in_hook = 1;
    int rc;
    while ((rc = hp_handshake(path)) != 1 && hp_coarse_ns() < deadline) usleep(20000);
    hp_in_hook = 0;
    if (rc != 1) return;
    uint64_t block;
    memcpy(&hp_block_timeout_us, hp_config + 8, 8);
    block = hp_config[40 + HP_MAX_HEAPS * 72];
    hp_block = block != 0;
    hp_interval = hp_config_interval(hp_config);
    pthread_atfork(NULL, NULL, hp_after_fork_in_child);
    if (hp_interval == 0) return;
    hp_rate = 1.0 / (double)hp_interval;
    hp_active = 1;
    hp_write_heap_name();
}

/* At exit the process waits (up to HP_EXIT_WAIT_US) until the daemon has read its last
   records: the daemon unwinds them with the process's maps and memory, gone once it exits. */
__attribute__((destructor)) static void hp_stop(void) {
    if (!hp_active) return;
    hp_in_hook = 1;
    hp_send_byte(hp_sock);
    for (uint64_t waited = 0; waited < HP_EXIT_WAIT_US; waited += HP_RESEND_BACKOFF_US * 10) {
        uint64_t rd, wr;
        if (!hp_positions(&hp_ring, &rd, &wr) || rd == wr || hp_ring.meta->shutting_down ||
            hp_peer_closed(hp_sock))
            break;
        usleep(HP_RESEND_BACKOFF_US * 10);
    }
    hp_in_hook = 0;
}

/* Set by the Python client once it shares the connection: this thread's Python frame ids. */
HP_EXPORT void heapprofd_preload_set_python_frames(hp_python_frames_fn fn) {
    __atomic_store_n(&hp_python_frames, fn, __ATOMIC_RELEASE);
}

/* Set by the Python client around its own sampled path (1 on entry, 0 on exit): the
   allocations it makes there (its frame table, its records) are not the program's. */
HP_EXPORT void heapprofd_preload_in_hook(int v) { hp_in_hook = v; }

/* The connection, for the Python client of the same process, which shares it (one
   connection per process): 1 with the socket, the ring buffer's descriptor and the
   ClientConfiguration copied out, 0 when this library did not connect. */
HP_EXPORT int heapprofd_preload_connection(int *sock, int *ring_fd, uint8_t *config) {
    if (hp_sock < 0) return 0;
    *sock = hp_sock;
    *ring_fd = hp_ring_fd;
    memcpy(config, hp_config, HP_CONFIG_SIZE);
    return 1;
}
