/* How the daemon's ring reader (read_events, _native.pyx) hands a native Malloc record to the
   client's unwinder (NativeUnwinder, _dwunwind.pyx, built only where libdw is) without a
   Python object per sample: the unwinder exports this in a capsule named
   HP_SAMPLER_CAPSULE. */
#ifndef HEAPPROFD_NATIVE_SAMPLER_H
#define HEAPPROFD_NATIVE_SAMPLER_H

#include <stdint.h>

#define HP_SAMPLER_CAPSULE "heapprofd._dwunwind.sampler"

typedef struct {
    void *self;
    /* Unwinds one sample (its 17 registers, its copied stack starting at sp, its Python frame
       ids: ids_len bytes, unaligned; with ids the unwind ends in the evaluation loop). Sets
       *pcs (innermost first, valid until the next call) and *n, *error to whether unwinding
       stopped on an error; returns the callstack id remembered for (pcs, ids), 0 if none.
       Runs without the GIL. */
    uint64_t (*run)(void *self, const uint8_t *regs, const uint8_t *stack, uint64_t stack_len,
                    uint64_t sp, const uint8_t *ids, uint64_t ids_len, const uint64_t **pcs,
                    int *n, int *error);
} hp_sampler_t;

#endif
