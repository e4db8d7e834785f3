# cython: language_level=3, binding=False, boundscheck=False, wraparound=False
# distutils: libraries = dw elf
# build: optional (needs elfutils' libdw headers: Debian's libdw-dev)
"""Out-of-process unwinding of native samples with elfutils' libdw (Dwfl).

One `NativeUnwinder` per client, owned by its unwinder thread: the process's modules come
from the client's /proc/PID/maps (re-read when a pc falls outside every known module), its
memory from the copied stack of the sample first, then /proc/PID/mem; the initial registers
are the sample's. libdw caches each module's ELF, symbol table and CFI; each pc's symbol is
cached until the modules change. An unwind can stop at the first frame inside one of the
functions named by `stop_at` (the interpreter's evaluation loop, where the sample's Python
frames take over).
"""

from libc.stdint cimport uint8_t, uint64_t

cdef extern from *:
    """
    #include <elfutils/libdwfl.h>
    #include <dwarf.h>
    #include <stdio.h>
    #include <string.h>
    #include <unistd.h>

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
    const void *hp_dwfl_callbacks_ptr "(&hp_dwfl_callbacks)"
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

cdef extern from "<string.h>":
    void *memcpy(void *dest, const void *src, size_t n)

REGISTER_COUNT = 17
MAX_FRAMES = 256
MAX_STOPS = 16


cdef class NativeUnwinder:
    """Unwinds the native samples of one process (x86-64)."""

    cdef Dwfl *dwfl
    cdef hp_sample_t sample
    cdef int maps_fd
    cdef bint attached
    cdef dict symbols

    def __cinit__(self, int pid, int maps_fd, int mem_fd):
        self.dwfl = dwfl_begin(hp_dwfl_callbacks_ptr)
        if self.dwfl == NULL:
            raise UnwindError(dwfl_errmsg(-1).decode())
        self.sample.pid = pid
        self.sample.mem_fd = mem_fd
        self.maps_fd = maps_fd
        self.symbols = {}
        self.report(self.maps())
        if not hp_attach(self.dwfl, pid, &self.sample):
            raise UnwindError(dwfl_errmsg(-1).decode())

    def __dealloc__(self):
        if self.dwfl != NULL:
            dwfl_end(self.dwfl)

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
        """Reports the modules of a /proc/PID/maps text (after a dlopen)."""
        if hp_report(self.dwfl, text, len(text)) != 0:
            raise UnwindError(dwfl_errmsg(-1).decode())
        self.symbols.clear()
        self.sample.n_stops = 0

    def stop_at(self, uint64_t pc) -> bool:
        """Makes unwinds asked to stop end at the first frame in the function covering pc
        (until the modules change); False when no sized symbol covers it or the table of
        such functions is full."""
        cdef uint64_t lo, hi
        cdef int i
        for i in range(self.sample.n_stops):
            if self.sample.stop_lo[i] <= pc < self.sample.stop_hi[i]:
                return True
        if self.sample.n_stops == MAX_STOPS or not hp_symbol_range(self.dwfl, pc, &lo, &hi):
            return False
        self.sample.stop_lo[self.sample.n_stops] = lo
        self.sample.stop_hi[self.sample.n_stops] = hi
        self.sample.n_stops += 1
        return True

    def unwind(
        self, const uint8_t[::1] regs, const uint8_t[::1] stack, uint64_t sp, bint stop=False
    ) -> tuple:
        """The pcs of a sample, innermost first, and whether unwinding stopped on an error.
        With `stop`, the pcs end at the first one in a function given to `stop_at`."""
        cdef int n, i
        if regs.shape[0] < 17 * 8:
            return [], True
        memcpy(self.sample.regs, &regs[0], 17 * 8)
        self.sample.stack = &stack[0] if stack.shape[0] else NULL
        self.sample.stack_len = stack.shape[0]
        self.sample.sp = sp
        self.sample.stop = stop
        with nogil:
            n = hp_unwind(self.dwfl, &self.sample)
        self.sample.stack = NULL
        error = n < 0
        if error:
            n = -n - 1
        return [self.sample.pcs[i] for i in range(n)], error

    def symbolize(self, uint64_t pc) -> tuple | None:
        """(function, module path, build id hex, ELF-relative pc) of a pc, None outside every
        module. The function is "" when no symbol covers the pc."""
        cached = self.symbols.get(pc)
        if cached is not None:
            return cached
        cdef Dwfl_Module *mod = dwfl_addrmodule(self.dwfl, pc)
        if mod == NULL:
            return None
        cdef const char *name = dwfl_module_addrname(mod, pc)
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


from os import pread as os_pread  # noqa: E402

from heapprofd._errors import UnwindError  # noqa: E402
