/*
 * output_pool.h — recycled host buffers for allgather outputs. An allgather's output is
 * allocated after negotiation, and a fresh large allocation costs a page fault per 4 KiB on first
 * touch (3-4 us each here: 8 ms for 8 MiB). When the caller frees the handle that still owns the
 * output, the buffer comes back here and the next allgather of a similar size reuses it. The
 * buffers are plain malloc memory, so an output taken by the caller is released with free().
 * Thread-safe: user threads return buffers, the background thread takes them.
 */
#ifndef CHORUS_OUTPUT_POOL_H
#define CHORUS_OUTPUT_POOL_H

#include "common.h"

/* A buffer of at least `bytes` (a free one of at most twice the size is reused), or NULL.
 * *capacity receives its size. */
void *output_pool_take(size_t bytes, size_t *capacity);
/* Returns a buffer of `capacity` bytes; frees it when the pool is full. */
void output_pool_give(void *buffer, size_t capacity);
/* Frees every pooled buffer (at shutdown). */
void output_pool_drain(void);

#endif
