# The compiler's atomic builtins on 32-bit words, for the compiled builds of _atomics.py and
# _abi.py.

cdef extern from *:
    """
    #include <stdint.h>
    static inline uint32_t perfetto_smb_cas32(unsigned char *p, uint32_t expected,
                                              uint32_t desired) {
        __atomic_compare_exchange_n((uint32_t *)p, &expected, desired, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        return expected;
    }
    static inline uint32_t perfetto_smb_load32(unsigned char *p) {
        return __atomic_load_n((uint32_t *)p, __ATOMIC_ACQUIRE);
    }
    static inline uint32_t perfetto_smb_load32_relaxed(unsigned char *p) {
        return __atomic_load_n((uint32_t *)p, __ATOMIC_RELAXED);
    }
    static inline void perfetto_smb_store32(unsigned char *p, uint32_t value) {
        __atomic_store_n((uint32_t *)p, value, __ATOMIC_RELEASE);
    }
    """
    unsigned int cas32 "perfetto_smb_cas32"(unsigned char *p, unsigned int expected, unsigned int desired) noexcept nogil
    unsigned int load32 "perfetto_smb_load32"(unsigned char *p) noexcept nogil
    unsigned int load32_relaxed "perfetto_smb_load32_relaxed"(unsigned char *p) noexcept nogil
    void store32 "perfetto_smb_store32"(unsigned char *p, unsigned int value) noexcept nogil
