/*
 * pieces.h — a buffer made of pieces: the tensors of a fused allreduce, reduced where they lie
 * instead of being packed into one buffer and unpacked again. The logical buffer is the
 * concatenation of the pieces; each piece is read from `input` and written to `output` (the
 * same pointer when in place).
 */
#ifndef CHORUS_PIECES_H
#define CHORUS_PIECES_H

#include "../transport/transport.h"

#include <stddef.h>

struct allreduce_piece {
    const void *input;
    void *output;
    size_t offset; /* bytes before this piece in the logical buffer */
    size_t bytes;
};

/* The longest run of logical bytes [offset, offset + bytes) that lies within one piece. */
struct piece_run {
    const unsigned char *input;
    unsigned char *output;
    size_t bytes;
};
struct piece_run pieces_run_at(const struct allreduce_piece *pieces, size_t count, size_t offset,
                              size_t bytes);

/* Copies logical bytes [offset, offset + bytes) of the inputs to `to`. */
void pieces_gather(const struct allreduce_piece *pieces, size_t count, size_t offset, void *to,
                   size_t bytes);
/* The same with `copy` doing each run's copy (streaming_copy_nontemporal, for example). */
void pieces_gather_with(const struct allreduce_piece *pieces, size_t count, size_t offset,
                        void *to, size_t bytes, copy_function copy);

/* Copies `from` to logical bytes [offset, offset + bytes) of the outputs. */
void pieces_scatter(const struct allreduce_piece *pieces, size_t count, size_t offset,
                    const void *from, size_t bytes);

#endif
