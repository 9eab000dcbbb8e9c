// A stand-in for the NVIDIA driver's libcuda.so.1, for testing the cuda backend's logic on machines
// without a GPU (tests/worker/fake_cuda.rs builds it with `cc` and puts it first on the worker's
// library path). It implements exactly the driver entry points the backend resolves, with "device"
// memory in host memory (device pointers are host pointers) and a few kernels known by name:
//
//   iota(u32* out, u32 n)                out[i] = i + 1 for i < n   (checks the argument block)
//   write_out_of_bounds(u32*, u64)       a sticky CUDA_ERROR_ILLEGAL_ADDRESS at the next wait
//   spin_forever(u32*)                   never finishes: every later event stays not-ready
//   empty()                              nothing
//   actor(u32* control)                  a persistent kernel: runs (on a thread of the fake) until the
//                                        control block's should_terminate (+4) reads 1, then sets
//                                        has_terminated (+8) and returns;
//                                        its stream's later events and queries wait for it. A control
//                                        block not registered with CU_MEMHOSTREGISTER_DEVICEMAP is an
//                                        illegal address, as on a GPU. Gives up after 30 s.
//   actor_faults(u32* control)           the same, but ends with a sticky CUDA_ERROR_ILLEGAL_ADDRESS
//   echo(u32* out, u32 a, u64 b, u32 c)  out[0] = a, out[1..3] = b (low word first), out[3] = c
//
// Cooperative launches (cuLaunchCooperativeKernel) take a pointer per parameter: the fake knows
// each kernel's parameter sizes by its name, requires every pointer at its parameter's offset from
// the first (the packed argument block, naturally aligned, as a backend lays it out) and runs the
// kernel on what they point to. The actor kernels sync grid-wide: launched by cuLaunchKernel they
// are CUDA_ERROR_INVALID_VALUE. The device launches cooperative kernels
// (CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH is 1) unless FAKE_CUDA_NO_COOPERATIVE is set.
//
// As measured on an H200 (benches/probes/beside_persistent.rs), cuMemFree_v2, cuModuleLoadDataEx,
// cuModuleUnload and cuMemHostRegister_v2 wait until no persistent kernel runs; cuMemAllocAsync and
// cuMemFreeAsync (the stream-ordered allocator: CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 1
// unless FAKE_CUDA_NO_POOLS is set) and copies do not. While one runs, a copy may be pageable (the
// backend page-locks nothing then).
//
// New allocations are filled with 0xAB, so a backend that forgot to zero them is caught. PTX
// containing "bogus" fails to JIT with an error log naming line 7; `.version 99` is
// CUDA_ERROR_UNSUPPORTED_PTX_VERSION. A block of more than 1024 threads is CUDA_ERROR_INVALID_VALUE.
// With FAKE_CUDA_COUNTS=<file> set, the counts of kernel launches and event records so far are
// rewritten to that file after each ("launches N records M"), so tests can see how launches are
// grouped under events, how many sync signals (cuStreamWriteValue32) were stored ("signals N"), and
// how many graph launches carried kernels ("graphs N"; each kernel node run counts as a launch too)
// and how many kernel nodes of instantiated graphs were updated ("updates N").
// Graphs: kernel nodes only, run in the order they were added (the backend builds chains); their
// parameters, argument bytes included, are copied when a node is added or updated, as the driver does.
// With FAKE_CUDA_SIGNAL_STALL_MS=<n>, cuStreamWriteValue32 stores its value at once and then takes
// n ms to return (a worker held up after the device's store landed; behind a never-ending kernel it
// stores nothing and still takes n ms): the host must see the worker's sync through the completion
// word, long before the worker answers. The counts file is replaced whole (written beside it, then
// renamed), so a reader never sees it half written.
// With FAKE_CUDA_EVENT_LAG_US=<n>, an event reads not-ready until n µs after it was recorded (a
// device that reaches an event some time after the host recorded it, as a real one does): a
// backend that gives a group less time than that to complete is caught.
// With FAKE_CUDA_FAULT_AFTER_MS=<n>, write_out_of_bounds runs n ms before its fault lands (a kernel
// that works, then faults): until then it is a never-ending kernel (events behind it not-ready, the
// completion word not stored), then the sticky CUDA_ERROR_ILLEGAL_ADDRESS, and from then on
// cuEventRecord is refused with it too, as the driver refuses work queued after a fault. (A fault
// without it stands for one that lands behind whatever the backend queues right after the kernel:
// those records succeed.)
// Occupancy: min(32, 2048 / block threads) blocks of a kernel per multiprocessor (fewer where dynamic
// shared memory is short), 132 multiprocessors.
// Not thread-safe beyond what the backend needs (it serialises launches and queries itself).

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>
#include <pthread.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUevent, *CUstream;
typedef unsigned long long CUdeviceptr;

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_CONTEXT = 201, INVALID_PTX = 218,
       PEER_ACCESS_UNSUPPORTED = 217, UNSUPPORTED_PTX = 222, NOT_FOUND = 500, NOT_READY = 600,
       ILLEGAL_ADDRESS = 700 };

static int sticky = 0;       // a sticky error, once a kernel "faulted"
static int spinning = 0;     // a never-ending kernel was launched
static int landed = 0;       // a FAKE_CUDA_FAULT_AFTER_MS fault landed
static int registered = 0;

static unsigned long launches = 0, records = 0, signals = 0, graph_launches = 0, node_updates = 0;
// Records of timed events (no CU_EVENT_DISABLE_TIMING), and of those the ones on the first stream
// created (the worker's stream: the context makes it before anything else).
static unsigned long timed = 0, timed_first = 0;
// cuStreamSynchronize calls on the worker's stream; cuStreamWaitEvent calls.
static unsigned long work_syncs = 0, event_waits = 0;
static void *first_stream = 0;

static void write_counts(void) {
    const char *path = getenv("FAKE_CUDA_COUNTS");
    if (!path) return;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return;
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "launches %lu records %lu signals %lu graphs %lu updates %lu timed %lu timed-first %lu syncs %lu waits %lu\n",
            launches, records, signals, graph_launches, node_updates, timed, timed_first, work_syncs, event_waits);
    fclose(f);
    rename(tmp, path);
}

struct module { char *ptx; };
struct function { char name[128]; };
// A stream: persistent kernels launched on it so far, and those that ended.
// last_event_ms: when the latest event on it was recorded (a synchronize waits until it is reached).
struct stream { unsigned started, finished; double last_event_ms; };
// ms: when it was recorded (kernels run at launch); untimed: created with CU_EVENT_DISABLE_TIMING;
// gate, target: recorded behind persistent kernel number `target` of stream `gate`, still running.
struct event { int never; double ms; int untimed; struct stream *gate; unsigned target; };
static int actors = 0; // persistent kernels running

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

CUresult cuInit(unsigned flags) { (void)flags; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }

static const char *name_of(CUresult r) {
    switch (r) {
    case OK: return "CUDA_SUCCESS";
    case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case PEER_ACCESS_UNSUPPORTED: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
    case INVALID_PTX: return "CUDA_ERROR_INVALID_PTX";
    case UNSUPPORTED_PTX: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case NOT_READY: return "CUDA_ERROR_NOT_READY";
    case ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    default: return 0;
    }
}
CUresult cuGetErrorName(CUresult r, const char **s) { *s = name_of(r); return *s ? OK : INVALID_VALUE; }
CUresult cuGetErrorString(CUresult r, const char **s) {
    *s = r == ILLEGAL_ADDRESS ? "an illegal memory access was encountered" : name_of(r) ? "fake driver error" : 0;
    return *s ? OK : INVALID_VALUE;
}
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int i) { if (i != 0) return INVALID_VALUE; *d = 0; return OK; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { (void)d; snprintf(name, len, "Fake GPU"); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = (size_t)1 << 30; return OK; }
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    (void)d;
    switch (attr) {
    case 75: *v = 9; break;               // compute capability major
    case 76: *v = 0; break;               // minor
    case 1: case 2: case 3: *v = 1024; break; // threads per block, block x, y
    case 4: *v = 64; break;               // block z
    case 5: *v = 2147483647; break;       // grid x
    case 6: case 7: *v = 65535; break;    // grid y, z
    case 97: *v = 232448; break;          // shared memory opt-in
    case 16: *v = 132; break;             // multiprocessors
    case 95: *v = getenv("FAKE_CUDA_NO_COOPERATIVE") ? 0 : 1; break; // cooperative launch
    case 115: *v = getenv("FAKE_CUDA_NO_POOLS") ? 0 : 1; break; // memory pools
    default: *v = 0;
    }
    return OK;
}
CUresult cuDeviceGetUuid_v2(unsigned char *u, CUdevice d) { (void)d; for (int i = 0; i < 16; i++) u[i] = (unsigned char)(0x10 + i); return OK; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)0x1; return OK; }
CUresult cuCtxSetCurrent(CUcontext c) { (void)c; return OK; }
// What waits for every running kernel of the context, persistent kernels' too (see above).
static void wait_for_actors(void) {
    while (__atomic_load_n(&actors, __ATOMIC_ACQUIRE)) { struct timespec t = { 0, 100000 }; nanosleep(&t, 0); }
}
CUresult cuCtxSynchronize(void) {
    wait_for_actors();
    return sticky ? sticky : OK;
}
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)1 << 29; *t = (size_t)1 << 30; return OK; }

// Memory shared between processes (CUDA IPC): cuMemAlloc_v2 memory lives in a memfd of its own
// (up to MAX_SHARED live allocations; malloc past that, which cannot be exported), as the driver
// exports only cuMemAlloc's memory, never a pool's. A handle names the exporter's process, the fd
// and the size; cuIpcOpenMemHandle_v2 maps /proc/<pid>/fd/<fd> and refuses the exporter's own
// handle (CUDA_ERROR_INVALID_CONTEXT, as the driver does), and with FAKE_CUDA_NO_PEER set it
// refuses every handle (CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: GPUs without peer access).
#define MAX_SHARED 256
static struct { uintptr_t p; size_t n; int fd; } shared[MAX_SHARED];
static struct { uintptr_t p; size_t n; } opened[MAX_SHARED];
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
enum { IPC_MAGIC = 0x66616b65 };
typedef struct { char reserved[64]; } CUipcMemHandle;
struct ipc_handle { uint32_t magic; int32_t pid; int32_t fd; uint32_t pad; uint64_t n; };

static void *alloc_bytes(size_t n) {
    pthread_mutex_lock(&shared_lock);
    int slot = -1;
    for (int i = 0; i < MAX_SHARED && slot < 0; i++) if (!shared[i].p) slot = i;
    void *m = 0;
    if (slot >= 0 && n > 0) {
        int fd = (int)syscall(SYS_memfd_create, "fake-cuda-alloc", 0);
        if (fd >= 0 && ftruncate(fd, (off_t)n) == 0) {
            void *q = mmap(0, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (q != MAP_FAILED) { m = q; shared[slot].p = (uintptr_t)q; shared[slot].n = n; shared[slot].fd = fd; }
        }
        if (!m && fd >= 0) close(fd);
    }
    pthread_mutex_unlock(&shared_lock);
    return m ? m : malloc(n);
}
static void free_bytes(void *m) {
    pthread_mutex_lock(&shared_lock);
    for (int i = 0; i < MAX_SHARED; i++)
        if (shared[i].p == (uintptr_t)m) {
            munmap(m, shared[i].n); close(shared[i].fd); shared[i].p = 0;
            pthread_mutex_unlock(&shared_lock);
            return;
        }
    pthread_mutex_unlock(&shared_lock);
    free(m);
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    if (sticky) return sticky;
    if (n > ((size_t)1 << 30)) return OUT_OF_MEMORY;
    void *m = alloc_bytes(n);
    if (!m) return OUT_OF_MEMORY;
    memset(m, 0xAB, n); // what an earlier tenant left
    *p = (CUdeviceptr)(uintptr_t)m;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) { wait_for_actors(); if (sticky) return sticky; free_bytes((void *)(uintptr_t)p); return OK; }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) {
    (void)s;
    if (sticky) return sticky;
    if (n > ((size_t)1 << 30)) return OUT_OF_MEMORY;
    void *m = malloc(n);
    if (!m) return OUT_OF_MEMORY;
    memset(m, 0xAB, n);
    *p = (CUdeviceptr)(uintptr_t)m;
    return OK;
}
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; if (sticky) return sticky; free_bytes((void *)(uintptr_t)p); return OK; }
CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    if (sticky) return sticky;
    pthread_mutex_lock(&shared_lock);
    for (int i = 0; i < MAX_SHARED; i++)
        if (shared[i].p && shared[i].p == (uintptr_t)p) {
            struct ipc_handle ih = { IPC_MAGIC, (int32_t)getpid(), shared[i].fd, 0, shared[i].n };
            memset(h, 0, sizeof *h);
            memcpy(h, &ih, sizeof ih);
            pthread_mutex_unlock(&shared_lock);
            return OK;
        }
    pthread_mutex_unlock(&shared_lock);
    return INVALID_VALUE; // not cuMemAlloc's memory (a pool's, or no allocation)
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags) {
    (void)flags;
    if (sticky) return sticky;
    if (getenv("FAKE_CUDA_NO_PEER")) return PEER_ACCESS_UNSUPPORTED;
    struct ipc_handle ih;
    memcpy(&ih, &h, sizeof ih);
    if (ih.magic != IPC_MAGIC) return INVALID_VALUE;
    if (ih.pid == (int32_t)getpid()) return INVALID_CONTEXT;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", ih.pid, ih.fd);
    int fd = open(path, O_RDWR);
    if (fd < 0) return INVALID_VALUE;
    void *m = mmap(0, ih.n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return INVALID_VALUE;
    pthread_mutex_lock(&shared_lock);
    int slot = -1;
    for (int i = 0; i < MAX_SHARED && slot < 0; i++) if (!opened[i].p) slot = i;
    if (slot < 0) { pthread_mutex_unlock(&shared_lock); munmap(m, ih.n); return OUT_OF_MEMORY; }
    opened[slot].p = (uintptr_t)m; opened[slot].n = ih.n;
    pthread_mutex_unlock(&shared_lock);
    *p = (CUdeviceptr)(uintptr_t)m;
    return OK;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    pthread_mutex_lock(&shared_lock);
    for (int i = 0; i < MAX_SHARED; i++)
        if (opened[i].p && opened[i].p == (uintptr_t)p) {
            munmap((void *)opened[i].p, opened[i].n); opened[i].p = 0;
            pthread_mutex_unlock(&shared_lock);
            return OK;
        }
    pthread_mutex_unlock(&shared_lock);
    return INVALID_VALUE;
}
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; if (sticky) return sticky; memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return OK; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) { (void)s; if (sticky) return sticky; memset((void *)(uintptr_t)p, v, n); return OK; }
// Host registrations (cuMemHostRegister), refusing overlaps as the driver does. Copies between
// host and device must lie entirely inside one registration: the backend promises pinned DMA for
// the data region and attached guest memory, and a copy from pageable memory here means it broke
// that promise (the real driver would silently run it at pageable speed).
#define MAX_REG 256
static struct { uintptr_t p; size_t n; unsigned flags; } regs[MAX_REG];
// Inside one registration made with CU_MEMHOSTREGISTER_DEVICEMAP (2): what kernels can reach.
static int mapped_inside(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < MAX_REG; i++)
        if (regs[i].n && (regs[i].flags & 2) && a >= regs[i].p && a - regs[i].p <= regs[i].n && n <= regs[i].n - (a - regs[i].p)) return 1;
    return 0;
}
static int pinned_inside(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    if (n == 0) return 1;
    if (__atomic_load_n(&actors, __ATOMIC_ACQUIRE)) return 1; // nothing is page-locked beside one
    for (int i = 0; i < MAX_REG; i++)
        if (regs[i].n && a >= regs[i].p && a - regs[i].p <= regs[i].n && n <= regs[i].n - (a - regs[i].p)) return 1;
    return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; if (sticky) return sticky; if (!pinned_inside(s, n)) return INVALID_VALUE; memcpy((void *)(uintptr_t)d, s, n); return OK; }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)st; if (sticky) return sticky; if (!pinned_inside(d, n)) return INVALID_VALUE; memcpy(d, (void *)(uintptr_t)s, n); return OK; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; if (sticky) return sticky; memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return OK; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned f) {
    wait_for_actors();
    uintptr_t a = (uintptr_t)p;
    if (n == 0) return INVALID_VALUE;
    for (int i = 0; i < MAX_REG; i++)
        if (regs[i].n && a < regs[i].p + regs[i].n && regs[i].p < a + n) return 712; // already registered
    for (int i = 0; i < MAX_REG; i++)
        if (!regs[i].n) {
            // The driver pins the pages, faulting them in: touch each (a page past a file's end
            // would SIGBUS the worker, as it must never be asked to register one).
            for (size_t o = 0; o < n; o += 4096) (void)*(volatile const char *)(a + o);
            regs[i].p = a; regs[i].n = n; regs[i].flags = f; registered++;
            return OK;
        }
    return OUT_OF_MEMORY;
}
CUresult cuMemHostUnregister(void *p) {
    for (int i = 0; i < MAX_REG; i++)
        if (regs[i].n && regs[i].p == (uintptr_t)p) { regs[i].n = 0; registered--; return OK; }
    return 713; // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
}

static void jit_log(const char *what); // with the linker, below

CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, int *opts, void **vals) {
    wait_for_actors();
    const char *ptx = image;
    jit_log("jit");
    CUresult r = OK;
    const char *log = "";
    if (strstr(ptx, "bogus")) {
        r = INVALID_PTX;
        log = "ptxas application ptx input, line 7; error   : Not a name of any known instruction: 'bogus'";
    } else if (strstr(ptx, ".version 99")) {
        r = UNSUPPORTED_PTX;
    }
    for (unsigned i = 0; i + 1 < n; i++) {
        if (opts[i] == 5 && opts[i + 1] == 6) { // error log buffer, its size
            size_t cap = (size_t)(uintptr_t)vals[i + 1];
            if (cap) {
                snprintf(vals[i], cap, "%s", r ? log : "");
                vals[i + 1] = (void *)(uintptr_t)strlen(vals[i]);
            }
        }
    }
    if (r) return r;
    struct module *mod = malloc(sizeof *mod);
    mod->ptx = strdup(ptx);
    *m = mod;
    return OK;
}
// The linker (cuLinkCreate_v2 / cuLinkAddData_v2 / cuLinkComplete / cuLinkDestroy) "compiles" PTX
// to an image: a 64-byte ELF64 header, "FAKECUBIN\n", the PTX, a NUL. cuModuleLoadData loads such
// an image as the PTX it holds, without JIT, and refuses anything else (CUDA_ERROR_INVALID_IMAGE).
// PTX the JIT refuses (see above) is refused by cuLinkAddData_v2 alike, with the same log. With
// FAKE_CUDA_BAD_CUBIN set, cuLinkComplete makes an image cuModuleLoadData refuses. With
// FAKE_CUDA_JIT_LOG=<file>, each JIT (a PTX cuModuleLoadDataEx or cuLinkAddData_v2) appends
// "jit <pid>" to that file and each image loaded by cuModuleLoadData "image <pid>", so a test sees
// which worker process compiled and which loaded compiled code.
static void jit_log(const char *what) {
    const char *path = getenv("FAKE_CUDA_JIT_LOG");
    if (!path) return;
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", what, (int)getpid());
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)n) < 0) { /* a test then sees the line missing */ }
    close(fd);
}

static const char IMAGE_MARK[] = "FAKECUBIN\n";
enum { ELF_HEADER = 64, INVALID_IMAGE = 200 };
struct link { char *ptx; char *image; size_t image_len; char *log; size_t log_cap; void **log_size; };

CUresult cuLinkCreate_v2(unsigned n, int *opts, void **vals, void **state) {
    struct link *l = calloc(1, sizeof *l);
    for (unsigned i = 0; i + 1 < n; i++) {
        if (opts[i] == 5 && opts[i + 1] == 6) { // error log buffer, its size
            l->log = vals[i];
            l->log_cap = (size_t)(uintptr_t)vals[i + 1];
            l->log_size = &vals[i + 1];
        }
    }
    *state = l;
    return OK;
}
CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned n, int *opts,
                          void **vals) {
    (void)size; (void)name; (void)n; (void)opts; (void)vals;
    struct link *l = state;
    if (type != 1 || l->ptx) return INVALID_VALUE; // PTX, once
    const char *ptx = data;
    jit_log("jit");
    CUresult r = OK;
    if (strstr(ptx, "bogus")) {
        r = INVALID_PTX;
        if (l->log && l->log_cap) {
            snprintf(l->log, l->log_cap, "%s", "ptxas application ptx input, line 7; error   : Not a name of any known instruction: 'bogus'");
            *l->log_size = (void *)(uintptr_t)strlen(l->log);
        }
    } else if (strstr(ptx, ".version 99")) {
        r = UNSUPPORTED_PTX;
    }
    if (r) return r;
    l->ptx = strdup(ptx);
    return OK;
}
CUresult cuLinkComplete(void *state, void **out, size_t *size) {
    struct link *l = state;
    if (!l->ptx) return INVALID_VALUE;
    size_t mark = strlen(IMAGE_MARK), len = strlen(l->ptx);
    l->image_len = ELF_HEADER + mark + len + 1;
    l->image = calloc(1, l->image_len);
    memcpy(l->image, "\x7f" "ELF\x02\x01\x01", 7);
    memcpy(l->image + ELF_HEADER, getenv("FAKE_CUDA_BAD_CUBIN") ? "BADCUBIN!\n" : IMAGE_MARK, mark);
    memcpy(l->image + ELF_HEADER + mark, l->ptx, len);
    *out = l->image;
    *size = l->image_len;
    return OK;
}
CUresult cuLinkDestroy(void *state) {
    struct link *l = state;
    free(l->ptx);
    free(l->image);
    free(l);
    return OK;
}
CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    wait_for_actors();
    const char *img = image;
    if (memcmp(img, "\x7f" "ELF", 4) != 0 || memcmp(img + ELF_HEADER, IMAGE_MARK, strlen(IMAGE_MARK)) != 0)
        return INVALID_IMAGE;
    jit_log("image");
    struct module *mod = malloc(sizeof *mod);
    mod->ptx = strdup(img + ELF_HEADER + strlen(IMAGE_MARK));
    *m = mod;
    return OK;
}
CUresult cuModuleUnload(CUmodule m) { wait_for_actors(); struct module *mod = m; free(mod->ptx); free(mod); return OK; }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    struct module *mod = m;
    char entry[160];
    snprintf(entry, sizeof entry, ".entry %s(", name);
    if (!strstr(mod->ptx, entry)) return NOT_FOUND;
    struct function *fn = calloc(1, sizeof *fn);
    snprintf(fn->name, sizeof fn->name, "%s", name);
    *f = fn;
    return OK;
}
CUresult cuFuncGetAttribute(int *v, int a, CUfunction f) { (void)a; (void)f; *v = 1024; return OK; }
CUresult cuFuncSetAttribute(CUfunction f, int a, int v) { (void)f; (void)a; (void)v; return OK; }

// The argument block an `extra` array names; INVALID_VALUE for a marker the fake does not know.
static CUresult parse_extra(void **extra, unsigned char **args, size_t *size) {
    *args = 0;
    *size = 0;
    for (int i = 0; extra && extra[i] != 0; i += 2) {
        if (extra[i] == (void *)1) *args = extra[i + 1];
        else if (extra[i] == (void *)2) *size = *(size_t *)extra[i + 1];
        else return INVALID_VALUE;
    }
    return OK;
}

static CUresult check_dims(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
    return ((unsigned long long)bx * by * bz > 1024 || !gx || !gy || !gz) ? INVALID_VALUE : OK;
}

// A persistent kernel (see the top): runs until its control block asks it to end.
struct actor { struct stream *s; volatile unsigned *control; int faults; };
static void *actor_main(void *p) {
    struct actor *a = p;
    for (int i = 0; i < 300000 && !__atomic_load_n(&a->control[1], __ATOMIC_ACQUIRE); i++) {
        struct timespec t = { 0, 100000 };
        nanosleep(&t, 0);
    }
    if (a->faults) __atomic_store_n(&sticky, ILLEGAL_ADDRESS, __ATOMIC_SEQ_CST);
    else __atomic_store_n(&a->control[2], 1, __ATOMIC_RELEASE); // has_terminated, as a kernel may
    __atomic_add_fetch(&a->s->finished, 1, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&actors, 1, __ATOMIC_RELEASE);
    free(a);
    return 0;
}
static void start_actor(struct stream *s, const unsigned char *args, int faults) {
    uint64_t control;
    memcpy(&control, args, 8);
    if (!mapped_inside((void *)(uintptr_t)control, 256)) { sticky = ILLEGAL_ADDRESS; return; }
    struct actor *a = calloc(1, sizeof *a);
    a->s = s; a->control = (volatile unsigned *)(uintptr_t)control; a->faults = faults;
    __atomic_add_fetch(&s->started, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&actors, 1, __ATOMIC_RELEASE);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_create(&t, &attr, actor_main, a);
    pthread_attr_destroy(&attr);
}

// FAKE_CUDA_FAULT_AFTER_MS (see the top): the kernel runs `ms`, then faults.
static void *fault_main(void *p) {
    long long ms = (long long)(intptr_t)p;
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&t, 0);
    __atomic_store_n(&sticky, ILLEGAL_ADDRESS, __ATOMIC_SEQ_CST);
    __atomic_store_n(&landed, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&spinning, 0, __ATOMIC_SEQ_CST);
    return 0;
}
static void fault_later(long long ms) {
    __atomic_store_n(&spinning, 1, __ATOMIC_SEQ_CST);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_create(&t, &attr, fault_main, (void *)(intptr_t)ms);
    pthread_attr_destroy(&attr);
}

static CUresult run_kernel(struct function *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           const unsigned char *args, size_t size, struct stream *s) {
    if (sticky) return sticky;
    if (check_dims(gx, gy, gz, bx, by, bz)) return INVALID_VALUE;
    if (!strcmp(fn->name, "iota")) {
        if (size != 12 || !args) return INVALID_VALUE;
        uint64_t out; uint32_t n;
        memcpy(&out, args, 8); memcpy(&n, args + 8, 4);
        unsigned long long threads = (unsigned long long)gx * gy * gz * bx * by * bz;
        for (uint32_t i = 0; i < n && i < threads; i++) ((uint32_t *)(uintptr_t)out)[i] = i + 1;
    } else if (!strcmp(fn->name, "write_out_of_bounds")) {
        if (size != 16) return INVALID_VALUE;
        if (getenv("FAKE_CUDA_FAULT_AFTER_MS")) fault_later(atoll(getenv("FAKE_CUDA_FAULT_AFTER_MS")));
        else sticky = ILLEGAL_ADDRESS;
    } else if (!strcmp(fn->name, "spin_forever")) {
        if (size != 8) return INVALID_VALUE;
        spinning = 1;
    } else if (!strcmp(fn->name, "actor") || !strcmp(fn->name, "actor_faults")) {
        if (size != 8 || !s) return INVALID_VALUE;
        start_actor(s, args, fn->name[5] == '_');
    } else if (!strcmp(fn->name, "echo")) {
        if (size != 28) return INVALID_VALUE;
        uint64_t out, b; uint32_t a, c;
        memcpy(&out, args, 8); memcpy(&a, args + 8, 4); memcpy(&b, args + 16, 8); memcpy(&c, args + 24, 4);
        uint32_t *o = (uint32_t *)(uintptr_t)out;
        o[0] = a; o[1] = (uint32_t)b; o[2] = (uint32_t)(b >> 32); o[3] = c;
    }
    launches++;
    write_counts();
    return OK;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void **params, void **extra) {
    (void)smem; (void)params;
    unsigned char *args;
    size_t size;
    if (parse_extra(extra, &args, &size)) return INVALID_VALUE;
    const char *name = ((struct function *)f)->name;
    if (!strcmp(name, "actor") || !strcmp(name, "actor_faults")) return INVALID_VALUE; // grid-wide sync
    return run_kernel(f, gx, gy, gz, bx, by, bz, args, size, s);
}

// The sizes of a kernel's parameters (see the top), 0-terminated; null for a kernel the fake
// does not know.
static const unsigned *param_sizes(const char *name) {
    static const unsigned iota[] = { 8, 4, 0 }, two_u64[] = { 8, 8, 0 }, one_u64[] = { 8, 0 }, none[] = { 0 },
                          echo[] = { 8, 4, 8, 4, 0 };
    if (!strcmp(name, "iota")) return iota;
    if (!strcmp(name, "write_out_of_bounds")) return two_u64;
    if (!strcmp(name, "spin_forever") || !strcmp(name, "actor") || !strcmp(name, "actor_faults")) return one_u64;
    if (!strcmp(name, "empty")) return none;
    if (!strcmp(name, "echo")) return echo;
    return 0;
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned smem, CUstream s, void **params) {
    (void)smem;
    if (getenv("FAKE_CUDA_NO_COOPERATIVE")) return 801; // CUDA_ERROR_NOT_SUPPORTED
    const unsigned *sizes = param_sizes(((struct function *)f)->name);
    if (!sizes) return INVALID_VALUE;
    unsigned char block[256];
    size_t end = 0;
    for (int i = 0; sizes[i]; i++) {
        size_t at = (end + sizes[i] - 1) / sizes[i] * sizes[i];
        // Each parameter where the packed block has it, counted from the first.
        if (!params || !params[i] || (unsigned char *)params[i] != (unsigned char *)params[0] + at) return INVALID_VALUE;
        memcpy(block + at, params[i], sizes[i]);
        end = at + sizes[i];
    }
    return run_kernel(f, gx, gy, gz, bx, by, bz, end ? block : 0, end, s);
}

// CUDA_KERNEL_NODE_PARAMS_v2
typedef struct {
    CUfunction func;
    unsigned grid[3], block[3], smem;
    void **kernelParams, **extra;
    void *kern;
    CUcontext ctx;
} KernelNodeParams;

struct knode { struct function *fn; unsigned grid[3], block[3]; unsigned char args[256]; size_t size; };
enum { MAX_NODES = 64 };
struct graph { int n; struct knode *nodes[MAX_NODES]; };
struct gexec { int n; struct knode *src[MAX_NODES]; struct knode nodes[MAX_NODES]; };
typedef void *CUgraph, *CUgraphExec, *CUgraphNode;

static CUresult set_node(struct knode *k, const KernelNodeParams *p) {
    unsigned char *args;
    size_t size;
    if (!p->func || p->kernelParams || parse_extra(p->extra, &args, &size) || size > sizeof k->args) return INVALID_VALUE;
    if (check_dims(p->grid[0], p->grid[1], p->grid[2], p->block[0], p->block[1], p->block[2])) return INVALID_VALUE;
    k->fn = p->func;
    memcpy(k->grid, p->grid, sizeof k->grid);
    memcpy(k->block, p->block, sizeof k->block);
    if (size) memcpy(k->args, args, size);
    k->size = size;
    return OK;
}

CUresult cuGraphCreate(CUgraph *g, unsigned flags) { (void)flags; *g = calloc(1, sizeof(struct graph)); return OK; }
CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps, const KernelNodeParams *p) {
    struct graph *g = graph;
    // Only chains: each node after the one before.
    if (g->n == MAX_NODES || ndeps != (g->n ? 1u : 0u) || (ndeps && deps[0] != g->nodes[g->n - 1])) return INVALID_VALUE;
    struct knode *k = calloc(1, sizeof *k);
    CUresult r = set_node(k, p);
    if (r) { free(k); return r; }
    g->nodes[g->n++] = k;
    *node = k;
    return OK;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph graph, unsigned long long flags) {
    (void)flags;
    struct graph *g = graph;
    struct gexec *x = calloc(1, sizeof *x);
    x->n = g->n;
    for (int i = 0; i < g->n; i++) { x->src[i] = g->nodes[i]; x->nodes[i] = *g->nodes[i]; }
    *e = x;
    return OK;
}
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode node, const KernelNodeParams *p) {
    struct gexec *x = e;
    for (int i = 0; i < x->n; i++) {
        if (x->src[i] != node) continue;
        CUresult r = set_node(&x->nodes[i], p);
        if (!r) { node_updates++; write_counts(); }
        return r;
    }
    return INVALID_VALUE;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
    (void)s;
    struct gexec *x = e;
    if (sticky) return sticky;
    graph_launches++;
    for (int i = 0; i < x->n; i++) {
        struct knode *k = &x->nodes[i];
        // A kernel that refuses its arguments here would have been refused by the real driver at
        // the node's update; the fake checks them at run time only.
        run_kernel(k->fn, k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2], k->size ? k->args : 0, k->size, s);
    }
    write_counts();
    return OK;
}
CUresult cuGraphExecDestroy(CUgraphExec e) { free(e); return OK; }
CUresult cuGraphDestroy(CUgraph graph) {
    struct graph *g = graph;
    for (int i = 0; i < g->n; i++) free(g->nodes[i]);
    free(g);
    return OK;
}

// FAKE_CUDA_EVENT_LAG_US, in ms (read once).
static double event_lag_ms(void) {
    static double lag = -1;
    if (lag < 0) {
        const char *v = getenv("FAKE_CUDA_EVENT_LAG_US");
        lag = v ? atof(v) / 1000.0 : 0;
    }
    return lag;
}
static int reached(const struct event *e) {
    if (e->gate && (int)(__atomic_load_n(&e->gate->finished, __ATOMIC_ACQUIRE) - e->target) < 0) return 0;
    return !e->never && now_ms() >= e->ms + event_lag_ms();
}
CUresult cuEventCreate(CUevent *e, unsigned flags) {
    struct event *x = calloc(1, sizeof(struct event));
    x->untimed = (flags & 2) != 0;
    *e = x;
    return OK;
}
CUresult cuEventRecord(CUevent e, CUstream s) {
    if (__atomic_load_n(&landed, __ATOMIC_ACQUIRE)) return sticky;
    struct stream *st = s;
    ((struct event *)e)->never = spinning;
    ((struct event *)e)->ms = now_ms();
    ((struct event *)e)->gate = st && st->started != st->finished ? st : 0;
    ((struct event *)e)->target = st ? st->started : 0;
    if (st) st->last_event_ms = ((struct event *)e)->ms;
    records++;
    if (!((struct event *)e)->untimed) {
        timed++;
        if (s == first_stream) timed_first++;
    }
    write_counts();
    return OK;
}
// The time between two records: the kernels launched between them ran in between. As the driver
// does, an event without timing is CUDA_ERROR_INVALID_HANDLE.
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    if (sticky) return sticky;
    struct event *x = a, *y = b;
    if (x->untimed || y->untimed) return 400;
    if (!reached(x) || !reached(y)) return NOT_READY;
    *ms = (float)(y->ms - x->ms);
    return OK;
}
CUresult cuEventQuery(CUevent e) { if (sticky) return sticky; return reached(e) ? OK : NOT_READY; }
CUresult cuEventDestroy_v2(CUevent e) { free(e); return OK; }
static int actor_runs(CUstream s) {
    struct stream *st = s;
    return st && __atomic_load_n(&st->finished, __ATOMIC_ACQUIRE) != st->started;
}
CUresult cuStreamQuery(CUstream s) { if (sticky) return sticky; return spinning || actor_runs(s) ? NOT_READY : OK; }
CUresult cuStreamSynchronize(CUstream s) {
    if (s == first_stream) {
        work_syncs++;
        write_counts();
    }
    if (sticky) return sticky;
    while (__atomic_load_n(&spinning, __ATOMIC_ACQUIRE)) {}
    while (actor_runs(s)) { struct timespec t = { 0, 100000 }; nanosleep(&t, 0); }
    // Done means every event recorded on it reads done too (FAKE_CUDA_EVENT_LAG_US).
    struct stream *st = s;
    while (st && now_ms() < st->last_event_ms + event_lag_ms()) { struct timespec t = { 0, 100000 }; nanosleep(&t, 0); }
    return sticky ? sticky : OK;
}
CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    (void)flags;
    *s = calloc(1, sizeof(struct stream));
    if (!first_stream) first_stream = *s;
    return OK;
}
// Work runs at launch here, so a wait is already over (behind a never-ending kernel, the events
// recorded after it stay not-ready: cuEventRecord sees `spinning`).
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
    (void)s; (void)e; (void)flags;
    event_waits++;
    write_counts();
    return sticky ? sticky : OK;
}
CUresult cuStreamDestroy_v2(CUstream s) { free(s); return OK; }
// A stream memory write: behind a faulted or never-ending kernel it never lands.
CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, unsigned value, unsigned flags) {
    (void)s; (void)flags;
    if (sticky) return sticky;
    if (!pinned_inside((void *)(uintptr_t)addr, 4)) return INVALID_VALUE;
    if (!spinning) {
        signals++;
        write_counts();
        __atomic_store_n((unsigned *)(uintptr_t)addr, value, __ATOMIC_RELEASE);
    }
    const char *stall = getenv("FAKE_CUDA_SIGNAL_STALL_MS");
    if (stall) {
        struct timespec t = { atoll(stall) / 1000, (atoll(stall) % 1000) * 1000000L };
        nanosleep(&t, 0);
    }
    return OK;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
    if (flags != 0 || !mapped_inside(p, 1)) return INVALID_VALUE;
    *d = (CUdeviceptr)(uintptr_t)p;
    return OK;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int threads, size_t smem) {
    (void)f;
    if (threads <= 0) return INVALID_VALUE;
    int blocks = threads > 1024 ? 0 : 2048 / threads;
    if (blocks > 32) blocks = 32;
    if (smem && (size_t)blocks > 233472 / smem) blocks = (int)(233472 / smem);
    *n = blocks;
    return OK;
}
