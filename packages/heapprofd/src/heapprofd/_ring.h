/* The SharedRingBuffer in C (upstream's layout, docs/heapprofd.md): mapping, the spinlock,
   writing and reading records, and the client's socket signals. Shared by the Python client
   (_native.pyx) and the native preload library (libheapprofd_preload.c). */
#ifndef HEAPPROFD_RING_H_
#define HEAPPROFD_RING_H_

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- upstream's SharedRingBuffer::MetadataPage (144 bytes) ---- */
typedef struct {
    uint8_t spinlock_locked;
    uint8_t spinlock_poisoned;
    uint8_t _pad0[6];
    uint64_t read_pos;
    uint64_t write_pos;
    uint64_t client_spinlock_blocked_us;
    uint64_t failed_spinlocks;
    uint64_t error_state;
    uint8_t shutting_down; uint8_t _pad1[7];
    uint8_t reader_paused; uint8_t _pad2[7];
    uint64_t bytes_written;
    uint64_t num_writes_succeeded;
    uint64_t num_writes_corrupt;
    uint64_t num_writes_overflow;
    uint64_t num_reads_succeeded;
    uint64_t num_reads_corrupt;
    uint64_t num_reads_nodata;
    uint64_t stats_failed_spinlocks;
    uint64_t stats_client_spinlock_blocked_us;
    uint64_t stats_error_state;
} hp_meta_t;
_Static_assert(sizeof(hp_meta_t) == 144, "metadata page layout");

#define HP_GUARD_SIZE (64ull * 1024 * 1024)
#define HP_HEADER 8
#define HP_ALIGN(x) (((x) + 7ull) & ~7ull)
#define HP_LOCK_TRIES 1024
/* The seals the daemon puts on the buffer before passing it: a client can neither shrink it
   (the daemon's reads would fault) nor grow it, nor remove the seals. */
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif
#define HP_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

typedef struct {
    hp_meta_t *meta;
    uint8_t *mem;
    uint64_t size;
    uint64_t mask;
    uint64_t page;
    int fd;
} hp_ring_t;

/* Maps the buffer of `fd`: 0, or -1 on a system error, -2 when its size is invalid, -3 when
   it is not sealed against shrinking, growing and unsealing. */
static inline int hp_ring_map(hp_ring_t *r, int fd) {
    struct stat st;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    if (fstat(fd, &st) != 0 || st.st_size <= 0) return -1;
    uint64_t with_meta = (uint64_t)st.st_size;
    if (with_meta < 2 * page) return -2;
    uint64_t size = with_meta - page;
    if (size % page || (size & (size - 1))) return -2;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & HP_SEALS) != HP_SEALS) return -3;
    uint64_t outer = page + size * 2 + HP_GUARD_SIZE;
    uint8_t *region = mmap(NULL, outer, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) return -1;
    void *a = mmap(region, with_meta, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    void *b = mmap(region + with_meta, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, fd, (off_t)page);
    if (a != region || b != region + with_meta) { munmap(region, outer); return -1; }
    r->meta = (hp_meta_t *)region;
    r->mem = region + page;
    r->size = size;
    r->mask = size - 1;
    r->page = page;
    r->fd = fd;
    return 0;
}

static inline void hp_ring_unmap(hp_ring_t *r) {
    if (r->meta) munmap(r->meta, r->page + r->size * 2 + HP_GUARD_SIZE);
    r->meta = NULL; r->mem = NULL;
}

static inline int hp_try_lock(hp_ring_t *r) {
    hp_meta_t *m = r->meta;
    if (__atomic_load_n(&m->spinlock_poisoned, __ATOMIC_RELAXED)) return 0;
    for (int i = 0; i < HP_LOCK_TRIES; i++) {
        if (!__atomic_exchange_n(&m->spinlock_locked, 1, __ATOMIC_ACQUIRE)) return 1;
    }
    __atomic_fetch_add(&m->failed_spinlocks, 1, __ATOMIC_RELAXED);
    return 0;
}

static inline void hp_unlock(hp_ring_t *r) {
    __atomic_store_n(&r->meta->spinlock_locked, 0, __ATOMIC_RELEASE);
}

/* Positions are valid when write >= read, their distance fits and both are aligned. */
static inline int hp_positions(hp_ring_t *r, uint64_t *rd, uint64_t *wr) {
    *wr = __atomic_load_n(&r->meta->write_pos, __ATOMIC_ACQUIRE);
    *rd = __atomic_load_n(&r->meta->read_pos, __ATOMIC_RELAXED);
    return !(*wr < *rd || *wr - *rd > r->size || (*wr % 8) || (*rd % 8));
}

/* Writes one record made of up to three parts; returns bytes free before the write,
   -1 when the buffer is full, -2 when the lock is busy, -3 when it is corrupt or
   the record can never fit. */
static inline int64_t hp_ring_write(hp_ring_t *r, const void *a, uint64_t la, const void *b,
                             uint64_t lb, const void *c, uint64_t lc) {
    uint64_t size = la + lb + lc;
    if (size > r->size || size > 0xffffffffull) return -3;
    if (!hp_try_lock(r)) return -2;
    uint64_t rd, wr;
    hp_meta_t *m = r->meta;
    if (!hp_positions(r, &rd, &wr)) { m->num_writes_corrupt++; hp_unlock(r); return -3; }
    uint64_t with_header = HP_ALIGN(size + HP_HEADER);
    uint64_t avail = r->size - (wr - rd);
    if (with_header > avail) { m->num_writes_overflow++; hp_unlock(r); return -1; }
    uint8_t *p = r->mem + (wr & r->mask);
    m->bytes_written += size;
    m->num_writes_succeeded++;
    __atomic_store_n((uint32_t *)p, 0, __ATOMIC_RELAXED);
    __atomic_fetch_add(&m->write_pos, with_header, __ATOMIC_RELEASE);
    hp_unlock(r);
    uint8_t *d = p + HP_HEADER;
    if (la) memcpy(d, a, la);
    if (lb) memcpy(d + la, b, lb);
    if (lc) memcpy(d + la + lb, c, lc);
    __atomic_store_n((uint32_t *)p, (uint32_t)size, __ATOMIC_RELEASE);
    return (int64_t)avail;
}

/* Starts reading the next record: 1 with data and size set, 0 when none is complete,
   -1 when the buffer is corrupt. */
static inline int hp_ring_begin_read(hp_ring_t *r, uint8_t **data, uint64_t *size) {
    uint64_t rd, wr;
    hp_meta_t *m = r->meta;
    if (!hp_positions(r, &rd, &wr)) { m->num_reads_corrupt++; return -1; }
    uint64_t avail = wr - rd;
    if (avail < HP_HEADER) { m->num_reads_nodata++; return 0; }
    uint8_t *p = r->mem + (rd & r->mask);
    uint64_t sz = __atomic_load_n((uint32_t *)p, __ATOMIC_ACQUIRE);
    if (sz == 0) { m->num_reads_nodata++; return 0; }
    if (HP_ALIGN(sz + HP_HEADER) > avail) { m->num_reads_corrupt++; return -1; }
    *data = p + HP_HEADER;
    *size = sz;
    return 1;
}

/* Batched reading: positions are loaded once and the read position is published once
   per batch, so the reader dirties the metadata page once per drain, not per record. */
typedef struct { uint64_t rd; uint64_t wr; uint64_t start; uint64_t count; } hp_cursor_t;

static inline int hp_cursor_open(hp_ring_t *r, hp_cursor_t *c) {
    if (!hp_positions(r, &c->rd, &c->wr)) { r->meta->num_reads_corrupt++; return -1; }
    c->start = c->rd;
    c->count = 0;
    return 0;
}

/* 1 with the next record, 0 when none is complete, -1 when corrupt. */
static inline int hp_cursor_next(hp_ring_t *r, hp_cursor_t *c, uint8_t **data, uint64_t *size) {
    uint64_t avail = c->wr - c->rd;
    if (avail < HP_HEADER) {
        uint64_t wr = __atomic_load_n(&r->meta->write_pos, __ATOMIC_ACQUIRE);
        if (wr < c->wr || wr - c->start > r->size || (wr % 8)) {
            r->meta->num_reads_corrupt++; return -1;
        }
        c->wr = wr;
        avail = wr - c->rd;
        if (avail < HP_HEADER) return 0;
    }
    uint8_t *p = r->mem + (c->rd & r->mask);
    uint64_t sz = __atomic_load_n((uint32_t *)p, __ATOMIC_ACQUIRE);
    if (sz == 0) return 0;
    if (HP_ALIGN(sz + HP_HEADER) > avail) { r->meta->num_reads_corrupt++; return -1; }
    *data = p + HP_HEADER;
    *size = sz;
    c->rd += HP_ALIGN(sz + HP_HEADER);
    c->count++;
    return 1;
}

static inline void hp_cursor_close(hp_ring_t *r, hp_cursor_t *c) {
    if (c->count == 0) { r->meta->num_reads_nodata++; return; }
    __atomic_fetch_add(&r->meta->read_pos, c->rd - c->start, __ATOMIC_RELEASE);
    r->meta->num_reads_succeeded += c->count;
}

static inline void hp_ring_end_read(hp_ring_t *r, uint64_t size) {
    __atomic_fetch_add(&r->meta->read_pos, HP_ALIGN(size + HP_HEADER), __ATOMIC_RELAXED);
    r->meta->num_reads_succeeded++;
}

static inline uint64_t hp_coarse_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A memfd of `size` bytes, sealed (HP_SEALS); -1 with errno set when it cannot be made, -2
   when the kernel cannot seal it (an unsealed buffer is never used). */
static inline int hp_memfd(uint64_t size) {
    int fd = (int)syscall(SYS_memfd_create, "heapprofd_ringbuf",
                          3u /* MFD_CLOEXEC | MFD_ALLOW_SEALING */);
    if (fd < 0) return errno == EINVAL ? -2 : -1;
    if (ftruncate(fd, (off_t)size) != 0) { int e = errno; close(fd); errno = e; return -1; }
    if (fcntl(fd, F_ADD_SEALS, HP_SEALS) != 0) { int e = errno; close(fd); errno = e; return -2; }
    return fd;
}

/* Nonzero when the peer closed the socket. */
static inline int hp_peer_closed(int fd) {
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0) return 1;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0;
}

/* 0 sent or the socket is full (the daemon will wake anyway); -1 disconnected. */
static inline int hp_send_byte(int fd) {
    ssize_t n = send(fd, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == 1 || errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
}

#endif  /* HEAPPROFD_RING_H_ */
