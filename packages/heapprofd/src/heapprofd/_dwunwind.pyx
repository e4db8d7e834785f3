# cython: language_level=3, binding=False, boundscheck=False, wraparound=False
# distutils: libraries = dw elf
# build: optional (needs elfutils' libdw headers: Debian's libdw-dev)
"""Out-of-process unwinding of native samples with elfutils' libdw (Dwfl).

One `NativeUnwinder` per client, owned by its unwinder thread: the process's modules come
from the client's /proc/PID/maps (re-read when a pc falls outside every known module), its
memory from the copied stack of the sample first, then /proc/PID/mem; the initial registers
are the sample's. libdw caches each module's ELF, symbol table and CFI; a pc's symbol is found
through a table of the module's symbol and section bounds (libdw asked once per interval
between two) and cached until the modules change. An unwind can stop at the first frame
inside one of the functions given to `stop_at` or named to `stop_in` (the interpreter's
evaluation loop, where the sample's Python frames take over). The ring reader unwinds native
samples through `sampler()` (`_native_sampler.h`), and the callstack of each distinct sample
is remembered here (`remember_sample`).
"""

from libc.stdint cimport uint8_t, uint64_t

cdef extern from *:
    """
    #include <elfutils/libdwfl.h>
    #include <dwarf.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <unistd.h>

    #include "heapprofd/_native_sampler.h"

    #define HP_NREGS 17  /* x86-64 DWARF registers rax..r15 and the return address (rip) */
    #define HP_MAX_FRAMES 256
    #define HP_MAX_STOPS 16

    typedef struct {
        pid_t pid;
        int mem_fd;
        const uint8_t *stack;
        uint64_t stack_len;
        uint64_t sp;
        Dwarf_Word regs[HP_NREGS];
        uint64_t pcs[HP_MAX_FRAMES];
        int n;
        int stop;  /* whether to stop at a pc in [stop_lo, stop_hi) */
        int stopped;
        int n_stops;
        uint64_t stop_lo[HP_MAX_STOPS];
        uint64_t stop_hi[HP_MAX_STOPS];
    } hp_sample_t;

    static char *hp_debuginfo_path = NULL;
    static const Dwfl_Callbacks hp_dwfl_callbacks = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
        .debuginfo_path = &hp_debuginfo_path,
    };

    static pid_t hp_next_thread(Dwfl *dwfl, void *arg, void **thread_argp) {
        if (*thread_argp != NULL) return 0;
        *thread_argp = arg;
        return ((hp_sample_t *)arg)->pid;
    }

    static bool hp_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp) {
        *thread_argp = arg;
        return true;
    }

    static bool hp_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg) {
        hp_sample_t *s = (hp_sample_t *)arg;
        if (addr >= s->sp && addr - s->sp + 8 <= s->stack_len) {
            memcpy(result, s->stack + (addr - s->sp), 8);
            return true;
        }
        return pread(s->mem_fd, result, 8, (off_t)addr) == 8;
    }

    static bool hp_set_initial_registers(Dwfl_Thread *thread, void *arg) {
        hp_sample_t *s = (hp_sample_t *)arg;
        dwfl_thread_state_register_pc(thread, s->regs[16]);
        return dwfl_thread_state_registers(thread, 0, HP_NREGS, s->regs);
    }

    static const Dwfl_Thread_Callbacks hp_thread_callbacks = {
        .next_thread = hp_next_thread,
        .get_thread = hp_get_thread,
        .memory_read = hp_memory_read,
        .set_initial_registers = hp_set_initial_registers,
    };

    static int hp_frame(Dwfl_Frame *state, void *arg) {
        hp_sample_t *s = (hp_sample_t *)arg;
        Dwarf_Addr pc;
        bool activation;
        /* A caller's frame (its pc a return address) in a function to stop in ends the unwind
           before libdw is asked whether it is an activation: to know, libdw unwinds it, which
           reads its own caller's registers from the stack, past what a sample with Python
           frames copies. */
        if (s->stop && s->n > 0) {
            if (!dwfl_frame_pc(state, &pc, NULL)) return DWARF_CB_ABORT;
            for (int i = 0; pc != 0 && i < s->n_stops; i++) {
                if (pc - 1 >= s->stop_lo[i] && pc - 1 < s->stop_hi[i]) {
                    s->pcs[s->n++] = pc - 1;
                    s->stopped = 1;
                    return DWARF_CB_ABORT;
                }
            }
        }
        if (!dwfl_frame_pc(state, &pc, &activation)) return DWARF_CB_ABORT;
        if (pc == 0) return DWARF_CB_ABORT;
        if (!activation) pc -= 1;  /* a return address: look up the call */
        s->pcs[s->n++] = pc;
        if (s->stop) {
            for (int i = 0; i < s->n_stops; i++) {
                if (pc >= s->stop_lo[i] && pc < s->stop_hi[i]) {
                    s->stopped = 1;
                    return DWARF_CB_ABORT;
                }
            }
        }
        return s->n < HP_MAX_FRAMES ? DWARF_CB_OK : DWARF_CB_ABORT;
    }

    /* Reports the modules of a maps text; 0 on success. */
    static int hp_report(Dwfl *dwfl, const char *maps, size_t len) {
        FILE *f = fmemopen((void *)maps, len, "r");
        if (f == NULL) return -1;
        dwfl_report_begin(dwfl);
        int rc = dwfl_linux_proc_maps_report(dwfl, f);
        fclose(f);
        if (dwfl_report_end(dwfl, NULL, NULL) != 0) return -1;
        return rc;
    }

    static int hp_first_elf(Dwfl_Module *mod, void **userdata, const char *name,
                            Dwarf_Addr start, void *arg) {
        Dwarf_Addr bias;
        Elf *elf = dwfl_module_getelf(mod, &bias);
        if (elf == NULL) return DWARF_CB_OK;
        *(Elf **)arg = elf;
        return DWARF_CB_ABORT;
    }

    /* Attaches the thread callbacks, with the ELF of the first module that has one (which
       tells libdw the architecture). */
    static bool hp_attach(Dwfl *dwfl, pid_t pid, hp_sample_t *s) {
        Elf *elf = NULL;
        dwfl_getmodules(dwfl, hp_first_elf, &elf, 0);
        return dwfl_attach_state(dwfl, elf, pid, &hp_thread_callbacks, s);
    }

    /* Unwinds one sample; returns the number of frames, or -(frames + 1) when the unwinder
       stopped on an error before reaching the outermost frame. */
    static int hp_unwind(Dwfl *dwfl, hp_sample_t *s) {
        s->n = 0;
        s->stopped = 0;
        int rc = dwfl_getthread_frames(dwfl, s->pid, hp_frame, s);
        if (rc != 0 && !s->stopped && s->n < HP_MAX_FRAMES && dwfl_errno() != 0)
            return -(s->n + 1);
        return s->n;
    }

    /* ---- symbols: libdw finds a pc's symbol with a scan of its module's whole symbol table.
       Its choice depends on the pc only through comparisons with the symbols' addresses and
       ends and the sections' bounds, so it is the same for every pc strictly inside an
       interval between two consecutive such boundaries: each module's boundaries are
       gathered once (one scan), a pc is placed among them by binary search and libdw asked
       once per interval. (A pc equal to a boundary is asked of libdw itself: a sizeless
       symbol there matches it exactly.) ---- */
    typedef struct {
        Dwfl_Module *mod;
        uint64_t *bounds;      /* sorted, distinct */
        size_t n;
        const char **names;    /* per interval (n + 1 of them): the name, once asked */
        uint8_t *asked;
    } hp_symtab_t;

    typedef struct {
        hp_symtab_t *tabs;
        size_t n, cap;
    } hp_symtabs_t;

    static int hp_cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
    }

    static int hp_push(uint64_t **v, size_t *n, size_t *cap, uint64_t x) {
        if (*n == *cap) {
            size_t cap2 = *cap ? *cap * 2 : 1024;
            uint64_t *v2 = realloc(*v, cap2 * sizeof **v);
            if (v2 == NULL) return -1;
            *v = v2;
            *cap = cap2;
        }
        (*v)[(*n)++] = x;
        return 0;
    }

    /* Adds the bounds of every section of elf (loaded at bias) once. */
    static int hp_push_sections(Elf *elf, uint64_t bias, Elf **seen, int *n_seen,
                                uint64_t **v, size_t *n, size_t *cap) {
        for (int i = 0; i < *n_seen; i++) if (seen[i] == elf) return 0;
        if (*n_seen == 8) return -1;
        seen[(*n_seen)++] = elf;
        if (hp_push(v, n, cap, bias)) return -1;
        Elf_Scn *scn = NULL;
        while ((scn = elf_nextscn(elf, scn)) != NULL) {
            GElf_Shdr mem;
            GElf_Shdr *shdr = gelf_getshdr(scn, &mem);
            if (shdr == NULL) continue;
            if (hp_push(v, n, cap, shdr->sh_addr + bias) ||
                hp_push(v, n, cap, shdr->sh_addr + shdr->sh_size + bias))
                return -1;
        }
        return 0;
    }

    /* Builds a module's table (one scan of its symbols); 0 on success. */
    static int hp_symtab_build(Dwfl_Module *mod, hp_symtab_t *t) {
        memset(t, 0, sizeof *t);
        t->mod = mod;
        int nsyms = dwfl_module_getsymtab(mod);
        uint64_t *v = NULL;
        size_t n = 0, cap = 0;
        Elf *seen[8];
        int n_seen = 0;
        for (int i = 1; i < nsyms; i++) {
            GElf_Sym sym;
            GElf_Addr value;
            GElf_Word shndx;
            Elf *elf = NULL;
            Dwarf_Addr bias = 0;
            if (dwfl_module_getsym_info(mod, i, &sym, &value, &shndx, &elf, &bias) == NULL)
                continue;
            if (hp_push(&v, &n, &cap, value) || hp_push(&v, &n, &cap, value + sym.st_size) ||
                (elf != NULL && hp_push_sections(elf, bias, seen, &n_seen, &v, &n, &cap))) {
                free(v);
                return -1;
            }
        }
        if (n) qsort(v, n, sizeof *v, hp_cmp_u64);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) if (m == 0 || v[m - 1] != v[i]) v[m++] = v[i];
        t->bounds = v;
        t->n = m;
        t->names = calloc(m + 1, sizeof *t->names);
        t->asked = calloc(m + 1, 1);
        if (t->names == NULL || t->asked == NULL) {
            free(v); free(t->names); free(t->asked);
            memset(t, 0, sizeof *t);
            return -1;
        }
        return 0;
    }

    static void hp_symtabs_clear(hp_symtabs_t *s) {
        for (size_t i = 0; i < s->n; i++) {
            free(s->tabs[i].bounds); free(s->tabs[i].names); free(s->tabs[i].asked);
        }
        s->n = 0;
    }

    static void hp_symtabs_free(hp_symtabs_t *s) {
        hp_symtabs_clear(s);
        free(s->tabs);
        s->tabs = NULL;
        s->cap = 0;
    }

    /* The name of the ELF symbol libdw gives pc in mod (dwfl_module_addrname's), NULL when
       none covers it. */
    static const char *hp_symbol_name(hp_symtabs_t *s, Dwfl_Module *mod, uint64_t pc) {
        hp_symtab_t *t = NULL;
        for (size_t i = 0; i < s->n; i++) if (s->tabs[i].mod == mod) { t = &s->tabs[i]; break; }
        if (t == NULL) {
            if (s->n == s->cap) {
                size_t cap2 = s->cap ? s->cap * 2 : 16;
                hp_symtab_t *tabs = realloc(s->tabs, cap2 * sizeof *tabs);
                if (tabs == NULL) return dwfl_module_addrname(mod, pc);
                s->tabs = tabs;
                s->cap = cap2;
            }
            if (hp_symtab_build(mod, &s->tabs[s->n]) != 0) return dwfl_module_addrname(mod, pc);
            t = &s->tabs[s->n++];
        }
        /* the interval: pc in [bounds[k - 1], bounds[k]) (k = 0: below every bound) */
        size_t lo = 0, hi = t->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (t->bounds[mid] <= pc) lo = mid + 1; else hi = mid;
        }
        if (lo > 0 && t->bounds[lo - 1] == pc) return dwfl_module_addrname(mod, pc);
        if (!t->asked[lo]) {
            t->names[lo] = dwfl_module_addrname(mod, pc);
            t->asked[lo] = 1;
        }
        return t->names[lo];
    }

    /* ---- the callstack of each distinct sample, by its (pcs, Python frame ids) ---- */
    typedef struct {
        uint64_t hash;
        uint64_t callstack;    /* 0: an empty slot */
        uint32_t n_pcs, ids_len;
        uint8_t *key;          /* the pcs, then the ids */
    } hp_sample_entry_t;

    typedef struct {
        hp_sample_entry_t *slots;
        uint64_t cap, count;
    } hp_samples_t;

    static uint64_t hp_sample_hash(const uint64_t *pcs, int n, const uint8_t *ids,
                                   uint64_t ids_len) {
        uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)n << 32) ^ ids_len;
        for (int i = 0; i < n; i++) { h ^= pcs[i]; h *= 0xff51afd7ed558ccdull; h ^= h >> 32; }
        for (uint64_t i = 0; i + 8 <= ids_len; i += 8) {
            uint64_t w;
            memcpy(&w, ids + i, 8);
            h ^= w; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 29;
        }
        return h;
    }

    static hp_sample_entry_t *hp_samples_slot(hp_samples_t *t, uint64_t h, const uint64_t *pcs,
                                              int n, const uint8_t *ids, uint64_t ids_len) {
        uint64_t mask = t->cap - 1;
        for (uint64_t j = h & mask;; j = (j + 1) & mask) {
            hp_sample_entry_t *e = &t->slots[j];
            if (e->callstack == 0) return e;
            if (e->hash == h && e->n_pcs == (uint32_t)n && e->ids_len == ids_len &&
                memcmp(e->key, pcs, (size_t)n * 8) == 0 &&
                memcmp(e->key + (size_t)n * 8, ids, ids_len) == 0)
                return e;
        }
    }

    static uint64_t hp_samples_get(hp_samples_t *t, const uint64_t *pcs, int n,
                                   const uint8_t *ids, uint64_t ids_len) {
        if (t->cap == 0) return 0;
        return hp_samples_slot(t, hp_sample_hash(pcs, n, ids, ids_len), pcs, n, ids,
                               ids_len)->callstack;
    }

    static void hp_samples_clear(hp_samples_t *t) {
        for (uint64_t j = 0; j < t->cap; j++) free(t->slots[j].key);
        free(t->slots);
        t->slots = NULL;
        t->cap = t->count = 0;
    }

    /* Remembers a sample's callstack (not when memory runs out: it is found again). */
    static void hp_samples_put(hp_samples_t *t, const uint64_t *pcs, int n, const uint8_t *ids,
                               uint64_t ids_len, uint64_t callstack) {
        if ((t->count + 1) * 2 > t->cap) {
            uint64_t cap = t->cap ? t->cap * 2 : 1024;
            hp_sample_entry_t *slots = calloc(cap, sizeof *slots);
            if (slots == NULL) return;
            for (uint64_t j = 0; j < t->cap; j++) {
                hp_sample_entry_t *e = &t->slots[j];
                if (e->callstack == 0) continue;
                uint64_t k = e->hash & (cap - 1);
                while (slots[k].callstack) k = (k + 1) & (cap - 1);
                slots[k] = *e;
            }
            free(t->slots);
            t->slots = slots;
            t->cap = cap;
        }
        uint64_t h = hp_sample_hash(pcs, n, ids, ids_len);
        hp_sample_entry_t *e = hp_samples_slot(t, h, pcs, n, ids, ids_len);
        if (e->callstack) { e->callstack = callstack; return; }
        uint8_t *key = malloc((size_t)n * 8 + ids_len + 1);
        if (key == NULL) return;
        memcpy(key, pcs, (size_t)n * 8);
        memcpy(key + (size_t)n * 8, ids, ids_len);
        e->hash = h;
        e->callstack = callstack;
        e->n_pcs = (uint32_t)n;
        e->ids_len = (uint32_t)ids_len;
        e->key = key;
        t->count++;
    }

    /* ---- the functions unwinds stop in, found by name ---- */
    typedef struct {
        hp_sample_t *s;
        const char **names;
        int n_names;
    } hp_stop_names_t;

    static void hp_add_stop(hp_sample_t *s, uint64_t lo, uint64_t hi) {
        for (int i = 0; i < s->n_stops; i++)
            if (s->stop_lo[i] <= lo && lo < s->stop_hi[i]) return;
        if (s->n_stops == HP_MAX_STOPS) return;
        s->stop_lo[s->n_stops] = lo;
        s->stop_hi[s->n_stops] = hi;
        s->n_stops++;
    }

    /* In a module named like the interpreter (python3.12, libpython3.12.so.1.0: not the
       extension modules, name.cpython-312-x86_64-linux-gnu.so), the sized
       functions with one of the names (a versioned symbol's name@VERSION counts). */
    static int hp_stop_module(Dwfl_Module *mod, void **userdata, const char *name,
                              Dwarf_Addr start, void *arg) {
        hp_stop_names_t *a = (hp_stop_names_t *)arg;
        const char *base = name == NULL ? NULL : strrchr(name, '/');
        base = base != NULL ? base + 1 : name;
        if (base == NULL || (strncmp(base, "python", 6) != 0 && strncmp(base, "libpython", 9) != 0))
            return DWARF_CB_OK;
        int nsyms = dwfl_module_getsymtab(mod);
        for (int i = 1; i < nsyms; i++) {
            GElf_Sym sym;
            GElf_Addr value;
            const char *sname = dwfl_module_getsym_info(mod, i, &sym, &value, NULL, NULL, NULL);
            if (sname == NULL || sym.st_size == 0 || GELF_ST_TYPE(sym.st_info) != STT_FUNC)
                continue;
            size_t len = strcspn(sname, "@");
            for (int k = 0; k < a->n_names; k++)
                if (strlen(a->names[k]) == len && strncmp(sname, a->names[k], len) == 0)
                    hp_add_stop(a->s, value, value + sym.st_size);
        }
        return DWARF_CB_OK;
    }

    static void hp_stop_in(Dwfl *dwfl, hp_sample_t *s, const char **names, int n) {
        hp_stop_names_t a = {s, names, n};
        dwfl_getmodules(dwfl, hp_stop_module, &a, 0);
    }

    /* ---- one client's unwinder, and the ring reader's entry to it ---- */
    typedef struct {
        Dwfl *dwfl;
        hp_sample_t sample;
        hp_samples_t samples;
        hp_symtabs_t symtabs;
        hp_sampler_t sampler;
    } hp_unwinder_t;

    static uint64_t hp_sampler_run(void *self, const uint8_t *regs, const uint8_t *stack,
                                   uint64_t stack_len, uint64_t sp, const uint8_t *ids,
                                   uint64_t ids_len, const uint64_t **pcs, int *n, int *error) {
        hp_unwinder_t *u = (hp_unwinder_t *)self;
        memcpy(u->sample.regs, regs, HP_NREGS * 8);
        u->sample.stack = stack_len ? stack : NULL;
        u->sample.stack_len = stack_len;
        u->sample.sp = sp;
        u->sample.stop = ids_len != 0;
        int found = hp_unwind(u->dwfl, &u->sample);
        u->sample.stack = NULL;
        *error = found < 0;
        *n = found < 0 ? -found - 1 : found;
        *pcs = u->sample.pcs;
        return hp_samples_get(&u->samples, u->sample.pcs, *n, ids, ids_len);
    }

    static void hp_unwinder_init(hp_unwinder_t *u) {
        memset(u, 0, sizeof *u);
        u->sampler.self = u;
        u->sampler.run = hp_sampler_run;
    }

    /* The address range of the ELF symbol covering pc: 1 with [lo, hi), else 0. */
    static int hp_symbol_range(Dwfl *dwfl, uint64_t pc, uint64_t *lo, uint64_t *hi) {
        Dwfl_Module *mod = dwfl_addrmodule(dwfl, pc);
        if (mod == NULL) return 0;
        GElf_Off offset;
        GElf_Sym sym;
        if (dwfl_module_addrinfo(mod, pc, &offset, &sym, NULL, NULL, NULL) == NULL) return 0;
        if (sym.st_size == 0) return 0;
        *lo = pc - offset;
        *hi = *lo + sym.st_size;
        return 1;
    }
    """
    ctypedef struct Dwfl:
        pass
    ctypedef struct Dwfl_Module:
        pass
    ctypedef struct Elf:
        pass
    ctypedef struct hp_sample_t:
        int pid
        int mem_fd
        const uint8_t *stack
        uint64_t stack_len
        uint64_t sp
        uint64_t regs[17]
        uint64_t pcs[256]
        int n
        int stop
        int n_stops
        uint64_t stop_lo[16]
        uint64_t stop_hi[16]
    ctypedef struct hp_samples_t:
        pass
    ctypedef struct hp_symtabs_t:
        pass
    ctypedef struct hp_sampler_t:
        pass
    ctypedef struct hp_unwinder_t:
        Dwfl *dwfl
        hp_sample_t sample
        hp_samples_t samples
        hp_symtabs_t symtabs
        hp_sampler_t sampler
    const void *hp_dwfl_callbacks_ptr "(&hp_dwfl_callbacks)"
    const char *HP_SAMPLER_CAPSULE
    void hp_unwinder_init(hp_unwinder_t *u)
    void hp_stop_in(Dwfl *dwfl, hp_sample_t *s, const char **names, int n)
    Dwfl *dwfl_begin(const void *callbacks)
    void dwfl_end(Dwfl *dwfl)
    bint hp_attach(Dwfl *dwfl, int pid, hp_sample_t *s)
    Dwfl_Module *dwfl_addrmodule(Dwfl *dwfl, uint64_t address)
    const char *dwfl_module_addrname(Dwfl_Module *mod, uint64_t address)
    const char *dwfl_module_info(Dwfl_Module *mod, void ***userdata, uint64_t *start,
                                 uint64_t *end, uint64_t *dwbias, uint64_t *symbias,
                                 const char **mainfile, const char **debugfile)
    int dwfl_module_build_id(Dwfl_Module *mod, const unsigned char **bits, uint64_t *vaddr)
    Elf *dwfl_module_getelf(Dwfl_Module *mod, uint64_t *bias)
    int dwfl_errno()
    const char *dwfl_errmsg(int error)
    int hp_report(Dwfl *dwfl, const char *maps, size_t len)
    int hp_unwind(Dwfl *dwfl, hp_sample_t *s) nogil
    int hp_symbol_range(Dwfl *dwfl, uint64_t pc, uint64_t *lo, uint64_t *hi)
    const char *hp_symbol_name(hp_symtabs_t *s, Dwfl_Module *mod, uint64_t pc)
    void hp_symtabs_clear(hp_symtabs_t *s)
    void hp_symtabs_free(hp_symtabs_t *s)
    uint64_t hp_samples_get(hp_samples_t *t, const uint64_t *pcs, int n, const uint8_t *ids,
                            uint64_t ids_len)
    void hp_samples_put(hp_samples_t *t, const uint64_t *pcs, int n, const uint8_t *ids,
                        uint64_t ids_len, uint64_t callstack)
    void hp_samples_clear(hp_samples_t *t)

cdef extern from "<string.h>":
    void *memcpy(void *dest, const void *src, size_t n)

from cpython.pycapsule cimport PyCapsule_New

REGISTER_COUNT = 17
MAX_FRAMES = 256
MAX_STOPS = 16


cdef class NativeUnwinder:
    """Unwinds the native samples of one process (x86-64)."""

    cdef hp_unwinder_t u
    cdef int maps_fd
    cdef dict symbols
    cdef list stop_names

    def __cinit__(self, int pid, int maps_fd, int mem_fd):
        hp_unwinder_init(&self.u)
        self.u.dwfl = dwfl_begin(hp_dwfl_callbacks_ptr)
        if self.u.dwfl == NULL:
            raise UnwindError(dwfl_errmsg(-1).decode())
        self.u.sample.pid = pid
        self.u.sample.mem_fd = mem_fd
        self.maps_fd = maps_fd
        self.symbols = {}
        self.stop_names = []
        self.report(self.maps())
        if not hp_attach(self.u.dwfl, pid, &self.u.sample):
            raise UnwindError(dwfl_errmsg(-1).decode())

    def __dealloc__(self):
        hp_samples_clear(&self.u.samples)
        hp_symtabs_free(&self.u.symtabs)
        if self.u.dwfl != NULL:
            dwfl_end(self.u.dwfl)

    def maps(self) -> bytes:
        """The process's /proc/PID/maps now."""
        cdef list parts = []
        cdef long offset = 0
        while True:
            chunk = os_pread(self.maps_fd, 65536, offset)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            offset += len(chunk)

    def report(self, bytes text) -> None:
        """Reports the modules of a /proc/PID/maps text (after a dlopen); forgets what was
        learnt of the modules before (symbols, stops, the samples' callstacks)."""
        hp_symtabs_clear(&self.u.symtabs)
        hp_samples_clear(&self.u.samples)
        self.symbols.clear()
        self.u.sample.n_stops = 0
        if hp_report(self.u.dwfl, text, len(text)) != 0:
            raise UnwindError(dwfl_errmsg(-1).decode())
        self._stop_in_names()

    def stop_in(self, names: list[str]) -> None:
        """Makes unwinds asked to stop end at the first frame in a function of one of these
        names in the interpreter's module (python3.X or libpython3.X.so), found in its symbol
        table now and whenever the modules change (`stop_at` adds others)."""
        self.stop_names = [name.encode() for name in names[:MAX_STOPS]]
        self._stop_in_names()

    def _stop_in_names(self) -> None:
        cdef const char *names[16]
        cdef int i, n = len(self.stop_names)
        for i in range(n):
            names[i] = self.stop_names[i]
        if n:
            hp_stop_in(self.u.dwfl, &self.u.sample, names, n)

    def sampler(self) -> object:
        """The capsule through which the ring reader unwinds native samples (valid while this
        unwinder lives; `_native_sampler.h`)."""
        return PyCapsule_New(&self.u.sampler, HP_SAMPLER_CAPSULE, NULL)

    def sample_callstack(self, tuple pcs, bytes python_ids) -> int:
        """The callstack id remembered for a sample's (pcs, Python frame ids), 0 if none."""
        cdef uint64_t words[256]
        cdef int n = _words(pcs, words)
        if n < 0:
            return 0
        return hp_samples_get(&self.u.samples, words, n, python_ids, len(python_ids))

    def remember_sample(self, tuple pcs, bytes python_ids, uint64_t callstack) -> None:
        """Remembers a sample's callstack id (until `forget_samples` or the modules change)."""
        cdef uint64_t words[256]
        cdef int n = _words(pcs, words)
        if n >= 0 and callstack:
            hp_samples_put(&self.u.samples, words, n, python_ids, len(python_ids), callstack)

    def forget_samples(self) -> None:
        """Forgets the samples' callstacks (a Python frame id was described again)."""
        hp_samples_clear(&self.u.samples)

    def stop_at(self, uint64_t pc) -> bool:
        """Makes unwinds asked to stop end at the first frame in the function covering pc
        (until the modules change); False when no sized symbol covers it or the table of
        such functions is full."""
        cdef uint64_t lo, hi
        cdef int i
        for i in range(self.u.sample.n_stops):
            if self.u.sample.stop_lo[i] <= pc < self.u.sample.stop_hi[i]:
                return True
        if (self.u.sample.n_stops == MAX_STOPS
                or not hp_symbol_range(self.u.dwfl, pc, &lo, &hi)):
            return False
        self.u.sample.stop_lo[self.u.sample.n_stops] = lo
        self.u.sample.stop_hi[self.u.sample.n_stops] = hi
        self.u.sample.n_stops += 1
        return True

    def unwind(
        self, const uint8_t[::1] regs, const uint8_t[::1] stack, uint64_t sp, bint stop=False
    ) -> tuple:
        """The pcs of a sample, innermost first, and whether unwinding stopped on an error.
        With `stop`, the pcs end at the first one in a function given to `stop_at`."""
        cdef int n, i
        if regs.shape[0] < 17 * 8:
            return [], True
        memcpy(self.u.sample.regs, &regs[0], 17 * 8)
        self.u.sample.stack = &stack[0] if stack.shape[0] else NULL
        self.u.sample.stack_len = stack.shape[0]
        self.u.sample.sp = sp
        self.u.sample.stop = stop
        with nogil:
            n = hp_unwind(self.u.dwfl, &self.u.sample)
        self.u.sample.stack = NULL
        error = n < 0
        if error:
            n = -n - 1
        return [self.u.sample.pcs[i] for i in range(n)], error

    def addrname(self, uint64_t pc) -> str | None:
        """libdw's own answer for the symbol covering pc (its scan of the module's table),
        None when none does: what `symbolize` gives, looked up afresh."""
        cdef Dwfl_Module *mod = dwfl_addrmodule(self.u.dwfl, pc)
        cdef const char *name = dwfl_module_addrname(mod, pc) if mod != NULL else NULL
        return name.decode(errors="replace") if name != NULL else None

    def symbolize(self, uint64_t pc) -> tuple | None:
        """(function, module path, build id hex, ELF-relative pc) of a pc, None outside every
        module. The function is "" when no symbol covers the pc."""
        cached = self.symbols.get(pc)
        if cached is not None:
            return cached
        cdef Dwfl_Module *mod = dwfl_addrmodule(self.u.dwfl, pc)
        if mod == NULL:
            return None
        cdef const char *name = hp_symbol_name(&self.u.symtabs, mod, pc)
        cdef const char *path = dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
        cdef const unsigned char *bits = NULL
        cdef uint64_t vaddr = 0
        cdef uint64_t bias = 0
        cdef int id_len = dwfl_module_build_id(mod, &bits, &vaddr)
        build_id = bits[:id_len].hex() if id_len > 0 and bits != NULL else ""
        if dwfl_module_getelf(mod, &bias) == NULL:
            bias = 0
        result = (
            name.decode(errors="replace") if name != NULL else "",
            path.decode(errors="replace") if path != NULL else "",
            build_id,
            pc - bias,
        )
        self.symbols[pc] = result
        return result


cdef int _words(tuple pcs, uint64_t *words):
    """Copies up to MAX_FRAMES pcs into words; their number, -1 when there are more."""
    cdef Py_ssize_t i, n = len(pcs)
    if n > 256:
        return -1
    for i in range(n):
        words[i] = pcs[i]
    return <int>n


from os import pread as os_pread  # noqa: E402

from heapprofd._errors import UnwindError  # noqa: E402
