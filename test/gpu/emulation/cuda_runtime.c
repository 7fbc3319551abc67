/*
 * cuda_runtime.c — the emulated CUDA runtime (see emulation.h): device memory the host cannot
 * touch, streams that run their work later on threads of their own, devices, pointer
 * attributes and errors. Compiled against the real cuda_runtime.h, so every signature and return
 * code is CUDA's.
 */
#include "emulation.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ----- faults ------------------------------------------------------------------------------- */

long emulation_fault_setting(const char *name)
{
    const char *rank = getenv("GPU_EMU_FAULT_RANK");
    const char *mine = getenv("OMPI_COMM_WORLD_RANK"); /* Open MPI's launcher, else Hydra's */
    if (mine == NULL)
        mine = getenv("PMI_RANK");
    if (rank != NULL && mine != NULL && atoi(rank) != atoi(mine))
        return 0;
    const char *value = getenv(name);
    return value != NULL ? atol(value) : 0;
}

/* ----- errors and devices -------------------------------------------------------------------- */

static _Thread_local cudaError_t last_error = cudaSuccess;
static _Thread_local int current_device = 0;

static cudaError_t fail(cudaError_t code)
{
    if (code != cudaSuccess)
        last_error = code;
    return code;
}

static int device_count(void)
{
    const char *value = getenv("GPU_EMU_DEVICES");
    return value != NULL ? atoi(value) : 8;
}

/* The emulation stands in for both the runtime and the driver of the headers it was built with. */
cudaError_t cudaRuntimeGetVersion(int *version)
{
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version)
{
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = device_count();
    return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= device_count())
        return fail(device_count() == 0 ? cudaErrorNoDevice : cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t code = last_error;
    last_error = cudaSuccess;
    return code;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

const char *cudaGetErrorName(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (emulated)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (emulated)";
    case cudaErrorNotReady: return "device not ready (emulated)";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered (emulated)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (emulated)";
    default: return "unknown error (emulated)";
    }
}

/* ----- device memory -------------------------------------------------------------------------- */

struct allocation {
    unsigned char *device; /* PROT_NONE: what the caller gets */
    unsigned char *host;   /* read-write: what the emulation copies through */
    size_t bytes;          /* as asked for */
    size_t mapped;         /* rounded up to pages */
    int device_index;
};

static pthread_mutex_t allocations_lock = PTHREAD_MUTEX_INITIALIZER;
static struct allocation *allocations;
static size_t allocation_count, allocation_capacity;
static long malloc_calls;

/* The allocation holding `pointer`, or NULL; with the lock held. */
static struct allocation *find_allocation(const void *pointer)
{
    const unsigned char *p = pointer;
    for (size_t i = 0; i < allocation_count; i++)
        if (p >= allocations[i].device && p < allocations[i].device + allocations[i].mapped)
            return &allocations[i];
    return NULL;
}

bool emulation_is_device(const void *pointer)
{
    pthread_mutex_lock(&allocations_lock);
    bool device = find_allocation(pointer) != NULL;
    pthread_mutex_unlock(&allocations_lock);
    return device;
}

unsigned char *emulation_host_view(const void *pointer, size_t bytes)
{
    pthread_mutex_lock(&allocations_lock);
    struct allocation *allocation = find_allocation(pointer);
    unsigned char *view = (unsigned char *)pointer;
    if (allocation != NULL) {
        size_t offset = (size_t)((const unsigned char *)pointer - allocation->device);
        view = offset + bytes <= allocation->bytes ? allocation->host + offset : NULL;
    }
    pthread_mutex_unlock(&allocations_lock);
    return view;
}

cudaError_t cudaMalloc(void **pointer, size_t bytes)
{
    long fail_at = emulation_fault_setting("GPU_EMU_MALLOC_FAIL_AT");
    pthread_mutex_lock(&allocations_lock);
    long call = ++malloc_calls;
    pthread_mutex_unlock(&allocations_lock);
    *pointer = NULL;
    if (fail_at > 0 && call == fail_at)
        return fail(cudaErrorMemoryAllocation);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t mapped = (bytes + page - 1) / page * page;
    if (mapped == 0)
        mapped = page;
    int fd = memfd_create("chorus-emulated-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)mapped) != 0) {
        if (fd >= 0)
            close(fd);
        return fail(cudaErrorMemoryAllocation);
    }
    unsigned char *device = mmap(NULL, mapped, PROT_NONE, MAP_SHARED, fd, 0);
    unsigned char *host = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (device == MAP_FAILED || host == MAP_FAILED) {
        if (device != MAP_FAILED)
            munmap(device, mapped);
        if (host != MAP_FAILED)
            munmap(host, mapped);
        return fail(cudaErrorMemoryAllocation);
    }
    /* Fresh device memory is not zero on a GPU: garbage shows reads of what was never
     * written. */
    memset(host, 0xa5, mapped);
    pthread_mutex_lock(&allocations_lock);
    if (allocation_count == allocation_capacity) {
        size_t capacity = allocation_capacity ? 2 * allocation_capacity : 64;
        struct allocation *grown = realloc(allocations, capacity * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&allocations_lock);
            munmap(device, mapped);
            munmap(host, mapped);
            return fail(cudaErrorMemoryAllocation);
        }
        allocations = grown;
        allocation_capacity = capacity;
    }
    allocations[allocation_count++] =
        (struct allocation){device, host, bytes, mapped, current_device};
    pthread_mutex_unlock(&allocations_lock);
    *pointer = device;
    return cudaSuccess;
}

static cudaError_t synchronize_all_streams(void);

static cudaError_t release_allocation(void *pointer);

cudaError_t cudaFree(void *pointer)
{
    if (pointer == NULL)
        return cudaSuccess;
    /* As on a GPU, freeing waits for the work that may still use the memory. */
    synchronize_all_streams();
    return release_allocation(pointer);
}

/* ----- stream-ordered memory: one pool's memory is any allocation here, unmapped in stream
 * order, so that work that still uses it on another stream, unordered, faults. ---------------- */

struct CUmemPoolHandle_st {
    int device;
};

cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *properties)
{
    *pool = calloc(1, sizeof **pool);
    if (*pool == NULL)
        return fail(cudaErrorMemoryAllocation);
    (*pool)->device = properties->location.id;
    return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attribute,
                                    void *value)
{
    (void)attribute, (void)value;
    return pool != NULL ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool)
{
    free(pool); /* its allocations stay valid until freed, as CUDA allows */
    return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void **pointer, size_t bytes, cudaMemPool_t pool,
                                    cudaStream_t stream)
{
    (void)stream; /* mapped at once: earlier than on a GPU, never later */
    return pool != NULL ? cudaMalloc(pointer, bytes) : fail(cudaErrorInvalidValue);
}

static void run_release(void *pointer)
{
    release_allocation(pointer);
}

cudaError_t cudaFreeAsync(void *pointer, cudaStream_t stream)
{
    if (pointer == NULL)
        return cudaSuccess;
    emulation_enqueue(stream, run_release, pointer);
    return cudaSuccess;
}

static cudaError_t release_allocation(void *pointer)
{
    pthread_mutex_lock(&allocations_lock);
    struct allocation *allocation = find_allocation(pointer);
    if (allocation == NULL || allocation->device != pointer) {
        pthread_mutex_unlock(&allocations_lock);
        return fail(cudaErrorInvalidValue);
    }
    struct allocation freed = *allocation;
    *allocation = allocations[--allocation_count];
    pthread_mutex_unlock(&allocations_lock);
    munmap(freed.device, freed.mapped);
    munmap(freed.host, freed.mapped);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                     const void *pointer)
{
    memset(attributes, 0, sizeof *attributes);
    pthread_mutex_lock(&allocations_lock);
    struct allocation *allocation = find_allocation(pointer);
    if (allocation != NULL) {
        attributes->type = cudaMemoryTypeDevice;
        attributes->device = allocation->device_index;
        attributes->devicePointer = (void *)pointer;
    } else {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        attributes->hostPointer = (void *)pointer;
    }
    pthread_mutex_unlock(&allocations_lock);
    return cudaSuccess;
}

/* ----- streams ------------------------------------------------------------------------------- */

struct CUstream_st {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    struct emulation_operation *head, *tail;
    bool stopping;
    long delay_us; /* GPU_EMU_STREAM_DELAY_US when the stream was made */
    bool blocking; /* made without cudaStreamNonBlocking: in step with the legacy stream */
    bool legacy;   /* the legacy default stream itself */
    pthread_t thread;
    struct CUstream_st *next_stream; /* in the list of live streams */
};

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *streams;

static void *stream_main(void *argument)
{
    struct CUstream_st *stream = argument;
    long delay_us = stream->delay_us;
    pthread_mutex_lock(&stream->lock);
    for (;;) {
        while (stream->head == NULL && !stream->stopping)
            pthread_cond_wait(&stream->changed, &stream->lock);
        if (stream->head == NULL)
            break;
        struct emulation_operation *operation = stream->head;
        pthread_mutex_unlock(&stream->lock);
        if (delay_us > 0)
            nanosleep(&(struct timespec){.tv_sec = delay_us / 1000000,
                                         .tv_nsec = delay_us % 1000000 * 1000},
                      NULL);
        operation->run(operation->context);
        pthread_mutex_lock(&stream->lock);
        stream->head = operation->next;
        if (stream->head == NULL)
            stream->tail = NULL;
        free(operation);
        pthread_cond_broadcast(&stream->changed);
    }
    pthread_mutex_unlock(&stream->lock);
    return NULL;
}

static bool is_default_stream(cudaStream_t stream)
{
    return stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

/* The legacy default stream (also standing in for the per-thread one): a stream like any
 * other here, made at its first use, so that work a program leaves on it (a copy from pageable
 * memory, a kernel) runs late too. As on a GPU, work on it waits for the work enqueued before on
 * every blocking stream, and work on a blocking stream for the work enqueued before on it;
 * non-blocking streams (chorus's) wait for neither. */
static struct CUstream_st *legacy_stream;
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;

static void make_legacy_stream(void)
{
    if (cudaStreamCreateWithFlags(&legacy_stream, cudaStreamDefault) != cudaSuccess)
        legacy_stream = NULL;
    else
        legacy_stream->legacy = true, legacy_stream->blocking = false;
}

static struct CUstream_st *resolve_stream(cudaStream_t stream)
{
    if (!is_default_stream(stream))
        return stream;
    pthread_once(&legacy_once, make_legacy_stream);
    return legacy_stream;
}

static void enqueue_in_order(struct CUstream_st *stream, void (*run)(void *context),
                             void *context)
{
    struct emulation_operation *operation = calloc(1, sizeof *operation);
    if (operation == NULL) {
        run(context); /* out of memory: at least in order */
        return;
    }
    operation->run = run;
    operation->context = context;
    pthread_mutex_lock(&stream->lock);
    if (stream->tail != NULL)
        stream->tail->next = operation;
    else
        stream->head = operation;
    stream->tail = operation;
    pthread_cond_broadcast(&stream->changed);
    pthread_mutex_unlock(&stream->lock);
}

static void order_after(struct CUstream_st *waiter, struct CUstream_st *waited);

void emulation_enqueue(struct CUstream_st *stream, void (*run)(void *context), void *context)
{
    stream = resolve_stream(stream);
    if (stream == NULL) { /* the legacy stream could not be made: at least in order */
        run(context);
        return;
    }
    if (stream->legacy) {
        pthread_mutex_lock(&streams_lock);
        for (struct CUstream_st *other = streams; other != NULL; other = other->next_stream)
            if (other->blocking)
                order_after(stream, other);
        pthread_mutex_unlock(&streams_lock);
    } else if (stream->blocking && legacy_stream != NULL) {
        order_after(stream, legacy_stream);
    }
    enqueue_in_order(stream, run, context);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *created, unsigned int flags)
{
    struct CUstream_st *stream = calloc(1, sizeof *stream);
    if (stream == NULL)
        return fail(cudaErrorMemoryAllocation);
    pthread_mutex_init(&stream->lock, NULL);
    pthread_cond_init(&stream->changed, NULL);
    stream->delay_us = emulation_fault_setting("GPU_EMU_STREAM_DELAY_US");
    stream->blocking = (flags & cudaStreamNonBlocking) == 0;
    if (pthread_create(&stream->thread, NULL, stream_main, stream) != 0) {
        free(stream);
        return fail(cudaErrorMemoryAllocation);
    }
    pthread_mutex_lock(&streams_lock);
    stream->next_stream = streams;
    streams = stream;
    pthread_mutex_unlock(&streams_lock);
    *created = stream;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *created)
{
    return cudaStreamCreateWithFlags(created, 0);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    stream = resolve_stream(stream);
    if (stream == NULL)
        return cudaSuccess;
    pthread_mutex_lock(&stream->lock);
    bool idle = stream->head == NULL;
    pthread_mutex_unlock(&stream->lock);
    return idle ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    stream = resolve_stream(stream);
    if (stream == NULL)
        return cudaSuccess;
    pthread_mutex_lock(&stream->lock);
    while (stream->head != NULL)
        pthread_cond_wait(&stream->changed, &stream->lock);
    pthread_mutex_unlock(&stream->lock);
    return cudaSuccess;
}

static cudaError_t synchronize_all_streams(void)
{
    pthread_mutex_lock(&streams_lock);
    for (struct CUstream_st *stream = streams; stream != NULL; stream = stream->next_stream)
        cudaStreamSynchronize(stream);
    pthread_mutex_unlock(&streams_lock);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    return synchronize_all_streams();
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    if (is_default_stream(stream))
        return fail(cudaErrorInvalidResourceHandle);
    /* The work already enqueued still runs, as on a GPU, and a cudaFree meanwhile must wait for
     * it: the stream leaves the list only once it is idle. */
    cudaStreamSynchronize(stream);
    pthread_mutex_lock(&streams_lock);
    struct CUstream_st **link = &streams;
    while (*link != NULL && *link != stream)
        link = &(*link)->next_stream;
    bool known = *link != NULL;
    if (known)
        *link = stream->next_stream;
    pthread_mutex_unlock(&streams_lock);
    if (!known)
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&stream->lock);
    stream->stopping = true;
    pthread_cond_broadcast(&stream->changed);
    pthread_mutex_unlock(&stream->lock);
    pthread_join(stream->thread, NULL);
    pthread_mutex_destroy(&stream->lock);
    pthread_cond_destroy(&stream->changed);
    free(stream);
    return cudaSuccess;
}

/* ----- events ------------------------------------------------------------------------------- */

/* An event counts its records and how far its stream has got: it has passed once the last
 * record's marker has run. Markers and waits on streams hold references, so that a program may
 * destroy an event while they are pending, as CUDA allows. */
struct CUevent_st {
    pthread_mutex_t lock;
    pthread_cond_t passed;
    uint64_t recorded, reached;
    int references;
};

struct event_step {
    struct CUevent_st *event;
    uint64_t target;
};

static void event_release(struct CUevent_st *event)
{
    pthread_mutex_lock(&event->lock);
    bool last = --event->references == 0;
    pthread_mutex_unlock(&event->lock);
    if (!last)
        return;
    pthread_mutex_destroy(&event->lock);
    pthread_cond_destroy(&event->passed);
    free(event);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *created, unsigned int flags)
{
    (void)flags; /* no timing either way */
    struct CUevent_st *event = calloc(1, sizeof *event);
    if (event == NULL)
        return fail(cudaErrorMemoryAllocation);
    pthread_mutex_init(&event->lock, NULL);
    pthread_cond_init(&event->passed, NULL);
    event->references = 1;
    *created = event;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *created)
{
    return cudaEventCreateWithFlags(created, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    if (event == NULL)
        return fail(cudaErrorInvalidResourceHandle);
    event_release(event);
    return cudaSuccess;
}

/* An enqueued step of an event: `target` records; NULL when out of memory. */
static struct event_step *event_step(struct CUevent_st *event, bool record)
{
    struct event_step *step = malloc(sizeof *step);
    if (step == NULL)
        return NULL;
    pthread_mutex_lock(&event->lock);
    if (record)
        event->recorded++;
    step->event = event;
    step->target = event->recorded;
    event->references++;
    pthread_mutex_unlock(&event->lock);
    return step;
}

static void run_marker(void *context)
{
    struct event_step *step = context;
    pthread_mutex_lock(&step->event->lock);
    if (step->event->reached < step->target)
        step->event->reached = step->target;
    pthread_cond_broadcast(&step->event->passed);
    pthread_mutex_unlock(&step->event->lock);
    event_release(step->event);
    free(step);
}

static void run_event_wait(void *context)
{
    struct event_step *step = context;
    pthread_mutex_lock(&step->event->lock);
    while (step->event->reached < step->target)
        pthread_cond_wait(&step->event->passed, &step->event->lock);
    pthread_mutex_unlock(&step->event->lock);
    event_release(step->event);
    free(step);
}

/* `waiter` runs nothing more until the work enqueued so far on `waited` has run (nothing to do
 * where `waited` is idle). */
static void order_after(struct CUstream_st *waiter, struct CUstream_st *waited)
{
    pthread_mutex_lock(&waited->lock);
    bool idle = waited->head == NULL;
    pthread_mutex_unlock(&waited->lock);
    struct CUevent_st *event = NULL;
    if (idle || cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess)
        return;
    struct event_step *mark = event_step(event, true), *wait = event_step(event, false);
    if (mark != NULL && wait != NULL) {
        enqueue_in_order(waited, run_marker, mark);
        enqueue_in_order(waiter, run_event_wait, wait);
    } else { /* out of memory: unordered rather than stuck */
        if (mark != NULL)
            event_release(event), free(mark);
        if (wait != NULL)
            event_release(event), free(wait);
    }
    event_release(event);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    if (event == NULL)
        return fail(cudaErrorInvalidResourceHandle);
    struct event_step *step = event_step(event, true);
    if (step == NULL)
        return fail(cudaErrorMemoryAllocation);
    emulation_enqueue(stream, run_marker, step);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    if (event == NULL)
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&event->lock);
    bool passed = event->reached >= event->recorded;
    pthread_mutex_unlock(&event->lock);
    return passed ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    if (event == NULL)
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&event->lock);
    uint64_t target = event->recorded;
    while (event->reached < target)
        pthread_cond_wait(&event->passed, &event->lock);
    pthread_mutex_unlock(&event->lock);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    (void)flags;
    if (event == NULL)
        return fail(cudaErrorInvalidResourceHandle);
    struct event_step *step = event_step(event, false);
    if (step == NULL)
        return fail(cudaErrorMemoryAllocation);
    emulation_enqueue(stream, run_event_wait, step);
    return cudaSuccess;
}

/* ----- copies ---------------------------------------------------------------------------------- */

struct copy {
    unsigned char *to;
    const unsigned char *from;
    size_t bytes;
};

static void run_copy(void *context)
{
    struct copy *copy = context;
    memmove(copy->to, copy->from, copy->bytes);
    free(copy);
}

/* Checks both ends before anything is enqueued, as cudaMemcpyAsync checks its arguments. */
static cudaError_t prepare_copy(void *to, const void *from, size_t bytes, struct copy **copy)
{
    unsigned char *to_view = emulation_host_view(to, bytes);
    unsigned char *from_view = emulation_host_view(from, bytes);
    if (bytes == 0)
        return cudaSuccess;
    if (to_view == NULL || from_view == NULL || to == NULL || from == NULL)
        return fail(cudaErrorInvalidValue);
    *copy = malloc(sizeof **copy);
    if (*copy == NULL)
        return fail(cudaErrorMemoryAllocation);
    **copy = (struct copy){to_view, from_view, bytes};
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *to, const void *from, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)kind; /* the direction follows from the pointers, as with cudaMemcpyDefault */
    struct copy *copy = NULL;
    cudaError_t code = prepare_copy(to, from, bytes, &copy);
    if (code == cudaSuccess && copy != NULL)
        emulation_enqueue(stream, run_copy, copy);
    return code;
}

/* `height` rows of `width` bytes, `from_pitch` apart in the source and `to_pitch` apart in the
 * destination; pitches narrower than a row are refused, as CUDA refuses them. */
struct copy_2d {
    unsigned char *to;
    const unsigned char *from;
    size_t to_pitch, from_pitch, width, height;
};

static void run_copy_2d(void *context)
{
    struct copy_2d *copy = context;
    for (size_t row = 0; row < copy->height; row++)
        memmove(copy->to + row * copy->to_pitch, copy->from + row * copy->from_pitch,
                copy->width);
    free(copy);
}

cudaError_t cudaMemcpy2DAsync(void *to, size_t to_pitch, const void *from, size_t from_pitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream)
{
    (void)kind;
    if (width == 0 || height == 0)
        return cudaSuccess;
    if (to_pitch < width || from_pitch < width)
        return fail(cudaErrorInvalidPitchValue);
    unsigned char *to_view = emulation_host_view(to, (height - 1) * to_pitch + width);
    unsigned char *from_view = emulation_host_view(from, (height - 1) * from_pitch + width);
    if (to_view == NULL || from_view == NULL || to == NULL || from == NULL)
        return fail(cudaErrorInvalidValue);
    struct copy_2d *copy = malloc(sizeof *copy);
    if (copy == NULL)
        return fail(cudaErrorMemoryAllocation);
    *copy = (struct copy_2d){to_view, from_view, to_pitch, from_pitch, width, height};
    emulation_enqueue(stream, run_copy_2d, copy);
    return cudaSuccess;
}

/* A copy from host memory whose source was taken at the call (staged), as CUDA stages pageable
 * memory. */
struct staged_copy {
    unsigned char *to;
    size_t bytes;
    unsigned char from[];
};

static void run_staged_copy(void *context)
{
    struct staged_copy *copy = context;
    memcpy(copy->to, copy->from, copy->bytes);
    free(copy);
}

/* On the legacy stream, after its earlier work. As on a GPU, a copy from host memory to the
 * device returns once the source is staged, possibly before the data lands on the device (a
 * later copy or kernel on the legacy stream sees it; another stream must wait for it); other
 * copies return once done. */
cudaError_t cudaMemcpy(void *to, const void *from, size_t bytes, enum cudaMemcpyKind kind)
{
    if (bytes > 0 && emulation_is_device(to) && !emulation_is_device(from)) {
        unsigned char *to_view = emulation_host_view(to, bytes);
        if (to_view == NULL || from == NULL)
            return fail(cudaErrorInvalidValue);
        struct staged_copy *copy = malloc(sizeof *copy + bytes);
        if (copy == NULL)
            return fail(cudaErrorMemoryAllocation);
        copy->to = to_view;
        copy->bytes = bytes;
        memcpy(copy->from, from, bytes);
        emulation_enqueue(NULL, run_staged_copy, copy);
        return cudaSuccess;
    }
    cudaError_t code = cudaMemcpyAsync(to, from, bytes, kind, NULL);
    return code == cudaSuccess ? cudaStreamSynchronize(NULL) : code;
}
