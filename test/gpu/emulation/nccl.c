/*
 * nccl.c — the emulated NCCL (see emulation.h): communicators across the processes of one host
 * through shared memory named by the unique id; allreduce (every dtype and op, pre-multiplied
 * sums included) and broadcast, in place or not, run on the caller's stream and exchange data
 * through per-rank slots of that memory in chunks, with a barrier of shared counters around each
 * chunk; reducescatter, allgather and alltoall the same way. Grouped calls are enqueued at
 * ncclGroupEnd; the ncclSend and ncclRecv calls of a group become one exchange, in rounds of at
 * most a slot's share per peer, that checks every receive against the size its peer sends.
 * Compiled against the real nccl.h.
 *
 * Strict where NCCL is: buffers must be device memory, an aborted communicator takes no more
 * work, an initialization waits for every rank (or, non-blocking, reports ncclInProgress until
 * they are all there).
 */
#include "emulation.h"

#include <cuda_runtime.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLOT_BYTES ((size_t)1 << 20)
#define HEADER_BYTES ((size_t)4096)
#define MAX_CUSTOM_OPS 64

/* The memory the ranks of a communicator share: counters, then a slot per rank. */
struct shared_header {
    _Atomic int arrived;       /* ranks through initialization */
    _Atomic uint64_t barriers; /* arrivals at collective barriers, all ranks together */
};

struct custom_op {
    bool used;
    double scalar;
};

struct ncclComm {
    int rank, nranks;
    char name[NCCL_UNIQUE_ID_BYTES];
    struct shared_header *shared;
    size_t shared_bytes;
    uint64_t barriers;          /* barriers this rank has passed (stream thread only) */
    _Atomic int aborted;
    _Atomic int state;          /* ncclInProgress until initialized, then ncclSuccess */
    _Atomic int async_error;    /* ncclSuccess, or what a collective reported */
    _Atomic int references;     /* the owner's, and one per operation not yet run */
    struct custom_op custom[MAX_CUSTOM_OPS];
    pthread_mutex_t lock;
};

static void sleep_briefly(unsigned spins)
{
    if (spins < 1000)
        sched_yield();
    else
        nanosleep(&(struct timespec){.tv_nsec = 50000}, NULL);
}

static void release(struct ncclComm *comm)
{
    if (atomic_fetch_sub(&comm->references, 1) != 1)
        return;
    if (comm->shared != NULL)
        munmap(comm->shared, comm->shared_bytes);
    pthread_mutex_destroy(&comm->lock);
    free(comm);
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (emulated)";
    case ncclSystemError: return "unhandled system error (emulated)";
    case ncclInternalError: return "internal error (emulated)";
    case ncclInvalidArgument: return "invalid argument (emulated)";
    case ncclInvalidUsage: return "invalid usage (emulated)";
    case ncclRemoteError: return "remote process exited or there was a network error (emulated)";
    case ncclInProgress: return "NCCL operation in progress (emulated)";
    default: return "unknown result code (emulated)";
    }
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static _Atomic unsigned counter;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "/chorus-emu-%d-%u-%lx", (int)getpid(),
             atomic_fetch_add(&counter, 1), (unsigned long)now.tv_nsec);
    return ncclSuccess;
}

/* ----- initialization ------------------------------------------------------------------------ */

/* Maps the communicator's shared memory, arrives, and waits for every rank (or an abort). */
static ncclResult_t rendezvous(struct ncclComm *comm)
{
    if (emulation_fault_setting("GPU_EMU_INIT_HANG") > 0) {
        while (!atomic_load(&comm->aborted))
            sleep_briefly(1000);
        return ncclSystemError;
    }
    comm->shared_bytes = HEADER_BYTES + (size_t)comm->nranks * SLOT_BYTES;
    int fd = shm_open(comm->name, O_CREAT | O_RDWR, 0600);
    if (fd < 0)
        return ncclSystemError;
    if (ftruncate(fd, (off_t)comm->shared_bytes) != 0) {
        close(fd);
        return ncclSystemError;
    }
    void *shared = mmap(NULL, comm->shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (shared == MAP_FAILED)
        return ncclSystemError;
    comm->shared = shared;
    int arrived = atomic_fetch_add(&comm->shared->arrived, 1) + 1;
    if (arrived == comm->nranks)
        shm_unlink(comm->name); /* everyone has it mapped: nothing left in /dev/shm */
    for (unsigned spins = 0; atomic_load(&comm->shared->arrived) < comm->nranks; spins++) {
        if (atomic_load(&comm->aborted))
            return ncclSystemError;
        sleep_briefly(spins);
    }
    return ncclSuccess;
}

static void *rendezvous_main(void *argument)
{
    struct ncclComm *comm = argument;
    ncclResult_t result = rendezvous(comm);
    atomic_store(&comm->state, result);
    release(comm);
    return NULL;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *created, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    *created = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks || id.internal[0] != '/')
        return ncclInvalidArgument;
    struct ncclComm *comm = calloc(1, sizeof *comm);
    if (comm == NULL)
        return ncclSystemError;
    comm->rank = rank;
    comm->nranks = nranks;
    memcpy(comm->name, id.internal, sizeof comm->name);
    comm->name[sizeof comm->name - 1] = '\0';
    atomic_init(&comm->state, ncclInProgress);
    atomic_init(&comm->references, 1);
    pthread_mutex_init(&comm->lock, NULL);
    bool blocking = config == NULL || config->blocking != 0;
    if (blocking) {
        ncclResult_t result = rendezvous(comm);
        atomic_store(&comm->state, result);
        if (result != ncclSuccess) {
            release(comm);
            return result;
        }
        *created = comm;
        return ncclSuccess;
    }
    atomic_fetch_add(&comm->references, 1);
    pthread_t thread;
    if (pthread_create(&thread, NULL, rendezvous_main, comm) != 0) {
        release(comm);
        release(comm);
        return ncclSystemError;
    }
    pthread_detach(thread);
    *created = comm;
    return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t *created, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(created, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state)
{
    if (comm == NULL)
        return ncclInvalidArgument;
    int initialized = atomic_load(&comm->state);
    *state = initialized != ncclSuccess ? (ncclResult_t)initialized
                                        : (ncclResult_t)atomic_load(&comm->async_error);
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (comm == NULL)
        return ncclSuccess;
    atomic_store(&comm->aborted, 1);
    release(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (comm == NULL)
        return ncclSuccess;
    if (atomic_load(&comm->state) != ncclSuccess)
        atomic_store(&comm->aborted, 1);
    release(comm);
    return ncclSuccess;
}

/* ----- reductions ---------------------------------------------------------------------------- */

static size_t type_size(ncclDataType_t type)
{
    switch (type) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

static bool is_float(ncclDataType_t type)
{
    return type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat32 ||
           type == ncclFloat64;
}

static double bfloat16_value(uint16_t bits)
{
    uint32_t wide = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &wide, sizeof value);
    return value;
}

static uint16_t bfloat16_bits(double value)
{
    float narrow = (float)value;
    uint32_t bits;
    memcpy(&bits, &narrow, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static double float_at(const unsigned char *data, size_t index, ncclDataType_t type)
{
    switch (type) {
    case ncclFloat16: {
        _Float16 value;
        memcpy(&value, data + index * 2, 2);
        return (double)value;
    }
    case ncclBfloat16: {
        uint16_t bits;
        memcpy(&bits, data + index * 2, 2);
        return bfloat16_value(bits);
    }
    case ncclFloat32: {
        float value;
        memcpy(&value, data + index * 4, 4);
        return value;
    }
    default: {
        double value;
        memcpy(&value, data + index * 8, 8);
        return value;
    }
    }
}

static void float_store(unsigned char *data, size_t index, ncclDataType_t type, double value)
{
    switch (type) {
    case ncclFloat16: {
        _Float16 narrow = (_Float16)value;
        memcpy(data + index * 2, &narrow, 2);
        break;
    }
    case ncclBfloat16: {
        uint16_t bits = bfloat16_bits(value);
        memcpy(data + index * 2, &bits, 2);
        break;
    }
    case ncclFloat32: {
        float narrow = (float)value;
        memcpy(data + index * 4, &narrow, 4);
        break;
    }
    default:
        memcpy(data + index * 8, &value, 8);
    }
}

/* Integers as 64 bits (sign-extended for signed types): sums and products wrap when stored. */
static bool is_signed(ncclDataType_t type)
{
    return type == ncclInt8 || type == ncclInt32 || type == ncclInt64;
}

static int64_t integer_at(const unsigned char *data, size_t index, ncclDataType_t type)
{
    switch (type) {
    case ncclInt8: return (int8_t)data[index];
    case ncclUint8: return data[index];
    case ncclInt32: { int32_t v; memcpy(&v, data + index * 4, 4); return v; }
    case ncclUint32: { uint32_t v; memcpy(&v, data + index * 4, 4); return (int64_t)v; }
    default: { int64_t v; memcpy(&v, data + index * 8, 8); return v; }
    }
}

static void integer_store(unsigned char *data, size_t index, ncclDataType_t type, int64_t value)
{
    size_t size = type_size(type);
    uint64_t bits = (uint64_t)value;
    if (size == 1) {
        data[index] = (uint8_t)bits;
    } else if (size == 4) {
        uint32_t narrow = (uint32_t)bits;
        memcpy(data + index * 4, &narrow, 4);
    } else {
        memcpy(data + index * 8, &bits, 8);
    }
}

static bool integer_less(int64_t a, int64_t b, ncclDataType_t type)
{
    return is_signed(type) || type_size(type) < 8 ? a < b : (uint64_t)a < (uint64_t)b;
}

/* result[i] = the reduction over ranks, in rank order, of slot[r][i] (pre-multiplied by
 * `scalar` for a PreMulSum). */
static void reduce_slots(unsigned char *result, unsigned char *const *slots, int nranks,
                         size_t count, ncclDataType_t type, ncclRedOp_t op, bool premul,
                         double scalar)
{
    for (size_t i = 0; i < count; i++) {
        if (is_float(type)) {
            double accumulator = 0;
            for (int r = 0; r < nranks; r++) {
                double value = float_at(slots[r], i, type) * (premul ? scalar : 1.0);
                if (r == 0)
                    accumulator = value;
                else if (op == ncclProd)
                    accumulator *= value;
                else if (op == ncclMin)
                    accumulator = value < accumulator ? value : accumulator;
                else if (op == ncclMax)
                    accumulator = value > accumulator ? value : accumulator;
                else
                    accumulator += value;
            }
            float_store(result, i, type, op == ncclAvg ? accumulator / nranks : accumulator);
            continue;
        }
        int64_t accumulator = 0;
        for (int r = 0; r < nranks; r++) {
            int64_t value = integer_at(slots[r], i, type);
            if (premul)
                value = (int64_t)((double)value * scalar);
            if (r == 0)
                accumulator = value;
            else if (op == ncclProd)
                accumulator = (int64_t)((uint64_t)accumulator * (uint64_t)value);
            else if (op == ncclMin)
                accumulator = integer_less(value, accumulator, type) ? value : accumulator;
            else if (op == ncclMax)
                accumulator = integer_less(accumulator, value, type) ? value : accumulator;
            else
                accumulator = (int64_t)((uint64_t)accumulator + (uint64_t)value);
        }
        integer_store(result, i, type, op == ncclAvg ? accumulator / nranks : accumulator);
    }
}

/* ----- collectives ----------------------------------------------------------------------------- */

enum collective_kind { ALLREDUCE, BROADCAST, REDUCESCATTER, ALLGATHER, ALLTOALL, EXCHANGE };

#define MAX_PEERS 64

/* The sends and receives of one group (or one lone call): at most one of each per peer. Every
 * rank of the communicator takes part in each exchange, as in chorus's alltoall; a lone
 * ncclSend between two of three ranks, which NCCL allows, would wait here for the third. */
struct exchange {
    const unsigned char *send[MAX_PEERS];
    unsigned char *recv[MAX_PEERS];
    size_t send_bytes[MAX_PEERS], recv_bytes[MAX_PEERS];
    bool sends[MAX_PEERS], receives[MAX_PEERS];
};
enum collective_fault { FAULT_NONE, FAULT_ASYNC_ERROR, FAULT_HANG };

struct collective {
    struct ncclComm *comm;
    cudaStream_t stream;
    enum collective_kind kind;
    const unsigned char *send; /* read-write views of the device buffers */
    unsigned char *recv;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    bool premul;
    double scalar;
    int root;
    enum collective_fault fault;
    struct exchange *exchange; /* EXCHANGE only */
    struct collective *next; /* in a group, waiting for ncclGroupEnd */
};

static unsigned char *slot(const struct ncclComm *comm, int rank)
{
    return (unsigned char *)comm->shared + HEADER_BYTES + (size_t)rank * SLOT_BYTES;
}

/* Waits for every rank at the communicator's next barrier; false when aborted. */
static bool barrier(struct ncclComm *comm)
{
    uint64_t target = ++comm->barriers * (uint64_t)comm->nranks;
    atomic_fetch_add(&comm->shared->barriers, 1);
    for (unsigned spins = 0; atomic_load(&comm->shared->barriers) < target; spins++) {
        if (atomic_load(&comm->aborted))
            return false;
        sleep_briefly(spins);
    }
    return true;
}

static void wait_for_abort(struct ncclComm *comm)
{
    while (!atomic_load(&comm->aborted))
        sleep_briefly(1000);
}

/* In a slot: what this rank sends each peer (UINT64_MAX: no send), the rounds it needs, then a
 * share of the slot per peer for each round's data. */
#define EXCHANGE_TABLE_BYTES ((size_t)1024)

static size_t exchange_share(int nranks)
{
    return (SLOT_BYTES - EXCHANGE_TABLE_BYTES) / (size_t)nranks / 64 * 64;
}

static void run_exchange(struct collective *c)
{
    struct ncclComm *comm = c->comm;
    struct exchange *x = c->exchange;
    int me = comm->rank, n = comm->nranks;
    size_t share = exchange_share(n);
    uint64_t *table = (uint64_t *)(void *)slot(comm, me);
    uint64_t rounds = 1;
    for (int k = 0; k < n; k++) {
        table[k] = x->sends[k] ? x->send_bytes[k] : UINT64_MAX;
        size_t most = x->send_bytes[k] > x->recv_bytes[k] ? x->send_bytes[k] : x->recv_bytes[k];
        rounds = (most + share - 1) / share > rounds ? (most + share - 1) / share : rounds;
    }
    table[MAX_PEERS] = rounds;
    if (!barrier(comm))
        return;
    bool matched = true;
    for (int j = 0; j < n; j++) {
        const uint64_t *theirs = (const uint64_t *)(const void *)slot(comm, j);
        rounds = theirs[MAX_PEERS] > rounds ? theirs[MAX_PEERS] : rounds;
        /* NCCL needs every receive matched by a send of the same size, and the reverse. */
        uint64_t sent = theirs[me];
        if ((x->receives[j] ? x->recv_bytes[j] : UINT64_MAX) != sent)
            matched = false;
    }
    if (!matched)
        atomic_store(&comm->async_error, ncclInvalidUsage);
    for (uint64_t t = 0; t < rounds; t++) {
        for (int k = 0; k < n; k++) {
            size_t start = t * share;
            if (x->sends[k] && start < x->send_bytes[k]) {
                size_t length = x->send_bytes[k] - start < share ? x->send_bytes[k] - start : share;
                memcpy(slot(comm, me) + EXCHANGE_TABLE_BYTES + (size_t)k * share,
                       x->send[k] + start, length);
            }
        }
        if (!barrier(comm))
            return;
        for (int j = 0; matched && j < n; j++) {
            size_t start = t * share;
            if (x->receives[j] && start < x->recv_bytes[j]) {
                size_t length = x->recv_bytes[j] - start < share ? x->recv_bytes[j] - start : share;
                memcpy(x->recv[j] + start,
                       slot(comm, j) + EXCHANGE_TABLE_BYTES + (size_t)me * share, length);
            }
        }
        if (!barrier(comm))
            return;
    }
}

/* Block by block, chunk by chunk: every rank puts its part of block d in its slot, and rank d
 * reduces them into its output. Rank d's output may be its own block d of the input (in place):
 * each chunk of it is written only after every rank copied it. */
static void run_reducescatter(struct collective *c, unsigned char *const *slots,
                              unsigned char *result)
{
    struct ncclComm *comm = c->comm;
    size_t element = type_size(c->type), bytes = c->count * element;
    size_t chunk = SLOT_BYTES / element * element;
    for (int d = 0; d < comm->nranks; d++)
        for (size_t offset = 0; offset < bytes; offset += chunk) {
            size_t length = bytes - offset < chunk ? bytes - offset : chunk;
            memcpy(slots[comm->rank], c->send + (size_t)d * bytes + offset, length);
            if (!barrier(comm))
                return;
            if (d == comm->rank) {
                reduce_slots(result, slots, comm->nranks, length / element, c->type, c->op,
                             c->premul, c->scalar);
                memcpy(c->recv + offset, result, length);
            }
            if (!barrier(comm))
                return;
        }
}

/* Chunk by chunk: every rank puts its part of its block in its slot, and every rank copies
 * every slot to that rank's block of its output. In place, this rank's block of the output is
 * its input: copying it over itself changes nothing. */
static void run_allgather(struct collective *c, unsigned char *const *slots)
{
    struct ncclComm *comm = c->comm;
    size_t bytes = c->count * type_size(c->type);
    for (size_t offset = 0; offset < bytes; offset += SLOT_BYTES) {
        size_t length = bytes - offset < SLOT_BYTES ? bytes - offset : SLOT_BYTES;
        memcpy(slots[comm->rank], c->send + offset, length);
        if (!barrier(comm))
            return;
        for (int r = 0; r < comm->nranks; r++)
            memmove(c->recv + (size_t)r * bytes + offset, slots[r], length);
        if (!barrier(comm))
            return;
    }
}

/* Chunk by chunk: every rank puts its part of its block for peer k in the k-th share of its
 * slot, and every rank copies its share of every slot to that rank's block of its output. */
static void run_alltoall(struct collective *c, unsigned char *const *slots)
{
    struct ncclComm *comm = c->comm;
    size_t bytes = c->count * type_size(c->type), share = exchange_share(comm->nranks);
    for (size_t offset = 0; offset < bytes; offset += share) {
        size_t length = bytes - offset < share ? bytes - offset : share;
        for (int k = 0; k < comm->nranks; k++)
            memcpy(slots[comm->rank] + (size_t)k * share, c->send + (size_t)k * bytes + offset,
                   length);
        if (!barrier(comm))
            return;
        for (int j = 0; j < comm->nranks; j++)
            memcpy(c->recv + (size_t)j * bytes + offset, slots[j] + (size_t)comm->rank * share,
                   length);
        if (!barrier(comm))
            return;
    }
}

static void run_collective(void *context)
{
    struct collective *c = context;
    struct ncclComm *comm = c->comm;
    if (c->kind == EXCHANGE) {
        if (!atomic_load(&comm->aborted))
            run_exchange(c);
        free(c->exchange);
        release(comm);
        free(c);
        return;
    }
    size_t element = type_size(c->type), bytes = c->count * element;
    bool reduces = c->kind == ALLREDUCE || c->kind == REDUCESCATTER;
    unsigned char *result = reduces ? malloc(SLOT_BYTES) : NULL;
    if (atomic_load(&comm->aborted) || (reduces && result == NULL))
        goto out;
    if (c->fault == FAULT_ASYNC_ERROR)
        atomic_store(&comm->async_error, ncclRemoteError);
    if (c->fault != FAULT_NONE) {
        wait_for_abort(comm);
        goto out;
    }
    unsigned char *slots[64];
    for (int r = 0; r < comm->nranks; r++)
        slots[r] = slot(comm, r);
    if (c->kind == REDUCESCATTER) {
        run_reducescatter(c, slots, result);
        goto out;
    }
    if (c->kind == ALLGATHER) {
        run_allgather(c, slots);
        goto out;
    }
    if (c->kind == ALLTOALL) {
        run_alltoall(c, slots);
        goto out;
    }
    size_t chunk = SLOT_BYTES / element * element;
    for (size_t offset = 0; offset < bytes; offset += chunk) {
        size_t length = bytes - offset < chunk ? bytes - offset : chunk;
        if (c->kind == ALLREDUCE || comm->rank == c->root)
            memcpy(slots[comm->rank], c->send + offset, length);
        if (!barrier(comm))
            goto out;
        if (c->kind == ALLREDUCE) {
            reduce_slots(result, slots, comm->nranks, length / element, c->type, c->op,
                         c->premul, c->scalar);
            memcpy(c->recv + offset, result, length);
        } else {
            memmove(c->recv + offset, slots[c->root], length);
        }
        if (!barrier(comm))
            goto out;
    }
out:
    free(result);
    release(comm);
    free(c);
}

/* Collective calls of this thread between ncclGroupStart and ncclGroupEnd, in order. */
static _Thread_local int group_depth;
static _Thread_local struct collective *group_head, *group_tail;
static _Atomic long collective_calls;

static void group_append(struct collective *c)
{
    if (group_tail != NULL)
        group_tail->next = c;
    else
        group_head = c;
    group_tail = c;
}

/* Where input and output may overlap, as NCCL allows: in place only, which for a
 * reducescatter means the output is this rank's block of the input (at `own` bytes), for an
 * allgather the input is this rank's block of the output; an alltoall never. Any other overlap
 * would be overwritten while other ranks still read it. */
static bool placed_safely(enum collective_kind kind, const void *send, size_t send_bytes,
                          const void *recv, size_t recv_bytes, size_t own)
{
    const unsigned char *in = send, *out = recv;
    bool overlap = in != NULL && out < in + send_bytes && in < out + recv_bytes;
    if (!overlap)
        return true;
    switch (kind) {
    case REDUCESCATTER:
        return out == in + own;
    case ALLGATHER:
        return in == out + own;
    case ALLTOALL:
        return false;
    default:
        return in == out && send_bytes == recv_bytes;
    }
}

static ncclResult_t submit(struct ncclComm *comm, cudaStream_t stream, enum collective_kind kind,
                           const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, int root)
{
    long call = atomic_fetch_add(&collective_calls, 1) + 1;
    if (call == emulation_fault_setting("GPU_EMU_NCCL_FAIL_AT"))
        return ncclSystemError;
    if (comm == NULL || atomic_load(&comm->aborted) || atomic_load(&comm->state) != ncclSuccess)
        return ncclInvalidUsage;
    size_t element = type_size(type), bytes = count * element;
    if (element == 0 || root < 0 || root >= comm->nranks || comm->nranks > 64)
        return ncclInvalidArgument;
    bool premul = op >= ncclNumOps;
    if (premul && (op - ncclNumOps >= MAX_CUSTOM_OPS || !comm->custom[op - ncclNumOps].used))
        return ncclInvalidArgument;
    if (!premul && (int)op > (int)ncclAvg)
        return ncclInvalidArgument;
    /* Buffers must be device memory: NCCL cannot read the host's. */
    bool sends = kind != BROADCAST || comm->rank == root;
    /* A reducescatter reads a block of `count` per rank, an allgather writes one, an alltoall
     * does both. */
    size_t blocks = (size_t)comm->nranks;
    size_t send_bytes = kind == REDUCESCATTER || kind == ALLTOALL ? bytes * blocks : bytes;
    size_t recv_bytes = kind == ALLGATHER || kind == ALLTOALL ? bytes * blocks : bytes;
    if (bytes != 0 && ((sends && !emulation_is_device(send)) || !emulation_is_device(recv)))
        return ncclInvalidArgument;
    if (bytes != 0 && !placed_safely(kind, send, send_bytes, recv, recv_bytes,
                                     (size_t)comm->rank * bytes))
        return ncclInvalidArgument;
    struct collective *c = calloc(1, sizeof *c);
    if (c == NULL)
        return ncclSystemError;
    *c = (struct collective){
        .comm = comm,
        .stream = stream,
        .kind = kind,
        .send = sends && bytes != 0 ? emulation_host_view(send, send_bytes) : NULL,
        .recv = bytes != 0 ? emulation_host_view(recv, recv_bytes) : NULL,
        .count = count,
        .type = type,
        .op = premul ? ncclSum : op,
        .premul = premul,
        .scalar = premul ? comm->custom[op - ncclNumOps].scalar : 1.0,
        .root = root,
        .fault = call == emulation_fault_setting("GPU_EMU_NCCL_ASYNC_ERROR_AT") ? FAULT_ASYNC_ERROR
                 : call == emulation_fault_setting("GPU_EMU_NCCL_HANG_AT")      ? FAULT_HANG
                                                                                   : FAULT_NONE,
    };
    if (bytes != 0 && ((sends && c->send == NULL) || c->recv == NULL)) {
        free(c);
        return ncclInvalidArgument;
    }
    atomic_fetch_add(&comm->references, 1);
    if (group_depth > 0) {
        group_append(c);
        return ncclSuccess;
    }
    emulation_enqueue(stream, run_collective, c);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return submit(comm, stream, ALLREDUCE, send, recv, count, type, op, 0);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return submit(comm, stream, REDUCESCATTER, send, recv, count, type, op, 0);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream)
{
    return submit(comm, stream, ALLGATHER, send, recv, count, type, ncclSum, 0);
}

ncclResult_t ncclAlltoAll(const void *send, void *recv, size_t count, ncclDataType_t type,
                          ncclComm_t comm, cudaStream_t stream)
{
    return submit(comm, stream, ALLTOALL, send, recv, count, type, ncclSum, 0);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    return submit(comm, stream, BROADCAST, send, recv, count, type, ncclSum, root);
}

/* A send or receive: added to the group's exchange with this communicator (created at its
 * first call), or run alone outside a group. */
static ncclResult_t submit_point_to_point(struct ncclComm *comm, cudaStream_t stream, bool send,
                                          const void *buffer, size_t count, ncclDataType_t type,
                                          int peer)
{
    if (comm == NULL || atomic_load(&comm->aborted) || atomic_load(&comm->state) != ncclSuccess)
        return ncclInvalidUsage;
    size_t bytes = count * type_size(type);
    if (type_size(type) == 0 || peer < 0 || peer >= comm->nranks || comm->nranks > MAX_PEERS)
        return ncclInvalidArgument;
    if (bytes != 0 && !emulation_is_device(buffer))
        return ncclInvalidArgument;
    unsigned char *view = bytes != 0 ? emulation_host_view(buffer, bytes) : NULL;
    if (bytes != 0 && view == NULL)
        return ncclInvalidArgument;
    struct collective *c = NULL;
    for (struct collective *g = group_depth > 0 ? group_head : NULL; g != NULL; g = g->next)
        if (g->kind == EXCHANGE && g->comm == comm)
            c = g;
    if (c == NULL) {
        c = calloc(1, sizeof *c);
        struct exchange *x = calloc(1, sizeof *x);
        if (c == NULL || x == NULL) {
            free(c);
            free(x);
            return ncclSystemError;
        }
        *c = (struct collective){.comm = comm, .stream = stream, .kind = EXCHANGE, .exchange = x};
        atomic_fetch_add(&comm->references, 1);
        if (group_depth > 0)
            group_append(c);
    }
    struct exchange *x = c->exchange;
    /* The emulation's limit: one send and one receive per peer in a group. */
    if (send ? x->sends[peer] : x->receives[peer])
        return ncclInvalidUsage;
    if (send) {
        x->sends[peer] = true;
        x->send[peer] = view;
        x->send_bytes[peer] = bytes;
    } else {
        x->receives[peer] = true;
        x->recv[peer] = view;
        x->recv_bytes[peer] = bytes;
    }
    if (group_depth == 0)
        emulation_enqueue(stream, run_collective, c);
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return submit_point_to_point(comm, stream, true, send, count, type, peer);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return submit_point_to_point(comm, stream, false, recv, count, type, peer);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0)
        return ncclInvalidUsage;
    if (--group_depth > 0)
        return ncclSuccess;
    struct collective *c = group_head;
    group_head = group_tail = NULL;
    while (c != NULL) {
        struct collective *next = c->next;
        c->next = NULL;
        emulation_enqueue(c->stream, run_collective, c);
        c = next;
    }
    return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t type,
                                      ncclScalarResidence_t residence, ncclComm_t comm)
{
    if (comm == NULL || residence != ncclScalarHostImmediate || type_size(type) == 0)
        return ncclInvalidArgument;
    double value;
    if (is_float(type))
        value = float_at(scalar, 0, type);
    else
        value = (double)integer_at(scalar, 0, type);
    pthread_mutex_lock(&comm->lock);
    int found = -1;
    for (int i = 0; i < MAX_CUSTOM_OPS && found < 0; i++)
        if (!comm->custom[i].used)
            found = i;
    if (found >= 0)
        comm->custom[found] = (struct custom_op){true, value};
    pthread_mutex_unlock(&comm->lock);
    if (found < 0)
        return ncclInternalError;
    *op = (ncclRedOp_t)(ncclNumOps + found);
    return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    int index = (int)op - (int)ncclNumOps;
    if (comm == NULL || index < 0 || index >= MAX_CUSTOM_OPS || !comm->custom[index].used)
        return ncclInvalidArgument;
    /* The scalar was captured when the collective was enqueued: destroying the operator now
     * is allowed, as with NCCL. */
    pthread_mutex_lock(&comm->lock);
    comm->custom[index].used = false;
    pthread_mutex_unlock(&comm->lock);
    return ncclSuccess;
}
