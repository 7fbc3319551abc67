/*
 * pieces.c — finding and copying runs of a buffer made of pieces (see pieces.h).
 */
#include "pieces.h"

#include <string.h>

struct piece_run pieces_run_at(const struct allreduce_piece *pieces, size_t count, size_t offset,
                              size_t bytes)
{
    /* The last piece that starts at or before `offset`; empty pieces are skipped over. */
    size_t low = 0, high = count;
    while (high - low > 1) {
        size_t middle = low + (high - low) / 2;
        if (pieces[middle].offset <= offset)
            low = middle;
        else
            high = middle;
    }
    while (low + 1 < count && pieces[low].offset + pieces[low].bytes <= offset)
        low++;
    const struct allreduce_piece *piece = &pieces[low];
    size_t within = offset - piece->offset;
    size_t available = piece->bytes - within;
    return (struct piece_run){
        .input = (const unsigned char *)piece->input + within,
        .output = (unsigned char *)piece->output + within,
        .bytes = bytes < available ? bytes : available,
    };
}

void pieces_gather_with(const struct allreduce_piece *pieces, size_t count, size_t offset,
                        void *to, size_t bytes, copy_function copy)
{
    unsigned char *destination = to;
    while (bytes != 0) {
        struct piece_run run = pieces_run_at(pieces, count, offset, bytes);
        copy(destination, run.input, run.bytes);
        destination += run.bytes;
        offset += run.bytes;
        bytes -= run.bytes;
    }
}

void pieces_gather(const struct allreduce_piece *pieces, size_t count, size_t offset, void *to,
                   size_t bytes)
{
    pieces_gather_with(pieces, count, offset, to, bytes, streaming_copy_cached);
}

void pieces_scatter(const struct allreduce_piece *pieces, size_t count, size_t offset,
                    const void *from, size_t bytes)
{
    const unsigned char *source = from;
    while (bytes != 0) {
        struct piece_run run = pieces_run_at(pieces, count, offset, bytes);
        memcpy(run.output, source, run.bytes);
        source += run.bytes;
        offset += run.bytes;
        bytes -= run.bytes;
    }
}
