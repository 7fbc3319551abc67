/*
 * shared_heap.c — the process's shared heap (see shared_heap.h): a memfd reserved at the size of
 * the host's memory, and a first-fit list of its blocks. Gradients are allocated once and live
 * for the whole run, so a sorted array of blocks is all the allocator needs.
 */
#include "shared_heap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE_BYTES ((size_t)4096)
#define HUGE_PAGE_BYTES ((size_t)2 << 20)
/* Even on a host with more memory, one rank's tensors stay below this. */
#define MAX_RESERVATION ((size_t)1 << 42)

struct block {
    size_t offset;
    size_t bytes;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int heap_fd = -1;
static size_t reserved;
static _Atomic(unsigned char *) base; /* set once, under the lock; read without it */
static struct block *blocks;          /* sorted by offset */
static size_t block_count, block_capacity;

static size_t host_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    size_t bytes = pages > 0 ? (size_t)pages * PAGE_BYTES : (size_t)1 << 34;
    bytes = (bytes + HUGE_PAGE_BYTES - 1) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    return bytes < MAX_RESERVATION ? bytes : MAX_RESERVATION;
}

/* A child of fork() shares the parent's heap mapping (MAP_SHARED) but not its list of blocks:
 * its own allocations there would land on the parent's. It starts a heap of its own instead,
 * and leaves the inherited mapping where it is (it may still read what it points to). */
static void forget_in_child(void)
{
    pthread_mutex_init(&lock, NULL);
    if (heap_fd >= 0)
        close(heap_fd);
    heap_fd = -1;
    reserved = 0;
    atomic_store(&base, NULL);
    block_count = 0;
}

/* Under the lock. */
static bool create(char *error, size_t error_size)
{
    static bool fork_handled;
    if (!fork_handled)
        fork_handled = pthread_atfork(NULL, NULL, forget_in_child) == 0;
    if (base != NULL)
        return true;
    size_t bytes = host_memory_bytes();
    int fd = memfd_create("chorus-shared-heap", MFD_CLOEXEC);
    if (fd < 0) {
        snprintf(error, error_size, "the shared heap: memfd_create failed: %s", strerror(errno));
        return false;
    }
    void *memory = MAP_FAILED;
    if (ftruncate(fd, (off_t)bytes) == 0)
        memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (memory == MAP_FAILED) {
        snprintf(error, error_size, "the shared heap: reserving %zu bytes failed: %s", bytes,
                 strerror(errno));
        close(fd);
        return false;
    }
    heap_fd = fd;
    reserved = bytes;
    atomic_store(&base, (unsigned char *)memory);
    return true;
}

bool shared_heap_open(int *fd, size_t *bytes, char *error, size_t error_size)
{
    pthread_mutex_lock(&lock);
    bool created = create(error, error_size);
    *fd = heap_fd;
    *bytes = reserved;
    pthread_mutex_unlock(&lock);
    return created;
}

/* The first gap of at least `bytes` between the blocks: its offset, and where the new block goes
 * in the array. */
static bool find_gap(size_t bytes, size_t *offset, size_t *index)
{
    size_t end = 0;
    for (size_t i = 0; i <= block_count; i++) {
        size_t next = i < block_count ? blocks[i].offset : reserved;
        if (next - end >= bytes) {
            *offset = end;
            *index = i;
            return true;
        }
        if (i < block_count)
            end = blocks[i].offset + blocks[i].bytes;
    }
    return false;
}

/* Under the lock. */
static bool grow_blocks(void)
{
    size_t capacity = block_capacity == 0 ? 64 : 2 * block_capacity;
    struct block *grown = realloc(blocks, capacity * sizeof *grown);
    if (grown == NULL)
        return false;
    blocks = grown;
    block_capacity = capacity;
    return true;
}

void *shared_heap_alloc(size_t bytes, char *error, size_t error_size)
{
    size_t rounded = bytes == 0 ? PAGE_BYTES : (bytes + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
    if (rounded < bytes) {
        snprintf(error, error_size, "%zu bytes is more than the shared heap can hold", bytes);
        return NULL;
    }
    pthread_mutex_lock(&lock);
    void *pointer = NULL;
    size_t offset = 0, index = 0;
    if (!create(error, error_size)) {
        /* error filled in */
    } else if (block_count == block_capacity && !grow_blocks()) {
        snprintf(error, error_size, "out of memory for the shared heap's list of blocks");
    } else if (!find_gap(rounded, &offset, &index)) {
        snprintf(error, error_size,
                 "the shared heap has no free range of %zu bytes (it reserves %zu, the host's "
                 "memory)",
                 rounded, reserved);
    } else {
        memmove(&blocks[index + 1], &blocks[index], (block_count - index) * sizeof *blocks);
        blocks[index] = (struct block){offset, rounded};
        block_count++;
        pointer = atomic_load(&base) + offset;
    }
    pthread_mutex_unlock(&lock);
    return pointer;
}

bool shared_heap_free(void *pointer)
{
    uintptr_t start = (uintptr_t)atomic_load(&base), at = (uintptr_t)pointer;
    if (start == 0 || at < start)
        return false;
    size_t offset = (size_t)(at - start);
    pthread_mutex_lock(&lock);
    size_t low = 0, high = block_count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (blocks[middle].offset < offset)
            low = middle + 1;
        else
            high = middle;
    }
    bool found = low < block_count && blocks[low].offset == offset;
    if (found) {
        /* The next block from this range starts from zeros, as a fresh one should, and the
         * memory goes back to the system now, not at exit. */
        fallocate(heap_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset,
                  (off_t)blocks[low].bytes);
        memmove(&blocks[low], &blocks[low + 1], (block_count - low - 1) * sizeof *blocks);
        block_count--;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

uint64_t shared_heap_offset(const void *pointer, size_t bytes)
{
    uintptr_t start = (uintptr_t)atomic_load(&base), at = (uintptr_t)pointer;
    if (start == 0 || at < start || at - start > reserved || bytes > reserved - (at - start))
        return SHARED_HEAP_NOWHERE;
    return (uint64_t)(at - start);
}

unsigned char *shared_heap_base(void)
{
    return atomic_load(&base);
}
