// Persistent actor kernels (issue 20): they run for as long as their control block lets them,
// taking messages from an inbox ring and putting results on an outbox ring, both in memory the
// host maps too. The byte layouts are host/worker/src/contract/actor.rs's:
//
//   ring:    +0 head (producer), +64 tail (consumer), +128 capacity (a power of two),
//            +132 message_size (bytes, a multiple of 4), +256 slots; message n at slot n % capacity
//   control: +0 is_active, +4 should_terminate, +8 has_terminated, +12 errors_encountered,
//            +16 messages_processed (u64)
//
// A producer writes its slots, fences (__threadfence_system: the host reads them through another
// mapping), then stores head; a consumer reads head, fences, reads the slots, then stores tail.
// Only thread 0 touches the counters; the block transforms the messages between two barriers.

#include <cooperative_groups.h>

struct ring {
    unsigned int head;
    unsigned int pad_head[15];
    unsigned int tail;
    unsigned int pad_tail[15];
    unsigned int capacity;
    unsigned int message_size;
    unsigned int pad_header[30];
};

struct control {
    unsigned int is_active;
    unsigned int should_terminate;
    unsigned int has_terminated;
    unsigned int errors_encountered;
    unsigned long long messages_processed;
};

// Most messages a block takes at once: the block transforms them all between two barriers.
#define BATCH 256u
// Empty polls before the poller sleeps between polls: a busy stream of messages is answered
// without a sleep, an idle actor does not keep a core (or an SM's issue slots) busy.
#define SPINS 256u
#define SLEEP_NS 2000u
// Empty polls between two looks at should_terminate: each look is another read across the bus,
// and a stop may take a little longer to be seen, a message not.
#define TERMINATE_EVERY 64u
// Words each thread loads before it stores any: loads across the bus are independent, and all of
// them are in flight at once only if no store comes between them (a store could alias a later
// load, so the compiler keeps them in order).
#define UNROLL 16u

#define CMD_WORK 0u
#define CMD_STOP 1u

__device__ __forceinline__ unsigned int load_volatile(const unsigned int* p)
{
    return *(const volatile unsigned int*)p;
}

__device__ __forceinline__ void store_volatile(unsigned int* p, unsigned int v)
{
    *(volatile unsigned int*)p = v;
}

// What the serving loop keeps of the rings, in shared memory. The rings live in host memory the
// device reads across the bus (a read is a round trip of about a microsecond), so nothing is read
// twice that cannot change: the geometry is fixed once a ring is made, and the kernel's own
// counters (the inbox's tail, the outbox's head) change only when it writes them.
struct view {
    unsigned int in_capacity;
    unsigned int in_size;
    unsigned int out_capacity;
    unsigned int out_size;
    unsigned int in_tail;  // next message to take
    unsigned int out_head; // next slot to fill
    unsigned int out_tail; // the host's, as last read
    unsigned int cmd;
    unsigned int count;
    unsigned long long processed;
};

// Thread 0, once: the rings' geometry and the counters the kernel keeps from here on.
__device__ __forceinline__ void read_view(ring* inbox, ring* outbox, control* ctl, view& v)
{
    v.in_capacity = inbox->capacity;
    v.in_size = inbox->message_size;
    v.out_capacity = outbox->capacity;
    v.out_size = outbox->message_size;
    v.in_tail = load_volatile(&inbox->tail);
    v.out_head = load_volatile(&outbox->head);
    v.out_tail = load_volatile(&outbox->tail);
    v.processed = *(volatile unsigned long long*)&ctl->messages_processed;
}

__device__ __forceinline__ const float* slot_in(const ring* r, const view& v, unsigned int n)
{
    return (const float*)((const char*)r + 256 + (size_t)(n & (v.in_capacity - 1)) * v.in_size);
}

__device__ __forceinline__ float* slot_out(ring* r, const view& v, unsigned int n)
{
    return (float*)((char*)r + 256 + (size_t)(n & (v.out_capacity - 1)) * v.out_size);
}

// Thread 0: waits until there are messages to take and room to put their results, or until the
// host asks the kernel to stop. One read of the inbox's head per poll; the outbox's tail is read
// again only when the room last seen is too small.
__device__ __forceinline__ void wait_for_work(ring* inbox, ring* outbox, control* ctl, view& v)
{
    unsigned int idle = 0;
    for (;;) {
        unsigned int waiting = load_volatile(&inbox->head) - v.in_tail;
        unsigned int room = v.out_capacity - (v.out_head - v.out_tail);
        if (waiting > 0 && room < min(waiting, BATCH)) {
            v.out_tail = load_volatile(&outbox->tail);
            room = v.out_capacity - (v.out_head - v.out_tail);
        }
        if (waiting > v.in_capacity || room > v.out_capacity) {
            // The host broke a ring: count it and stop rather than read past the slots.
            atomicAdd(&ctl->errors_encountered, 1u);
            v.cmd = CMD_STOP;
            return;
        }
        unsigned int n = min(min(waiting, room), BATCH);
        if (n > 0) {
            // What the host wrote into the slots before it stored head is visible from here on.
            __threadfence_system();
            v.cmd = CMD_WORK;
            v.count = n;
            return;
        }
        if (idle % TERMINATE_EVERY == 0 && load_volatile(&ctl->should_terminate) != 0) {
            v.cmd = CMD_STOP;
            return;
        }
        if (idle < SPINS) {
            idle++;
        } else {
            __nanosleep(SLEEP_NS);
        }
    }
}

// Thread 0: publishes `n` results, frees `n` inbox slots and counts them.
__device__ __forceinline__ void publish(ring* inbox, ring* outbox, control* ctl, view& v,
                                        unsigned int n)
{
    // The results (written by every thread of the block, ordered before this by the barrier)
    // are visible before the new head is.
    __threadfence_system();
    v.out_head += n;
    v.in_tail += n;
    v.processed += n;
    store_volatile(&outbox->head, v.out_head);
    store_volatile(&inbox->tail, v.in_tail);
    // Only this thread writes the count: a store, not an atomic across the bus.
    *(volatile unsigned long long*)&ctl->messages_processed = v.processed;
}

__device__ __forceinline__ float scaled(float x, float factor)
{
    return __fmaf_rn(x, factor, 1.0f);
}

__device__ __forceinline__ float4 scaled(float4 x, float factor)
{
    return make_float4(scaled(x.x, factor), scaled(x.y, factor), scaled(x.z, factor),
                       scaled(x.w, factor));
}

__device__ __forceinline__ float first(float x) { return x; }
__device__ __forceinline__ float first(float4 x) { return x.x; }

// Every thread: the batch's messages, `elems` elements of T each, from the inbox's slots to the
// outbox's, each element scaled. A thread issues UNROLL loads before it stores any.
template <typename T>
__device__ __forceinline__ void transform(ring* inbox, ring* outbox, const view& v,
                                          unsigned int elems, float factor,
                                          bool fault_on_negative)
{
    unsigned int total = v.count * elems;
    for (unsigned int base = threadIdx.x; base < total; base += blockDim.x * UNROLL) {
        T x[UNROLL];
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            unsigned int k = base + u * blockDim.x;
            if (k < total) {
                unsigned int m = k / elems;
                x[u] = ((const T*)slot_in(inbox, v, v.in_tail + m))[k - m * elems];
            }
        }
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            unsigned int k = base + u * blockDim.x;
            if (k < total) {
                unsigned int m = k / elems;
                unsigned int i = k - m * elems;
                if (fault_on_negative && i == 0 && first(x[u]) < 0.0f) {
                    // A handler bug: a store through a pointer no allocation covers.
                    *(volatile unsigned int*)(size_t)(16 + m) = 1;
                }
                ((T*)slot_out(outbox, v, v.out_head + m))[i] = scaled(x[u], factor);
            }
        }
    }
}

// The actor loop; `fault_on_negative` makes a message whose first float is negative fault the
// kernel (a handler that fails). One block serves the rings; any others return at once.
__device__ __forceinline__ void serve(ring* inbox, ring* outbox, control* ctl, float factor,
                                      bool fault_on_negative)
{
    __shared__ view v;
    if (blockIdx.x != 0) {
        return;
    }
    if (threadIdx.x == 0) {
        read_view(inbox, outbox, ctl, v);
    }
    for (;;) {
        if (threadIdx.x == 0) {
            wait_for_work(inbox, outbox, ctl, v);
        }
        __syncthreads();
        if (v.cmd == CMD_STOP) {
            return;
        }
        // Every word of every message taken is independent: the block's loads are all in flight
        // at once, so a batch costs about one round trip across the bus, not one per message;
        // 16 bytes a load where every slot is 16-byte aligned.
        unsigned int bytes = min(v.in_size, v.out_size);
        bool aligned = (v.in_size | v.out_size | (unsigned int)(size_t)inbox |
                        (unsigned int)(size_t)outbox) % 16 == 0;
        if (aligned) {
            transform<float4>(inbox, outbox, v, bytes / 16, factor, fault_on_negative);
        } else {
            transform<float>(inbox, outbox, v, bytes / 4, factor, fault_on_negative);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            publish(inbox, outbox, ctl, v, v.count);
        }
        // Thread 0's next wait must not change the view before every thread has read it: the
        // barrier at the top of the loop orders the next command after this one.
        __syncthreads();
    }
}

// Each message (message_size / 4 floats) becomes out[i] = in[i] * factor + 1, until the host sets
// should_terminate. One block; any block size.
extern "C" __global__ void actor_scale(ring* inbox, ring* outbox, control* ctl, float factor)
{
    serve(inbox, outbox, ctl, factor, false);
}

// --- Sequenced rings (layout 1, host/worker/src/contract/actor.rs): a slot is the message's
// words, each a u64 with the message's number + 1 above the word's 4 bytes. A word read whole
// with the number expected is that word's data, so the block reads the slots themselves, with
// no head read before them: a message costs one read across the bus instead of two. Each word's
// answer is written as soon as its word is seen; the block only agrees on how many messages
// were whole, to move the inbox's tail (what frees slots for the host) and count them.
//
// The head is read only in the pass after one that found every message it looked at whole (a
// batch may be waiting), not while the kernel waits for a next single message: a pass that
// reads the head waits for that read too, and the head's line is the one the host stores last
// (benches/probes/actor_ll.rs on an H200: round trips 0.4-3 us shorter without it, and p99s
// that reached 19 us under 5). Without the head, how many slots a pass reads grows with what
// the last one took, so a batch is taken in a few passes as the host writes it.

#define LAYOUT_SEQUENCED 1u

__device__ __forceinline__ unsigned long long load_word(const unsigned long long* p)
{
    return *(const volatile unsigned long long*)p;
}

__device__ __forceinline__ const unsigned long long* word_in(const ring* r, const view& v,
                                                             unsigned int n, unsigned int w)
{
    return (const unsigned long long*)((const char*)r + 256 +
                                       (size_t)(n & (v.in_capacity - 1)) * 2 * v.in_size) + w;
}

__device__ __forceinline__ unsigned long long* word_out(ring* r, const view& v, unsigned int n,
                                                        unsigned int w)
{
    return (unsigned long long*)((char*)r + 256 +
                                 (size_t)(n & (v.out_capacity - 1)) * 2 * v.out_size) + w;
}

// The outbox's slots free for the next answers, from the kernel's head on, or a number above its
// capacity when the counters are ones no ring can have. The host's tail may be ahead of that
// head, by at most the capacity: a pass answers the messages it saw whole beyond the first it
// did not, and counts only those before it, so the host can take answers (whole and right) that
// a later pass counts; that pass rewrites them, the same, into slots the host has left.
__device__ __forceinline__ unsigned int seq_room(const view& v)
{
    unsigned int used = v.out_head - v.out_tail;
    if (used <= v.out_capacity) {
        return v.out_capacity - used;
    }
    if (v.out_tail - v.out_head <= v.out_capacity) {
        return v.out_capacity;
    }
    return 0xffffffffu;
}

// Each message (message_size / 4 floats) becomes out[i] = in[i] * factor + 1, over two sequenced
// rings of the same message size, until the host sets should_terminate. One block; any block
// size. A ring of another layout or size is counted in errors_encountered and the kernel returns.
extern "C" __global__ void actor_scale_seq(ring* inbox, ring* outbox, control* ctl, float factor)
{
    __shared__ view v;
    // The inbox's head as last read (a hint of how many messages to look at; the slots say
    // which are there), the first message of this pass not seen whole, and whether this pass
    // reads the head (the last one found every message it looked at whole).
    __shared__ unsigned int head_seen;
    __shared__ unsigned int incomplete;
    __shared__ bool read_head;
    if (blockIdx.x != 0) {
        return;
    }
    if (threadIdx.x == 0) {
        read_view(inbox, outbox, ctl, v);
        head_seen = v.in_tail;
        read_head = false;
        v.cmd = CMD_WORK;
        unsigned int layouts = *(const volatile unsigned int*)((const char*)inbox + 136) &
                               *(const volatile unsigned int*)((const char*)outbox + 136);
        if (layouts != LAYOUT_SEQUENCED || v.in_size != v.out_size || v.in_size == 0) {
            atomicAdd(&ctl->errors_encountered, 1u);
            v.cmd = CMD_STOP;
        }
    }
    __syncthreads();
    if (v.cmd == CMD_STOP) {
        return;
    }
    unsigned int words = v.in_size / 4;
    unsigned int idle = 0;
    // Thread 0's: messages the next pass looks at without the head's word for it, twice what the
    // last pass took (two after a pass that took none): a batch the host is still writing, its
    // head not yet stored, is taken in passes that grow with it, and a wait for a single
    // message reads two slots a pass.
    unsigned int window = 2;
    for (;;) {
        if (threadIdx.x == 0) {
            // Messages to look at: the window, or as many as the head last said were put, as far
            // as the ring and the outbox's room go. A head behind the tail (its messages taken
            // before it was seen) says none are. (A head the host broke only makes this look at
            // fewer or more slots of the ring.)
            int ahead = (int)(head_seen - v.in_tail);
            unsigned int want = min(max(window, ahead > 0 ? (unsigned int)ahead : 0u),
                                    min(BATCH, v.in_capacity));
            unsigned int room = seq_room(v);
            if (room < want) {
                v.out_tail = load_volatile(&outbox->tail);
                room = seq_room(v);
            }
            if (room > v.out_capacity) {
                // The host broke a ring: count it and stop rather than read past the slots.
                atomicAdd(&ctl->errors_encountered, 1u);
                v.cmd = CMD_STOP;
            } else if (idle % TERMINATE_EVERY == TERMINATE_EVERY - 1 &&
                       load_volatile(&ctl->should_terminate) != 0) {
                v.cmd = CMD_STOP;
            } else {
                v.cmd = CMD_WORK;
            }
            v.count = min(want, room);
            incomplete = v.count;
        }
        __syncthreads();
        if (v.cmd == CMD_STOP) {
            return;
        }
        // The head's read goes out with the slots' (one round trip for both); it only tells the
        // next pass how far to look.
        unsigned int head = 0;
        bool reads_head = read_head;
        if (threadIdx.x == 0 && reads_head) {
            head = load_volatile(&inbox->head);
        }
        unsigned int total = v.count * words;
        bool answered = false;
        for (unsigned int base = threadIdx.x; base < total; base += blockDim.x * UNROLL) {
            unsigned long long x[UNROLL];
#pragma unroll
            for (unsigned int u = 0; u < UNROLL; u++) {
                unsigned int k = base + u * blockDim.x;
                if (k < total) {
                    unsigned int m = k / words;
                    x[u] = load_word(word_in(inbox, v, v.in_tail + m, k - m * words));
                }
            }
#pragma unroll
            for (unsigned int u = 0; u < UNROLL; u++) {
                unsigned int k = base + u * blockDim.x;
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
        if (answered) {
            // Out to the host now, not whenever the device's write buffers drain.
            __threadfence_system();
        }
        if (threadIdx.x == 0 && reads_head) {
            head_seen = head;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned int n = incomplete;
            read_head = n > 0 && n == v.count;
            window = n == 0 ? 2u : min(2u * n, BATCH);
            if (n > 0) {
                v.in_tail += n;
                v.out_head += n;
                v.processed += n;
                store_volatile(&inbox->tail, v.in_tail);
                // The host reads no head of a sequenced ring; a kernel started next on these
                // rings does, and answers on from it, in step with the inbox's tail.
                store_volatile(&outbox->head, v.out_head);
                *(volatile unsigned long long*)&ctl->messages_processed = v.processed;
                idle = 0;
            } else if (idle++ >= SPINS) {
                __nanosleep(SLEEP_NS);
            }
        }
        // No barrier here: between the one above and the one at the top of the loop no other
        // thread reads the view, the count or the flags thread 0 now changes.
    }
}

// As actor_scale, but a message whose first float is negative makes the kernel fault.
extern "C" __global__ void actor_fault(ring* inbox, ring* outbox, control* ctl, float factor)
{
    serve(inbox, outbox, ctl, factor, true);
}

// Ignores should_terminate: sleeps in a loop forever, counting its wake-ups in
// errors_encountered so a test can see it runs. Only the worker's end stops it.
extern "C" __global__ void actor_deaf(control* ctl)
{
    if (threadIdx.x != 0) {
        return;
    }
    for (;;) {
        __nanosleep(100000);
        atomicAdd(&ctl->errors_encountered, 1u);
    }
}

// A one-off cooperative kernel (a persistent kernel that returns by itself): each block sums its
// part of in[0..n) into out[blockIdx.x], the grid synchronises (cooperative groups' grid.sync,
// which needs a cooperative launch: every persistent launch is one), then block 0 adds the
// partial sums into out[gridDim.x], sets messages_processed to 1 and the kernel returns.
// out holds gridDim.x + 1 floats. Any grid; block size a power of two up to 1024.
extern "C" __global__ void grid_sum(const float* in, float* out, unsigned int n, control* ctl)
{
    __shared__ float partial[1024];
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    unsigned int per_block = (n + gridDim.x - 1) / gridDim.x;
    unsigned int begin = blockIdx.x * per_block;
    unsigned int end = min(n, begin + per_block);
    float sum = 0.0f;
    for (unsigned int i = begin + threadIdx.x; i < end; i += blockDim.x) {
        sum += in[i];
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            partial[threadIdx.x] += partial[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = partial[0];
    }
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float total = 0.0f;
        for (unsigned int b = 0; b < gridDim.x; b++) {
            total += out[b];
        }
        out[gridDim.x] = total;
        *(volatile unsigned long long*)&ctl->messages_processed = 1ull;
    }
}
