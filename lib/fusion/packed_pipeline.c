/*
 * packed_pipeline.c — see packed_pipeline.h. Order of work with a copier, segments 0..3:
 *
 *   copier:     pack 0 | pack 1 | unpack 0, pack 2 | unpack 1, pack 3 | unpack 2 | unpack 3
 *   background:        | reduce 0 | reduce 1        | reduce 2         | reduce 3 |
 *
 * The copier runs jobs in submission order, and the background thread submits "unpack k" before
 * "pack k+2", so a half is refilled only after it has been emptied. Two job slots of each kind
 * suffice: a slot is reused two segments later, after the background thread has waited for a
 * later job.
 */
#include "packed_pipeline.h"

#include "../collectives/collectives.h"

struct segment_job {
    const struct packed_batch *batch;
    void *half;
    size_t first; /* element of the batch where the segment starts */
    size_t count;
};

/* Moves a segment into the fusion buffer (packing: with the prescale factor) or out of it. A
 * compressed batch's segment is converted run by run between the float32 tensors and the
 * 16-bit values of the buffer. */
static void move_segment(const struct segment_job *job, bool packing)
{
    const struct packed_batch *batch = job->batch;
    if (!batch->compressed) {
        size_t element_size = chorus_dtype_size(batch->wire_dtype);
        size_t offset = job->first * element_size, bytes = job->count * element_size;
        if (!packing) {
            pieces_scatter(batch->pieces, batch->piece_count, offset, job->half, bytes);
            return;
        }
        pieces_gather(batch->pieces, batch->piece_count, offset, job->half, bytes);
        reduce_scale_buffer(job->half, job->count, batch->wire_dtype, batch->prescale);
        return;
    }
    uint16_t *values = job->half;
    size_t offset = job->first * sizeof(float), bytes = job->count * sizeof(float);
    while (bytes != 0) {
        struct piece_run run = pieces_run_at(batch->pieces, batch->piece_count, offset, bytes);
        size_t count = run.bytes / sizeof(float);
        if (packing)
            reduce_compress_floats(values, (const float *)run.input, count, batch->wire_dtype,
                            (float)batch->prescale);
        else
            reduce_decompress_floats((float *)run.output, values, count, batch->wire_dtype,
                              batch->decompress_factor);
        values += count;
        offset += run.bytes;
        bytes -= run.bytes;
    }
}

static void pack_segment(void *job)
{
    move_segment(job, true);
}

static void unpack_segment(void *job)
{
    move_segment(job, false);
}

/* Runs a job on the copier, or at once without one. Returns its ticket (0 without a copier). */
static uint64_t submit(struct copier *copier, void (*run)(void *), struct segment_job *job)
{
    if (copier == NULL) {
        run(job);
        return 0;
    }
    return copier_submit(copier, run, job);
}

static void wait_for(struct copier *copier, uint64_t ticket)
{
    if (copier != NULL)
        copier_wait(copier, ticket);
}

chorus_status packed_pipeline_run(const struct packed_batch *batch, struct copier *copier,
                                  void *const halves[2], size_t segment_elements,
                                  segment_reducer reduce, void *context,
                                  struct packed_times *times)
{
    /* An empty batch is still one (empty) collective, so that every rank makes the same calls. */
    size_t segments =
        batch->count == 0 ? 1 : (batch->count + segment_elements - 1) / segment_elements;
    struct segment_job packs[2], unpacks[2];
    uint64_t pack_tickets[2] = {0, 0}, last_ticket = 0;
    for (size_t k = 0; k < segments && k < 2; k++) {
        size_t first = k * segment_elements;
        size_t remaining = batch->count - (first < batch->count ? first : batch->count);
        packs[k] = (struct segment_job){batch, halves[k], first,
                                        remaining < segment_elements ? remaining
                                                                     : segment_elements};
        pack_tickets[k] = last_ticket = submit(copier, pack_segment, &packs[k]);
    }
    chorus_status status = CHORUS_OK;
    for (size_t k = 0; k < segments; k++) {
        struct segment_job *segment = &packs[k % 2];
        wait_for(copier, pack_tickets[k % 2]);
        if (k == 0)
            times->packed = clock_seconds();
        status = reduce(context, segment->half, segment->count);
        if (status != CHORUS_OK)
            break;
        unpacks[k % 2] = *segment;
        last_ticket = submit(copier, unpack_segment, &unpacks[k % 2]);
        if (k + 2 < segments) {
            size_t first = (k + 2) * segment_elements;
            size_t remaining = batch->count - first;
            *segment = (struct segment_job){batch, segment->half, first,
                                            remaining < segment_elements ? remaining
                                                                         : segment_elements};
            pack_tickets[k % 2] = last_ticket = submit(copier, pack_segment, segment);
        }
    }
    times->reduced = clock_seconds();
    wait_for(copier, last_ticket);
    return status;
}
