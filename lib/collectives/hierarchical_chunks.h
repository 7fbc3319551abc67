/*
 * hierarchical_chunks.h — how the hierarchical allreduce cuts a buffer: into chunks of at most
 * the segment's chunk size, each into one slice per local rank. The staged path
 * (allreduce_hierarchical.c) and the in-place one (allreduce_shared_heap.c) cut alike, so that
 * across hosts every rank allreduces the same slices in the same calls whichever path its host
 * took.
 */
#ifndef CHORUS_HIERARCHICAL_CHUNKS_H
#define CHORUS_HIERARCHICAL_CHUNKS_H

#include "../core/common.h"

struct chunk {
    size_t start; /* byte offset of this chunk in the (logical) buffer */
    size_t elements;
    size_t layout; /* elements the slices are cut for: this chunk has layout or layout-1 */
    size_t turn;   /* which turn of the staging areas it uses (the staged path) */
};

/* How many chunks `count` elements of `width` bytes take with chunks of `chunk_bytes`. */
static inline size_t chunk_count(size_t count, size_t width, size_t chunk_bytes)
{
    size_t chunk_elements = chunk_bytes / width;
    return (count + chunk_elements - 1) / chunk_elements;
}

/* Chunk `index` of `chunks` nearly equal ones of `count` elements. */
static inline struct chunk chunk_at(size_t count, size_t chunks, size_t index, size_t turn,
                                    size_t width)
{
    return (struct chunk){
        .start = part_start(count, chunks, index) * width,
        .elements = part_length(count, chunks, index),
        .layout = part_length(count, chunks, 0),
        .turn = turn,
    };
}

/* Slices are cut for `layout` elements, the same for every chunk of a call, and the shorter
 * chunks end early: the own slice then sits at the same place in every chunk, so staging the
 * next chunk never writes where a peer is still copying the previous result from. */
static inline size_t slice_offset(const struct chunk *chunk, int local_size, int owner,
                                  size_t width)
{
    size_t start = part_start(chunk->layout, (size_t)local_size, (size_t)owner);
    return (start < chunk->elements ? start : chunk->elements) * width;
}

static inline size_t slice_bytes(const struct chunk *chunk, int local_size, int owner,
                                 size_t width)
{
    size_t end = part_start(chunk->layout, (size_t)local_size, (size_t)owner + 1);
    end = (end < chunk->elements ? end : chunk->elements) * width;
    return end - slice_offset(chunk, local_size, owner, width);
}

#endif
