// Self-validating ring slots (benches/probes/actor_ll.rs): every 8-byte word of a slot carries 4
// bytes of the message and, above them, the message's sequence number + 1. A word is written
// and read whole (8-byte accesses are single on both the CPU and the device), so a reader that
// sees the sequence it expects has that word's data: no head to poll before the slot, no fence
// before an answer's head. Regenerate: nvcc --ptx -arch=sm_80 -o actor_ll.ptx actor_ll.cu
//
// Slot n of a ring (capacity slots, `words` words each) holds message n % capacity.

struct control {
    unsigned int is_active;
    unsigned int should_terminate;
    unsigned int has_terminated;
    unsigned int errors_encountered;
    unsigned long long messages_processed;
};

// The most messages a thread has a load in flight for at once.
#define WINDOW 16u
// Empty polls between two looks at should_terminate.
#define TERMINATE_EVERY 64u

__device__ __forceinline__ unsigned long long load_word(const unsigned long long* p)
{
    return *(const volatile unsigned long long*)p;
}

// Threads form groups of `words`; group g answers messages g, g + G, g + 2G, ... (G groups),
// thread w of a group word w of each. A thread has loads in flight for up to `window` of its
// messages at once and answers them in order. `fence`: a __threadfence_system after each run of
// answers (not needed for correctness; measured). Returns once should_terminate is seen with
// nothing waiting, or after `limit` messages when it is not zero.
extern "C" __global__ void actor_ll(const unsigned long long* inbox, unsigned long long* outbox,
                                    unsigned int capacity, unsigned int words, control* ctl,
                                    float factor, unsigned int window, unsigned int fence,
                                    unsigned int limit)
{
    unsigned int groups = blockDim.x / words;
    unsigned int g = threadIdx.x / words;
    unsigned int w = threadIdx.x % words;
    if (g >= groups || blockIdx.x != 0) {
        return;
    }
    window = min(window, WINDOW);
    unsigned int n = g;
    unsigned int idle = 0;
    for (;;) {
        if (limit != 0 && n >= limit) {
            return;
        }
        unsigned long long v[WINDOW];
#pragma unroll
        for (unsigned int k = 0; k < WINDOW; k++) {
            if (k < window) {
                unsigned int m = n + k * groups;
                v[k] = load_word(&inbox[(size_t)(m & (capacity - 1)) * words + w]);
            }
        }
        unsigned int done = 0;
#pragma unroll
        for (unsigned int k = 0; k < WINDOW; k++) {
            unsigned int m = n + k * groups;
            if (k < window && done == k && (unsigned int)(v[k] >> 32) == m + 1 &&
                (limit == 0 || m < limit)) {
                float y = __fmaf_rn(__uint_as_float((unsigned int)v[k]), factor, 1.0f);
                unsigned long long answer =
                    ((unsigned long long)(m + 1) << 32) | __float_as_uint(y);
                *(volatile unsigned long long*)&outbox[(size_t)(m & (capacity - 1)) * words + w] =
                    answer;
                done++;
            }
        }
        if (done > 0) {
            n += done * groups;
            idle = 0;
            if (fence) {
                __threadfence_system();
            }
            continue;
        }
        if (idle++ % TERMINATE_EVERY == 0 &&
            *(const volatile unsigned int*)&ctl->should_terminate != 0) {
            return;
        }
    }
}

__device__ __forceinline__ unsigned long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Replicated slots: whether reading a message more often shortens the wait of one that lands
// just after a read was served. The inbox holds `copies` replicas of the ring, one after another
// (copy c at c * capacity * words words); threads form `copies` groups of `words`, group c
// polling copy c, its first read `stagger_ns * c` after group 0's, so that the groups' reads of
// different addresses are in flight at staggered times (reads of one address are served one
// after another). A thread answers its word of message n from whichever copy shows it first:
// `next[w]` in shared memory is the first message whose word w is not yet answered, so a thread
// whose copy is behind skips ahead; an answer written twice is the same value. One message in
// flight per thread (round trips only). Returns once should_terminate is seen.
extern "C" __global__ void actor_llc(const unsigned long long* inbox, unsigned long long* outbox,
                                     unsigned int capacity, unsigned int words,
                                     unsigned int copies, unsigned int stagger_ns, control* ctl,
                                     float factor)
{
    __shared__ unsigned int next[256];
    if (threadIdx.x < 256) {
        next[threadIdx.x] = 0;
    }
    __syncthreads();
    unsigned int c = threadIdx.x / words;
    unsigned int w = threadIdx.x % words;
    if (c >= copies || words > 256 || blockIdx.x != 0) {
        return;
    }
    unsigned long long start = global_ns();
    while (global_ns() - start < (unsigned long long)stagger_ns * c) {
    }
    const unsigned long long* mine = inbox + (size_t)c * capacity * words;
    unsigned int n = 0;
    unsigned int idle = 0;
    for (;;) {
        unsigned long long v = load_word(&mine[(size_t)(n & (capacity - 1)) * words + w]);
        if ((unsigned int)(v >> 32) == n + 1) {
            if (atomicMax(&next[w], n + 1) <= n) {
                float y = __fmaf_rn(__uint_as_float((unsigned int)v), factor, 1.0f);
                *(volatile unsigned long long*)&outbox[(size_t)(n & (capacity - 1)) * words + w] =
                    ((unsigned long long)(n + 1) << 32) | __float_as_uint(y);
            }
            n++;
            idle = 0;
            continue;
        }
        unsigned int ahead = *(volatile unsigned int*)&next[w];
        if (ahead > n) {
            n = ahead;
            continue;
        }
        if (idle++ % TERMINATE_EVERY == 0 &&
            *(const volatile unsigned int*)&ctl->should_terminate != 0) {
            return;
        }
    }
}
