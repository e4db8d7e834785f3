/* N threads allocating and freeing in C for S seconds (heapprofd's --native benchmark):
   each thread loops malloc(size) + free, sizes 16 to 256 bytes; prints `OPS <total>` and
   `CPU <seconds>` (the process's CPU time).

   usage: native_threads [THREADS [SECONDS]]     (default 8 threads, 5 s) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile int stop;

static void *loop(void *arg) {
    uint64_t ops = 0;
    void *volatile sink;
    while (!stop) {
        for (int i = 0; i < 1024; i++) {
            sink = malloc(16 + (size_t)((ops + (uint64_t)i) * 37 % 241));
            free(sink);
        }
        ops += 1024;
    }
    *(uint64_t *)arg = ops;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    double seconds = argc > 2 ? atof(argv[2]) : 5.0;
    if (threads < 1 || threads > 256 || seconds <= 0) {
        fprintf(stderr, "usage: native_threads [THREADS [SECONDS]]\n");
        return 2;
    }
    pthread_t tids[256];
    uint64_t ops[256] = {0};
    for (int i = 0; i < threads; i++) pthread_create(&tids[i], NULL, loop, &ops[i]);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    stop = 1;
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        total += ops[i];
    }
    struct timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    printf("OPS %llu\nCPU %.6f\n", (unsigned long long)total, cpu.tv_sec + cpu.tv_nsec / 1e9);
    return 0;
}
