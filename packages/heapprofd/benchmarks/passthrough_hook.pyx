# cython: language_level=3
"""The floor of the client's cost: allocator hooks that only call the original allocators.

The benchmark builds it and installs it around the workload: what any PyMem_SetAllocator
hook costs before it does anything.
"""

cdef extern from *:
    """
    typedef struct { PyMemAllocatorEx orig; } pt_domain_t;
    static pt_domain_t pt_domains[3];

    static void *pt_malloc(void *ctx, size_t size) {
        pt_domain_t *d = (pt_domain_t *)ctx;
        return d->orig.malloc(d->orig.ctx, size);
    }
    static void *pt_calloc(void *ctx, size_t nelem, size_t elsize) {
        pt_domain_t *d = (pt_domain_t *)ctx;
        return d->orig.calloc(d->orig.ctx, nelem, elsize);
    }
    static void *pt_realloc(void *ctx, void *ptr, size_t size) {
        pt_domain_t *d = (pt_domain_t *)ctx;
        return d->orig.realloc(d->orig.ctx, ptr, size);
    }
    static void pt_free(void *ctx, void *ptr) {
        pt_domain_t *d = (pt_domain_t *)ctx;
        d->orig.free(d->orig.ctx, ptr);
    }

    static void pt_install(void) {
        PyMemAllocatorDomain doms[3] = {PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};
        for (int i = 0; i < 3; i++) {
            PyMemAllocatorEx hook = {&pt_domains[i], pt_malloc, pt_calloc, pt_realloc, pt_free};
            PyMem_GetAllocator(doms[i], &pt_domains[i].orig);
            PyMem_SetAllocator(doms[i], &hook);
        }
    }
    """
    void pt_install()


def install() -> None:
    """Wraps the raw, mem and object allocators in pass-through hooks (for good)."""
    pt_install()
