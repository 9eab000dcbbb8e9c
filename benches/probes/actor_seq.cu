// What a pass of actor_scale_seq (kernels/actor.cu) costs a message that lands between two
// passes (benches/probes/actor_ll.rs): the product's kernel with parts of its pass changed.
// Regenerate: nvcc --ptx -arch=sm_80 -O3 actor_seq.cu -o actor_seq.ptx
//
// flags: 1 no head read (one message looked at a pass); 2 the tail and the count stored at
// the first empty pass after progress, or every quarter ring; 4 no fence after the answers;
// 8 no barrier at the end of a pass; 16 the head read by a watcher warp of its own, off the
// pass's path (the pass's barriers name the other warps only); 64 the head read only in the
// pass after one that found every message it looked at whole, at least two looked at; 128 a
// head behind the tail (a message taken before its head was seen) read as no message ahead,
// not as a full ring to look at; 256 a pass looks at twice what the last one took (two after
// none), the head's word or not.

#include "../../kernels/actor.cu"

__device__ __forceinline__ void workers_barrier(unsigned int workers)
{
    asm volatile("bar.sync 1, %0;" ::"r"(workers) : "memory");
}

extern "C" __global__ void actor_seq_flags(ring* inbox, ring* outbox, control* ctl, float factor,
                                           unsigned int flags)
{
    __shared__ view v;
    __shared__ volatile unsigned int head_seen;
    __shared__ unsigned int incomplete;
    __shared__ unsigned int read_head;
    if (blockIdx.x != 0) {
        return;
    }
    bool watcher_mode = (flags & 16) && blockDim.x > 32;
    unsigned int workers = watcher_mode ? blockDim.x - 32 : blockDim.x;
    if (threadIdx.x == 0) {
        read_view(inbox, outbox, ctl, v);
        head_seen = v.in_tail;
        read_head = 0;
        v.cmd = CMD_WORK;
    }
    __syncthreads();
    if (threadIdx.x >= workers) {
        // The watcher: one lane polls the head until the workers stop.
        if (threadIdx.x == workers) {
            while (*(volatile unsigned int*)&v.cmd != CMD_STOP) {
                head_seen = load_volatile(&inbox->head);
            }
        }
        return;
    }
    unsigned int words = v.in_size / 4;
    unsigned int idle = 0;
    unsigned int stored_tail = v.in_tail;
    unsigned int window = 2;
    unsigned int quarter = max(1u, v.in_capacity / 4);
    for (;;) {
        if (threadIdx.x == 0) {
            unsigned int want = max(1u, min(min(head_seen - v.in_tail, BATCH), v.in_capacity));
            if (flags & 128) {
                // A message taken before its head was seen leaves the head behind the tail.
                int ahead = (int)(head_seen - v.in_tail);
                want = ahead > 0 ? min(min((unsigned int)ahead, BATCH), v.in_capacity) : 1u;
            }
            if (flags & 1) {
                want = 1;
            }
            if (flags & 64) {
                want = max(want, min(2u, v.in_capacity));
            }
            if (flags & 256) {
                want = min(max(want, window), min(BATCH, v.in_capacity));
            }
            unsigned int room = seq_room(v);
            if (room < want) {
                v.out_tail = load_volatile(&outbox->tail);
                room = seq_room(v);
            }
            if (idle % TERMINATE_EVERY == TERMINATE_EVERY - 1 &&
                load_volatile(&ctl->should_terminate) != 0) {
                *(volatile unsigned int*)&v.cmd = CMD_STOP;
            }
            v.count = min(want, room);
            incomplete = v.count;
        }
        workers_barrier(workers);
        if (v.cmd == CMD_STOP) {
            return;
        }
        unsigned int head = 0;
        bool reads_head = !(flags & (1 | 16)) && (!(flags & 64) || read_head);
        if (threadIdx.x == 0 && reads_head) {
            head = load_volatile(&inbox->head);
        }
        unsigned int total = v.count * words;
        bool answered = false;
        for (unsigned int base = threadIdx.x; base < total; base += workers * UNROLL) {
            unsigned long long x[UNROLL];
#pragma unroll
            for (unsigned int u = 0; u < UNROLL; u++) {
                unsigned int k = base + u * workers;
                if (k < total) {
                    unsigned int m = k / words;
                    x[u] = load_word(word_in(inbox, v, v.in_tail + m, k - m * words));
                }
            }
#pragma unroll
            for (unsigned int u = 0; u < UNROLL; u++) {
                unsigned int k = base + u * workers;
                if (k < total) {
                    unsigned int m = k / words;
                    unsigned int n = v.in_tail + m;
                    if ((unsigned int)(x[u] >> 32) == n + 1) {
                        float y = scaled(__uint_as_float((unsigned int)x[u]), factor);
                        unsigned int out = v.out_head + m;
                        *(volatile unsigned long long*)word_out(outbox, v, out, k - m * words) =
                            ((unsigned long long)(out + 1) << 32) | __float_as_uint(y);
                        answered = true;
                    } else {
                        atomicMin(&incomplete, m);
                    }
                }
            }
        }
        if (answered && !(flags & 4)) {
            __threadfence_system();
        }
        if (threadIdx.x == 0 && reads_head) {
            head_seen = head;
        }
        workers_barrier(workers);
        if (threadIdx.x == 0) {
            unsigned int n = incomplete;
            read_head = n > 0 && n == v.count;
            window = n == 0 ? 2u : min(2u * n, BATCH);
            if (n > 0) {
                v.in_tail += n;
                v.out_head += n;
                v.processed += n;
                idle = 0;
            } else if (idle++ >= SPINS) {
                __nanosleep(SLEEP_NS);
            }
            bool store = !(flags & 2) ? n > 0
                                      : v.in_tail != stored_tail &&
                                            (n == 0 || v.in_tail - stored_tail >= quarter);
            if (store) {
                store_volatile(&inbox->tail, v.in_tail);
                *(volatile unsigned long long*)&ctl->messages_processed = v.processed;
                stored_tail = v.in_tail;
            }
            if (flags & 1) {
                head_seen = v.in_tail;
            }
        }
        if (!(flags & 8)) {
            workers_barrier(workers);
        }
    }
}
