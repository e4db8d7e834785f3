# The calling thread's ThreadState, cached in a C thread-local slot (compiled build only; a
# declaration file with no module: `_track_event` cimports it).
#
# The slot holds a borrowed pointer: `_track_event._tls` owns each thread's state. It is valid
# while its epoch is the process's, and the epoch moves on whenever any thread's state is
# released (a thread ended, a fork dropped them), so a pointer is never used past its state.

cdef extern from *:
    """
    static __thread void *pc_thread_state __attribute__((tls_model("initial-exec")));
    static __thread unsigned long long pc_thread_state_epoch
        __attribute__((tls_model("initial-exec")));
    static unsigned long long pc_state_epoch = 1;
    static inline void *pc_cached_thread_state(void) {
        return pc_thread_state_epoch == pc_state_epoch ? pc_thread_state : NULL;
    }
    static inline void pc_cache_thread_state(void *state) {
        pc_thread_state = state;
        pc_thread_state_epoch = pc_state_epoch;
    }
    static inline void pc_forget_thread_states(void) { pc_state_epoch++; }
    """
    void *pc_cached_thread_state() nogil
    void pc_cache_thread_state(void *state) nogil
    void pc_forget_thread_states() nogil
