/*
 * shared_heap.h — this process's shared heap: memory (chorus_mem_alloc) that the other ranks of
 * the host map into their own address space, so that an allreduce of a tensor that lies in it on
 * every rank reads each peer's input and writes each peer's result in place, with no staging:
 * every byte crosses memory once, as in a copy (allreduce_shared_heap.c).
 *
 * The heap is one memfd per process, reserved (sparse, nothing committed) when it is first
 * needed and never unmapped, so that a pointer from it stays valid after chorus_shutdown and
 * across an elastic reset. Peers open it through /proc/<pid>/fd/<fd>, which the kernel allows to
 * processes of the same user (no ptrace permission, unlike process_vm_readv), and map as much of
 * it as the calls they take part in need. Freed blocks are punched out of the file, which gives
 * their memory back to the system and drops it from the peers' mappings too.
 */
#ifndef CHORUS_SHARED_HEAP_H
#define CHORUS_SHARED_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An offset that no block has: the tensor does not lie in the heap. */
#define SHARED_HEAP_NOWHERE UINT64_MAX

/* The heap's file and reservation, creating them the first time; false (with `error` filled in)
 * where the system refuses (no memfd_create, no address space). Thread-safe. */
bool shared_heap_open(int *fd, size_t *bytes, char *error, size_t error_size);

/* A block of at least `bytes` bytes (page-aligned, zero-filled), or NULL with `error` filled in:
 * the heap cannot be created, or its reservation is full. Thread-safe. */
void *shared_heap_alloc(size_t bytes, char *error, size_t error_size);
/* Frees a block from shared_heap_alloc; false when `pointer` is not the start of one. */
bool shared_heap_free(void *pointer);

/* Where [pointer, pointer + bytes) lies in this process's heap, as an offset from its start, or
 * SHARED_HEAP_NOWHERE. Lock-free: the reservation never moves. */
uint64_t shared_heap_offset(const void *pointer, size_t bytes);
/* The start of this process's heap (NULL before it is created). */
unsigned char *shared_heap_base(void);

#endif
