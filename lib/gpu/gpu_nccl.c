/*
 * gpu_nccl.c — the GPU interface over CUDA and NCCL: the context (gpu_nccl.h), waiting for
 * the device, and memory. The collectives are in gpu_nccl_reduce.c and gpu_nccl_exchange.c. One stream per context; every operation
 * is enqueued on it and the background thread waits for the stream, so a handle completes only
 * when the data is in place. Sums and averages use NCCL's pre-multiplied sum
 * (ncclRedOpCreatePreMulSum), which applies prescale, postscale and the division of an average
 * in one pass without a kernel of our own. A fused batch is packed into a fusion buffer on the
 * device with asynchronous copies on the same stream, so packing, the collective and unpacking
 * run back to back on the device with no host round trip between them.
 */
#include "gpu_nccl.h"

#include "../core/dtype.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static_assert(sizeof(ncclUniqueId) <= GPU_UNIQUE_ID_BYTES, "NCCL unique id must fit");

chorus_status gpu_cuda_failure(cudaError_t code, const char *what, char *error,
                                  size_t error_size)
{
    snprintf(error, error_size, "%s failed: %s", what, cudaGetErrorString(code));
    return CHORUS_ERR_GPU;
}

/* A call on the non-blocking communicator that enqueued its work: done, or still being
 * enqueued (wait_for waits for that too). */
bool gpu_enqueued(ncclResult_t code)
{
    return code == ncclSuccess || code == ncclInProgress;
}

chorus_status gpu_nccl_failure(ncclResult_t code, const char *what, char *error,
                                  size_t error_size)
{
    snprintf(error, error_size, "%s failed: %s", what, ncclGetErrorString(code));
    return CHORUS_ERR_GPU;
}

bool gpu_compiled(void)
{
    return true;
}

void gpu_versions(char *text, size_t text_size)
{
    int runtime = 0, driver = 0, nccl = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    ncclGetVersion(&nccl);
    char driver_text[32] = "none";
    if (driver > 0)
        snprintf(driver_text, sizeof driver_text, "%d.%d", driver / 1000, driver % 1000 / 10);
    /* NCCL 2.9 and later: major * 10000 + minor * 100 + patch. */
    snprintf(text, text_size, "CUDA runtime %d.%d, driver %s, NCCL %d.%d.%d", runtime / 1000,
             runtime % 1000 / 10, driver_text, nccl / 10000, nccl % 10000 / 100, nccl % 100);
}

int gpu_nccl_version(void)
{
    int version = 0;
    return ncclGetVersion(&version) == ncclSuccess ? version : 0;
}

int gpu_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        return 0;
    return count;
}

chorus_status gpu_unique_id(uint8_t id[GPU_UNIQUE_ID_BYTES], char *error, size_t error_size)
{
    ncclUniqueId unique;
    ncclResult_t code = ncclGetUniqueId(&unique);
    if (code != ncclSuccess)
        return gpu_nccl_failure(code, "ncclGetUniqueId", error, error_size);
    memset(id, 0, GPU_UNIQUE_ID_BYTES);
    memcpy(id, &unique, sizeof unique);
    return CHORUS_OK;
}

/* How long the stream may take, once the communicator is aborted, to finish what was enqueued
 * after the collective (the copies out of the fusion buffer). */
#define DRAIN_SECONDS 1.0

/* Ends the communicator at once: kernels still waiting for a peer stop, and later calls fail
 * (see usable). Then it waits, for a bounded time, for the rest of the stream's work, so that no
 * copy lands in a tensor after its handle has completed with the error. */
static void abort_communicator(struct gpu_context *context)
{
    if (context->comm != NULL)
        ncclCommAbort(context->comm);
    context->comm = NULL;
    double deadline = clock_seconds() + DRAIN_SECONDS;
    while (cudaStreamQuery(context->stream) == cudaErrorNotReady &&
           clock_seconds() < deadline)
        sched_yield();
}

/* An aborted communicator (after a peer failed) takes no more work. */
chorus_status gpu_usable(const struct gpu_context *context, char *error, size_t error_size)
{
    if (context->comm != NULL)
        return CHORUS_OK;
    snprintf(error, error_size, "the NCCL communicator was aborted after an earlier failure");
    return CHORUS_ERR_GPU;
}

/* How the host waits for the GPU: it polls for latency, yields the core for up to a
 * millisecond, then sleeps between polls, so that a long collective does not cost a core. */
#define POLL_SPINS 64
#define POLL_YIELD_SECONDS 1e-3
#define POLL_SLEEP_NANOSECONDS 20000

/* Waits for the communicator's setup or the stream's work. It polls instead of blocking in
 * cudaStreamSynchronize: NCCL's kernels wait forever for a peer that failed before it joined
 * the collective. Between polls it asks NCCL for an asynchronous error (a peer's connection
 * lost) and chorus, through the interrupt, whether a rank has sent notice that it failed; either
 * aborts the communicator, as does the timeout. The communicator is non-blocking, so work it
 * enqueues is on the stream only once NCCL no longer reports ncclInProgress. */
static chorus_status wait_polling(struct gpu_context *context, enum wait_kind kind,
                                  cudaEvent_t ready, char *error, size_t error_size)
{
    const char *what = kind == WAIT_SETUP   ? "setting up the NCCL communicator"
                       : kind == WAIT_READY ? "the work that produces a GPU tensor (its stream)"
                                            : "a collective on the NCCL communicator";
    if (context->comm == NULL) /* aborted while the work was enqueued */
        return gpu_usable(context, error, error_size);
    double started = clock_seconds(), yield_until = 0;
    for (unsigned polls = 0;; polls++) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t code = ncclCommGetAsyncError(context->comm, &state);
        if (code == ncclSuccess && state != ncclInProgress)
            code = state;
        if (code != ncclSuccess) {
            abort_communicator(context);
            return gpu_nccl_failure(code, what, error, error_size);
        }
        if (state == ncclSuccess) {
            cudaError_t cuda = kind == WAIT_SETUP   ? cudaSuccess
                               : kind == WAIT_READY ? cudaEventQuery(ready)
                                                    : cudaStreamQuery(context->stream);
            if (cuda == cudaSuccess)
                return CHORUS_OK;
            if (cuda != cudaErrorNotReady)
                return gpu_cuda_failure(cuda,
                                        kind == WAIT_READY ? "waiting for a GPU tensor's producer"
                                                           : "waiting for the GPU stream",
                                        error, error_size);
        }
        if (polls < POLL_SPINS)
            continue;
        chorus_status interrupted =
            context->interrupt.check == NULL
                ? CHORUS_OK
                : context->interrupt.check(context->interrupt.context, error, error_size);
        if (interrupted != CHORUS_OK) {
            abort_communicator(context);
            return interrupted;
        }
        double now = clock_seconds();
        if (context->timeout_seconds > 0 && now - started > context->timeout_seconds) {
            abort_communicator(context);
            snprintf(error, error_size,
                     "%s did not complete within the timeout of %g s (CHORUS_TIMEOUT_SECONDS): "
                     "a rank is stopped, dead, far behind or never called it",
                     what, context->timeout_seconds);
            return CHORUS_ERR_TIMEOUT;
        }
        if (yield_until == 0)
            yield_until = now + POLL_YIELD_SECONDS;
        if (now < yield_until)
            sched_yield();
        else
            nanosleep(&(struct timespec){.tv_nsec = POLL_SLEEP_NANOSECONDS}, NULL);
    }
}

chorus_status gpu_wait_for(struct gpu_context *context, enum wait_kind kind, char *error,
                           size_t error_size)
{
    return wait_polling(context, kind, NULL, error, error_size);
}

chorus_status gpu_context_create(struct gpu_context **context, int rank, int nranks, int device,
                                 const uint8_t id[GPU_UNIQUE_ID_BYTES],
                                 struct gpu_interrupt interrupt, double timeout_seconds,
                                 char *error, size_t error_size)
{
    *context = NULL;
    struct gpu_context *created = calloc(1, sizeof *created);
    if (created == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    created->device = device;
    created->nranks = nranks;
    created->interrupt = interrupt;
    cudaError_t cuda = cudaSetDevice(device);
    if (cuda != cudaSuccess) {
        free(created);
        return gpu_cuda_failure(cuda, "cudaSetDevice", error, error_size);
    }
    cuda = cudaStreamCreateWithFlags(&created->stream, cudaStreamNonBlocking);
    if (cuda != cudaSuccess) {
        free(created);
        return gpu_cuda_failure(cuda, "cudaStreamCreate", error, error_size);
    }
    created->timeout_seconds = timeout_seconds;
    ncclUniqueId unique;
    memcpy(&unique, id, sizeof unique);
    /* Non-blocking: a rank that never joins (it died, or is stuck before this point) must not
     * keep the others inside ncclCommInitRank forever. They poll, with the interrupt and the
     * timeout, as they do for collectives. */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t code = ncclCommInitRankConfig(&created->comm, nranks, unique, rank, &config);
    chorus_status status = CHORUS_OK;
    if (code != ncclSuccess && code != ncclInProgress)
        status = gpu_nccl_failure(code, "ncclCommInitRankConfig", error, error_size);
    else
        status = gpu_wait_for(created, WAIT_SETUP, error, error_size);
    if (status != CHORUS_OK) {
        abort_communicator(created);
        cudaStreamDestroy(created->stream);
        free(created);
        return status;
    }
    *context = created;
    return CHORUS_OK;
}

void gpu_context_destroy(struct gpu_context *context, bool abandon)
{
    if (context == NULL)
        return;
    if (abandon)
        abort_communicator(context);
    else if (context->comm != NULL)
        ncclCommDestroy(context->comm);
    cudaStreamDestroy(context->stream);
    cudaFree(context->fusion);
    if (context->outputs != NULL) /* outputs handles still own keep it until they are freed */
        cudaMemPoolDestroy(context->outputs);
    free(context);
}

/* The outputs handles own, with the stream each is freed on (gpu_output_free): few at a time. */
struct owned_output {
    void *pointer;
    cudaStream_t consumer;
};
static pthread_mutex_t owned_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owned_output *owned;
static size_t owned_count, owned_capacity;

static bool own_output(void *pointer, cudaStream_t consumer)
{
    pthread_mutex_lock(&owned_lock);
    if (owned_count == owned_capacity) {
        size_t capacity = owned_capacity ? 2 * owned_capacity : 64;
        struct owned_output *grown = realloc(owned, capacity * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&owned_lock);
            return false;
        }
        owned = grown;
        owned_capacity = capacity;
    }
    owned[owned_count++] = (struct owned_output){pointer, consumer};
    pthread_mutex_unlock(&owned_lock);
    return true;
}

void *gpu_output_alloc(struct gpu_context *context, size_t bytes, void *consumer)
{
    if (context == NULL)
        return NULL;
    cudaSetDevice(context->device);
    if (context->outputs == NULL) {
        struct cudaMemPoolProps properties = {0};
        properties.allocType = cudaMemAllocationTypePinned;
        properties.location.type = cudaMemLocationTypeDevice;
        properties.location.id = context->device;
        if (cudaMemPoolCreate(&context->outputs, &properties) != cudaSuccess) {
            cudaGetLastError();
            context->outputs = NULL;
            return NULL;
        }
        /* Kept for reuse until chorus shuts down, as a framework's caching allocator does:
         * giving memory back at each synchronization would cost a cudaMalloc per call again. */
        uint64_t keep = UINT64_MAX;
        cudaMemPoolSetAttribute(context->outputs, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    void *pointer = NULL;
    if (cudaMallocFromPoolAsync(&pointer, bytes ? bytes : 1, context->outputs,
                                context->stream) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (!own_output(pointer, consumer != NULL ? (cudaStream_t)consumer : cudaStreamLegacy)) {
        cudaFreeAsync(pointer, context->stream);
        return NULL;
    }
    return pointer;
}

void gpu_output_free(void *pointer)
{
    if (pointer == NULL)
        return;
    cudaStream_t consumer = NULL;
    bool found = false;
    pthread_mutex_lock(&owned_lock);
    for (size_t i = owned_count; i-- > 0 && !found;)
        if (owned[i].pointer == pointer) {
            consumer = owned[i].consumer;
            owned[i] = owned[--owned_count];
            found = true;
        }
    pthread_mutex_unlock(&owned_lock);
    if (found)
        cudaFreeAsync(pointer, consumer);
    else
        cudaFree(pointer);
}

chorus_status gpu_ready_record(int device, void *stream, void **ready, char *error,
                               size_t error_size)
{
    *ready = NULL;
    int current = -1;
    cudaError_t cuda = cudaGetDevice(&current);
    if (cuda == cudaSuccess && current != device)
        cuda = cudaSetDevice(device);
    cudaEvent_t event = NULL;
    if (cuda == cudaSuccess)
        cuda = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (cuda == cudaSuccess) {
        cuda = cudaEventRecord(event, (cudaStream_t)stream);
        if (cuda != cudaSuccess)
            cudaEventDestroy(event);
    }
    if (current >= 0 && current != device)
        cudaSetDevice(current);
    if (cuda != cudaSuccess)
        return gpu_cuda_failure(cuda, "recording the producer stream's ready event", error,
                                error_size);
    *ready = event;
    return CHORUS_OK;
}

chorus_status gpu_ready_wait(struct gpu_context *context, void *ready, char *error,
                             size_t error_size)
{
    if (ready == NULL || cudaEventQuery((cudaEvent_t)ready) == cudaSuccess)
        return CHORUS_OK;
    return wait_polling(context, WAIT_READY, (cudaEvent_t)ready, error, error_size);
}

void gpu_ready_release(void *ready)
{
    if (ready != NULL)
        cudaEventDestroy((cudaEvent_t)ready);
}

void *gpu_malloc(size_t bytes, int device)
{
    void *pointer = NULL;
    if (cudaSetDevice(device) != cudaSuccess)
        return NULL;
    if (cudaMalloc(&pointer, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    return pointer;
}

void gpu_free(void *pointer)
{
    if (pointer != NULL)
        cudaFree(pointer);
}

chorus_status gpu_copy(void *destination, const void *source, size_t bytes)
{
    /* cudaMemcpy from pageable host memory may return before the data has landed on the device;
     * the legacy stream it runs on has it in place once it is idle. */
    return cudaMemcpy(destination, source, bytes, cudaMemcpyDefault) == cudaSuccess &&
                   cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess
               ? CHORUS_OK
               : CHORUS_ERR_GPU;
}

int gpu_pointer_device(const void *pointer)
{
    struct cudaPointerAttributes attributes;
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged
               ? attributes.device
               : -1;
}
